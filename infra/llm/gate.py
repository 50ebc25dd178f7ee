"""Which waiting LLM call gets the next free slot: the queue of each node's LLM endpoint.

:class:`PriorityGate` admits at most ``capacity`` callers at once and serves waiters by priority (lower
first), then by arrival. Each node's :class:`actors.llm_endpoint.LLMEndpoint` queues its calls in one; the
priority a call carries comes from :mod:`infra.llm.slotted` ("chain" order: the call with more rounds of
dependent calls ahead of its requirement first, background calls last; "fifo": all equal, so arrival).

A call whose chain goes on (more dependent calls of the same caller follow it) may ask for its place to be
**kept** for ``hold_s`` seconds after it ends: the caller's next call, which comes a hop and a little work
later, takes the kept place at once instead of finding it given to a call with fewer rounds ahead and waiting
a whole call for the next one (anticipatory scheduling, as disk schedulers wait briefly for the process
that just read). A kept place nobody claims in time goes to the queue. A plain asyncio object, unit-tested
without Ray.
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
        self._waiting: list[tuple[float, int, asyncio.Future[None], str | None]] = []  # (priority, arrival, ., chain)
        self._arrival = itertools.count()
        self.in_use = 0
        self.admitted = 0  # callers admitted so far
        self.queued = 0  # of which had to wait
        self.max_in_use = 0
        self._idle = asyncio.Event()  # set while nobody holds a place
        self._idle.set()
        self._kept: dict[str, asyncio.TimerHandle] = {}  # chain -> its kept place's expiry
        self.kept = 0  # places kept for a chain's next call
        self.claimed = 0  # of which its next call took in time

    def _room(self) -> bool:
        return self.in_use + len(self._kept) < self.capacity

    def _admit(self) -> None:
        self.in_use += 1
        self._idle.clear()
        self.admitted += 1
        self.max_in_use = max(self.max_in_use, self.in_use)

    async def acquire(self, priority: float = 0.0, chain: str | None = None) -> None:
        """Wait for a place (by ``priority``, then arrival); at once when ``chain``'s place was kept for it."""
        if chain is not None and chain in self._kept:
            self._kept.pop(chain).cancel()
            self.claimed += 1
            self._admit()
            return
        while self._waiting and self._waiting[0][2].done():  # callers admitted or cancelled while queued
            heapq.heappop(self._waiting)
        if not self._waiting and self._room():
            self._admit()
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._waiting, (priority, next(self._arrival), future, chain))
        self.queued += 1
        try:
            await future
        except asyncio.CancelledError:
            if future.done() and not future.cancelled():  # admitted just as it was cancelled: give it back
                self.release()
            raise

    def release(self, chain: str | None = None, hold_s: float = 0.0) -> None:
        """Give a place back; with ``chain`` and ``hold_s`` > 0 it is kept for that chain's next call for
        ``hold_s`` seconds (one kept place per chain), then handed out."""
        self.in_use -= 1
        if chain is not None and hold_s > 0 and chain not in self._kept:
            self.kept += 1
            queued = min((w for w in self._waiting if w[3] == chain and not w[2].done()), default=None)
            if queued is not None:  # the chain's next call is already here: it takes the place now
                self.claimed += 1
                self._admit()
                queued[2].set_result(None)  # its heap entry is skipped as done
            else:
                self._kept[chain] = asyncio.get_running_loop().call_later(hold_s, self._expire, chain)
        self._hand_out()
        if self.in_use == 0:
            self._idle.set()

    def _expire(self, chain: str) -> None:
        if self._kept.pop(chain, None) is not None:
            self._hand_out()

    async def idle(self, timeout: float) -> bool:
        """Wait until no place is held (every call given back); False if that takes longer than ``timeout``."""
        try:
            await asyncio.wait_for(self._idle.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def _hand_out(self) -> None:
        while self._waiting and self._room():
            _, _, future, _ = heapq.heappop(self._waiting)
            if future.done():  # its caller was cancelled while waiting
                continue
            self._admit()
            future.set_result(None)

    @contextlib.asynccontextmanager
    async def held(self, priority: float = 0.0, chain: str | None = None, hold_s: float = 0.0) -> AsyncIterator[None]:
        """A place for the body; afterwards kept ``hold_s`` seconds for ``chain``'s next call (see :meth:`release`)."""
        await self.acquire(priority, chain)
        try:
            yield
        finally:
            self.release(chain, hold_s)

    def waiting(self) -> int:
        return sum(1 for w in self._waiting if not w[2].done())

    def stats(self) -> dict[str, int]:
        return {"in_use": self.in_use, "waiting": self.waiting(), "admitted": self.admitted, "queued": self.queued,
                "max_in_use": self.max_in_use, "capacity": self.capacity, "kept": self.kept, "claimed": self.claimed}
