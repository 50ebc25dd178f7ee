"""The gateway without Ray: the API docs page is served offline under the token rule, resume rebuilds a run's
plan from run.json as `forage resume` does, and run ids are unguessable. (No run is started: no Ray here.)"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.gateway.live import BASE, app_for


@pytest.fixture()
def client(tmp_path):
    from fastapi.testclient import TestClient

    with TestClient(app_for(tmp_path), base_url=BASE) as c:
        yield c


def test_api_docs_page_loads_nothing_from_elsewhere(client) -> None:
    resp = client.get("/docs")
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/html")
    html = resp.text
    # no URL of another host anywhere in the page, and the browser is told to load from this gateway only
    assert not [u for u in re.findall(r"(?:https?:)?//[^\s\"'<>)]+", html)
                if urlsplit(u).hostname not in (None, "127.0.0.1", "localhost")]
    assert "default-src 'self'" in resp.headers["content-security-policy"]
    refs = re.findall(r'(?:src|href)="([^"]+)"', html)
    scripts = re.findall(r'<script src="([^"]+)"', html)
    assert "/static/docs.js" in scripts and len(scripts) == 2  # the UI bundle, then the page's own script
    for ref in refs:  # every asset it references is served by the gateway itself, from this package
        assert ref.startswith("/"), ref
        asset = client.get(ref)
        assert asset.status_code == 200, ref
        assert len(asset.content) > 500, ref
    bundle = client.get(scripts[0]).text
    assert "SwaggerUIBundle" in bundle
    # the page's script fetches the schema from this gateway only
    js = client.get("/static/docs.js").text
    assert '"/openapi.json"' in js and not re.findall(r"https?://", js)
    spec = client.get("/openapi.json").json()
    assert "/api/runs/{run_id}/resume" in spec["paths"]
    # FastAPI's CDN ReDoc page is gone: /redoc leads to /docs
    redoc = client.get("/redoc", follow_redirects=False)
    assert redoc.status_code == 307 and redoc.headers["location"] == "/docs"


def test_api_docs_obey_the_loopback_host_rule(client) -> None:
    for path in ("/docs", "/redoc", "/openapi.json"):
        assert client.get(path, headers={"Host": "evil.example"}).status_code == 403, path


def test_api_docs_need_the_token_off_loopback(tmp_path) -> None:
    from fastapi.testclient import TestClient

    with TestClient(app_for(tmp_path, token="s3cret"), base_url="http://10.0.0.1:8765") as c:
        for path in ("/docs", "/redoc", "/openapi.json"):
            assert c.get(path).status_code == 401, path
            assert c.get(path, headers={"Authorization": "Bearer wrong"}).status_code == 401, path
            assert c.get(path + "?token=wrong").status_code == 401, path
            ok = c.get(path, headers={"Authorization": "Bearer s3cret"}, follow_redirects=False)
            assert ok.status_code in (200, 307), path
        # a browser opens the pages without headers: ?token= there; the schema itself needs the header
        assert c.get("/docs?token=s3cret").status_code == 200
        redoc = c.get("/redoc?token=s3cret", follow_redirects=False)
        assert redoc.status_code == 307 and redoc.headers["location"] == "/docs?token=s3cret"
        assert c.get("/openapi.json?token=s3cret").status_code == 401


def test_run_states_resume_and_cancel_without_the_run(client, tmp_path) -> None:
    """What the gateway shows and allows for runs it does not hold, by run.json and the run's owner process."""
    import subprocess
    import sys

    from actors.steps.run.rundir import RunDir

    runs = tmp_path / "runs"
    req = [{"id": "R1", "text": "Something to find"}]
    ids = {name: f"20260101-000000-00000000000000{n:02x}" for n, name in enumerate(
        ("finished", "proposed", "dead", "alive", "unclaimed", "cancelled"), start=0xa0)}
    for name, state in (("finished", {"status": "finished", "requirements": req}),
                        ("proposed", {"status": "awaiting_approval", "proposed_requirements": req}),
                        ("dead", {"status": "running", "requirements": req}),
                        ("alive", {"status": "running", "requirements": req}),
                        ("unclaimed", {"status": "running", "requirements": req}),
                        ("cancelled", {"status": "cancelled", "requirements": req})):
        RunDir(runs, ids[name]).save_state({"run_id": ids[name], "query": "q", **state})
    # "dead": claimed by a process that has exited (its driver or gateway stopped); "alive": by this one
    subprocess.run([sys.executable, "-c", "import sys; from actors.steps.run.rundir import RunDir; "
                    "RunDir(sys.argv[1], sys.argv[2]).claim()", str(runs), ids["dead"]],
                   check=True, cwd=Path(__file__).resolve().parents[2])
    RunDir(runs, ids["alive"]).claim()

    listed = {r["run_id"]: (r["status"], r["resumable"]) for r in client.get("/api/runs").json()}
    assert [listed[ids[n]] for n in ("finished", "proposed", "dead", "alive", "unclaimed", "cancelled")] == [
        ("finished", False), ("awaiting_approval", False), ("interrupted", True),
        ("running", False),  # another process drives it
        ("running", True),  # no owner to be seen: resuming takes it over
        ("cancelled", True)]
    state = client.get(f"/api/runs/{ids['dead']}").json()
    assert (state["status"], state["resumable"], state["live"]) == ("interrupted", True, False)

    r = client.post(f"/api/runs/{ids['finished']}/resume")
    assert r.status_code == 409 and "finished" in r.json()["detail"]
    r = client.post(f"/api/runs/{ids['proposed']}/resume")
    assert r.status_code == 409 and "approved requirements" in r.json()["detail"]
    assert client.post(f"/api/runs/{ids['alive']}/resume").status_code == 409
    assert client.post("/api/runs/20260101-000000-0000000000000000/resume").status_code == 404
    assert client.post("/api/runs/..%2F..%2Fetc/resume").status_code == 404

    # nothing drives an interrupted run, so there is nothing to cancel; one another process drives reads the flag
    r = client.post(f"/api/runs/{ids['dead']}/cancel")
    assert r.status_code == 409 and f"/api/runs/{ids['dead']}/resume" in r.json()["detail"]
    assert not RunDir(runs, ids["dead"]).cancel_requested()
    assert client.post(f"/api/runs/{ids['alive']}/cancel").status_code == 200
    assert RunDir(runs, ids["alive"]).cancel_requested()


