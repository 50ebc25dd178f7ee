"""A loopback Ollama that misbehaves on purpose (a real HTTP server): each logical LLM call meets one fault
scenario (an HTTP 500, a hang, a slow answer, invalid or truncated JSON, a think block, a wrong enum value, empty
content — once, then the right answer — or a fault on every attempt), the right answer being the zebrafish
``brain``'s (tests/zebrafish.py)."""

from __future__ import annotations

import asyncio
import hashlib
import json
import threading
from collections.abc import Callable
from typing import Any

from infra.llm.ollama import OllamaLLM
from tests.loopback_ollama import (
    Behaviour, LoopbackOllama, answer, empty, hang, http_error, invalid_json, thinking, truncated,
)
from tests.zebrafish import brain

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
