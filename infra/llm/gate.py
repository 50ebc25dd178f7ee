"""Which waiting LLM call gets the next free slot: the queue of each node's LLM endpoint.

:class:`PriorityGate` admits at most ``capacity`` callers at once and serves waiters by priority (lower
first), then by arrival. Each node's :class:`actors.llm_endpoint.LLMEndpoint` queues its calls in one; the
priority a call carries comes from :mod:`infra.llm.slotted` ("chain" order: the call with more rounds of
dependent calls ahead of its requirement first, background calls last; "fifo": all equal, so arrival).

A call whose chain goes on (more dependent calls of the same caller follow it) may ask for its place to be
**kept** for ``hold_s`` seconds after it ends: the caller's next call, which comes a hop and a little work
later, takes the kept place at once instead of finding it given to a call with fewer rounds ahead and waiting
a whole call for the next one (anticipatory scheduling, as disk schedulers wait briefly for the process
that just read). Keeping never starves a call that ranks before the chain: a place is not kept while a call
ranking as high as the finished one waits (a chain's next call never ranks higher than its last), and a next
call that finds a higher-ranked call waiting queues behind it, its kept place handed out. A kept place nobody
claims in time goes to the queue. A plain asyncio object, unit-tested without Ray.
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
            if not self._ranked_before(priority, strictly=True):
                self.claimed += 1
                self._admit()
                return
            self._hand_out()  # a call that ranks before this one waits: it gets the kept place, this one queues
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

    def release(self, chain: str | None = None, hold_s: float = 0.0, priority: float = 0.0) -> None:
        """Give a place back. With ``chain`` and ``hold_s`` > 0 it is kept ``hold_s`` seconds for that chain's
        next call (one kept place per chain), then handed out; not kept when a call of the chain already waits
        (it is served by rank like any other) or a call ranking as high as the finished one (``priority``) waits."""
        self.in_use -= 1
        if (chain is not None and hold_s > 0 and chain not in self._kept
                and not any(w[3] == chain for w in self._live()) and not self._ranked_before(priority)):
            self.kept += 1
            self._kept[chain] = asyncio.get_running_loop().call_later(hold_s, self._expire, chain)
        self._hand_out()
        if self.in_use == 0:
            self._idle.set()

    def _live(self) -> list[tuple[float, int, asyncio.Future[None], str | None]]:
        return [w for w in self._waiting if not w[2].done()]

    def _ranked_before(self, priority: float, *, strictly: bool = False) -> bool:
        """A live waiter ranks before (``strictly``) or as high as ``priority``."""
        return any(w[0] < priority or (not strictly and w[0] == priority) for w in self._live())

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
            self.release(chain, hold_s, priority)

    def waiting(self) -> int:
        return len(self._live())

    def stats(self) -> dict[str, int]:
        return {"in_use": self.in_use, "waiting": self.waiting(), "admitted": self.admitted, "queued": self.queued,
                "max_in_use": self.max_in_use, "capacity": self.capacity, "kept": self.kept, "claimed": self.claimed}
