"""Calibrate the relevance check's similarity floors on BEIR SciFact train, check them on test.

The check (actors/steps/forage/step.py) compares a passage with its requirement by the cosine similarity of
their embeddings. For every judged query this loads the corpus (the ingest cache makes a second load
cheap: FORAGE_INGEST__CACHE_DIR), takes the top 12 hybrid chunks (what a Forager judges in one start
node) and prints, per split, how the similarity of relevant chunks and of the best non-relevant chunk
are spread, then the floors chosen on train:

* topic floor: the 2nd percentile of relevant chunks' similarity (below it a passage is not shown to the
  judge; about 2 % of relevant chunks are lost);
* answer floor (the default): the 10th percentile of relevant chunks' similarity (90 % of relevant passages
  can be confirmed as answers);
* strict answer floor: the 90th percentile of the best non-relevant chunk's similarity (an unanswerable
  requirement whose judge says "answers" to everything still gets an answer counted in about 10 % of
  queries) — printed to show the trade-off (docs/evidence.md).

Usage: python bench/relevance_floors.py [--beir ../shared/data/beir-scifact] [--train-queries 400] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from actors.steps.evaluation.retrieval import load_beir, load_corpus, select_queries  # noqa: E402
from actors.steps.evaluation.evidence import similarity_profile  # noqa: E402
from infra.embed import build_embedder  # noqa: E402
from infra.settings import Settings  # noqa: E402
from infra.store import build_store  # noqa: E402


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    i = min(len(ordered) - 1, max(0, round(p / 100 * (len(ordered) - 1))))
    return ordered[i]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--beir", type=Path, default=Path(__file__).resolve().parents[2] / "shared/data/beir-scifact")
    ap.add_argument("--k", type=int, default=12)
    ap.add_argument("--train-queries", type=int, default=400, help="First N judged train queries (all: 809).")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    dataset = load_beir(args.beir)
    out: dict[str, object] = {"k": args.k}
    with tempfile.TemporaryDirectory(prefix="forage-floors-") as tmp:
        settings = Settings.load().updated(store={"path": Path(tmp) / "store"})
        store, embedder = build_store(settings), build_embedder(settings)
        report = load_corpus(settings, store, embedder, dataset,
                             progress=lambda n, total, s: print(f"loaded {n}/{total} ({s:.0f} s)", flush=True))
        store.optimize()
        for split in ("train", "test"):
            qrels = dataset.qrels(split)
            limit = args.train_queries if split == "train" else None
            rows = similarity_profile(store, embedder, dataset, qrels, select_queries(qrels, limit),
                                      report.corpus_ids, settings.store.hybrid_alpha, k=args.k)
            rel = [s for r in rows for s in r["relevant"]]
            best_rel = [max(r["relevant"]) for r in rows if r["relevant"]]
            other = [r["best_other"] for r in rows]
            figures = {"queries": len(rows), "with_relevant_in_top_k": len(best_rel),
                       "relevant_p2": percentile(rel, 2), "relevant_p10": percentile(rel, 10),
                       "relevant_p50": percentile(rel, 50), "best_other_p50": percentile(other, 50),
                       "best_other_p90": percentile(other, 90), "best_other_p95": percentile(other, 95)}
            if split == "train":
                out["floors"] = {"topic_similarity": round(figures["relevant_p2"], 2),
                                 "answer_similarity": round(figures["relevant_p10"], 2),
                                 "strict_answer_similarity": round(figures["best_other_p90"], 2)}
            floors: dict[str, float] = out["floors"]  # type: ignore[assignment]
            topic = floors["topic_similarity"]
            figures["relevant_kept_by_topic_floor"] = round(sum(s >= topic for s in rel) / max(1, len(rel)), 4)
            for name in ("answer_similarity", "strict_answer_similarity"):
                answer = floors[name]
                figures[f"best_relevant_passes_{name}"] = round(
                    sum(s >= answer for s in best_rel) / max(1, len(best_rel)), 4)
                figures[f"best_other_passes_{name}"] = round(sum(s >= answer for s in other) / max(1, len(other)), 4)
            out[split] = {k: round(v, 4) if isinstance(v, float) else v for k, v in figures.items()}
            print(split, json.dumps(out[split]), flush=True)
    print("floors (from train):", json.dumps(out["floors"]))
    if args.out:
        args.out.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
