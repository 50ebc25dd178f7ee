"""What the embedders that call a server share (Ollama, OpenAI-compatible): batches of ``batch_size`` texts, unit
vectors of one size (``dim`` given, known, or read from the first answer), a client that is never pickled (Ray
ships the recipe), and token windows from the all-MiniLM-L6-v2 WordPiece tokenizer (the server exposes none: an
approximation of what it reads, which is why chunks stay far inside its context)."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

from tenacity import retry, retry_if_exception, stop_after_attempt, wait_exponential

from infra.embed.base import Windowed, embed_each, unit_vector
from infra.embed.minilm import load_tokenizer, spans_from_tokenizer
from infra.errors import ForageError, LLMUnavailable


class RemoteEmbedder(ABC):
    """Subclasses set ``name``, ``model``, ``batch_size``, ``max_tokens``, ``retries`` (extra attempts after a
    retryable failure) and ``retry_wait_s`` (the base of the exponential wait between them) and implement
    :meth:`_embed_batch` (one request, through :meth:`_retried`: raw vectors in order, errors as ForageError) and
    :meth:`check`."""

    name: str
    model: str
    windows_pooled = False  # a server returns no token embeddings
    batch_size: int
    max_tokens: int
    retries: int
    retry_wait_s: float

    def __init__(self, dim: int | None) -> None:
        self._dim = dim
        self._client: Any = None
        self._tokenizer: Any = None
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_client=None, _tokenizer=None, _lock=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()

    @property
    def dim(self) -> int:
        """Vector size; read from one embedding call when neither given nor known."""
        if self._dim is None:
            self._dim = len(self.embed(["dimension probe"])[0])
        return self._dim

    @abstractmethod
    def _embed_batch(self, batch: list[str]) -> list[list[float]]:
        """One request's vectors, in the order of ``batch``."""

    def _retried(self, call: Callable[[], list[list[float]]]) -> list[list[float]]:
        """``call()`` (one request), made again after a retryable ForageError, at most ``retries`` more times."""
        return retry(retry=retry_if_exception(lambda e: isinstance(e, ForageError) and e.retryable),
                     stop=stop_after_attempt(1 + self.retries),
                     wait=wait_exponential(multiplier=self.retry_wait_s, max=30), reraise=True)(call)()

    @abstractmethod
    def check(self) -> None:
        """Fail fast (LLMUnavailable, one sentence) when the server is down or lacks the model."""

    def warm(self) -> None:
        """Nothing to load here: the model lives in its server."""

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Unit-normalized vectors, one per text, in order; raises LLMUnavailable / LLMTimeout."""
        out: list[list[float]] = []
        texts = list(texts)
        for i in range(0, len(texts), self.batch_size):
            out.extend(unit_vector(v) for v in self._embed_batch(texts[i:i + self.batch_size]))
        if out:
            sizes = {len(v) for v in out}
            if len(sizes) != 1 or (self._dim is not None and sizes != {self._dim}):
                raise LLMUnavailable(f"model {self.model!r} returned vectors of size {sorted(sizes)}, "
                                     f"expected {self._dim}", retryable=False)
            self._dim = self._dim or sizes.pop()
        return out

    def embed_windowed(self, items: Sequence[Windowed]) -> list[list[float]]:
        """The server gives no token embeddings: each window is embedded as a text of its own."""
        return embed_each(self, items)

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        """Approximate token spans (BERT uncased WordPiece, see the module docstring)."""
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer()
        return spans_from_tokenizer(self._tokenizer, text)
