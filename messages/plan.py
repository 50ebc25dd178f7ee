"""Query, requirements and the researcher's approval."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from messages.base import Frozen, Message


class Requirement(Frozen):
    """One content-only, self-contained information need derived from the query."""

    id: str = Field(pattern=r"^R\d+$", description="Stable id within a run: R1, R2, ...")
    text: str = Field(min_length=3, max_length=400)
    added_after: int | None = Field(default=None, ge=1, description="The iteration after which re-planning added it "
                                                                     "(shown before it is searched; marked in the "
                                                                     "report's Scope); None: planned before the run.")

    @field_validator("text")
    @classmethod
    def _strip(cls, value: str) -> str:
        value = " ".join(value.split())
        if len(value) < 3:
            raise ValueError("requirement text is empty")
        return value


class SearchQuery(Frozen):
    """One search string the researcher approved, with the filters sent alongside it.

    ``text`` is sent verbatim to each online source; nothing else derived from the query leaves the
    machine. The filters (years, open access, authors, venue, has a PDF) are sent too, so they are
    shown with it before approval (:meth:`filters`).
    """

    text: str = Field(min_length=2, max_length=300, description="Exact string sent to the databases.")
    kind: Literal["keywords", "title", "author"] = Field(
        default="keywords", description="'title'/'author': a direct lookup of a named paper or person.")
    year_from: int | None = Field(default=None, ge=1600, le=2100)
    year_to: int | None = Field(default=None, ge=1600, le=2100)
    open_access: bool = Field(default=False, description="Only open-access works (OpenAlex is_oa filter).")
    authors: tuple[str, ...] = Field(
        default=(), max_length=5,
        description="Only works by any of these people (OpenAlex raw_author_name.search; arXiv au:).")
    venue: str | None = Field(
        default=None, max_length=200,
        description="Only works published in this journal or conference (OpenAlex: the ids of the sources of "
                    "that name; arXiv: its journal reference, checked after the fact).")
    has_pdf: bool = Field(default=False, description="Only works with a PDF link (OpenAlex has_pdf_url filter).")
    requirement_ids: tuple[str, ...] = Field(default=(), description="Requirements this string serves.")

    @field_validator("text")
    @classmethod
    def _one_line(cls, value: str) -> str:
        value = " ".join(value.split())
        if len(value) < 2:
            raise ValueError("search string is empty")
        return value

    @field_validator("authors")
    @classmethod
    def _names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        names = tuple(dict.fromkeys(" ".join(n.split()) for n in value))
        if any(len(n) < 2 or len(n) > 100 for n in names):
            raise ValueError(f"an author name must have 2 to 100 characters: {names}")
        return names

    @field_validator("venue")
    @classmethod
    def _venue(cls, value: str | None) -> str | None:
        value = " ".join((value or "").split())
        if value and len(value) < 2:
            raise ValueError("a venue name must have at least 2 characters")
        return value or None

    def filters(self) -> tuple[str, ...]:
        """The filters sent with the string, in words, for the approval screen."""
        out: list[str] = []
        if self.kind != "keywords":
            out.append(f"{self.kind} lookup")
        if self.year_from or self.year_to:
            out.append(f"years {self.year_from or '…'}–{self.year_to or '…'}")
        if self.open_access:
            out.append("open access only")
        if self.has_pdf:
            out.append("with a PDF")
        if self.authors:
            out.append("by " + " or ".join(self.authors))
        if self.venue:
            out.append(f"in {self.venue}")
        return tuple(out)

    def describe(self) -> str:
        """One line for the approval screen: the string and its filters."""
        filters = self.filters()
        return f'"{self.text}"' + (f" ({', '.join(filters)})" if filters else "")


class ResearchQuery(Message):
    """The researcher's query. Protected: it never leaves the machine unless approved."""

    text: str = Field(max_length=4000)

    @field_validator("text")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("the research query is empty: say what you want to find out")
        return value.strip()


class PlanRequest(Message):
    """Ask the Orchestrator to derive requirements for a query."""

    query: ResearchQuery


class RequirementsPlan(Message):
    """Requirements derived from a query; ``approved`` once the researcher accepts them."""

    query: ResearchQuery
    requirements: tuple[Requirement, ...] = Field(min_length=1, max_length=10)
    approved: bool = False
    degraded: tuple[str, ...] = Field(
        default=(), description="What fell back (e.g. the LLM failed and the query itself became R1)."
    )
    search_queries: tuple[SearchQuery, ...] = Field(
        default=(), description="Proposed search strings; once approved, the only text sent to databases.")

    @field_validator("requirements")
    @classmethod
    def _unique_ids(cls, value: tuple[Requirement, ...]) -> tuple[Requirement, ...]:
        ids = [r.id for r in value]
        if len(ids) != len(set(ids)):
            raise ValueError(f"duplicate requirement ids: {ids}")
        return value

    def approve(self, requirements: tuple[Requirement, ...] | None = None,
                search_queries: tuple[SearchQuery, ...] | None = None) -> RequirementsPlan:
        """This plan approved, with the researcher's edits of its requirements and search strings where given:
        validated like a new plan (ValidationError for an empty or duplicated set). The one way a plan is approved,
        whether in the CLI, the gateway or a benchmark."""
        update: dict[str, object] = {"approved": True}
        if requirements is not None:
            update["requirements"] = requirements
        if search_queries is not None:
            update["search_queries"] = search_queries
        return RequirementsPlan.model_validate({**self.model_dump(), **update})
