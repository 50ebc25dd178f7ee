"""Chunk and document stores. ``build_store(settings)`` picks the backend named in ``settings.store``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from infra.errors import ConfigError
from infra.store.base import ChunkFilter, ChunkRecord, DocumentRecord, Hit, SectionKind, Store

if TYPE_CHECKING:
    from infra.settings import Settings

__all__ = ["ChunkFilter", "ChunkRecord", "DocumentRecord", "Hit", "SectionKind", "Store", "build_store",
           "embedding_dim"]

# Output sizes of the embedders Forage knows; any other model needs an explicit ``dim``.
_KNOWN_DIMS = {"all-minilm-l6-v2": 384, "nomic-embed-text": 768}


def embedding_dim(settings: Settings) -> int:
    """Vector size of the embedder configured in ``settings.embed``."""
    if settings.embed.backend == "minilm":
        return _KNOWN_DIMS["all-minilm-l6-v2"]
    model = settings.embed.model.split(":")[0].lower()
    if model in _KNOWN_DIMS:
        return _KNOWN_DIMS[model]
    raise ConfigError(f"unknown vector size for embedding model {settings.embed.model!r}; "
                      f"pass dim= to build_store (known: {sorted(_KNOWN_DIMS)})")


def build_store(settings: Settings, dim: int | None = None) -> Store:
    """The store named by ``settings.store.backend`` at ``settings.store.path``.

    ``dim`` defaults to the configured embedder's vector size; a store folder built for another
    size refuses to open its chunk table (StoreError) rather than mixing vectors.
    """
    backend = settings.store.backend
    if backend == "lancedb":
        from infra.store.lancedb import LanceStore

        return LanceStore(settings.store.path, dim=dim or embedding_dim(settings))
    raise ConfigError(f"unknown store backend {backend!r}; available: 'lancedb'")
