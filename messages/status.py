"""Status events: what every actor reports, what the CLI and gateway stream."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import Field

from messages.base import Message


class Stage(StrEnum):
    PLAN = "plan"
    APPROVAL = "approval"
    SEARCH = "search"
    INGEST = "ingest"
    FORAGE = "forage"
    WRITE = "write"
    RUN = "run"


class StatusEvent(Message):
    """``seq`` is assigned by the StatusHub (0 until then); events of a run are totally ordered."""

    seq: int = Field(default=0, ge=0)
    stage: Stage
    kind: str = Field(description="What happened, e.g. 'started', 'document', 'coverage', 'failed', 'finished'.")
    iteration: int | None = None
    requirement_id: str | None = None
    message: str = ""
    payload: dict[str, Any] = Field(default_factory=dict)


class RunSummary(Message):
    """What ``run`` returns when the loop and the Writer are done."""

    status: str = Field(description="'finished', 'failed', 'cancelled', or 'superseded' (another process resumed "
                                    "the run while this one still ran).")
    iterations: int
    stop_reason: str
    mean_coverage: float
    run_dir: str
    report_path: str | None = None
    documents_stored: int = 0
    documents_failed: int = 0
    settled: dict[str, str] = Field(default={}, description="Per requirement, why it settled (run.json's settled).")
