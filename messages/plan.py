"""Query, requirements and the researcher's approval."""

from __future__ import annotations

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

    @field_validator("requirements")
    @classmethod
    def _unique_ids(cls, value: tuple[Requirement, ...]) -> tuple[Requirement, ...]:
        ids = [r.id for r in value]
        if len(ids) != len(set(ids)):
            raise ValueError(f"duplicate requirement ids: {ids}")
        return value
