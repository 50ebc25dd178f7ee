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
from collections.abc import AsyncGenerator, Sequence

import pytest
from typer.testing import CliRunner

from actors.orchestrator import Orchestrator
from actors.steps.events import RecordingEmit
from actors.steps.run.rundir import RunDir
from infra.settings import Settings
from messages import (
    Candidate, ForageRequest, IngestRequest, IngestResult, Report, Requirement, RequirementCoverage,
    RequirementsPlan, ResearchQuery, SearchRequest, SearchResults, WriteRequest,
)

RUN = "run-resume"
COVERAGE = {1: 0.2, 2: 0.5, 3: 0.9}  # mean coverage after each iteration: the goal (0.85) is met in 3


class Crew:
    """Three documents per search; coverage follows the iteration; may die at one stage."""

    def __init__(self, die_at: tuple[str, int] | None = None, on_forage=None) -> None:
        self.die_at = die_at
        self.on_forage = on_forage
        self.searched: list[SearchRequest] = []
        self.ingest_calls = 0
        self.ingested: list[str] = []
        self.foraged: list[int] = []
        self.foraged_requirements: list[tuple[int, str]] = []
        self.written: list[WriteRequest] = []
        self.closed = False

    def _maybe_die(self, stage: str, iteration: int) -> None:
        if self.die_at == (stage, iteration):
            raise SystemExit(f"driver killed during {stage} of iteration {iteration}")

    async def search(self, request: SearchRequest) -> SearchResults:
        self.searched.append(request)
        n = len([k for k in request.exclude_keys])
        cands = tuple(Candidate(key=f"file:/lib/{n + j}.pdf", path=f"/lib/{n + j}.pdf") for j in range(3))
        return SearchResults(run_id=request.run_id, iteration=request.iteration, candidates=cands)

    async def ingest(self, requests: Sequence[IngestRequest]) -> list[IngestResult]:
        self.ingest_calls += 1
        self._maybe_die("ingest", self.ingest_calls)  # one ingestion per iteration in an uninterrupted crew
        self.ingested.extend(r.candidate.key for r in requests)
        return [IngestResult(run_id=r.run_id, key=r.candidate.key, path=r.candidate.path, status="stored",
                             doc_id=r.candidate.key[-8:]) for r in requests]

    async def forage(self, requests: Sequence[ForageRequest]) -> list[RequirementCoverage]:
        iteration = requests[0].iteration
        self._maybe_die("forage", iteration)
        self.foraged.append(iteration)
        if self.on_forage:
            self.on_forage(iteration)
        return [self._coverage(r) for r in requests]

    def _coverage(self, r: ForageRequest) -> RequirementCoverage:
        self.foraged_requirements.append((r.iteration, r.requirement.id))
        return RequirementCoverage(run_id=r.run_id, requirement=r.requirement, iteration=r.iteration,
                                   coverage=COVERAGE[r.iteration], answering_papers=r.iteration,
                                   failed_steps=(f"step of iteration {r.iteration}",),
                                   new_passages=1)  # each iteration reads something new: none settles before 3

    async def write(self, request: WriteRequest) -> Report:
        self._maybe_die("write", request.iterations)
        self.written.append(request)
        return Report(run_id=request.run_id, markdown="# Report\n")

    async def close(self) -> None:
        self.closed = True


class EachCrew(Crew):
    """Reports each requirement's result as its Forager finishes (like LocalCrew and RayCrew), in plan
    order; ``die_after=(iteration, n)``: killed after the first n results of that iteration."""

    def __init__(self, die_after: tuple[int, int] | None = None) -> None:
        super().__init__()
        self.die_after = die_after

    async def forage_each(self, requests: Sequence[ForageRequest]) -> AsyncGenerator[RequirementCoverage, None]:
        iteration = requests[0].iteration
        self.foraged.append(iteration)
        for n, r in enumerate(requests):
            if self.die_after == (iteration, n):
                raise SystemExit(f"driver killed after {n} forage results of iteration {iteration}")
            yield self._coverage(r)


def plan(n: int = 2) -> RequirementsPlan:
    q = ResearchQuery(run_id=RUN, text="query")
    reqs = tuple(Requirement(id=f"R{i}", text=f"requirement number {i}") for i in range(1, n + 1))
    return RequirementsPlan(run_id=RUN, query=q, requirements=reqs, approved=True)


def orchestrator(tmp_path, crew: Crew) -> Orchestrator:
    settings = Settings.load().updated(run={"runs_dir": tmp_path, "max_iterations": 5, "min_coverage": 0.85})
    return Orchestrator(settings, RUN, crew=crew, emit=RecordingEmit(RUN))


def state(tmp_path) -> dict:
    return json.loads((tmp_path / RUN / "run.json").read_text())


def test_cancel_stops_cleanly_at_the_next_stage_boundary(tmp_path) -> None:
    crew = Crew(on_forage=lambda it: RunDir(tmp_path, RUN).request_cancel() if it == 2 else None)
    summary = asyncio.run(orchestrator(tmp_path, crew).run(plan()))
    assert summary.status == "cancelled" and summary.iterations == 2
    assert crew.foraged == [1, 2] and crew.written == [] and crew.closed
    saved = state(tmp_path)
    assert saved["status"] == "cancelled" and len(saved["iterations"]) == 2  # iteration 2 was completed


