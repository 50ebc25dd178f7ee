"""StatusHub ordering/persistence/long-poll without Ray, and every Ray option coming from Settings."""

from __future__ import annotations

import asyncio

import pytest

from actors.reservation import Reservation, RunReservation, waiting_message
from actors.options import (
    bundle_of,
    fitted_share,
    method_options,
    missing_for,
    missing_room,
    options_for,
    room_on_nodes,
    total_of,
)
from actors.status_hub import StatusHub
from infra.settings import Settings
from messages.status import Stage, StatusEvent


def ev(kind: str) -> StatusEvent:
    return StatusEvent(run_id="r", stage=Stage.INGEST, kind=kind, message=kind)


def test_hub_numbers_persists_and_resumes(tmp_path) -> None:
    path = tmp_path / "events.jsonl"

    async def scenario() -> list[StatusEvent]:
        hub = StatusHub("r", path)
        for k in ("a", "b", "c"):
            await hub.publish(ev(k))
        return await hub.events(1)

    later = asyncio.run(scenario())
    assert [(e.seq, e.kind) for e in later] == [(2, "b"), (3, "c")]
    resumed = StatusHub("r", path)  # a restarted hub continues the numbering from the file
    assert asyncio.run(resumed.publish(ev("d"))) == 4
    assert [line for line in path.read_text().splitlines() if line][-1].count('"seq":4') == 1


def test_hub_wait_wakes_on_publish_and_times_out_empty() -> None:
    async def scenario() -> tuple[list[StatusEvent], list[StatusEvent]]:
        hub = StatusHub("r")
        waiter = asyncio.create_task(hub.wait(0, timeout=30))
        await asyncio.sleep(0)  # let the waiter block on the condition
        await hub.publish(ev("x"))
        woke = await waiter
        empty = await hub.wait(1, timeout=0.01)
        return woke, empty

    woke, empty = asyncio.run(scenario())
    assert [e.kind for e in woke] == ["x"] and empty == []


def test_options_come_from_settings() -> None:
    s = Settings.load().updated(ray={"actor_cpus": 0.5, "max_restarts": 3, "max_task_retries": 2})
    assert options_for("forager", s)["num_cpus"] == 0.5
    assert options_for("ingestor", s)["max_restarts"] == 3
    assert options_for("ingestor", s)["max_concurrency"] == 1
    assert options_for("forager", s)["max_task_retries"] == 0
    assert method_options("searcher", "search", s) == {"max_task_retries": 2}  # idempotent: Ray retries it
    # the pool retries a crashed document itself, on a fresh Ingestor (actors/crew.py), so Ray does not as well
    assert method_options("ingestor", "ingest", s) == {"max_task_retries": 0}
    assert method_options("forager", "forage", s) == {"max_task_retries": 0}  # not idempotent
    assert method_options("writer", "write", s) == {"max_task_retries": 0}


def test_missing_room_names_what_a_worker_asks_for_and_the_cluster_lacks() -> None:
    settings = Settings.load(ray={"actor_cpus": 0.5})
    forager = options_for("forager", settings)
    assert missing_room(forager, {"CPU": 2.0}) == ""
    assert missing_room(forager, {"CPU": 0.25, "GPU": 1.0}) == "0.5 CPU asked, 0.25 free"
    assert missing_room(forager, {}) == "0.5 CPU asked, 0 free"
    endpoint = options_for("llm_endpoint", settings, endpoint_slots=2)  # no CPU, two llm_slot units
    assert missing_room(endpoint, {"CPU": 0.0, "llm_slot": 1.0}) == "2 llm_slot asked, 1 free"
    assert missing_room({"num_cpus": 0, "num_gpus": 0.5}, {"CPU": 4.0}) == "0.5 GPU asked, 0 free"


