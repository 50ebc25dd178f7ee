"""An LLM whose every call is made by an LLM endpoint actor holding one ``llm_slot`` of its node.

:class:`SlottedLLM` wraps another LLM (an :class:`~infra.llm.ollama.OllamaLLM`: a small, picklable
client) and sends each ``structured`` call to one of the cluster's
:class:`actors.llm_endpoint.LLMEndpoint` actors — one per node that declares ``llm_slot`` resources
(``ray start --resources '{"llm_slot": 1}'``, or ``ray.llm_slots`` for a local Ray). The endpoint
admits at most as many calls at once as its node has slots and makes them to its node's LLM server,
so however many Foragers ask, no server gets more calls than it has slots, and every endpoint of a
lab is kept busy. Foragers themselves all run at once; waiting for a slot happens per call, in the
endpoint's queue, so calls of different requirements interleave.

Which endpoint: the one with the fewest calls per slot held or waiting, counting this caller's own
calls in flight there and the load each endpoint reported with its last answer (no extra round
trip); ties go to the caller's own node, then the first listed. An endpoint that is gone (its node
left the cluster) is dropped and the call is made again on another one, after looking the endpoints
up again; the list is also looked up again every ``refresh_s`` seconds so a node that joins is used.

``order``: "chain" (the default) sends each call's priority from the caller's context: a Forager marks
its calls with the rounds of dependent calls still ahead of its requirement (:func:`rounds_ahead`), so the
endpoint serves the longest chain first and it does not finish alone at the end of an iteration, and marks
summaries nothing waits for as background (:func:`background_calls`), served only when no other call
waits; calls without a mark (the Orchestrator's, the Writer's, ...) rank as 0 rounds ahead. With "chain", a
call that more of its caller's dependent calls follow (2 or more rounds ahead) also asks the endpoint to keep its
slot ``hold_s`` seconds for the caller's next call (``ray.llm_hold_s``; :class:`infra.llm.gate.PriorityGate`
says when it does not). "fifo": arrival only. Measured with ``bench/forage_parallel.py --order chain fifo``
(docs/foraging.md).

Errors of the wrapped LLM (LLMOutputError, LLMTimeout, ...) reach the caller as themselves (Ray's
task error is also an instance of the original exception class).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import sys
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from infra.errors import LLMUnavailable
from infra.llm.base import LLM, ChatMessage, T


BACKGROUND = 1e9  # a background call's priority: served only when no other call waits
_priority: contextvars.ContextVar[float] = contextvars.ContextVar("forage_llm_priority", default=0.0)


@contextlib.contextmanager
def call_priority(value: float) -> Iterator[None]:
    """LLM calls made inside (and in asyncio tasks started inside) wait at an endpoint by ``value`` (lower
    first, then arrival) when the order is "chain"."""
    token = _priority.set(value)
    try:
        yield
    finally:
        _priority.reset(token)


_keep_slot: contextvars.ContextVar[bool] = contextvars.ContextVar("forage_llm_keep_slot", default=True)


@contextlib.contextmanager
def rounds_ahead(rounds: int, *, next_at_once: bool = True) -> Iterator[None]:
    """Calls that ``rounds`` rounds of dependent calls (this one included) still follow: the more, the sooner
    served — the longest chain first, so it does not finish alone at the end of an iteration. ``next_at_once``
    False: the caller's next call comes only after work of its own (a search), so no slot is kept for it — a slot
    kept past ``hold_s`` would stand idle while other calls wait."""
    keep = _keep_slot.set(next_at_once)
    try:
        with call_priority(-float(rounds)):
            yield
    finally:
        _keep_slot.reset(keep)


def background_calls() -> contextlib.AbstractContextManager[None]:
    """Calls nothing waits for before its next call (e.g. summaries no deep dive reads): served only when no
    other call waits, they fill the slots the chains of dependent calls leave free."""
    return call_priority(BACKGROUND)


class SlottedLLM:
    """``inner``'s calls, each made by an endpoint actor from ``find()`` (:func:`actors.llm_endpoint.llm_endpoints`)."""

    queues_calls = True  # a call waits for a slot before it reaches a server: callers may issue many at once
    shippable = False

    def __init__(self, inner: LLM, find: Callable[[], list[Any]], hosts: dict[str, str] | None = None,
                 order: str = "chain", refresh_s: float = 30.0, hold_s: float = 0.0) -> None:
        self.inner = inner
        self.hold_s = hold_s  # "chain" order: an endpoint keeps a place this long for this caller's next call
        self.chain = uuid.uuid4().hex[:16]  # this caller (one Forager: one requirement) at the endpoints
        self.find = find
        self.hosts = dict(hosts or {})  # node name or IP -> endpoint (ray.ollama_hosts)
        self.order = order
        self.refresh_s = refresh_s
        self.name = f"{inner.name} (ray llm_slot)"
        self.calls = 0
        self.rerouted = 0  # calls made again on another endpoint because theirs was gone
        self._endpoints: list[Any] = []
        self._found_at = float("-inf")
        self._node: str | None = None

    def endpoints(self, *, again: bool = False) -> list[Any]:
        """The endpoints to choose from: looked up on first use, every ``refresh_s`` seconds, and when ``again``.
        A looked-up endpoint keeps this caller's counts if it was known before."""
        now = time.monotonic()
        if again or not self._endpoints or now - self._found_at > self.refresh_s:
            known = {e.node_id: e for e in self._endpoints}
            self._endpoints = [known.get(e.node_id, e) for e in self.find()]
            self._found_at = now
        return self._endpoints

    def _pick(self, endpoints: list[Any]) -> Any:
        if self._node is None:
            ray = sys.modules.get("ray")  # never starts a Ray (get_runtime_context would): no Ray, no preference
            self._node = ray.get_runtime_context().get_node_id() if ray and ray.is_initialized() else ""
        return min(endpoints, key=lambda e: ((e.load + e.mine) / e.slots, e.node_id != self._node))

    async def structured(self, messages: Sequence[ChatMessage], schema: type[T]) -> T:
        import ray

        self.calls += 1
        priority = _priority.get() if self.order == "chain" else 0.0
        # a call that more dependent calls of this caller follow (rounds ahead >= 2) has its place kept for the next
        hold_s = self.hold_s if priority <= -2 and _keep_slot.get() else 0.0
        chain = self.chain if priority < BACKGROUND else None  # a background call never takes a kept place
        again = False
        for _ in range(3):  # an endpoint that is gone: look them up again and try another
            endpoints = self.endpoints(again=again)
            if not endpoints:
                raise LLMUnavailable("no LLM endpoint: no node of the Ray cluster declares an 'llm_slot' "
                                     "resource (ray.llm_slots, or `ray start --resources`)", retryable=True)
            endpoint = self._pick(endpoints)
            endpoint.mine += 1
            try:
                answer, endpoint.load = await endpoint.handle.call.remote(
                    self.inner, list(messages), schema, self.hosts or None, priority, chain, hold_s)
                return answer
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnschedulableError):
                self._endpoints = [e for e in self._endpoints if e is not endpoint]
                self.rerouted += 1
                again = True
            finally:
                endpoint.mine -= 1
        raise LLMUnavailable("every LLM endpoint tried was gone (their nodes left the cluster)", retryable=True)

    async def warm(self, schemas: Sequence[type[Any]] = ()) -> None:
        """Look the endpoints up and reach each once, so the first call does not pay for it; each endpoint prepares
        for ``schemas`` (the answers this caller will ask for) and reaches its server
        (:meth:`actors.llm_endpoint.LLMEndpoint.warm`)."""
        await asyncio.gather(*(e.handle.warm.remote(self.inner, list(schemas), self.hosts or None)
                               for e in self.endpoints()))

    async def check(self) -> None:
        await self.inner.check()
