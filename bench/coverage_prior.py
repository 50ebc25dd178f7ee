"""Fit the coverage prior on the Forager's own shown passages (SciFact train, simulated judges, no real LLM).

`bench/judge_credit.py` fits the prior on the store's top 12 hybrid candidates of each claim. The Forager shows a
judge other passages: its retrieval, deep dives into the papers the judge points to, reformulated searches, so the
sets a run's coverage weighs are not those. This bench fits the prior — P(answerable) = sigmoid(a + b x log of the
summed odds + c x best score) over each document's best shown passage (``Ledger.best_shown``), the 12 highest-scoring
as the product reads them (``credit.prior_scores``: fewer made up to 12 at the topic floor) — on what
``forage eval evidence --split train --mode checked --out F`` recorded per query (``best_shown``, ``answerable``),
pooled over the files given (runs with different judges: what a judge is shown depends on its verdicts), the
answerable and the unanswerable requirements weighted to count alike (the prior takes a requirement to be as likely
answerable as not: the share the bench holds out grows with the number of queries, as claims share papers), then
scores every file given with that prior and the judge's rates each run was told: answered (answerable at coverage
>= 0.75), false coverage, ECE. Fit on train files; score test files with ``--score`` (not fitted on).

Usage: python bench/coverage_prior.py --fit train-a.json train-b.json … [--score test-a.json …] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from actors.steps.evaluation.evidence import FALSE_COVERAGE, expected_calibration_error, reliability  # noqa: E402
from actors.steps.forage.credit import JudgeCredit, prior_scores, signal_features  # noqa: E402
from infra.settings import Settings  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from judge_credit import Outcome, fit_logistic  # noqa: E402


def queries(path: Path) -> list[dict]:
    rows = json.loads(path.read_text())["queries"].get("checked", [])
    if rows and "best_shown" not in rows[0]:
        raise SystemExit(f"{path}: no best_shown recorded (run forage eval evidence --mode checked again)")
    return rows


def fit(paths: list[Path], curve: tuple[float, float, float], floor: float) -> tuple[float, float, float]:
    features, labels = [], []
    for path in paths:
        for row in queries(path):
            if row["best_shown"]:  # nothing shown: coverage 0, nothing to fit
                features.append(signal_features(prior_scores([tuple(p) for p in row["best_shown"]], floor), curve))
                labels.append(float(row["answerable"]))
    y = np.array(labels)
    balanced = np.where(y == 1, 0.5 / y.mean(), 0.5 / (1 - y.mean()))  # answerable and not count alike
    a, b, c = fit_logistic(np.array(features), y, weights=balanced)
    return round(a, 3), round(b, 3), round(c, 3)


def scored(path: Path, curve: tuple[float, float, float], prior: tuple[float, float, float], floor: float) -> dict:
    data = json.loads(path.read_text())
    credit = JudgeCredit(*data["judge_rates_told"], curve, prior)
    outcomes = [Outcome(credit.coverage([tuple(p) for p in row["best_shown"]], floor) or 0.0, row["answerable"])
                for row in queries(path)]
    ans = [o.coverage for o in outcomes if o.answerable]
    una = [o.coverage for o in outcomes if not o.answerable]
    return {"file": str(path), "split": data["split"], "llm": data["llm"], "answerable": len(ans),
            "unanswerable": len(una),
            "answered": round(sum(c >= FALSE_COVERAGE for c in ans) / max(1, len(ans)), 3),
            "false": round(sum(c >= FALSE_COVERAGE for c in una) / max(1, len(una)), 3),
            "ece": expected_calibration_error(reliability(outcomes)),  # type: ignore[arg-type]
            "reliability": reliability(outcomes)}  # type: ignore[arg-type]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fit", type=Path, nargs="+", required=True, help="forage eval evidence JSON files (train)")
    ap.add_argument("--score", type=Path, nargs="*", default=[], help="files scored with the fitted prior (test)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--kept", action="store_true", help="also score every file with the prior Forage ships "
                                                        "(Settings.coverage_prior), for comparison")
    args = ap.parse_args()
    settings = Settings.load()
    curve = settings.answer_curve("store")
    if curve is None:
        raise SystemExit("the store signal has no calibration curve for this embedder")
    floor = settings.similarity_floors("store")[1]  # the topic floor: what the Forager shows (Ledger.best_shown)
    prior = fit(args.fit, curve, floor)
    print(f"coverage prior fitted on {len(args.fit)} file(s): P(answerable) = sigmoid({prior[0]} + {prior[1]} "
          f"log-summed-odds + {prior[2]} best)")
    rows = [scored(p, curve, prior, floor) for p in (*args.fit, *args.score)]
    print("file | split | judge | answerable + unanswerable | answered / false / ECE")
    for r in rows:
        print(f"{Path(r['file']).name} | {r['split']} | {r['llm']} | {r['answerable']} + {r['unanswerable']} | "
              f"{r['answered']} / {r['false']} / {r['ece']:.3f}")
    kept = settings.coverage_prior("store")
    if args.kept and kept is not None:
        print(f"with the prior Forage ships, {kept}:")
        for path in (*args.fit, *args.score):
            r = scored(path, curve, kept, floor)
            print(f"{Path(r['file']).name} | {r['split']} | {r['llm']} | {r['answered']} / {r['false']} / "
                  f"{r['ece']:.3f}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"prior": list(prior), "files": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
