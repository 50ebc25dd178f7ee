"""The LanceDB store's searches: BM25 (Lance's native full-text index), cosine vector search re-scored by the
chunks' sentence windows, the similarity of given chunks, and the two fused (:func:`infra.store.fusion.fuse`).
Part of :class:`~infra.store.lancedb.LanceStore`, whose tables and settings it reads."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
from lancedb.table import Table

from infra.store.base import ChunkFilter, ChunkRecord, Hit
from infra.store.fusion import Fusion, fuse
from infra.store.lance_index import CHUNKS
from infra.store.lance_schema import CHUNK_COLUMNS, WINDOWS, window_similarity
from infra.store.lance_sql import sql_list

T = TypeVar("T")


class LanceSearch:
    """Searches of a LanceDB store folder (mixed into :class:`~infra.store.lancedb.LanceStore`)."""

    exact_vector: bool
    ann_nprobes: int
    ann_refine: int | None
    ann_ef: int | None
    hybrid_candidates: int
    fusion: Fusion
    _sides: ThreadPoolExecutor | None

    if TYPE_CHECKING:  # the rest of LanceStore (and Store) provides these; declared for the type checker only, so
        # that nothing here shadows them at run time
        def _read(self, name: str, what: str, fn: Callable[[Table], T], empty: T) -> T: ...

        def _resolve(self, flt: ChunkFilter) -> ChunkFilter: ...

        def _prefilter(self, flt: ChunkFilter) -> str | None: ...

        @staticmethod
        def _to_chunk(row: dict[str, Any]) -> ChunkRecord: ...

        @staticmethod
        def _fts_column(table: Table) -> str: ...

        def checked_vector(self, vector: Sequence[float]) -> np.ndarray: ...

        def check_hybrid(self, alpha: float, fusion: str, vector: Sequence[float]) -> None: ...

    def bm25(self, query: str, k: int, flt: ChunkFilter | None = None) -> list[Hit]:
        """BM25 over chunk text (Lance native full-text search: stemmed, stop words removed).
        Scores are BM25 scores (higher is better); ties break in document order.
        ``flt=None`` means the default :class:`ChunkFilter` (references excluded)."""
        where = self._prefilter(flt or ChunkFilter()) if k > 0 and query.strip() else None
        if where is None:
            return []

        def run(t: Table) -> list[dict[str, Any]]:
            q = t.search(query, query_type="fts", fts_columns=self._fts_column(t))
            if where:
                q = q.where(where, prefilter=True)
            return q.select([*CHUNK_COLUMNS, "_score"]).limit(k).to_list()

        rows = self._read(CHUNKS, "bm25", run, [])
        hits = [Hit(chunk=self._to_chunk(r), score=float(r["_score"])) for r in rows]
        return sorted(hits, key=lambda h: (-h.score, h.chunk.doc_id, h.chunk.ordinal))

    def vector(self, vector: Sequence[float], k: int, flt: ChunkFilter | None = None) -> list[Hit]:
        """Nearest chunks by cosine similarity (score = 1 - cosine distance, in [-1, 1]): the ``k`` chunks whose own
        vectors are nearest, each then scored by the best of its own and its sentence windows' similarity
        (:data:`WINDOWS`; a chunk without windows keeps its own) and re-ordered by that. ``flt=None`` means the
        default :class:`ChunkFilter` (references excluded)."""
        query_vector = self.checked_vector(vector)
        where = self._prefilter(flt or ChunkFilter()) if k > 0 else None
        if where is None:
            return []

        def run(t: Table) -> list[dict[str, Any]]:
            q = t.search(query_vector, query_type="vector", vector_column_name="vector").distance_type("cosine")
            if self.exact_vector:
                q = q.bypass_vector_index()
            q = q.nprobes(self.ann_nprobes)  # ignored without an ANN index (an exact scan)
            if self.ann_refine:
                q = q.refine_factor(self.ann_refine)
            if self.ann_ef:  # Lance refuses a list shorter than the candidates it must return (k × refine)
                q = q.ef(max(self.ann_ef, k * (self.ann_refine or 1)))
            if where:
                q = q.where(where, prefilter=True)
            windows = [WINDOWS] if WINDOWS in t.schema.names else []
            found = q.select([*CHUNK_COLUMNS, "_distance", *windows]).limit(k).to_arrow()
            best = window_similarity(found.column(WINDOWS), query_vector) if windows else None
            rows = found.drop_columns(windows).to_pylist()
            if best is not None:
                for row, b in zip(rows, best.tolist(), strict=True):
                    row["_window"] = b
            return rows

        rows = self._read(CHUNKS, "vector search", run, [])
        hits = [Hit(chunk=self._to_chunk(r), score=max(1.0 - float(r["_distance"]), r.get("_window", -math.inf)))
                for r in rows if not math.isnan(r["_distance"])]
        return sorted(hits, key=lambda h: (-h.score, h.chunk.doc_id, h.chunk.ordinal))

    def similarity(self, vector: Sequence[float], chunk_ids: Sequence[str]) -> dict[str, float]:
        query_vector = self.checked_vector(vector)
        wanted = list(dict.fromkeys(chunk_ids))
        if not wanted:
            return {}

        def run(t: Table) -> dict[str, float]:
            windows = [WINDOWS] if WINDOWS in t.schema.names else []
            found = (t.search().where(f"chunk_id IN {sql_list(wanted)}").select(["chunk_id", "vector", *windows])
                     .limit(len(wanted)).to_arrow())
            if found.num_rows == 0:
                return {}
            own = np.asarray(found.column("vector").combine_chunks().flatten(), dtype=np.float32)
            own = own.reshape(found.num_rows, -1)
            norms = np.linalg.norm(own, axis=1) * (np.linalg.norm(query_vector) or 1.0)
            scores = (own @ query_vector) / np.where(norms > 0, norms, 1.0)
            if windows:
                scores = np.maximum(scores, window_similarity(found.column(WINDOWS), query_vector))
            return dict(zip(found.column("chunk_id").to_pylist(), scores.tolist(), strict=True))

        return self._read(CHUNKS, "similarity", run, {})

    def hybrid(self, query: str, vector: Sequence[float], k: int, alpha: float = 0.5,
               flt: ChunkFilter | None = None, *, fusion: Fusion | None = None) -> list[Hit]:
        """BM25 and vector search fused (see :func:`fuse`, by ``fusion`` or the store's); alpha=1 pure vector,
        alpha=0 pure BM25.

        Each side contributes its top ``k * hybrid_candidates`` hits to the fusion.
        """
        fusion = fusion or self.fusion
        self.check_hybrid(alpha, fusion, vector)
        if k <= 0:
            return []
        pool = k * self.hybrid_candidates
        flt = self._resolve(flt or ChunkFilter())  # once for both sides
        if 0.0 < alpha < 1.0:  # both sides at once: LanceDB searches outside the GIL (bench/search_scale.py)
            lexical_future = self._side_pool().submit(self.bm25, query, pool, flt)
            semantic = self.vector(vector, pool, flt)
            lexical = lexical_future.result()
        else:
            lexical = self.bm25(query, pool, flt) if alpha < 1.0 else []
            semantic = self.vector(vector, pool, flt) if alpha > 0.0 else []
        return fuse(lexical, semantic, alpha, k, fusion)

    def _side_pool(self) -> ThreadPoolExecutor:
        """The thread that runs the BM25 side of a hybrid search while this one runs the vector side."""
        if self._sides is None:
            self._sides = ThreadPoolExecutor(max_workers=2, thread_name_prefix="lance-hybrid")
        return self._sides
