"""The answers the LLM must give, as pydantic schemas.

Every free-text field has a ``max_length`` (JSON-schema ``maxLength``) and every list a
``max_length`` (``maxItems``): a small model constrained by the schema's grammar otherwise keeps
writing until it runs out of tokens in the middle of the JSON. Tags are ``Literal`` enums.

These are the LLM's side of the contract only; the steps turn them into the frozen messages in
:mod:`messages`. They are ordinary (not frozen, extra ignored) models so that a chatty model's extra
keys do not fail validation.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, field_validator

# -- shared limits (characters) ------------------------------------------------------------------------
REQUIREMENT_CHARS = 300
MOTIVE_CHARS = 240
SUMMARY_CHARS = 500
SENTENCE_CHARS = 400
OVERVIEW_CHARS = 900
TITLE_CHARS = 100
SECTION_PATH_CHARS = 300

MAX_REQUIREMENTS = 10  # RequirementsPlan allows at most 10
MAX_SECTIONS_CHOSEN = 5  # ForageSettings.deep_dive_sections allows at most 5
MAX_EVIDENCE_SENTENCES = 6
MAX_CITES_PER_SENTENCE = 4

RequirementText = Annotated[str, StringConstraints(max_length=REQUIREMENT_CHARS)]
SectionPath = Annotated[str, StringConstraints(max_length=SECTION_PATH_CHARS)]
SourceLabel = Annotated[int, Field(ge=0, le=999)]


class LLMAnswer(BaseModel):
    model_config = ConfigDict(extra="ignore")


# -- plan ----------------------------------------------------------------------------------------------
class RequirementList(LLMAnswer):
    """Requirements derived from a research query."""

    requirements: list[RequirementText] = Field(
        max_length=MAX_REQUIREMENTS,
        description="Content-only, self-contained information needs, one sentence each.")


MissingDimension = Literal["methods", "quantitative", "comparison", "measurement", "implementation",
                           "source_diversity"]
MAX_REPLAN_REQUIREMENTS = 3


class ReplanDraft(LLMAnswer):
    """Re-planning when coverage stalls: what the evidence so far lacks, and 1-3 new requirements.

    Unknown dimension names are dropped (a wrong enum value does not fail the whole answer)."""

    missing: list[MissingDimension] = Field(
        default_factory=list, max_length=6,
        description="Dimensions the evidence so far lacks: methods (how it is done), quantitative (numbers, "
                    "effect sizes), comparison (against alternatives or baselines), measurement (how it is "
                    "measured or evaluated), implementation (practical deployment, cost, constraints), "
                    "source_diversity (the evidence rests on too few papers).")
    requirements: list[RequirementText] = Field(
        max_length=MAX_REPLAN_REQUIREMENTS,
        description="1 to 3 new content-only, self-contained requirements that fill the missing dimensions; "
                    "none that repeats an existing requirement.")

    @field_validator("missing", mode="before")
    @classmethod
    def _known_only(cls, value: object) -> object:
        if not isinstance(value, list):
            return value
        known = set(MissingDimension.__args__)  # type: ignore[attr-defined]
        return [v for v in value if isinstance(v, str) and v in known]


# -- forage --------------------------------------------------------------------------------------------
class ChunkVerdict(LLMAnswer):
    """Start node: how one retrieved passage relates to the requirement."""

    tag: Literal["answers", "interesting", "unrelated"] = Field(
        description="answers: the passage itself gives the information; interesting: on topic, the document "
                    "probably has it elsewhere; unrelated: neither.")
    motive: str = Field(max_length=MOTIVE_CHARS, description="One short sentence: why this tag.")


class DeepDiveVerdict(LLMAnswer):
    """Deep dive: does this passage of a promising document give the information?"""

    tag: Literal["answers", "unrelated"]
    motive: str = Field(max_length=MOTIVE_CHARS)


MAX_BATCH_PASSAGES = 12  # ForageSettings.judge_batch allows at most 12
EvidenceKind = Literal["method", "result", "background"]


class PassageVerdict(LLMAnswer):
    """One passage of a batch: its number, tag, kind and motive."""

    passage: int = Field(ge=1, le=MAX_BATCH_PASSAGES, description="The passage's number [n].")
    tag: Literal["answers", "interesting", "unrelated"] = Field(
        description="answers: the passage itself gives the information; interesting: on topic, the document "
                    "probably has it elsewhere; unrelated: neither.")
    kind: EvidenceKind = Field(
        description="method: a method or mechanism; result: a quantitative result (numbers); background: "
                    "context, definitions, motivation.")
    motive: str = Field(max_length=MOTIVE_CHARS, description="One short sentence: why this tag.")


class DeepDivePassageVerdict(PassageVerdict):
    tag: Literal["answers", "unrelated"] = Field(  # type: ignore[assignment]
        description="answers: the passage itself gives the information; unrelated: it does not.")


def _valid_entries(model: type[PassageVerdict], value: object) -> object:
    """Keep the entries that validate on their own; a bad entry fails only its passage (re-judged)."""
    if not isinstance(value, list):
        return value
    kept = []
    for entry in value:
        try:
            kept.append(model.model_validate(entry))
        except ValueError:
            continue
    return kept


class BatchVerdict(LLMAnswer):
    """Start node: one verdict per numbered passage, all for the same requirement.

    Entries that do not validate (unknown tag, bad number, missing field) are dropped here; the
    step re-judges the passages left without a verdict."""

    verdicts: list[PassageVerdict] = Field(max_length=MAX_BATCH_PASSAGES)

    @field_validator("verdicts", mode="before")
    @classmethod
    def _drop_bad(cls, value: object) -> object:
        return _valid_entries(PassageVerdict, value)


class DeepDiveBatchVerdict(LLMAnswer):
    """Deep dive: one answers/unrelated verdict per numbered passage of a promising document."""

    verdicts: list[DeepDivePassageVerdict] = Field(max_length=MAX_BATCH_PASSAGES)

    @field_validator("verdicts", mode="before")
    @classmethod
    def _drop_bad(cls, value: object) -> object:
        return _valid_entries(DeepDivePassageVerdict, value)


def _exactly(n: int) -> Any:
    def patch(schema: dict[str, Any]) -> None:
        schema["properties"]["verdicts"]["minItems"] = n  # JSON schema only: a bad entry still fails alone
    return patch


def _sized(base: type[LLMAnswer], n: int) -> type[LLMAnswer]:
    """``base`` whose JSON schema asks for exactly ``n`` verdicts (a grammar-constrained model then
    writes one per passage); importable by name so it pickles for Ray tasks; titled like ``base``."""
    qualname = f"_{base.__name__}{n}"
    cls = type(qualname, (base,), {
        "__module__": __name__, "__qualname__": qualname,
        "model_config": ConfigDict(extra="ignore", title=base.__name__, json_schema_extra=_exactly(n))})
    cls.__name__ = base.__name__
    globals()[qualname] = cls
    return cls


_SIZED = {(deep, n): _sized(DeepDiveBatchVerdict if deep else BatchVerdict, n)
          for deep in (False, True) for n in range(1, MAX_BATCH_PASSAGES + 1)}


def batch_schema(n: int, deep: bool = False) -> type[BatchVerdict] | type[DeepDiveBatchVerdict]:
    """The batch schema for ``n`` passages: :class:`BatchVerdict` (or :class:`DeepDiveBatchVerdict`)
    asking for exactly ``n`` verdicts."""
    return _SIZED[(deep, n)]  # type: ignore[return-value]


class Reformulation(LLMAnswer):
    """Another search query for a requirement whose evidence comes from too few papers."""

    query: str = Field(max_length=REQUIREMENT_CHARS,
                       description="A different wording: synonyms, the method or measurement names a paper would use.")


class DocumentGist(LLMAnswer):
    """A short summary of one document from its title, abstract and outline."""

    summary: str = Field(max_length=SUMMARY_CHARS, description="Two or three sentences: what the document is about.")


class RelevanceGate(LLMAnswer):
    """Is a deeper look into this document worth it for the requirement?"""

    continue_search: bool
    reason: str = Field(max_length=MOTIVE_CHARS)


class SectionChoice(LLMAnswer):
    """Section paths of one document to read next, copied from the given list."""

    sections: list[SectionPath] = Field(max_length=MAX_SECTIONS_CHOSEN)


# -- write ---------------------------------------------------------------------------------------------
class CitedSentence(LLMAnswer):
    sentence: str = Field(max_length=SENTENCE_CHARS, description="One sentence supported by the cited sources.")
    sources: list[SourceLabel] = Field(max_length=MAX_CITES_PER_SENTENCE,
                                       description="Labels [n] of the evidence items that support the sentence.")


class SectionDraft(LLMAnswer):
    """One requirement's section of the report."""

    mechanism: str = Field(max_length=SENTENCE_CHARS,
                           description="One sentence: how or why, according to the evidence.")
    mechanism_sources: list[SourceLabel] = Field(default_factory=list, max_length=MAX_CITES_PER_SENTENCE)
    evidence: list[CitedSentence] = Field(max_length=MAX_EVIDENCE_SENTENCES)


