"""The gateway on loopback driving real runs (scripted brain, demo library, real Ray actors, store, Writer):
REST, the event WebSocket under 50 clients, reconnecting with ?after=, malformed frames, the typed client,
token auth, replay from events.jsonl by a gateway that does not hold the run."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import stat

import httpx
import pytest

from tests.gateway.live import EDITED_R1, N_CLIENTS, LiveServer, gateway_settings

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def seqs(events: list[dict]) -> list[int]:
    return [e["seq"] for e in events]


def test_proposal_lists_requirements_and_no_search_strings_offline(watched_run) -> None:
    p = watched_run.proposal
    assert [r["id"] for r in p.requirements] == ["R1", "R2"]  # max_requirements=2 of the brain's three
    assert p.search_queries == []  # offline: nothing would leave the machine


def test_every_client_gets_every_event_once_in_order(watched_run) -> None:
    disk = watched_run.disk_events
    assert disk[-1]["stage"] == "run" and disk[-1]["kind"] == "finished", disk[-1]
    assert seqs(disk) == list(range(1, len(disk) + 1))
    assert len(watched_run.listeners) == N_CLIENTS
    for frames in watched_run.listeners:
        assert frames == disk  # every event, exactly once, in order, same content as persisted
    assert all(end["status"] == "finished" and end["last_seq"] == len(disk) for end in watched_run.ends)


def test_reconnecting_client_ends_with_the_full_sequence(watched_run) -> None:
    first, second, after = watched_run.dropper_first, watched_run.dropper_second, watched_run.dropped_after
    assert seqs(first) == list(range(1, after + 1))
    assert second and second[0]["seq"] == after + 1
    assert first + second == watched_run.disk_events
    assert len(watched_run.disk_events) > after + 3  # it really dropped mid-run and missed events


def test_malformed_frames_get_error_frames_and_the_stream_goes_on(watched_run) -> None:
    frames = watched_run.chatty_frames
    errors = [f for f in frames if f["type"] == "error"]
    assert len(errors) == 5  # not JSON, binary, a list, an unknown type, empty
    assert any("binary" in e["error"] for e in errors)
    assert [f for f in frames if f["type"] == "pong"] == [{"type": "pong"}]
    assert [f["event"] for f in frames if f["type"] == "event"] == watched_run.disk_events
    assert frames[-1]["type"] == "end"


def test_run_state_report_and_artifacts(watched_run, gateway) -> None:
    from gateway.client import GatewayClient, GatewayError

    with GatewayClient(gateway.url) as gw:
        state = gw.state(watched_run.run_id)
        assert state.status == "finished" and not state.live
        assert [r["text"] for r in state.requirements] == [EDITED_R1]  # the edit was applied
        assert state.documents.ingested == 4 and state.documents.failed == 0
        assert state.report_ready and {"run.json", "evidence.jsonl", "report.md", "events.jsonl"} <= set(state.artifacts)
        assert state.last_seq == len(watched_run.disk_events)
        assert state.egress_requests == 0  # offline
        assert watched_run.run_id in [r.run_id for r in gw.runs()]
        report = gw.report(watched_run.run_id)
        assert report.startswith("# ")
        html = gw.report_html(watched_run.run_id)
        assert 'class="cite"' in html and "<script" not in html
        run_json = json.loads(gw.artifact(watched_run.run_id, "run.json"))
        assert run_json["status"] == "finished"
        for bad in ("../run.json", "cancel", "secret.txt"):
            with pytest.raises(GatewayError) as exc:
                gw.artifact(watched_run.run_id, bad)
            assert exc.value.status == 404
        with pytest.raises(GatewayError) as exc:
            gw.approve(watched_run.run_id)
        assert exc.value.status == 409
        with pytest.raises(GatewayError) as exc:
            gw.state("20990101-000000-0000000000000000")
        assert exc.value.status == 404


def test_report_figures_are_served(watched_run, gateway) -> None:
    import re

    import httpx

    rundir = gateway.app.state.manager.runs_dir / watched_run.run_id
    report = (rundir / "report.md").read_text(encoding="utf-8")
    names = sorted(set(re.findall(r"\(figures/([^)\s]+)\)", report)))
    assert any(n.endswith(".svg") for n in names) and any(n.endswith(".png") for n in names), names
    base = f"{gateway.url}/api/runs/{watched_run.run_id}/figures"
    for name in names:
        resp = httpx.get(f"{base}/{name}")
        assert resp.status_code == 200, name
        assert resp.headers["content-type"].startswith("image/svg+xml" if name.endswith(".svg") else "image/png")
        assert resp.content == (rundir / "figures" / name).read_bytes()
    for bad in ("..%2Frun.json", "run.json", "missing.svg", ".hidden.png"):
        assert httpx.get(f"{base}/{bad}").status_code == 404, bad


def test_cited_chunks_resolve(watched_run, gateway) -> None:
    from gateway.client import GatewayClient

    with GatewayClient(gateway.url) as gw:
        evidence = gw.evidence(watched_run.run_id)
        assert evidence
        for row in evidence:
            chunk = gw.chunk(watched_run.run_id, row["chunk_id"])
            assert chunk.doc_id == row["doc_id"]
            assert hashlib.sha256(chunk.text.encode()).hexdigest() == row["sha256"]
            assert row["quote"] in chunk.text


def test_typed_client_streams_and_resumes(watched_run, gateway) -> None:
    from gateway.client import GatewayClient

    disk = watched_run.disk_events
    with GatewayClient(gateway.url) as gw:
        events = list(gw.events(watched_run.run_id))
        assert [e.model_dump(mode="json") for e in events] == disk
        assert gw.last_end["status"] == "finished"
        tail = list(gw.events(watched_run.run_id, after=5))
        assert [e.seq for e in tail] == list(range(6, len(disk) + 1))


def test_bad_requests_are_refused_clearly(gateway) -> None:
    with httpx.Client(base_url=gateway.url, trust_env=False) as http:
        r = http.post("/api/runs", json={"query": "   "})
        assert r.status_code == 422 and "empty" in r.text
        r = http.post("/api/runs", json={"query": "x", "library": "/no/such/folder"})
        assert r.status_code == 403 and "forage library allow" in r.text  # not on the owner's allow-list
        r = http.post("/api/runs", json={"query": "x", "unknown": 1})
        assert r.status_code == 422
        r = http.get("/api/runs/..%2F..%2Fetc")
        assert r.status_code == 404
        # a page elsewhere cannot reach a loopback gateway through DNS rebinding
        r = http.get("/api/runs", headers={"Host": "evil.example:80"})
        assert r.status_code == 403
        spec = http.get("/openapi.json").json()
        assert {"/api/runs", "/api/runs/{run_id}", "/api/runs/{run_id}/approve", "/api/runs/{run_id}/cancel",
                "/api/runs/{run_id}/report", "/api/runs/{run_id}/chunks/{chunk_id}"} <= set(spec["paths"])
        assert "RunView" in spec["components"]["schemas"]


def test_cancel_before_approval(gateway) -> None:
    """A run created with a preset (deep) gets that preset's values, then is cancelled before approval."""
    from gateway.client import GatewayClient

    with GatewayClient(gateway.url) as gw:
        run_id = gw.create_run("Anticoagulation after trauma", preset="deep").run_id
        gw.wait_for_proposal(run_id)
        # the preset's values reach the run under the gateway's explicit ones (its max_iterations 1)
        s = gateway.app.state.manager.runs[run_id].settings
        assert (s.preset, s.forage.bm25_k, s.forage.max_deep_dives, s.run.min_coverage) == ("deep", 5, 4, 0.9)
        assert s.run.max_iterations == 1 and s.run.max_requirements == 2
        assert gw.cancel(run_id).status == "cancelled"
        events = list(gw.events(run_id))  # the stream ends instead of waiting for an approval
        assert events and events[-1].stage == "plan"
        assert gw.last_end["status"] == "cancelled"
        assert gw.state(run_id).status == "cancelled"


