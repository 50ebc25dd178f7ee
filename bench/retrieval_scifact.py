"""Retrieval quality of Forage's store on BEIR SciFact (5,183 abstracts, 300 test queries).

    .venv/bin/python bench/retrieval_scifact.py                 # load, evaluate test, tune on train
    .venv/bin/python bench/retrieval_scifact.py --store .forage/eval/scifact   # keep the loaded store
    .venv/bin/python bench/retrieval_scifact.py --no-tune --limit-queries 50    # a quick look

Runs ``forage eval retrieval`` (the command itself, in a subprocess) on ``../shared/data/beir-scifact``
(or ``--beir DIR``), writes ``bench/results/scifact-<time>.json`` and prints the figures next to the
published nDCG@10 references. Nothing here computes a metric: the figures are the command's own.
Loading the corpus embeds ~10,000 chunks with MiniLM on the CPU: tens of minutes on a small machine.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DEFAULT_BEIR = REPO.parent / "shared" / "data" / "beir-scifact"

# Published nDCG@10 on SciFact test: BM25 from the BEIR paper (Thakur et al., 2021; Elasticsearch over title
# and text); all-MiniLM-L6-v2 from the sentence-transformers / MTEB figures; hybrid goal from issue 5.
REFERENCES = {"bm25": 0.665, "dense": 0.64, "hybrid": 0.72}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--beir", type=Path, default=DEFAULT_BEIR, help="BEIR SciFact folder")
    parser.add_argument("--store", type=Path, default=None, help="keep the loaded store here (reused next time)")
    parser.add_argument("--limit-queries", type=int, default=None, help="evaluate the first N test queries only")
    parser.add_argument("--tune-limit", type=int, default=None, help="tune on the first N train queries only")
    parser.add_argument("--no-tune", action="store_true", help="skip the alpha × fusion grid search on train")
    parser.add_argument("--out", type=Path, default=None, help="results JSON (default bench/results/...)")
    args = parser.parse_args(argv)

    if not (args.beir / "corpus.jsonl").is_file():
        print(f"SciFact not found at {args.beir} (expected corpus.jsonl there); pass --beir DIR", file=sys.stderr)
        return 2
    out = args.out or REPO / "bench" / "results" / f"scifact-{time.strftime('%Y%m%d-%H%M%S')}.json"
    command = [sys.executable, "-m", "gateway.cli", "eval", "retrieval", "--beir", str(args.beir), "--split", "test",
               "--k", "10", "--out", str(out)]
    if args.store is not None:
        command += ["--store", str(args.store)]
    if args.limit_queries is not None:
        command += ["--limit-queries", str(args.limit_queries)]
    if not args.no_tune:
        command += ["--tune", "--tune-split", "train"]
        if args.tune_limit is not None:
            command += ["--tune-limit", str(args.tune_limit)]
    print("$", " ".join(command), flush=True)
    code = subprocess.call(command, cwd=REPO)
    if code != 0:
        return code

    results = json.loads(out.read_text(encoding="utf-8"))
    print(f"\nSciFact {results['split']}: {results['n_queries']} queries, {results['n_docs']:,} documents, "
          f"{results['n_chunks']:,} chunks; load {results['timings']['load_s']:.0f} s")
    print(f"{'mode':<8} {'nDCG@10':>8} {'published':>10} {'R@10':>7} {'P@5':>7} {'MRR@10':>7} {'ms/query':>9}")
    for mode, metrics in results["metrics"].items():
        print(f"{mode:<8} {metrics['ndcg@10']:>8.4f} {REFERENCES[mode]:>10.3f} {metrics['recall@10']:>7.4f} "
              f"{metrics['p@5']:>7.4f} {metrics['mrr@10']:>7.4f} {results['timings']['per_query_ms'][mode]:>9.1f}")
    tune = results.get("tune")
    if tune:
        best, test = tune["best"], tune[results["split"]]
        print(f"tuned on {tune['split']} ({tune['n_queries']} queries): alpha={best['alpha']} {best['fusion']} "
              f"(train nDCG@10 {best['ndcg@10']:.4f}) → test nDCG@10 {test['ndcg@10']:.4f}")
    hybrid = max([results["metrics"].get("hybrid", {}).get("ndcg@10", 0.0)]
                 + ([tune[results["split"]]["ndcg@10"]] if tune else []))
    verdict = "meets" if hybrid >= REFERENCES["hybrid"] else "is below"
    print(f"hybrid nDCG@10 {hybrid:.4f} {verdict} the issue's goal of {REFERENCES['hybrid']}")
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
