"""Probe: would BM25 and hybrid search on a BEIR dataset gain if BM25 also read the document title?

    .venv/bin/python bench/bm25_title_probe.py --store .forage/eval/scifact     # a store kept by
    # `forage eval retrieval --beir ../shared/data/beir-scifact --store .forage/eval/scifact`

Forage's chunk text never holds headings, so a paper's title reaches the embedder (through the
context line) but not BM25. This probe reads the chunks and documents of a store loaded by the real
command (public Store API only), builds two plain LanceDB full-text tables with the store's own index
configuration (``FTS()`` on ``text``) — the chunk text as stored, and ``title + newline + chunk text``
— and scores BM25 alone and hybrid fusion (the store's own :func:`fuse`, with the store's vector
hits) on the train and test splits. The "as stored" rows reproduce the command's own figures, which
checks the probe. It changes nothing in the store. Analysis only: not part of the product.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import lancedb
from lancedb.index import FTS

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
from infra.store.fusion import fuse
from infra.store.lancedb import LanceStore

REPO = Path(__file__).resolve().parents[1]
ALPHAS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.9)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--beir", type=Path, default=REPO.parent / "shared" / "data" / "beir-scifact")
    parser.add_argument("--store", type=Path, required=True, help="a store loaded by `forage eval retrieval`")
    parser.add_argument("--chunks", type=int, default=40, help="chunks per query (the command's default: 4 × k)")
    args = parser.parse_args()

    data = load_beir(args.beir)
    store = LanceStore(args.store, dim=384)
    documents = store.list_documents()
    corpus_ids = stored_corpus_ids(documents)
    titles = {d.doc_id: d.title for d in documents}
    chunks = {c.chunk_id: c for c in store.chunks(ChunkFilter(), limit=store.count_chunks())}
    rows = [c.model_dump(include={"chunk_id", "text"}) for c in chunks.values()]
    db = lancedb.connect(tempfile.mkdtemp(prefix="bm25-probe-"))
    tables = {"as stored": db.create_table("plain", data=rows),
              "title + text": db.create_table("titled", data=[
                  {"chunk_id": r["chunk_id"], "text": titles[chunks[r["chunk_id"]].doc_id] + "\n" + r["text"]}
                  for r in rows])}
    for table in tables.values():
        table.create_index("text", config=FTS())

    def bm25(table: lancedb.table.Table, query: str, k: int) -> list[Hit]:
        found = table.search(query, query_type="fts", fts_columns="text").select(["chunk_id", "_score"]).limit(k)
        hits = [Hit(chunk=chunks[r["chunk_id"]], score=float(r["_score"])) for r in found.to_list()]
        return sorted(hits, key=lambda h: (-h.score, h.chunk.doc_id, h.chunk.ordinal))

    embedder = MiniLMEmbedder()
    pool = args.chunks * store.hybrid_candidates
    print(f"{len(documents):,} documents, {len(chunks):,} chunks; nDCG@10; hybrid = store fuse() over "
          f"{pool} BM25 + {pool} vector candidates")
    for split in ("train", "test"):
        qrels = data.qrels(split)
        qids = select_queries(qrels, None)
        vectors, _ = embed_queries(embedder, data, qids)
        judged = {q: qrels[q] for q in qids}
        semantic = {q: store.vector(vectors[q], pool) for q in qids}
        for name, table in tables.items():
            lexical = {q: bm25(table, data.queries[q], pool) for q in qids}
            ranked = {q: rank_documents(lexical[q][:args.chunks], corpus_ids, 10) for q in qids}
            print(f"{split:<5} {name:<13} bm25   {evaluate_rankings(ranked, judged)['ndcg@10']:.4f}")
            for fusion in ("relative_score", "rrf"):
                cells = []
                for alpha in ALPHAS:
                    ranked = {q: rank_documents(fuse(lexical[q], semantic[q], alpha, args.chunks, fusion),
                                                corpus_ids, 10) for q in qids}
                    cells.append(f"{alpha}:{evaluate_rankings(ranked, judged)['ndcg@10']:.4f}")
                print(f"{split:<5} {name:<13} hybrid {fusion:<14} " + " ".join(cells), flush=True)


if __name__ == "__main__":
    main()
