"""The Orchestrator's loop and stop rule, without Ray: a crew that records what it was asked."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

import pytest

from actors.orchestrator import Orchestrator, mean_coverage
from actors.steps.events import RecordingEmit
from infra.settings import Settings
from messages import ForageRequest, Requirement, RequirementCoverage, RequirementsPlan, ResearchQuery
from tests.fakes import ScriptedCrew

RUN = "run-loop"


def make_crew(batches: list[int], coverage_by_iteration: list[dict[str, float]], failing: Sequence[str] = (),
              **script) -> ScriptedCrew:
    """Offers ``batches`` of documents (the first one of the first batch is not a PDF); Foragers answer from
    ``coverage_by_iteration`` (its last row for later iterations), each bringing ``new_passages`` new passages per
    iteration (default 1; 0: nothing new, the requirement settles); ``failing`` requirements fail with "boom"."""
    return ScriptedCrew(batches=batches, failed_documents={"file:/lib/0-0.pdf": "not a PDF"},
                        coverage=coverage_by_iteration, failing={rid: "boom" for rid in failing}, **script)


def plan(n: int = 2) -> RequirementsPlan:
    q = ResearchQuery(run_id=RUN, text="query")
    reqs = tuple(Requirement(id=f"R{i}", text=f"requirement number {i}") for i in range(1, n + 1))
    return RequirementsPlan(run_id=RUN, query=q, requirements=reqs, approved=True)


def run(crew: ScriptedCrew, tmp_path, **run_settings):
    # re-planning on stalled coverage is tested in test_replan.py; here the loop runs without it
    settings = Settings.load().updated(run={"runs_dir": tmp_path, "max_added_requirements": 0, **run_settings})
    emit = RecordingEmit(RUN)
    orch = Orchestrator(settings, RUN, crew=crew, emit=emit)
    summary = asyncio.run(orch.run(plan()))
    state = json.loads((tmp_path / RUN / "run.json").read_text())
    return summary, state, emit


def test_stops_when_coverage_reaches_the_goal(tmp_path) -> None:
    crew = make_crew([3, 3, 3], [{"R1": 0.5, "R2": 0.0}, {"R1": 1.0, "R2": 1.0}])
    summary, state, emit = run(crew, tmp_path)
    assert summary.status == "finished" and summary.iterations == 2
    assert "reached the goal" in summary.stop_reason
    assert [it["mean_coverage"] for it in state["iterations"]] == [0.25, 1.0]
    assert crew.closed and len(crew.written) == 1
    assert [c.coverage for c in crew.written[0].coverages] == [1.0, 1.0]
    assert emit.kinds()[-1] == "finished"


def test_foragers_start_while_the_iteration_searches_and_before_it_forages(tmp_path) -> None:
    # the crew starts its Foragers ahead (start_foragers), recording what was under way meanwhile
    crew = make_crew([2, 2], [{"R1": 0.5, "R2": 0.5}, {"R1": 1.0, "R2": 1.0}])
    summary, _, _ = run(crew, tmp_path)
    assert summary.status == "finished" and summary.iterations == 2
    first, second = crew.events[:crew.events.index("forage") + 1], crew.events[crew.events.index("forage") + 1:]
    for events in (first, second):
        assert sorted(events) == ["forage", "search", "searched", "start R1 R2", "started"]
        assert events.index("start R1 R2") < events.index("searched")  # under way while the search waits
        assert events.index("started") < events.index("forage")  # and done before foraging
    # a Forager that cannot start is its requirement's failure at foraging time, not the run's
    crew = make_crew([2], [{"R1": 1.0, "R2": 1.0}], fail_start=True)
    summary, _, _ = run(crew, tmp_path / "again")
    assert summary.status == "finished" and "started" not in crew.events and crew.events[-1] == "forage"


def test_stops_at_the_iteration_limit(tmp_path) -> None:
    crew = make_crew([2] * 10, [{"R1": 0.5, "R2": 0.5}])
    summary, state, _ = run(crew, tmp_path, max_iterations=4)
    assert summary.iterations == 4 and "maximum of 4" in summary.stop_reason
    assert len(state["iterations"]) == 4


def test_later_searches_exclude_what_was_offered(tmp_path) -> None:
    crew = make_crew([2, 2, 2], [{"R1": 0.0, "R2": 0.0}])
    run(crew, tmp_path, max_iterations=3)
    assert [len(s.exclude_keys) for s in crew.searched] == [0, 2, 4]
    assert len({r.candidate.key for r in crew.ingested}) == 6


def test_failed_requirement_counts_zero_and_run_still_writes(tmp_path) -> None:
    crew = make_crew([2], [{"R1": 1.0, "R2": 1.0}], failing=["R2"])
    summary, state, _ = run(crew, tmp_path, max_iterations=1)
    assert summary.status == "finished"
    assert state["failed_requirements"] == {"R2": "boom"}
    assert state["iterations"][0]["errors"] == {"R2": "boom"}  # why, per iteration, not only for the last one
    assert state["final_coverage"] == 0.5
    assert len(crew.written) == 1


def test_failed_documents_are_recorded_with_reasons(tmp_path) -> None:
    crew = make_crew([3], [{"R1": 1.0, "R2": 1.0}])
    summary, state, _ = run(crew, tmp_path)
    failed = [d for d in state["documents"].values() if d["status"] == "failed"]
    assert len(failed) == 1 and failed[0]["reason"] == "not a PDF"
    assert summary.documents_failed == 1 and summary.documents_stored == 2


def test_every_offered_document_is_queued_before_the_pool_gets_it(tmp_path) -> None:
    crew = make_crew([3, 2], [{"R1": 0.5, "R2": 0.5}, {"R1": 1.0, "R2": 1.0}])
    _, _, emit = run(crew, tmp_path)
    queued = [(e.iteration, e.payload["key"]) for e in emit.events
              if e.kind == "progress" and e.payload.get("phase") == "queued"]
    assert queued == [(1, f"file:/lib/0-{j}.pdf") for j in range(3)] + [(2, f"file:/lib/1-{j}.pdf") for j in range(2)]
    assert [r.candidate.key for r in crew.ingested] == [key for _, key in queued]


def test_unapproved_plan_is_refused(tmp_path) -> None:
    orch = Orchestrator(Settings.load().updated(run={"runs_dir": tmp_path}), RUN, crew=make_crew([], [{}]))
    with pytest.raises(ValueError, match="approved"):
        asyncio.run(orch.run(plan().model_copy(update={"approved": False})))


def test_mean_coverage_counts_failed_as_zero() -> None:
    req = Requirement(id="R1", text="abc def")
    ok = RequirementCoverage(run_id=RUN, requirement=req, iteration=1, coverage=1.0)
    bad = RequirementCoverage(run_id=RUN, requirement=req, iteration=1, coverage=1.0, status="failed")
    assert mean_coverage([ok, bad]) == 0.5
    assert mean_coverage([]) == 0.0


def test_an_iteration_that_brings_nothing_new_settles_every_requirement_and_stops_the_loop(tmp_path) -> None:
    # iteration 1 reads 2 documents that hold nothing for either requirement: the next batch may, so nothing is
    # settled; iteration 2 reads no new document and finds no new passage: the next could read nothing new
    crew = make_crew([2, 0, 0], [{"R1": 0.5, "R2": 0.0}], new_passages=0)
    summary, state, emit = run(crew, tmp_path, max_iterations=6)
    assert summary.iterations == 2 and len(crew.searched) == 2
    assert state["iterations"][0]["settled"] == {"R1": "", "R2": ""}
    assert summary.stop_reason == "every requirement settled (coverage 0.25): 2 nothing new"
    assert state["settled"] == summary.settled == {
        "R1": "nothing new in iteration 2: no new document read, no new passage above the topic floor (coverage 0.50)",
        "R2": "nothing new in iteration 2: no new document read, no new passage above the topic floor (coverage 0.00)"}
    assert state["iterations"][1]["new_passages"] == {"R1": 0, "R2": 0}


def test_a_settled_requirement_waits_for_the_others_and_the_stop_says_why_per_requirement(tmp_path) -> None:
    # R1 answered in iteration 1; R2 gets new passages until iteration 3, which reads no new document either
    new = {1: {"R1": 0, "R2": 2}, 2: {"R1": 0, "R2": 2}, 3: {"R1": 0, "R2": 0}}
    crew = make_crew([2, 2, 0, 0, 0, 0], [{"R1": 1.0, "R2": 0.0}, {"R1": 1.0, "R2": 0.5}], new_passages=new)
    summary, state, emit = run(crew, tmp_path, max_iterations=6)
    assert summary.iterations == 3  # not 6: iteration 3 brought R2 nothing new
    assert [it["settled"]["R1"].split(":")[0] for it in state["iterations"]] == ["answered"] * 3
    assert [bool(it["settled"]["R2"]) for it in state["iterations"]] == [False, False, True]
    assert state["settled"]["R1"] == "answered: coverage 1.00 reached the goal 0.85 (iteration 3)"
    assert state["settled"]["R2"].startswith("nothing new in iteration 3")
    assert summary.stop_reason == "every requirement settled (coverage 0.75): 1 answered, 1 nothing new"
    coverage_events = [e for e in emit.events if e.kind == "coverage" and e.stage == "run"]
    assert "settled: R1 (answered)" in coverage_events[0].message
    assert "settled: R1 (answered), R2 (nothing new)" in coverage_events[-1].message


def test_a_requirement_unsettled_at_the_limit_says_so(tmp_path) -> None:
    crew = make_crew([2] * 4, [{"R1": 1.0, "R2": 0.5}])  # R2 keeps getting new passages
    summary, state, _ = run(crew, tmp_path, max_iterations=3)
    assert summary.iterations == 3 and "maximum of 3" in summary.stop_reason
    assert state["settled"]["R2"] == "not settled: the run reached the maximum of 3 iterations"
    assert state["settled"]["R1"].startswith("answered")


def test_each_iteration_records_answering_papers_per_requirement(tmp_path) -> None:
    papers = {n: {"R1": n, "R2": 0} for n in (1, 2, 3)}  # R1 finds one more answering paper each iteration, R2 none
    crew = make_crew([2, 2, 2], [{"R1": 0.5, "R2": 0.0}], answering_papers=papers)
    _, state, _ = run(crew, tmp_path, max_iterations=3)
    assert [it["answering_papers"] for it in state["iterations"]] == [
        {"R1": 1, "R2": 0}, {"R1": 2, "R2": 0}, {"R1": 3, "R2": 0}]


def test_local_crew_reports_each_forage_result_as_its_forager_finishes() -> None:
    from actors.crew import LocalCrew

    class Forager:
        def __init__(self, wait: asyncio.Event | None = None) -> None:
            self.wait, self.cancelled = wait, False

        async def forage(self, r: ForageRequest) -> RequirementCoverage:
            try:
                if self.wait is not None:
                    await self.wait.wait()
            except asyncio.CancelledError:
                self.cancelled = True
                raise
            return RequirementCoverage(run_id=r.run_id, requirement=r.requirement, iteration=r.iteration,
                                       coverage=0.5)

    requests = [ForageRequest(run_id=RUN, iteration=1, requirement=r) for r in plan(2).requirements]

    async def in_order() -> list[str]:
        r1_may_finish = asyncio.Event()
        crew = LocalCrew(None, None, {"R1": Forager(r1_may_finish), "R2": Forager()}, None)
        seen = []
        async for cov in crew.forage_each(requests):  # R2 is reported while R1 still runs
            seen.append(cov.requirement.id)
            r1_may_finish.set()
        return seen

    async def closed_early() -> bool:
        slow = Forager(asyncio.Event())  # never finishes on its own
        each = LocalCrew(None, None, {"R1": slow, "R2": Forager()}, None).forage_each(requests)
        assert (await anext(each)).requirement.id == "R2"
        await each.aclose()  # the Orchestrator stopped (superseded, killed): the rest is cancelled
        return slow.cancelled

    assert asyncio.run(in_order()) == ["R2", "R1"]
    assert asyncio.run(closed_early())
