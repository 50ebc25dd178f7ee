"""Follow-up runs (`forage research --from RUN "narrower question"`), in one process without Ray.

Real runs: LibrarySearch over a folder of PDFs, IngestStep with PyMuPDF, MiniLM and LanceDB, a ForageStep
per requirement and the WriteStep, driven by the Orchestrator through a LocalCrew; the model is a
FunctionLLM that answers from what it is shown. The shared store also holds a document another run put
there (it names the follow-up's subject): the follow-up forages only the earlier run's documents and
the ones it adds itself, starts from the earlier run's evidence, and does not search in its first
iteration.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from actors.crew import LocalCrew
from actors.orchestrator import Orchestrator
from actors.steps.events import RecordingEmit
from actors.steps.run.record import follow_up_of
from actors.steps.run.rundir import RunDir
from infra.errors import ForageError
from infra.llm.fakes import FunctionLLM
from infra.settings import Settings
from messages.plan import PlanRequest, ResearchQuery
from tests.factories import page_pdf

BROAD = "How fast do zebrafish fins regenerate, and how are their scales pigmented?"
NARROW = "Narrower: how fast do zebrafish caudal fins regrow after amputation?"
OUTSIDER = "Zorblax"  # only in the document another run stored


def brain(messages: list[dict[str, str]], schema: type) -> Any:
    user = next(m["content"] for m in reversed(messages) if m["role"] == "user")
    name = schema.__name__
    if name == "RequirementList":
        if "blastema" in user:
            return {"requirements": ["Role of the blastema in the regrowth of zebrafish fin rays"]}
        if "Narrower" in user:
            return {"requirements": ["Speed of caudal fin regrowth after amputation in zebrafish"]}
        return {"requirements": ["Speed of caudal fin regrowth after amputation in zebrafish",
                                 "Pigment cells in the scales of adult zebrafish"]}
    if name in ("BatchVerdict", "DeepDiveBatchVerdict"):
        verdicts = []
        words = ("blastema",) if "Requirement: Role of the blastema" in user else ("regrowth", "regenerat",
                                                                                    "melanophore")
        for number, passage in re.findall(r"<<<PASSAGE (\d+)\n(.*?)\nPASSAGE \1>>>", user, re.S):
            text = passage.lower()
            tag = "answers" if any(w in text for w in words) else "unrelated"
            verdicts.append({"passage": int(number), "tag": tag, "kind": "result", "motive": "judged"})
        return {"verdicts": verdicts}
    if name == "Reformulation":
        return {"query": "fin regrowth speed"}
    if name == "DocumentGist":
        return {"summary": "A zebrafish study."}
    if name == "RelevanceGate":
        return {"continue_search": False, "reason": "enough"}
    if name == "SectionChoice":
        return {"sections": []}
    if name == "SectionDraft":
        labels = sorted({int(n) for n in re.findall(r"^\[(\d+)\] ", user, re.M)})
        return {"mechanism": "Fins regrow from a blastema.", "mechanism_sources": labels[:1],
                "evidence": [{"sentence": f"Study {n} reports regrowth.", "sources": [n]} for n in labels]}
    if name == "OverviewDraft":
        return {"title": "Zebrafish fins", "overview": "Fins regrow."}
    if name == "ReplanDraft":
        return {"missing": [], "requirements": []}
    raise AssertionError(f"no scripted answer for {name}")


@pytest.fixture(scope="module")
def embedder(minilm):
    return minilm


@pytest.fixture
def world(tmp_path: Path) -> dict[str, Path]:
    library = tmp_path / "library"
    library.mkdir()
    page_pdf(library / "a_fins.pdf", "Fin regeneration after amputation",
             ["Abstract. Zebrafish regenerate their caudal fins after amputation within two weeks. " * 3,
              "Results. Fin regrowth reached 0.2 mm per day in treated fish. " * 3])
    page_pdf(library / "b_scales.pdf", "Scale pigmentation of zebrafish",
             ["Abstract. Pigment cells of adult zebrafish scales were counted under a microscope. " * 3,
              "Results. Melanophore density differed between the dorsal and ventral scales. " * 3])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    page_pdf(elsewhere / "c_outsider.pdf", "Caudal fin regrowth after amputation",
             [f"Abstract. {OUTSIDER} zebrafish caudal fins regrow after amputation; regrowth speed is fast. " * 3])
    return {"runs": tmp_path / "runs", "store": tmp_path / "store", "library": library, "elsewhere": elsewhere}


def settings_for(world: dict[str, Path], **run: Any) -> Settings:
    return Settings.load("quick").updated(
        run={"runs_dir": world["runs"], "max_iterations": 1, "max_added_requirements": 0, **run},
        store={"path": world["store"]}, embed={"backend": "minilm"}, search={"library": world["library"]},
        net={"offline": True}, write={"comparison": False, "charts": False})


def real_run(settings: Settings, run_id: str, query: str, embedder: Any, from_run: str | None = None):
    from actors.steps.forage.step import ForageStep
    from actors.steps.ingest.step import IngestStep
    from actors.steps.search.library import LibrarySearch
    from actors.steps.write.step import WriteStep
    from infra.pdf import build_parser
    from infra.store import build_store

    llm = FunctionLLM(brain)
    emit = RecordingEmit(run_id)
    store = build_store(settings)
    requests: list[Any] = []

    class Foragers(dict):
        def __missing__(self, rid: str) -> Any:
            step = ForageStep(settings, store, embedder, llm, emit=emit)
            original = step.forage

            async def forage(request):  # records what the Orchestrator asked, then forages for real
                requests.append(request)
                return await original(request)

            step.forage = forage  # type: ignore[method-assign]
            self[rid] = step
            return step

    async def go() -> Any:
        orch = Orchestrator(settings, run_id, llm=llm, emit=emit)
        plan = await orch.plan(PlanRequest(run_id=run_id, query=ResearchQuery(run_id=run_id, text=query)))
        orch._crew = LocalCrew(LibrarySearch(settings.search.library, emit=emit),
                               IngestStep(settings, store, embedder, build_parser(settings), emit=emit),
                               Foragers(), WriteStep(settings, store, llm, emit=emit))
        follow_up = None
        if from_run is not None:  # read once, as the CLI does
            earlier = RunDir(settings.run.runs_dir, from_run).load_state()
            assert earlier is not None
            follow_up = follow_up_of(earlier, from_run, settings.forage.seed_chunks)
        return await orch.run(plan.model_copy(update={"approved": True}), follow_up=follow_up)

    summary = asyncio.run(go())
    assert summary.status == "finished", summary.stop_reason
    return json.loads(RunDir(settings.run.runs_dir, run_id).run_json.read_text(encoding="utf-8")), emit, llm, requests


def store_outsider(settings: Settings, world: dict[str, Path], embedder: Any) -> str:
    """Another run's document in the shared store; returns its doc_id."""
    from actors.steps.ingest.step import IngestStep
    from infra.pdf import build_parser
    from infra.store import build_store
    from messages.ingest import IngestRequest
    from messages.search import Candidate

    path = world["elsewhere"] / "c_outsider.pdf"
    step = IngestStep(settings, build_store(settings), embedder, build_parser(settings))
    result = step.ingest(IngestRequest(run_id="run-other", candidate=Candidate(key=f"file:{path}", path=str(path))))
    assert result.status == "stored", result.reason
    return str(result.doc_id)


