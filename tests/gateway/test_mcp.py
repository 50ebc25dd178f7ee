"""`forage mcp`: the library and the runs for an MCP client, tested with the official SDK's own client.

* over **stdio**, as Claude Desktop or an IDE starts it: `forage mcp --offline` in a child process over a store
  holding the DVT paper (ingested by `forage library add`) and a runs folder with a finished run: the tools are
  listed; search finds the paper's passage; get_chunk returns its stored text and sha256; the report reads as a
  tool and as a resource; bad arguments, an unknown chunk and a path-like run id are MCP errors, and the server
  answers the next call;
* over **streamable HTTP** on loopback: the gateway's token is required (401 without it, tools with it);
* **the approval rule for agents**: propose_research returns the requirements and search strings and starts
  nothing (no document is read); only approve_research starts the run, which finishes with a report (in-process
  server, the session's Ray, the scripted test brain, the demo library the owner allowed).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gateway.live import DEMO_LIBRARY, QUERY, REPO, gateway_settings

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

FORAGE = Path(sys.executable).with_name("forage")
DVT = "dvt_prophylaxis_trauma_bmc2010.pdf"


@pytest.fixture(scope="module")
def library(tmp_path_factory, shared_data, ingest_cache):
    """(store, runs folder): the DVT paper stored by `forage library add`, a finished run beside it."""
    sys.path.insert(0, str(REPO / "tests" / "unit"))
    from tests.finished_run import make_run
    from typer.testing import CliRunner

    from gateway.cli import app

    root = tmp_path_factory.mktemp("mcp")
    store = root / "store"
    added = CliRunner().invoke(app, ["library", "add", str(shared_data / "pdfs" / DVT), "--store", str(store)],
                               env={"FORAGE_INGEST__CACHE_DIR": str(ingest_cache), "FORAGE_NET__OFFLINE": "true"})
    assert added.exit_code == 0, added.output
    _, run_dir = make_run(root / "finished")
    return store, run_dir


def mcp_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("FORAGE_")} | {"PYTHONPATH": str(REPO)}


def text_of(result) -> str:  # noqa: ANN001 - a CallToolResult
    return " ".join(c.text for c in result.content if getattr(c, "text", None))


def test_over_stdio_an_assistant_searches_reads_and_checks_a_citation(library) -> None:
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    if not FORAGE.exists():
        pytest.skip(f"the forage command is not installed next to {sys.executable}: run infra/install.sh")
    store, run_dir = library
    params = StdioServerParameters(command=str(FORAGE), args=["mcp", "--offline", "--store", str(store),
                                                              "--runs-dir", str(run_dir.parent)], env=mcp_env())

    async def session() -> None:
        async with Client(params, read_timeout_seconds=300) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert names == {"search_library", "get_chunk", "ask", "list_runs", "run_status", "read_report",
                             "propose_research", "approve_research"}

            found = await client.call_tool("search_library", {"query": "bleeding complications of heparin", "k": 3})
            assert not found.is_error, text_of(found)
            hits = found.structured_content["result"]
            assert hits and all(h["title"].startswith("Complications related to deep venous thrombosis")
                                for h in hits)
            chunk = await client.call_tool("get_chunk", {"chunk_id": hits[0]["chunk_id"]})
            assert not chunk.is_error and chunk.structured_content["text"] == hits[0]["text"]
            assert chunk.structured_content["sha256"] == hashlib.sha256(hits[0]["text"].encode()).hexdigest()

            runs = (await client.call_tool("list_runs", {})).structured_content["result"]
            assert [(r["run_id"], r["status"]) for r in runs] == [(run_dir.name, "finished")]
            report = await client.call_tool("read_report", {"run_id": run_dir.name})
            assert not report.is_error
            assert report.structured_content["report"] == (run_dir / "report.md").read_text(encoding="utf-8")
            evidence = report.structured_content["evidence"]
            assert evidence and evidence[0]["chunk_id"]
            cited = await client.call_tool("get_chunk", {"chunk_id": evidence[0]["chunk_id"], "run_id": run_dir.name})
            assert not cited.is_error and evidence[0]["quote"][:30] in cited.structured_content["text"]
            resource = await client.read_resource(f"forage://runs/{run_dir.name}/report")
            assert resource.contents[0].text == (run_dir / "report.md").read_text(encoding="utf-8")

            # bad input: one clear MCP error each, and the server goes on
            bad = await client.call_tool("search_library", {"query": "", "k": 300})
            assert bad.is_error and "query" in text_of(bad) and "k" in text_of(bad)
            missing = await client.call_tool("get_chunk", {"chunk_id": "nope:0"})
            assert missing.is_error and "no chunk 'nope:0' in the store" in text_of(missing)
            hostile = await client.call_tool("read_report", {"run_id": "../../etc"})
            assert hostile.is_error and "no run '../../etc'" in text_of(hostile)
            online = await client.call_tool("propose_research", {"query": "q?", "offline": False})
            assert online.is_error and "offline" in text_of(online)
            assert not (await client.call_tool("list_runs", {})).is_error

    asyncio.run(session())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_over_http_the_token_is_required(library, tmp_path) -> None:
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from gateway.api import load_or_create_token

    if not FORAGE.exists():
        pytest.skip(f"the forage command is not installed next to {sys.executable}: run infra/install.sh")
    store, run_dir = library
    token = load_or_create_token()  # this session's config folder (tests/conftest.py), inherited by the child
    port = _free_port()
    proc = subprocess.Popen([str(FORAGE), "mcp", "--http", "--port", str(port), "--store", str(store),
                             "--runs-dir", str(run_dir.parent)], env=mcp_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        first = proc.stdout.readline()  # said once its socket listens (connections queue until it accepts)
        assert "streamable HTTP" in first, first + proc.stdout.read() if proc.poll() is not None else first
        refused = httpx2.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=60)
        assert refused.status_code == 401 and "token" in refused.text
        wrong = httpx2.post(url, headers={"Authorization": "Bearer nope"}, json={}, timeout=10)
        assert wrong.status_code == 401

        async def session() -> None:
            async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
                async with Client(streamable_http_client(url, http_client=http)) as client:
                    names = {t.name for t in (await client.list_tools()).tools}
                    assert "search_library" in names
                    runs = await client.call_tool("list_runs", {})
                    assert runs.structured_content["result"][0]["run_id"] == run_dir.name

        asyncio.run(session())
    finally:
        proc.terminate()
        proc.wait(30)


def test_an_agent_proposes_and_only_its_approval_starts_the_run(ray_cluster, ingest_cache, tmp_path) -> None:
    from mcp import Client

    from gateway.mcp_server import build_mcp
    from infra.llm.fakes import FunctionLLM
    from tests.e2e import brain as brain_module

    ray_cluster.cloudpickle.register_pickle_by_value(brain_module)
    settings = gateway_settings(tmp_path, ingest_cache)
    server = build_mcp(settings, llm=FunctionLLM(brain_module.brain), allowed_libraries=[DEMO_LIBRARY])
    manager = server.forage_manager

    async def session() -> None:
        async with Client(server) as client:
            refused = await client.call_tool("propose_research", {"query": QUERY, "library": "/etc"})
            assert refused.is_error and "not in a folder the gateway's owner allowed" in text_of(refused)

            proposed = await client.call_tool("propose_research", {"query": QUERY, "library": str(DEMO_LIBRARY)})
            assert not proposed.is_error, text_of(proposed)
            plan = proposed.structured_content
            run_id = plan["run_id"]
            assert plan["status"] == "awaiting_approval" and len(plan["requirements"]) == 2 and plan["offline"]
            state = (await client.call_tool("run_status", {"run_id": run_id})).structured_content
            assert state["status"] == "awaiting_approval" and state["documents"]["found"] == 0  # nothing read yet

            edited = [plan["requirements"][0]["text"], plan["requirements"][1]["text"]]
            started = await client.call_tool("approve_research", {"run_id": run_id, "requirements": edited})
            assert not started.is_error and started.structured_content["status"] == "running", text_of(started)
            again = await client.call_tool("approve_research", {"run_id": run_id})
            assert again.is_error and "not awaiting approval" in text_of(again)

            run = manager.runs[run_id]
            assert await asyncio.to_thread(run.stop.wait, 600)  # the run finished (or failed) and said so
            state = (await client.call_tool("run_status", {"run_id": run_id})).structured_content
            assert state["status"] == "finished", state
            report = await client.call_tool("read_report", {"run_id": run_id})
            assert not report.is_error and "## Sources Consulted" in report.structured_content["report"]

    asyncio.run(session())
    (run_json,) = (tmp_path / "runs").glob("*/run.json")
    assert json.loads(run_json.read_text())["status"] == "finished"


def test_ask_with_a_run_id_answers_from_that_run_through_the_sdk_client(tmp_path) -> None:
    """The ``ask`` tool with ``run_id``: an answer from the run's documents, cited, recorded in its asks.jsonl;
    a path-like run id and an unknown run are MCP errors."""
    from mcp import Client

    from gateway.mcp_server import build_mcp
    from infra.llm.fakes import FunctionLLM
    from tests.finished_run import RUN, calvin_answer as model, make_run

    settings, run_dir = make_run(tmp_path)
    server = build_mcp(settings, llm=FunctionLLM(model))

    async def session() -> dict:
        async with Client(server) as client:
            asked = await client.call_tool("ask", {"question": "How is carbon dioxide fixed into sugars?",
                                                   "run_id": RUN})
            assert not asked.is_error, text_of(asked)
            answer = asked.structured_content
            assert answer["kind"] == "answer" and answer["text"].endswith("[1].")
            assert answer["cited"][0]["title"] == "The Calvin Cycle"
            hostile = await client.call_tool("ask", {"question": "How is carbon fixed?", "run_id": "../../etc"})
            assert hostile.is_error and "no run '../../etc'" in text_of(hostile)
            unknown = await client.call_tool("ask", {"question": "How is carbon fixed?", "run_id": "nosuchrun"})
            assert unknown.is_error and "no run 'nosuchrun'" in text_of(unknown)
            return answer

    answer = asyncio.run(session())
    [record] = [json.loads(line) for line in (run_dir / "asks.jsonl").read_text().splitlines()]
    assert record["question"] == "How is carbon dioxide fixed into sugars?"
    assert (record["kind"], record["text"], record["cited"]) == (answer["kind"], answer["text"], answer["cited"])

