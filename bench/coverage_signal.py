"""Which retrieval signal tells an answerable requirement from an unanswerable one? (SciFact, no LLM)

Coverage is credited when a passage the judge calls "answers" passes the relevance check. With a weak judge that
calls nearly everything an answer, what decides false coverage is the check alone: does some candidate pass it
when the library holds no relevant paper? bench/lexical_signal.py compared per-passage signals against the
distractors of a query whose relevant papers are present; this bench sets up what `forage eval evidence` measures
— the relevant papers removed — for every judged query of both splits, and compares per-passage rules that look
at the passage alone (its cosine similarity to the claim, its idf-weighted word share) with rules that also look
at the other candidates of the same query (how far the passage stands out of them: query-performance-prediction
signals, which need no model and no corpus statistics).

For each judged query: the top ``--k`` hybrid chunks of the store (answerable) and the top ``--k`` chunks once the
query's relevant documents are left out (unanswerable). A rule "answers" a query when some candidate passes.
Printed per rule and split: answered (answerable queries with a passing candidate), hit (answerable queries whose
best passing candidate is from a relevant paper) and false (unanswerable queries with a passing candidate). For
each family the threshold is chosen on train as the loosest that keeps false <= ``--false`` there, then applied
to test.

Usage: FORAGE_INGEST__CACHE_DIR=… python bench/coverage_signal.py [--beir DIR] [--k 12] [--signal text|store]
       [--store DIR] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import pickle
import statistics
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from actors.steps.evaluation.retrieval import load_beir, load_corpus, select_queries  # noqa: E402
from actors.steps.plan.requirements import _STOP_WORDS, _WORD, content_words, word_share  # noqa: E402
from infra.embed import build_embedder  # noqa: E402
from infra.settings import Settings  # noqa: E402
from infra.store import build_store  # noqa: E402
from bench.lexical_signal import corpus_idf  # noqa: E402

Rule = Callable[[dict], float]  # a candidate's score under a family; it passes at score >= threshold

def content_stems(text: str) -> set[str]:
    """The Snowball (English) stems of the content words of ``text`` (alphabetic, 3+ letters, not a stop word, as
    ``content_words``, whose 5-letter keys part "tracing" from "trace"): the stemmed word share tried on 2026-11-26
    (not kept: no better on train, worse on test)."""
    import snowballstemmer

    words = [w.casefold() for w in _WORD.findall(text)]
    return set(snowballstemmer.stemmer("english").stemWords([w for w in words if len(w) >= 3 and w not in _STOP_WORDS]))


def stem_share(wanted: set[str], text: str) -> float:
    return len(wanted & content_stems(text)) / len(wanted) if wanted else 0.0


FAMILIES: dict[str, Rule] = {
    "sim": lambda c: c["sim"],
    "sim - mean(others)": lambda c: c["sim"] - c["mean"],
    "z (sim vs others)": lambda c: (c["sim"] - c["mean"]) / c["sd"] if c["sd"] else 0.0,
    "sim + 0.5 (sim - mean)": lambda c: c["sim"] + 0.5 * (c["sim"] - c["mean"]),
    "sim + (sim - mean)": lambda c: c["sim"] + (c["sim"] - c["mean"]),
    "sim + 0.4 share": lambda c: c["sim"] + 0.4 * c["share"],
    "sim + 0.4 idf_share": lambda c: c["sim"] + 0.4 * c["idf_share"],
    "sim + 0.3 stem_share": lambda c: c["sim"] + 0.3 * c["stem_share"],
    "sim + 0.4 stem_share": lambda c: c["sim"] + 0.4 * c["stem_share"],
    "sim + 0.5 stem_share": lambda c: c["sim"] + 0.5 * c["stem_share"],
    "sim + (sim - mean) + 0.4 share": lambda c: c["sim"] + (c["sim"] - c["mean"]) + 0.4 * c["share"],
    "sim + 0.5 (sim - mean) + 0.4 share": lambda c: c["sim"] + 0.5 * (c["sim"] - c["mean"]) + 0.4 * c["share"],
    "sim + (sim - mean) + 0.4 idf_share": lambda c: c["sim"] + (c["sim"] - c["mean"]) + 0.4 * c["idf_share"],
    "sim, top 5 of both searches": lambda c: c["sim"] if max(c["bm25_rank"], c["vector_rank"]) <= 5 else -1.0,
    "sim + (sim - mean), top 5 of both": lambda c: (c["sim"] + (c["sim"] - c["mean"])
                                                    if max(c["bm25_rank"], c["vector_rank"]) <= 5 else -1.0),
}


def candidates(hits: list, sims: list[float], shares: list[tuple[float, float, float]], relevant: set[str],
               corpus_ids: dict[str, list[str]], k: int, lexical: dict[str, int],
               semantic: dict[str, int]) -> list[dict]:
    """The first ``k`` hits as candidates, each with its similarity, idf share, relevance, its ranks in the BM25
    and the vector search, and the mean and standard deviation of the other candidates' similarities."""
    hits, sims, shares = hits[:k], sims[:k], shares[:k]
    out = []
    for i, hit in enumerate(hits):
        others = sims[:i] + sims[i + 1:]
        cid = hit.chunk.chunk_id
        out.append({"sim": sims[i], "idf_share": shares[i][0], "share": shares[i][1], "stem_share": shares[i][2],
                    "bm25_rank": lexical.get(cid, 99),
                    "vector_rank": semantic.get(cid, 99),
                    "mean": statistics.fmean(others) if others else 0.0,
                    "sd": statistics.pstdev(others) if len(others) > 1 else 0.0,
                    "relevant": bool(relevant & set(corpus_ids.get(hit.chunk.doc_id, [])))})
    return out


