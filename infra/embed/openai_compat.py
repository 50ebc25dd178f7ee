"""Embeddings from an OpenAI-compatible server (vLLM ``--task embed``, Hugging Face TEI, llama.cpp's server with
``--embedding``, LM Studio) through the official ``openai`` client: ``POST {base_url}/embeddings``.

As for the chat backend, the base URL and the key are always passed explicitly (``embed.base_url``,
``embed.api_key``): ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` are never read, so no text goes to a cloud service
by accident. Transient failures (429, 5xx, dropped connections, timeouts) are retried with exponential backoff
(tenacity), then raised as :class:`LLMUnavailable` / :class:`LLMTimeout` with one sentence.

Token windows: the server exposes no tokenizer, so :meth:`OpenAICompatEmbedder.token_spans` uses the
all-MiniLM-L6-v2 WordPiece tokenizer (as :class:`~infra.embed.ollama.OllamaEmbedder` does), an approximation of
what the server reads; chunks follow ``settings.chunk_window()`` (512/64 tokens), well inside such models' context.
The vector size is ``embed.dim`` when set, else known for common models, else read from the first answer.
"""

from __future__ import annotations

from typing import Any


from infra.embed.remote import RemoteEmbedder
from infra.errors import ForageError, LLMTimeout, LLMUnavailable

KNOWN_DIMS = {"nomic-embed-text": 768, "nomic-embed-text-v1.5": 768, "bge-m3": 1024, "bge-large-en-v1.5": 1024,
              "bge-base-en-v1.5": 768, "bge-small-en-v1.5": 384, "all-minilm-l6-v2": 384, "e5-large-v2": 1024,
              "mxbai-embed-large-v1": 1024, "gte-large": 1024}
NO_KEY = "none"


def known_dim(model: str) -> int | None:
    """The vector size of a common embedding model, by its name without organisation or tag."""
    return KNOWN_DIMS.get(model.split(":")[0].split("/")[-1].lower())


class OpenAICompatEmbedder(RemoteEmbedder):
    """Unit-normalized vectors from ``model`` on the OpenAI-compatible server at ``host`` (its base URL, with
    ``/v1``), ``batch_size`` texts per request."""

    def __init__(self, host: str = "http://127.0.0.1:8000/v1", model: str = "BAAI/bge-m3", *,
                 api_key: str | None = None, batch_size: int = 64, timeout_s: float = 120.0, dim: int | None = None,
                 max_tokens: int = 2048, retries: int = 2, retry_wait_s: float = 1.0) -> None:
        self.host = host.rstrip("/")
        self.model = model
        self.name = f"openai:{model}"
        self.api_key = api_key
        self.batch_size = batch_size
        self.timeout_s = timeout_s
        self.max_tokens = max_tokens
        self.retries = retries
        self.retry_wait_s = retry_wait_s
        super().__init__(dim or known_dim(model))

    def __repr__(self) -> str:  # never the key
        return f"OpenAICompatEmbedder(host={self.host!r}, model={self.model!r})"

    def _ensure_client(self) -> Any:
        with self._lock:
            if self._client is None:
                import openai

                self._client = openai.OpenAI(base_url=self.host, api_key=self.api_key or NO_KEY,
                                             timeout=self.timeout_s, max_retries=0)
            return self._client

    def _error(self, exc: Exception) -> ForageError:
        """A ForageError that says what went wrong and how to fix it."""
        import openai

        if isinstance(exc, ForageError):
            return exc
        if isinstance(exc, openai.APITimeoutError):
            return LLMTimeout(f"The embedding server at {self.host} did not answer within {self.timeout_s:g}s")
        if isinstance(exc, openai.APIConnectionError):
            return LLMUnavailable(f"No OpenAI-compatible embedding server answers at {self.host}: start it or set "
                                  "embed.base_url (or use embed.backend='minilm')", retryable=True)
        if isinstance(exc, openai.AuthenticationError):
            return LLMUnavailable(f"The embedding server at {self.host} refused the API key: set embed.api_key "
                                  "(FORAGE_EMBED__API_KEY)")
        if isinstance(exc, openai.NotFoundError):
            return LLMUnavailable(f"The embedding server at {self.host} has no model {self.model!r}: set embed.model "
                                  "to the id its GET /v1/models lists")
        if isinstance(exc, openai.APIStatusError):
            transient = exc.status_code in (408, 409, 429) or exc.status_code >= 500
            return LLMUnavailable(f"The embedding server at {self.host} refused the request (HTTP {exc.status_code})",
                                  retryable=transient)
        return LLMUnavailable(f"The embedding call to {self.host} failed: {type(exc).__name__}: {exc}")

    def _embed_batch(self, batch: list[str]) -> list[list[float]]:
        client = self._ensure_client()

        def call() -> list[list[float]]:
            try:
                response = client.embeddings.create(model=self.model, input=batch)
            except Exception as exc:  # noqa: BLE001 - mapped to a ForageError that says what to do
                raise self._error(exc) from exc
            data = sorted(response.data, key=lambda d: d.index)
            if len(data) != len(batch):
                raise LLMUnavailable(f"The embedding server returned {len(data)} vectors for {len(batch)} texts "
                                     f"(model {self.model!r})")
            return [list(map(float, d.embedding)) for d in data]

        return self._retried(call)

    def check(self) -> None:
        """Fail fast (LLMUnavailable, one sentence) when the server is down or does not serve the model."""
        client = self._ensure_client()
        try:
            served = {m.id for m in client.models.list().data}
        except Exception as exc:  # noqa: BLE001
            raise self._error(exc) from exc
        if self.model not in served:
            raise LLMUnavailable(f"The embedding server at {self.host} serves no model {self.model!r} (it serves: "
                                 f"{', '.join(sorted(served)[:8]) or 'none'}): set embed.model to one of them")
