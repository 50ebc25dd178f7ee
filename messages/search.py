"""Asking the Searcher for documents and what it found."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from messages.base import Frozen, Message
from messages.plan import Requirement, SearchQuery

VenueKind = Literal["", "journal", "conference"]
"""Where a paper appeared, as BibTeX and RIS need it: a journal (@article, JOUR), a conference's proceedings
(@inproceedings, CONF), or '' when not known (a preprint server is not a venue: its id is kept apart)."""


OaStatus = Literal["", "diamond", "gold", "hybrid", "bronze", "green", "closed"]
"""OpenAlex's open-access status of a work ('' when not known): gold/diamond/hybrid/bronze are free at the
publisher, green only in a repository (an arXiv paper is green), closed behind a paywall."""

#: What a reader weighs a paper by, kept as plain fields on the Candidate, the stored document and the report's
#: source: OpenAlex's ``is_retracted`` and ``cited_by_count``, the open-access status, and whether only a preprint
#: of it exists (arXiv only, or OpenAlex knows no published version).
WEIGHT_FIELDS = ("is_retracted", "cited_by_count", "oa_status", "preprint_only")


def weight_of(item: object) -> dict[str, object]:
    """The weight fields of a Candidate, a stored document or a report source, to copy to another."""
    return {name: getattr(item, name) for name in WEIGHT_FIELDS}


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
    is_retracted: bool = Field(default=False, description="OpenAlex marks the work retracted.")
    cited_by_count: int | None = Field(default=None, ge=0, description="Works citing it (OpenAlex); None: not known.")
    oa_status: OaStatus = Field(default="", description="Open-access status (OpenAlex's oa_status; arXiv: green).")
    preprint_only: bool = Field(default=False, description="Only a preprint exists (arXiv without a journal "
                                                           "reference or DOI; OpenAlex: type preprint or no "
                                                           "published version among its locations).")


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
