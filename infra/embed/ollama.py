"""Embeddings from an Ollama server (default ``nomic-embed-text``) through the ``ollama`` client's ``embed`` API.

Token windows: Ollama exposes no tokenizer, so :meth:`OllamaEmbedder.token_spans` uses the
all-MiniLM-L6-v2 ``tokenizer.json`` (BERT-base uncased WordPiece, 30,522 entries), the same
vocabulary family nomic-embed-text uses. Counts are therefore an approximation of what the server
sees (exact for nomic-embed-text v1/v1.5, which use the bert-base-uncased vocabulary; other models
may differ), which is why chunks stay far below the context the server is asked to use.

``max_tokens`` (default 2048) is the context passed to the server as ``num_ctx`` with
``truncate=True``, so what the model reads is fixed by us rather than by the model file.
Chunks are cut to ``settings.chunk_window()`` (512/64 for Ollama), well inside it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import httpx
from tenacity import retry, retry_if_exception, stop_after_attempt, wait_exponential

from infra.embed.base import unit_vector
from infra.embed.minilm import load_tokenizer, spans_from_tokenizer
from infra.errors import ForageError, LLMTimeout, LLMUnavailable

# Output sizes of common Ollama embedding models; others are probed on first use.
KNOWN_DIMS = {"nomic-embed-text": 768, "mxbai-embed-large": 1024, "all-minilm": 384,
              "snowflake-arctic-embed": 1024, "bge-m3": 1024}


def _base_model(model: str) -> str:
    return model.split(":")[0].split("/")[-1].lower()


class OllamaEmbedder:
    """Unit-normalized vectors from ``model`` on the Ollama server at ``host``, ``batch_size`` texts per call."""

    def __init__(self, host: str = "http://127.0.0.1:11434", model: str = "nomic-embed-text",
                 batch_size: int = 64, timeout_s: float = 120.0, *, max_tokens: int = 2048,
                 dim: int | None = None, retries: int = 2, retry_wait_s: float = 1.0) -> None:
        """``retries``: extra attempts after a transient failure (unreachable, timeout, 5xx);
        ``retry_wait_s``: base of the exponential wait between them."""
        self.host = host
        self.model = model
        self.name = f"ollama:{model}"
        self.batch_size = batch_size
        self.timeout_s = timeout_s
        self.max_tokens = max_tokens
        self.retries = retries
        self.retry_wait_s = retry_wait_s
        self._dim = dim or KNOWN_DIMS.get(_base_model(model))
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
        """Vector size; for a model not in KNOWN_DIMS it is read from one embedding call."""
        if self._dim is None:
            self._dim = len(self.embed(["dimension probe"])[0])
        return self._dim

    def _ensure_client(self) -> Any:
        with self._lock:
            if self._client is None:
                import ollama

                self._client = ollama.Client(host=self.host, timeout=self.timeout_s)
            return self._client

    def _error(self, exc: Exception) -> ForageError:
        """A ForageError that says what went wrong and how to fix it."""
        import ollama

        pull = f"run `ollama pull {self.model}`"
        if isinstance(exc, ForageError):
            return exc
        if isinstance(exc, ConnectionError | httpx.TransportError) and not isinstance(exc, httpx.TimeoutException):
            return LLMUnavailable(f"Ollama is not reachable at {self.host} ({exc}); start it with `ollama serve` "
                                  f"and {pull}, or use embed.backend='minilm'", retryable=True)
        if isinstance(exc, httpx.TimeoutException):
            return LLMTimeout(f"Ollama did not answer an embed call within {self.timeout_s:g}s at {self.host}")
        if isinstance(exc, ollama.ResponseError):
            message = str(exc.error)
            if exc.status_code == 404 or "not found" in message.lower():
                return LLMUnavailable(f"embedding model {self.model!r} is not available on {self.host}: {pull} "
                                      f"({message})", retryable=False)
            return LLMUnavailable(f"Ollama refused the embed call ({exc.status_code}): {message}",
                                  retryable=exc.status_code >= 500 or exc.status_code == 429)
        return LLMUnavailable(f"Ollama embed call failed: {type(exc).__name__}: {exc}", retryable=False)

    def _embed_batch(self, batch: list[str]) -> list[list[float]]:
        client = self._ensure_client()

        @retry(retry=retry_if_exception(lambda e: isinstance(e, ForageError) and e.retryable),
               stop=stop_after_attempt(1 + self.retries),
               wait=wait_exponential(multiplier=self.retry_wait_s, max=30), reraise=True)
        def call() -> list[list[float]]:
            try:
                response = client.embed(model=self.model, input=batch, truncate=True,
                                        options={"num_ctx": self.max_tokens})
            except Exception as exc:  # noqa: BLE001 - mapped to a ForageError that says what to do
                raise self._error(exc) from exc
            vectors = [list(map(float, v)) for v in response.embeddings]
            if len(vectors) != len(batch):
                raise LLMUnavailable(f"Ollama returned {len(vectors)} embeddings for {len(batch)} texts "
                                     f"(model {self.model!r})", retryable=False)
            return vectors

        return call()

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

    def check(self) -> None:
        """Fail fast (LLMUnavailable) when the server is down or the model is not pulled."""
        client = self._ensure_client()
        try:
            client.show(self.model)
        except Exception as exc:  # noqa: BLE001
            raise self._error(exc) from exc

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        """Approximate token spans (BERT uncased WordPiece, see the module docstring)."""
        if self._tokenizer is None:
            self._tokenizer = load_tokenizer()
        return spans_from_tokenizer(self._tokenizer, text)
