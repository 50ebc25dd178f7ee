"""Asking the Writer for the report, and the report."""

from __future__ import annotations

from pydantic import Field

from messages.base import Frozen, Message
from messages.forage import RequirementCoverage
from messages.plan import ResearchQuery


class WriteRequest(Message):
    query: ResearchQuery
    coverages: tuple[RequirementCoverage, ...]
    iterations: int = Field(ge=1)


class SourceRef(Frozen):
    """One numbered source in the report."""

    n: int = Field(ge=1)
    doc_id: str
    title: str
    authors: tuple[str, ...] = ()
    year: int | None = None
    origin: str = Field(default="", description="File name, DOI or URL.")
    chunk_ids: tuple[str, ...] = ()


class CitedChunk(Frozen):
    """One line of evidence.jsonl: a chunk that a report citation rests on."""

    n: int
    doc_id: str
    chunk_id: str
    section_path: str
    sha256: str
    quote: str


class SectionSources(Frozen):
    """Which source numbers have evidence for one requirement's section (what its citations may name)."""

    requirement_id: str
    heading: str = Field(description="The section's '## ' heading text as rendered.")
    sources: tuple[int, ...] = ()


class Report(Message):
    markdown: str
    sources: tuple[SourceRef, ...] = ()
    cited_chunks: tuple[CitedChunk, ...] = ()
    removed_citations: int = Field(default=0, description="Citations dropped because they did not resolve.")
    removed_sentences: int = 0
    regenerated_sections: int = Field(default=0, description="Sections written a second time to repair citations "
                                      "or to use more of their sources.")
    sections: tuple[SectionSources, ...] = ()
    llm_calls: int = 0
    failed_steps: tuple[str, ...] = ()
