"""How step code reports progress without knowing about Ray.

Steps receive an ``Emit`` callable. In actors it forwards to the StatusHub; in unit tests a
:class:`RecordingEmit` keeps the events so tests can assert on them.
"""

from __future__ import annotations

from typing import Any, Protocol

from messages.status import Stage, StatusEvent


class Emit(Protocol):
    def __call__(self, stage: Stage, kind: str, message: str = "", *, iteration: int | None = None,
                 requirement_id: str | None = None, **payload: Any) -> None: ...


def null_emit(stage: Stage, kind: str, message: str = "", *, iteration: int | None = None,
              requirement_id: str | None = None, **payload: Any) -> None:
    """An Emit that drops everything."""


class RecordingEmit:
    """An Emit that builds real StatusEvents and keeps them in order (seq assigned locally)."""

    def __init__(self, run_id: str = "test-run") -> None:
        self.run_id = run_id
        self.events: list[StatusEvent] = []

    def __call__(self, stage: Stage, kind: str, message: str = "", *, iteration: int | None = None,
                 requirement_id: str | None = None, **payload: Any) -> None:
        self.events.append(StatusEvent(run_id=self.run_id, seq=len(self.events) + 1, stage=stage, kind=kind,
                                       message=message, iteration=iteration, requirement_id=requirement_id,
                                       payload=payload))

    def kinds(self, stage: Stage | None = None) -> list[str]:
        return [e.kind for e in self.events if stage is None or e.stage == stage]
