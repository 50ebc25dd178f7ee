"""The state of a research run: everything ``runs/<run_id>/run.json`` holds, as one typed model.

One owner writes it (the run's Orchestrator, through ``actors.steps.run.record.RunRecord``: checkpoints, the
resume point, the stop rule, the status); every other reader (``forage runs``, resume, the gateway, verify,
export, forget, the judge) loads it with :meth:`RunState.load` instead of reading the JSON by hand.

Unlike the messages between actors, a RunState changes while the run goes on, so it is not frozen. Fields
another version of Forage wrote and this one does not know are kept as they were (``extra="allow"``): loading
and saving a run.json loses nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from messages.base import Frozen
from messages.forage import RequirementCoverage
from messages.plan import Requirement, SearchQuery
from messages.search import Candidate, Skipped
from messages.write import SourceRef

RunStatus = Literal["planning", "awaiting_approval", "running", "finished", "failed", "cancelled"]
STATUSES: tuple[str, ...] = RunStatus.__args__  # type: ignore[attr-defined]


class _Record(BaseModel):
    model_config = ConfigDict(extra="allow", validate_assignment=True)


class DocumentEntry(_Record):
    """One document the run offered for ingestion, and what became of it (an IngestResult, without run_id)."""

    key: str | None = None
    path: str | None = None
    status: Literal["stored", "skipped", "failed"]
    doc_id: str | None = None
    title: str | None = None
    n_chunks: int = 0
    parser: str | None = None
    flags: list[str] = []
    reason: str | None = None
    retryable: bool = False
    seconds: float = 0.0

    @property
    def in_store(self) -> bool:
        """Stored by this run or already in the store (skipped), with a document id."""
        return self.status in ("stored", "skipped") and bool(self.doc_id)


class IterationRecord(_Record):
    """One finished iteration: its coverage per requirement and how it was earned."""

    iteration: int = Field(ge=1)
    mean_coverage: float
    new_documents: int = 0
    coverage: dict[str, float] = {}
    status: dict[str, str] = {}
    llm_calls: dict[str, int] = {}
    answering_papers: dict[str, int] = {}
    overruled: dict[str, int] = Field(default={}, description="Judge's answers the relevance check overruled.")
    unconfirmed: dict[str, int] = Field(default={}, description="Judge's answers retrieval signals did not confirm "
                                                                "(shown as evidence, not counted for coverage).")
    errors: dict[str, str | None] = {}
    new_passages: dict[str, int] = Field(default={}, description="Passages the iteration brought each requirement "
                                                                 "(at or above the topic floor).")
    settled: dict[str, str] = Field(default={}, description="Why each requirement is settled after the iteration "
                                                            "('' while it is not).")


class Searched(_Record):
    """A search's results, recorded before their ingestion (a resume takes them over instead of searching)."""

    iteration: int
    exhausted: bool = False
    candidates: list[Candidate] = []


class Ingested(_Record):
    """The iteration whose documents are all ingested (a resume only forages it)."""

    iteration: int
    new_documents: int = 0
    exhausted: bool = False


class Foraging(_Record):
    """The requirements of an unfinished iteration whose Foragers already reported (a resume keeps them)."""

    iteration: int
    done: dict[str, RequirementCoverage] = {}


class Replan(_Record):
    after_iteration: int
    mean_coverage: float
    previous_mean_coverage: float
    missing: list[str] = []
    added: list[Requirement] = []
    dropped: Any = None
    degraded: list[str] = []
    rejected: list[str] = Field(default=[], description="Why proposals were not added, one line per reason.")


class Resumed(_Record):
    after_iteration: int
    status_was: str | None = None


class FromRun(_Record):
    """The earlier run a follow-up continues."""

    run_id: str
    documents: int = 0
    seed_chunk_ids: list[str] = []


class FollowUp(Frozen):
    """An earlier run a new run follows up, read once from its run.json (actors/steps/run/record.py
    :func:`follow_up_of`): where its documents are (store, embedder, library: the new run's settings take them), which
    of them are in the store, and the chunks of its evidence the new run judges first."""

    earlier_run: str = Field(min_length=1)
    store_path: str | None = None
    embedder: str | None = None
    library: str | None = None
    documents: dict[str, DocumentEntry] = Field(
        description="Its documents in the store, by candidate key, marked as already in the store from that run.")
    seed_chunk_ids: tuple[str, ...] = ()


class RecordedSettings(_Record):
    preset: str | None = None
    min_coverage: float | None = None
    max_iterations: int | None = None
    llm: str | None = None
    embedder: str | None = None
    store: str | None = None
    resolved: dict[str, Any] | None = Field(
        default=None, description="Every resolved setting but secrets and the Ray address (Settings.record()).")


class RunState(_Record):
    run_id: str
    status: RunStatus
    query: str | None = None
    # proposed at planning, before approval
    proposed_requirements: list[Requirement] = []
    proposed_search_queries: list[SearchQuery] = []
    degraded: list[str] = Field(default=[], description="Steps that fell back (a model's bad output, a source).")
    # approved and running
    requirements: list[Requirement] = []
    search_queries: list[SearchQuery] = []
    settings: RecordedSettings | None = None
    store_path: str | None = None
    library: str | None = None
    iterations: list[IterationRecord] = []
    documents: dict[str, DocumentEntry] = {}
    search_skipped: list[Skipped] = []
    acquisition: dict[str, dict[str, Any]] = Field(
        default={}, description="Where each online paper came from and how it was acquired.")
    last_coverages: list[RequirementCoverage] = []
    searched: Searched | None = None
    ingested: Ingested | None = None
    foraging: Foraging | None = None
    replans: list[Replan] = []
    resumed: list[Resumed] = []
    from_run: FromRun | None = None
    # the end
    stop_reason: str | None = None
    settled: dict[str, str] = Field(default={}, description="Why each requirement settled (answered, nothing new, "
                                                            "foraging failed) or that it had not when the run stopped.")
    error: str | None = None
    final_coverage: float | None = None
    coverage: dict[str, float] = {}
    failed_requirements: dict[str, str | None] = {}
    sources: list[SourceRef] = []
    removed_citations: int = 0
    report: str | None = None
    seconds: float | None = None

    # -- reading and writing -----------------------------------------------------------------------------
    @classmethod
    def load(cls, path: Path) -> RunState | None:
        """The run.json at ``path``; None when there is none. ValueError (with the reason) when it is not a
        run's state (not JSON, not an object, a field of the wrong kind)."""
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        return cls.from_json(text)

    @classmethod
    def from_json(cls, text: str) -> RunState:
        data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        return cls.model_validate(data)

    def to_json(self) -> str:
        """run.json's text (a top-level field that is None is left out: a stage not reached, a record cleared)."""
        data = {k: v for k, v in self.model_dump(mode="json").items() if v is not None}
        return json.dumps(data, indent=2, ensure_ascii=False) + "\n"

    # -- what readers ask --------------------------------------------------------------------------------
    @property
    def approved(self) -> bool:
        return bool(self.requirements)

    def stored_doc_ids(self) -> list[str]:
        """The run's documents in the store (stored or already known), in order, each once."""
        return list(dict.fromkeys(d.doc_id for d in self.documents.values() if d.in_store and d.doc_id))

    def coverage_history(self) -> list[dict[str, float]]:
        return [it.coverage for it in self.iterations]
