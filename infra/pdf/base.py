"""The PDF → Markdown port."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from messages.search import VenueKind


class ParsedDocument(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    markdown: str
    page_spans: tuple[tuple[int, int, int], ...] = Field(
        default=(), description="(page_number starting at 1, char_start, char_end) of each page in `markdown`."
    )
    title: str | None = None
    authors: tuple[str, ...] = ()
    year: int | None = None
    doi: str | None = Field(default=None, description="The paper's own DOI, bare and lower case, when page 1 or "
                                                      "the file's metadata names one with a DOI label.")
    arxiv_id: str | None = Field(default=None, description="The arXiv id printed on page 1, without version.")
    venue: str | None = Field(default=None, description="The journal or proceedings page 1 names, when it does.")
    venue_kind: VenueKind = Field(default="", description="'journal', 'conference', or '' when not known.")
    n_pages: int = 0
    parser: str
    flags: tuple[str, ...] = Field(default=(), description="'repaired', 'truncated_pages:<n>', ...")


@runtime_checkable
class PDFParser(Protocol):
    name: str  # with the parser's version
    #: Forage's own revision of what it reads from this parser's output ("" where it reads nothing of its own): part
    #: of the ingest cache's key, so a change to that reading makes every cached parse a miss
    revision: str
    max_pages: int  # pages parsed at most: part of the ingest cache's key too

    def parse(self, path: Path) -> ParsedDocument:
        """Raise PDFError (retryable=False) with a clear reason for files that cannot be used."""
        ...
