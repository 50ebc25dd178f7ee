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

from typing import Any

import httpx

from infra.embed.remote import RemoteEmbedder
from infra.errors import ForageError, LLMTimeout, LLMUnavailable

# Output sizes of common Ollama embedding models; others are probed on first use.
KNOWN_DIMS = {"nomic-embed-text": 768, "mxbai-embed-large": 1024, "all-minilm": 384,
              "snowflake-arctic-embed": 1024, "bge-m3": 1024}


def _base_model(model: str) -> str:
    return model.split(":")[0].split("/")[-1].lower()


class OllamaEmbedder(RemoteEmbedder):
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
        super().__init__(dim or KNOWN_DIMS.get(_base_model(model)))

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

        return self._retried(call)

    def check(self) -> None:
        """Fail fast (LLMUnavailable) when the server is down or the model is not pulled."""
        client = self._ensure_client()
        try:
            client.show(self.model)
        except Exception as exc:  # noqa: BLE001
            raise self._error(exc) from exc
