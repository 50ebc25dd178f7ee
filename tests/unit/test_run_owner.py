"""A resumed run belongs to the process that resumed it: an Orchestrator of a dead driver that is still
running (its Ray outlives the driver for a while) stops at its next checkpoint without writing anything.

Both Orchestrators run in one event loop without Ray; the first one's forage of iteration 2 waits until
the second (the resume) has finished the run.
"""

from __future__ import annotations

import asyncio
import json

from actors.orchestrator import Orchestrator
from actors.steps.events import RecordingEmit
from infra.settings import Settings
from messages import Requirement, RequirementsPlan, ResearchQuery
from tests.fakes import ScriptedCrew

RUN = "run-owner"
COVERAGE = {1: 0.2, 2: 0.5, 3: 0.9}


def crew(hold_iteration: int | None = None) -> ScriptedCrew:
    """One document per search; each iteration reads a new passage (none settles before the goal)."""
    return ScriptedCrew(documents=1, coverage=COVERAGE, new_passages=1, hold_iteration=hold_iteration)


def test_an_orchestrator_whose_run_was_resumed_elsewhere_stops_without_writing(tmp_path) -> None:
    settings = Settings.load().updated(run={"runs_dir": tmp_path, "max_iterations": 5, "min_coverage": 0.85,
                                            "max_added_requirements": 0})
    q = ResearchQuery(run_id=RUN, text="query")
    plan = RequirementsPlan(run_id=RUN, query=q, approved=True,
                            requirements=(Requirement(id="R1", text="requirement number one"),))
    old_crew, new_crew = crew(hold_iteration=2), crew()
    old_emit = RecordingEmit(RUN)

    async def go():
        old = asyncio.create_task(Orchestrator(settings, RUN, crew=old_crew, emit=old_emit).run(plan))
        await old_crew.holding.wait()  # the "dead" driver's Orchestrator is foraging iteration 2
        resumed = await Orchestrator(settings, RUN, crew=new_crew, emit=RecordingEmit(RUN)).run(plan)
        finished = (tmp_path / RUN / "run.json").read_text()
        old_crew.release.set()
        return await old, resumed, finished

    old_summary, resumed, finished = asyncio.run(go())
    assert resumed.status == "finished" and resumed.iterations == 3
    assert old_summary.status == "superseded" and "took this run over" in old_summary.stop_reason
    assert (tmp_path / RUN / "run.json").read_text() == finished  # the old one wrote nothing more
    state = json.loads(finished)
    assert [it["iteration"] for it in state["iterations"]] == [1, 2, 3]
    assert state["resumed"][0]["after_iteration"] == 1
    assert old_crew.written == [] and len(new_crew.written) == 1
    assert old_emit.kinds()[-1] != "finished"  # no final event from the superseded one
