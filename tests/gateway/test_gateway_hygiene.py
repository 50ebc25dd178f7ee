"""Gateway hygiene over real HTTP semantics (the app under Starlette's TestClient, no Ray): cross-site state
changes refused, security headers on every response, SVGs sandboxed, bodies over the limit refused before they
are read, validation errors that do not echo input, any token text compared without a 500, ids matched whole,
and the report's download links usable in token mode."""

from __future__ import annotations

import json

import pytest

from tests.gateway.live import BASE, app_for

RUN_ID = "20260101-000000-00000000000000aa"


@pytest.fixture()
def client(tmp_path):
    from fastapi.testclient import TestClient

    with TestClient(app_for(tmp_path), base_url=BASE) as c:
        yield c


@pytest.fixture()
def token_client(tmp_path):
    from fastapi.testclient import TestClient

    with TestClient(app_for(tmp_path, token="s3cret-token"), base_url=BASE) as c:
        yield c


def finished_run(client) -> str:
    from actors.steps.run.rundir import RunDir

    rundir = RunDir(client.app.state.manager.runs_dir, RUN_ID)
    rundir.save_state({"run_id": RUN_ID, "status": "finished", "query": "q", "requirements": []})
    (rundir.path / "report.md").write_text("# R\n", encoding="utf-8")
    (rundir.path / "figures").mkdir(exist_ok=True)
    (rundir.path / "figures" / "coverage.svg").write_text("<svg xmlns='http://www.w3.org/2000/svg'><script>"
                                                          "alert(1)</script></svg>", encoding="utf-8")
    return RUN_ID


def test_a_web_page_elsewhere_cannot_change_a_run(client) -> None:
    run_id = finished_run(client)
    for path in (f"/api/runs/{run_id}/cancel", f"/api/runs/{run_id}/approve", f"/api/runs/{run_id}/resume"):
        r = client.post(path, headers={"Origin": "http://evil.example", "Content-Type":
                                       "application/x-www-form-urlencoded"}, content=b"a=1")
        assert r.status_code == 403 and "cross-origin" in r.json()["detail"]
    r = client.post("/api/runs", headers={"Origin": "http://evil.example"}, json={"query": "x"})
    assert r.status_code == 403
    # the dashboard itself (same origin) and non-browser clients (no Origin) get through to the route
    same = client.post(f"/api/runs/{run_id}/resume", headers={"Origin": BASE})
    assert same.status_code == 409 and "finished" in same.json()["detail"]
    assert client.post(f"/api/runs/{run_id}/resume").status_code == 409


def test_every_response_carries_the_security_headers(client) -> None:
    for path in ("/", "/api/runs", "/static/app.js", "/api/runs/nope"):
        r = client.get(path)
        csp = r.headers["content-security-policy"]
        assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp, path
        assert "img-src 'self' data: blob:" in csp  # no remote image in a report can carry data out
        assert "connect-src 'self' ws://127.0.0.1:8765" in csp
        assert r.headers["x-content-type-options"] == "nosniff" and r.headers["x-frame-options"] == "DENY"
    run_id = finished_run(client)
    svg = client.get(f"/api/runs/{run_id}/figures/coverage.svg")
    assert svg.status_code == 200 and svg.headers["content-security-policy"] == "sandbox"


def test_big_bodies_are_refused_before_reading_and_errors_do_not_echo_input(client) -> None:
    big = {"query": "x" * 2_000_000}
    r = client.post("/api/runs", content=json.dumps(big).encode(), headers={"Content-Type": "application/json"})
    assert r.status_code == 413 and len(r.content) < 200
    secret = "my unpublished idea about zebrafish " * 200  # over the 4000-character limit
    r = client.post("/api/runs", json={"query": secret})
    assert r.status_code == 422 and "zebrafish" not in r.text
    assert r.json()["detail"][0]["loc"] == ["body", "query"]
    r = client.post("/api/runs", json={"query": "fine", "unknown": "my secret field value"})
    assert r.status_code == 422 and "secret field value" not in r.text
    r = client.post("/api/runs", json={"query": "   "})  # one plain sentence, no pydantic prefix
    assert r.status_code == 422 and r.json()["detail"].startswith("the research query is empty")


def test_any_token_text_is_refused_with_401_and_ids_match_whole(token_client) -> None:
    assert token_client.get("/api/runs", headers={"Authorization": "Bearer wrong"}).status_code == 401
    # non-ASCII text (a header arrives as latin-1, a query as UTF-8) is compared as bytes: 401, never a 500
    latin = token_client.get("/api/runs", headers={"Authorization": "Bearer tökén".encode("latin-1")})
    assert latin.status_code == 401
    assert token_client.get("/docs", params={"token": "tökén-ünïcode"}).status_code == 401
    ok = {"Authorization": "Bearer s3cret-token"}
    assert token_client.get("/api/runs", headers=ok).status_code == 200
    assert token_client.get(f"/api/runs/{RUN_ID}%0A", headers=ok).status_code == 404  # a trailing newline
    assert token_client.get(f"/api/runs/{RUN_ID}/figures/a.svg%0A", headers=ok).status_code == 404


def test_download_links_work_with_the_token_in_the_query(token_client) -> None:
    run_id = finished_run(token_client)
    url = f"/api/runs/{run_id}/artifacts/report.md"
    assert token_client.get(url).status_code == 401
    assert token_client.get(url, params={"token": "s3cret-token"}).text == "# R\n"
    js = token_client.get("/static/app.js").text
    assert "artifacts/${name}` + (token() ? `?token=" in js


def test_a_50_mb_body_is_refused_before_it_is_sent(tmp_path) -> None:
    """Over a real socket to uvicorn: the headers announce 50 MB, one byte follows, and the 413 comes back at
    once (the gateway never waits for, or reads, the body)."""
    import socket

    from tests.gateway.live import LiveServer

    server = LiveServer(app_for(tmp_path))
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
            sock.sendall(f"POST /api/runs HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nContent-Type: application/json"
                         f"\r\nContent-Length: {50 * 1024 * 1024}\r\n\r\n{{".encode())
            head = sock.recv(4096).decode("latin-1")
        assert head.startswith("HTTP/1.1 413"), head[:200]
    finally:
        server.stop()
