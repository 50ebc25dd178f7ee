"""Evidence quality of the real Forager on BEIR SciFact, scored without an LLM (see docs/evidence.md).

Each test query is one requirement; half of them (by --seed) have every relevant document removed from the
store. Prints, per mode (judge: the judge's word alone; checked: the relevance check on), evidence hit rate,
evidence recall, coverage on answerable and unanswerable requirements, false coverage, LLM calls and wall
time, the hybrid retrieval's own P@1, and a sweep of the answer floor. The same as `forage eval evidence`.

Usage: python bench/evidence.py [--beir DIR] [--queries 50] [--seed 0] [--llm embedded|ollama] [--model NAME]
       [--out FILE.json]   (FORAGE_INGEST__CACHE_DIR makes the corpus load cheap after the first time)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from actors.steps.evaluation.evidence import evaluate_evidence  # noqa: E402
from infra.settings import Settings, settings_for_run  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--beir", type=Path, default=Path(__file__).resolve().parents[2] / "shared/data/beir-scifact")
    ap.add_argument("--queries", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--llm", choices=("embedded", "ollama"), default="embedded")
    ap.add_argument("--model")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    settings = settings_for_run(Settings.load(), llm_backend=args.llm, model=args.model)
    if settings.llm.backend == "embedded":
        settings = settings.updated(llm={"n_ctx": 4096, "max_tokens": 512})
    out = evaluate_evidence(settings, args.beir, n_queries=args.queries, seed=args.seed,
                            progress=lambda mode, n, total, o: print(
                                f"{mode} {n}/{total} {o.qid}: coverage {o.coverage:.2f} "
                                f"{'answerable' if o.answerable else 'unanswerable'} hit {o.hit} "
                                f"({o.seconds:.0f} s)", flush=True))
    print(f"{out['answerable']} answerable + {out['unanswerable']} unanswerable · {out['llm']} · retrieval P@1 "
          f"{out['retrieval_p1']}")
    for mode, figures in out["modes"].items():
        print(mode, json.dumps(figures))
    for row in out.get("answer_floor_sweep", []):
        print("sweep", json.dumps(row))
    if args.out:
        args.out.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