def test_cross_origin_websocket_is_refused(gateway, watched_run) -> None:
    import websockets

    async def go() -> int:
        url = gateway.url.replace("http", "ws") + f"/ws/runs/{watched_run.run_id}"
        async with websockets.connect(url, origin="http://evil.example", proxy=None) as ws:
            with pytest.raises(websockets.ConnectionClosed) as exc:
                await ws.recv()
            return exc.value.rcvd.code

    assert asyncio.run(go()) == 1008


# -- token ------------------------------------------------------------------------------------------------
def test_token_is_generated_once_user_only(tmp_path, monkeypatch) -> None:
    from gateway.api import load_or_create_token, token_path

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    path = token_path()
    assert path == tmp_path / "cfg" / "forage" / "gateway-token"
    token = load_or_create_token()
    assert len(token) >= 40
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700
    assert load_or_create_token() == token


@pytest.fixture(scope="module")
def token_gateway(gateway, tmp_path_factory):
    """A second gateway over the same runs folder, requiring a token — as after a restart: it holds no run."""
    from gateway.server import create_app

    settings = gateway.app.state.manager.settings
    server = LiveServer(create_app(settings, token="s3cret-token"))
    yield server
    server.stop()


def test_rest_needs_the_token(token_gateway) -> None:
    with httpx.Client(base_url=token_gateway.url, trust_env=False) as http:
        assert http.get("/api/runs").status_code == 401
        assert http.get("/api/runs", headers={"Authorization": "Bearer wrong"}).status_code == 401
        assert http.post("/api/runs", json={"query": "x"}).status_code == 401
        ok = http.get("/api/runs", headers={"Authorization": "Bearer s3cret-token"})
        assert ok.status_code == 200


def test_websocket_needs_the_token(token_gateway, watched_run) -> None:
    import websockets

    async def code(url: str, **kw) -> int:
        async with websockets.connect(url, proxy=None, **kw) as ws:
            with pytest.raises(websockets.ConnectionClosed) as exc:
                await ws.recv()
            return exc.value.rcvd.code

    base = token_gateway.url.replace("http", "ws") + f"/ws/runs/{watched_run.run_id}"
    assert asyncio.run(code(base)) == 1008
    assert asyncio.run(code(base + "?token=wrong")) == 1008
    assert asyncio.run(code(base, additional_headers={"Authorization": "Bearer nope"})) == 1008


