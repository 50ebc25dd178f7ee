"""StatusHub: the ordered log of a run's status events.

Every actor publishes typed StatusEvents here; the hub numbers them (seq 1, 2, ...), appends each to
``events.jsonl`` as it arrives, and lets readers (CLI, gateway) wait for events after a sequence
number — a long poll on an asyncio condition, no sleeping.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from messages.status import StatusEvent


class StatusHub:
    def __init__(self, run_id: str, events_path: Path | str | None = None) -> None:
        self.run_id = run_id
        self._events: list[StatusEvent] = []
        self._path = Path(events_path) if events_path else None
        if self._path is not None:
            self._path.parent.mkdir(parents=True, exist_ok=True)
            if self._path.exists():  # a resumed hub continues the log
                for line in self._path.read_text(encoding="utf-8").splitlines():
                    if line.strip():
                        self._events.append(StatusEvent.model_validate_json(line))
        self._cond: asyncio.Condition | None = None

    def _condition(self) -> asyncio.Condition:
        if self._cond is None:
            self._cond = asyncio.Condition()
        return self._cond

    async def publish(self, event: StatusEvent) -> int:
        """Number the event, persist it, wake waiting readers. Returns its seq."""
        numbered = event.model_copy(update={"seq": len(self._events) + 1})
        self._events.append(numbered)
        if self._path is not None:
            with open(self._path, "a", encoding="utf-8") as fh:
                fh.write(numbered.model_dump_json() + "\n")
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

    def __call__(self, stage, kind, message="", *, iteration=None, requirement_id=None, **payload) -> None:
        if self.hub is None:
            return
        event = StatusEvent(run_id=self.run_id, stage=stage, kind=kind, message=message, iteration=iteration,
                            requirement_id=requirement_id, payload=payload)
        self.hub.publish.remote(event)  # type: ignore[attr-defined]
