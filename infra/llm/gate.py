"""Which waiting LLM call gets the next free slot: the queue of each node's LLM endpoint.

:class:`PriorityGate` admits at most ``capacity`` callers at once and serves waiters by priority (lower
first), then by arrival. Each node's :class:`actors.llm_endpoint.LLMEndpoint` queues its calls in one; the
priority a call carries comes from :mod:`infra.llm.slotted` ("chain" order: the call with more rounds of
dependent calls ahead of its requirement first, background calls last; "fifo": all equal, so arrival).
A plain asyncio object, unit-tested without Ray.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections.abc import AsyncIterator


class PriorityGate:
    """At most ``capacity`` holders at once (at least 1); waiters are served by (priority, arrival)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(1, int(capacity))
        self._waiting: list[tuple[float, int, asyncio.Future[None]]] = []
        self._arrival = itertools.count()
        self.in_use = 0
        self.admitted = 0  # callers admitted so far
        self.queued = 0  # of which had to wait
        self.max_in_use = 0
        self._idle = asyncio.Event()  # set while nobody holds a place
        self._idle.set()

    def _room(self) -> bool:
        return self.in_use < self.capacity

    def _admit(self) -> None:
        self.in_use += 1
        self._idle.clear()
        self.admitted += 1
        self.max_in_use = max(self.max_in_use, self.in_use)

    async def acquire(self, priority: float = 0.0) -> None:
        if not self._waiting and self._room():
            self._admit()
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (priority, next(self._arrival), future))
        self.queued += 1
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():  # admitted just as it was cancelled: give it back
                self.release()
            raise

    def release(self) -> None:
        self.in_use -= 1
        self._hand_out()
        if self.in_use == 0:
            self._idle.set()

    async def idle(self, timeout: float) -> bool:
        """Wait until no place is held (every call given back); False if that takes longer than ``timeout``."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def _hand_out(self) -> None:
        while self._waiting and self._room():
            _, _, future = heapq.heappop(self._waiting)
            if future.done():  # its caller was cancelled while waiting
                continue
            self._admit()
            future.set_result(None)

    @contextlib.asynccontextmanager
    async def held(self, priority: float = 0.0) -> AsyncIterator[None]:
        await self.acquire(priority)
        try:
            yield
        finally:
            self.release()

    def waiting(self) -> int:
        return sum(1 for *_, f in self._waiting if not f.done())

    def stats(self) -> dict[str, int]:
        return {"in_use": self.in_use, "waiting": self.waiting(), "admitted": self.admitted, "queued": self.queued,
                "max_in_use": self.max_in_use, "capacity": self.capacity}
