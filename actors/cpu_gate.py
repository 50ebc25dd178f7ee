"""CpuGate actors: one per node, letting at most as many Foragers' CPU steps run at once as the node has cores.

A Forager's iteration alternates LLM calls (waiting, no CPU) with CPU steps: store searches, the relevance check's
embeddings, reading sections. When every Forager of a run starts its iteration at once, eight of them on a 2-core
machine each get a quarter of a core, so the first of them is ready for its first LLM call only when nearly all of
them are (processor sharing; ``bench/forage_parallel.py`` measures it, docs/foraging.md has the figures). Through the
gate they take turns: a Forager holds one place for all its CPU steps up to its next LLM call
(:meth:`actors.steps.forage.runtime.Runtime.one_place`), the Forager nearer its next call goes first, and the LLM's
slots fill while the others search.

The gate is one async actor per node (named per node, detached in Forage's namespace like the LLM and embedding
endpoints, so concurrent runs share it), asking for no CPU itself. A place is given back without waiting for an
answer. A holder that dies holding a place loses it after ``max_hold_s`` (a step takes milliseconds), and a caller
that cannot reach the gate runs its step without it: the gate orders work, it never stops any.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import os
import sys
import uuid
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from actors.options import options_for
from infra.settings import Settings

GATE_PREFIX = "forage-cpu-gate-"
MAX_HOLD_S = 10.0  # a place whose holder has not given it back this long is taken back (the holder died)

log = logging.getLogger(__name__)


def node_cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


class CpuGate:
    """At most ``places`` holders at once. The others wait, the lowest ``order`` first, then by arrival (a Forager
    passes ``(-places it held this iteration, when the iteration began)``: the one nearer its next LLM call first).
    Each holder names itself with a ``token`` of its own making, so it can give its place back, or leave the queue,
    even when it gave up waiting before :meth:`enter` answered. A place not given back within ``max_hold_s`` is taken
    back (its holder died)."""

    def __init__(self, places: int | None = None, max_hold_s: float = MAX_HOLD_S) -> None:
        self.places = max(1, places if places is not None else node_cores())
        self.max_hold_s = max_hold_s
        self._held: dict[str, asyncio.TimerHandle] = {}  # token -> when its place is taken back
        self._waiting: list[tuple[tuple[float, ...], int, str, asyncio.Future[None]]] = []  # heap: order, arrival
        self._arrivals = 0
        self._left_early: deque[str] = deque(maxlen=1024)  # tokens given back before their enter arrived
        self._counts = {"entered": 0, "waited": 0, "expired": 0}

    async def enter(self, token: str, order: tuple[float, ...] = ()) -> bool:
        """Wait for a place for ``token``; False when ``token`` was given back before it got one."""
        if token in self._left_early:
            self._left_early.remove(token)
            return False
        self._counts["entered"] += 1
        if len(self._held) < self.places and not self._waiting:
            self._grant(token)
            return True
        self._counts["waited"] += 1
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._arrivals += 1
        heapq.heappush(self._waiting, (order, self._arrivals, token, future))
        try:
            await future
        except asyncio.CancelledError:
            self._release(token)
            raise
        return token in self._held

    async def leave(self, token: str) -> None:
        """Give ``token``'s place back, or take it out of the queue (nothing if its place was taken back)."""
        if not self._release(token):
            self._left_early.append(token)

    def _release(self, token: str) -> bool:
        timer = self._held.pop(token, None)
        if timer is not None:
            timer.cancel()
            self._wake()
            return True
        for n, (_, _, waiting, future) in enumerate(self._waiting):
            if waiting == token:
                future.cancel()
                self._waiting.pop(n)
                heapq.heapify(self._waiting)
                return True
        return False

    def _grant(self, token: str) -> None:
        self._held[token] = asyncio.get_running_loop().call_later(self.max_hold_s, self._expire, token)

    def _expire(self, token: str) -> None:
        if self._held.pop(token, None) is not None:
            self._counts["expired"] += 1
            self._wake()

    def _wake(self) -> None:
        while self._waiting and len(self._held) < self.places:
            _, _, token, future = heapq.heappop(self._waiting)
            if future.done():
                continue
            self._grant(token)
            future.set_result(None)

    async def stats(self) -> dict[str, int]:
        """Places, held now, waiting now, and counts so far: entered, waited (found no free place), expired."""
        return {"places": self.places, "held": len(self._held), "waiting": len(self._waiting), **self._counts}


def gate_name(settings: Settings, node_id: str) -> str:
    """The gate actor's name: per node and per number of places (a run with another ``ray.cpu_gate`` gets a gate of
    its own rather than the first run's)."""
    places = settings.ray.cpu_gate
    return f"{GATE_PREFIX}{node_id[:16]}-{'cores' if places is None else places}"


class NodeCpuGate:
    """A caller's way through its node's :class:`CpuGate` actor (found by name or created on first use)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self._handle: Any = None
        self._broken = False

    def gate(self) -> Any:
        if self._handle is None:
            import ray

            node_id = ray.get_runtime_context().get_node_id()
            options = options_for("cpu_gate", self.settings, name=gate_name(self.settings, node_id),
                                  endpoint_node=node_id)
            self._handle = ray.remote(CpuGate).options(**options).remote(self.settings.ray.cpu_gate)
        return self._handle

    @asynccontextmanager
    async def held(self, order: tuple[float, ...] = ()) -> AsyncIterator[None]:
        """Hold a place for the body (waiting by ``order``, see :class:`CpuGate`); the body runs without one when
        the gate cannot be reached."""
        handle, token = None, uuid.uuid4().hex
        if not self._broken:
            try:
                handle = self.gate()
                if not await handle.enter.remote(token, order):
                    handle = None
            except asyncio.CancelledError:
                if handle is not None:
                    handle.leave.remote(token)  # out of the queue, or the place it just got given back
                raise
            except Exception as exc:  # noqa: BLE001 - the gate orders work; without it the work still runs
                log.warning("the node's CPU gate is unreachable (%s); going on without it", exc)
                self._broken, self._handle, handle = True, None, None
        try:
            yield
        finally:
            if handle is not None:
                handle.leave.remote(token)  # not waited for


def node_cpu_gate(settings: Settings) -> NodeCpuGate | None:
    """The CPU gate a Forager goes through: None without Ray or with ``ray.cpu_gate`` 0."""
    ray = sys.modules.get("ray")
    if settings.ray.cpu_gate == 0 or ray is None or not ray.is_initialized():
        return None
    return NodeCpuGate(settings)
