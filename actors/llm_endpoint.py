"""LLMEndpoint actors: one per node that declares ``llm_slot`` resources; every slotted LLM call is served by one.

An endpoint holds all of its node's ``llm_slot`` units (so nothing else takes them), admits at most
that many calls at once through a :class:`infra.llm.gate.PriorityGate` and makes each admitted call
to its node's LLM server itself (``ray.ollama_hosts``, :func:`infra.cluster.on_this_node`). A call
is one method call on that actor: no Ray task and no worker lease per call, so calls wait in the
endpoint's own queue in the order they arrive from every Forager, Ingestor and Writer — not in Ray's
per-process lease order, which let one Forager with queued calls keep its slots while another
one's first call waited (measured in docs/foraging.md). The queue serves the call with the most rounds of
dependent calls still ahead of its requirement first and background calls last (``ray.llm_order =
"chain"``, :mod:`infra.llm.slotted`), at no extra round trip: the queue is where the call is made.

Endpoints are named per node and detached in Forage's namespace, so concurrent runs share one queue
per node; :func:`llm_endpoints` finds or creates them. A Forager killed mid-call costs nothing: the
endpoint's coroutine finishes the call and frees its place. A node that leaves takes its endpoint
with it: a caller's call to it fails with ``RayActorError`` and is made again on another endpoint
(:class:`infra.llm.slotted.SlottedLLM`; an LLM call changes nothing, so repeating it is safe).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from infra.llm.base import LLM, ChatMessage, T
from infra.llm.gate import PriorityGate

ENDPOINT_PREFIX = "forage-llm-endpoint-"


class LLMEndpoint:
    """One node's LLM calls: at most ``slots`` at once, the rest waiting by (priority, arrival)."""

    def __init__(self, slots: int) -> None:
        import infra.llm.ollama  # noqa: F401 - the production client, imported now rather than during the first call
        from infra.llm.server import tls_context

        # the TLS context every model-server client of this process uses, built at start rather than inside the
        # first call (about 40 ms of its critical path in a trace of bench/forage_parallel.py)
        tls_context()

        self.gate = PriorityGate(slots)
        self._server_reached = False

    async def call(self, llm: LLM, messages: Sequence[ChatMessage], schema: type[T],
                   hosts: dict[str, str] | None = None, priority: float = 0.0, chain: str | None = None,
                   hold_s: float = 0.0) -> tuple[T, int]:
        """One structured call of ``llm`` (pointed at this node's endpoint by ``hosts``) once a place is
        free (at once when ``chain``'s place was kept for it); the answer and how many calls this endpoint
        holds or queues after it (the caller's hint for choosing among endpoints). ``hold_s`` > 0: the place
        is kept that long for ``chain``'s next call (:class:`infra.llm.gate.PriorityGate`). The LLM's own
        errors reach the caller as themselves."""
        async with self.gate.held(priority, chain, hold_s):
            if hosts:
                from infra.cluster import on_this_node

                llm = on_this_node(llm, hosts)
            answer = await llm.structured(list(messages), schema)
        return answer, self.load()

    async def warm(self, llm: LLM, schemas: Sequence[type[BaseModel]] = (), hosts: dict[str, str] | None = None,
                   timeout_s: float = 5.0) -> int:
        """Prepare for a caller's first call; how many calls this endpoint holds or queues. ``schemas`` arrive here as
        classes, so their modules are imported now and not while a call waits (the forage step's took 25 ms in a
        fresh process), and their JSON schemas are made once. The first time, a request to ``llm``'s server (its
        ``check``: an HTTP client's first request in a process took 15 ms more than the next). Nothing here is an
        error: a server that cannot be reached is reported by the first call."""
        for schema in schemas:
            schema.model_json_schema()
        from infra.llm.server import ServerLLM

        if not self._server_reached and isinstance(llm, ServerLLM):
            self._server_reached = True
            if hosts:
                from infra.cluster import on_this_node

                llm = on_this_node(llm, hosts)
            try:
                await asyncio.wait_for(llm.check(), timeout_s)
            except Exception:  # noqa: BLE001 - the first call reports what is wrong
                pass
        return self.load()

    def load(self) -> int:
        """Calls held or waiting here."""
        return self.gate.in_use + self.gate.waiting()

    async def idle(self, timeout: float = 30.0) -> bool:
        """Wait until no call holds a place; False on timeout."""
        return await self.gate.idle(timeout)

    def stats(self) -> dict[str, int]:
        return self.gate.stats()


@dataclass
class Endpoint:
    """A caller's view of one LLMEndpoint actor."""

    handle: Any
    slots: int
    node_id: str
    load: int = 0  # calls held or waiting there, as the endpoint said in its last answer to this caller
    mine: int = 0  # this caller's calls in flight there


def llm_endpoints(settings: Any) -> list[Endpoint]:
    """The endpoint actors of every alive node that declares ``llm_slot`` resources (created on first use,
    options from :func:`actors.options.options_for`); empty when no node declares any."""
    import ray

    from actors.options import LLM_SLOT, options_for

    found = []
    for node in ray.nodes():
        slots = int((node.get("Resources") or {}).get(LLM_SLOT, 0))
        if not node.get("Alive") or slots < 1:
            continue
        node_id = node["NodeID"]
        options = options_for("llm_endpoint", settings, name=ENDPOINT_PREFIX + node_id[:16],
                              endpoint_node=node_id, endpoint_slots=slots)
        handle = ray.remote(LLMEndpoint).options(**options).remote(slots)
        found.append(Endpoint(handle=handle, slots=slots, node_id=node_id))
    return found


def actor_llm(settings: Any, given: Any | None = None) -> Any:
    """The LLM an actor calls, the one recipe for all of them: ``given`` (a test's fake shipped to the actor) or
    a client built from ``settings`` (infra.llm.build_llm), made through its node's LLM slots when
    ``ray.llm_slots`` is set (:func:`with_slots`)."""
    if given is None:
        from infra.llm import build_llm

        given = build_llm(settings)
    return with_slots(given, settings)


def with_slots(llm: Any, settings: Any) -> Any:
    """``llm`` itself, or — when ``ray.llm_slots`` is set — a SlottedLLM whose every call is made by an
    LLMEndpoint actor holding one of its node's ``llm_slot`` places, waiting by the caller's rounds ahead
    (or in arrival order, ``ray.llm_order``). For the LLM-calling actors (Forager, Orchestrator, Writer, Searcher;
    Ingestor with contextual retrieval), inside their processes."""
    from infra.llm.slotted import SlottedLLM

    if not settings.ray.llm_slots:
        return llm
    slotted = SlottedLLM(llm, lambda: llm_endpoints(settings), hosts=dict(settings.ray.ollama_hosts),
                         order=settings.ray.llm_order, hold_s=settings.ray.llm_hold_s)
    ray = sys.modules.get("ray")
    if ray is not None and ray.is_initialized():
        slotted.endpoints()  # looked up now, while the actor is built, not on its first call
    return slotted
