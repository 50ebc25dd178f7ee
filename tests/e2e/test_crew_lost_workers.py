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

from actors.ray_crew import RayCrew
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
        ray_cluster, dvt_library: Path, tmp_path: Path) -> None:
    ray = ray_cluster
    from ray.exceptions import RayActorError

    from actors.writer import Writer

    settings = Settings.load(search={"library": dvt_library}, store={"path": tmp_path / "store"},
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
        assert crew._searcher is None and crew._foragers == {} and crew.ingestors.actors == []

        events = ray.get(hub.events.remote(0))
        retried = [(e.stage, e.payload.get("reason")) for e in events if e.kind == "retried"]
        assert retried == [(Stage.SEARCH, "searcher lost (1)"), (Stage.WRITE, "writer lost (1)")]
    finally:
        asyncio.run(crew.close())
        ray.kill(hub, no_restart=True)


def test_a_worker_waiting_for_room_on_the_cluster_is_said_so_and_starts_when_room_comes_back(
        ray_cluster, dvt_library: Path, tmp_path: Path) -> None:
    ray = ray_cluster
    # a Searcher that asks the cluster for its own room (not reserved with a run's loop, as the benches make theirs),
    # while something else holds every CPU (another run's reservation)
    settings = Settings.load(search={"library": dvt_library}, store={"path": tmp_path / "store"},
                             ray={"room_wait_s": 0.5})
    hub = ray.remote(StatusHub).options(**options_for("status_hub", settings)).remote(RUN)
    crew = RayCrew(settings, RUN, hub, reserve=())
    cpus = ray.cluster_resources()["CPU"]

    async def search_while_held() -> tuple[list, bool, list]:
        # every CPU still free is held (not every CPU of the cluster: the session's earlier tests may still hold
        # some, and waiting for them took 292 s once in the whole suite)
        free = ray.available_resources().get("CPU", 0.0)
        holder = ray.util.placement_group([{"CPU": free if free > 0 else cpus}])
        await asyncio.wait_for(asyncio.wrap_future(holder.ready().future()), 300)
        search = asyncio.ensure_future(crew.search(SearchRequest(run_id=RUN, iteration=1, query="anything")))
        said: list = []
        try:
            for _ in range(120):  # long polls of at most 1 s each: bounded
                said += await hub.wait.remote(len(said), 1.0)
                if any(e.kind == "waiting" for e in said) or search.done():
                    break
            started_while_held = search.done()
        finally:
            ray.util.remove_placement_group(holder)  # the room comes back
        found = await asyncio.wait_for(search, 300)
        for _ in range(120):
            if any(e.kind == "placed" for e in said):
                break
            said += await hub.wait.remote(len(said), 1.0)
        return said, started_while_held, list(found.candidates)

    try:
        said, started_while_held, found = asyncio.run(search_while_held())
    finally:
        asyncio.run(crew.close())
        ray.kill(hub, no_restart=True)
    assert not started_while_held and [Path(c.path or "").name for c in found] == [PAPER]
    waiting = next(e for e in said if e.kind == "waiting")
    assert waiting.stage == Stage.RUN and waiting.payload["role"] == "searcher"
    assert waiting.payload["short"] == f"{settings.ray.actor_cpus:g} CPU asked, 0 free"
    assert "other runs' workers hold it" in waiting.message
    assert [e.payload["role"] for e in said if e.kind == "placed"] == ["searcher"]
