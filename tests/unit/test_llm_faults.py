"""The planner and a Forager against an Ollama that misbehaves (a real HTTP server on loopback).

Every logical LLM call (identified by its system + first user message) meets one fault scenario:
an HTTP 500, a hang, a slow answer, invalid JSON, JSON cut off at the token limit, a ``<think>``
block before the JSON, a wrong enum value, empty content — each once, then the correct answer — or
a persistent fault (invalid JSON, hangs or 500s on every attempt). The real OllamaLLM (timeout,
transport retries, repair retries) talks to it; the steps must finish, and what could not be
recovered must be reported (``degraded`` in the plan, ``failed_steps`` in the coverage, a failed
requirement when the server is down).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from infra.errors import LLMUnavailable
from infra.settings import Settings
from messages.forage import ForageRequest
from messages.plan import Requirement, ResearchQuery
from tests.chaos_ollama import FAULTS, MODEL, RECOVERABLE, TIMEOUT_S, ChaosOllama, llm_for
from tests.factories import page_pdf
from tests.loopback_ollama import LoopbackOllama

# -- the planner ------------------------------------------------------------------------------------

def _scenario_in(messages: list[dict[str, str]]) -> str:
    user = messages[1]["content"] if len(messages) > 1 else ""
    return next((name for name in FAULTS if f"[{name}]" in user), "none")


def test_the_planner_recovers_from_every_transient_fault_and_reports_the_rest() -> None:
    from actors.steps.plan.requirements import derive_requirements

    with ChaosOllama(lambda i, messages: _scenario_in(messages), models=(MODEL,), hang_limit_s=3.0) as server:
        llm = llm_for(server)

        def plan(name: str):
            query = ResearchQuery(run_id="run-faults", text=f"How does Vexlorimab affect fin regrowth? [{name}]")
            return asyncio.run(derive_requirements(query, llm, 3))

        for name in RECOVERABLE:  # bounded by attempts (at most 3 a call, below), not by the wall clock
            result = plan(name)
            assert result.degraded == (), (name, result.degraded)
            assert [r.text for r in result.requirements] == [
                "Effect of Vexlorimab on the speed of fin regeneration in zebrafish"], name

        for name, error in (("always_invalid", "LLMOutputError"), ("always_hang", "LLMTimeout")):
            result = plan(name)  # the fallback: the query itself is R1, and the plan says why
            assert result.requirements[0].text.startswith("How does Vexlorimab affect fin regrowth?")
            assert any(error in d for d in result.degraded), result.degraded

        with pytest.raises(LLMUnavailable) as down:  # a server that keeps failing is not hidden
            plan("always_500")
        assert down.value.retryable

        faults_met = {s for s, kind in server.seen if kind == "fault"}
        assert faults_met == set(RECOVERABLE) | {"always_invalid", "always_hang", "always_500"}
        # bounded: every logical call took at most 3 requests
        assert all(attempts <= 3 for _, attempts in server.calls.values())


# -- a Forager --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def library_store(tmp_path_factory) -> tuple[Settings, Any]:
    from actors.steps.ingest.step import IngestStep
    from infra.embed import build_embedder
    from infra.pdf import build_parser
    from infra.store import build_store
    from messages.ingest import IngestRequest
    from messages.search import Candidate

    tmp = tmp_path_factory.mktemp("faults")
    page_pdf(tmp / "fins.pdf", "Fin regeneration under treatment",
             ["Abstract. Zebrafish regenerate their caudal fins after amputation within two weeks. " * 3,
              "Methods. Fish were treated with a drug and regrowth of the fin was measured daily. " * 3])
    page_pdf(tmp / "scales.pdf", "Scale pigmentation of zebrafish",
             ["Abstract. Pigment cells of adult zebrafish scales were counted under a microscope. " * 3,
              "Results. Melanophore density differed between the dorsal and ventral scales. " * 3])
    settings = Settings.load("quick").updated(store={"path": tmp / "store"}, embed={"backend": "minilm"},
                                              llm={"timeout_s": TIMEOUT_S})
    embedder = build_embedder(settings)
    step = IngestStep(settings, build_store(settings), embedder, build_parser(settings))
    for pdf in ("fins.pdf", "scales.pdf"):
        result = step.ingest(IngestRequest(run_id="run-faults", candidate=Candidate(key=f"file:{tmp / pdf}",
                                                                                    path=str(tmp / pdf))))
        assert result.status == "stored", result.reason
    return settings, embedder


def forage(settings: Settings, embedder: Any, server: LoopbackOllama, iterations: int = 2) -> list[Any]:
    from actors.forager import Forager

    req = Requirement(id="R1", text="Effect of Vexlorimab on the speed of fin regeneration in zebrafish")
    forager = Forager(settings, "run-faults", None, llm=llm_for(server), embedder=embedder)

    async def go() -> list[Any]:
        return [await forager.forage(ForageRequest(run_id="run-faults", iteration=i, requirement=req))
                for i in range(1, iterations + 1)]

    return asyncio.run(go())


def test_a_forager_finishes_through_every_fault_and_records_what_degraded(library_store) -> None:
    settings, embedder = library_store
    # the first two logical calls fail for good (invalid JSON, hangs), the rest meet one fault each
    order = ["always_invalid", "always_hang", *RECOVERABLE]
    with ChaosOllama(lambda i, _: order[i % len(order)], models=(MODEL,), hang_limit_s=3.0) as server:
        results = forage(settings, embedder, server)
    last = results[-1]
    assert last.status == "ok", last.error
    assert last.coverage > 0  # the chunks skipped in iteration 1 were judged in iteration 2
    assert any("LLMOutputError" in f for f in last.failed_steps), last.failed_steps
    assert any("LLMTimeout" in f for f in last.failed_steps), last.failed_steps
    faults_met = {s for s, kind in server.seen if kind == "fault"}
    assert {"always_invalid", "always_hang"} <= faults_met
    assert len(faults_met) >= 4, server.seen  # at least two of the one-off faults were met and recovered
    # bounded: at most 3 requests (1 + max_retries) per structured call of the step
    assert len(server.seen) <= 3 * last.llm_calls, (len(server.seen), last.llm_calls)


def test_a_forager_whose_server_is_down_fails_its_requirement_not_the_caller(library_store) -> None:
    settings, embedder = library_store
    with ChaosOllama(lambda i, _: "always_500", models=(MODEL,)) as server:
        [result] = forage(settings, embedder, server, iterations=1)
    assert result.status == "failed" and "LLMUnavailable" in (result.error or "")
    assert "HTTP 500" in (result.error or "")
    assert all(attempts <= 3 for _, attempts in server.calls.values())
