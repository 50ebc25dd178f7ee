"""`forage cancel` and resuming a run whose driver died, on the Orchestrator's loop without Ray.

A driver killed mid-run leaves only what the Orchestrator checkpointed in run.json; here the crew
raises SystemExit (not caught by the run, like a killed process) at a chosen stage (during an
ingestion, a forage, between two requirements' forage results, the report), and a fresh
Orchestrator for the same run id continues from run.json. The result is compared with an
uninterrupted run of the same scripted crew.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from typer.testing import CliRunner

from actors.orchestrator import Orchestrator
from actors.steps.events import RecordingEmit
from actors.steps.run.rundir import RunDir
from infra.settings import Settings
from messages import Requirement, RequirementsPlan, ResearchQuery
from tests.fakes import ScriptedCrew

RUN = "run-resume"
COVERAGE = {1: 0.2, 2: 0.5, 3: 0.9}  # mean coverage after each iteration: the goal (0.85) is met in 3


def make_crew(**script) -> ScriptedCrew:
    """Three documents per search; coverage follows the iteration; each iteration reads something new (none settles
    before 3); ``script``: where it dies, and the rest of :class:`ScriptedCrew`'s script."""
    return ScriptedCrew(documents=3, coverage=COVERAGE, answering_papers={i: i for i in COVERAGE},
                        failed_steps={i: (f"step of iteration {i}",) for i in COVERAGE}, new_passages=1, **script)


def make_each_crew(**script) -> ScriptedCrew:
    """Reports each requirement's result as its Forager finishes (like LocalCrew and RayCrew), in plan
    order; ``die_after=(iteration, n)``: killed after the first n results of that iteration."""
    return make_crew(each=True, **script)


def plan(n: int = 2) -> RequirementsPlan:
    q = ResearchQuery(run_id=RUN, text="query")
    reqs = tuple(Requirement(id=f"R{i}", text=f"requirement number {i}") for i in range(1, n + 1))
    return RequirementsPlan(run_id=RUN, query=q, requirements=reqs, approved=True)


def orchestrator(tmp_path, crew: ScriptedCrew) -> Orchestrator:
    settings = Settings.load().updated(run={"runs_dir": tmp_path, "max_iterations": 5, "min_coverage": 0.85})
    return Orchestrator(settings, RUN, crew=crew, emit=RecordingEmit(RUN))


def state(tmp_path) -> dict:
    return json.loads((tmp_path / RUN / "run.json").read_text())


def test_cancel_stops_cleanly_at_the_next_stage_boundary(tmp_path) -> None:
    crew = make_crew(on_forage=lambda it: RunDir(tmp_path, RUN).request_cancel() if it == 2 else None)
    summary = asyncio.run(orchestrator(tmp_path, crew).run(plan()))
    assert summary.status == "cancelled" and summary.iterations == 2
    assert crew.foraged_iterations() == [1, 2] and crew.written == [] and crew.closed
    saved = state(tmp_path)
    assert saved["status"] == "cancelled" and len(saved["iterations"]) == 2  # iteration 2 was completed


@pytest.mark.parametrize("die_at", [("ingest", 2), ("forage", 2), ("write", 3)])
def test_a_resumed_run_redoes_nothing_and_ends_like_an_uninterrupted_one(tmp_path, die_at) -> None:
    whole = tmp_path / "whole"
    reference = asyncio.run(orchestrator(whole, make_crew()).run(plan()))
    expected = json.loads((whole / RUN / "run.json").read_text())

    first = make_crew(die_at=die_at)
    with pytest.raises(SystemExit):
        asyncio.run(orchestrator(tmp_path, first).run(plan()))
    crashed = state(tmp_path)
    assert crashed["status"] == "running"  # what a killed driver leaves behind

    second = make_crew()
    summary = asyncio.run(orchestrator(tmp_path, second).run(plan()))  # a fresh Orchestrator, same run id

    assert summary.status == "finished" and summary.stop_reason == reference.stop_reason
    # nothing ingested before the crash is ingested again, no finished iteration is foraged again
    assert not set(second.ingested_keys()) & set(first.ingested_keys())
    done = len(crashed["iterations"])
    assert second.foraged_iterations() == list(range(done + 1, 4))
    if die_at == ("write", 3):
        assert second.searched == [] and second.foraged == []  # only the report was left to write
    if die_at == ("ingest", 2):  # iteration 2's search results were checkpointed before its ingestion
        assert crashed["searched"]["iteration"] == 2 and crashed["ingested"]["iteration"] == 1
        recorded = [c["key"] for c in crashed["searched"]["candidates"]]
        assert [s.iteration for s in second.searched] == [3]  # iteration 2 is not searched again
        assert second.ingested_keys()[:3] == recorded and len(recorded) == 3
    final = state(tmp_path)
    for key in ("requirements", "final_coverage", "coverage", "stop_reason", "degraded"):
        assert final[key] == expected[key], key
    assert sorted(final["documents"]) == sorted(expected["documents"])
    assert [it["iteration"] for it in final["iterations"]] == [1, 2, 3]
    assert final["resumed"] == [{"after_iteration": done, "status_was": "running"}]
    assert [c.coverage for c in second.written[0].coverages] == [0.9, 0.9]


