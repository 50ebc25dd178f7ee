"""`forage forget`, retention and user-only run files, on real runs without Ray.

A run here is the real thing in one process: LibrarySearch over a folder of PDFs, IngestStep with
PyMuPDF, MiniLM and LanceDB, a ForageStep per requirement and the WriteStep, driven by the
Orchestrator through a LocalCrew; the model is a FunctionLLM that answers from what it is shown.
The query and the requirements carry a canary word, one library PDF another; after forgetting,
no file under the test's folder (runs, store, papers, the contextual-retrieval cache beside the
store, anything else a run wrote there) may contain them.
"""

from __future__ import annotations

import asyncio
import json
import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from actors.crew import LocalCrew
from actors.orchestrator import Orchestrator
from actors.status_hub import StatusHub
from actors.steps.run.rundir import RunDir
from gateway.forget import expired_runs, forget_expired, forget_run
from infra.errors import ConfigError, ForageError
from infra.llm.fakes import FunctionLLM
from infra.settings import Settings
from messages.plan import PlanRequest, ResearchQuery
from messages.status import StatusEvent
from tests.factories import page_pdf
from tests.zebrafish import DOC_CANARY, QUERY, QUERY_CANARY, brain

class FileHubEmit:
    """Events through the real StatusHub (numbering, events.jsonl), published once the run returns."""

    def __init__(self, run_id: str, path: Path) -> None:
        self.run_id = run_id
        self.hub = StatusHub(run_id, path)
        self.events: list[StatusEvent] = []

    def __call__(self, stage, kind, message="", *, iteration=None, requirement_id=None, **payload):
        self.events.append(StatusEvent(run_id=self.run_id, stage=stage, kind=kind, message=message,
                                       iteration=iteration, requirement_id=requirement_id, payload=payload))

    async def publish(self) -> None:
        for event in self.events:
            await self.hub.publish(event)


@pytest.fixture(scope="module")
def embedder():
    from infra.embed import build_embedder

    return build_embedder(Settings.load().updated(embed={"backend": "minilm"}))


@pytest.fixture
def world(tmp_path: Path) -> dict[str, Path]:
    papers = tmp_path / "papers"  # stands for downloaded PDFs: search.papers_dir and the library
    papers.mkdir()
    page_pdf(papers / "quorthane.pdf", "Fin regeneration under treatment",
             ["Abstract. Zebrafish regenerate their caudal fins after amputation within two weeks. " * 3,
              f"Methods. Fish were treated with {DOC_CANARY} and regrowth of the fin was measured daily. " * 3])
    page_pdf(papers / "scales.pdf", "Scale pigmentation of zebrafish",
             ["Abstract. Pigment cells of adult zebrafish scales were counted under a microscope. " * 3,
              "Results. Melanophore density differed between the dorsal and ventral scales. " * 3])
    return {"root": tmp_path, "runs": tmp_path / "runs", "store": tmp_path / "store", "papers": papers}


def settings_for(world: dict[str, Path], contextual: bool = False, **run: Any) -> Settings:
    return Settings.load("quick").updated(
        run={"runs_dir": world["runs"], "max_iterations": 1, "max_requirements": 1, **run},
        store={"path": world["store"]}, embed={"backend": "minilm"}, ingest={"contextual": contextual},
        search={"library": world["papers"], "papers_dir": world["papers"]}, net={"offline": True},
        write={"comparison": False})  # the comparison tables are not what these tests check


def real_run(settings: Settings, run_id: str, embedder: Any) -> dict[str, Any]:
    from actors.steps.forage.step import ForageStep
    from actors.steps.ingest.step import IngestStep
    from actors.steps.search.library import LibrarySearch
    from actors.steps.write.step import WriteStep
    from infra.pdf import build_parser
    from infra.store import build_store

    llm = FunctionLLM(brain)  # also writes the chunk contexts when ingest.contextual is on
    emit = FileHubEmit(run_id, RunDir(settings.run.runs_dir, run_id).events_jsonl)
    store = build_store(settings)

    async def go() -> Any:
        orch = Orchestrator(settings, run_id, llm=llm, emit=emit)
        plan = await orch.plan(PlanRequest(run_id=run_id, query=ResearchQuery(run_id=run_id, text=QUERY)))
        foragers = {r.id: ForageStep(settings, store, embedder, llm, emit=emit) for r in plan.requirements}
        orch._crew = LocalCrew(LibrarySearch(settings.search.library, emit=emit),
                               IngestStep(settings, store, embedder, build_parser(settings), emit=emit, llm=llm),
                               foragers, WriteStep(settings, store, llm, emit=emit))
        summary = await orch.run(plan.model_copy(update={"approved": True}))
        await emit.publish()
        return summary

    summary = asyncio.run(go())
    assert summary.status == "finished", summary.stop_reason
    return json.loads(RunDir(settings.run.runs_dir, run_id).run_json.read_text(encoding="utf-8"))