def test_a_follow_up_starts_from_the_earlier_runs_documents_and_evidence(world, embedder) -> None:
    settings = settings_for(world)
    earlier, earlier_emit, *_ = real_run(settings, "run-broad", BROAD, embedder)
    earlier_docs = {d["doc_id"] for d in earlier["documents"].values() if d["status"] == "stored"}
    assert len(earlier_docs) == 2
    from infra.store import build_store

    # the crew folded the ingested chunks into the BM25 index before foraging
    assert build_store(settings).unindexed_chunks() == 0
    assert [e.payload["folded"] for e in earlier_emit.events if e.kind == "indexed"][0] > 0
    outsider = store_outsider(settings, world, embedder)

    hits = build_store(settings).bm25("caudal fin regrowth after amputation", 5)
    assert outsider in {h.chunk.doc_id for h in hits}  # an ordinary run would find the outsider
    # a new paper in the library after the earlier run: the follow-up may add it later, not in iteration 1
    page_pdf(world["library"] / "d_new.pdf", "Fin rays", ["Abstract. Fin rays regrow from a blastema. " * 3])

    state, emit, llm, requests = real_run(settings, "run-narrow", NARROW, embedder, from_run="run-broad")

    follow = state["from_run"]
    assert follow["run_id"] == "run-broad" and follow["documents"] == 2
    expected_seeds = [cid for cov in earlier["last_coverages"] for ev in cov["evidence"] for cid in ev["chunk_ids"]]
    assert follow["seed_chunk_ids"] and set(follow["seed_chunk_ids"]) == set(expected_seeds)
    inherited = {d["doc_id"]: d for d in state["documents"].values()}
    assert set(inherited) == earlier_docs
    assert {d["status"] for d in inherited.values()} == {"skipped"}  # already in the store: not this run's
    assert {d["reason"] for d in inherited.values()} == {"from run run-broad"}
    # iteration 1 searched nothing (the library was not even listed) and ingested nothing
    assert not [e for e in emit.events if e.stage == "search"]
    assert not [e for e in emit.events if e.stage == "ingest"]
    # the Forager was told the scope and the seeds; the seeds were judged first
    (request,) = requests
    assert set(request.doc_ids) == earlier_docs and list(request.seed_chunk_ids) == follow["seed_chunk_ids"]
    (coverage,) = state["last_coverages"]
    judged = [j["chunk_id"] for j in coverage["judgements"]]
    assert judged[: len(follow["seed_chunk_ids"])] == follow["seed_chunk_ids"]
    assert {j["doc_id"] for j in coverage["judgements"]} <= earlier_docs
    assert coverage["coverage"] == 1.0
    # nothing of the outsider was ever shown to the model
    assert not any(OUTSIDER in m["content"] for call in llm.calls_log for m in call.messages)
    # the earlier run's query is not copied into the follow-up (forgetting the earlier run stays complete)
    assert "scales are pigmented" not in (world["runs"] / "run-narrow" / "run.json").read_text()


