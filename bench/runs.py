"""Whole research runs over a labelled suite, scored without an LLM (see docs/evaluation-runs.md).

Runs each query of a run suite end to end (plan → loop → report, offline over the suite's library, requirements
accepted as with --yes) and prints, per query and in total, requirement fidelity, answering files read in
iteration 1 and cited, cited-file precision, coverage on answerable vs unanswerable queries, false coverage,
iterations, iterations that read nothing new, LLM calls and wall time. The same as `forage eval runs`.

Usage: python bench/runs.py [SUITE.yaml] [--plan-only] [--limit N] [--preset quick] [--llm embedded|ollama|openai]
       [--model NAME] [--out FILE.json]     (default suite: bench/suites/library.yaml)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from actors.steps.evaluation.runs import load_run_suite  # noqa: E402
from gateway.eval_runs import columns, run_suite_runs, table_rows, totals_lines  # noqa: E402
from infra.settings import Settings, settings_for_run  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("suite", type=Path, nargs="?", default=Path(__file__).resolve().parent / "suites/library.yaml")
    ap.add_argument("--plan-only", action="store_true")
    ap.add_argument("--limit", type=int)
    ap.add_argument("--preset", choices=("quick", "standard", "deep"))
    ap.add_argument("--llm", choices=("embedded", "ollama", "openai"), default="embedded")
    ap.add_argument("--model")
    ap.add_argument("--runs-dir", type=Path)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    suite = load_run_suite(args.suite)
    settings = settings_for_run(Settings.load(), preset=args.preset, llm_backend=args.llm, model=args.model,
                                runs_dir=args.runs_dir, offline=True)
    result = run_suite_runs(settings, suite, plan_only=args.plan_only, limit=args.limit,
                            progress=lambda i, n, q: print(f"{i}/{n} {q}", file=sys.stderr, flush=True))
    print("\t".join(columns(result)))
    for cells in table_rows(result):
        print("\t".join(cells))
    print()
    for label, value in totals_lines(result):
        print(f"{label}: {value}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False, default=str) + "\n", encoding="utf-8")
        print(f"results: {args.out}")


if __name__ == "__main__":
    main()
