"""Asking the Searcher for documents and what it found."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from messages.base import Frozen, Message
from messages.plan import Requirement, SearchQuery

VenueKind = Literal["", "journal", "conference"]
"""Where a paper appeared, as BibTeX and RIS need it: a journal (@article, JOUR), a conference's proceedings
(@inproceedings, CONF), or '' when not known (a preprint server is not a venue: its id is kept apart)."""


class SearchRequest(Message):
    """Ask for up to ``max_results`` documents not offered before in this run."""

    iteration: int = Field(ge=1)
    query: str
    requirements: tuple[Requirement, ...] = ()
    max_results: int = Field(default=8, ge=1)
    exclude_keys: tuple[str, ...] = Field(
        default=(), description="Dedupe keys of candidates already offered in this run."
    )
    search_queries: tuple[SearchQuery, ...] = Field(
        default=(), description="Approved search strings; without them no online source is asked.")
    accepted_ids: tuple[str, ...] = Field(
        default=(), description="OpenAlex ids of papers accepted earlier in the run (snowballing seeds).")


class Candidate(Frozen):
    """A document the Searcher offers for ingestion."""

    key: str = Field(description="Dedupe key: 'file:<sha256>', 'doi:...', 'arxiv:...'.")
    source: Literal["library", "openalex", "arxiv", "zotero"] = "library"
    path: str | None = Field(default=None, description="Local file to ingest, when already on disk.")
    url: str | None = None
    title: str | None = None
    authors: tuple[str, ...] = ()
    year: int | None = None
    doi: str | None = Field(default=None, description="Bare DOI, lower case (10.xxxx/...).")
    arxiv_id: str | None = Field(default=None, description="arXiv id without version (2101.00001).")
    openalex_id: str | None = Field(default=None, description="OpenAlex work id (W123...).")
    abstract: str | None = None
    venue: str | None = Field(default=None, description="Journal or proceedings the work appeared in.")
    venue_kind: VenueKind = Field(default="", description="What ``venue`` is: 'journal', 'conference' or ''.")
    pdf_urls: tuple[str, ...] = Field(default=(), description="Open-access PDF locations, best first.")
    landing_url: str | None = None
    found_by: str | None = Field(default=None, description="Search string, 'snowball:<id>' or 'library'.")
    score: int | None = Field(default=None, ge=1, le=5, description="LLM relevance score from title + abstract.")
    score_reason: str | None = None
    abstract_only: bool = Field(default=False, description="No PDF could be had: ingest title + abstract.")
    download_failures: tuple[str, ...] = Field(default=(), description="'<url>: <reason>' per failed location.")


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
