"""Two runs on a cluster with room for one run's loop workers queue: one runs, the other waits holding nothing, says
so, and starts when the first is done. Before, each run took its workers' room one by one (its Foragers at the start
of an iteration, then its Searcher), so two runs started together could each hold half and both wait forever.

Real parts: the shared Ray cluster (2 CPUs), two RayCrews with real Searcher (a folder of one PDF) and Forager actors,
their placement groups, a real StatusHub actor per run.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from actors.ray_crew import RayCrew
from actors.options import options_for
from actors.status_hub import StatusHub
from infra.settings import Settings
from messages.plan import Requirement
from messages.search import SearchRequest

pytestmark = [pytest.mark.ray, pytest.mark.timeout(600)]


def test_two_runs_that_fit_one_at_a_time_queue_instead_of_each_holding_half(
        ray_cluster, dvt_library: Path, tmp_path: Path) -> None:
    ray = ray_cluster
    from ray.util import placement_group_table

    cpus = ray.cluster_resources()["CPU"]
    # a Searcher, one Ingestor and two Foragers take the whole cluster: one run's loop at a time
    settings = Settings.load(search={"library": dvt_library}, store={"path": tmp_path / "store"},
                             ingest={"pool_size": 1}, ray={"actor_cpus": cpus / 4, "room_wait_s": 0.5})
    requirements = [Requirement(id="R1", text="bleeding after thromboprophylaxis in trauma patients"),
                    Requirement(id="R2", text="pulmonary embolism rates with vena cava filters")]
    runs = ("queue-run-a", "queue-run-b")
    hubs = {run: ray.remote(StatusHub).options(**options_for("status_hub", settings)).remote(run) for run in runs}
    crews = {run: RayCrew(settings, run, hubs[run]) for run in runs}

    async def both() -> tuple[list[str], list, bool]:
        # the whole cluster free first (what earlier tests killed may still be giving its room back)
        probe = ray.util.placement_group([{"CPU": cpus}])
        await asyncio.wait_for(asyncio.wrap_future(probe.ready().future()), 300)
        ray.util.remove_placement_group(probe)
        # each run as the Orchestrator begins an iteration: its Foragers started, then its search
        warming = {run: asyncio.ensure_future(crews[run].start_foragers(requirements)) for run in runs}
        searches = {asyncio.ensure_future(crews[run].search(SearchRequest(
            run_id=run, iteration=1, query="thromboprophylaxis after trauma"))): run for run in runs}
        done, pending = await asyncio.wait(searches, timeout=300, return_when=asyncio.FIRST_COMPLETED)
        assert len(done) == 1, "neither run got room for its workers" if not done else "both ran at once"
        first, second = searches[next(iter(done))], searches[next(iter(pending))]
        await asyncio.wait_for(warming[first], 300)  # the first run has all of its loop workers
        states = [placement_group_table(g)["state"] for g in crews[second].reservation.groups]
        await crews[first].close()  # its run is done: its room goes back
        found = await asyncio.wait_for(next(iter(pending)), 300)
        await asyncio.wait_for(warming[second], 300)
        said: list = []
        for _ in range(120):  # the waiting run's events until it says it was placed: long polls of at most 1 s
            said += await hubs[second].wait.remote(len(said), 1.0)
            if any(e.kind == "placed" for e in said):
                break
        await crews[second].close()
        return states, said, bool(found.candidates)

    try:
        states, events, searched = asyncio.run(both())
    finally:
        for run in runs:
            asyncio.run(crews[run].close())
            ray.kill(hubs[run], no_restart=True)
    assert states == ["PENDING"]  # the waiting run held no room while it waited
    assert searched  # and then ran: its search found the library's paper, its Foragers started
    said = [(e.kind, e.payload.get("workers")) for e in events if e.kind in ("waiting", "placed")]
    waiting = next(e for e in events if e.kind == "waiting")
    assert not waiting.payload["whole"] and "other runs' workers hold it" in waiting.message
    assert said == [("waiting", "2 foragers, a searcher and an ingestor"),
                    ("placed", "2 foragers, a searcher and an ingestor")]


def test_room_for_more_foragers_counts_the_cluster_less_the_runs_own_reservation(
        ray_cluster, tmp_path: Path) -> None:
    ray = ray_cluster
    cpus = ray.cluster_resources()["CPU"]
    requirements = [Requirement(id=f"R{i}", text=f"requirement {i}") for i in (1, 2)]
    for share, room in ((cpus / 4, 0), (cpus / 8, 4)):  # a Searcher, an Ingestor, two Foragers: 4 shares held
        settings = Settings.load(store={"path": tmp_path / "store"}, ingest={"pool_size": 1},
                                 ray={"actor_cpus": share})
        crew = RayCrew(settings, "room-run", None)
        crew.start_foragers(requirements).close()  # made known to the reservation; no worker started
        assert crew.room_for_foragers() == room, share
        group, _ = crew.reservation.bundle("searcher")  # the reservation made and placed: counted on its node now
        ray.get(group.ready(), timeout=300)
        try:
            assert crew.room_for_foragers() == room, share
        finally:
            asyncio.run(crew.close())
    assert RayCrew(settings, "room-run", None, reserve=("ingestor",)).room_for_foragers() is None


def test_a_crew_dropped_without_close_gives_its_reservation_back(ray_cluster, tmp_path: Path) -> None:
    import gc

    ray = ray_cluster
    from ray.util import placement_group_table

    crew = RayCrew(Settings.load(store={"path": tmp_path / "store"}, ingest={"pool_size": 1}), "dropped-run", None)
    group, index = crew.reservation.bundle("searcher")  # the run's reservation, as its first worker makes it
    ray.get(group.ready(), timeout=300)
    assert index == 0 and placement_group_table(group)["state"] == "CREATED"
    del crew  # a placement group outlives its handles: the crew's finalizer removes it
    gc.collect()
    assert placement_group_table(group)["state"] == "REMOVED"


def test_a_run_bigger_than_the_whole_cluster_takes_smaller_shares_and_runs(
        ray_cluster, dvt_library: Path, tmp_path: Path) -> None:
    """A run whose loop workers ask for more CPU than the whole cluster has (a small machine, many requirements)
    used to wait for machines that never join; its shares are now made to fit and it runs."""
    ray = ray_cluster
    from ray.util import placement_group_table

    cpus = ray.cluster_resources()["CPU"]
    # three Foragers, a Searcher and an Ingestor at half the cluster each: 2.5 clusters' worth
    settings = Settings.load(search={"library": dvt_library}, store={"path": tmp_path / "store"},
                             ingest={"pool_size": 1}, ray={"actor_cpus": cpus / 2})
    requirements = [Requirement(id=f"R{i}", text=text) for i, text in enumerate(
        ("bleeding after thromboprophylaxis", "pulmonary embolism with vena cava filters", "heparin dosing"), 1)]
    hub = ray.remote(StatusHub).options(**options_for("status_hub", settings)).remote("big-run")
    crew = RayCrew(settings, "big-run", hub)

    async def run() -> tuple[bool, list[dict[str, float]], str]:
        probe = ray.util.placement_group([{"CPU": cpus}])  # the whole cluster free first, as above
        await asyncio.wait_for(asyncio.wrap_future(probe.ready().future()), 300)
        ray.util.remove_placement_group(probe)
        warming = asyncio.ensure_future(crew.start_foragers(requirements))
        found = await asyncio.wait_for(crew.search(SearchRequest(
            run_id="big-run", iteration=1, query="thromboprophylaxis after trauma")), 300)
        await asyncio.wait_for(warming, 300)  # every Forager started in its (smaller) bundle
        state = placement_group_table(crew.reservation.groups[0])["state"]
        return bool(found.candidates), crew.reservation.all_bundles(), state

    try:
        searched, bundles, state = asyncio.run(run())
        events = ray.get(hub.wait.remote(0, 1.0))
    finally:
        asyncio.run(crew.close())
        ray.kill(hub, no_restart=True)
    assert searched and state == "CREATED"
    assert len(bundles) == 5 and all(b == {"CPU": bundles[0]["CPU"]} for b in bundles)
    assert 5 * bundles[0]["CPU"] <= cpus < 5 * (bundles[0]["CPU"] + 1e-4)  # the largest share that fits
    fitted = [e for e in events if e.kind == "fitted"]
    assert len(fitted) == 1 and fitted[0].payload["asked"] == cpus / 2
    assert "3 foragers, a searcher and an ingestor" in fitted[0].message
    assert not [e for e in events if e.kind == "waiting"]  # placed within ray.room_wait_s (30 s): it did not wait