def profile(store, embedder, dataset, qrels, qids, corpus_ids, alpha: float, k: int,
            idf: Callable[[str], float], vectors: dict[str, list[float]], signal: str = "text") -> list[dict]:
    """Per query, its answerable and unanswerable candidates; ``signal``: the similarity is the cosine of the claim
    and the chunk text embedded again (``text``) or the store's own score of the chunk (``store``: its vector or best
    sentence window, :meth:`Store.similarity`)."""
    rows = []
    for q, vector in zip(qids, embedder.embed([dataset.queries[q] for q in qids]) if qids else [], strict=True):
        claim = dataset.queries[q]
        relevant = {c for c, g in qrels[q].items() if g > 0}
        relevant_docs = {d for d, ids in corpus_ids.items() if relevant & set(ids)}
        hits = store.hybrid(claim, vector, k + 8, alpha)  # k once the relevant papers (1-2 chunks each) are out
        if signal == "store":
            stored = store.similarity(vector, [h.chunk.chunk_id for h in hits])
            sims = [stored[h.chunk.chunk_id] for h in hits]
        else:
            new = [h.chunk for h in hits if h.chunk.chunk_id not in vectors]
            for chunk, v in zip(new, embedder.embed([c.text for c in new]) if new else [], strict=True):
                vectors[chunk.chunk_id] = list(v)
            sims = [sum(a * b for a, b in zip(vectors[h.chunk.chunk_id], vector, strict=True)) for h in hits]
        words = content_words(claim)
        idf_total = sum(idf(w) for w in words)
        stems = content_stems(claim)
        # (IDF-weighted share, the 5-letter-key word share and the stemmed share: actors.steps.plan.requirements)
        shares = [(sum(idf(w) for w in words & content_words(h.chunk.text)) / idf_total if idf_total else 0.0,
                   word_share(words, h.chunk.text), stem_share(stems, h.chunk.text)) for h in hits]
        kept = [i for i, h in enumerate(hits) if h.chunk.doc_id not in relevant_docs]
        pool = 4 * (k + 8)

        def ranks(found: list, skip: set[str]) -> dict[str, int]:
            order = [h.chunk.chunk_id for h in found if h.chunk.doc_id not in skip]
            return {cid: n for n, cid in enumerate(order, start=1)}

        lexical, semantic = store.bm25(claim, pool), store.vector(vector, pool)
        rows.append({
            "qid": q,
            "answerable": candidates(hits, sims, shares, relevant, corpus_ids, k, ranks(lexical, set()),
                                     ranks(semantic, set())),
            "unanswerable": candidates([hits[i] for i in kept], [sims[i] for i in kept], [shares[i] for i in kept],
                                       relevant, corpus_ids, k, ranks(lexical, relevant_docs),
                                       ranks(semantic, relevant_docs))})
    return rows


