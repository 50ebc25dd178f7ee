"""What a Forager reads from the store: the two-stage retrieval of a requirement's candidate chunks, the seeds of a
follow-up run, a deep dive's sections, the ranking of the evidence documents. Plain synchronous store reads (the step
runs them in a worker thread, on a place of the node's CPU gate); nothing here calls a model but the embedder, for the
summaries' vectors.

The start node's retrieval: papers first (hybrid search over title and abstract chunks — BM25 there also reads each
chunk's title line — topped up by the best-scoring chunks' papers when few papers have an abstract chunk; fused by
reciprocal rank with the papers this requirement has summarized, ranked by their summary's similarity to the query:
the top ``forage.paper_k`` papers), then ``forage.paper_chunks`` chunks of each of those papers (hybrid search inside
the paper), plus the chunk search over the whole store (BM25 top ``forage.bm25_k`` and vector top
``forage.vector_k``).
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence

from infra.embed.base import Embedder, cosine
from infra.settings import Settings
from infra.store.base import RRF_K, ChunkFilter, ChunkRecord, Hit, SectionKind, Store

# excluded when retrieving papers: title and abstract remain
PAPER_KINDS: tuple[SectionKind, ...] = ("body", "references", "caption")
RANK_CHUNKS_PER_DOC = 4  # chunks per evidence document the ranking search fetches (Retrieval.evidence_rank)


def fuse_papers(by_text: Sequence[str], by_summary: Sequence[str], k: int, c: int = RRF_K) -> list[str]:
    """The top ``k`` papers of two rankings — by title and abstract (the store's hybrid search) and by the
    summaries this requirement made — fused by reciprocal rank (score 1/(c + rank) summed over both lists);
    ties keep the title-and-abstract order."""
    score: dict[str, float] = {}
    for ranking in (by_text, by_summary):
        for rank, doc_id in enumerate(ranking, start=1):
            score[doc_id] = score.get(doc_id, 0.0) + 1.0 / (c + rank)
    order = {d: i for i, d in enumerate(dict.fromkeys([*by_text, *by_summary]))}
    return sorted(score, key=lambda d: (-score[d], order[d]))[:k]


class Retrieval:
    """One requirement's store reads (see the module docstring); keeps the vectors of the summaries it ranked."""

    def __init__(self, settings: Settings, store: Store, embedder: Embedder) -> None:
        self.cfg = settings.forage
        self.alpha = settings.store.hybrid_alpha
        self.store = store
        self.embedder = embedder
        self.summary_vectors: dict[str, list[float]] = {}  # doc id -> its summary's embedding (paper stage)

    def paper_stage(self) -> bool:
        return self.cfg.paper_k > 0 and self.cfg.paper_chunks > 0

    def candidates(self, query: str, vector: list[float] | None, flt: ChunkFilter, scope: tuple[str, ...] | None,
                   summaries: Mapping[str, str]) -> tuple[list[Hit], list[str], list[str]]:
        """The hits for ``query`` (papers' chunks, then BM25, then vector; ``flt`` leaves out what was judged), the
        papers read and the papers ranked by ``summaries``."""
        hits: list[Hit] = []
        papers: list[str] = []
        by_summary: list[str] = []
        if self.paper_stage() and vector is not None:
            pool = self.cfg.paper_k * 4
            found = self.store.hybrid(query, vector, pool, self.alpha,
                                      ChunkFilter(exclude_kinds=PAPER_KINDS, doc_ids=scope))
            if len({h.chunk.doc_id for h in found}) < self.cfg.paper_k:  # few abstracts: papers by best chunk
                found += self.store.hybrid(query, vector, pool, self.alpha, ChunkFilter(doc_ids=scope))
            by_summary = self.papers_by_summary(summaries, vector)
            papers = fuse_papers(list(dict.fromkeys(h.chunk.doc_id for h in found)), by_summary, self.cfg.paper_k)
            hits += self.chunks_of_papers(query, vector, papers, flt)
        if self.cfg.bm25_k > 0:
            hits += self.store.bm25(query, self.cfg.bm25_k, flt)
        if self.cfg.vector_k > 0 and vector is not None:
            hits += self.store.vector(vector, self.cfg.vector_k, flt)
        return hits, papers, by_summary

    def chunks_of_papers(self, query: str, vector: list[float], papers: Sequence[str],
                         flt: ChunkFilter) -> list[Hit]:
        """The best ``forage.paper_chunks`` chunks of each paper, in paper order: one hybrid search over all the
        papers, each paper's chunks taken in the fused order; a paper that search left short while it was cut off
        at its k is searched alone."""
        n = self.cfg.paper_chunks
        if not papers or n <= 0:
            return []
        k = n * len(papers) * 4
        found = self.store.hybrid(query, vector, k, self.alpha, flt.model_copy(update={"doc_ids": tuple(papers)}))
        by_paper: dict[str, list[Hit]] = {d: [] for d in papers}
        for hit in found:
            best = by_paper.get(hit.chunk.doc_id)
            if best is not None and len(best) < n:
                best.append(hit)
        out: list[Hit] = []
        for doc_id in papers:
            best = by_paper[doc_id]
            if len(best) < n and len(found) >= k:  # crowded out by the other papers' chunks, not out of chunks
                best = self.store.hybrid(query, vector, n, self.alpha, flt.model_copy(update={"doc_ids": (doc_id,)}))
            out += best
        return out

    def papers_by_summary(self, summaries: Mapping[str, str], vector: Sequence[float]) -> list[str]:
        """The papers this requirement has summarized, most similar summary to the query first (each summary
        embedded once, when first needed)."""
        new = [d for d in summaries if d not in self.summary_vectors]
        if new:
            for doc_id, embedded in zip(new, self.embedder.embed([summaries[d] for d in new]), strict=True):
                self.summary_vectors[doc_id] = list(embedded)
        return sorted(summaries, key=lambda d: -cosine(self.summary_vectors[d], vector))

    def seeds(self, chunk_ids: Sequence[str], judged: Container[str],
              scope: tuple[str, ...] | None) -> list[ChunkRecord]:
        """The seed chunks not in ``judged``, in the order given (chunks no longer stored, or outside ``scope``, are
        left out)."""
        out = []
        for chunk_id in dict.fromkeys(chunk_ids):
            if chunk_id in judged:
                continue
            chunk = self.store.get_chunk(chunk_id)
            if chunk is not None and (scope is None or chunk.doc_id in scope):
                out.append(chunk)
        return out

    def evidence_rank(self, text: str, vector: list[float] | None, docs: tuple[str, ...]) -> dict[str, int]:
        """doc id → its place in the store's own search for ``text`` over ``docs`` (hybrid: BM25 and the embedding
        with its sentence windows, the run's fusion; BM25 alone without a vector), at its best chunk's place."""
        flt = ChunkFilter(doc_ids=docs)
        k = RANK_CHUNKS_PER_DOC * len(docs)
        hits = self.store.bm25(text, k, flt) if vector is None else self.store.hybrid(text, vector, k, self.alpha, flt)
        rank: dict[str, int] = {}
        for hit in hits:
            rank.setdefault(hit.chunk.doc_id, len(rank))
        return rank

    def with_unread_chunks(self, queue: Sequence[str], judged: Mapping[str, Sequence[str]], limit: int) -> list[str]:
        """The first ``limit`` documents of ``queue`` that still hold a chunk not in ``judged`` (doc id → judged
        chunk ids)."""
        out: list[str] = []
        for doc_id in queue:
            flt = ChunkFilter(doc_ids=(doc_id,), exclude_chunk_ids=tuple(judged.get(doc_id, ())))
            if self.store.chunks(flt, limit=1):
                out.append(doc_id)
                if len(out) == limit:
                    break
        return out

    def section_chunks(self, doc_id: str, path: str, limit: int, exclude: tuple[str, ...]) -> list[ChunkRecord]:
        """Up to ``limit`` chunks of a section in document order: its own, then its subsections'."""
        found = self.store.chunks(ChunkFilter(doc_ids=(doc_id,), section_path=path, exclude_chunk_ids=exclude),
                                  limit=limit)
        if len(found) < limit:
            found += self.store.chunks(ChunkFilter(doc_ids=(doc_id,), section_path=f"{path} > *",
                                                   exclude_chunk_ids=exclude), limit=limit - len(found))
        return found

    def first_chunk(self, doc_id: str) -> ChunkRecord | None:
        found = self.store.chunks(ChunkFilter(doc_ids=(doc_id,)), limit=1)
        return found[0] if found else None
