"""What a batch of new chunks costs every search until it is folded into the BM25 index, and what folding costs.

    .venv/bin/python bench/store_index.py            # 0 and 3,000 indexed abstracts, 150 / 500 / 1,000 new
    .venv/bin/python bench/store_index.py --indexed 0 --new 1000

LanceDB keeps chunks written after the full-text index was built outside it and answers BM25 over them with a flat
scan (every unindexed row tokenized per query) until ``optimize`` folds them in. A run ingests a few hundred to a few
thousand chunks per iteration, and every Forager then searches. Per store this prints: the chunks indexed and
waiting, BM25 and hybrid latency (p50 / p95 over SciFact test claims, top 20) before and after
:meth:`actors.steps.ingest.step.IngestStep.index_new_chunks` (what the crew runs after each iteration's ingestion),
and how long that took. The texts are SciFact abstracts ingested through the product's text ingestion; the vectors
come from the Ollama stand-in's ``/api/embed`` (word hashes: BM25 is what is measured, the vector side is the same
flat scan before and after).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from actors.steps.evaluation.retrieval import load_beir  # noqa: E402
from infra.settings import Settings  # noqa: E402
from tests.loopback_ollama import LoopbackOllama  # noqa: E402

EMBED_MODEL = "nomic-embed-text"


def latencies(fn, queries: list[str]) -> tuple[float, float]:
    """p50 and p95 in ms of ``fn(query)`` over ``queries`` (after one untimed call)."""
    fn(queries[0])
    times = []
    for q in queries:
        started = time.perf_counter()
        fn(q)
        times.append(1000 * (time.perf_counter() - started))
    times.sort()
    return statistics.median(times), times[int(0.95 * (len(times) - 1))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--beir", type=Path, default=REPO.parent / "shared" / "data" / "beir-scifact")
    parser.add_argument("--indexed", type=int, nargs="+", default=[0, 3000], help="abstracts indexed beforehand")
    parser.add_argument("--new", type=int, nargs="+", default=[150, 500, 1000], help="abstracts of the new batch")
    parser.add_argument("--queries", type=int, default=60)
    args = parser.parse_args()
    if not (args.beir / "corpus.jsonl").is_file():
        print(f"SciFact not found at {args.beir}; pass --beir DIR", file=sys.stderr)
        return 2

    from actors.steps.ingest.documents import TextDocument
    from actors.steps.ingest.step import IngestStep
    from infra.embed import build_embedder
    from infra.store import build_store

    data = load_beir(args.beir)
    ids = list(data.corpus)
    queries = [data.queries[q] for q in list(data.qrels("test"))[:args.queries]]
    print(f"{'indexed':>8} {'new':>6} {'bm25 p50/p95 ms':>16} {'hybrid p50/p95 ms':>18} {'fold-in s':>9} "
          f"{'bm25 after':>11} {'hybrid after':>13}")
    with LoopbackOllama(models=(EMBED_MODEL,), embed_dim=768) as server:
        for indexed in args.indexed:
            for new in args.new:
                if indexed + new > len(ids):
                    continue
                folder = Path(tempfile.mkdtemp(prefix="store-index-"))
                settings = Settings.load().updated(embed={"backend": "ollama", "host": server.url,
                                                          "model": EMBED_MODEL}, store={"path": folder / "store"})
                store = build_store(settings)
                embedder = build_embedder(settings)
                step = IngestStep(settings, store, embedder)

                def docs(start: int, n: int) -> list[TextDocument]:
                    return [TextDocument(key=f"beir:scifact:{c}", title=data.corpus[c][0], text=data.corpus[c][1])
                            for c in ids[start:start + n]]

                if indexed:
                    step.ingest_texts("bench", docs(0, indexed))
                    step.index_new_chunks()
                step.ingest_texts("bench", docs(indexed, new))
                vectors = dict(zip(queries, embedder.embed(queries), strict=True))
                waiting, total = store.unindexed_chunks(), store.count_chunks()
                alpha = settings.store.hybrid_alpha

                def bm25(q: str) -> object:
                    return store.bm25(q, 20)

                def hybrid(q: str) -> object:
                    return store.hybrid(q, vectors[q], 20, alpha)

                before = latencies(bm25, queries), latencies(hybrid, queries)
                started = time.perf_counter()
                folded = step.index_new_chunks()
                fold_s = time.perf_counter() - started
                after = latencies(bm25, queries), latencies(hybrid, queries)
                assert folded == waiting and store.unindexed_chunks() == 0, (folded, waiting)
                print(f"{total - waiting:>8,} {waiting:>6,} {before[0][0]:>7.1f} / {before[0][1]:>6.1f} "
                      f"{before[1][0]:>8.1f} / {before[1][1]:>7.1f} {fold_s:>9.3f} "
                      f"{after[0][0]:>4.1f} / {after[0][1]:>4.1f} {after[1][0]:>5.1f} / {after[1][1]:>5.1f}",
                      flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
