"""A gateway on a shared machine (no Ray): a token on every bind, read by the owner's client from its 0600 file;
another OS user without it gets 401 and can read neither it nor a store; the API's ``library`` only inside folders the owner
allowed (resolved: no ``..`` or symlink escape, no existence oracle outside), and such a run reads no file
whose real path lies outside its folder."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from tests.gateway.live import BASE


@pytest.fixture()
def config_home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "cfg"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    return home


def app_allowing(tmp: Path, allowed: list[Path] | None, token: str | None = None):
    from gateway.server import create_app
    from infra.settings import Settings

    settings = Settings.load("quick").updated(run={"runs_dir": tmp / "runs"}, store={"path": tmp / "store"},
                                              net={"offline": True})
    return create_app(settings, token=token, allowed_libraries=allowed)


# -- the token -------------------------------------------------------------------------------------------------
def test_every_bind_gets_the_token_and_no_token_is_loopback_only(config_home) -> None:
    from gateway.api import gateway_token, read_token, token_path

    assert read_token() is None  # nothing made yet: the client then sends none
    token = gateway_token("127.0.0.1")
    assert token and read_token() == token and stat.S_IMODE(token_path().stat().st_mode) == 0o600
    assert gateway_token("0.0.0.0") == token  # the same per-install token on every bind
    assert gateway_token("::1", no_token=True) is None
    with pytest.raises(ValueError, match="only for a loopback address"):
        gateway_token("10.0.0.1", no_token=True)


def test_the_client_reads_the_owners_token_file(config_home, tmp_path) -> None:
    from fastapi.testclient import TestClient

    from gateway.api import load_or_create_token
    from gateway.client import GatewayClient

    token = load_or_create_token()
    with GatewayClient(BASE) as gw:
        assert gw.token == token and gw.http.headers["Authorization"] == f"Bearer {token}"
    with GatewayClient(BASE, token="other") as gw:
        assert gw.token == "other"
    # the header it sends is the one the gateway asks for
    with TestClient(app_allowing(tmp_path, [], token=token), base_url=BASE) as http:
        assert http.get("/api/runs").status_code == 401
        assert http.get("/api/runs", headers={"Authorization": f"Bearer {token}"}).status_code == 200


def test_serve_refuses_no_token_off_loopback(config_home) -> None:
    from typer.testing import CliRunner

    from gateway.cli import app

    result = CliRunner().invoke(app, ["serve", "--host", "10.0.0.1", "--no-token"])
    assert result.exit_code == 2 and "only for a loopback address" in result.output


@pytest.mark.skipif(os.geteuid() != 0, reason="acting as a second OS user needs root (setuid to nobody)")
def test_another_os_user_can_neither_use_the_gateway_nor_read_its_token(tmp_path, monkeypatch) -> None:
    from gateway.api import load_or_create_token, token_path
    from tests.gateway.live import LiveServer

    shared = Path("/tmp") / f"forage-shared-{os.getpid()}"  # a home every user can walk into, as on a lab machine
    shared.mkdir(mode=0o755, exist_ok=True)
    try:
        os.chmod(shared, 0o755)
        monkeypatch.setenv("XDG_CONFIG_HOME", str(shared / "cfg"))
        os.makedirs(shared / "cfg", mode=0o755, exist_ok=True)
        os.chmod(shared / "cfg", 0o755)
        token = load_or_create_token()
        os.chmod(token_path().parent, 0o755)  # even with the folder open, the file itself is the owner's
        from infra.store.lancedb import LanceStore

        LanceStore(shared / "store", dim=4)  # a store in a folder every user can walk into (made 0700)
        server = LiveServer(app_allowing(tmp_path, [], token=token))
        probe = (
            "import json, os, sys, urllib.request, urllib.error\n"
            "out = {}\n"
            "try:\n"
            f"    open({str(token_path())!r}).read(); out['token_read'] = True\n"
            "except PermissionError:\n"
            "    out['token_read'] = False\n"
            "try:\n"
            f"    os.listdir({str(shared / 'store')!r}); out['store_read'] = True\n"
            "except PermissionError:\n"
            "    out['store_read'] = False\n"
            "try:\n"
            f"    urllib.request.urlopen({server.url + '/api/runs'!r}, timeout=30); out['status'] = 200\n"
            "except urllib.error.HTTPError as e:\n"
            "    out['status'] = e.code\n"
            "print(json.dumps(out))\n")
        python = "/usr/bin/python3"  # the system's: a user-installed interpreter may sit in root's home
        if not os.access(python, os.X_OK):
            server.stop()
            pytest.skip(f"no system interpreter at {python} for the second user to run")

        def as_nobody() -> None:
            os.setgid(65534)
            os.setuid(65534)

        try:
            done = subprocess.run([python, "-I", "-c", probe], capture_output=True, text=True, timeout=60,
                                  preexec_fn=as_nobody, cwd="/", env={"PATH": "/usr/bin:/bin", "no_proxy": "*"})
        finally:
            server.stop()
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout) == {"token_read": False, "store_read": False, "status": 401}
    finally:
        shutil.rmtree(shared, ignore_errors=True)


# -- the library allow-list -------------------------------------------------------------------------------------
def test_allow_list_is_kept_resolved_and_user_only(config_home, tmp_path) -> None:
    from gateway.allowed import allow, allow_list_path, allowed_libraries, disallow

    papers = tmp_path / "papers"
    papers.mkdir()
    assert allowed_libraries() == []
    assert allow(tmp_path / "papers" / ".." / "papers") == papers.resolve()
    allow(papers)  # once only
    assert allowed_libraries() == [papers.resolve()]
    assert stat.S_IMODE(allow_list_path().stat().st_mode) == 0o600
    with pytest.raises(ValueError, match="not a folder"):
        allow(tmp_path / "nope")
    assert disallow(papers) and not disallow(papers)
    assert allowed_libraries() == []


def test_library_commands(config_home, tmp_path) -> None:
    from typer.testing import CliRunner

    from gateway.cli import app

    def invoke(*args: str) -> tuple[int, str]:
        result = CliRunner().invoke(app, ["library", *args])
        return result.exit_code, " ".join(result.output.split())  # as read, whatever the terminal's width

    papers = tmp_path / "papers"
    papers.mkdir()
    assert "no folder allowed" in invoke("allowed")[1]
    code, out = invoke("allow", str(papers))
    assert code == 0 and "allowed" in out and str(papers.resolve()) in out.replace(" ", "")
    assert str(papers.resolve()) in invoke("allowed")[1].replace(" ", "")
    assert invoke("disallow", str(papers))[0] == 0
    code, out = invoke("disallow", str(papers))
    assert code == 2 and "not on the allow-list" in out


def test_api_library_only_inside_allowed_folders(tmp_path) -> None:
    from fastapi.testclient import TestClient

    from gateway.api import RunCreate

    allowed = tmp_path / "allowed"
    (allowed / "sub").mkdir(parents=True)
    secret = tmp_path / "secret"
    secret.mkdir(mode=0o700)
    (allowed / "escape").symlink_to(secret, target_is_directory=True)
    app = app_allowing(tmp_path, [allowed])
    with TestClient(app, base_url=BASE) as http:
        for named in (secret, allowed / ".." / "secret", allowed / "escape", tmp_path / "missing", "/etc"):
            r = http.post("/api/runs", json={"query": "q", "library": str(named)})
            assert r.status_code == 403, (named, r.text)
            assert "forage library allow" in r.json()["detail"]
        # inside the list, a missing folder is said to be missing
        r = http.post("/api/runs", json={"query": "q", "library": str(allowed / "gone")})
        assert r.status_code == 422 and "not a folder" in r.json()["detail"]
    manager = app.state.manager
    settings = manager.settings_for(RunCreate(query="q", library=str(allowed / "sub")))
    assert settings.search.library == (allowed / "sub").resolve() and settings.search.library_confined
    # nothing allowed: the API accepts no library folder at all
    with TestClient(app_allowing(tmp_path, []), base_url=BASE) as http:
        assert http.post("/api/runs", json={"query": "q", "library": str(allowed)}).status_code == 403


def test_a_confined_library_reads_no_file_outside_its_folder(tmp_path, shared_pdfs) -> None:
    from actors.steps.search.library import LibrarySearch
    from messages.plan import Requirement
    from messages.search import SearchRequest

    library = tmp_path / "library"
    library.mkdir()
    outside = tmp_path / "private"
    outside.mkdir()
    pdfs = shared_pdfs[0].parent
    shutil.copy(pdfs / "dvt_prophylaxis_trauma_bmc2010.pdf", library / "dvt.pdf")
    shutil.copy(pdfs / "reverb_openie_emnlp2011.pdf", outside / "reverb.pdf")
    (library / "linked.pdf").symlink_to(outside / "reverb.pdf")
    request = SearchRequest(run_id="r", iteration=1, query="q", max_results=8,
                            requirements=(Requirement(id="R1", text="thromboprophylaxis after trauma"),))

    confined = LibrarySearch(library, confined=True).search(request)
    assert [Path(c.path).name for c in confined.candidates] == ["dvt.pdf"]
    assert [s.item for s in confined.skipped] == [str(library / "linked.pdf")]
    assert "outside the library folder" in confined.skipped[0].reason
    owner = LibrarySearch(library).search(request)  # the owner's CLI run reads what the owner links
    assert sorted(Path(c.path).name for c in owner.candidates) == ["dvt.pdf", "reverb.pdf"]
