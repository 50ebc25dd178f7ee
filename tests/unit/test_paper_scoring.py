"""Screening candidates from title + abstract: many papers per call, accept above the threshold, a fallback."""

from __future__ import annotations

import asyncio
import re

from actors.steps.search.paper_scoring import PaperScores, score_candidates
from infra.llm.fakes import FunctionLLM, ScriptedLLM
from messages.plan import Requirement
from messages.search import Candidate

REQS = (Requirement(id="R1", text="How do microplastics move through marine food webs?"),)


def papers(n: int) -> list[Candidate]:
    return [Candidate(key=f"doi:10.1/{i}", source="openalex", title=f"Paper {i} on microplastics", abstract=f"A{i}",
                      year=2020) for i in range(1, n + 1)]


def by_title_number(messages, schema):
    """Scores computed from the listed papers: paper i gets (i % 5) + 1."""
    assert schema is PaperScores
    listed = re.findall(r"^\[(\d+)\] Paper (\d+)", messages[-1]["content"], re.MULTILINE)
    return {"scores": [{"paper": int(n), "score": int(i) % 5 + 1, "reason": f"paper {i}"} for n, i in listed]}


def test_one_call_scores_a_batch_and_the_threshold_decides():
    llm = FunctionLLM(by_title_number)
    out = asyncio.run(score_candidates(papers(10), REQS, llm, batch_size=4, accept_score=4, fallback_keep=3))
    assert out.calls == 3 and llm.calls == 3  # 10 papers in batches of 4: 3 calls, not 10
    assert {c.key for c in out.accepted} == {"doi:10.1/3", "doi:10.1/4", "doi:10.1/8", "doi:10.1/9"}
    assert [c.score for c in out.accepted] == [5, 5, 4, 4]  # best first
    assert len(out.rejected) == 6 and not out.unscored and not out.fallback
    assert all(c.score_reason for c in out.accepted + out.rejected)


def test_a_batch_that_fails_leaves_its_papers_unscored_only():
    answers = [{"scores": [{"paper": i, "score": 5} for i in range(1, 5)]}, "garbage", "garbage", "garbage",
               {"scores": [{"paper": 1, "score": 2}, {"paper": 2, "score": 5}, {"paper": 9, "score": 5}]}]
    out = asyncio.run(score_candidates(papers(10), REQS, ScriptedLLM(answers), batch_size=4, accept_score=3,
                                       fallback_keep=3))
    assert [c.key for c in out.accepted] == ["doi:10.1/1", "doi:10.1/2", "doi:10.1/3", "doi:10.1/4",
                                             "doi:10.1/10"]
    assert [c.key for c in out.unscored] == [f"doi:10.1/{i}" for i in (5, 6, 7, 8)]
    assert out.failures == ["papers 5-8: LLMOutputError"] and not out.fallback


def test_when_every_score_fails_the_top_ranked_are_kept():
    out = asyncio.run(score_candidates(papers(6), REQS, ScriptedLLM(["x"] * 6), batch_size=3, accept_score=3,
                                       fallback_keep=2))
    assert out.fallback
    assert [c.key for c in out.accepted] == ["doi:10.1/1", "doi:10.1/2"]
    assert len(out.unscored) == 4 and not out.rejected


def test_the_prompt_carries_titles_and_abstracts_not_more():
    seen = []

    def fn(messages, schema):
        seen.append(messages[-1]["content"])
        return {"scores": []}

    long = Candidate(key="doi:x", title="Long", abstract="word " * 1000)
    asyncio.run(score_candidates([long], REQS, FunctionLLM(fn), batch_size=5, accept_score=3, fallback_keep=1))
    assert "R1: How do microplastics" in seen[0] and "[1] Long" in seen[0]
    assert len(seen[0]) < 1200  # the abstract is cut