def files_containing(word: str, *folders: Path) -> list[str]:
    needle = word.lower().encode()
    return [str(p) for folder in folders if folder.exists() for p in folder.rglob("*")
            if p.is_file() and needle in p.read_bytes().lower()]


def cache_lines(settings: Settings) -> list[dict[str, str]]:
    import json

    from actors.steps.ingest.contextual import cache_path

    path = cache_path(settings)
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_forget_leaves_no_trace_of_the_query_or_its_documents(world, embedder) -> None:
    from actors.steps.ingest.contextual import ContextCache, cache_path
    from infra.store import build_store
    from infra.store.base import ChunkFilter

    settings = settings_for(world, contextual=True)
    state = real_run(settings, "run-canary", embedder)
    root = world["root"]
    # the canaries are really there before: query in the run's files, document text in the store, and
    # the LLM's contexts of the documents' chunks in the contextual-retrieval cache beside the store
    hits = files_containing(QUERY_CANARY, root)
    assert {Path(h).name for h in hits} >= {"run.json", "events.jsonl", "report.md"}, hits
    doc_hits = files_containing(DOC_CANARY, root)
    assert any("/store/" in h for h in doc_hits) and str(cache_path(settings)) in doc_hits, doc_hits
    stored = {d["doc_id"] for d in state["documents"].values() if d["status"] == "stored"}
    assert len(stored) == 2
    store = build_store(settings)
    contexts = {c.context for c in store.chunks(ChunkFilter(doc_ids=tuple(stored), exclude_kinds=()), limit=500)
                if c.context}
    assert contexts and contexts <= {e["c"] for e in cache_lines(settings)}
    n_cached = len(cache_lines(settings))
    # another document's cached context (not this run's): forgetting must leave it
    ContextCache(cache_path(settings)).put_many({"f" * 64: "A passage of another paper on scale pigment cells."})

    report = forget_run(settings, "run-canary", documents=True)

    assert files_containing(QUERY_CANARY, root) == []  # every file under the test's folder
    assert files_containing(DOC_CANARY, root) == []
    assert cache_lines(settings) == [{"h": "f" * 64, "c": "A passage of another paper on scale pigment cells."}]
    assert report.contexts_removed == n_cached
    assert not (world["runs"] / "run-canary").exists()
    assert sorted(report.documents_deleted) == sorted(stored) and report.files_removed >= 4
    assert {Path(p).name for p in report.papers_removed} == {"quorthane.pdf", "scales.pdf"}
    from infra.store import build_store

    store = build_store(settings)
    assert store.list_documents() == [] and store.count_chunks() == 0


def test_documents_stay_without_the_flag_and_when_another_run_used_them(world, embedder) -> None:
    settings = settings_for(world)
    real_run(settings, "run-one", embedder)
    second = real_run(settings, "run-two", embedder)  # finds both documents already stored
    assert {d["status"] for d in second["documents"].values()} == {"skipped"}

    plain = forget_run(settings, "run-two")
    assert plain.documents_deleted == [] and not (world["runs"] / "run-two").exists()
    assert (world["runs"] / "run-one" / "run.json").exists()

    real_run(settings, "run-three", embedder)
    kept = forget_run(settings, "run-one", documents=True)  # run-three used the documents
    assert kept.documents_deleted == [] and set(kept.documents_kept.values()) == {"used by run run-three"}
    from infra.store import build_store

    assert len(build_store(settings).list_documents()) == 2
    assert files_containing(DOC_CANARY, world["store"])  # the library keeps its document
    assert files_containing(QUERY_CANARY, world["runs"])  # run-three is still there
    forget_run(settings, "run-three", documents=True)
    assert files_containing(QUERY_CANARY, *world.values()) == []


def test_run_files_are_user_only(world, embedder) -> None:
    old = os.umask(0o022)
    try:
        settings = settings_for(world)
        real_run(settings, "run-private", embedder)
    finally:
        os.umask(old)
    folder = world["runs"] / "run-private"
    assert stat.S_IMODE(world["runs"].stat().st_mode) == 0o700
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert {p.name for p in files} >= {"run.json", "events.jsonl", "report.md", "evidence.jsonl", "report.json"}
    for p in files:
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p


def _aged_run(runs: Path, run_id: str, days_ago: float, now: float) -> Path:
    rundir = RunDir(runs, run_id)
    rundir.save_state({"run_id": run_id, "status": "finished", "query": f"secret {run_id}"})
    then = now - days_ago * 86_400
    for p in [*rundir.path.rglob("*"), rundir.path]:
        os.utime(p, (then, then))
    return rundir.path


