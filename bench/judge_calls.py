"""LLM calls of the Forager's judging: batched (one call for several chunks) vs one call per chunk.

    .venv/bin/python bench/judge_calls.py                       # 60 SciFact abstracts, 3 requirements
    .venv/bin/python bench/judge_calls.py --docs 120 --batch 8

A fixed set of chunks: ``--docs`` abstracts of BEIR SciFact (the relevant ones of the
requirements first) (``../shared/data/beir-scifact``)
stored through the product's own text ingestion (MiniLM, LanceDB, a temporary folder). For each of
the first ``--requirements`` test queries (as requirements), a fresh :class:`ForageStep` forages one iteration with
retrieval wide enough to return every chunk, deep dives on, reformulation and the paper stage off (so
both runs see exactly the same chunks), and a FunctionLLM that judges each passage by its word
overlap with the requirement — the same decision whether the passage comes alone or in a batch.
Printed per requirement and in total: chunks judged, judging calls and all calls, batched
(``forage.judge_batch = --batch``) and per chunk (``judge_batch = 1``, the thesis's count), and
whether the per-chunk decisions are identical. Goal (issue 5): batched ≤ 40 % of per chunk.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from actors.steps.evaluation.retrieval import load_beir  # noqa: E402
from actors.steps.forage.step import ForageStep  # noqa: E402
from actors.steps.ingest.documents import TextDocument  # noqa: E402
from actors.steps.ingest.step import IngestStep  # noqa: E402
from actors.steps.schemas import BatchVerdict, DeepDiveBatchVerdict, DocumentGist, RelevanceGate, SectionChoice  # noqa: E402
from infra.llm.fakes import FunctionLLM  # noqa: E402
from infra.settings import Settings  # noqa: E402
from infra.store.lancedb import LanceStore  # noqa: E402
from messages.forage import ForageRequest  # noqa: E402
from messages.plan import Requirement  # noqa: E402

WORD = re.compile(r"[a-z][a-z0-9-]{3,}")


def words(text: str) -> set[str]:
    return set(WORD.findall(text.lower()))


def reader(messages: list[dict[str, str]], schema: type) -> object:
    """Judges each passage alone by word overlap with the requirement (batch-independent)."""
    user = next(m["content"] for m in messages if m["role"] == "user")
    requirement = words(re.search(r"Requirement: (.*)", user).group(1)) if "Requirement:" in user else set()
    if issubclass(schema, (BatchVerdict, DeepDiveBatchVerdict)):
        out = []
        for number, passage in re.findall(r"<<<PASSAGE (\d+)\n(.*?)\nPASSAGE \1>>>", user, re.S):
            overlap = len(requirement & words(passage))
            tag = "answers" if overlap >= 4 else "interesting" if overlap >= 2 else "unrelated"
            if issubclass(schema, DeepDiveBatchVerdict) and tag == "interesting":
                tag = "unrelated"
            kind = "result" if re.search(r"\d+(\.\d+)?\s*%|p\s*[<=]", passage) else "background"
            out.append({"passage": int(number), "tag": tag, "kind": kind, "motive": f"{overlap} shared words"})
        return {"verdicts": out}
    if schema is DocumentGist:
        return {"summary": "A SciFact abstract."}
    if schema is RelevanceGate:
        return {"continue_search": True, "reason": "on topic"}
    if schema is SectionChoice:
        listed = [line[2:] for line in re.findall(r"^- .*$", user, re.M)]
        return {"sections": listed[:2]}
    raise AssertionError(f"no answer for {schema.__name__}")


def run(settings: Settings, store: LanceStore, embedder: object, requirement: Requirement) -> tuple:
    llm = FunctionLLM(reader)
    step = ForageStep(settings, store, embedder, llm)  # type: ignore[arg-type]
    cov = asyncio.run(step.forage(ForageRequest(run_id="bench", iteration=1, requirement=requirement)))
    judging = sum(1 for c in llm.calls_log if c.schema in ("BatchVerdict", "DeepDiveBatchVerdict"))
    decisions = {j.chunk_id: (j.tag, j.kind, j.motive) for j in cov.judgements}
    return len(cov.judgements), judging, cov.llm_calls, decisions


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--beir", type=Path, default=REPO.parent / "shared" / "data" / "beir-scifact")
    parser.add_argument("--docs", type=int, default=60, help="abstracts stored (the fixed chunk set)")
    parser.add_argument("--requirements", type=int, default=3, help="test queries used as requirements")
    parser.add_argument("--batch", type=int, default=None, help="forage.judge_batch (default: the setting's)")
    args = parser.parse_args()
    if not (args.beir / "corpus.jsonl").is_file():
        print(f"SciFact not found at {args.beir}; pass --beir DIR", file=sys.stderr)
        return 2

    from infra.embed.minilm import MiniLMEmbedder

    data = load_beir(args.beir)
    embedder = MiniLMEmbedder()
    store = LanceStore(Path(tempfile.mkdtemp(prefix="judge-calls-")) / "store", dim=embedder.dim)
    base = Settings.load()
    ingest = IngestStep(base, store, embedder)
    qrels = data.qrels("test")
    queries = [(qid, data.queries[qid]) for qid in list(qrels)[: args.requirements]]
    chosen = list(dict.fromkeys([c for qid, _ in queries for c in qrels[qid] if c in data.corpus]
                                + list(data.corpus)))[: args.docs]  # the queries' relevant abstracts, then others
    docs = [TextDocument(key=f"beir:scifact:{cid}", title=data.corpus[cid][0], text=data.corpus[cid][1])
            for cid in chosen]
    ingest.ingest_texts("bench", docs)
    n_chunks = store.count_chunks()
    batch = args.batch or base.forage.judge_batch
    wide = {"bm25_k": n_chunks, "vector_k": n_chunks, "paper_k": 0, "min_papers": 0, "max_deep_dives": 2}
    batched_settings = base.updated(forage={**wide, "judge_batch": batch})
    single_settings = base.updated(forage={**wide, "judge_batch": 1})
    print(f"{n_chunks} chunks from {args.docs} SciFact abstracts; judge_batch {batch} vs 1 (one call per chunk)\n")
    print(f"{'requirement':<12} {'chunks':>6} {'judge calls batched':>20} {'per chunk':>9} {'ratio':>6} "
          f"{'all calls batched':>18} {'per chunk':>9} {'same decisions':>15}")
    totals = [0, 0, 0, 0, 0]
    for number, (_, text) in enumerate(queries, start=1):
        requirement = Requirement(id=f"R{number}", text=text)
        n, judge_b, calls_b, dec_b = run(batched_settings, store, embedder, requirement)
        n1, judge_1, calls_1, dec_1 = run(single_settings, store, embedder, requirement)
        same = dec_b == dec_1
        print(f"{requirement.id:<12} {n:>6} {judge_b:>20} {judge_1:>9} {judge_b / max(judge_1, 1):>6.0%} "
              f"{calls_b:>18} {calls_1:>9} {str(same):>15}")
        for i, v in enumerate((n, judge_b, judge_1, calls_b, calls_1)):
            totals[i] += v
    n, judge_b, judge_1, calls_b, calls_1 = totals
    print(f"\ntotal: {n} chunks judged; judging calls {judge_b} batched vs {judge_1} per chunk "
          f"= {judge_b / max(judge_1, 1):.0%}; all calls {calls_b} vs {calls_1} = {calls_b / max(calls_1, 1):.0%} "
          f"(goal ≤ 40 %)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
