"""The node CPU gate (actors/cpu_gate.py): its queue in this process, then the actor through the session's Ray."""

from __future__ import annotations

import asyncio

import pytest

from actors.cpu_gate import GATE_PREFIX, CpuGate, NodeCpuGate, gate_name, node_cpu_gate
from actors.options import options_for
from infra.settings import Settings
from tests.processes import until_gone


async def _until(predicate, turns: int = 1000) -> None:
    """Let the event loop run until ``predicate()`` holds (a few turns), without sleeping."""
    for _ in range(turns):
        if predicate():
            return
        await asyncio.sleep(0)
    raise AssertionError("the gate never reached the expected state")


def test_at_most_places_holders_the_rest_served_by_order_then_arrival() -> None:
    async def main() -> None:
        gate = CpuGate(places=2)
        assert await gate.enter("a", (0, 5.0)) and await gate.enter("b", (0, 5.0))
        served: list[str] = []

        async def wait(token: str, order: tuple[float, ...]) -> None:
            assert await gate.enter(token, order)
            served.append(token)

        # c and d have held no place yet this iteration; e has held one (nearer its LLM call): e first, then by
        # when the iteration began, then arrival
        tasks = [asyncio.create_task(wait(t, o)) for t, o in
                 [("c", (0, 3.0)), ("d", (0, 2.0)), ("e", (-1, 9.0)), ("f", (0, 2.0))]]
        await _until(lambda: (stats_now(gate))["waiting"] == 4)
        assert stats_now(gate)["held"] == 2
        for holder, expected in [("a", ["e"]), ("b", ["e", "d"]), ("e", ["e", "d", "f"]), ("d", ["e", "d", "f", "c"])]:
            await gate.leave(holder)
            await _until(lambda expected=expected: served == expected)
            assert stats_now(gate)["held"] == 2
        await asyncio.gather(*tasks)
        stats = await gate.stats()
        assert stats["entered"] == 6 and stats["waited"] == 4 and stats["expired"] == 0

    asyncio.run(main())


def stats_now(gate: CpuGate) -> dict[str, int]:
    return {"held": len(gate._held), "waiting": len(gate._waiting)}


def test_a_place_given_back_early_or_while_waiting_leaks_nothing() -> None:
    async def main() -> None:
        gate = CpuGate(places=1)
        assert await gate.enter("a")
        waiter = asyncio.create_task(gate.enter("b"))
        await _until(lambda: stats_now(gate)["waiting"] == 1)
        await gate.leave("b")  # b gave up waiting: out of the queue, its enter ends without a place
        with pytest.raises(asyncio.CancelledError):
            await waiter
        await gate.leave("c")  # c gives up before its enter arrived ...
        assert not await gate.enter("c")  # ... which then returns at once, without a place
        cancelled = asyncio.create_task(gate.enter("d"))
        await _until(lambda: stats_now(gate)["waiting"] == 1)
        cancelled.cancel()  # Ray cancels the call: out of the queue too
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        assert stats_now(gate) == {"held": 1, "waiting": 0}
        await gate.leave("a")
        assert stats_now(gate) == {"held": 0, "waiting": 0}
        assert await gate.enter("e")  # the one place is free again

    asyncio.run(main())


def test_a_place_its_holder_never_gives_back_is_taken_back() -> None:
    async def main() -> None:
        gate = CpuGate(places=1, max_hold_s=0.05)
        assert await gate.enter("dead")  # its holder dies without leaving
        assert await asyncio.wait_for(gate.enter("next"), timeout=30)  # served once the place is taken back
        stats = await gate.stats()
        assert stats["expired"] == 1 and stats["held"] == 1
        await gate.leave("dead")  # a late give-back of a place taken back changes nothing
        assert (await gate.stats())["held"] == 1

    asyncio.run(main())


def test_places_default_to_the_cores_and_the_gate_is_off_without_ray_or_at_zero(monkeypatch) -> None:
    import os
    import sys

    assert CpuGate().places == len(os.sched_getaffinity(0))
    assert CpuGate(places=0).places == 1  # never a gate nobody passes
    opts = options_for("cpu_gate", Settings.load(), name=GATE_PREFIX + "x", endpoint_node="ab" * 28)
    assert opts["num_cpus"] == 0 and opts["lifetime"] == "detached" and opts["get_if_exists"]
    assert opts["max_restarts"] == 0 and opts["name"] == GATE_PREFIX + "x"
    assert node_cpu_gate(Settings.load().updated(ray={"cpu_gate": 0})) is None  # turned off
    monkeypatch.delitem(sys.modules, "ray", raising=False)
    assert node_cpu_gate(Settings.load()) is None  # no Ray in this process


def test_the_node_gate_through_the_session_rays_actor(ray_cluster) -> None:
    import ray

    settings = Settings.load().updated(ray={"cpu_gate": 1})
    assert node_cpu_gate(settings.updated(ray={"cpu_gate": 0})) is None
    gate = node_cpu_gate(settings)
    assert isinstance(gate, NodeCpuGate)
    order: list[str] = []

    async def step(name: str, inside: asyncio.Event | None = None, go: asyncio.Event | None = None) -> None:
        async with gate.held((0.0,)):
            order.append(f"{name} in")
            if inside is not None:
                inside.set()
            if go is not None:
                await go.wait()
            order.append(f"{name} out")

    async def main() -> None:
        inside, go = asyncio.Event(), asyncio.Event()
        first = asyncio.create_task(step("first", inside, go))
        await inside.wait()
        second = asyncio.create_task(step("second"))
        node = ray.get_runtime_context().get_node_id()
        actor = ray.get_actor(gate_name(settings, node), namespace="forage")
        assert gate_name(settings, node).endswith("-1") and gate_name(Settings.load(), node).endswith("-cores")
        for _ in range(5000):  # until the second step waits at the gate (each answer takes a few ms)
            if (await actor.stats.remote())["waiting"] == 1:
                break
        assert order == ["first in"]  # one place: the second step waits
        go.set()
        await asyncio.gather(first, second)

    asyncio.run(main())
    assert order == ["first in", "first out", "second in", "second out"]
    node = ray.get_runtime_context().get_node_id()
    actor = ray.get_actor(gate_name(settings, node), namespace="forage")
    ray.kill(actor)  # the gate is gone: steps go on without it
    until_gone(actor.stats)
    asyncio.run(step("alone"))
    assert order[-2:] == ["alone in", "alone out"] and gate._broken
