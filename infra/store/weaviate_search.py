"""Searches of a Weaviate library (mixed into :class:`~infra.store.weaviate.WeaviateStore`): BM25 over the stemmed
search text, cosine vector search, the similarity of listed chunks, and hybrid search fused by Forage
(:func:`infra.store.fusion.fuse`) or by Weaviate itself."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import numpy as np
from weaviate.classes.query import Filter, HybridFusion, MetadataQuery
from weaviate.collections import Collection

from infra.store.base import ChunkFilter, Hit
from infra.store.fusion import Fusion, fuse
from infra.store.weaviate_schema import MAX_RESULTS, build_filter, default_vector, matches, stem_text, to_chunk

T = TypeVar("T")


class WeaviateSearch:
    """The searches of :class:`~infra.store.weaviate.WeaviateStore` (see the module docstring)."""

    fusion: Fusion
    hybrid_mode: Literal["forage", "weaviate"]
    hybrid_candidates: int

    if TYPE_CHECKING:  # the rest of WeaviateStore (and Store) provides these; declared for the type checker only, so
        # that nothing here shadows them at run time
        def _chunks(self) -> Collection[Any, Any] | None: ...

        def _run(self, what: str, fn: Callable[[], T]) -> T: ...

        def _resolve(self, flt: ChunkFilter) -> ChunkFilter: ...

        def checked_vectors(self, vectors: Sequence[Sequence[float]], n: int) -> np.ndarray: ...

        def check_hybrid(self, alpha: float, fusion: str, vector: Sequence[float]) -> np.ndarray: ...


    def _hits(self, objects: Sequence[Any], score: Any, flt: ChunkFilter) -> list[Hit]:
        hits = [Hit(chunk=c, score=float(score(o.metadata))) for o in objects
                if matches(flt, c := to_chunk(dict(o.properties)))]
        return sorted(hits, key=lambda h: (-h.score, h.chunk.doc_id, h.chunk.ordinal))

    def bm25(self, query: str, k: int, flt: ChunkFilter | None = None) -> list[Hit]:
        """BM25 over the stemmed search text; ties break in document order."""
        flt = flt or ChunkFilter()
        words = stem_text(query)
        collection = self._chunks()
        if collection is None or k <= 0 or not words:
            return []
        flt = self._resolve(flt)
        if flt.doc_ids == ():
            return []
        res = self._run("bm25", lambda: collection.query.bm25(
            query=words, query_properties=["search_text"], limit=k, filters=build_filter(flt),
            return_metadata=MetadataQuery(score=True)))
        return self._hits(res.objects, lambda m: m.score or 0.0, flt)

    def vector(self, vector: Sequence[float], k: int, flt: ChunkFilter | None = None) -> list[Hit]:
        """Nearest chunks by cosine similarity (score = 1 - cosine distance)."""
        query = self.checked_vectors([vector], 1)[0].tolist()
        flt = flt or ChunkFilter()
        collection = self._chunks()
        if collection is None or k <= 0:
            return []
        flt = self._resolve(flt)
        if flt.doc_ids == ():
            return []
        res = self._run("vector search", lambda: collection.query.near_vector(
            near_vector=query, limit=k, filters=build_filter(flt), return_metadata=MetadataQuery(distance=True)))
        return self._hits(res.objects, lambda m: 1.0 - float(m.distance or 0.0), flt)

    def similarity(self, vector: Sequence[float], chunk_ids: Sequence[str]) -> dict[str, float]:
        """Each listed chunk's cosine with ``vector`` (Weaviate keeps no windows), from its stored vector."""
        query = self.checked_vectors([vector], 1)[0]
        wanted = list(dict.fromkeys(chunk_ids))
        collection = self._chunks()
        if collection is None or not wanted:
            return {}
        def fetch(part: list[str]) -> Any:
            return self._run("similarity", lambda: collection.query.fetch_objects(
                filters=Filter.by_property("chunk_id").contains_any(part), limit=len(part), include_vector=True))

        out: dict[str, float] = {}
        for start in range(0, len(wanted), MAX_RESULTS):
            for o in fetch(wanted[start:start + MAX_RESULTS]).objects:
                own = np.asarray(default_vector(o.vector), dtype=np.float32)
                norm = float(np.linalg.norm(own) * np.linalg.norm(query)) or 1.0
                out[str(o.properties["chunk_id"])] = float(own @ query) / norm
        return out

    def hybrid(self, query: str, vector: Sequence[float], k: int, alpha: float = 0.5,
               flt: ChunkFilter | None = None, *, fusion: Fusion | None = None) -> list[Hit]:
        """BM25 and vector search fused; alpha=1 pure vector, alpha=0 pure BM25 (module docstring)."""
        fusion = fusion or self.fusion
        query_vector = self.check_hybrid(alpha, fusion, vector).tolist()
        if k <= 0:
            return []
        flt = self._resolve(flt or ChunkFilter())  # once for both sides
        if self.hybrid_mode == "weaviate":
            return self._native_hybrid(query, query_vector, k, alpha, flt, fusion)

        pool = k * self.hybrid_candidates
        lexical = self.bm25(query, pool, flt) if alpha < 1.0 else []
        semantic = self.vector(vector, pool, flt) if alpha > 0.0 else []
        return fuse(lexical, semantic, alpha, k, fusion)

    def _native_hybrid(self, query: str, vector: list[float], k: int, alpha: float, flt: ChunkFilter,
                       fusion: Fusion) -> list[Hit]:
        collection = self._chunks()
        if collection is None or flt.doc_ids == ():
            return []
        kind = HybridFusion.RELATIVE_SCORE if fusion == "relative_score" else HybridFusion.RANKED
        res = self._run("hybrid search", lambda: collection.query.hybrid(
            query=stem_text(query), vector=vector, alpha=alpha, fusion_type=kind, query_properties=["search_text"],
            limit=k, filters=build_filter(flt), return_metadata=MetadataQuery(score=True)))
        return self._hits(res.objects, lambda m: m.score or 0.0, flt)
