"""Foraging one requirement: judgements, evidence and coverage."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from messages.base import Frozen, Message
from messages.plan import Requirement

Tag = Literal["answers", "interesting", "unrelated"]
Status = Literal["ok", "failed"]


class ForageRequest(Message):
    iteration: int = Field(ge=1)
    requirement: Requirement
    doc_ids: tuple[str, ...] | None = Field(
        default=None, description="Forage only these documents (a follow-up run: the earlier run's documents and "
                                  "its own); None: the whole store.")
    seed_chunk_ids: tuple[str, ...] = Field(
        default=(), description="Chunks judged first, before retrieval, when not judged yet (a follow-up run: the "
                                "earlier run's evidence).")


class ChunkJudgement(Frozen):
    chunk_id: str
    doc_id: str
    tag: Tag
    motive: str = ""
    stage: Literal["start", "deep_dive", "reformulated"] = "start"
    kind: Literal["method", "result", "background"] | None = Field(
        default=None, description="What the chunk carries: a method/mechanism, a quantitative result, or background.")
    relevance: float | None = Field(
        default=None, description="How close the passage is to the requirement by a signal independent of the judge "
                                  "(cosine similarity of their embeddings); None: not checked.")
    signal: float | None = Field(
        default=None, description="The check's score of the passage: ``relevance`` plus 0.4 x the share of the "
                                  "requirement's content words it holds; what a calibrated coverage weighs it by. "
                                  "None: not shown to the judge, or coverage not calibrated for this signal.")
    model_tag: Tag | None = Field(
        default=None, description="The judge's own tag when the relevance check overruled it (``tag`` is then what "
                                  "counts); None: the check agreed, or the passage was never shown to the judge.")
    confirmed: bool | None = Field(
        default=None, description="For an 'answers': whether retrieval signals confirm it (similarity plus the share "
                                  "of the requirement's words the passage holds, at least forage.answer_confirmation); "
                                  "only a confirmed answer counts for coverage and answering papers. None: not an "
                                  "answer, or no confirmation configured.")
    model_kind: Literal["method", "result", "background"] | None = Field(
        default=None, description="The judge's own kind when the section check overruled it: a 'method' or 'result' "
                                  "from an introduction, background or related-work section counts as background "
                                  "(``kind``); None: the check agreed.")


class DocumentSummary(Frozen):
    doc_id: str
    title: str
    summary: str


class Evidence(Frozen):
    """Why one document helps a requirement, with the chunks that show it."""

    doc_id: str
    title: str
    tag: Literal["answers", "interesting"]
    motive: str
    summary: str = ""
    chunk_ids: tuple[str, ...] = Field(min_length=1)


class RequirementCoverage(Message):
    """The Forager's result for one requirement after one iteration (cumulative over iterations)."""

    requirement: Requirement
    iteration: int = Field(ge=1)
    status: Status = "ok"
    coverage: float = Field(ge=0.0, le=1.0, description="1.0 answered by a method or result, 0.75 answered by "
                                                         "background only, 0.5 only unconfirmed answers or "
                                                         "interesting passages, 0.0 nothing; only answers the "
                                                         "relevance check passed and retrieval signals confirmed "
                                                         "count.")
    evidence: tuple[Evidence, ...] = ()
    judgements: tuple[ChunkJudgement, ...] = ()
    llm_calls: int = 0
    answering_papers: int = Field(default=0, ge=0, description="Distinct documents with a confirmed answering "
                                                                "chunk.")
    failed_steps: tuple[str, ...] = Field(default=(), description="Steps that degraded, with reasons.")
    overruled: int = Field(default=0, ge=0, description="Verdicts the relevance check overruled so far (an "
                                                        "'answers' far from the requirement counts for nothing).")
    unconfirmed: int = Field(default=0, ge=0, description="Answers so far that retrieval signals did not confirm "
                                                          "(ChunkJudgement.confirmed): shown, not counted.")
    new_passages: int | None = Field(
        default=None, ge=0, description="Passages first judged in this iteration at or above the topic floor (shown to "
                                        "the judge; a new document read for the requirement brings some): 0 means the "
                                        "iteration brought the requirement nothing new. None: not counted (then the "
                                        "iteration's judgements count).")
    error: str | None = None
