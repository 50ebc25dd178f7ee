"""LLM slots: every slotted LLM call is made by its node's LLM endpoint actor, at most ``llm_slot`` calls at once.

The waiting order (:class:`infra.llm.gate.PriorityGate`), the endpoint's admission and the caller's choice of
endpoint are tested as plain asyncio; the Ray tests run the real endpoint actors of the session Ray (which
declares two ``llm_slot`` units, tests/conftest.py). The speed this buys is measured by
``bench/forage_parallel.py``; placement over several nodes by tests/cluster/test_placement.py.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from actors.llm_endpoint import ENDPOINT_PREFIX, Endpoint, LLMEndpoint, llm_endpoints, with_slots
from actors.options import LLM_SLOT, llm_slot_resources, options_for
from actors.steps.schemas import DocumentGist
from infra.errors import LLMOutputError, LLMUnavailable
from infra.llm.fakes import FunctionLLM, ScriptedLLM
from infra.llm.gate import PriorityGate
from infra.llm.slotted import BACKGROUND, SlottedLLM, background_calls, rounds_ahead
from infra.settings import Settings
from tests.processes import until_gone

ASK = [{"role": "user", "content": "leaves"}]


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
                            "capacity": 3, "kept": 0, "claimed": 0}


def test_a_place_is_kept_for_the_chains_next_call_then_handed_out() -> None:
    async def main() -> None:
        gate = PriorityGate(1)
        await gate.acquire(-5, "a")
        lower = asyncio.create_task(gate.acquire(-2, "b"))  # fewer rounds ahead than "a"
        await asyncio.sleep(0)
        gate.release("a", hold_s=60.0, priority=-5)  # "a" goes on: its place is kept for it
        await asyncio.sleep(0)
        assert not lower.done() and gate.in_use == 0 and gate.waiting() == 1
        await gate.acquire(-4, "a")  # "a"'s next call takes it at once, ahead of "b"
        assert gate.in_use == 1 and not lower.done()
        gate.release("a", priority=-4)  # no hold asked: the place goes to "b"
        await lower
        assert (gate.stats()["kept"], gate.stats()["claimed"]) == (1, 1)

        # a kept place nobody claims goes to the queue when its time is up
        gate.release("b", hold_s=0.01, priority=-2)
        late = asyncio.create_task(gate.acquire(0.0, "c"))
        await asyncio.wait_for(late, 5.0)
        assert gate.in_use == 1 and (gate.stats()["kept"], gate.stats()["claimed"]) == (2, 1)

        # never kept while a call that ranks as high as the finished one waits: it gets the place
        higher = asyncio.create_task(gate.acquire(-7, "d"))
        await asyncio.sleep(0)
        gate.release("c", hold_s=60.0, priority=-7)
        await higher
        assert gate.stats()["kept"] == 2

        # a next call that finds a higher-ranked call waiting queues behind it; the kept place goes to that call
        gate.release("d", hold_s=60.0, priority=-7)
        assert gate.stats()["kept"] == 3
        first = asyncio.create_task(gate.acquire(-6, "e"))  # no room: the place is kept for "d"
        await asyncio.sleep(0)
        assert not first.done()
        follow = asyncio.create_task(gate.acquire(-3, "d"))  # "d"'s next call ranks after "e"
        for _ in range(2):  # "d"'s call arrives and hands the place out; "e" resumes
            await asyncio.sleep(0)
        assert first.done() and not follow.done() and gate.stats()["claimed"] == 1  # refused, not claimed
        gate.release("e", priority=-6)
        await follow

        # a chain whose next call already waits keeps nothing: the call is served by rank
        queued = [asyncio.create_task(gate.acquire(-5, "x")), asyncio.create_task(gate.acquire(-1, "d"))]
        await asyncio.sleep(0)
        gate.release("d", hold_s=60.0, priority=-3)
        await queued[0]
        assert not queued[1].done() and gate.stats()["kept"] == 3
        gate.release("x", priority=-5)
        await queued[1]

        # a call without a chain (a background call) never takes a kept place
        gate.release("d", hold_s=60.0, priority=-3)
        background = asyncio.create_task(gate.acquire(1e9, None))
        await asyncio.sleep(0)
        assert not background.done() and gate.in_use == 0
        await gate.acquire(-2, "d")
        gate.release()
        await background
        gate.release()
        assert await gate.idle(1.0) and gate.waiting() == 0
        assert (gate.stats()["kept"], gate.stats()["claimed"]) == (4, 2)

    asyncio.run(main())


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


def test_slots_and_endpoint_options_come_from_settings() -> None:
    assert llm_slot_resources(Settings.load()) is None
    assert llm_slot_resources(Settings.load().updated(ray={"llm_slots": 4})) == {LLM_SLOT: 4.0}
    with pytest.raises(ValueError):
        Settings.load().updated(ray={"llm_slots": 0})
    with pytest.raises(ValueError):
        Settings.load().updated(ray={"llm_order": "random"})
    plain = ScriptedLLM([])
    assert with_slots(plain, Settings.load()) is plain  # no slots: the LLM is called directly
    slotted = with_slots(plain, Settings.load().updated(ray={"llm_slots": 2, "llm_order": "fifo"}))
    assert isinstance(slotted, SlottedLLM) and slotted.inner is plain and slotted.order == "fifo"
    assert Settings.load().ray.llm_order == "chain"  # measured faster (docs/foraging.md)

    opts = options_for("llm_endpoint", Settings.load(), name="e", endpoint_node="ab" * 28, endpoint_slots=3)
    assert opts["resources"] == {LLM_SLOT: 3.0} and opts["num_cpus"] == 0  # all of its node's slots
    assert opts["scheduling_strategy"].node_id == "ab" * 28 and opts["scheduling_strategy"].soft is False
    assert opts["lifetime"] == "detached" and opts["get_if_exists"] and opts["max_restarts"] == 0
    assert opts["max_concurrency"] >= 1000 and opts["name"] == "e"


def _held_calls(slots: int, n: int, priorities: list[float] | None = None):
    """n calls into one LLMEndpoint whose LLM answers only when told; returns (endpoint, peak, order answered)."""

    async def main() -> tuple[LLMEndpoint, int, list[int]]:
        endpoint = LLMEndpoint(slots)
        inside, peak, order = 0, 0, []
        go = asyncio.Event()

        async def answer(messages, schema):
            nonlocal inside, peak
            inside += 1
            peak = max(peak, inside)
            await go.wait()
            inside -= 1
            return {"summary": messages[-1]["content"]}

        llm = FunctionLLM(answer)

        async def call(i: int) -> None:
            got, _ = await endpoint.call(llm, [{"role": "user", "content": str(i)}], DocumentGist,
                                         priority=(priorities or [0.0] * n)[i])
            order.append(int(got.summary))

        tasks = []
        for i in range(n):  # arrive one after another
            tasks.append(asyncio.create_task(call(i)))
            await asyncio.sleep(0)
        assert endpoint.load() == n and endpoint.stats()["in_use"] == slots
        go.set()
        await asyncio.gather(*tasks)
        assert endpoint.load() == 0 and await endpoint.idle(1.0)
        return endpoint, peak, order

    return asyncio.run(main())


def test_an_endpoint_holds_at_most_its_slots_and_serves_waiters_by_priority_then_arrival() -> None:
    endpoint, peak, order = _held_calls(2, 7)
    assert peak == 2 and order[:2] == [0, 1] and sorted(order[2:]) == [2, 3, 4, 5, 6]
    stats = endpoint.stats()
    assert stats["admitted"] == 7 and stats["queued"] == 5 and stats["max_in_use"] == 2
    # with priorities (lower first): the first call holds the slot, then -3, -1, 0 (two at 0: by arrival)
    _, _, order = _held_calls(1, 5, [0.0, 0.0, -3.0, -1.0, 0.0])
    assert order == [0, 2, 3, 1, 4]
    _, _, order = _held_calls(1, 4)  # equal priorities: arrival
    assert order == [0, 1, 2, 3]


class _Local:
    """An LLMEndpoint in this process behind the shape of a Ray actor handle (``handle.call.remote``)."""

    def __init__(self, endpoint: LLMEndpoint | None) -> None:
        self.endpoint = endpoint
        self.call = SimpleNamespace(remote=self._call)

    async def _call(self, *args):
        if self.endpoint is None:
            import ray

            raise ray.exceptions.RayActorError()  # its node left the cluster
        return await self.endpoint.call(*args)


def test_calls_go_to_the_endpoint_with_the_fewest_calls_per_slot() -> None:
    served: dict[str, int] = {"a": 0, "b": 0}

    def endpoints() -> list[Endpoint]:
        return [Endpoint(_Local(LLMEndpoint(1)), 1, "a"), Endpoint(_Local(LLMEndpoint(2)), 2, "b")]

    found = endpoints()

    async def answer(messages, schema):
        await asyncio.sleep(0.01)
        return {"summary": "ok"}

    llm = SlottedLLM(FunctionLLM(answer), lambda: found)

    async def main() -> None:
        await asyncio.gather(*(llm.structured(ASK, DocumentGist) for _ in range(6)))

    asyncio.run(main())
    for e in found:
        served[e.node_id] = e.handle.endpoint.stats()["admitted"]
    assert served == {"a": 2, "b": 4}  # 6 calls at once over 1 + 2 slots: two per slot, nobody waits twice
    assert all(e.mine == 0 for e in found) and llm.calls == 6


def test_the_chain_order_serves_more_rounds_ahead_first_and_background_last() -> None:
    async def run(order: str) -> tuple[list[str], list[float]]:
        endpoint = LLMEndpoint(1)
        seen: list[float] = []
        holds.clear()
        original = endpoint.call

        async def call(llm, messages, schema, hosts, priority, chain, hold_s):
            seen.append(priority)
            holds.append((chain, hold_s))
            return await original(llm, messages, schema, hosts, priority, chain, hold_s)

        handle = SimpleNamespace(call=SimpleNamespace(remote=call))
        go = asyncio.Event()
        answered: list[str] = []

        async def answer(messages, schema):
            await go.wait()
            answered.append(messages[-1]["content"])
            return {"summary": "ok"}

        llm = SlottedLLM(FunctionLLM(answer), lambda: [Endpoint(handle, 1, "n")], order=order, hold_s=0.5)
        mine.append(llm.chain)

        async def ask(text: str, rounds: int | None) -> None:
            if rounds is None:
                with background_calls():
                    await llm.structured([{"role": "user", "content": text}], DocumentGist)
            else:
                with rounds_ahead(rounds):
                    await llm.structured([{"role": "user", "content": text}], DocumentGist)

        tasks = []
        for text, rounds in [("first", 1), ("leaf", None), ("short", 1), ("long", 6), ("middle", 3)]:
            tasks.append(asyncio.create_task(ask(text, rounds)))
            await asyncio.sleep(0)
        for _ in range(1000):  # until every call has reached the endpoint (a few turns of the loop)
            if endpoint.load() == 5:
                break
            await asyncio.sleep(0)
        assert endpoint.load() == 5
        go.set()
        await asyncio.gather(*tasks)
        return answered, seen

    holds: list[tuple[str | None, float]] = []
    mine: list[str] = []
    answered, seen = asyncio.run(run("chain"))
    assert answered == ["first", "long", "middle", "short", "leaf"]  # "first" already held the slot
    assert seen == [-1.0, BACKGROUND, -1.0, -6.0, -3.0]
    # a place is kept only after a call that others of its chain follow; a background call has no chain
    assert holds == [(mine[0], 0.0), (None, 0.0), (mine[0], 0.0), (mine[0], 0.5), (mine[0], 0.5)]
    answered, seen = asyncio.run(run("fifo"))
    assert answered == ["first", "leaf", "short", "long", "middle"] and seen == [0.0] * 5
    assert all(hold == 0.0 for _, hold in holds)  # arrival order keeps no place


def test_no_slot_is_kept_for_a_next_call_that_waits_for_work_of_its_own() -> None:
    holds: list[float] = []
    endpoint = LLMEndpoint(1)

    async def call(llm, messages, schema, hosts, priority, chain, hold_s):
        holds.append(hold_s)
        return await endpoint.call(llm, messages, schema, hosts, priority, chain, hold_s)

    handle = SimpleNamespace(call=SimpleNamespace(remote=call))
    llm = SlottedLLM(FunctionLLM(lambda messages, schema: {"summary": "ok"}), lambda: [Endpoint(handle, 1, "n")],
                     hold_s=0.02)

    async def main() -> None:
        with rounds_ahead(3):  # the next call follows at once (a summary after a judging)
            await llm.structured(ASK, DocumentGist)
        with rounds_ahead(3, next_at_once=False):  # the next call follows a search (a reformulation's judging)
            await llm.structured(ASK, DocumentGist)
            with rounds_ahead(2):  # an inner mark says again what its own calls are followed by
                await llm.structured(ASK, DocumentGist)
        await llm.structured(ASK, DocumentGist)  # no mark: nothing follows

    asyncio.run(main())
    assert holds == [0.02, 0.0, 0.02, 0.0]


def test_an_endpoint_warms_up_for_the_first_call_and_reaches_its_server_once() -> None:
    from infra.llm.ollama import OllamaLLM
    from tests.loopback_ollama import LoopbackOllama, closed_loopback_url

    made: list[str] = []

    class Watched(DocumentGist):
        @classmethod
        def model_json_schema(cls, *args, **kwargs):
            made.append(cls.__name__)
            return super().model_json_schema(*args, **kwargs)

    with LoopbackOllama(models=("m",)) as server:
        endpoint = LLMEndpoint(1)
        llm = OllamaLLM(server.url, "m", timeout_s=5.0, max_retries=0, backoff_s=0.0)
        assert asyncio.run(endpoint.warm(llm, [Watched])) == 0  # nothing held or waiting
        assert asyncio.run(endpoint.warm(llm, [Watched])) == 0
        paths = [r.path for r in server.requests]
        assert len(paths) == 1 and paths[0].startswith("/api/")  # the server reached once, with no chat call
        assert made == ["Watched", "Watched"]  # each caller's schemas prepared
    # a server that cannot be reached is the first call's to report, not the warm-up's
    assert asyncio.run(LLMEndpoint(1).warm(OllamaLLM(closed_loopback_url(), "m", timeout_s=5.0, max_retries=0,
                                                    backoff_s=0.0))) == 0
    # an LLM that is no server's client is not checked (an embedded model is not loaded for a warm-up)
    checked: list[bool] = []
    fake = FunctionLLM(lambda messages, schema: {"summary": "ok"})
    fake.check = lambda: checked.append(True)  # type: ignore[method-assign]
    asyncio.run(LLMEndpoint(1).warm(fake, [DocumentGist]))
    assert checked == []


def test_a_call_to_an_endpoint_that_is_gone_is_made_on_another() -> None:
    gone = Endpoint(_Local(None), 4, "gone")
    alive = Endpoint(_Local(LLMEndpoint(1)), 1, "alive")
    lookups = []

    def find() -> list[Endpoint]:
        lookups.append(1)
        return [gone, alive] if len(lookups) == 1 else [alive]  # the node's departure shows on the next lookup

    llm = SlottedLLM(ScriptedLLM([{"summary": "About leaves."}]), find)
    answer = asyncio.run(llm.structured(ASK, DocumentGist))  # 4 free slots: "gone" is tried first
    assert answer.summary == "About leaves." and llm.rerouted == 1 and len(lookups) == 2
    assert llm.endpoints() == [alive]

    nobody = SlottedLLM(ScriptedLLM([]), lambda: [])
    with pytest.raises(LLMUnavailable, match="llm_slot") as caught:
        asyncio.run(nobody.structured(ASK, DocumentGist))
    assert caught.value.retryable


def test_endpoints_are_looked_up_again_after_refresh_s() -> None:
    lists = [[Endpoint(_Local(LLMEndpoint(1)), 1, "a")]]
    llm = SlottedLLM(ScriptedLLM([]), lambda: lists[-1], refresh_s=3600)
    first = llm.endpoints()
    first[0].load = 5  # what it said last
    lists.append([Endpoint(_Local(LLMEndpoint(1)), 1, "a"), Endpoint(_Local(LLMEndpoint(1)), 1, "b")])
    assert llm.endpoints() == first  # not yet
    llm.refresh_s = 0.0
    again = llm.endpoints()
    assert [e.node_id for e in again] == ["a", "b"] and again[0] is first[0]  # a known endpoint keeps its counts


def test_slotted_calls_through_the_session_rays_endpoint(ray_cluster) -> None:
    import ray

    settings = Settings.load().updated(ray={"llm_slots": 2})
    first, second = llm_endpoints(settings), llm_endpoints(settings)
    assert len(first) == 1 and first[0].slots == 2  # one node, declaring two llm_slot units
    node = ray.get_runtime_context().get_node_id()
    named = ray.get_actor(ENDPOINT_PREFIX + node[:16], namespace="forage")
    assert first[0].handle._actor_id == second[0].handle._actor_id == named._actor_id  # one per node, shared

    llm = with_slots(ScriptedLLM([{"summary": "About leaves."}]), settings)
    asyncio.run(llm.warm())  # what Forager.ready does: the endpoints looked up and reached before the first call
    assert [e.node_id for e in llm.endpoints()] == [node] and llm.calls == 0

    async def many() -> list[DocumentGist]:
        return list(await asyncio.gather(*(llm.structured(ASK, DocumentGist) for _ in range(5))))

    assert [a.summary for a in asyncio.run(many())] == ["About leaves."] * 5
    stats = ray.get(named.stats.remote())
    assert stats["max_in_use"] <= 2 and stats["in_use"] == 0 and stats["admitted"] >= 5

    bad = with_slots(ScriptedLLM(["not json"], max_retries=0), settings)
    with pytest.raises(LLMOutputError):  # the wrapped LLM's error, as itself, through the actor
        asyncio.run(bad.structured(ASK, DocumentGist))
    assert ray.get(named.idle.remote(30.0))  # a failed call gives its place back

    ray.kill(named)  # the endpoint is gone: the call is made again on a new one
    until_gone(named.stats)
    answer = asyncio.run(llm.structured(ASK, DocumentGist))
    assert answer.summary == "About leaves." and llm.rerouted == 1
    renewed = ray.get_actor(ENDPOINT_PREFIX + node[:16], namespace="forage")
    assert renewed._actor_id != named._actor_id
