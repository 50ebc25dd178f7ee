"""Chunk and document stores. ``build_store(settings)`` picks the backend named in ``settings.store``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from infra.errors import ConfigError
from infra.store.base import ChunkFilter, ChunkRecord, DocumentRecord, Hit, SectionKind, Store

if TYPE_CHECKING:
    from infra.settings import Settings

__all__ = ["ChunkFilter", "ChunkRecord", "DocumentRecord", "Hit", "SectionKind", "Store", "build_store",
           "embedding_dim", "embedding_name"]

# Output sizes of the embedders Forage knows; any other model needs an explicit ``dim``.
_KNOWN_DIMS = {"all-minilm-l6-v2": 384, "nomic-embed-text": 768}


def embedding_dim(settings: Settings) -> int:
    """Vector size of the embedder configured in ``settings.embed``."""
    if settings.embed.backend == "minilm":
        return _KNOWN_DIMS["all-minilm-l6-v2"]
    if settings.embed.backend == "openai":
        from infra.embed.openai_compat import known_dim

        dim = settings.embed.dim or known_dim(settings.embed.model)
        if dim is None:
            raise ConfigError(f"unknown vector size for embedding model {settings.embed.model!r}: set embed.dim "
                              "(FORAGE_EMBED__DIM)")
        return dim
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

        cfg = settings.store
        return LanceStore(cfg.path, dim=dim or embedding_dim(settings), embed_model=embedding_name(settings),
                          vector_index_rows=cfg.vector_index_rows, vector_index_type=cfg.vector_index_type,
                          ann_nprobes=cfg.ann_nprobes, ann_refine=cfg.ann_refine,
                          ann_ef=cfg.ann_ef, fusion=cfg.hybrid_fusion)
    if backend == "weaviate":
        from infra.store.weaviate import WeaviateStore

        cfg = settings.store
        return WeaviateStore(cfg.weaviate_host, library=cfg.weaviate_library, dim=dim or embedding_dim(settings),
                             http_port=cfg.weaviate_http_port, grpc_port=cfg.weaviate_grpc_port,
                             secure=cfg.weaviate_secure, api_key=cfg.weaviate_api_key,
                             embed_model=embedding_name(settings), timeout_s=cfg.weaviate_timeout_s,
                             fusion=cfg.hybrid_fusion, hybrid=cfg.weaviate_hybrid,
                             hnsw={"max_connections": cfg.weaviate_hnsw_max_connections,
                                   "ef_construction": cfg.weaviate_hnsw_ef_construction,
                                   "ef": cfg.weaviate_hnsw_ef})
    raise ConfigError(f"unknown store backend {backend!r}; available: 'lancedb', 'weaviate'")


def embedding_name(settings: Settings) -> str:
    """The embedding model a library records: 'minilm:all-minilm-l6-v2', 'openai:<model>' or 'ollama:<model>' (tag
    ':latest' dropped, so 'nomic-embed-text' and 'nomic-embed-text:latest' are the same model)."""
    if settings.embed.backend == "minilm":
        return "minilm:all-minilm-l6-v2"
    if settings.embed.backend == "openai":
        return f"openai:{settings.embed.model.lower()}"
    model = settings.embed.model.lower().removesuffix(":latest")
    return f"ollama:{model}"
