"""What a library records about its vectors: the embedding model and its dimension.

Vectors from two embedders are not comparable (even at the same size), so a library accepts
vectors from one model only. Each store records a :class:`LibraryMeta` when it is first written
(LanceDB: ``library.json`` in the store folder; Weaviate: the chunk collection's description) and
refuses to open for another model or size with :class:`StoreError` (not retryable).
"""

from __future__ import annotations

import json

from pydantic import BaseModel, ConfigDict, Field

from infra.errors import StoreError


class LibraryMeta(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    embed_model: str | None = Field(default=None, description="'minilm:all-MiniLM-L6-v2', 'ollama:nomic-embed-text'.")
    dim: int = Field(gt=0, description="Vector size.")

    def dumps(self) -> str:
        return json.dumps({"forage_library": 1, **self.model_dump()}, sort_keys=True)

    @classmethod
    def loads(cls, text: str | None) -> LibraryMeta | None:
        """The meta recorded in ``text``; None when ``text`` is not one (empty, foreign JSON)."""
        try:
            data = json.loads(text or "")
        except ValueError:
            return None
        if not isinstance(data, dict) or "forage_library" not in data:
            return None
        return cls.model_validate(data)


def check_meta(recorded: LibraryMeta, embed_model: str | None, dim: int, where: str) -> None:
    """Refuse to use a library built with another embedding model or vector size."""
    if recorded.dim != dim:
        raise StoreError(
            f"the library at {where} holds {recorded.dim}-dimensional vectors"
            f"{f' from {recorded.embed_model}' if recorded.embed_model else ''} but this store was opened "
            f"for {dim}; use the embedder it was built with or another library", retryable=False)
    if embed_model and recorded.embed_model and recorded.embed_model != embed_model:
        raise StoreError(
            f"the library at {where} was embedded with {recorded.embed_model}, not {embed_model}: vectors of "
            f"two models cannot be searched together; set embed to {recorded.embed_model} or use another "
            f"library (or re-ingest into a new one)", retryable=False)
