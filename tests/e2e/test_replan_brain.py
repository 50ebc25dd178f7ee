"""Re-planning through the end-to-end brain, in one process (no Ray): a real run whose coverage stalls.

LibrarySearch over one real PDF (the DVT paper), IngestStep with PyMuPDF, MiniLM and LanceDB, a ForageStep
per requirement and the WriteStep, driven by the Orchestrator through a LocalCrew; the model is the
end-to-end brain through FunctionLLM. The library holds nothing for R2 (JIT compilers) or R3 (relation
phrases), so iteration 2 finds nothing new: coverage stalls, the brain names the missing dimensions and
proposes one requirement (brain.REPLAN), which gets the next id, is foraged in iteration 3, is answered by
the DVT paper and has its own section in the report.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from actors.crew import LocalCrew
from actors.orchestrator import Orchestrator
from actors.steps.events import RecordingEmit
from infra.llm.fakes import FunctionLLM
from infra.settings import Settings
from messages.plan import PlanRequest, ResearchQuery
from tests.e2e import brain as brain_module

pytestmark = pytest.mark.slow  # parses a real PDF and loads MiniLM (about 30 s of CPU)

ADDED = "Quantitative comparison of anticoagulant dosing regimens and their outcomes after injury"


@pytest.fixture
def replanned_run(shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from actors.steps.forage.step import ForageStep
    from actors.steps.ingest.step import IngestStep
    from actors.steps.search.library import LibrarySearch
    from actors.steps.write.step import WriteStep
    from infra.embed import build_embedder
    from infra.pdf import build_parser
    from infra.store import build_store

    library = tmp_path / "library"
    library.mkdir()
    (library / "dvt.pdf").symlink_to(shared_data / "pdfs" / "dvt_prophylaxis_trauma_bmc2010.pdf")
    settings = Settings.load("standard").updated(
        run={"runs_dir": tmp_path / "runs", "max_iterations": 3, "min_coverage": 0.85, "replan_min_gain": 0.05,
             "max_added_requirements": 2},
        store={"path": tmp_path / "store"}, embed={"backend": "minilm"}, search={"library": library},
        write={"comparison": False, "charts": False},
        forage={"answer_confirmation": brain_module.ANSWER_CONFIRMATION})  # R4's coverage is asserted
    monkeypatch.setattr(brain_module, "REPLAN", [ADDED])
    llm = FunctionLLM(brain_module.brain)
    emit = RecordingEmit("run-replan-e2e")
    store, embedder = build_store(settings), build_embedder(settings)

    async def go():
        orch = Orchestrator(settings, "run-replan-e2e", llm=llm, emit=emit)
        plan = await orch.plan(PlanRequest(run_id="run-replan-e2e",
                                           query=ResearchQuery(run_id="run-replan-e2e", text=brain_module.QUERY)))

        class Foragers(dict):  # one ForageStep per requirement, made when a requirement first appears
            def __missing__(self, rid):
                self[rid] = ForageStep(settings, store, embedder, llm, emit=emit)
                return self[rid]

        orch._crew = LocalCrew(LibrarySearch(library, emit=emit),
                               IngestStep(settings, store, embedder, build_parser(settings), emit=emit),
                               Foragers(), WriteStep(settings, store, llm, emit=emit))
        return await orch.run(plan.model_copy(update={"approved": True}))

    summary = asyncio.run(go())
    state = json.loads((tmp_path / "runs" / "run-replan-e2e" / "run.json").read_text())
    return summary, state, emit, llm


def test_a_stalled_run_replans_and_forages_the_new_requirement(replanned_run) -> None:
    summary, state, emit, llm = replanned_run
    assert summary.status == "finished", summary.stop_reason
    means = [it["mean_coverage"] for it in state["iterations"]]
    assert len(means) == 3 and means[1] == means[0]  # nothing new in iteration 2: stalled
    (replan,) = state["replans"]
    assert replan["after_iteration"] == 2
    assert replan["added"] == [{"id": "R4", "text": ADDED, "added_after": 2}]  # marked as added after iteration 2
    assert "source_diversity" in replan["missing"]  # one paper answers R1
    assert [r["id"] for r in state["requirements"]] == ["R1", "R2", "R3", "R4"]
    assert state["iterations"][2]["coverage"]["R4"] == 1.0  # the DVT paper answers it in iteration 3
    assert "R4" not in state["iterations"][1]["coverage"]
    (event,) = [e for e in emit.events if e.kind == "replanned"]
    assert event.iteration == 2 and event.payload["requirements"] == [{"id": "R4", "text": ADDED, "added_after": 2}]
    assert llm.schemas_asked().count("ReplanDraft") == 1
    report = Path(summary.report_path).read_text()
    assert ADDED in report
