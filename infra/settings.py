"""One Settings object for Forage, built once and passed down.

Nested sections with described fields; environment variables use the ``FORAGE_`` prefix and
``__`` between levels (``FORAGE_LLM__BACKEND=ollama``). Presets by name (quick / standard / deep)
change how hard Forage looks; explicit values always win over a preset.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ModelWrapValidatorHandler, PrivateAttr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from infra import judges
from infra.calibrated import (ANSWER_CURVE, CONFIRMATION, COVERAGE_PRIOR, PACKAGED_JUDGE, SIMILARITY,
                              STORE_CONFIRMATION, STORE_SIMILARITY, UNCALIBRATED_JUDGE)
from infra.settings_sections import (EmbedSettings, ForageSettings, IngestSettings, LLMSettings, NetSettings, RayOptions,
                                     RunSettings, SearchSettings, StoreSettings, WriteSettings, ZoteroSettings)

PresetName = Literal["quick", "standard", "deep"]


_PRESETS: dict[str, dict[str, Any]] = {
    "quick": {"run": {"max_iterations": 2}, "forage": {"bm25_k": 2, "vector_k": 2, "max_deep_dives": 1}},
    "standard": {},
    "deep": {"run": {"max_iterations": 6, "min_coverage": 0.9},
             "forage": {"bm25_k": 5, "vector_k": 5, "max_deep_dives": 4}},
}


class Settings(BaseSettings):
    """Everything Forage can be told. Build once (``Settings.load``) and pass it down."""

    model_config = SettingsConfigDict(env_prefix="FORAGE_", env_nested_delimiter="__", extra="forbid", frozen=True)

    preset: PresetName = Field(default="standard", description="quick / standard / deep.")
    run: RunSettings = RunSettings()
    llm: LLMSettings = LLMSettings()
    embed: EmbedSettings = EmbedSettings()
    store: StoreSettings = StoreSettings()
    ingest: IngestSettings = IngestSettings()
    search: SearchSettings = SearchSettings()
    forage: ForageSettings = ForageSettings()
    net: NetSettings = NetSettings()
    zotero: ZoteroSettings = ZoteroSettings()
    ray: RayOptions = RayOptions()
    write: WriteSettings = WriteSettings()

    # What was given explicitly (environment, overrides, a recorded run), before the preset filled in the
    # rest: `updated` rebuilds from it, so a changed preset applies under every explicit value.
    _explicit: dict[str, Any] = PrivateAttr(default_factory=dict)

    @model_validator(mode="wrap")
    @classmethod
    def _apply_preset(cls, data: Any, handler: ModelWrapValidatorHandler[Settings]) -> Settings:
        if not isinstance(data, dict):
            return handler(data)
        explicit = _plain(data)
        preset = explicit.get("preset", "standard")
        base = _PRESETS.get(preset)
        if base is None:
            raise ValueError(f"unknown preset {preset!r}; choose one of {sorted(_PRESETS)}")
        built = handler(_merged(base, explicit))
        built._explicit = explicit
        return built

    @classmethod
    def load(cls, preset: PresetName | None = None, **overrides: Any) -> Settings:
        """Build Settings from env + overrides (nested dicts per section)."""
        data: dict[str, Any] = dict(overrides)
        if preset is not None:
            data["preset"] = preset
        return cls(**data)

    def updated(self, **sections: Any) -> Settings:
        """A copy with some section fields replaced, e.g. ``s.updated(run={"max_iterations": 2})``.

        ``preset=NAME`` switches the preset: its values apply wherever nothing was set explicitly (by the
        environment, by ``load``'s overrides or by an earlier ``updated``)."""
        return type(self).model_validate(_merged(self._explicit, _plain(sections)))

    def record(self) -> dict[str, Any]:
        """Every resolved value a run was made with, for its run.json: secrets (API keys) and where the run
        ran (``ray``) left out. ``settings_for_run(base, recorded=...)`` turns it back into Settings."""
        return self.model_dump(mode="json", exclude=_NOT_RECORDED)

    def explicit(self) -> dict[str, Any]:
        """The values given explicitly (a copy), sections as nested dicts."""
        return _merged({}, self._explicit)

    def relevance_signal(self, store_keeps_windows: bool) -> Literal["store", "text"]:
        """Which similarity the relevance check reads (forage.relevance_signal): 'auto' is the store's score where
        it is calibrated — this embedder has store floors and the store keeps sentence windows — else the text's."""
        if self.forage.relevance_signal != "auto":
            return self.forage.relevance_signal
        calibrated = self.embed.backend in STORE_SIMILARITY and self.embed.window_sentences > 0
        return "store" if calibrated and store_keeps_windows else "text"

    def similarity_floors(self, signal: Literal["store", "text"] = "text") -> tuple[float, float]:
        """(answer_similarity, topic_similarity) of the relevance check for ``signal``, following the embedder
        unless set (an embedder without store floors uses its text floors for both)."""
        table = STORE_SIMILARITY if signal == "store" else SIMILARITY
        answer, topic = table.get(self.embed.backend, SIMILARITY[self.embed.backend])
        return (answer if self.forage.answer_similarity is None else self.forage.answer_similarity,
                topic if self.forage.topic_similarity is None else self.forage.topic_similarity)

    def answer_confirmation(self, signal: Literal["store", "text"] = "text") -> float | None:
        """The confirmation floor of an 'answers' for ``signal`` (forage.answer_confirmation, following the embedder
        unless set); None: no confirmation (an embedder not calibrated for that signal, or 0)."""
        value = self.forage.answer_confirmation
        if value is None:
            value = (STORE_CONFIRMATION if signal == "store" else CONFIRMATION).get(self.embed.backend)
        return value or None

    def judge_key(self) -> str:
        """The key the configured model's calibrated rates are kept under (infra/judges.py)."""
        return judges.judge_key(self.llm.backend, self.llm.model, self.llm.gguf_path)

    def judge_calibration(self) -> dict[str, Any] | None:
        """What `forage calibrate` measured for the configured model (infra/judges.py), else, for the packaged
        embedded model, what was measured of it before it shipped; None: not calibrated."""
        kept = judges.calibrated_rates(self.judge_key())
        if kept is None and self.llm.backend == "embedded" and self.llm.gguf_path is None:
            return dict(PACKAGED_JUDGE)
        return kept

    def judge_rates(self) -> tuple[float, float]:
        """(true positive, false positive) rate of the judge's 'answers' (forage.judge_tpr / judge_fpr, else the
        rates `forage calibrate` kept for the configured model or those measured of the packaged embedded model,
        else an uncalibrated model's)."""
        default = UNCALIBRATED_JUDGE
        if self.forage.judge_tpr is None or self.forage.judge_fpr is None:
            kept = self.judge_calibration()
            if kept is not None:
                default = (float(kept["tpr"]), float(kept["fpr"]))
        return (default[0] if self.forage.judge_tpr is None else self.forage.judge_tpr,
                default[1] if self.forage.judge_fpr is None else self.forage.judge_fpr)

    def judge_summary(self) -> str:
        """One line on the judge a run trusts and why (the report's Scope): its key, where its rates come from
        (set in the settings, kept by `forage calibrate` with date and labelled set, or not calibrated) and the
        rates the check weighs its 'answers' by (:meth:`judge_rates`)."""
        if self.forage.judge_tpr is not None or self.forage.judge_fpr is not None:
            how = "rates set by forage.judge_tpr / judge_fpr"
            tpr, fpr = self.judge_rates()
        elif (kept := self.judge_calibration()) is not None:  # the rates judge_rates() would read: read once
            how = (f"calibrated {kept.get('calibrated', 'on an unknown date')} on "
                   f"{kept.get('labelled_set', 'a labelled set')}")
            tpr, fpr = float(kept["tpr"]), float(kept["fpr"])
        else:  # no rates to state: the check trusts none of its 'answers' on their own
            return (f"{self.judge_key()}, not calibrated (forage calibrate measures it): its 'answers' count only "
                    "where the retrieval signals confirm them")
        said = f"{self.judge_key()}, {how}: TPR {tpr:.2f}, FPR {fpr:.2f}"
        if tpr <= fpr:  # its 'answers' tells an answer from another passage no better than chance
            said += ("; it calls other passages answers as often as answering ones, so its 'answers' count only "
                     "where the retrieval signals confirm them")
        return said

    def answer_curve(self, signal: Literal["store", "text"] = "text") -> tuple[float, float, float] | None:
        """(intercept, slope, penalty) of the signal's calibration curve for this embedder (None: not calibrated)."""
        return ANSWER_CURVE.get((signal, self.embed.backend))

    def coverage_prior(self, signal: Literal["store", "text"] = "text") -> tuple[float, float, float] | None:
        """(intercept, weight of the log summed odds, weight of the best score) of the coverage prior for this
        embedder (None: not calibrated; coverage is then the ledger's ladder)."""
        return COVERAGE_PRIOR.get((signal, self.embed.backend))

    def online(self) -> bool:
        """Whether a run may ask online databases at all (the researcher's approved strings are still needed)."""
        return not self.net.offline and bool(self.search.sources)

    def extractive(self) -> bool:
        """Whether reports and answers quote their evidence instead of asking the LLM to write (write.extractive;
        None: when the LLM is the embedded model)."""
        return self.llm.backend == "embedded" if self.write.extractive is None else self.write.extractive

    def chunk_window(self) -> tuple[int, int]:
        """(tokens, overlap) for chunks, following the embedder unless set explicitly."""
        default = (256, 32) if self.embed.backend == "minilm" else (512, 64)
        return (self.embed.chunk_tokens or default[0], self.embed.chunk_overlap or default[1])


_NOT_RECORDED: dict[str, Any] = {"store": {"weaviate_api_key"}, "search": {"openalex_api_key"},
                                 "zotero": {"api_key"}, "llm": {"api_key"}, "embed": {"api_key"},
                                 "ray": True}


#: the embedded model's window and answer budget (SmolLM2-135M): the general defaults (8192 / 1024, for 7B models
#: behind a server) let it ramble; a repair attempt may take up to half the window, which took one report section
#: 14 minutes on a busy 2-core machine. Applied where the run's own settings do not say otherwise.
EMBEDDED_WINDOW: dict[str, int] = {"n_ctx": 4096, "max_tokens": 512}


def settings_for_run(base: Settings, *, recorded: dict[str, Any] | None = None, preset: PresetName | None = None,
                     library: Path | None = None, offline: bool | None = None, llm_backend: str | None = None,
                     model: str | None = None, embedder: str | None = None, mailto: str | None = None,
                     zotero_push: bool | None = None, address: str | None = None, runs_dir: Path | None = None,
                     store: Path | None = None, max_iterations: int | None = None, min_coverage: float | None = None,
                     max_requirements: int | None = None) -> Settings:
    """The Settings of one run: ``base`` (environment and defaults), then what an earlier run recorded
    (``recorded``: its run.json ``Settings.record()``, for a resume), then the preset, then the run's own
    inputs. The one builder the CLI, the gateway and resume use; a preset always applies under every
    explicit value. ``None`` leaves a value as it is."""
    changes: dict[str, Any] = {}
    if recorded:
        changes.update({k: v for k, v in recorded.items() if k in Settings.model_fields and k != "ray"})
    if preset is not None:
        changes["preset"] = preset

    def put(section: str, key: str, value: Any) -> None:
        if value is not None:
            changes[section] = {**changes.get(section, {}), key: value}

    put("search", "library", library.expanduser().resolve() if library is not None else None)
    put("search", "mailto", mailto or None)
    put("net", "offline", offline)
    put("zotero", "push", zotero_push)
    put("llm", "backend", llm_backend or None)
    put("llm", "model", model or None)
    put("embed", "backend", embedder)
    put("ray", "address", address or None)
    put("run", "runs_dir", runs_dir)
    put("run", "max_iterations", max_iterations)
    put("run", "min_coverage", min_coverage)
    put("run", "max_requirements", max_requirements)
    put("store", "path", store)
    settings = base.updated(**changes) if changes else base
    if settings.llm.backend == "embedded":
        given = settings.explicit().get("llm", {})
        window = {k: v for k, v in EMBEDDED_WINDOW.items() if k not in given}
        if window:
            settings = settings.updated(llm=window)
    return settings


def _plain(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with section models turned into dicts of the fields they were given."""
    return {k: v.model_dump(exclude_unset=True) if isinstance(v, BaseModel) else v for k, v in data.items()}


def _merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``over`` on top, one level of sections deep (neither is changed)."""
    merged: dict[str, Any] = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = dict(value) if isinstance(value, dict) else value
    return merged
