"""kill -9 of an Ingestor and of a Forager inside one whole `research` run: the run finishes, loses no
document, stores no chunk twice, and the killed Forager's requirement is foraged again.

A real run (ResearchSession: Orchestrator actor, RayCrew's Ingestor pool and Foragers, StatusHub, Writer)
over four of the shared PDFs with contextual retrieval on, so the Ingestors call the model too. The model
is the end-to-end brain (tests/e2e/brain.py) through FunctionLLM; it SIGKILLs the process that asks it
(once each, marker files): the Ingestor asking for the chunk contexts of the DVT paper (mid-document:
parsed and chunked, nothing stored yet) and the Forager of the just-in-time requirement at its first
judgement — what an OOM kill or a segfault in a parser or model client does. The Ingestor's finer cases are
in test_ingestor_crash.py; the Forager's (its requirement fails for the iteration with the reason and
coverage 0, the other requirement is foraged, a fresh process forages it again) are all asserted here (they
were test_forager_crash.py, which drove a second crew of its own).
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(900)]

PAPERS = ("dvt_prophylaxis_trauma_bmc2010.pdf", "tracemonkey_pldi2009.pdf",
          "beyond_summarization_arxiv2304.02623v1.pdf", "bosonic_dark_matter_arxiv0908.0054.pdf")
DVT_TITLE = "deep venous thrombosis prophylaxis"  # in the DVT paper's title


@pytest.fixture(scope="module")
def faulty_run(ray_cluster, shared_pdfs, tmp_path_factory, ingest_cache):
    from infra.llm.fakes import FunctionLLM
    from infra.settings import Settings
    from tests.e2e import brain as brain_module
    from tests.loopback_ollama import closed_loopback_url

    tmp = tmp_path_factory.mktemp("faults")
    library = tmp / "library"
    library.mkdir()
    pdfs = {p.name: p for p in shared_pdfs}
    for name in PAPERS:
        (library / name).symlink_to(pdfs[name])
    ray_cluster.cloudpickle.register_pickle_by_value(brain_module)
    brain_module.KILL_CONTEXT_ONCE = (DVT_TITLE, str(tmp / "ingestor-killed"))
    brain_module.KILL_ONCE = ("just-in-time", str(tmp / "forager-killed"))
    try:
        settings = Settings.load("quick").updated(
            run={"runs_dir": tmp / "runs", "max_iterations": 2, "min_coverage": 0.85},
            store={"path": tmp / "store"}, search={"library": library},
            ingest={"pool_size": 2, "parser": "pymupdf", "contextual": True, "cache_dir": ingest_cache},
            ray={"max_restarts": 1, "max_task_retries": 1},
            llm={"backend": "ollama", "host": closed_loopback_url()})  # a real client built by mistake fails
        summary, state, events = brain_module.research(settings, llm=FunctionLLM(brain_module.brain))
    finally:
        brain_module.KILL_CONTEXT_ONCE = brain_module.KILL_ONCE = ("", "")
    return summary, state, events, settings, tmp


def test_both_processes_were_killed_and_the_run_finished(faulty_run) -> None:
    summary, state, events, _, tmp = faulty_run
    assert (tmp / "ingestor-killed").exists() and (tmp / "forager-killed").exists()
    assert summary.status == "finished", summary.stop_reason
    assert state["status"] == "finished" and Path(summary.report_path).is_file()
    assert events[-1].kind == "finished"


def test_no_document_lost_and_no_chunk_stored_twice(faulty_run) -> None:
    from infra.store import build_store
    from infra.store.base import ChunkFilter

    _, state, events, settings, _ = faulty_run
    docs = {Path(d["path"]).name: d for d in state["documents"].values()}
    assert sorted(docs) == sorted(PAPERS)
    assert all(d["status"] == "stored" for d in docs.values()), {n: d["reason"] for n, d in docs.items()}
    dvt_key = docs[PAPERS[0]]["key"]
    crashed = [e for e in events if e.stage == "ingest" and e.kind == "progress" and e.payload.get("key") == dvt_key
               and "crashed" in (e.payload.get("reason") or "")]
    assert crashed, "the DVT paper's Ingestor crash was not reported"  # it was queued again, then stored
    store = build_store(settings)
    ids = [c.chunk_id for d in docs.values()
           for c in store.chunks(ChunkFilter(doc_ids=(d["doc_id"],), exclude_kinds=()), limit=10_000)]
    assert len(ids) == len(set(ids)) == sum(d["n_chunks"] for d in docs.values()) == store.count_chunks()
    dvt = store.chunks(ChunkFilter(doc_ids=(docs[PAPERS[0]]["doc_id"],)), limit=10_000)
    assert any(c.context for c in dvt)  # the retried document got its contexts on the fresh Ingestor


def test_the_killed_foragers_requirement_failed_once_then_was_foraged(faulty_run) -> None:
    _, state, events, settings, _ = faulty_run
    first, second = state["iterations"][:2]
    assert first["status"]["R2"] == "failed" and first["status"]["R1"] == "ok"
    assert first["coverage"]["R2"] == 0.0 and first["coverage"]["R1"] > 0  # the other Forager did its work
    assert second["status"]["R2"] == "ok" and state["coverage"]["R2"] > 0
    # answered: "heparin"/"bleeding" are in the DVT paper the killed Ingestor had (coverage a probability: at the goal)
    assert state["coverage"]["R1"] >= settings.run.min_coverage
    died = [e for e in events if e.stage == "forage" and e.kind == "failed" and e.requirement_id == "R2"]
    assert died and "forager died" in died[0].message
    pids = [e.payload["pid"] for e in events if e.stage == "forage" and e.kind == "actor" and e.requirement_id == "R2"]
    assert len(pids) == 2 and pids[0] != pids[1]  # a fresh Forager process in iteration 2
