"""What is the retrieval signal worth beside a judge of known quality? (SciFact, no LLM)

Fits the signal's calibration curve — P(a passage is from a relevant paper | x), x = the store's score + 0.4 x word
share, the relevance check's confirmation score — by logistic regression over the top ``--k`` hybrid chunks of every
judged SciFact **train** claim (its relevant papers in the store), the curve ``Settings.answer_curve`` holds
(actors/steps/forage/credit.py). Then, on train and on test, prints how well the curve is calibrated (candidates
binned by predicted probability: mean predicted against share relevant) and what the check would credit for simulated
judges of known rates: each candidate the judge is shown (from the topic floor on) is called an answer with
probability TPR (relevant) or FPR (other), seeded per claim and chunk, and counts when it passes the floors moved down
by the judge's relief. Answered = answerable claims with a counted candidate, hit = with a counted relevant one,
false = claims with a counted candidate once their relevant papers are left out (top ``--k`` of the rest).

Then fits a coverage prior on these candidates (P(answerable) from the shown candidates' scores — the log of their
summed odds under the curve and the best score — by logistic regression over every train claim, once with its
relevant papers and once without; one candidate per document, its best) and prints, per judge, what a requirement's
coverage as a probability (``JudgeCredit.coverage``: the prior times the Bayes factor of the judge's verdicts) gives
on train and test. (``Settings.coverage_prior`` is fitted on the Forager's own shown passages instead:
bench/coverage_prior.py.) Figures:
answered (answerable claims at coverage >= 0.75), false coverage (unanswerable ones at >= 0.75), mean coverage of
each, and the expected calibration error against the share answerable (the bins of ``forage eval evidence``).

Usage: FORAGE_INGEST__CACHE_DIR=… python bench/judge_credit.py --store DIR [--beir DIR] [--k 12] [--out FILE]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from actors.steps.evaluation.retrieval import load_beir, load_corpus, select_queries  # noqa: E402
from actors.steps.evaluation.evidence import expected_calibration_error, reliability as coverage_bins  # noqa: E402
from actors.steps.forage.credit import JudgeCredit, signal_features  # noqa: E402
from actors.steps.plan.requirements import content_words, word_share  # noqa: E402
from infra.embed import build_embedder  # noqa: E402
from infra.calibrated import CONFIRM_WORD_WEIGHT  # noqa: E402
from infra.settings import Settings  # noqa: E402
from infra.store import build_store  # noqa: E402

JUDGES = ((1.0, 1.0), (1.0, 0.0), (0.8, 0.2), (0.6, 0.4))  # (1, 1): a yes-man, whose word carries nothing
# the judges the penalty is chosen for: on train, false coverage <= FALSE_MAX for every one of them
PENALTY_JUDGES = ((0.95, 0.05), (0.9, 0.1), (0.8, 0.2), (0.7, 0.3), (0.6, 0.4))
FALSE_MAX = 0.10
PENALTIES = tuple(round(0.1 * n, 1) for n in range(41))


def profile(store, embedder, dataset, qrels, qids, corpus_ids, alpha: float, k: int) -> list[dict]:
    """Per claim: its top ``k`` hybrid candidates (answerable) and the top ``k`` once its relevant papers are left out
    (unanswerable), each with its store score, word share and relevance."""
    rows = []
    vectors = embedder.embed([dataset.queries[q] for q in qids]) if qids else []
    for q, vector in zip(qids, vectors, strict=True):
        claim = dataset.queries[q]
        relevant = {c for c, g in qrels[q].items() if g > 0}
        hits = store.hybrid(claim, vector, k + 8, alpha)
        scores = store.similarity(vector, [h.chunk.chunk_id for h in hits])
        words = content_words(claim)
        cands = [{"chunk": h.chunk.chunk_id, "sim": scores.get(h.chunk.chunk_id, -1.0),
                  "share": word_share(words, h.chunk.text),
                  "relevant": bool(relevant & set(corpus_ids.get(h.chunk.doc_id, [])))} for h in hits]
        rows.append({"qid": q, "answerable": cands[:k], "unanswerable": [c for c in cands if not c["relevant"]][:k]})
    return rows


def score(c: dict) -> float:
    return c["sim"] + CONFIRM_WORD_WEIGHT * c["share"]


def fit_logistic(x: np.ndarray, y: np.ndarray, steps: int = 100, weights: np.ndarray | None = None
                 ) -> tuple[float, ...]:
    """(intercept, slope per column of x) maximising the (weighted) likelihood of y ~ sigmoid(a + x b) (Newton's
    method)."""
    design = np.hstack([np.ones((len(x), 1)), x.reshape(len(x), -1)])
    weight = np.ones(len(y)) if weights is None else weights
    w = np.zeros(design.shape[1])
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-design @ w))
        gradient = design.T @ (weight * (y - p))
        hessian = (design * (weight * p * (1 - p))[:, None]).T @ design
        step = np.linalg.solve(hessian + 1e-9 * np.eye(len(w)), gradient)
        w += step
        if np.abs(step).max() < 1e-10:
            break
    return tuple(float(v) for v in w)


@dataclass
class Outcome:  # what the reliability bins of `forage eval evidence` read of a requirement
    coverage: float
    answerable: bool


def best_per_document(cands: list[dict], topic: float) -> list[dict]:
    """The candidates shown from the topic floor on, one per document (chunk ids are "<doc>:<n>"): its best-scoring,
    as the ledger weighs them (Ledger.best_shown)."""
    best: dict[str, dict] = {}
    for c in cands:
        doc = c["chunk"].rsplit(":", 1)[0]
        if c["sim"] >= topic and (doc not in best or score(c) > score(best[doc])):
            best[doc] = c
    return list(best.values())


def claim_versions(rows: list[dict]) -> list[tuple[str, list[dict], bool]]:
    """Every claim twice: (qid, its candidates, answerable) with its relevant papers and without."""
    return [(r["qid"], r[side], side == "answerable") for r in rows for side in ("answerable", "unanswerable")]


def fit_prior(rows: list[dict], curve: tuple[float, float, float], topic: float) -> tuple[float, float, float]:
    """The coverage prior, fitted on ``rows`` (train): P(answerable | the shown candidates' signal features)."""
    features, labels = [], []
    for _, cands, answerable in claim_versions(rows):
        scores = [score(c) for c in best_per_document(cands, topic)]
        if scores:  # nothing shown: coverage 0, nothing to fit
            features.append(signal_features(scores, curve))
            labels.append(float(answerable))
    a, b, c = fit_logistic(np.array(features), np.array(labels))
    return round(a, 3), round(b, 3), round(c, 3)


def coverage_figures(rows: list[dict], credit: JudgeCredit, topic: float) -> dict:
    """Coverage as a probability (JudgeCredit.coverage) of every claim version, judged by a simulated judge of the
    credit's rates: answered, false coverage, mean coverage and ECE."""
    outcomes = [Outcome(credit.coverage([(score(c), judged(q, c["chunk"], c["relevant"], credit.tpr, credit.fpr))
                                         for c in best_per_document(cands, topic)]) or 0.0, answerable)
                for q, cands, answerable in claim_versions(rows)]
    ans = [o.coverage for o in outcomes if o.answerable]
    una = [o.coverage for o in outcomes if not o.answerable]
    return {"answered": round(sum(c >= 0.75 for c in ans) / len(ans), 3),
            "false": round(sum(c >= 0.75 for c in una) / len(una), 3),
            "coverage_answerable": round(sum(ans) / len(ans), 3),
            "coverage_unanswerable": round(sum(una) / len(una), 3),
            "ece": expected_calibration_error(coverage_bins(outcomes))}  # type: ignore[arg-type]


def reliability(rows: list[dict], curve: tuple[float, ...], bins: int = 5) -> list[dict]:
    """Candidates binned by predicted probability: count, mean predicted, share relevant."""
    cands = [c for r in rows for c in r["answerable"]]
    p = [1.0 / (1.0 + math.exp(-(curve[0] + curve[1] * score(c)))) for c in cands]
    out = []
    for n in range(bins):
        lo, hi = n / bins, (n + 1) / bins
        inside = [(pi, c["relevant"]) for pi, c in zip(p, cands, strict=True) if lo <= pi < hi or (hi == 1 and pi == 1)]
        if inside:
            out.append({"bin": f"{lo:.1f}-{hi:.1f}", "n": len(inside),
                        "predicted": round(sum(pi for pi, _ in inside) / len(inside), 3),
                        "relevant": round(sum(r for _, r in inside) / len(inside), 3)})
    return out


def judged(q: str, chunk: str, relevant: bool, tpr: float, fpr: float, seed: int = 0) -> bool:
    draw = int.from_bytes(hashlib.sha256(f"{seed}\0{q}\0{chunk}".encode()).digest()[:8], "big") / 2**64
    return draw < (tpr if relevant else fpr)


def credited(rows: list[dict], credit: JudgeCredit, floors: tuple[float, float], confirmation: float) -> dict:
    relief = credit.relief()
    answer_at, confirm_at = floors[0] - relief, confirmation - relief

    def counts(q: str, c: dict) -> bool:
        return (c["sim"] >= floors[1] - relief and judged(q, c["chunk"], c["relevant"], credit.tpr, credit.fpr)
                and c["sim"] >= answer_at and score(c) >= confirm_at)

    answered = hit = false = 0
    for r in rows:
        passing = [c for c in r["answerable"] if counts(r["qid"], c)]
        answered += bool(passing)
        hit += any(c["relevant"] for c in passing)
        false += any(counts(r["qid"], c) for c in r["unanswerable"])
    n = max(1, len(rows))
    return {"relief": round(relief, 4), "answered": round(answered / n, 3), "hit": round(hit / n, 3),
            "false": round(false / n, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--beir", type=Path, default=Path(__file__).resolve().parents[2] / "shared/data/beir-scifact")
    ap.add_argument("--store", type=Path, required=True, help="a SciFact store with sentence windows "
                                                               "(`forage eval retrieval --store`)")
    ap.add_argument("--k", type=int, default=12)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    dataset = load_beir(args.beir)
    settings = Settings.load().updated(store={"path": args.store})
    store, embedder = build_store(settings), build_embedder(settings)
    if settings.relevance_signal(store.keeps_windows) != "store":
        raise SystemExit("the store keeps no sentence windows: its score is not the check's signal")
    cache = args.store / f"judge-credit-rows-{args.k}.json"  # the candidates: a re-run fits without searching
    splits = json.loads(cache.read_text()) if cache.exists() else {}
    if not splits:
        report = load_corpus(settings, store, embedder, dataset)  # a full store: every document skipped
        for split in ("train", "test"):
            qrels = dataset.qrels(split)
            qids = select_queries(qrels, len(qrels))
            splits[split] = profile(store, embedder, dataset, qrels, qids, report.corpus_ids,
                                    settings.store.hybrid_alpha, args.k)
        cache.write_text(json.dumps(splits))
    train = [c for r in splits["train"] for c in r["answerable"]]
    a, b = fit_logistic(np.array([score(c) for c in train]), np.array([float(c["relevant"]) for c in train]))
    floors, confirmation = settings.similarity_floors("store"), settings.answer_confirmation("store")
    assert confirmation is not None
    # the penalty: the least that keeps false coverage within FALSE_MAX on train for every judge of PENALTY_JUDGES
    penalty = next(p for p in PENALTIES if all(
        credited(splits["train"], JudgeCredit(t, f, (a, b, p)), floors, confirmation)["false"] <= FALSE_MAX
        for t, f in PENALTY_JUDGES))
    curve = (a, b, penalty)
    out: dict = {"k": args.k, "queries": {s: len(r) for s, r in splits.items()},
                 "candidates_train": len(train), "curve": [round(a, 4), round(b, 4), penalty],
                 "floors": list(floors), "confirmation": confirmation, "reliability": {}, "judges": []}
    print(f"queries {out['queries']}; curve on train ({len(train)} candidates): "
          f"P(relevant) = sigmoid({a:.3f} + {b:.3f} x); penalty {penalty} (false <= {FALSE_MAX} on train for "
          f"{PENALTY_JUDGES})")
    for split, rows in splits.items():
        out["reliability"][split] = reliability(rows, curve)
        print(split, "reliability (bin, n, predicted, share relevant):",
              "; ".join(f"{b['bin']} {b['n']} {b['predicted']:.3f} {b['relevant']:.3f}"
                        for b in out["reliability"][split]))
    print("judge (TPR, FPR) | relief | train answered / hit / false | test answered / hit / false")
    for tpr, fpr in (*JUDGES, *PENALTY_JUDGES):
        credit = JudgeCredit(tpr, fpr, curve)
        tr, te = (credited(splits[s], credit, floors, confirmation) for s in ("train", "test"))
        out["judges"].append({"tpr": tpr, "fpr": fpr, "train": tr, "test": te})
        print(f"({tpr}, {fpr}) | {tr['relief']:.3f} | {tr['answered']} / {tr['hit']} / {tr['false']} | "
              f"{te['answered']} / {te['hit']} / {te['false']}")
    prior = fit_prior(splits["train"], curve, floors[1])
    out["prior"] = list(prior)
    out["coverage"] = []
    print(f"coverage prior on train (top {args.k}): P(answerable) = sigmoid({prior[0]} + {prior[1]} log-summed-odds + "
          f"{prior[2]} best)")
    print("judge (TPR, FPR) | train answered / false / ECE / mean answerable, unanswerable | test the same")
    for tpr, fpr in (*JUDGES, (0.95, 0.05), (0.9, 0.1), (0.7, 0.3)):
        credit = JudgeCredit(tpr, fpr, curve, prior)
        tr, te = (coverage_figures(splits[s], credit, floors[1]) for s in ("train", "test"))
        out["coverage"].append({"tpr": tpr, "fpr": fpr, "train": tr, "test": te})
        print(f"({tpr}, {fpr}) | " + " | ".join(
            f"{f['answered']} / {f['false']} / {f['ece']:.3f} / {f['coverage_answerable']:.2f}, "
            f"{f['coverage_unanswerable']:.2f}" for f in (tr, te)))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
