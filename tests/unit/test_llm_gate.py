"""The LLM gate: waiting calls get a free slot by priority (requirements further along first), not by arrival.

The ordering logic (:class:`infra.llm.gate.PriorityGate`) and the leases are tested as plain asyncio; the
Ray tests check the path a real call takes (SlottedLLM: lease from the LLMGate actor, slot-holding task,
lease back), that the gate
admits no more calls than its capacity, and that a call survives the gate's death. The speed this
buys is measured by ``bench/forage_parallel.py --order fifo progress``.
"""

from __future__ import annotations

import asyncio

import pytest

from actors.llm_gate import LLMGate, with_slots
from actors.options import options_for
from actors.steps.schemas import DocumentGist
from infra.errors import LLMOutputError
from infra.llm.fakes import ScriptedLLM
from infra.llm.gate import PriorityGate
from infra.llm.slotted import SlottedLLM
from infra.settings import Settings


async def _served_order(capacity: int, priorities: list[float]) -> list[int]:
    """Fill the gate, queue one waiter per priority (in list order), then free places one by one."""
    gate = PriorityGate(capacity)
    for _ in range(capacity):
        await gate.acquire()
    order: list[int] = []

    async def waiter(i: int, priority: float) -> None:
        await gate.acquire(priority)
        order.append(i)

    tasks = [asyncio.create_task(waiter(i, p)) for i, p in enumerate(priorities)]
    await asyncio.sleep(0)  # every waiter is queued
    assert gate.waiting() == len(priorities) and gate.in_use == capacity
    for _ in priorities:
        gate.release()
        await asyncio.sleep(0)
    await asyncio.gather(*tasks)
    return order


def test_waiters_are_served_by_priority_then_arrival() -> None:
    # -completed calls: the requirement with 5 done goes before the ones with 2, then 0; ties by arrival
    assert asyncio.run(_served_order(1, [0, -2, -5, -2, 0])) == [2, 1, 3, 0, 4]
    assert asyncio.run(_served_order(2, [0, 0, 0])) == [0, 1, 2]  # equal priorities: first come, first served


def test_never_more_holders_than_capacity() -> None:
    async def main() -> PriorityGate:
        gate = PriorityGate(3)
        inside = 0
        peak = 0

        async def call(i: int) -> None:
            nonlocal inside, peak
            async with gate.held(-(i % 4)):
                inside += 1
                peak = max(peak, inside)
                await asyncio.sleep(0)
                inside -= 1

        await asyncio.gather(*(call(i) for i in range(40)))
        assert peak == 3
        return gate

    gate = asyncio.run(main())
    assert asyncio.run(gate.idle(0.01))  # nobody holds a place
    assert gate.stats() == {"in_use": 0, "waiting": 0, "admitted": 40, "queued": 37, "max_in_use": 3,
                            "capacity": 3}


def test_a_cancelled_waiter_or_holder_leaks_no_place() -> None:
    async def main() -> None:
        gate = PriorityGate(1)
        await gate.acquire()
        waiting = asyncio.create_task(gate.acquire(-9))
        await asyncio.sleep(0)
        waiting.cancel()  # gave up while queued (its Forager died): skipped, not admitted
        with pytest.raises(asyncio.CancelledError):
            await waiting
        later = asyncio.create_task(gate.acquire(0))
        await asyncio.sleep(0)
        gate.release()
        await later  # the place went to the next live waiter
        assert gate.in_use == 1

        async def holder() -> None:
            async with gate.held():
                await asyncio.Event().wait()

        held = asyncio.create_task(holder())
        await asyncio.sleep(0)
        gate.release()
        await asyncio.sleep(0)
        assert gate.in_use == 1  # the holder got it
        held.cancel()  # cancelled while holding: the place comes back
        with pytest.raises(asyncio.CancelledError):
            await held
        assert gate.in_use == 0 and gate.waiting() == 0

    asyncio.run(main())


def test_capacity_is_read_again_so_new_slots_admit_waiters() -> None:
    async def main() -> None:
        slots = [1]
        gate = PriorityGate(lambda: slots[0])
        await gate.acquire()
        second = asyncio.create_task(gate.acquire())
        await asyncio.sleep(0)
        assert not second.done()
        slots[0] = 2  # a node with one more slot joined
        third = asyncio.create_task(gate.acquire())  # the new place goes to the queue, in order
        await asyncio.sleep(0)
        gate.release()
        await asyncio.gather(second, third)
        assert gate.in_use == 2

    asyncio.run(main())


