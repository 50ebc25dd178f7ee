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
import hashlib
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from infra.errors import LLMUnavailable
from infra.llm.ollama import OllamaLLM
from infra.settings import Settings
from messages.forage import ForageRequest
from messages.plan import Requirement, ResearchQuery
from tests.loopback_ollama import (
    Behaviour, LoopbackOllama, answer, empty, hang, http_error, invalid_json, thinking, truncated,
)
from tests.unit.test_forget import brain, make_pdf

MODEL = "qwen2.5:7b-instruct"
TIMEOUT_S = 1.0
SLOW_S = 0.3  # well inside the timeout


def _wrong_enum(good: dict[str, Any]) -> str:
    bad = json.loads(json.dumps(good))
    if "verdicts" in bad and bad["verdicts"]:
        bad["verdicts"] = [{**v, "tag": "maybe"} for v in bad["verdicts"]]
    elif "tag" in bad:
        bad["tag"] = "maybe"
    else:
        bad = {"requirements": "not a list", "kind": "maybe"}
    return json.dumps(bad)


# scenario -> what the server does on attempts 1, 2, ... of one logical call (then: the right answer)
FAULTS: dict[str, Callable[[dict[str, Any]], list[Behaviour]]] = {
    "http_500": lambda good: [http_error(500)],
    "hang": lambda good: [hang()],
    "slow": lambda good: [answer(good, delay_s=SLOW_S)],
    "invalid_json": lambda good: [invalid_json()],
    "truncated": lambda good: [truncated(json.dumps(good)[: max(2, len(json.dumps(good)) // 2)])],
    "think": lambda good: [thinking(good, "Let me reason about the passages first. {not json}")],
    "wrong_enum": lambda good: [answer(_wrong_enum(good))],
    "empty": lambda good: [empty()],
    # not recoverable within one call's retries (max_retries=2: three attempts)
    "always_invalid": lambda good: [invalid_json()] * 3,
    "always_hang": lambda good: [hang()] * 3,
    "always_500": lambda good: [http_error(500)] * 3,
}
RECOVERABLE = ["http_500", "hang", "slow", "invalid_json", "truncated", "think", "wrong_enum", "empty"]


class ChaosOllama(LoopbackOllama):
    """A loopback Ollama whose answer to each request is computed: the test brain's correct answer,
    after the faults of the scenario ``choose`` picks for the request's logical call."""

    def __init__(self, choose: Callable[[int, list[dict[str, str]]], str], **kw: Any) -> None:
        super().__init__(**kw)
        self.choose = choose
        self.calls: dict[str, tuple[str, int]] = {}  # logical call -> (scenario, attempts so far)
        self.seen: list[tuple[str, str]] = []  # (scenario, behaviour kind) per chat request
        self._current = threading.local()
        self._chaos_lock = threading.Lock()

    def _record(self, request: Any) -> None:
        super()._record(request)
        self._current.body = request.body

    def _pop(self, endpoint: str) -> Behaviour | None:
        queued = super()._pop(endpoint)
        if queued is not None or endpoint != "chat":
            return queued
        body = self._current.body
        messages = body.get("messages", [])
        schema_name = (body.get("format") or {}).get("title", "")
        key = hashlib.sha256(json.dumps(messages[:2], sort_keys=True).encode()).hexdigest()
        with self._chaos_lock:
            scenario, attempts = self.calls.get(key, (self.choose(len(self.calls), messages), 0))
            self.calls[key] = (scenario, attempts + 1)
        schema = type(schema_name, (), {})
        good = asyncio.run(brain(messages, schema))
        faults = FAULTS[scenario](good) if scenario in FAULTS else []
        behaviour = faults[attempts] if attempts < len(faults) else answer(good)
        with self._chaos_lock:
            self.seen.append((scenario, "fault" if attempts < len(faults) else "good"))
        return behaviour


def llm_for(server: LoopbackOllama) -> OllamaLLM:
    return OllamaLLM(host=server.url, model=MODEL, timeout_s=TIMEOUT_S, max_retries=2, backoff_s=0.01,
                     backoff_max_s=0.05)


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

        for name in RECOVERABLE:
            started = time.monotonic()
            result = plan(name)
            assert result.degraded == (), (name, result.degraded)
            assert [r.text for r in result.requirements] == [
                "Effect of Vexlorimab on the speed of fin regeneration in zebrafish"], name
            assert time.monotonic() - started < TIMEOUT_S * 3 + 2, name

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
    make_pdf(tmp / "fins.pdf", "Fin regeneration under treatment",
             ["Abstract. Zebrafish regenerate their caudal fins after amputation within two weeks. " * 3,
              "Methods. Fish were treated with a drug and regrowth of the fin was measured daily. " * 3])
    make_pdf(tmp / "scales.pdf", "Scale pigmentation of zebrafish",
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
