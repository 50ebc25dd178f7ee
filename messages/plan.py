"""Query, requirements and the researcher's approval."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from messages.base import Frozen, Message


class Requirement(Frozen):
    """One content-only, self-contained information need derived from the query."""

    id: str = Field(pattern=r"^R\d+$", description="Stable id within a run: R1, R2, ...")
    text: str = Field(min_length=3, max_length=400)

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
    machine. The filters are shown with it before approval.
    """

    text: str = Field(min_length=2, max_length=300, description="Exact string sent to the databases.")
    kind: Literal["keywords", "title", "author"] = Field(
        default="keywords", description="'title'/'author': a direct lookup of a named paper or person.")
    year_from: int | None = Field(default=None, ge=1600, le=2100)
    year_to: int | None = Field(default=None, ge=1600, le=2100)
    open_access: bool = Field(default=False, description="Only open-access works (OpenAlex is_oa filter).")
    requirement_ids: tuple[str, ...] = Field(default=(), description="Requirements this string serves.")

    @field_validator("text")
    @classmethod
    def _one_line(cls, value: str) -> str:
        value = " ".join(value.split())
        if len(value) < 2:
            raise ValueError("search string is empty")
        return value

    def describe(self) -> str:
        """One line for the approval screen: the string and its filters."""
        parts = [f'"{self.text}"']
        if self.kind != "keywords":
            parts.append(f"({self.kind} lookup)")
        if self.year_from or self.year_to:
            parts.append(f"years {self.year_from or '…'}–{self.year_to or '…'}")
        if self.open_access:
            parts.append("open access only")
        return " ".join(parts)


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
