"""kill -9 of a Forager in the middle of its foraging: that requirement fails for the iteration (with the
reason), the other requirement's Forager finishes its work, and in the next iteration a fresh Forager
forages that requirement again.

Real parts: the shared Ray cluster, RayCrew's actors (Ingestors with PyMuPDF + MiniLM + LanceDB in
tmp_path, one Forager per requirement), the real forage step. The model is the end-to-end brain
(tests/e2e/brain.py) through FunctionLLM; at the Forager's first judgement it SIGKILLs its own process
(KILL_ONCE), which is what an OOM kill or a segfault in a model client does to a Forager.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from actors.orchestrator import RayCrew
from infra.llm.fakes import FunctionLLM
from infra.settings import Settings
from messages.forage import ForageRequest
from messages.ingest import IngestRequest
from messages.plan import Requirement
from messages.search import Candidate
from tests.e2e import brain as brain_module

pytestmark = [pytest.mark.ray, pytest.mark.timeout(900)]

RUN = "forager-crash"
PAPERS = ("dvt_prophylaxis_trauma_bmc2010.pdf", "tracemonkey_pldi2009.pdf")
R1 = Requirement(id="R1", text=brain_module.REQUIREMENTS[0])  # anticoagulant: dvt answers it
R2 = Requirement(id="R2", text=brain_module.REQUIREMENTS[1])  # just-in-time: tracemonkey answers it


def test_a_killed_forager_fails_its_requirement_only_and_comes_back(ray_cluster, shared_pdfs, ingest_cache,
                                                                     tmp_path: Path) -> None:
    import ray

    pdfs = {p.name: p for p in shared_pdfs}
    ray_cluster.cloudpickle.register_pickle_by_value(brain_module)
    brain_module.KILL_ONCE = ("just-in-time", str(tmp_path / "killed-once"))
    settings = Settings.load("quick").updated(store={"path": tmp_path / "store"},
                                              ingest={"pool_size": 1, "parser": "pymupdf",
                                                      "cache_dir": ingest_cache},
                                              ray={"max_restarts": 1})  # Ray may restart it too
    crew = RayCrew(settings, RUN, None, llm=FunctionLLM(brain_module.brain))
    try:
        ingested = asyncio.run(crew.ingest([IngestRequest(run_id=RUN, candidate=Candidate(
            key=f"file:{pdfs[n]}", path=str(pdfs[n]))) for n in PAPERS]))
        assert [r.status for r in ingested] == ["stored", "stored"], [r.reason for r in ingested]
        asyncio.run(crew.start_foragers(["R1", "R2"]))
        pid_before = ray.get(crew._foragers["R2"].ready.remote())

        first = asyncio.run(crew.forage([ForageRequest(run_id=RUN, iteration=1, requirement=r) for r in (R1, R2)]))
        one, two = first
        assert (tmp_path / "killed-once").exists()  # the Forager of R2 did die
        assert two.status == "failed" and two.coverage == 0.0 and "forager died" in (two.error or "")
        assert one.status != "failed" and one.coverage > 0, one

        second = asyncio.run(crew.forage([ForageRequest(run_id=RUN, iteration=2, requirement=r) for r in (R1, R2)]))
        assert second[1].status != "failed" and second[1].coverage > 0, second[1]  # a fresh Forager forages again
        assert ray.get(crew._foragers["R2"].ready.remote()) != pid_before  # a new process
        assert second[0].status != "failed"
    finally:
        brain_module.KILL_ONCE = ("", "")
        for actor in [*crew._ingestors, *crew._foragers.values()]:
            ray.kill(actor, no_restart=True)