def test_a_resume_mid_forage_forages_only_the_requirements_not_yet_finished(tmp_path) -> None:
    whole = tmp_path / "whole"
    reference = asyncio.run(orchestrator(whole, make_each_crew()).run(plan(3)))
    expected = json.loads((whole / RUN / "run.json").read_text())
    assert "foraging" not in expected  # a finished iteration's record replaces the partial one

    first = make_each_crew(die_after=(2, 2))  # R1 and R2 of iteration 2 finished, R3 still foraging
    with pytest.raises(SystemExit):
        asyncio.run(orchestrator(tmp_path, first).run(plan(3)))
    crashed = state(tmp_path)
    assert len(crashed["iterations"]) == 1
    assert crashed["foraging"]["iteration"] == 2 and sorted(crashed["foraging"]["done"]) == ["R1", "R2"]

    second = make_each_crew()
    emit = RecordingEmit(RUN)
    settings = Settings.load().updated(run={"runs_dir": tmp_path, "max_iterations": 5, "min_coverage": 0.85})
    summary = asyncio.run(Orchestrator(settings, RUN, crew=second, emit=emit).run(plan(3)))

    assert summary.status == "finished" and summary.stop_reason == reference.stop_reason
    assert second.foraged_requirements == [(2, "R3"), (3, "R1"), (3, "R2"), (3, "R3")]
    assert [s.iteration for s in second.searched] == [3]  # iteration 2 was searched and ingested before
    taken_over = [e for e in emit.events if e.kind == "coverage" and e.payload.get("taken_over")]
    assert [(e.iteration, e.requirement_id) for e in taken_over] == [(2, "R1"), (2, "R2")]
    final = state(tmp_path)
    for key in ("requirements", "final_coverage", "coverage", "stop_reason", "degraded", "documents"):
        assert final[key] == expected[key], key
    assert [it["coverage"] for it in final["iterations"]] == [it["coverage"] for it in expected["iterations"]]
    assert "foraging" not in final


def test_a_recorded_result_for_a_changed_requirement_is_foraged_again(tmp_path) -> None:
    first = make_each_crew(die_after=(1, 1))
    with pytest.raises(SystemExit):
        asyncio.run(orchestrator(tmp_path, first).run(plan(2)))
    assert list(state(tmp_path)["foraging"]["done"]) == ["R1"]
    changed = plan(2).model_copy(update={"requirements": (Requirement(id="R1", text="another first need"),
                                                          Requirement(id="R2", text="requirement number 2"))})
    second = make_each_crew()
    asyncio.run(orchestrator(tmp_path, second).run(changed))
    assert second.foraged_requirements[:2] == [(1, "R1"), (1, "R2")]


def test_a_recorded_failed_result_is_foraged_again_on_resume(tmp_path) -> None:
    failing_first = make_each_crew(failing={"R1": "forager died"}, die_after=(1, 2))  # R1's Forager died, then the driver
    with pytest.raises(SystemExit):
        asyncio.run(orchestrator(tmp_path, failing_first).run(plan(3)))
    assert sorted(state(tmp_path)["foraging"]["done"]) == ["R1", "R2"]
    second = make_each_crew()
    asyncio.run(orchestrator(tmp_path, second).run(plan(3)))
    assert second.foraged_requirements[:2] == [(1, "R1"), (1, "R3")]  # R2's result taken over, R1's failure not


def test_a_run_cancelled_before_any_progress_resumes(tmp_path) -> None:
    RunDir(tmp_path, RUN).request_cancel()  # asked right after approval, before the first stage boundary
    first = make_crew()
    assert asyncio.run(orchestrator(tmp_path, first).run(plan())).status == "cancelled"
    assert first.searched == [] and state(tmp_path)["status"] == "cancelled"
    second = make_crew()
    summary = asyncio.run(orchestrator(tmp_path, second).run(plan()))  # what forage resume / the gateway do
    assert summary.status == "finished" and second.written


def test_cancel_cli_and_resume_refusals(tmp_path) -> None:
    from gateway import cli

    runner = CliRunner()
    rundir = RunDir(tmp_path, "run-x")
    rundir.save_state({"run_id": "run-x", "status": "running", "query": "q"})
    out = runner.invoke(cli.app, ["cancel", "run-x", "--runs-dir", str(tmp_path)])
    assert out.exit_code == 0 and rundir.cancel_requested()
    assert runner.invoke(cli.app, ["cancel", "run-missing", "--runs-dir", str(tmp_path)]).exit_code == 2
    rundir.save_state({"run_id": "run-x", "status": "finished", "query": "q"})
    out = runner.invoke(cli.app, ["resume", "run-x", "--runs-dir", str(tmp_path)])
    assert out.exit_code == 2 and "already finished" in out.output
    rundir.save_state({"run_id": "run-x", "status": "awaiting_approval", "query": "q"})
    out = runner.invoke(cli.app, ["resume", "run-x", "--runs-dir", str(tmp_path)])
    assert out.exit_code == 2 and "never started" in out.output
