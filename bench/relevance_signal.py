"""Which similarity should check the judge? The re-embedded passage text against the store's own scores, on SciFact.

The relevance check (actors/steps/forage/step.py) scores each passage a Forager judges by a cosine similarity to
the requirement: before 2026-11-27 of the passage's text, embedded again for the check (`EmbeddingSimilarity`), now
by default the store's own (`StoreSimilarity`). The store
holds a vector for each chunk (its context line — title and section — and text) and, with sentence windows
(embed.window_sentences), one per two sentences; its vector search scores a chunk by the best of them
(docs/retrieval.md). This bench compares the two signals on what a Forager judges in one start node — the top
``--k`` hybrid chunks of each judged query — with no LLM:

* ``text``: cosine of the query and the chunk text embedded again (the check before 2026-11-27;
  ``forage.relevance_signal = "text"``);
* ``store``: the store's vector-search score of the same chunk (own vector or best window, whichever is higher),
  read from the stored vectors (``Store.similarity``): no embedding (the check's default since 2026-11-27).

Per signal and split it prints where relevant passages lie (2nd / 10th percentile, median: what the topic and answer
floors are calibrated from, bench/relevance_floors.py), the best non-relevant passage per query (median, 90th
percentile), how often the passage the signal ranks first among the ``k`` is relevant (P@1; beside it the hybrid
search's own first hit, ``hybrid_p_at_1``: the order the Forager's evidence follows), and the mean per-query AUC of
relevant against non-relevant passages, and what one check of the ``k`` passages costs per signal (wall and CPU
ms, the query's vector known). Floors calibrated for one signal do not carry to the other: the 2nd and 10th
percentiles of relevant passages on train are the topic and answer floors (the rule of bench/relevance_floors.py).

Usage: FORAGE_INGEST__CACHE_DIR=… python bench/relevance_signal.py [--beir DIR] [--store DIR] [--train-queries 400]
``--store``: a SciFact store `forage eval retrieval --store` loaded (else one is loaded into a temporary folder).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from actors.steps.evaluation.retrieval import load_beir, load_corpus, select_queries  # noqa: E402
from infra.embed import build_embedder  # noqa: E402
from infra.rerank import EmbeddingSimilarity, StoreSimilarity  # noqa: E402
from infra.settings import Settings  # noqa: E402
from infra.store import build_store  # noqa: E402

SIGNALS = ("text", "store")


def passages(settings, store, embedder, dataset, qrels, qids, corpus_ids, alpha: float, k: int,  # noqa: ANN001
             cost: dict[str, list[float]]) -> list[dict]:
    """Per query and hit: whether it is relevant and each signal's score, by the product's own implementations
    (``EmbeddingSimilarity``, ``StoreSimilarity``); ``cost`` gets each signal's wall and CPU seconds per query (its
    query vector already known, as a Forager's is after its first check)."""
    signals = {"text": EmbeddingSimilarity(embedder, settings.similarity_floors("text")),
               "store": StoreSimilarity(store, embedder, settings.similarity_floors("store"))}
    rows = []
    vectors = embedder.embed([dataset.queries[q] for q in qids]) if qids else []
    for q, vector in zip(qids, vectors, strict=True):
        claim = dataset.queries[q]
        hits = store.hybrid(claim, vector, k, alpha)
        if not hits:
            continue
        chunks = [h.chunk for h in hits]
        scores = {}
        for name, signal in signals.items():
            signal.query_vector(claim)  # computed once per requirement in a Forager: not part of a check
            wall, cpu = time.perf_counter(), time.process_time()
            scores[name] = signal.score(claim, chunks)
            cost.setdefault(f"{name}_wall", []).append(time.perf_counter() - wall)
            cost.setdefault(f"{name}_cpu", []).append(time.process_time() - cpu)
        relevant = {c for c, g in qrels[q].items() if g > 0}
        for rank, hit in enumerate(hits):
            rows.append({"qid": q, "rank": rank, "relevant": bool(relevant & set(corpus_ids.get(hit.chunk.doc_id, []))),
                         **{name: float(scores[name][rank]) for name in SIGNALS}})
    return rows


def figures(rows: list[dict], signal: str) -> dict[str, float]:
    by_query: dict[str, list[dict]] = {}
    for r in rows:
        by_query.setdefault(r["qid"], []).append(r)
    relevant = [r[signal] for r in rows if r["relevant"]]
    best_other = [max((r[signal] for r in rs if not r["relevant"]), default=-1.0) for rs in by_query.values()]
    aucs = []
    for rs in by_query.values():
        good = [r[signal] for r in rs if r["relevant"]]
        bad = [r[signal] for r in rs if not r["relevant"]]
        if good and bad:
            aucs.append(float(np.mean([(g > b) + 0.5 * (g == b) for g in good for b in bad])))
    return {"relevant_p2": float(np.percentile(relevant, 2)), "relevant_p10": float(np.percentile(relevant, 10)),
            "relevant_p50": float(np.percentile(relevant, 50)),
            "best_other_p50": float(np.percentile(best_other, 50)),
            "best_other_p90": float(np.percentile(best_other, 90)),
            "p_at_1": float(np.mean([max(rs, key=lambda r: r[signal])["relevant"] for rs in by_query.values()])),
            "mean_auc": float(np.mean(aucs)), "queries_with_both": len(aucs)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--beir", type=Path, default=Path(__file__).resolve().parents[2] / "shared/data/beir-scifact")
    ap.add_argument("--store", type=Path, help="a loaded SciFact store (default: load one into a temporary folder)")
    ap.add_argument("--k", type=int, default=12)
    ap.add_argument("--train-queries", type=int, default=400, help="First N judged train queries (all: 809).")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    dataset = load_beir(args.beir)
    out: dict[str, object] = {"k": args.k}
    with tempfile.TemporaryDirectory(prefix="forage-signal-") as tmp:
        settings = Settings.load().updated(store={"path": args.store or Path(tmp) / "store"})
        store, embedder = build_store(settings), build_embedder(settings)
        report = load_corpus(settings, store, embedder, dataset,
                             progress=lambda n, total, s: print(f"loaded {n}/{total} ({s:.0f} s)", flush=True))
        if report.stored:
            store.optimize()
        for split in ("train", "test"):
            qrels = dataset.qrels(split)
            qids = select_queries(qrels, args.train_queries if split == "train" else None)
            cost: dict[str, list[float]] = {}
            rows = passages(settings, store, embedder, dataset, qrels, qids, report.corpus_ids,
                            settings.store.hybrid_alpha, args.k, cost)
            firsts = [r["relevant"] for r in rows if r["rank"] == 0]
            out[split] = {"queries": len(qids), "passages": len(rows),
                          "ms_per_check": {name: round(1000 * float(np.mean(v)), 1) for name, v in cost.items()},
                          "hybrid_p_at_1": round(sum(firsts) / max(1, len(firsts)), 4), **{
                s: {name: round(v, 4) for name, v in figures(rows, s).items()} for s in SIGNALS}}
            print(split, json.dumps(out[split]), flush=True)
    if args.out:
        args.out.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