def test_a_lease_never_given_back_expires() -> None:
    """A Forager that dies mid-call never releases its lease: after lease_s the place goes to the next call."""
    import time

    async def main() -> None:
        gate = LLMGate(capacity=1)
        lost = await gate.acquire(0, 30.0)
        waiting = asyncio.create_task(gate.acquire(0, 30.0))
        await asyncio.sleep(0)
        assert not waiting.done() and gate.expire() == 0  # not yet
        assert gate.expire(now=time.monotonic() + 31) == 1  # its deadline passed
        lease = await waiting
        gate.release(lost)  # a late release of the expired lease is ignored
        assert gate.stats()["in_use"] == 1
        gate.release(lease)
        gate.release(lease)  # given back twice: once counts
        assert gate.stats()["in_use"] == 0 and gate.stats()["expired"] == 1 and gate.stats()["leases"] == 0
        gate._reaper.cancel()

    asyncio.run(main())


def test_gate_options_and_the_fifo_setting() -> None:
    opts = options_for("llm_gate", Settings.load(), name="g")
    assert opts["lifetime"] == "detached" and opts["get_if_exists"] and opts["max_restarts"] == -1
    assert opts["num_cpus"] == 0 and opts["name"] == "g"
    plain = ScriptedLLM([])
    assert with_slots(plain, Settings.load()) is plain  # no slots: the LLM is called directly
    assert Settings.load().ray.llm_order == "fifo"  # the gate is opt-in: measured slower on the bench
    fifo = with_slots(plain, Settings.load().updated(ray={"llm_slots": 2, "llm_order": "fifo"}))
    assert isinstance(fifo, SlottedLLM) and fifo.gate is None
    quick = Settings.load().updated(llm={"timeout_s": 30, "max_retries": 1})
    assert with_slots(plain, quick.updated(ray={"llm_slots": 2, "llm_order": "fifo"})).lease_s == 30 * 2 + 60
    with pytest.raises(ValueError):
        Settings.load().updated(ray={"llm_order": "random"})


def test_calls_through_the_gate_actor(ray_cluster) -> None:
    import ray

    gate = ray.remote(LLMGate).options(num_cpus=0, max_concurrency=100).remote(1)
    options = {"num_cpus": 0, "max_retries": 0}
    llm = SlottedLLM(ScriptedLLM([{"summary": "About leaves."}]), options, gate=gate)

    async def many() -> list[DocumentGist]:
        return list(await asyncio.gather(*(llm.structured([{"role": "user", "content": "leaves"}], DocumentGist)
                                           for _ in range(4))))

    answers = asyncio.run(many())
    assert [a.summary for a in answers] == ["About leaves."] * 4
    assert ray.get(gate.idle.remote(30.0))  # the releases (not awaited by the callers) have arrived
    stats = ray.get(gate.stats.remote())
    assert stats["admitted"] == 4 and stats["max_in_use"] == 1 and stats["queued"] >= 1 and stats["in_use"] == 0
    assert stats["leases"] == 0 and stats["expired"] == 0
    assert llm.calls == 4 and llm.completed == 4 and llm.ungated == 0
    llm.new_round()
    assert llm.completed == 0

    bad = SlottedLLM(ScriptedLLM(["not json"], max_retries=0), options, gate=gate)
    with pytest.raises(LLMOutputError):  # the wrapped LLM's error, as itself, through the gate
        asyncio.run(bad.structured([{"role": "user", "content": "x"}], DocumentGist))
    assert ray.get(gate.idle.remote(30.0))  # a failed call gives its place back

    ray.kill(gate, no_restart=True)  # the gate is gone: the call still runs, unordered
    answer = asyncio.run(llm.structured([{"role": "user", "content": "leaves"}], DocumentGist))
    assert answer.summary == "About leaves." and llm.ungated == 1


def test_one_named_gate_per_cluster(ray_cluster) -> None:
    import ray

    from actors.llm_gate import GATE_NAME, llm_gate

    settings = Settings.load()
    first, second = llm_gate(settings), llm_gate(settings)
    try:
        assert first._actor_id == second._actor_id == ray.get_actor(GATE_NAME, namespace="forage")._actor_id
        assert ray.get(first.stats.remote())["capacity"] == 1  # the session Ray declares no llm_slot: at least 1
    finally:
        ray.kill(first, no_restart=True)
