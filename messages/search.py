"""Asking the Searcher for documents and what it found."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from messages.base import Frozen, Message
from messages.plan import Requirement


class SearchRequest(Message):
    """Ask for up to ``max_results`` documents not offered before in this run."""

    iteration: int = Field(ge=1)
    query: str
    requirements: tuple[Requirement, ...] = ()
    max_results: int = Field(default=8, ge=1)
    exclude_keys: tuple[str, ...] = Field(
        default=(), description="Dedupe keys of candidates already offered in this run."
    )


class Candidate(Frozen):
    """A document the Searcher offers for ingestion."""

    key: str = Field(description="Dedupe key: 'file:<sha256>', 'doi:...', 'arxiv:...'.")
    source: Literal["library", "openalex", "arxiv", "zotero"] = "library"
    path: str | None = Field(default=None, description="Local file to ingest, when already on disk.")
    url: str | None = None
    title: str | None = None
    authors: tuple[str, ...] = ()
    year: int | None = None


class Skipped(Frozen):
    """Something that could not be used, and why."""

    item: str
    reason: str
    retryable: bool = False


class SearchResults(Message):
    iteration: int = Field(ge=1)
    candidates: tuple[Candidate, ...] = ()
    skipped: tuple[Skipped, ...] = ()
    exhausted: bool = Field(default=False, description="The source has nothing more to offer.")