def test_resume_plan_rebuilds_the_run_from_run_json(tmp_path) -> None:
    from gateway.session import resume_plan
    from infra.errors import ConfigError
    from infra.settings import Settings

    state = {"status": "running", "query": "How do zebrafish fins regrow?",
             "requirements": [{"id": "R1", "text": "Speed of fin regrowth in zebrafish"}],
             "search_queries": [{"text": "zebrafish fin regeneration", "requirement_ids": ["R1"]}],
             "settings": {"preset": "deep", "min_coverage": 0.7, "max_iterations": 4, "llm": "ollama"},
             "store_path": str(tmp_path / "store"), "library": str(tmp_path / "lib")}
    from messages.run_state import RunState

    settings, plan = resume_plan(Settings.load("quick"), "20260101-000000-00000000000000cc",
                                 RunState.model_validate({"run_id": "r", **state}), address="ray://head:10001")
    assert plan.approved and plan.run_id == "20260101-000000-00000000000000cc"
    assert plan.query.text == state["query"] and [r.id for r in plan.requirements] == ["R1"]
    assert [q.text for q in plan.search_queries] == ["zebrafish fin regeneration"]
    assert settings.preset == "deep" and settings.run.min_coverage == 0.7 and settings.run.max_iterations == 4
    assert settings.forage.bm25_k == 5 and settings.forage.max_deep_dives == 4  # the deep preset's own values
    assert settings.store.path == tmp_path / "store" and settings.search.library == tmp_path / "lib"
    assert settings.net.offline is False  # it had approved search strings
    assert settings.ray.address == "ray://head:10001"
    for bad in ({**state, "status": "finished"}, {**state, "requirements": []}):
        with pytest.raises(ConfigError):
            resume_plan(Settings.load("quick"), "r", RunState.model_validate({"run_id": "r", **bad}))


def test_resume_restores_every_recorded_value_but_secrets(tmp_path) -> None:
    """run.json records the whole resolved Settings (``Settings.record()``); a resume gets all of it back
    (model, mailto, sources, Zotero, forage strengths) except secrets, which come from the resuming side."""
    from gateway.session import resume_plan
    from infra.settings import Settings
    from messages.run_state import RunState

    run = Settings.load("deep", llm={"model": "llama3:8b"}, search={"mailto": "me@lab.example", "sources": ["arxiv"],
                                                                    "openalex_api_key": "secret-1"},
                        zotero={"push": True, "api_key": "secret-2"}, forage={"judge_batch": 3},
                        run={"runs_dir": tmp_path / "runs"}, store={"path": tmp_path / "store"})
    recorded = json.loads(json.dumps(run.record()))  # as run.json holds it
    assert "secret" not in json.dumps(recorded) and "ray" not in recorded
    state = RunState(run_id="r", status="running", query="q?",
                     requirements=[{"id": "R1", "text": "Fin regrowth speed"}],
                     settings={"preset": "deep", "resolved": recorded})
    resumer = Settings.load("quick", zotero={"api_key": "mine"})
    settings, _ = resume_plan(resumer, "20260101-000000-00000000000000cc", state, address="auto")
    assert settings.record() == run.record()
    assert (settings.forage.bm25_k, settings.forage.judge_batch, settings.run.max_iterations) == (5, 3, 6)
    assert settings.zotero.api_key == "mine" and settings.search.openalex_api_key is None
    assert settings.ray.address == "auto"


