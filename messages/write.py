"""Asking the Writer for the report, and the report."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from messages.base import Frozen, Message
from messages.forage import RequirementCoverage
from messages.plan import ResearchQuery
from messages.search import OaStatus, VenueKind


class WriteRequest(Message):
    query: ResearchQuery
    coverages: tuple[RequirementCoverage, ...]
    iterations: int = Field(ge=1)
    coverage_history: tuple[dict[str, float], ...] = Field(
        default=(), description="Coverage per requirement id after each iteration, first iteration first.")
    doc_ids: tuple[str, ...] | None = Field(
        default=None, description="The documents the run foraged (its own); None: the whole store.")


class SourceRef(Frozen):
    """One numbered source in the report."""

    n: int = Field(ge=1)
    doc_id: str
    title: str
    authors: tuple[str, ...] = ()
    year: int | None = None
    origin: str = Field(default="", description="File name, DOI or URL.")
    doi: str = Field(default="", description="Its DOI ('' when not known, or in a report written before the field).")
    arxiv_id: str = Field(default="", description="Its arXiv id ('' when not known).")
    venue: str = Field(default="", description="The journal or proceedings it appeared in ('' when not known).")
    venue_kind: VenueKind = Field(default="", description="'journal', 'conference' or ''.")
    chunk_ids: tuple[str, ...] = ()
    is_retracted: bool = Field(default=False, description="Retracted (OpenAlex): its sections carry a warning.")
    cited_by_count: int | None = Field(default=None, ge=0, description="Works citing it (OpenAlex).")
    oa_status: OaStatus = Field(default="", description="Open-access status ('' when not known).")
    preprint_only: bool = Field(default=False, description="Only a preprint of it exists.")


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


class ContributionRecord(Frozen):
    """What one cited paper contributes, under a schema (compliant when all four fields are non-empty)."""

    n: int = Field(ge=1, description="The paper's source number in the report.")
    doc_id: str
    title: str
    problem: str = ""
    method: str = ""
    contribution: str = ""
    novelty: str = Field(default="", description="The novelty the paper claims for itself.")
    problem_label: str | None = Field(default=None, description="Canonical problem label from the taxonomy.")
    method_label: str | None = Field(default=None, description="Canonical method label from the taxonomy.")
    unsupported_labels: tuple[str, ...] = Field(
        default=(), description="Of its two labels, those the paper's own title and abstract do not support: not "
                                "among the labels of their taxonomy closest to that text by embedding similarity "
                                "(write.label_check_top).")
    text_labels: tuple[str, ...] = Field(
        default=(), description="The problem label and the method label closest to the paper's title and abstract "
                                "by embedding similarity (catch-alls left out); empty when the labels were not "
                                "checked.")

    @property
    def compliant(self) -> bool:
        return all(x.strip() for x in (self.problem, self.method, self.contribution, self.novelty))


class Overlap(Frozen):
    """Papers of the set that share a problem, dataset or method family."""

    papers: tuple[int, ...] = Field(min_length=2)
    element: Literal["problem", "dataset", "method"]
    shared: str


class Differentiation(Frozen):
    """What one paper does that the others in the compared set do not."""

    n: int
    distinct: str


class GapMatrix(Frozen):
    """Problem × method matrix computed from the records' canonical labels (cells hold source numbers)."""

    problems: tuple[str, ...]
    methods: tuple[str, ...]
    cells: tuple[tuple[tuple[int, ...], ...], ...] = Field(description="cells[i][j]: papers with problem i and "
                                                                       "method j, ascending.")
    unlabelled: tuple[int, ...] = Field(default=(), description="Papers without a valid pair of labels.")
    unsupported: tuple[int, ...] = Field(default=(), description="Papers placed by a label their own text does not "
                                                                 "support (ContributionRecord.unsupported_labels).")

    @property
    def empty(self) -> list[tuple[str, str]]:
        return [(p, m) for i, p in enumerate(self.problems) for j, m in enumerate(self.methods)
                if not self.cells[i][j]]


class Comparison(Frozen):
    """The cited papers compared (part of the Report; saved as runs/<run_id>/comparison.json)."""

    records: tuple[ContributionRecord, ...] = ()
    overlaps: tuple[Overlap, ...] = ()
    differences: tuple[Differentiation, ...] = ()
    matrix: GapMatrix | None = None
    compliant: int = Field(default=0, description="Records with all four fields non-empty.")
    label_check_top: int = Field(default=0, ge=0, description="The records' labels were checked against each paper's "
                                                              "text with this many closest labels per taxonomy "
                                                              "(write.label_check_top); 0: not checked.")
    llm_calls: int = 0
    failed_steps: tuple[str, ...] = ()


class Figure(Frozen):
    """One chart beside the report: figures/<name>.png and figures/<name>.svg."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_-]*$")
    caption: str
    png_base64: str
    svg: str


class Report(Message):
    markdown: str
    sources: tuple[SourceRef, ...] = ()
    cited_chunks: tuple[CitedChunk, ...] = ()
    removed_citations: int = Field(default=0, description="Citations dropped because they did not resolve.")
    removed_sentences: int = 0
    regenerated_sections: int = Field(default=0, description="Sections written a second time to repair citations "
                                      "or to use more of their sources.")
    sections: tuple[SectionSources, ...] = ()
    comparison: Comparison | None = None
    figures: tuple[Figure, ...] = Field(default=(), description="Charts; saved as files, not in report.json.")
    llm_calls: int = 0
    failed_steps: tuple[str, ...] = ()
