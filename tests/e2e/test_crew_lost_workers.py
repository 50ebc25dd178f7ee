"""A run's Searcher or Writer lost under a call (its process killed, its node gone) is replaced and asked again:
the run goes on and says so. The report's Writer does not wait for room the loop's idle workers hold: they are
let go before it is created. A worker that waits for room on the cluster is said so in the run's events.

Real parts: the shared Ray cluster, RayCrew with real Searcher (a folder of one PDF), Forager and Writer actors, a
real StatusHub actor; the Writer's model is a scripted fake (``shippable``: it travels to the actor).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from actors.crew import RayCrew
from actors.options import options_for
from actors.status_hub import StatusHub
from infra.llm.fakes import ScriptedLLM
from infra.settings import Settings
from messages.forage import RequirementCoverage
from messages.plan import Requirement, ResearchQuery
from messages.search import SearchRequest
from messages.status import Stage
from messages.write import WriteRequest

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]

RUN = "lost-workers-run"
PAPER = "dvt_prophylaxis_trauma_bmc2010.pdf"


def test_a_lost_searcher_and_writer_are_replaced_and_the_loop_workers_go_before_the_writer(
        ray_cluster, shared_pdfs, tmp_path: Path) -> None:
    ray = ray_cluster
    from ray.exceptions import RayActorError

    from actors.writer import Writer

    library = tmp_path / "library"
    library.mkdir()
    (library / PAPER).symlink_to(next(p for p in shared_pdfs if p.name == PAPER))
    settings = Settings.load(search={"library": library}, store={"path": tmp_path / "store"},
                             write={"charts": False}, ray={"max_task_retries": 1})
    hub = ray.remote(StatusHub).options(**options_for("status_hub", settings)).remote(RUN)
    # the one call a report with no evidence makes: its overview (each Writer gets its own copy of the script)
    llm = ScriptedLLM({"OverviewDraft": [{"title": "Thromboprophylaxis", "overview": "Nothing was found."}]})
    crew = RayCrew(settings, RUN, hub, llm=llm)
    request = SearchRequest(run_id=RUN, iteration=1, query="thromboprophylaxis after trauma")
    try:
        first = asyncio.run(crew.search(request))
        assert [Path(c.path or "").name for c in first.candidates] == [PAPER]
        killed = crew._searcher
        ray.kill(killed, no_restart=True)  # the process is gone, as when its node leaves the cluster

        again = asyncio.run(crew.search(request))
        assert again.candidates == first.candidates  # asked again on a fresh Searcher
        assert crew._searcher is not None and crew._searcher != killed
        searcher = crew._searcher
        forager = crew._forager("R1")
        ray.get(forager.__ray_ready__.remote())

        requirement = Requirement(id="R1", text="complications of thromboprophylaxis after trauma")
        coverage = RequirementCoverage(run_id=RUN, requirement=requirement, iteration=1, status="failed",
                                       coverage=0.0, error="its Forager died")
        lost_writer = ray.remote(Writer).options(**options_for("writer", settings)).remote(settings, RUN, hub)
        ray.kill(lost_writer, no_restart=True)
        crew._writer = lost_writer
        report = asyncio.run(crew.write(WriteRequest(
            run_id=RUN, query=ResearchQuery(run_id=RUN, text="thromboprophylaxis after trauma"),
            coverages=(coverage,), iterations=1)))
        assert "its Forager died" in report.markdown  # written by a fresh Writer
        assert crew._writer != lost_writer

        # the loop's workers were let go before the Writer was made: their CPU reservations are free again
        for gone in (searcher, forager):
            with pytest.raises(RayActorError):
                ray.get(gone.__ray_ready__.remote(), timeout=60)
        assert crew._searcher is None and crew._foragers == {} and crew._ingestors == []

        events = ray.get(hub.events.remote(0))
        retried = [(e.stage, e.payload.get("reason")) for e in events if e.kind == "retried"]
        assert retried == [(Stage.SEARCH, "searcher lost (1)"), (Stage.WRITE, "writer lost (1)")]
    finally:
        asyncio.run(crew.close())
        ray.kill(hub, no_restart=True)


def test_a_worker_waiting_for_room_on_the_cluster_is_said_so(ray_cluster, tmp_path: Path) -> None:
    ray = ray_cluster
    # every worker asks for more CPU than the session's Ray has: the Searcher is never placed
    settings = Settings.load(search={"library": tmp_path}, store={"path": tmp_path / "store"},
                             ray={"actor_cpus": 64, "room_wait_s": 0.5})
    hub = ray.remote(StatusHub).options(**options_for("status_hub", settings)).remote(RUN)
    crew = RayCrew(settings, RUN, hub)

    async def search_until_said() -> list:
        search = asyncio.ensure_future(crew.search(SearchRequest(run_id=RUN, iteration=1, query="anything")))
        seen, waiting = 0, []
        for _ in range(120):  # long polls of at most 1 s each: bounded
            events = await hub.wait.remote(seen, 1.0)
            seen += len(events)
            waiting += [e for e in events if e.kind == "waiting"]
            if waiting or search.done():
                break
        search.cancel()
        await asyncio.gather(search, return_exceptions=True)
        await crew.close()
        return waiting

    try:
        (said,) = asyncio.run(search_until_said())
    finally:
        ray.kill(hub, no_restart=True)
    # the Searcher is reserved with the run's Ingestor pool (two), all at once: none of them is placed
    assert said.stage == Stage.RUN and said.payload["workers"] == "a searcher and 2 ingestors"
    assert said.payload["short"].startswith("192 CPU asked, ")
    # no other run is in the way: the run alone needs more than the cluster has, and is told what to change
    assert said.payload["whole"] == f"192 CPU asked, {ray.cluster_resources()['CPU']:g} in the cluster"
    assert "more room than the whole Ray cluster has" in said.message and "ray.actor_cpus" in said.message