def test_run_ids_are_unguessable() -> None:
    """Sortable by time, then 64 random bits (16 hex digits from the OS's CSPRNG): no two alike, even when
    made in the same second, and the random part is never a counter or a clock."""
    from actors.steps.run.rundir import new_run_id

    ids = [new_run_id() for _ in range(5000)]
    assert len(set(ids)) == len(ids)
    shape = re.compile(r"^(\d{8}-\d{6})-([0-9a-f]{16})$")
    parts = [shape.match(i) for i in ids]
    assert all(parts), [i for i, m in zip(ids, parts, strict=True) if not m][:3]
    randoms = [m.group(2) for m in parts if m]
    assert len(set(randoms)) == len(randoms)
    assert len(randoms[0]) * 4 >= 64
    # every hex digit takes every value at every position (a clock or counter would pin the leading ones)
    for pos in range(16):
        assert len({r[pos] for r in randoms}) == 16, pos
    # and the gateway only accepts ids of a safe shape for a folder name
    from gateway.server import _RUN_ID

    assert all(_RUN_ID.match(i) for i in ids[:10])


def test_the_proposal_shows_every_filter_sent_with_a_search_string(tmp_path) -> None:
    """The dashboard's approval panel shows, beside each string, what else would leave the machine with it."""
    from fastapi.testclient import TestClient

    from gateway.server import ManagedRun
    from messages.plan import Requirement, RequirementsPlan, ResearchQuery, SearchQuery

    app = app_for(tmp_path)
    run_id = "20260101-000000-00000000000000b0"
    plan = RequirementsPlan(run_id=run_id, query=ResearchQuery(run_id=run_id, text="q"),
                            requirements=(Requirement(id="R1", text="Heat stress in wheat"),),
                            search_queries=(
                                SearchQuery(text="wheat heat stress", requirement_ids=("R1",), year_from=2020,
                                            open_access=True, has_pdf=True, authors=("Ada Lovelace",),
                                            venue="Field Crops Research"),
                                SearchQuery(text="grain filling", requirement_ids=("R1",))))
    with TestClient(app, base_url=BASE) as client:
        app.state.manager.runs[run_id] = ManagedRun(run_id=run_id, query="q", settings=app.state.manager.settings,
                                                    status="awaiting_approval", plan=plan)
        proposal = client.get(f"/api/runs/{run_id}").json()["proposal"]
    assert [q["text"] for q in proposal["search_queries"]] == ["wheat heat stress", "grain filling"]
    assert proposal["search_filters"] == [
        ["years 2020–…", "open access only", "with a PDF", "by Ada Lovelace", "in Field Crops Research"], []]


def test_a_finished_run_is_asked_over_rest_and_its_asks_are_kept(tmp_path) -> None:
    """POST /api/runs/{id}/ask answers from the run's documents with citations (as `forage ask --run`), appends
    to asks.jsonl (GET /api/runs/{id}/asks, the artifact); an empty question is 422, an unknown run 404."""
    from fastapi.testclient import TestClient

    from gateway.server import create_app
    from infra.llm.fakes import FunctionLLM
    from tests.finished_run import RUN, calvin_answer as model, make_run

    settings, run_dir = make_run(tmp_path)
    with TestClient(create_app(settings, llm=FunctionLLM(model)), base_url=BASE) as c:
        asked = c.post(f"/api/runs/{RUN}/ask", json={"question": "How is carbon dioxide fixed into sugars?"})
        assert asked.status_code == 200, asked.text
        answer = asked.json()
        assert answer["kind"] == "answer" and answer["text"] == "The Calvin cycle fixes carbon dioxide into sugars [1]."
        assert answer["cited"][0]["title"] == "The Calvin Cycle"
        evidence_docs = {json.loads(line)["doc_id"] for line in (run_dir / "evidence.jsonl").read_text().splitlines()}
        assert answer["cited"][0]["doc_id"] in evidence_docs
        kept = c.get(f"/api/runs/{RUN}/asks").json()
        assert [(a["question"], a["text"]) for a in kept] == [("How is carbon dioxide fixed into sugars?",
                                                               answer["text"])]
        assert c.get(f"/api/runs/{RUN}/artifacts/asks.jsonl").status_code == 200
        assert c.post(f"/api/runs/{RUN}/ask", json={"question": ""}).status_code == 422
        assert c.post(f"/api/runs/{RUN}/ask", json={"question": "   "}).status_code == 422
        missing = c.post("/api/runs/nosuchrun/ask", json={"question": "How is carbon fixed?"})
        assert missing.status_code == 404 and "no run" in missing.json()["detail"]
        assert c.get("/api/runs/nosuchrun/asks").json() == []
    assert len((run_dir / "asks.jsonl").read_text().splitlines()) == 1