class OverviewDraft(LLMAnswer):
    """The report's opening paragraph and its topic."""

    title: str = Field(max_length=TITLE_CHARS, description="The report's topic in a few words.")
    overview: str = Field(max_length=OVERVIEW_CHARS)


# -- comparison ----------------------------------------------------------------------------------------
RECORD_CHARS = 300
MAX_OVERLAPS = 10
MAX_PAPERS_PER_OVERLAP = 8


class ContributionDraft(LLMAnswer):
    """One paper's contribution record. The label fields are narrowed to the configured taxonomy
    (``actors.steps.write.compare.contribution_schema``)."""

    problem: str = Field(max_length=RECORD_CHARS, description="The problem the paper addresses, one sentence.")
    method: str = Field(max_length=RECORD_CHARS, description="How it addresses it, one sentence.")
    contribution: str = Field(max_length=RECORD_CHARS, description="Its key contribution, one sentence.")
    novelty: str = Field(max_length=RECORD_CHARS, description="What the paper claims is new, one sentence.")
    problem_label: str = Field(description="The closest problem label from the list given.")
    method_label: str = Field(description="The closest method label from the list given.")


class OverlapItem(LLMAnswer):
    papers: list[SourceLabel] = Field(min_length=2, max_length=MAX_PAPERS_PER_OVERLAP,
                                      description="Numbers of the papers that share the element.")
    element: Literal["problem", "dataset", "method"]
    shared: str = Field(max_length=MOTIVE_CHARS, description="What they share, a few words.")