def test_a_runs_reservation_is_the_sum_of_its_workers_bundles() -> None:
    settings = Settings.load(ray={"actor_cpus": 0.5})
    forager = bundle_of(options_for("forager", settings))
    assert forager == {"CPU": 0.5}
    assert bundle_of(options_for("llm_endpoint", settings, endpoint_slots=2)) == {"llm_slot": 2.0}  # no CPU
    assert bundle_of(options_for("orchestrator", settings)) == {}  # reserves nothing: never put in a group
    assert bundle_of({"num_cpus": 0.25, "num_gpus": 0.5}) == {"CPU": 0.25, "GPU": 0.5}
    three = [forager, forager, {"CPU": 0.5, "GPU": 0.5}]
    assert total_of(three) == {"CPU": 1.5, "GPU": 0.5} and total_of([]) == {}
    assert missing_for(three, {"CPU": 2.0, "GPU": 1.0}) == ""
    assert missing_for(three, {"CPU": 1.0, "GPU": 1.0}) == "1.5 CPU asked, 1 free"
    assert missing_for(three, {"CPU": 1.0}) == "1.5 CPU asked, 1 free; 0.5 GPU asked, 0 free"
    assert missing_for([], {}) == ""


def test_a_run_bigger_than_the_cluster_gets_the_largest_share_that_fits_node_by_node() -> None:
    assert fitted_share(8, 0.25, [2.0]) == 0.25  # 8 quarter CPUs fit 2 CPUs: as asked
    assert fitted_share(13, 0.25, [2.0]) == 0.1538  # 2 / 13, rounded down to Ray's four decimals
    assert 13 * 0.1538 <= 2.0 < 13 * 0.1539
    # a bundle lives on one node: 0.2 CPU gives 7 + 12 = 19 bundles on nodes of 1.5 and 2.5 CPUs, 2.5 / 13 gives 20
    assert fitted_share(20, 0.25, [1.5, 2.5]) == 0.1923
    assert int(1.5 / 0.1923) + int(2.5 / 0.1923) == 20
    assert fitted_share(4, 2.0, [2.0, 0.0]) == 0.5  # a node without CPUs holds none
    assert fitted_share(3, 0.5, []) == 0.5  # no node with a CPU: nothing fits, the share stays as asked
    assert fitted_share(0, 0.5, [1.0]) == 0.5
    assert fitted_share(1, 64.0, [2.0, 1.0]) == 2.0  # one worker (the Writer): the largest machine


def test_room_for_more_bundles_is_counted_node_by_node() -> None:
    # two 2-CPU machines, a run of 0.3-CPU workers: six on one (0.2 left), two on the other (1.4 left)
    assert room_on_nodes([0.2, 1.4], 0.3) == 4  # the cluster's totals (1.6 free) would say 5
    assert room_on_nodes([0.2, 1.4], 0.3, elsewhere=1) == 3  # one of the run's bundles still to be placed
    assert room_on_nodes([2.0], 0.5, elsewhere=4) == 0 and room_on_nodes([2.0], 0.25, elsewhere=4) == 4
    assert room_on_nodes([-0.1, 0.5], 0.25) == 2  # never less than nothing on a node
    with pytest.raises(ValueError):
        room_on_nodes([1.0], 0.0)


def test_the_reservation_ledger_gives_each_worker_one_bundle_and_a_replaced_worker_the_same() -> None:
    book = Reservation()
    assert book.spot("searcher") is None
    loop = ["searcher", "ingestor/0", "ingestor/1", "forager/R1", "forager/R2"]
    assert book.unplaced([*loop, "searcher"]) == loop  # in order, once each
    assert book.add(loop) == 0
    assert book.spot("ingestor/1") == (0, 2) and book.spot("forager/R2") == (0, 4)
    # a re-plan's requirements: a group of their own, the loop's bundles kept
    assert book.unplaced([*loop, "forager/R3", "forager/R4"]) == ["forager/R3", "forager/R4"]
    assert book.add(["forager/R3", "forager/R4"]) == 1
    assert book.spot("forager/R4") == (1, 1) and book.spot("forager/R1") == (0, 3)
    with pytest.raises(ValueError, match="without a bundle"):
        book.add(["forager/R1"])  # a worker placed once is never placed twice
    with pytest.raises(ValueError):
        book.add([])
    assert Reservation.describe(loop) == "a searcher, 2 ingestors and 2 foragers"
    assert Reservation.describe(["forager/R3"]) == "a forager"
    assert Reservation.describe(["ingestor/0", "forager/R1"]) == "an ingestor and a forager"
    book.clear()
    assert book.spot("searcher") is None and book.unplaced(loop) == loop


