"""The base of every message exchanged between Forage's actors.

Messages are pydantic models only: frozen, strict about unknown fields, and carrying the
``run_id`` of the research run they belong to. They import neither Ray nor FastAPI, so any
process (actor, gateway, script) can build and validate them.
"""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import BaseModel, ConfigDict, Field


def utc_now() -> datetime:
    return datetime.now(UTC)


class Frozen(BaseModel):
    """A frozen value object that is part of a message (no run_id of its own)."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class Message(Frozen):
    """A top-level message between actors. Commands end in ``Request``; results are nouns."""

    run_id: str = Field(min_length=1, description="The research run this message belongs to.")
    created_at: datetime = Field(default_factory=utc_now)
