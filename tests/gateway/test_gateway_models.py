"""The New-run form chooses the model (no Ray): GET /api/models lists the backends, the gateway's default and the
models its Ollama server has (or one sentence why it cannot say); POST /api/runs takes a backend and a model,
checks that server and model before any work, and refuses a model name no server could hold."""

from __future__ import annotations

import json

import pytest

from tests.gateway.live import BASE
from tests.loopback_ollama import LoopbackOllama, closed_loopback_url


def client_for(tmp_path, host: str):
    from fastapi.testclient import TestClient

    from gateway.server import create_app
    from infra.settings import Settings

    settings = Settings.load("quick").updated(
        run={"runs_dir": tmp_path / "runs"}, store={"path": tmp_path / "store"}, net={"offline": True},
        search={"library": tmp_path}, llm={"backend": "ollama", "host": host, "model": "qwen2.5:7b-instruct"})
    return TestClient(create_app(settings), base_url=BASE)


def test_the_models_the_server_has_are_listed(tmp_path) -> None:
    with LoopbackOllama(models=("qwen2.5:7b-instruct", "llama3.2:1b")) as server, \
            client_for(tmp_path, server.url) as http:
        m = http.get("/api/models").json()
    assert m["backends"] == ["ollama", "openai", "embedded"]
    assert (m["backend"], m["model"]) == ("ollama", "qwen2.5:7b-instruct")
    assert m["ollama_models"] == ["llama3.2:1b", "qwen2.5:7b-instruct"] and m["ollama_error"] is None
    assert m["openai_models"] == [] and m["openai_error"] is None  # not asked: not the gateway's backend


def test_no_server_is_said_in_one_sentence(tmp_path) -> None:
    with client_for(tmp_path, closed_loopback_url()) as http:
        m = http.get("/api/models").json()
    assert m["ollama_models"] == [] and "not reachable" in m["ollama_error"] and "\n" not in m["ollama_error"]


def test_a_chosen_model_is_checked_before_any_work(tmp_path) -> None:
    with LoopbackOllama(models=("qwen2.5:7b-instruct",)) as server, client_for(tmp_path, server.url) as http:
        r = http.post("/api/runs", json={"query": "How do zebrafish fins regrow?", "model": "llama3.2:1b"})
        assert r.status_code == 503 and r.json()["detail"] == \
            "Ollama has no model 'llama3.2:1b': run `ollama pull llama3.2:1b`."
        assert http.get("/api/runs").json() == []


@pytest.mark.parametrize("model", ["a b", "x;rm -rf /", "../../etc", "", "m" * 300])
def test_a_model_name_no_server_could_hold_is_refused(tmp_path, model) -> None:
    with client_for(tmp_path, closed_loopback_url()) as http:
        r = http.post("/api/runs", json={"query": "q?", "model": model})
        assert r.status_code == 422 and "model" in json.dumps(r.json()["detail"])


def test_the_chosen_backend_and_model_reach_the_runs_settings(tmp_path) -> None:
    from gateway.api import RunCreate

    with client_for(tmp_path, closed_loopback_url()) as http:
        manager = http.app.state.manager
        chosen = manager.settings_for(RunCreate(query="q?", llm_backend="embedded"))
        assert chosen.llm.backend == "embedded"
        chosen = manager.settings_for(RunCreate(query="q?", model="llama3.2:1b"))
        assert (chosen.llm.backend, chosen.llm.model) == ("ollama", "llama3.2:1b")
