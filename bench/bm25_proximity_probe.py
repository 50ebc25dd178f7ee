"""Probe: would term proximity (a sequential-dependence BM25) lift BM25 and hybrid search on a BEIR dataset?

    .venv/bin/python bench/bm25_proximity_probe.py --store /tmp/scifact-win   # a store kept by
    # `forage eval retrieval --beir ../shared/data/beir-scifact --store /tmp/scifact-win`

BM25 scores each query word on its own: a chunk holding "vein" in one sentence and "thrombosis" in another scores
as one holding "deep vein thrombosis". Sequential dependence (Metzler and Croft, 2005) adds, for every pair of
adjacent query words, how often the pair occurs in the chunk in order (``ordered``) and within 8 words in any order
(``unordered``), weighted like a BM25 term (idf of the ordered pair over the chunks, saturating tf, length
normalised). The probe re-scores the store's own BM25 candidates (its top ``k × hybrid_candidates`` chunks, the
pool hybrid search fuses) as BM25 + w_ordered × ordered + w_unordered × unordered, fuses them with the store's
vector candidates by the store's own :func:`fuse`, tunes (w_ordered, w_unordered, alpha) on the train queries and
prints test at train's best. Words as the store's full-text index reads them: lower-cased, the index's English
stop words left out, Snowball-stemmed. The (0, 0) row reproduces the store's own figures, which checks the probe.
It changes nothing in the store. Analysis only: not part of the product.
"""

from __future__ import annotations

import argparse
import math
import re
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

import snowballstemmer  # type: ignore[import-untyped]

from actors.steps.evaluation.retrieval import (
    embed_queries,
    evaluate_rankings,
    load_beir,
    rank_documents,
    select_queries,
    stored_corpus_ids,
)
from infra.embed.minilm import MiniLMEmbedder
from infra.store.base import ChunkFilter, Hit
from infra.store.base import search_text
from infra.store.fusion import fuse
from infra.store.lancedb import LanceStore

REPO = Path(__file__).resolve().parents[1]
ALPHAS = (0.4, 0.5, 0.6, 0.7)
WEIGHTS = (0.0, 0.25, 0.5, 1.0, 2.0)
WINDOW = 8
# the stop words of Lance's English full-text tokenizer (tantivy's, Lucene's classic English set)
STOP = frozenset("a an and are as at be but by for if in into is it no not of on or such that the their then there "
                 "these they this to was will with".split())


class Words:
    """Text → the words the full-text index keeps (lower-cased, stop words out, Snowball-stemmed), cached."""

    def __init__(self) -> None:
        self._stem = snowballstemmer.stemmer("english").stemWord
        self._seen: dict[str, str] = {}

    def __call__(self, text: str) -> list[str]:
        words = (w for w in re.findall(r"[0-9a-z]+", text.lower()) if len(w) <= 40 and w not in STOP)
        return [self._seen.get(w) or self._seen.setdefault(w, self._stem(w)) for w in words]


