"""Scoring a finished report with a judge model (thesis §4 rubric) and measuring a run.

:func:`judge_run` gives the judge the query, the report and the text of the chunks its citations rest
on (evidence.jsonl, read back from the store), and asks for correctness, usefulness and scope (1-5)
with an evidence audit: the report's claims that the cited evidence does not support. The judge is
any :class:`~infra.llm.base.LLM` (``forage eval report --judge MODEL`` uses the configured Ollama host).

:func:`run_metrics` reads what a run folder records: coverage, sources, citations removed, schema
compliance of the contribution records, LLM calls and wall time.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from actors.steps.text import block
from actors.steps.prompts import REPORT_JUDGE_SYSTEM
from actors.steps.run.rundir import RunDir
from actors.steps.schemas import JudgeVerdict
from actors.steps.tools.verify import load_cited_chunks, load_report
from infra.llm.base import LLM
from infra.store.base import Store

REPORT_CHARS = 14_000
EVIDENCE_CHUNKS = 24
EVIDENCE_CHARS = 700


@dataclass
class Judgement:
    correctness: int
    usefulness: int
    scope: int
    unsupported_claims: list[str] = field(default_factory=list)
    rationale: str = ""
    judge: str = ""

    @property
    def mean(self) -> float:
        return round((self.correctness + self.usefulness + self.scope) / 3, 2)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "mean": self.mean}


async def judge_run(rundir: RunDir, store: Store, judge: LLM, judge_name: str = "") -> Judgement:
    state = rundir.require_state()
    report = load_report(rundir, state)
    passages = []
    for c in load_cited_chunks(rundir)[:EVIDENCE_CHUNKS]:
        chunk = store.get_chunk(c.chunk_id)
        text = " ".join(chunk.text.split())[:EVIDENCE_CHARS] if chunk else "(this chunk is no longer in the store)"
        passages.append(f"[{c.n}] {c.section_path}: {text}")
    markdown = report.markdown if len(report.markdown) <= REPORT_CHARS else report.markdown[:REPORT_CHARS] + " …"
    verdict = await judge.structured([
        {"role": "system", "content": REPORT_JUDGE_SYSTEM},
        {"role": "user", "content": (f"{block('QUERY', state.query or '')}\n\n{block('REPORT', markdown)}"
                                     f"\n\nPassages the citations rest on:\n"
                                     f"{block('EVIDENCE', chr(10).join(passages) or '(none)')}")}], JudgeVerdict)
    claims = [" ".join(c.split()) for c in verdict.unsupported_claims if c.strip()]
    return Judgement(verdict.correctness, verdict.usefulness, verdict.scope, claims,
                     " ".join(verdict.rationale.split()), judge_name)


def run_metrics(rundir: RunDir) -> dict[str, Any]:
    """What a run folder records, as one flat row (None where the run has no value)."""
    state = rundir.require_state()
    row: dict[str, Any] = {"run_id": rundir.run_id, "query": state.query or "", "status": state.status,
                           "coverage": state.final_coverage, "iterations": len(state.iterations),
                           "sources": len(state.sources),
                           "removed_citations": (state.removed_citations if "removed_citations" in state.model_fields_set
                                                 else None),
                           "wall_s": state.seconds, "compliance": None, "records": None}
    # the Foragers' counts are cumulative over iterations: the last iteration holds the run's total
    forage_calls = sum(state.iterations[-1].llm_calls.values()) if state.iterations else 0
    writer_calls = 0
    if rundir.report_json.exists():
        report = json.loads(rundir.report_json.read_text(encoding="utf-8"))
        writer_calls = report.get("llm_calls", 0)
        row["removed_citations"] = report.get("removed_citations", row["removed_citations"])
        comparison = report.get("comparison")
        if comparison and comparison.get("records"):
            row["records"] = len(comparison["records"])
            row["compliance"] = round(comparison.get("compliant", 0) / len(comparison["records"]), 3)
    row["llm_calls"] = forage_calls + writer_calls
    return row