@pytest.mark.parametrize("die_at", [("ingest", 2), ("forage", 2), ("write", 3)])
def test_a_resumed_run_redoes_nothing_and_ends_like_an_uninterrupted_one(tmp_path, die_at) -> None:
    whole = tmp_path / "whole"
    reference = asyncio.run(orchestrator(whole, Crew()).run(plan()))
    expected = json.loads((whole / RUN / "run.json").read_text())

    first = Crew(die_at=die_at)
    with pytest.raises(SystemExit):
        asyncio.run(orchestrator(tmp_path, first).run(plan()))
    crashed = state(tmp_path)
    assert crashed["status"] == "running"  # what a killed driver leaves behind

    second = Crew()
    summary = asyncio.run(orchestrator(tmp_path, second).run(plan()))  # a fresh Orchestrator, same run id

    assert summary.status == "finished" and summary.stop_reason == reference.stop_reason
    # nothing ingested before the crash is ingested again, no finished iteration is foraged again
    assert not set(second.ingested) & set(first.ingested)
    done = len(crashed["iterations"])
    assert second.foraged == list(range(done + 1, 4))
    if die_at == ("write", 3):
        assert second.searched == [] and second.foraged == []  # only the report was left to write
    if die_at == ("ingest", 2):  # iteration 2's search results were checkpointed before its ingestion
        assert crashed["searched"]["iteration"] == 2 and crashed["ingested"]["iteration"] == 1
        recorded = [c["key"] for c in crashed["searched"]["candidates"]]
        assert [s.iteration for s in second.searched] == [3]  # iteration 2 is not searched again
        assert second.ingested[:3] == recorded and len(recorded) == 3
    final = state(tmp_path)
    for key in ("requirements", "final_coverage", "coverage", "stop_reason", "degraded"):
        assert final[key] == expected[key], key
    assert sorted(final["documents"]) == sorted(expected["documents"])
    assert [it["iteration"] for it in final["iterations"]] == [1, 2, 3]
    assert final["resumed"] == [{"after_iteration": done, "status_was": "running"}]
    assert [c.coverage for c in second.written[0].coverages] == [0.9, 0.9]


def test_a_resume_mid_forage_forages_only_the_requirements_not_yet_finished(tmp_path) -> None:
    whole = tmp_path / "whole"
    reference = asyncio.run(orchestrator(whole, EachCrew()).run(plan(3)))
    expected = json.loads((whole / RUN / "run.json").read_text())
    assert "foraging" not in expected  # a finished iteration's record replaces the partial one

    first = EachCrew(die_after=(2, 2))  # R1 and R2 of iteration 2 finished, R3 still foraging
    with pytest.raises(SystemExit):
        asyncio.run(orchestrator(tmp_path, first).run(plan(3)))
    crashed = state(tmp_path)
    assert len(crashed["iterations"]) == 1
    assert crashed["foraging"]["iteration"] == 2 and sorted(crashed["foraging"]["done"]) == ["R1", "R2"]

    second = EachCrew()
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
    first = EachCrew(die_after=(1, 1))
    with pytest.raises(SystemExit):
        asyncio.run(orchestrator(tmp_path, first).run(plan(2)))
    assert list(state(tmp_path)["foraging"]["done"]) == ["R1"]
    changed = plan(2).model_copy(update={"requirements": (Requirement(id="R1", text="another first need"),
                                                          Requirement(id="R2", text="requirement number 2"))})
    second = EachCrew()
    asyncio.run(orchestrator(tmp_path, second).run(changed))
    assert second.foraged_requirements[:2] == [(1, "R1"), (1, "R2")]


def test_a_recorded_failed_result_is_foraged_again_on_resume(tmp_path) -> None:
    class FailingFirst(EachCrew):  # R1's Forager died in iteration 1, then the driver died
        def _coverage(self, r: ForageRequest) -> RequirementCoverage:
            cov = super()._coverage(r)
            if r.requirement.id == "R1":
                return cov.model_copy(update={"status": "failed", "coverage": 0.0, "error": "forager died"})
            return cov

    with pytest.raises(SystemExit):
        asyncio.run(orchestrator(tmp_path, FailingFirst(die_after=(1, 2))).run(plan(3)))
    assert sorted(state(tmp_path)["foraging"]["done"]) == ["R1", "R2"]
    second = EachCrew()
    asyncio.run(orchestrator(tmp_path, second).run(plan(3)))
    assert second.foraged_requirements[:2] == [(1, "R1"), (1, "R3")]  # R2's result taken over, R1's failure not


def test_a_run_cancelled_before_any_progress_resumes(tmp_path) -> None:
    RunDir(tmp_path, RUN).request_cancel()  # asked right after approval, before the first stage boundary
    first = Crew()
    assert asyncio.run(orchestrator(tmp_path, first).run(plan())).status == "cancelled"
    assert first.searched == [] and state(tmp_path)["status"] == "cancelled"
    second = Crew()
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
