"""Would a lexical signal beside embedding similarity tell an answer from an on-topic distractor? (SciFact)

The relevance check (actors/steps/forage/step.py) confirms an "answers" by the cosine similarity of the passage and the
requirement. On SciFact a claim's best non-relevant passage is as similar to it as the relevant one
(bench/relevance_floors.py), so a floor strict enough to let through few distractors loses most answers. This
bench asks whether the words the claim and the passage share add what the embedding misses. For each judged
query it takes the top ``--k`` hybrid chunks (what a Forager's start node judges) and computes, per chunk:

* ``sim``: the check's signal (MiniLM cosine of claim and chunk);
* ``share``: the share of the claim's content words (actors.steps.plan.requirements.content_words) in the chunk;
* ``idf_share``: the same, each word weighted by its inverse document frequency in the corpus;
* ``local_share``: weighted by how rare the word is among the query's own candidates (what a Forager could
  compute without corpus statistics).

For each rule it prints, per split, the share of queries with a relevant chunk in the top k for which a relevant
chunk passes ("answered") and the share of queries for which a non-relevant chunk passes ("false": what an
unanswerable requirement whose judge says "answers" to everything would be credited with), and, for
``sim + w * signal``, the threshold that keeps "false" at or below 10 % on train with the share answered there
and on test.

Usage: FORAGE_INGEST__CACHE_DIR=… python bench/lexical_signal.py [--beir DIR] [--train-queries 400] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from actors.steps.evaluation.retrieval import load_beir, load_corpus, select_queries  # noqa: E402
from actors.steps.plan.requirements import content_words  # noqa: E402
from infra.embed import build_embedder  # noqa: E402
from infra.settings import Settings  # noqa: E402
from infra.store import build_store  # noqa: E402

SIGNALS = ("share", "idf_share", "local_share")


def corpus_idf(dataset) -> Callable[[str], float]:  # noqa: ANN001 - a BeirDataset
    """A content word's inverse document frequency over the dataset's corpus (title and text)."""
    df: dict[str, int] = {}
    for title, text in dataset.corpus.values():
        for w in content_words(f"{title} {text}"):
            df[w] = df.get(w, 0) + 1
    n = len(dataset.corpus)

    def idf(word: str) -> float:
        return math.log((n + 1) / (df.get(word, 0) + 1)) + 1

    return idf


def rates(rows: list[dict], rule: Callable[[dict], bool]) -> tuple[float, float]:
    """(answered, false) for ``rule`` over ``rows`` (see the module docstring)."""
    with_relevant = [r for r in rows if any(i["relevant"] for i in r["chunks"])]
    answered = sum(any(i["relevant"] and rule(i) for i in r["chunks"]) for r in with_relevant)
    false = sum(any(not i["relevant"] and rule(i) for i in r["chunks"]) for r in rows)
    return round(answered / max(1, len(with_relevant)), 3), round(false / max(1, len(rows)), 3)


def profile(store, embedder, dataset, qrels, qids, corpus_ids, alpha: float, k: int,
            idf: Callable[[str], float]) -> list[dict]:
    rows, seen = [], {}
    for q, vector in zip(qids, embedder.embed([dataset.queries[q] for q in qids]) if qids else [], strict=True):
        claim = dataset.queries[q]
        hits = store.hybrid(claim, vector, k, alpha)
        if not hits:
            continue
        new = [h.chunk for h in hits if h.chunk.chunk_id not in seen]
        for chunk, v in zip(new, embedder.embed([c.text for c in new]) if new else [], strict=True):
            seen[chunk.chunk_id] = list(v)
        relevant = {c for c, g in qrels[q].items() if g > 0}
        words = content_words(claim)
        chunk_words = [content_words(h.chunk.text) for h in hits]
        local = {w: math.log((len(hits) + 1) / (sum(w in cw for cw in chunk_words) + 0.5)) for w in words}
        idf_total, local_total = sum(idf(w) for w in words), sum(local.values())
        chunks = []
        for hit, cw in zip(hits, chunk_words, strict=True):
            shared = words & cw
            chunks.append({
                "relevant": bool(relevant & set(corpus_ids.get(hit.chunk.doc_id, []))),
                "sim": sum(a * b for a, b in zip(seen[hit.chunk.chunk_id], vector, strict=True)),
                "share": len(shared) / max(1, len(words)),
                "idf_share": sum(idf(w) for w in shared) / idf_total if idf_total else 0.0,
                "local_share": sum(local[w] for w in shared) / local_total if local_total else 0.0})
        rows.append({"qid": q, "chunks": chunks})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--beir", type=Path, default=Path(__file__).resolve().parents[2] / "shared/data/beir-scifact")
    ap.add_argument("--k", type=int, default=12)
    ap.add_argument("--train-queries", type=int, default=400)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    dataset = load_beir(args.beir)
    idf = corpus_idf(dataset)

    splits: dict[str, list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="forage-lexical-") as tmp:
        settings = Settings.load().updated(store={"path": Path(tmp) / "store"})
        store, embedder = build_store(settings), build_embedder(settings)
        report = load_corpus(settings, store, embedder, dataset)
        store.optimize()
        for split in ("train", "test"):
            qrels = dataset.qrels(split)
            qids = select_queries(qrels, args.train_queries if split == "train" else None)
            splits[split] = profile(store, embedder, dataset, qrels, qids, report.corpus_ids,
                                    settings.store.hybrid_alpha, args.k, idf)
    out: dict[str, object] = {"k": args.k, "queries": {s: len(r) for s, r in splits.items()}, "rules": []}
    print("rule | train answered / false | test answered / false")
    rules: list[tuple[str, Callable[[dict], bool]]] = [
        (f"sim >= {t}", (lambda t: lambda i: i["sim"] >= t)(t)) for t in (0.43, 0.5, 0.6, 0.65, 0.7)]
    rules += [(f"{s} >= {t} and sim >= 0.43", (lambda s, t: lambda i: i[s] >= t and i["sim"] >= 0.43)(s, t))
              for s in SIGNALS for t in (0.5, 0.6, 0.7, 0.8)]
    for name, rule in rules:
        row = {"rule": name, **{split: rates(rows, rule) for split, rows in splits.items()}}
        out["rules"].append(row)  # type: ignore[union-attr]
        print(f"{name} | {row['train']} | {row['test']}")
    print("\nsim + w * signal, threshold chosen on train for false <= 0.10:")
    combined = []
    for s in SIGNALS:
        for w in (0.0, 0.2, 0.4, 0.6):
            for step in range(40, 140):
                t = step / 100
                train = rates(splits["train"], lambda i, s=s, w=w, t=t: i["sim"] + w * i[s] >= t)
                if train[1] <= 0.10:
                    test = rates(splits["test"], lambda i, s=s, w=w, t=t: i["sim"] + w * i[s] >= t)
                    combined.append({"signal": s, "w": w, "threshold": t, "train": train, "test": test})
                    print(f"{s} w={w} t={t}: train {train}, test {test}")
                    break
    out["combined_at_10pct_false"] = combined
    if args.out:
        args.out.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