def test_restarted_gateway_replays_from_events_jsonl(token_gateway, watched_run) -> None:
    from gateway.client import GatewayClient

    with GatewayClient(token_gateway.url, token="s3cret-token") as gw:
        events = list(gw.events(watched_run.run_id, after=2))
        assert [e.model_dump(mode="json") for e in events] == watched_run.disk_events[2:]
        assert gw.last_end["status"] == "finished"
        state = gw.state(watched_run.run_id)
        assert state.status == "finished" and not state.live and state.last_seq == len(watched_run.disk_events)
        assert gw.report(watched_run.run_id).startswith("# ")


def test_gateway_settings_are_small() -> None:
    s = gateway_settings(__import__("pathlib").Path("/tmp/x"))
    assert s.run.max_iterations == 1 and s.run.max_requirements == 2 and s.net.offline


# -- resume after a gateway restart ---------------------------------------------------------------------------
def test_a_run_interrupted_by_a_gateway_restart_resumes_in_the_next_gateway(gateway, watched_run, tmp_path) -> None:
    """A gateway stops while its run forages (its manager closes the run's session: Orchestrator and StatusHub
    are killed); the next gateway over the same runs folder lists the run as interrupted and resumable, and
    POST .../resume finishes it without ingesting again, its events going on after the first gateway's.
    (The store is the one the watched run filled, so ingestion only finds the documents already stored.)"""
    import re

    import psutil
    import websockets

    from gateway.client import GatewayClient, GatewayError
    from gateway.server import create_app
    from infra.llm.fakes import FunctionLLM
    from tests.e2e import brain as brain_module

    settings = gateway.app.state.manager.settings.updated(run={"runs_dir": tmp_path / "runs"})
    first = LiveServer(create_app(settings, llm=FunctionLLM(brain_module.brain)))
    try:
        with GatewayClient(first.url) as gw:
            run_id = gw.create_run("Anticoagulation after trauma").run_id
            gw.wait_for_proposal(run_id)
            gw.approve(run_id)
        assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{16}", run_id)

        async def until_foraging() -> int:
            url = first.url.replace("http", "ws") + f"/ws/runs/{run_id}"
            async with websockets.connect(url, proxy=None, max_size=None) as ws:
                async for raw in ws:
                    frame = json.loads(raw)
                    assert frame["type"] == "event", frame  # the run must not end before it is interrupted
                    if frame["event"]["stage"] == "forage":  # ingestion is over and checkpointed
                        return frame["event"]["seq"]
            raise AssertionError("the stream closed without an end frame")

        asyncio.run(asyncio.wait_for(until_foraging(), 600))
        first.app.state.manager.shutdown()  # what a gateway restart does to its runs
    finally:
        first.stop()
    rundir = tmp_path / "runs" / run_id
    owner = json.loads((rundir / "owner").read_text())  # the Orchestrator process that claimed the run
    try:
        psutil.Process(owner["pid"]).wait(timeout=120)  # killed by the shutdown: wait until it is gone
    except psutil.NoSuchProcess:
        pass
    disk = json.loads((rundir / "run.json").read_text())
    assert disk["status"] == "running" and disk["ingested"]["iteration"] == 1, disk.get("status")
    before = len((rundir / "events.jsonl").read_text().splitlines())

    second = LiveServer(create_app(settings, llm=FunctionLLM(brain_module.brain)))
    try:
        with GatewayClient(second.url) as gw, httpx.Client(base_url=second.url, trust_env=False, timeout=120) as http:
            state = gw.state(run_id)
            assert (state.status, state.resumable, state.live) == ("interrupted", True, False)
            assert [(r.status, r.resumable) for r in gw.runs() if r.run_id == run_id] == [("interrupted", True)]
            assert http.post(f"/api/runs/{run_id}/cancel").status_code == 409  # nothing runs it to cancel
            resumed = gw.resume(run_id)
            assert (resumed.status, resumed.live, resumed.resumable) == ("running", True, False)
            with pytest.raises(GatewayError) as again:
                gw.resume(run_id)
            assert again.value.status == 409 and "running" in again.value.detail
            events = list(gw.events(run_id, after=before))  # the same WebSocket, after what the first one had
            assert gw.last_end["status"] == "finished"
            state = gw.state(run_id)
    finally:
        second.stop()
    assert [e.seq for e in events] == list(range(before + 1, before + len(events) + 1))
    started = [e for e in events if e.stage == "run" and e.kind == "started"]
    assert len(started) == 1 and started[0].payload["resumed_after_iteration"] == 0
    assert not [e for e in events if e.stage == "ingest"]  # finished ingestion is not redone
    assert events[-1].stage == "run" and events[-1].kind == "finished"
    assert state.status == "finished" and not state.resumable and state.report_ready
    assert state.documents.ingested == 4
    resumes = json.loads((rundir / "run.json").read_text())["resumed"]
    assert resumes == [{"after_iteration": 0, "status_was": "running"}]
