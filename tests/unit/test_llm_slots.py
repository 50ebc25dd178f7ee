"""LLM slots: the Ray custom resource ``llm_slot`` per LLM endpoint, taken per LLM call.

The session Ray (tests/conftest.py) declares no ``llm_slot``, so the Ray test runs SlottedLLM with
options that need none: it checks the call path (answer and errors through a Ray task); the
bench (bench/forage_parallel.py) measures the slots themselves.
"""

from __future__ import annotations

import asyncio

import pytest

from actors.options import LLM_SLOT, llm_call_options, llm_slot_resources
from actors.steps.schemas import DocumentGist
from infra.errors import LLMOutputError
from infra.llm.fakes import ScriptedLLM
from infra.llm.slotted import SlottedLLM
from infra.settings import Settings


def test_slots_come_from_settings() -> None:
    assert llm_slot_resources(Settings.load()) is None and llm_call_options(Settings.load()) is None
    settings = Settings.load().updated(ray={"llm_slots": 4})
    assert llm_slot_resources(settings) == {LLM_SLOT: 4.0}
    assert llm_call_options(settings) == {"num_cpus": 0, "resources": {LLM_SLOT: 1}, "max_retries": 0}
    with pytest.raises(ValueError):
        Settings.load().updated(ray={"llm_slots": 0})


def test_slotted_llm_calls_through_a_ray_task(ray_cluster) -> None:
    llm = SlottedLLM(ScriptedLLM([{"summary": "About leaves."}]), {"num_cpus": 0, "max_retries": 0})
    answer = asyncio.run(llm.structured([{"role": "user", "content": "leaves"}], DocumentGist))
    assert isinstance(answer, DocumentGist) and answer.summary == "About leaves."
    assert llm.calls == 1
    bad = SlottedLLM(ScriptedLLM(["not json"], max_retries=0), {"num_cpus": 0, "max_retries": 0})
    with pytest.raises(LLMOutputError):  # the wrapped LLM's error, as itself
        asyncio.run(bad.structured([{"role": "user", "content": "x"}], DocumentGist))
