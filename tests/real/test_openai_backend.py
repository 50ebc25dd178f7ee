"""`llm.backend = "openai"` against a real OpenAI-compatible server on loopback: llama.cpp's server (xllamacpp) with
SmolLM2-135M (tests/llama_server.py), through the official ``openai`` client, as Forage talks to vLLM in a lab.

What a researcher meets: a structured answer that validates against the schema; `check()` says in one sentence
when the server is down, the model is not served or the key is refused; a hung server is a timeout, not a hang;
429s are retried; the API key never shows in a repr or in run.json's recorded settings.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from pydantic import BaseModel, Field

from infra.errors import LLMTimeout, LLMUnavailable
from infra.llm import build_llm
from infra.llm.openai_compat import OpenAICompatLLM
from infra.settings import Settings
from tests.llama_server import LlamaServer, free_port

pytestmark = [pytest.mark.slow, pytest.mark.real_llm]


class Colour(BaseModel):
    name: str = Field(max_length=20)
    warm: bool


MESSAGES = [{"role": "system", "content": "Answer with JSON only."},
            {"role": "user", "content": "Name one colour and say whether it is warm."}]


@pytest.fixture(scope="module")
def server() -> Iterator[LlamaServer]:
    with LlamaServer() as running:
        yield running


def llm_for(server: LlamaServer, **changes: object) -> OpenAICompatLLM:
    settings = Settings.load(llm={"backend": "openai", "base_url": server.base_url, "model": server.model,
                                  "api_key": server.api_key, "timeout_s": 60, **changes})
    llm = build_llm(settings)
    assert isinstance(llm, OpenAICompatLLM)
    return llm


def test_a_structured_answer_from_the_server_validates(server: LlamaServer) -> None:
    llm = llm_for(server)
    asyncio.run(llm.check())
    assert asyncio.run(llm.installed_models()) == [server.model]
    answer = asyncio.run(llm.structured(MESSAGES, Colour))
    assert isinstance(answer, Colour) and answer.name.strip()
    assert llm.calls >= 1
    assert server.api_key not in repr(llm)


def test_round_trips_share_one_tls_context_per_process(server: LlamaServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh client per round trip built its own TLS context (16-33 ms of CPU per call, on the LLM endpoint's one
    event loop); with the process's shared one, three calls and a check build one."""
    import ssl

    from infra.llm.server import tls_context

    built: list[object] = []
    real = ssl.create_default_context

    def counted(*args: object, **kwargs: object) -> object:
        built.append(args)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    tls_context.cache_clear()
    monkeypatch.setattr(ssl, "create_default_context", counted)  # what an httpx client builds unless given one
    try:
        llm = llm_for(server)
        asyncio.run(llm.check())
        for _ in range(3):
            assert isinstance(asyncio.run(llm.structured(MESSAGES, Colour)), Colour)
    finally:
        tls_context.cache_clear()
    assert len(built) == 1


def test_check_says_what_is_wrong_in_one_sentence(server: LlamaServer) -> None:
    with pytest.raises(LLMUnavailable, match=f"serves no model 'llama3:8b' \\(it serves: {server.model}\\)"):
        asyncio.run(llm_for(server, model="llama3:8b").check())
    with pytest.raises(LLMUnavailable, match="refused the API key"):
        asyncio.run(llm_for(server, api_key="wrong").check())
    with pytest.raises(LLMUnavailable, match="refused the API key"):
        asyncio.run(llm_for(server, api_key="wrong").structured(MESSAGES, Colour))
    closed = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(LLMUnavailable, match=f"No OpenAI-compatible model server answers at {closed}"):
        asyncio.run(build_llm(Settings.load(llm={"backend": "openai", "base_url": closed})).check())


def test_the_api_key_is_not_recorded(server: LlamaServer) -> None:
    settings = Settings.load(llm={"backend": "openai", "base_url": server.base_url, "api_key": server.api_key})
    recorded = settings.record()
    assert "api_key" not in recorded["llm"] and recorded["llm"]["base_url"] == server.base_url
    assert server.api_key not in json.dumps(recorded)


