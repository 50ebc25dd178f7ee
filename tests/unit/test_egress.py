"""The one HTTP layer: every request of every client kind is recorded; offline refuses before a socket."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from infra.net import Egress, EgressLedger, OfflineError
from infra.settings import NetSettings


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802
        if self.path.startswith("/redirect"):
            self.send_response(302)
            self.send_header("Location", "/final?x=1")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = b"hello"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def base_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def test_every_client_kind_is_recorded(base_url, tmp_path):
    ledger = EgressLedger(tmp_path / "egress.jsonl")
    egress = Egress(NetSettings(), ledger)
    with egress.client("openalex") as c:
        assert c.get(f"{base_url}/works", params={"search": "soil moisture"}).text == "hello"
    session = egress.requests_session("arxiv")
    assert session.get(f"{base_url}/api/query?search_query=all:soil").text == "hello"
    with egress.httpx2_client("zotero") as z:
        assert z.get(f"{base_url}/users/1/items").status_code == 200
    records = EgressLedger.read(tmp_path / "egress.jsonl")
    assert [(r.purpose, r.path, r.status, r.bytes_in) for r in records] == [
        ("openalex", "/works", 200, 5), ("arxiv", "/api/query", 200, 5), ("zotero", "/users/1/items", 200, 5)]
    assert records[0].query == "search=soil+moisture"
    assert records[0].host == "127.0.0.1" and records[0].url.startswith(base_url)
    assert len(ledger) == 3
    assert oct((tmp_path / "egress.jsonl").stat().st_mode & 0o777) == "0o600"


def test_async_client_records_each_redirect_hop(base_url):
    import asyncio

    egress = Egress(NetSettings())

    async def fetch() -> int:
        async with egress.async_client("download") as c:
            return (await c.get(f"{base_url}/redirect")).status_code

    assert asyncio.run(fetch()) == 200
    assert [(rec.path, rec.status) for rec in egress.ledger] == [("/redirect", 302), ("/final", 200)]


def test_offline_refuses_before_any_socket(base_url):
    egress = Egress(NetSettings(offline=True))
    with egress.client("openalex") as c, pytest.raises(OfflineError) as err:
        c.get(f"{base_url}/works")
    assert err.value.retryable is False
    with pytest.raises(OfflineError):
        egress.requests_session("arxiv").get(f"{base_url}/api/query")
    # the refusals are in the ledger, with no query string and no status
    assert [(r.purpose, r.status, r.error) for r in egress.ledger] == [
        ("openalex", None, "refused: offline"), ("arxiv", None, "refused: offline")]


def test_requests_session_has_a_default_timeout(tmp_path):
    import socket

    # a server that accepts and never answers: the arxiv client sets no timeout, ours must
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(1)
    egress = Egress(NetSettings(timeout_s=0.5))
    import requests

    with pytest.raises(requests.exceptions.ReadTimeout):
        egress.requests_session("arxiv").get(f"http://127.0.0.1:{sock.getsockname()[1]}/hang")
    sock.close()
    (rec,) = egress.ledger.records()
    assert rec.error and "Timeout" in rec.error and json.dumps(rec.query) == '""'


def test_httpx2_streamed_bodies_and_redirects_are_recorded(base_url):
    egress = Egress(NetSettings())
    with egress.httpx2_client("zotero") as z:
        assert z.get(f"{base_url}/redirect", follow_redirects=True).status_code == 200
        z.post(f"{base_url}/final", files={"file": ("a.pdf", b"%PDF-1.4 x")})
    assert [(r.path, r.method) for r in egress.ledger][:2] == [("/redirect", "GET"), ("/final", "GET")]
    assert egress.ledger.records()[2].method == "POST" and egress.ledger.records()[2].bytes_out > 0


def test_the_ledger_folder_is_created_user_only(tmp_path):
    """runs/<run_id>/egress.jsonl: the run folder (and a missing runs folder) 0700, the ledger 0600,
    whatever the umask (the Searcher creates the ledger before anything else of an online run)."""
    import os

    old = os.umask(0o022)
    try:
        ledger = EgressLedger(tmp_path / "runs" / "run-1" / "egress.jsonl")
        assert (tmp_path / "runs" / "run-1").is_dir()  # created with the ledger, before any request
        egress = Egress(NetSettings(offline=True), ledger)
        with pytest.raises(OfflineError), egress.client("openalex") as c:
            c.get("https://api.openalex.org/works")
    finally:
        os.umask(old)
    assert oct((tmp_path / "runs").stat().st_mode & 0o777) == "0o700"
    assert oct((tmp_path / "runs" / "run-1").stat().st_mode & 0o777) == "0o700"
    assert oct((tmp_path / "runs" / "run-1" / "egress.jsonl").stat().st_mode & 0o777) == "0o600"