def test_foragers_spread_and_coordinators_stay_on_the_drivers_node() -> None:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    s = Settings.load()
    assert options_for("forager", s)["scheduling_strategy"] == "SPREAD"
    assert "scheduling_strategy" not in options_for("ingestor", s)
    assert "scheduling_strategy" not in options_for("orchestrator", s)  # no driver node known: anywhere
    for role in ("orchestrator", "status_hub"):
        strategy = options_for(role, s, home_node="ab" * 28)["scheduling_strategy"]
        assert isinstance(strategy, NodeAffinitySchedulingStrategy)
        assert strategy.node_id == "ab" * 28 and not strategy.soft  # soft affinity was seen to place them elsewhere


@pytest.mark.parametrize("preset,iters", [("quick", 2), ("standard", 6), ("deep", 6)])
def test_presets(preset: str, iters: int) -> None:
    assert Settings.load(preset).run.max_iterations == iters  # type: ignore[arg-type]
    assert Settings.load(preset, run={"max_iterations": 9}).run.max_iterations == 9  # explicit wins  # type: ignore[arg-type]


def test_unknown_preset_and_field_are_refused() -> None:
    with pytest.raises(ValueError, match="preset"):
        Settings.load("fast")  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        Settings.load(run={"max_iteration": 3})


@pytest.mark.ray
def test_hub_as_actor_keeps_order_across_callers(ray_cluster, tmp_path) -> None:
    import ray

    from actors.status_hub import HubEmit

    hub = ray.remote(StatusHub).options(**options_for("status_hub", Settings.load())).remote("r", str(tmp_path / "e"))

    @ray.remote(num_cpus=0)
    def produce(h, tag: str) -> None:
        emit = HubEmit("r", h)
        for i in range(20):
            emit(Stage.FORAGE, "tick", f"{tag}{i}")

    ray.get([produce.remote(hub, "a"), produce.remote(hub, "b")])
    ray.get(hub.wait.remote(39, 60.0))  # returns as soon as the 40th event is in
    events = ray.get(hub.events.remote(0))
    assert [e.seq for e in events] == list(range(1, 41))
    for tag in "ab":  # each caller's events arrive in the order it sent them
        mine = [e.message for e in events if e.message.startswith(tag)]
        assert mine == [f"{tag}{i}" for i in range(20)]
    ray.kill(hub)


def test_hub_releases_each_source_in_its_own_order() -> None:
    async def scenario() -> list[str]:
        hub = StatusHub("r")
        late = asyncio.create_task(hub.publish(ev("second"), "src", 2))  # overtook the first
        await asyncio.sleep(0)
        assert await hub.events(0) == []  # held back until the gap is filled
        await hub.publish(ev("other"), "other-src", 1)
        await hub.publish(ev("first"), "src", 1)
        assert await late == 3
        return [e.kind for e in await hub.events(0)]

    assert asyncio.run(scenario()) == ["other", "first", "second"]


def test_a_changed_preset_applies_under_explicit_values(monkeypatch) -> None:
    """`updated(preset=...)` (the gateway's preset, resume) gives the preset's values wherever nothing was set
    explicitly — by load's overrides, an earlier `updated`, or the environment."""
    s = Settings.load().updated(preset="quick")
    assert (s.preset, s.run.max_iterations, s.forage.bm25_k, s.forage.max_deep_dives) == ("quick", 2, 2, 1)
    deep = Settings.load("quick", forage={"bm25_k": 7}).updated(run={"max_requirements": 3}).updated(preset="deep")
    assert (deep.run.min_coverage, deep.forage.max_deep_dives, deep.forage.vector_k) == (0.9, 4, 5)
    assert deep.forage.bm25_k == 7 and deep.run.max_requirements == 3  # explicit values stay
    assert deep.updated(preset="standard").run.min_coverage == 0.85
    monkeypatch.setenv("FORAGE_RUN__MAX_ITERATIONS", "4")
    assert Settings.load().updated(preset="quick").run.max_iterations == 4