def test_a_hung_server_is_a_timeout() -> None:
    """A server that accepts the connection and never answers: LLMTimeout after timeout_s (each attempt)."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
        llm = OpenAICompatLLM(url, "m", timeout_s=0.5, max_retries=1, backoff_s=0.01)
        with pytest.raises(LLMTimeout, match="did not answer within 0.5s"):
            asyncio.run(llm.structured(MESSAGES, Colour))


class _Throttle:
    """A loopback proxy in front of the real server that answers the first ``n`` chat calls with 429."""

    def __init__(self, target: str, n: int) -> None:
        self.target, self.left, self.seen = target, n, 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                outer.seen += 1
                if outer.left > 0:
                    outer.left -= 1
                    data = json.dumps({"error": {"message": "Too many requests", "type": "rate_limit"}}).encode()
                    self.send_response(429)
                    self.send_header("content-type", "application/json")
                    self.send_header("retry-after", "0")
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                request = urllib.request.Request(outer.target + self.path.removeprefix("/v1"), data=body, headers={
                    "content-type": "application/json", "authorization": self.headers.get("authorization", "")})
                with urllib.request.urlopen(request, timeout=60) as answer:
                    data = answer.read()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def test_429_is_retried_then_answered_and_for_ever_is_one_sentence(server: LlamaServer) -> None:
    proxy = _Throttle(server.base_url, n=2)
    try:
        llm = OpenAICompatLLM(proxy.url, server.model, api_key=server.api_key, max_retries=2, backoff_s=0.01)
        assert isinstance(asyncio.run(llm.structured(MESSAGES, Colour)), Colour)
        assert proxy.seen == 3  # two 429s, then the real answer
        proxy.left = 10
        with pytest.raises(LLMUnavailable, match="kept failing \\(HTTP 429: Too many requests\\) after 3 attempt"):
            asyncio.run(OpenAICompatLLM(proxy.url, server.model, api_key=server.api_key, max_retries=2,
                                        backoff_s=0.01).structured(MESSAGES, Colour))
    finally:
        proxy.close()


def test_the_gateway_lists_the_servers_models_and_checks_a_chosen_one_before_any_work(server: LlamaServer,
                                                                                      tmp_path) -> None:
    from fastapi.testclient import TestClient

    from gateway.server import create_app
    from tests.gateway.live import BASE

    settings = Settings.load("quick").updated(
        run={"runs_dir": tmp_path / "runs"}, store={"path": tmp_path / "store"}, net={"offline": True},
        search={"library": tmp_path}, llm={"backend": "openai", "base_url": server.base_url, "model": server.model,
                                            "api_key": server.api_key})
    with TestClient(create_app(settings), base_url=BASE) as http:
        m = http.get("/api/models").json()
        assert m["backend"] == "openai" and m["openai_models"] == [server.model] and m["openai_error"] is None
        assert m["openai_base_url"] == server.base_url
        r = http.post("/api/runs", json={"query": "How do zebrafish fins regrow?", "llm_backend": "openai",
                                         "model": "qwen2.5-7b-instruct"})
        assert r.status_code == 503 and r.json()["detail"] == (
            f"The model server at {server.base_url} serves no model 'qwen2.5-7b-instruct' (it serves: "
            f"{server.model}): set llm.model to one of them.")
        assert http.get("/api/runs").json() == []


# -- embeddings through the same API (embed.backend = "openai") ----------------------------------------------------

@pytest.fixture(scope="module")
def embedding_server() -> Iterator[LlamaServer]:
    with LlamaServer(embedding=True) as running:
        yield running


def test_embeddings_come_unit_normalised_in_order_and_the_store_follows_their_size(embedding_server: LlamaServer,
                                                                                    tmp_path) -> None:
    import math

    from infra.embed import build_embedder
    from infra.embed.openai_compat import OpenAICompatEmbedder
    from infra.store import build_store, embedding_name

    settings = Settings.load(embed={"backend": "openai", "base_url": embedding_server.base_url,
                                    "model": embedding_server.model, "api_key": embedding_server.api_key,
                                    "dim": 576, "batch_size": 2},
                             store={"path": tmp_path / "store"})
    embedder = build_embedder(settings)
    assert isinstance(embedder, OpenAICompatEmbedder) and embedding_server.api_key not in repr(embedder)
    embedder.check()
    texts = ["Heparin raises the risk of bleeding after trauma.", "Trace trees specialise types in JavaScript.",
             "Bleeding complications of anticoagulants in injured patients."]
    vectors = embedder.embed(texts)  # two requests (batch_size 2), put back in order
    assert len(vectors) == 3 and {len(v) for v in vectors} == {576} == {embedder.dim}
    assert all(abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-6 for v in vectors)
    assert vectors == embedder.embed(texts)  # deterministic
    cosine = [sum(a * b for a, b in zip(vectors[0], v, strict=True)) for v in vectors[1:]]
    assert cosine[1] > cosine[0]  # in order: the two bleeding sentences are closer than bleeding and JIT
    assert embedding_name(settings) == f"openai:{embedding_server.model}"
    assert build_store(settings).dim == 576 and "api_key" not in settings.record()["embed"]


def test_embedding_errors_are_one_sentence(embedding_server: LlamaServer) -> None:
    from infra.embed.openai_compat import OpenAICompatEmbedder

    with pytest.raises(LLMUnavailable, match="serves no model 'bge-m3' \\(it serves: smollm2-135m\\)"):
        OpenAICompatEmbedder(embedding_server.base_url, "bge-m3", api_key=embedding_server.api_key).check()
    with pytest.raises(LLMUnavailable, match="refused the API key"):
        OpenAICompatEmbedder(embedding_server.base_url, embedding_server.model, api_key="wrong", retries=0).embed(["x"])
    closed = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(LLMUnavailable, match=f"No OpenAI-compatible embedding server answers at {closed}"):
        OpenAICompatEmbedder(closed, "m", retries=0).embed(["x"])
    with pytest.raises(LLMUnavailable, match="returned vectors of size \\[576\\], expected 384"):
        OpenAICompatEmbedder(embedding_server.base_url, embedding_server.model, api_key=embedding_server.api_key,
                             dim=384).embed(["x"])
