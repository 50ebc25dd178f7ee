"""Schemathesis against the gateway's own OpenAPI schema: no request, valid or not, gets a 5xx.

A live gateway on loopback (uvicorn in a thread, as in conftest) with its runs folder holding one finished
run written as the Orchestrator leaves it (run.json, report.md, evidence.jsonl, events.jsonl); every
operation is called with cases Schemathesis generates from the schema, positive (fitting the schema) and
negative (not fitting it), for random run ids and for the finished run's id. A request that passes
validation really creates a run (the scripted brain plans it on the shared Ray cluster); nothing can leave
the machine: offline by default, the sources and the model point at closed loopback ports.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.ray

RUN = "20260102-030405-0123456789abcdef"
EXAMPLES = 12  # per operation, mode and run id kind: the whole test stays well under a minute


def finished_run(runs: Path, store: Path) -> None:
    from actors.steps.run.rundir import RunDir

    rundir = RunDir(runs, RUN)
    rundir.save_state({"run_id": RUN, "status": "finished", "query": "How do zebrafish fins regrow?",
                       "requirements": [{"id": "R1", "text": "Speed of fin regrowth in zebrafish"}],
                       "iterations": [{"iteration": 1, "mean_coverage": 1.0, "coverage": {"R1": 1.0}}],
                       "coverage": {"R1": 1.0}, "final_coverage": 1.0, "stop_reason": "coverage 1.00 reached",
                       "documents": {"file:/lib/a.pdf": {"key": "file:/lib/a.pdf", "status": "stored",
                                                         "doc_id": "d" * 64}},
                       "store_path": str(store)})
    (rundir.path / "report.md").write_text("# Fins — Report\n\n## R1\n\nFins regrow in two weeks [1].\n")
    (rundir.path / "evidence.jsonl").write_text(json.dumps({"n": 1, "chunk_id": "c1", "doc_id": "d" * 64,
                                                            "quote": "two weeks"}) + "\n")
    (rundir.path / "events.jsonl").write_text(json.dumps({
        "run_id": RUN, "seq": 1, "stage": "run", "kind": "finished", "message": "done",
        "created_at": "2026-01-02T03:04:05Z", "payload": {}}) + "\n")


@pytest.fixture(scope="module")
def fuzz_gateway(ray_cluster, tmp_path_factory):
    from gateway.server import create_app
    from infra.llm.fakes import FunctionLLM
    from infra.settings import Settings
    from tests.e2e import brain as brain_module
    from tests.gateway.live import LiveServer
    from tests.loopback_ollama import closed_loopback_url

    ray_cluster.cloudpickle.register_pickle_by_value(brain_module)
    tmp = tmp_path_factory.mktemp("fuzz")
    finished_run(tmp / "runs", tmp / "store")
    closed = closed_loopback_url()
    settings = Settings.load("quick").updated(
        run={"runs_dir": tmp / "runs", "max_iterations": 1, "max_requirements": 2},
        store={"path": tmp / "store"}, net={"offline": True},
        search={"openalex_url": closed, "arxiv_url": closed, "arxiv_pdf_url": closed + "/pdf/",
                "papers_dir": tmp / "papers"},
        llm={"backend": "ollama", "host": closed})
    server = LiveServer(create_app(settings, llm=FunctionLLM(brain_module.brain)))
    yield server
    server.stop()


def test_no_generated_request_gets_a_server_error(fuzz_gateway) -> None:
    import schemathesis
    from hypothesis import HealthCheck, given, settings
    from hypothesis.errors import Unsatisfiable
    from schemathesis.generation.modes import GenerationMode

    schema = schemathesis.openapi.from_dict(fuzz_gateway.app.openapi())
    errors: list[str] = []
    statuses: dict[str, set[int]] = {}
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 10, [op.label for op in operations]
    for op in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            strategies = [op.as_strategy(mode)]
            if "{run_id}" in op.path:  # the finished run, and one of its files where a file is named
                fixed = {"run_id": RUN, **({"name": "report.md"} if "{name}" in op.path else {})}
                strategies.append(op.as_strategy(mode, path_parameters=fixed))
            for strategy in strategies:
                @given(case=strategy)
                @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                          suppress_health_check=list(HealthCheck))
                def call(case) -> None:
                    response = case.call(base_url=fuzz_gateway.url, timeout=120)
                    statuses.setdefault(op.label, set()).add(response.status_code)
                    if response.status_code >= 500:
                        errors.append(f"{op.label} ({mode.value}) -> {response.status_code}: "
                                      f"{case.as_curl_command()}\n{response.text[:300]}")

                try:
                    call()
                except Unsatisfiable:
                    # no request breaks this schema (no body or query; any string is a valid path segment)
                    assert mode == GenerationMode.NEGATIVE, op.label
    assert not errors, "\n\n".join(errors[:10])
    assert set(statuses) == {op.label for op in operations}  # every operation was called
    ok = {label for label, codes in statuses.items() if any(200 <= c < 300 for c in codes)}
    # the finished run's files were served, and valid requests got through to the handlers
    assert {"GET /api/runs", "GET /api/runs/{run_id}", "GET /api/runs/{run_id}/report",
            "GET /api/runs/{run_id}/report.html", "GET /api/runs/{run_id}/evidence",
            "GET /api/runs/{run_id}/artifacts/{name}"} <= ok, statuses


def test_a_library_path_with_a_nul_byte_is_refused(fuzz_gateway) -> None:
    """A library string no path can hold (a NUL byte) is a 422, not a 500 (it was a 500: ValueError)."""
    import httpx

    with httpx.Client(base_url=fuzz_gateway.url, trust_env=False, timeout=60) as client:
        response = client.post("/api/runs", json={"query": "fins", "library": "lib\u0000rary"})
    assert response.status_code == 422, response.text
    assert "library" in response.json()["detail"]