class OverlapDraft(LLMAnswer):
    """Papers of the set that share a problem, a dataset or a method family."""

    overlaps: list[OverlapItem] = Field(max_length=MAX_OVERLAPS)


class DifferenceItem(LLMAnswer):
    paper: SourceLabel
    distinct: str = Field(max_length=RECORD_CHARS,
                          description="What this paper does that none of the others in the set does.")


class DifferenceDraft(LLMAnswer):
    """For each paper, what sets it apart from the others in the set."""

    differences: list[DifferenceItem] = Field(max_length=20)


# -- ask -----------------------------------------------------------------------------------------------
class AskIntent(LLMAnswer):
    """Is the message a question for the library, or small talk?"""

    intent: Literal["question", "chit_chat"] = Field(
        description="question: it asks for information the papers could give; chit_chat: greeting, thanks, "
                    "small talk or a question about the assistant itself.")
    reply: str = Field(default="", max_length=MOTIVE_CHARS,
                       description="For chit_chat only: a short friendly reply. Empty for a question.")


class AskAnswer(LLMAnswer):
    """A short answer from numbered passages, or a statement that they do not suffice."""

    sufficient: bool = Field(description="Whether the passages hold enough to answer the question.")
    sentences: list[CitedSentence] = Field(default_factory=list, max_length=4,
                                           description="At most 4 sentences, each citing the passages it rests on.")


# -- evaluation ----------------------------------------------------------------------------------------
Score = Annotated[int, Field(ge=1, le=5)]


class JudgeVerdict(LLMAnswer):
    """The thesis rubric (1-5 each) with an evidence audit."""

    correctness: Score = Field(description="Are the report's claims supported by the cited evidence? 5 = all.")
    usefulness: Score = Field(description="Would a researcher asking the query find it useful? 5 = very.")
    scope: Score = Field(description="Does it cover what the query asks, no more and no less? 5 = fully.")
    unsupported_claims: list[Annotated[str, StringConstraints(max_length=SENTENCE_CHARS)]] = Field(
        default_factory=list, max_length=10,
        description="Claims of the report that its cited evidence does not support, quoted briefly.")
    rationale: str = Field(default="", max_length=OVERVIEW_CHARS, description="Two or three sentences.")
