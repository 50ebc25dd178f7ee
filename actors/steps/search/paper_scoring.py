"""Scoring candidate papers from title + abstract, many papers per LLM call.

One structured call scores up to ``search.score_batch`` papers against the approved requirements
(1 = unrelated … 5 = directly answers one of them). Papers the model skipped or mislabelled in a
batch stay unscored; a batch that fails leaves its papers unscored. Papers scoring at least
``search.accept_score`` are accepted. When no paper could be scored at all (the model failed every
time), the top ``search.fallback_keep`` papers by the sources' own ranking are kept, and the
result says so — a broken model must not empty the library.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from actors.steps.prompts import PAPER_SCORING_SYSTEM
from infra.errors import LLMOutputError, LLMTimeout
from infra.llm.base import LLM, ChatMessage
from messages.plan import Requirement
from messages.search import Candidate

ABSTRACT_CHARS = 700


class PaperScore(BaseModel):
    model_config = ConfigDict(extra="ignore")

    paper: int = Field(ge=1, le=99, description="The paper's number in the list.")
    score: int = Field(ge=1, le=5, description="1 unrelated, 2 marginal, 3 related, 4 relevant, 5 directly answers.")
    reason: str = Field(default="", max_length=200, description="A few words: why.")


class PaperScores(BaseModel):
    """A relevance score for each listed paper."""

    model_config = ConfigDict(extra="ignore")

    scores: list[PaperScore] = Field(max_length=40)


@dataclass
class Screening:
    accepted: list[Candidate] = field(default_factory=list)
    rejected: list[Candidate] = field(default_factory=list)
    unscored: list[Candidate] = field(default_factory=list)
    calls: int = 0
    failures: list[str] = field(default_factory=list)
    fallback: bool = False


def _listing(batch: Sequence[Candidate]) -> str:
    lines = []
    for i, c in enumerate(batch, 1):
        abstract = " ".join((c.abstract or "").split())
        if len(abstract) > ABSTRACT_CHARS:
            abstract = abstract[:ABSTRACT_CHARS].rsplit(" ", 1)[0] + " …"
        year = f" ({c.year})" if c.year else ""
        lines.append(f"[{i}] {c.title or '(untitled)'}{year}\n    {abstract or '(no abstract)'}")
    return "\n".join(lines)


def _messages(requirements: Sequence[Requirement], batch: Sequence[Candidate]) -> list[ChatMessage]:
    reqs = "\n".join(f"{r.id}: {r.text}" for r in requirements)
    return [{"role": "system", "content": PAPER_SCORING_SYSTEM},
            {"role": "user", "content": f"Requirements:\n{reqs}\n\nPapers:\n{_listing(batch)}"}]


async def score_candidates(candidates: Sequence[Candidate], requirements: Sequence[Requirement], llm: LLM, *,
                           batch_size: int, accept_score: int, fallback_keep: int) -> Screening:
    """Score ``candidates`` (in the sources' rank order) in batches; accept, reject or leave unscored."""
    out = Screening()
    scored: dict[int, Candidate] = {}
    for start in range(0, len(candidates), batch_size):
        batch = list(candidates[start:start + batch_size])
        out.calls += 1
        try:
            answer = await llm.structured(_messages(requirements, batch), PaperScores)
        except (LLMOutputError, LLMTimeout) as exc:
            out.failures.append(f"papers {start + 1}-{start + len(batch)}: {type(exc).__name__}")
            continue
        for item in answer.scores:
            i = item.paper - 1
            if 0 <= i < len(batch) and start + i not in scored:  # the first score of a paper counts
                scored[start + i] = batch[i].model_copy(update={"score": item.score,
                                                                "score_reason": item.reason.strip() or None})
    for n, c in enumerate(candidates):
        got = scored.get(n)
        if got is None:
            out.unscored.append(c)
        elif got.score is not None and got.score >= accept_score:
            out.accepted.append(got)
        else:
            out.rejected.append(got)
    if candidates and not scored:
        out.fallback = True
        out.accepted = list(candidates[:fallback_keep])
        out.unscored = list(candidates[fallback_keep:])
    out.accepted.sort(key=lambda c: -(c.score or 0))  # stable: equal scores keep the sources' rank
    return out
