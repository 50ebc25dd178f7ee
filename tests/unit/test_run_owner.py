"""A resumed run belongs to the process that resumed it: an Orchestrator of a dead driver that is still
running (its Ray outlives the driver for a while) stops at its next checkpoint without writing anything.

Both Orchestrators run in one event loop without Ray; the first one's forage of iteration 2 waits until
the second (the resume) has finished the run.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

from actors.orchestrator import Orchestrator
from actors.steps.events import RecordingEmit
from infra.settings import Settings
from messages import (
    Candidate, ForageRequest, IngestRequest, IngestResult, Report, Requirement, RequirementCoverage,
    RequirementsPlan, ResearchQuery, SearchRequest, SearchResults, WriteRequest,
)

RUN = "run-owner"
COVERAGE = {1: 0.2, 2: 0.5, 3: 0.9}


class Crew:
    def __init__(self, hold_iteration: int | None = None) -> None:
        self.hold_iteration = hold_iteration
        self.holding = asyncio.Event()
        self.release = asyncio.Event()
        self.written: list[WriteRequest] = []

    async def search(self, request: SearchRequest) -> SearchResults:
        n = len(request.exclude_keys)
        return SearchResults(run_id=request.run_id, iteration=request.iteration,
                             candidates=(Candidate(key=f"file:/lib/{n}.pdf", path=f"/lib/{n}.pdf"),))

    async def ingest(self, requests: Sequence[IngestRequest]) -> list[IngestResult]:
        return [IngestResult(run_id=r.run_id, key=r.candidate.key, path=r.candidate.path, status="stored",
                             doc_id=r.candidate.key[-8:]) for r in requests]

    async def forage(self, requests: Sequence[ForageRequest]) -> list[RequirementCoverage]:
        iteration = requests[0].iteration
        if iteration == self.hold_iteration:
            self.holding.set()
            await self.release.wait()
        return [RequirementCoverage(run_id=r.run_id, requirement=r.requirement, iteration=iteration,
                                    coverage=COVERAGE[iteration], new_passages=1)  # not settled before the goal
                for r in requests]

    async def write(self, request: WriteRequest) -> Report:
        self.written.append(request)
        return Report(run_id=request.run_id, markdown="# Report\n")

    async def close(self) -> None:
        return None


def test_an_orchestrator_whose_run_was_resumed_elsewhere_stops_without_writing(tmp_path) -> None:
    settings = Settings.load().updated(run={"runs_dir": tmp_path, "max_iterations": 5, "min_coverage": 0.85,
                                            "max_added_requirements": 0})
    q = ResearchQuery(run_id=RUN, text="query")
    plan = RequirementsPlan(run_id=RUN, query=q, approved=True,
                            requirements=(Requirement(id="R1", text="requirement number one"),))
    old_crew, new_crew = Crew(hold_iteration=2), Crew()
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
