"""Does the answer confirmation, calibrated on SciFact claims, confirm answers to question-form requirements? (no LLM)

    FORAGE_INGEST__CACHE_DIR=/tmp/fcache .venv/bin/python bench/question_confirmation.py
    .venv/bin/python bench/question_confirmation.py --k 12 --floors 0.75 0.8 0.85 0.9 0.95

A Forager counts an "answers" for coverage only when retrieval signals confirm it (``RelevanceCheck.confirms``): the
passage's embedding similarity to the requirement plus 0.4 x the share of the requirement's content words it holds
reaches ``forage.answer_confirmation`` (MiniLM: 1.00 for the store's score, the check's default signal, and 0.95 for
the text embedded again; chosen on BEIR SciFact train, whose queries are claims). The run's signal is what is
measured (``build_relevance``; ``FORAGE_FORAGE__RELEVANCE_SIGNAL=text`` for the other). The
planner words requirements as questions, and a question shares fewer words with its answer than a claim with its
evidence. This bench takes the hand-written questions of ``bench/data/paper_questions.json`` (answerable ones, each
with the one paper of the 16 shared PDFs that answers it, and unanswerable ones near the library's topics), ingests
the PDFs through the product (PyMuPDF, MiniLM, LanceDB; the ingest cache makes a second run fast), takes each
question's top ``--k`` hybrid chunks (what a Forager judges at its start) and scores every chunk as the check does.
A weak judge that calls every passage an answer is the case the check is for, so per floor it prints:

* answered: answerable questions with a chunk of their paper at or above the floor (a right answer confirmed);
* false, absent: unanswerable questions with any chunk at or above it (coverage earned on nothing);
* false, left out: answerable questions with any chunk at or above it once their paper is left out of the search
  (the near-topic papers of the library stand in for the answer).

Then, for related evidence (an 'interesting' verdict, coverage 0.5): how many questions keep a passage that stands
with a judge that calls everything interesting, when a related passage must reach the topic floor (before) or the
answer floor (``Ledger.supported``).

The questions are split in two halves (even and odd positions) so that a floor read off one half can be checked on
the other.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from actors.steps.plan.requirements import content_words, own_question, word_share  # noqa: E402
from infra.calibrated import CONFIRM_WORD_WEIGHT  # noqa: E402
from infra.settings import Settings  # noqa: E402

FLOORS = (0.75, 0.8, 0.85, 0.9, 0.95, 1.0, 1.05, 1.1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pdfs", type=Path, default=REPO.parent / "shared" / "data" / "pdfs")
    parser.add_argument("--questions", type=Path, default=REPO / "bench" / "data" / "paper_questions.json")
    parser.add_argument("--k", type=int, default=12, help="chunks per question (a Forager's start judges ~12)")
    parser.add_argument("--floors", type=float, nargs="+", default=list(FLOORS))
    parser.add_argument("--out", type=Path, default=None, help="every chunk's scores as JSON")
    args = parser.parse_args()

    from actors.steps.ingest.step import IngestStep
    from infra.embed import build_embedder
    from infra.pdf import build_parser
    from infra.rerank import build_relevance
    from infra.store import build_store
    from infra.store.base import ChunkFilter
    from messages.ingest import IngestRequest
    from messages.search import Candidate

    spec = json.loads(args.questions.read_text(encoding="utf-8"))
    settings = Settings.load().updated(store={"path": Path(tempfile.mkdtemp(prefix="question-check-")) / "store"})
    store, embedder = build_store(settings), build_embedder(settings)
    similarity, _ = build_relevance(settings, embedder, store)  # the run's signal, its floors and confirmation
    floor = similarity.confirmation
    step = IngestStep(settings, store, embedder, build_parser(settings))
    started = time.perf_counter()
    doc_of: dict[str, str] = {}  # file name -> doc id
    for path in sorted(args.pdfs.glob("*.pdf")):
        result = step.ingest(IngestRequest(run_id="bench", candidate=Candidate(key=f"file:{path}", path=str(path))))
        if result.status != "stored" or result.doc_id is None:
            print(f"{path.name}: {result.status} ({result.reason})", file=sys.stderr)
            continue
        doc_of[path.name] = result.doc_id
    step.index_new_chunks()
    print(f"{len(doc_of)} papers, {store.count_chunks():,} chunks ingested in {time.perf_counter() - started:.0f} s; "
          f"embedder {embedder.name}; top {args.k} hybrid chunks per question; the check's signal "
          f"{similarity.name}, floors (answer, topic) {similarity.floors}, confirmation {floor}\n")
    alpha = settings.store.hybrid_alpha

    def scored(question: str, leave_out: str | None) -> list[dict]:
        vector = embedder.embed([question])[0]
        flt = ChunkFilter() if leave_out is None else ChunkFilter(
            doc_ids=tuple(d for d in doc_of.values() if d != leave_out))
        hits = store.hybrid(question, vector, args.k, alpha, flt)
        sims = similarity.score(question, [h.chunk for h in hits])
        wanted = content_words(own_question(question))
        return [{"doc_id": h.chunk.doc_id, "chunk_id": h.chunk.chunk_id, "sim": round(s, 4),
                 "share": round(word_share(wanted, h.chunk.text), 4),
                 "score": round(s + CONFIRM_WORD_WEIGHT * word_share(wanted, h.chunk.text), 4)}
                for h, s in zip(hits, sims, strict=True)]

    rows = []
    for n, item in enumerate(spec["answerable"]):
        doc = doc_of.get(item["answered_by"])
        if doc is None:
            continue
        rows.append({"half": n % 2, "question": item["question"], "kind": "answerable", "answer_doc": doc,
                     "chunks": scored(item["question"], None), "left_out": scored(item["question"], doc)})
    for n, question in enumerate(spec["unanswerable"]):
        rows.append({"half": n % 2, "question": question, "kind": "unanswerable", "chunks": scored(question, None)})

    def best(chunks: list[dict], doc: str | None = None) -> float:
        return max((c["score"] for c in chunks if doc is None or c["doc_id"] == doc), default=float("-inf"))

    answerable = [r for r in rows if r["kind"] == "answerable"]
    absent = [r for r in rows if r["kind"] == "unanswerable"]
    found = sum(1 for r in answerable if any(c["doc_id"] == r["answer_doc"] for c in r["chunks"]))
    print(f"{len(answerable)} answerable questions (their paper among the top {args.k} chunks for {found}), "
          f"{len(absent)} unanswerable\n")
    print(f"{'floor':>6} {'half':>5} {'answered':>10} {'false, absent':>14} {'false, left out':>16}")
    for value in sorted(set(args.floors) | ({floor} if floor else set())):
        for half in (0, 1, None):
            a = [r for r in answerable if half is None or r["half"] == half]
            u = [r for r in absent if half is None or r["half"] == half]
            answered = sum(1 for r in a if best(r["chunks"], r["answer_doc"]) >= value)
            false_absent = sum(1 for r in u if best(r["chunks"]) >= value)
            false_left = sum(1 for r in a if best(r["left_out"]) >= value)
            print(f"{value:>6.2f} {'all' if half is None else half:>5} {answered:>4}/{len(a):<5} "
                  f"{false_absent:>7}/{len(u):<6} {false_left:>9}/{len(a):<6}"
                  + ("  <- the check's floor" if value == floor and half is None else ""))
    # related evidence (Ledger.supported): an 'interesting' passage counts (coverage 0.5, cited) only at or above
    # the answer floor; before 2026-11-26 every passage the judge was shown (from the topic floor on) could
    answer_floor, topic_floor = similarity.floors
    print("\nrelated evidence with a judge that calls every passage interesting: the questions left with some "
          "passage that stands")
    print(f"{'related floor':>22} {'own paper':>10} {'absent':>8} {'left out':>9}")
    for name, value in ((f"topic {topic_floor:.2f} (before)", topic_floor),
                        (f"answer {answer_floor:.2f}", answer_floor)):
        own = sum(1 for r in answerable if max((c["sim"] for c in r["chunks"] if c["doc_id"] == r["answer_doc"]),
                                               default=-1.0) >= value)
        away = sum(1 for r in absent if max((c["sim"] for c in r["chunks"]), default=-1.0) >= value)
        left = sum(1 for r in answerable if max((c["sim"] for c in r["left_out"]), default=-1.0) >= value)
        print(f"{name:>22} {own:>4}/{len(answerable):<5} {away:>3}/{len(absent):<4} {left:>4}/{len(answerable):<4}")
    print("\nper answerable question: best score of its paper's chunks (sim, share) and best of the others")
    for r in answerable:
        own = [c for c in r["chunks"] if c["doc_id"] == r["answer_doc"]]
        top = max(own, key=lambda c: c["score"]) if own else None
        other = best([c for c in r["chunks"] if c["doc_id"] != r["answer_doc"]])
        shown = f"{top['score']:.2f} ({top['sim']:.2f}, {top['share']:.2f})" if top else "not retrieved   "
        print(f"  {shown}  others {other:5.2f}  {r['question'][:80]}")
    if args.out:
        args.out.write_text(json.dumps(rows, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