def test_a_follow_up_adds_documents_to_its_scope_in_later_iterations(world, embedder) -> None:
    settings = settings_for(world)
    real_run(settings, "run-broad", BROAD, embedder)
    page_pdf(world["library"] / "d_new.pdf", "Fin rays", ["Abstract. Fin rays regrow from a blastema. " * 3])
    follow_settings = settings.updated(run={"max_iterations": 2})
    query = "Narrower: what does the blastema do when fin rays regrow?"  # only the new paper answers it
    state, emit, _, requests = real_run(follow_settings, "run-narrow", query, embedder, from_run="run-broad")
    searches = [e.iteration for e in emit.events if e.stage == "search" and e.kind == "started"]
    assert searches == [2]
    new = [d for d in state["documents"].values() if d["status"] == "stored"]
    assert [Path(d["path"]).name for d in new] == ["d_new.pdf"]
    assert new[0]["doc_id"] in requests[-1].doc_ids and new[0]["doc_id"] not in requests[0].doc_ids
    assert [it["coverage"] for it in state["iterations"]] == [{"R1": 0.0}, {"R1": 1.0}]


def test_follow_up_settings_take_the_earlier_runs_store_library_and_embedder(world, tmp_path) -> None:
    from gateway.cli import follow_up_settings

    settings = settings_for(world)
    RunDir(world["runs"], "run-old").save_state({
        "run_id": "run-old", "status": "finished", "store_path": str(tmp_path / "old-store"), "library": str(tmp_path / "old-lib"),
        "settings": {"embedder": "ollama"}, "documents": {"file:/x.pdf": {"status": "stored", "doc_id": "d1"}}})
    derived, follow_up = follow_up_settings(settings, "run-o")  # a unique prefix, as `forage runs` lists them
    assert derived.store.path == tmp_path / "old-store" and derived.search.library == tmp_path / "old-lib"
    assert derived.embed.backend == "ollama"
    assert follow_up.earlier_run == "run-old" and list(follow_up.documents) == ["file:/x.pdf"]
    assert follow_up.documents["file:/x.pdf"].status == "skipped"
    kept, _ = follow_up_settings(settings, "run-old", keep_library=True, keep_store=True)
    assert kept.store.path == world["store"] and kept.search.library == world["library"]
    RunDir(world["runs"], "run-empty").save_state({"run_id": "run-empty", "status": "failed", "documents": {}})
    with pytest.raises(ForageError, match="no stored documents"):
        follow_up_settings(settings, "run-empty")
    with pytest.raises(ForageError, match="no run 'run-missing'"):
        follow_up_settings(settings, "run-missing")


@pytest.mark.parametrize("run_id, message", [("run-missing", "no run 'run-missing'"),
                                             ("../etc", "is not a run id")])
def test_research_from_an_unknown_run_says_so(world, run_id, message) -> None:
    from gateway.cli import app

    result = CliRunner().invoke(app, ["research", NARROW, "--from", run_id, "--runs-dir", str(world["runs"]),
                                      "--yes", "--offline"])
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())


def test_an_ordinary_run_forages_only_its_own_sources_unless_told_the_whole_store(world, embedder) -> None:
    """Another library's paper in the shared store, on the very topic: an ordinary run never reads it (its
    Foragers are scoped to its own documents, the report's Scope says so); --whole-store reads it."""
    settings = settings_for(world)
    outsider = store_outsider(settings, world, embedder)
    state, _, llm, requests = real_run(settings, "run-own", NARROW, embedder)
    own = {d["doc_id"] for d in state["documents"].values() if d["status"] in ("stored", "skipped")}
    assert requests and all(set(r.doc_ids or ()) == own for r in requests) and outsider not in own
    assert not any(OUTSIDER in m["content"] for call in llm.calls_log for m in call.messages)
    report = (world["runs"] / "run-own" / "report.md").read_text()
    assert f"Documents consulted: {len(own)} read by this run (its own sources" in report

    wide, _, wide_llm, wide_requests = real_run(settings.updated(run={"whole_store": True}), "run-wide", NARROW,
                                                embedder)
    assert wide_requests and all(r.doc_ids is None for r in wide_requests)
    assert any(OUTSIDER in m["content"] for call in wide_llm.calls_log for m in call.messages)
    assert "in the whole store" in (world["runs"] / "run-wide" / "report.md").read_text()
