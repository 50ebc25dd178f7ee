"""Hybrid fusion of a BM25 and a vector hit list, written once for every store: LanceDB's hybrid search and
Weaviate's (``store.hybrid = "forage"``) rank the same hits the same way, so a migrated library searches alike."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from infra.store.base import RRF_K, ChunkRecord, Hit

Fusion = Literal["relative_score", "rrf"]


def normalize(scores: dict[str, float]) -> dict[str, float]:
    """Min-max normalize to [0, 1]; a single score (or all equal) becomes 1."""
    if not scores:
        return {}
    lo, hi = min(scores.values()), max(scores.values())
    if hi - lo <= 1e-12:
        return {key: 1.0 for key in scores}
    return {key: (value - lo) / (hi - lo) for key, value in scores.items()}


def fuse(bm25: Sequence[Hit], vector: Sequence[Hit], alpha: float, k: int,
         fusion: Fusion = "relative_score") -> list[Hit]:
    """Fuse two ranked hit lists (best first) into the top ``k``.

    ``relative_score``: each side min-max normalized to [0, 1], fused = alpha*vec + (1-alpha)*bm25,
    a hit missing on one side gets 0 there. ``rrf``: fused = alpha/(60+rank_vec) + (1-alpha)/(60+rank_bm25)
    with 1-based ranks (alpha=0.5 is plain RRF scaled by 1/2). Hits found only by a side whose
    weight is 0 are dropped, so alpha=0 is exactly BM25 and alpha=1 exactly vector search.
    Ties break on the weighted rank, then (doc_id, ordinal): the result is deterministic.
    """
    weights = {"vec": alpha, "bm": 1.0 - alpha}
    sides = {"vec": list(vector), "bm": list(bm25)}
    chunks: dict[str, ChunkRecord] = {}
    ranks: dict[str, dict[str, int]] = {"vec": {}, "bm": {}}
    for side, hits in sides.items():
        if weights[side] <= 0:
            continue
        for rank, hit in enumerate(hits):
            chunks.setdefault(hit.chunk.chunk_id, hit.chunk)
            ranks[side].setdefault(hit.chunk.chunk_id, rank)
    if fusion == "relative_score":
        norm = {side: normalize({h.chunk.chunk_id: h.score for h in hits}) for side, hits in sides.items()}
        fused = {cid: sum(weights[s] * norm[s].get(cid, 0.0) for s in sides) for cid in chunks}
    elif fusion == "rrf":
        fused = {cid: sum(weights[s] / (RRF_K + ranks[s][cid] + 1) for s in sides if cid in ranks[s])
                 for cid in chunks}
    else:
        raise ValueError(f"unknown fusion {fusion!r}; use 'relative_score' or 'rrf'")

    def tie_rank(cid: str) -> float:
        return sum(weights[s] * ranks[s].get(cid, len(sides[s])) for s in sides)

    order = sorted(chunks, key=lambda cid: (-fused[cid], tie_rank(cid), chunks[cid].doc_id, chunks[cid].ordinal))
    return [Hit(chunk=chunks[cid], score=fused[cid]) for cid in order[:k]]