def test_settings_for_run_is_the_one_builder(tmp_path) -> None:
    from infra.settings import settings_for_run

    base = Settings.load(run={"runs_dir": tmp_path})
    s = settings_for_run(base, preset="quick", library=tmp_path, offline=True, model="m:1", min_coverage=0.5)
    assert (s.run.max_iterations, s.run.min_coverage, s.search.library, s.net.offline, s.llm.model) == (
        2, 0.5, tmp_path.resolve(), True, "m:1")
    assert settings_for_run(base) is base
    again = settings_for_run(Settings.load(), recorded=s.record())
    assert again.record() == s.record() and again.preset == "quick"


def test_the_embedded_backend_gets_the_small_models_window_unless_one_is_given() -> None:
    from infra.settings import EMBEDDED_WINDOW, settings_for_run

    base = Settings.load()
    chosen = settings_for_run(base, llm_backend="embedded")  # the dashboard's form, `--llm embedded`
    assert (chosen.llm.n_ctx, chosen.llm.max_tokens) == (EMBEDDED_WINDOW["n_ctx"], EMBEDDED_WINDOW["max_tokens"])
    assert (base.llm.n_ctx, base.llm.max_tokens) == (8192, 1024)  # a served model keeps the general defaults
    own = settings_for_run(Settings.load(llm={"max_tokens": 700}), llm_backend="embedded")
    assert (own.llm.n_ctx, own.llm.max_tokens) == (EMBEDDED_WINDOW["n_ctx"], 700)  # an explicit value stands
    resumed = settings_for_run(Settings.load(), recorded=chosen.record())
    assert resumed.llm == chosen.llm


def test_a_waiting_run_says_who_is_in_the_way_and_what_to_change() -> None:
    first = waiting_message("2 foragers and a searcher", "0.75 CPU asked, 0 free", "", first=True)
    assert "other runs' workers hold it" in first and "holds none of it meanwhile" in first
    assert "(0.75 CPU asked, 0 free)" in first
    added = waiting_message("a forager", "0.25 CPU asked, 0 free", "", first=False)
    assert "its other workers keep theirs" in added and "none of it" not in added
    alone = waiting_message("a searcher and 2 ingestors", "192 CPU asked, 2 free", "192 CPU asked, 2 in the cluster",
                            first=True)
    assert "more room than the whole Ray cluster has (192 CPU asked, 2 in the cluster" in alone
    assert "ray.actor_cpus" in alone and "ray.num_cpus" in alone and "other runs" not in alone



def test_a_waiting_reservation_looks_again_until_the_cluster_shows_what_it_lacks() -> None:
    """CI, 2026-11-29: just after another run's reservation was made, Ray's free resources did not show it yet;
    looked at once, nothing seemed lacking and the waiting run never said it waited. Now it looks every
    ``ray.room_wait_s`` until something is lacking, or it is placed."""
    reservation = RunReservation(Settings.load(ray={"room_wait_s": 0.01}), "run-wait", lambda *a, **k: None,
                                 reserve=(), ingestors=lambda: 1)
    seen = iter(["", "", "0.75 CPU asked, 0 free"])
    looked: list[int] = []

    def short_of() -> str:
        looked.append(1)
        return next(seen)

    async def waiting() -> str:
        never: asyncio.Future[None] = asyncio.get_running_loop().create_future()  # not placed while it looks
        return await reservation._short_while_waiting(never, short_of)

    assert asyncio.run(waiting()) == "0.75 CPU asked, 0 free" and len(looked) == 3

    async def placed() -> str:
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        ready.set_result(None)
        return await reservation._short_while_waiting(ready, short_of)

    assert asyncio.run(placed()) == "" and len(looked) == 3  # placed: nothing looked at, nothing said
