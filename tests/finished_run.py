"""A finished run produced in-process for the report tools' tests (verify, export, charts, comparison).

The Orchestrator runs its real loop and run folder; the crew offers no new documents and its Foragers
return fixed coverage (lower in the first iteration); the Writer is the real WriteStep over a real
LanceStore holding the hand-made documents of test_write_step, with a scripted model (:func:`answer`).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from actors.orchestrator import Orchestrator
from actors.steps.events import RecordingEmit
from actors.steps.write.step import WriteStep
from infra.llm.fakes import FunctionLLM
from infra.settings import Settings
from messages import RequirementCoverage, RequirementsPlan
from tests.fakes import ScriptedCrew
from tests.leaves import QUERY, A, B, C, coverages

RUN = "20260101-000000-feedfacecafebeef"


def answer(messages: list[dict[str, str]], schema: type) -> Any:
    """A plain scripted model: cites every item it is shown, one record per paper, fixed labels."""
    user = next(m["content"] for m in reversed(messages) if m["role"] == "user")
    name = schema.__name__
    if name == "SectionDraft":
        labels = sorted({int(n) for n in re.findall(r"^\[(\d+)\] ", user, re.M)})
        return {"mechanism": "The cited studies describe how the process works.", "mechanism_sources": labels[:1],
                "evidence": [{"sentence": f"Study {n} reports a finding on this requirement.", "sources": [n]}
                             for n in labels]}
    if name == "OverviewDraft":
        return {"title": "Photosynthesis and energy", "overview": "Plants capture light and store it in sugars."}
    if name == "ContributionDraft":
        n = int(re.search(r"^Paper \[(\d+)\]", user, re.M).group(1))
        # each field in the paper's own words (the Writer keeps only fields its paper's text holds)
        words = re.search(r"<<<ABSTRACT\n(.*?)\nABSTRACT>>>", user, re.S).group(1).split()  # type: ignore[union-attr]
        own = " ".join(words[:8]).rstrip(".,;:")
        return {"problem": f"Paper {n} asks about this: {own}.",
                "method": f"Paper {n} measures what it reports: {own}.",
                "contribution": f"Paper {n} reports that {own}.",
                "novelty": f"Paper {n} claims first that {own}." if n != 2 else "",
                "problem_label": "causal effect or mechanism",
                "method_label": "laboratory experiment" if n != 3 else "observational or cohort study"}
    if name == "OverlapDraft":
        return {"overlaps": [{"papers": [1, 2, 77], "element": "problem", "shared": "light capture in leaves"}]}
    if name == "DifferenceDraft":
        return {"differences": [{"paper": n, "distinct": f"Paper {n} alone studies this particular aspect."}
                                for n in (1, 2, 3, 42)]}
    raise AssertionError(f"no scripted answer for {name}")


def fixed_crew(writer: WriteStep, coverages: Sequence[RequirementCoverage]) -> ScriptedCrew:
    """No new documents; each Forager returns its requirement's result in ``coverages``: the first iteration reads
    passages (none settles by "nothing new") at coverage 0.5 where the result says 1.0, the second reads nothing new
    at the result's coverage. The report is ``writer``'s."""
    first = {c.requirement.id: 0.5 if c.coverage == 1.0 else c.coverage for c in coverages}
    return ScriptedCrew(results={c.requirement.id: c for c in coverages},
                        coverage={1: first, 2: {c.requirement.id: c.coverage for c in coverages}},
                        new_passages={1: 1, 2: 0}, writer=writer)


def fill_store(path: Path, weights: dict[str, dict[str, Any]] | None = None):
    """A, B and C in a LanceStore at ``path``; ``weights``: doc_id → weight fields to store with that document
    (messages.search.WEIGHT_FIELDS, as a search result gave them)."""
    from infra.store.lancedb import LanceStore
    from tests.minilm import shared_minilm

    store = LanceStore(path, dim=384)
    embedder = shared_minilm()
    for record, chunks in (A, B, C):
        record = record.model_copy(update=(weights or {}).get(record.doc_id, {}))
        store.upsert_document(record, chunks, embedder.embed([c.text for c in chunks]))
    return store


def make_run(tmp_path: Path, llm: Any | None = None, weights: dict[str, dict[str, Any]] | None = None,
             covs: Sequence[RequirementCoverage] | None = None, **write: Any) -> tuple[Settings, Path]:
    """Run the Orchestrator to the end; returns the settings and the run folder. ``weights``: see
    :func:`fill_store`; ``covs``: the Foragers' coverages (default: tests/leaves.py's)."""
    store_dir = tmp_path / "store"
    store = fill_store(store_dir, weights)
    settings = Settings.load().updated(run={"runs_dir": tmp_path / "runs", "max_iterations": 2},
                                       store={"path": store_dir}, write=write)
    covs = tuple(covs) if covs is not None else coverages()
    step = WriteStep(settings, store, llm or FunctionLLM(answer))
    plan = RequirementsPlan(run_id=RUN, query=QUERY.model_copy(update={"run_id": RUN}),
                            requirements=tuple(c.requirement for c in covs), approved=True)
    covs = tuple(c.model_copy(update={"run_id": RUN}) for c in covs)
    orch = Orchestrator(settings, RUN, crew=fixed_crew(step, covs), emit=RecordingEmit(RUN))
    summary = asyncio.run(orch.run(plan))
    assert summary.status == "finished", summary.stop_reason
    return settings, tmp_path / "runs" / RUN


def calvin_answer(messages: list[dict[str, str]], schema: type) -> Any:
    """An ask model that answers from the Calvin-cycle passage of the run's sources, citing its number."""
    assert schema.__name__ == "AskAnswer"
    n = next(int(line[1:line.index("]")]) for line in messages[-1]["content"].splitlines()
             if line.startswith("[") and "The Calvin Cycle" in line)
    return {"sufficient": True, "sentences": [{"sentence": "The Calvin cycle fixes carbon dioxide into sugars.",
                                               "sources": [n]}]}