def proximity(query: Sequence[str], chunk: Sequence[str], pair_df: Mapping[tuple[str, str], int], n: int,
              mean_len: float) -> tuple[float, float]:
    """(ordered, unordered) sequential-dependence scores of one chunk for the query's adjacent word pairs."""
    at: dict[str, list[int]] = defaultdict(list)
    for i, w in enumerate(chunk):
        at[w].append(i)
    norm = 1.2 * (0.25 + 0.75 * len(chunk) / mean_len)
    ordered = unordered = 0.0
    for a, b in zip(query, query[1:], strict=False):
        if a not in at or b not in at:
            continue
        after = set(at[b])
        tf_o = sum(1 for i in at[a] if i + 1 in after)
        tf_u = sum(1 for i in at[a] for j in at[b] if 0 < abs(i - j) < WINDOW)
        df = pair_df.get((a, b), 0)
        idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
        ordered += idf * tf_o / (tf_o + norm) if tf_o else 0.0
        unordered += idf * tf_u / (tf_u + norm) if tf_u else 0.0
    return ordered, unordered


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--beir", type=Path, default=REPO.parent / "shared" / "data" / "beir-scifact")
    parser.add_argument("--store", type=Path, required=True, help="a store loaded by `forage eval retrieval`")
    parser.add_argument("--chunks", type=int, default=40, help="chunks per query (the command's default: 4 × k)")
    parser.add_argument("--alpha", type=float, default=0.6, help="the store's fusion weight (the default's)")
    args = parser.parse_args()

    data = load_beir(args.beir)
    store = LanceStore(args.store, dim=384)
    documents = store.list_documents()
    corpus_ids = stored_corpus_ids(documents)
    titles = {d.doc_id: d.title for d in documents}
    words = Words()
    chunk_words = {c.chunk_id: words(search_text(titles[c.doc_id], c))
                   for c in store.chunks(ChunkFilter(), limit=store.count_chunks())}
    pair_df: Counter[tuple[str, str]] = Counter()
    for ws in chunk_words.values():
        pair_df.update(set(zip(ws, ws[1:], strict=False)))
    n, mean_len = len(chunk_words), sum(map(len, chunk_words.values())) / max(1, len(chunk_words))
    pool = args.chunks * store.hybrid_candidates
    embedder = MiniLMEmbedder()
    print(f"{len(documents):,} documents, {n:,} chunks; nDCG@10; BM25 pool and vector pool {pool} chunks each")

    splits = {}
    for split in ("train", "test"):
        qrels = data.qrels(split)
        qids = select_queries(qrels, None)
        vectors, _ = embed_queries(embedder, data, qids)
        sides = {}
        for q in qids:
            lexical = store.bm25(data.queries[q], pool)
            query = words(data.queries[q])
            sides[q] = (lexical, [proximity(query, chunk_words[h.chunk.chunk_id], pair_df, n, mean_len)
                                  for h in lexical], store.vector(vectors[q], pool))
        splits[split] = (sides, {q: qrels[q] for q in qids})

    def ndcg(split: str, w_o: float, w_u: float, alpha: float | None) -> float:
        sides, judged = splits[split]
        ranked = {}
        for q, (lexical, prox, semantic) in sides.items():
            scored = sorted((Hit(chunk=h.chunk, score=h.score + w_o * o + w_u * u)
                             for h, (o, u) in zip(lexical, prox, strict=True)),
                            key=lambda h: (-h.score, h.chunk.doc_id, h.chunk.ordinal))
            hits = scored[:args.chunks] if alpha is None else fuse(scored, semantic, alpha, args.chunks,
                                                                   "relative_score")
            ranked[q] = rank_documents(hits, corpus_ids, 10)
        return evaluate_rankings(ranked, judged)["ndcg@10"]

    print(f"the store's own (no proximity): train hybrid {ndcg('train', 0, 0, args.alpha):.4f}, "
          f"test hybrid {ndcg('test', 0, 0, args.alpha):.4f} (alpha {args.alpha})")
    grid = []
    for w_o in WEIGHTS:
        for w_u in WEIGHTS:
            cells = {a: ndcg("train", w_o, w_u, a) for a in ALPHAS}
            best = max(cells, key=lambda a: (cells[a], -abs(a - args.alpha)))
            grid.append((cells[best], w_o, w_u, best))
            print(f"train w_ordered {w_o:<4} w_unordered {w_u:<4} bm25 {ndcg('train', w_o, w_u, None):.4f} hybrid "
                  + " ".join(f"{a}:{v:.4f}" for a, v in cells.items()), flush=True)
    top, w_o, w_u, alpha = max(grid)
    print(f"train's best: w_ordered {w_o}, w_unordered {w_u}, alpha {alpha}: train {top:.4f}; "
          f"test hybrid {ndcg('test', w_o, w_u, alpha):.4f}, test bm25 {ndcg('test', w_o, w_u, None):.4f}")


if __name__ == "__main__":
    main()
