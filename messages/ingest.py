"""Asking an Ingestor to store a document, and the outcome per document."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from messages.base import Message
from messages.search import Candidate


class IngestRequest(Message):
    candidate: Candidate


class IngestResult(Message):
    """Per document: stored (new or changed), skipped (known, unchanged) or failed (with reason)."""

    key: str
    path: str | None = None
    status: Literal["stored", "skipped", "failed"]
    doc_id: str | None = Field(default=None, description="sha256 of the file bytes.")
    title: str | None = None
    n_chunks: int = 0
    parser: str | None = None
    flags: tuple[str, ...] = Field(default=(), description="E.g. 'repaired', 'truncated_pages'.")
    reason: str | None = None
    retryable: bool = False
    seconds: float = 0.0
