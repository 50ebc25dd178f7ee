"""Following a run's StatusHub until its final event: the one long-poll loop the session (``forage research``,
scripts) and the gateway's event pump (gateway/runs.py) share.

:func:`follow_hub` yields each batch of new events, in seq order, and stops after the run's final event
(``run finished`` / ``run failed``), or once the caller says the run is over (``ended()``) and the hub has nothing
more. It waits on the hub's long poll, never on sleeps.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from messages.status import Stage, StatusEvent

FINAL_KINDS = ("finished", "failed")


def is_final(event: StatusEvent) -> bool:
    """The run's last event: nothing follows it."""
    return event.stage == Stage.RUN and event.kind in FINAL_KINDS


def follow_hub(hub: Any, after: int, *, ended: Callable[[], bool], wait_s: float, settle_s: float,
               when_gone: Callable[[int], list[StatusEvent]] | None = None) -> Iterator[list[StatusEvent]]:
    """Batches of the hub's events with seq > ``after`` until the final one, or until ``ended()`` held before a
    poll that brought nothing new. ``wait_s``: the long poll while the run goes on; ``settle_s``: once it has
    ended (what the hub still holds comes at once). ``when_gone(seen)``: the events after ``seen`` when the hub
    cannot be reached (read from events.jsonl), which are then the last; None: the hub's error is raised."""
    import ray

    seen = after
    while True:
        stopping = ended()
        final = False
        try:
            events = ray.get(hub.wait.remote(seen, settle_s if stopping else wait_s))
        except Exception:  # noqa: BLE001 — the hub is gone: what it logged is in events.jsonl
            if when_gone is None:
                raise
            events = when_gone(seen)
            stopping = final = True
        fresh = [e for e in events if e.seq > seen]
        if fresh:
            seen = fresh[-1].seq
            final = final or any(is_final(e) for e in fresh)
            yield fresh
        if final or (stopping and not fresh):
            return
