"""StatusHub: the ordered log of a run's status events.

Every actor publishes typed StatusEvents here; the hub numbers them (seq 1, 2, ...), appends each to
``events.jsonl`` as it arrives, and lets readers (CLI, gateway) wait for events after a sequence
number — a long poll on an asyncio condition, no sleeping.

Ray does not keep the order of calls into an async actor, even from one caller, so every emitter
numbers its own events (``source``, ``n``) and the hub releases each source's events in that order,
holding back one that overtook an earlier one until the gap is filled.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from pathlib import Path

from actors.steps.run.rundir import private_append, private_dir
from messages.status import StatusEvent


class StatusHub:
    def __init__(self, run_id: str, events_path: Path | str | None = None) -> None:
        self.run_id = run_id
        self._events: list[StatusEvent] = []
        self._path = Path(events_path) if events_path else None
        if self._path is not None:
            private_dir(self._path.parent)
            if self._path.exists():  # a resumed hub continues the log
                for line in self._path.read_text(encoding="utf-8").splitlines():
                    if line.strip():
                        self._events.append(StatusEvent.model_validate_json(line))
        self._cond: asyncio.Condition | None = None
        self._next: dict[str, int] = {}  # per source: the next n to release
        self._held: dict[str, dict[int, StatusEvent]] = {}
        self._seq_of: dict[tuple[str, int], int] = {}

    def _condition(self) -> asyncio.Condition:
        if self._cond is None:
            self._cond = asyncio.Condition()
        return self._cond

    #: a source whose held-back events pile up past this has lost one (its process died): release them
    MAX_HELD = 256

    async def publish(self, event: StatusEvent, source: str | None = None, n: int | None = None) -> int:
        """Number the event, persist it, wake waiting readers. Returns its seq.

        With ``source`` and ``n`` (1, 2, ... per source) the event is released only after the
        source's earlier events; the call returns once it is released.
        """
        if source is None or n is None:
            return await self._append(event)
        held = self._held.setdefault(source, {})
        held[n] = event
        expected = self._next.get(source, 1)
        if len(held) > self.MAX_HELD:
            expected = min(held)
        while expected in held:
            self._seq_of[(source, expected)] = await self._append(held.pop(expected))
            expected += 1
        self._next[source] = expected
        cond = self._condition()
        async with cond:
            await cond.wait_for(lambda: self._next.get(source, 1) > n)
        return self._seq_of.pop((source, n), 0)

    async def _append(self, event: StatusEvent) -> int:
        numbered = event.model_copy(update={"seq": len(self._events) + 1})
        self._events.append(numbered)
        if self._path is not None:
            private_append(self._path, numbered.model_dump_json() + "\n")  # user-only (0600)
        cond = self._condition()
        async with cond:
            cond.notify_all()
        return numbered.seq

    async def wait(self, after: int = 0, timeout: float = 1.0) -> list[StatusEvent]:
        """Events with seq > ``after``; waits up to ``timeout`` seconds for the first one."""
        cond = self._condition()
        async with cond:
            try:
                await asyncio.wait_for(cond.wait_for(lambda: len(self._events) > after), timeout)
            except TimeoutError:
                pass
        return self._events[after:]

    async def events(self, after: int = 0) -> list[StatusEvent]:
        return self._events[after:]

    async def last_seq(self) -> int:
        return len(self._events)


class HubEmit:
    """An ``Emit`` (see actors/steps/events.py) that publishes to a StatusHub actor, fire-and-forget.

    ``hub`` is a Ray actor handle of StatusHub, or None to drop events (no Ray needed then).
    """

    def __init__(self, run_id: str, hub: object | None) -> None:
        self.run_id = run_id
        self.hub = hub
        self.source = f"{os.getpid()}-{secrets.token_hex(4)}"
        self.n = 0
        self._pending: list = []

    def __call__(self, stage, kind, message="", *, iteration=None, requirement_id=None, **payload):
        """Publish without waiting; returns the call's ObjectRef (await it to know it is in the log)."""
        if self.hub is None:
            return None
        event = StatusEvent(run_id=self.run_id, stage=stage, kind=kind, message=message, iteration=iteration,
                            requirement_id=requirement_id, payload=payload)
        self.n += 1
        ref = self.hub.publish.remote(event, self.source, self.n)  # type: ignore[attr-defined]
        self._pending.append(ref)
        return ref

    def flush(self) -> None:
        """Block until every event published so far is in the hub's log (call before returning a result,
        so the result's events are ordered before anything its receiver publishes next)."""
        pending, self._pending = self._pending, []
        if pending:
            import ray

            ray.get(pending)

    async def aflush(self) -> None:
        """:meth:`flush` for async actors."""
        pending, self._pending = self._pending, []
        for ref in pending:
            await ref

    def __getstate__(self) -> dict:
        # a copy in another process is another source with its own numbering
        return {"run_id": self.run_id, "hub": self.hub}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["run_id"], state["hub"])