def test_retention_forgets_only_runs_older_than_the_setting(tmp_path) -> None:
    now = time.time()
    runs = tmp_path / "runs"
    _aged_run(runs, "old-run", 31, now)
    _aged_run(runs, "recent-run", 29, now)
    (runs / "not-a-run").mkdir()  # no run.json: left alone
    assert Settings.load().run.retention_days is None  # off by default
    off = Settings.load().updated(run={"runs_dir": runs})
    assert forget_expired(off, now=now) == []
    on = off.updated(run={"retention_days": 30})
    assert expired_runs(runs, 30, now) == ["old-run"]
    gone = forget_expired(on, now=now)
    assert [r.run_id for r in gone] == ["old-run"]
    assert sorted(p.name for p in runs.iterdir()) == ["not-a-run", "recent-run"]


def test_retention_runs_at_the_start_of_research(tmp_path, monkeypatch) -> None:
    from gateway import cli

    runs = tmp_path / "runs"
    _aged_run(runs, "old-run", 10, time.time())
    monkeypatch.setenv("FORAGE_RUN__RETENTION_DAYS", "7")
    # preflight refuses an empty library folder after the retention sweep, before any run starts
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(cli.app, ["research", "a question", "--library", str(tmp_path / "empty"),
                                          "--runs-dir", str(runs), "--offline", "--yes"])
    assert "forgot 1 run(s) older than 7 days: old-run" in result.output, result.output
    assert not (runs / "old-run").exists()


def test_forget_cli(tmp_path) -> None:
    from gateway import cli

    runs = tmp_path / "runs"
    _aged_run(runs, "run-a", 0, time.time())
    _aged_run(runs, "run-b", 40, time.time())
    runner = CliRunner()
    out = runner.invoke(cli.app, ["forget", "run-a", "--runs-dir", str(runs)])
    assert out.exit_code == 0 and "forgot run run-a" in out.output
    assert runner.invoke(cli.app, ["forget", "run-a", "--runs-dir", str(runs)]).exit_code == 2  # gone
    assert runner.invoke(cli.app, ["forget", "../etc", "--runs-dir", str(runs)]).exit_code == 2
    assert runner.invoke(cli.app, ["forget", "--expired", "--runs-dir", str(runs)]).exit_code == 2  # retention off
    out = runner.invoke(cli.app, ["forget", "--expired", "--days", "30", "--runs-dir", str(runs)])
    assert out.exit_code == 0 and "run-b" in out.output and not (runs / "run-b").exists()


def test_bad_run_ids_are_refused(tmp_path) -> None:
    settings = Settings.load().updated(run={"runs_dir": tmp_path})
    for bad in ("..", "../x", "a/b", ""):
        with pytest.raises(ConfigError):
            forget_run(settings, bad)
    with pytest.raises(ForageError, match="no run"):
        forget_run(settings, "missing")


def test_forget_zotero_deletes_the_runs_collection_and_keeps_its_items(tmp_path, shared_data) -> None:
    from infra.net import Egress, EgressLedger
    from infra.settings import NetSettings
    from infra.sources.zotero import ZoteroLibrary
    from tests.loopback_zotero import LoopbackZotero

    with LoopbackZotero(shared_data / "api-fixtures" / "zotero") as server:
        zotero = {"library_id": server.library_id, "api_key": server.api_key, "endpoint": server.url}
        settings = Settings.load().updated(run={"runs_dir": tmp_path / "runs"}, zotero=zotero,
                                           net={"offline": False, "retries": 0})
        _aged_run(tmp_path / "runs", "run-z", 0, time.time())
        with ZoteroLibrary(settings.zotero, Egress(NetSettings(), EgressLedger())) as lib:
            made = lib.zot.create_collections([{"name": "Forage run-z"}])
            key = next(iter(made["success"].values()))
            item = next(iter(server.items.values()))
            item["data"]["collections"] = [*item["data"].get("collections", []), key]
        n_items = len(server.items)

        report = forget_run(settings, "run-z", zotero=True)

        assert report.zotero == "deleted Zotero collection 'Forage run-z'"
        assert key not in server.collections and len(server.items) == n_items
        assert [r.path for r in server.requests if r.method == "DELETE"] == [
            f"/{server.library_type}/{server.library_id}/collections/{key}"]
        assert not (tmp_path / "runs" / "run-z").exists()
        _aged_run(tmp_path / "runs", "run-z", 0, time.time())  # no collection (any more): said, not an error
        assert forget_run(settings, "run-z", zotero=True).zotero == "no Zotero collection 'Forage run-z'"
