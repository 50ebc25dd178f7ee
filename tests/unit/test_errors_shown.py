"""No traceback or terminal escape code reaches a person: a Ray task's error is shown as the one sentence its
task raised; a run whose planning failed is recorded as failed with that sentence (so `forage runs` and the
dashboard list it); the gateway checks the model server before any work and answers 503 in one sentence."""

from __future__ import annotations

import asyncio
import json

from infra.errors import LLMUnavailable, describe

DOWN = "Ollama is not reachable at http://127.0.0.1:9: is it running? Start it with `ollama serve`."


def test_a_ray_task_error_is_described_by_its_cause() -> None:
    from ray.exceptions import RayTaskError

    raised = RayTaskError("Orchestrator.plan", "Traceback (most recent call last):\n  File \"x.py\", line 1\n"
                          "\x1b[36mray::Orchestrator.plan()\x1b[39m LLMUnavailable", LLMUnavailable(DOWN))
    assert "\x1b" in str(raised) and "line 1" in str(raised)  # what used to reach the page
    for exc in (raised, raised.as_instanceof_cause()):
        assert describe(exc) == DOWN
    assert describe(ValueError("\x1b[31mbad value\x1b[0m\n  at line 2")) == "ValueError: bad value"


def test_a_failed_plan_is_recorded_and_listed_as_failed(tmp_path) -> None:
    from actors.orchestrator import Orchestrator
    from actors.steps.events import RecordingEmit
    from actors.steps.run.rundir import RunDir
    from gateway.cli_runs import run_state
    from infra.llm.fakes import FunctionLLM
    from infra.settings import Settings
    from messages.plan import PlanRequest, ResearchQuery

    def server_gone(messages, schema):
        raise LLMUnavailable(DOWN)

    settings = Settings.load("quick").updated(run={"runs_dir": tmp_path / "runs"}, store={"path": tmp_path / "s"})
    orch = Orchestrator(settings, "run-x", llm=FunctionLLM(server_gone), emit=RecordingEmit("run-x"))
    query = ResearchQuery(run_id="run-x", text="How do zebrafish fins regrow?")
    try:
        asyncio.run(orch.plan(PlanRequest(run_id="run-x", query=query)))
    except LLMUnavailable:
        pass
    else:
        raise AssertionError("planning without a model server must fail")
    rundir = RunDir(tmp_path / "runs", "run-x")
    state = json.loads(rundir.run_json.read_text(encoding="utf-8"))
    assert state["status"] == "failed" and state["error"] == f"planning failed: {DOWN}"
    assert state["query"] == query.text
    shown, loaded = run_state(rundir)
    assert shown == "failed" and loaded is not None and not loaded.approved


def test_the_gateway_checks_the_model_server_before_any_work(tmp_path) -> None:
    from fastapi.testclient import TestClient

    from gateway.server import create_app
    from infra.settings import Settings
    from tests.gateway.live import BASE
    from tests.loopback_ollama import closed_loopback_url

    settings = Settings.load("quick").updated(
        run={"runs_dir": tmp_path / "runs"}, store={"path": tmp_path / "store"}, net={"offline": True},
        search={"library": tmp_path}, llm={"backend": "ollama", "host": closed_loopback_url()})
    with TestClient(create_app(settings), base_url=BASE) as http:
        r = http.post("/api/runs", json={"query": "How do zebrafish fins regrow?"})
        assert r.status_code == 503, r.text
        detail = r.json()["detail"]
        assert "not reachable" in detail and "ollama serve" in detail
        assert "\x1b" not in detail and "Traceback" not in detail and "\n" not in detail
        assert http.get("/api/runs").json() == []  # nothing was started