def rates(rows: list[dict], score: Rule, threshold: float) -> dict[str, float]:
    answered = hit = false = 0
    for row in rows:
        passing = [c for c in row["answerable"] if score(c) >= threshold]
        answered += bool(passing)
        hit += bool(passing) and max(passing, key=score)["relevant"]
        false += any(score(c) >= threshold for c in row["unanswerable"])
    n = max(1, len(rows))
    return {"answered": round(answered / n, 3), "hit": round(hit / n, 3), "false": round(false / n, 3)}


def loosest(rows: list[dict], score: Rule, false_max: float) -> float:
    """The lowest threshold (just above a query's best unanswerable score) that keeps false <= ``false_max`` on
    ``rows``; -inf when every query may pass falsely."""
    per_query = sorted((max(score(c) for c in row["unanswerable"]) for row in rows if row["unanswerable"]),
                       reverse=True)
    allowed = math.floor(false_max * len(rows))  # queries that may pass falsely
    return per_query[allowed] + 1e-9 if allowed < len(per_query) else -math.inf


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--beir", type=Path, default=Path(__file__).resolve().parents[2] / "shared/data/beir-scifact")
    ap.add_argument("--k", type=int, default=12)
    ap.add_argument("--false", type=float, default=0.10, dest="false_max")
    ap.add_argument("--train-queries", type=int, default=200)
    ap.add_argument("--test-queries", type=int, default=150)
    ap.add_argument("--signal", choices=("text", "store"), default="text",
                    help="the similarity: the chunk text embedded again (the check before 2026-11-27) or the "
                         "store's own score of the chunk (its vector or best sentence window)")
    ap.add_argument("--store", type=Path, default=None,
                    help="a SciFact store `forage eval retrieval --store` loaded (else one is loaded into a "
                         "temporary folder)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    dataset = load_beir(args.beir)
    idf = corpus_idf(dataset)

    splits: dict[str, list[dict]] = {}
    cache = Path(tempfile.gettempdir()) / "forage-coverage-signal-vectors.pkl"  # chunk vectors: a re-run is quick
    vectors: dict[str, list[float]] = pickle.loads(cache.read_bytes()) if cache.exists() else {}
    with tempfile.TemporaryDirectory(prefix="forage-coverage-") as tmp:
        settings = Settings.load().updated(store={"path": args.store or Path(tmp) / "store"})
        store, embedder = build_store(settings), build_embedder(settings)
        report = load_corpus(settings, store, embedder, dataset)
        store.optimize()
        for split in ("train", "test"):
            qrels = dataset.qrels(split)
            qids = select_queries(qrels, args.train_queries if split == "train" else args.test_queries)
            splits[split] = profile(store, embedder, dataset, qrels, qids, report.corpus_ids,
                                    settings.store.hybrid_alpha, args.k, idf, vectors, args.signal)
            cache.write_bytes(pickle.dumps(vectors))
    out: dict[str, object] = {"k": args.k, "false_max": args.false_max, "signal": args.signal,
                              "queries": {s: len(r) for s, r in splits.items()}, "families": []}
    print(f"signal: {args.signal}; queries: {out['queries']}; threshold chosen on train for false <= {args.false_max}")
    print("family | threshold | train answered / hit / false | test answered / hit / false")
    for name, score in FAMILIES.items():
        t = loosest(splits["train"], score, args.false_max)
        row = {"family": name, "threshold": round(t, 4),
               **{split: rates(rows, score, t) for split, rows in splits.items()}}
        out["families"].append(row)  # type: ignore[union-attr]
        tr, te = row["train"], row["test"]
        print(f"{name} | {t:.3f} | {tr['answered']} / {tr['hit']} / {tr['false']} | "
              f"{te['answered']} / {te['hit']} / {te['false']}")
    if args.out:
        args.out.write_text(json.dumps(out, indent=2) + "\n")
        args.out.with_suffix(".rows.json").write_text(json.dumps(splits) + "\n")


if __name__ == "__main__":
    main()
