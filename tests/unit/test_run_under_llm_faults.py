"""A whole run against an Ollama that misbehaves on every kind of call (a real HTTP server on loopback).

One run in one process, no Ray: the Orchestrator plans, then drives a LocalCrew of the real steps:
LibrarySearch over a folder of two small PDFs, IngestStep (PyMuPDF, MiniLM, LanceDB) with contextual
retrieval on, a Forager per requirement (the actor class in process: the boundary where a requirement
fails alone, as under Ray) and the WriteStep with its comparison of the cited papers. Every LLM call
goes through the real OllamaLLM (1 s timeout, 2 retries) to a ChaosOllama that gives the logical calls,
in the order they arrive, the scenarios of FAULTS in turn: the one-off faults and the persistent ones
(invalid JSON, hangs, HTTP 500 on every attempt). The run must finish with a report whose every [n]
resolves, and every call that failed for good must be recorded in run.json where its stage records
what degraded, whichever stage it fell in. Then the Writer writes the run's report again with the
server down (HTTP 500 on every attempt of every call): the report is still written, from the evidence.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

import pytest
from pydantic import BaseModel

from actors.crew import LocalCrew
from actors.orchestrator import Orchestrator
from actors.steps.events import RecordingEmit
from actors.steps.run.rundir import RunDir
from infra.llm.base import ChatMessage
from infra.llm.ollama import OllamaLLM
from infra.settings import Settings
from messages.plan import PlanRequest, ResearchQuery
from tests.chaos_ollama import FAULTS, MODEL, RECOVERABLE, ChaosOllama, llm_for
from tests.factories import page_pdf
from tests.zebrafish import QUERY_CANARY, SCALES_REQUIREMENT, brain

# slow (whole suite only): a whole run on real PDFs and MiniLM under every LLM fault, ~8 s
pytestmark = pytest.mark.slow

RUN = "run-chaos"
QUERY = f"How does {QUERY_CANARY} change fin regeneration in zebrafish, and how are their scales pigmented?"
ERROR_OF = {"always_invalid": "LLMOutputError", "always_hang": "LLMTimeout", "always_500": "LLMUnavailable"}
assert set(ERROR_OF) == set(FAULTS) - set(RECOVERABLE)
# logical call i meets ORDER[i % len(ORDER)]: the persistent faults spread among the one-off ones. Call 0 is
# the plan; a planner whose server keeps failing stops the run before it starts, on purpose (test_llm_faults).
ORDER = ["http_500", "always_invalid", "hang", "slow", "always_500", "invalid_json", "truncated", "always_hang",
         "think", "wrong_enum", "empty"]
assert sorted(ORDER) == sorted(FAULTS) and ORDER[0] in RECOVERABLE
T = TypeVar("T", bound=BaseModel)
FORAGE_SCHEMAS = {"BatchVerdict", "DeepDiveBatchVerdict", "ChunkVerdict", "DeepDiveVerdict", "Reformulation",
                  "DocumentGist", "RelevanceGate", "SectionChoice"}


def world(root: Path) -> Settings:
    library = root / "library"
    library.mkdir()
    page_pdf(library / "fins.pdf", "Fin regeneration under treatment",
             ["Abstract. Zebrafish regenerate their caudal fins after amputation within two weeks. " * 3,
              "Results. Fish treated with a drug showed slower regrowth of the fin, measured daily. " * 3])
    page_pdf(library / "scales.pdf", "Scale pigmentation of zebrafish",
             ["Abstract. Pigment cells of adult zebrafish scales were counted under a microscope. " * 3,
              "Results. Melanophore density differed between the dorsal and ventral scales. " * 3])
    return Settings.load("quick").updated(
        run={"runs_dir": root / "runs", "max_iterations": 2, "min_coverage": 1.0, "max_requirements": 2,
             "max_added_requirements": 0},
        store={"path": root / "store"}, embed={"backend": "minilm"},
        ingest={"contextual": True},
        search={"library": library}, net={"offline": True}, write={"comparison": True, "charts": False})


class CountingOllama(OllamaLLM):
    """The OllamaLLM of test_llm_faults.llm_for, counting its structured() calls (to bound the requests of each)."""

    structured_calls = 0

    @classmethod
    def for_server(cls, server: ChaosOllama) -> CountingOllama:
        base = llm_for(server)
        return cls(host=base.host, model=base.model, timeout_s=base.timeout_s, max_retries=base.max_retries,
                   backoff_s=base.backoff_s, backoff_max_s=base.backoff_max_s)

    async def structured(self, messages: Sequence[ChatMessage], schema: type[T]) -> T:
        self.structured_calls += 1
        return await super().structured(messages, schema)


def run_under_chaos(settings: Settings, server: ChaosOllama) -> tuple[Any, CountingOllama]:
    from actors.forager import Forager
    from actors.steps.ingest.step import IngestStep
    from actors.steps.search.library import LibrarySearch
    from actors.steps.write.step import WriteStep
    from infra.embed import build_embedder
    from infra.pdf import build_parser
    from infra.store import build_store

    llm = CountingOllama.for_server(server)
    emit = RecordingEmit(RUN)
    store = build_store(settings)
    embedder = build_embedder(settings)
    library = settings.search.library
    assert library is not None

    async def go() -> Any:
        orch = Orchestrator(settings, RUN, llm=llm, emit=emit)
        plan = await orch.plan(PlanRequest(run_id=RUN, query=ResearchQuery(run_id=RUN, text=QUERY)))
        foragers = {r.id: Forager(settings, RUN, None, llm=llm, embedder=embedder) for r in plan.requirements}
        orch._crew = LocalCrew(LibrarySearch(library, emit=emit),
                               IngestStep(settings, store, embedder, build_parser(settings), emit=emit, llm=llm),
                               foragers, WriteStep(settings, store, llm, emit=emit))
        return await orch.run(plan.model_copy(update={"approved": True}))

    return asyncio.run(go()), llm


def failed_for_good(server: ChaosOllama) -> list[tuple[str, str, str]]:
    """(schema, first user message, scenario) of every logical call that met a persistent fault."""
    first: dict[str, dict[str, Any]] = {}
    for body in server.chat_requests:
        key = hashlib.sha256(json.dumps(body["messages"][:2], sort_keys=True).encode()).hexdigest()
        first.setdefault(key, body)
    return [(first[key]["format"]["title"], first[key]["messages"][1]["content"], scenario)
            for key, (scenario, _) in server.calls.items() if scenario in ERROR_OF]


def recorded(state: dict[str, Any], schema: str, user: str, scenario: str) -> bool:
    """Whether run.json records the failure of this call where its stage records what degraded."""
    error = ERROR_OF[scenario]
    ids = {r["text"]: r["id"] for r in state["requirements"]}
    req = re.search(r"^Requirement: (.*)$", user, re.M)
    rid = ids.get(req.group(1)) if req else None
    degraded = state["degraded"]
    if schema == "RequirementList":  # the query itself became R1
        return any(error in d for d in degraded)
    if schema == "ChunkContexts":  # that batch's chunks were stored without context
        title = re.search(r"^Title: (.*)$", user, re.M).group(1)  # type: ignore[union-attr]
        return any(d["title"] == title and any(f.startswith("context_missing:") for f in d["flags"])
                   for d in state["documents"].values())
    if schema in FORAGE_SCHEMAS:
        prefixes = [f"{rid}: "] if rid else [f"{r}: " for r in ids.values()]  # a summary serves every requirement
        if error == "LLMUnavailable":  # the requirement failed alone in that iteration
            owners = [rid] if rid else list(ids.values())
            return any(it["status"].get(r) == "failed" for it in state["iterations"] for r in owners)
        return any(d.startswith(p) and error in d for d in degraded for p in prefixes)
    if schema == "SectionDraft":  # written from the evidence
        return f"writer: section {rid}: {error}" in " ".join(degraded)
    if schema == "OverviewDraft":  # written deterministically
        return any(d.startswith(f"writer: overview: {error}") for d in degraded)
    if schema == "ContributionDraft":  # left empty
        n = re.search(r"^Paper \[(\d+)\]", user, re.M).group(1)  # type: ignore[union-attr]
        return f"writer: comparison: record [{n}]: {error}; left empty" in degraded
    if schema in ("OverlapDraft", "DifferenceDraft"):
        name = "overlap pass" if schema == "OverlapDraft" else "differentiation pass"
        return any(d.startswith(f"writer: comparison: {name}: {error}") for d in degraded)
    raise AssertionError(f"a call of a stage this test does not know: {schema}")


@pytest.fixture(scope="module")
def chaos_run(tmp_path_factory) -> dict[str, Any]:
    settings = world(tmp_path_factory.mktemp("chaos"))
    server = ChaosOllama(lambda i, _: ORDER[i % len(ORDER)], models=(MODEL,), hang_limit_s=3.0)
    with server:
        summary, llm = run_under_chaos(settings, server)
    return {"settings": settings, "summary": summary, "server": server, "llm": llm}


def test_a_whole_run_finishes_through_every_fault_and_records_what_degraded(chaos_run) -> None:
    from actors.steps.tools.verify import verify_run
    from infra.store import build_store

    settings, summary, server, llm = (chaos_run[k] for k in ("settings", "summary", "server", "llm"))
    assert summary.status == "finished", summary.stop_reason
    rundir = RunDir(settings.run.runs_dir, RUN)
    state = json.loads(rundir.run_json.read_text(encoding="utf-8"))
    assert [r["text"] for r in state["requirements"]][1:] == [SCALES_REQUIREMENT]  # the plan came through
    assert {d["status"] for d in state["documents"].values()} == {"stored"}
    checks = verify_run(rundir, build_store(settings))  # every [n] resolves to a chunk that says it
    assert checks and all(c.ok for c in checks), [c for c in checks if not c.ok]
    report = rundir.load_report()
    assert report.sources and report.comparison is not None  # the cited papers were compared
    assert len(report.comparison.records) == len({c.n for c in report.cited_chunks})

    # every scenario was met; after each one-off fault came the right answer (a slow answer and a <think>
    # block before the JSON are themselves usable answers)
    met = set(server.seen)
    assert {name for name, kind in met if kind == "fault"} == set(FAULTS), sorted(met)
    assert {name for name, kind in met if kind == "good"} >= set(RECOVERABLE) - {"slow", "think"}, sorted(met)
    # every stage's calls went to the chaos: plan, contextual retrieval, forage, sections, overview, comparison
    titles = {body["format"]["title"] for body in server.chat_requests}
    assert {"RequirementList", "ChunkContexts", "BatchVerdict", "SectionDraft", "OverviewDraft",
            "ContributionDraft"} <= titles, titles
    for body in server.chat_requests:  # the brain answers every schema (a gap would read as an HTTP 500)
        asyncio.run(brain(body["messages"], type(body["format"]["title"], (), {})))
    # bounded: at most 1 + max_retries requests per structured call
    assert len(server.seen) <= 3 * llm.structured_calls, (len(server.seen), llm.structured_calls)

    # every call that failed for good is recorded in run.json where its stage records what degraded
    persistent = failed_for_good(server)
    assert {scenario for *_, scenario in persistent} == set(ERROR_OF)
    missing = [(schema, scenario) for schema, user, scenario in persistent
               if not recorded(state, schema, user, scenario)]
    assert not missing, (missing, state["degraded"], state["iterations"])


def test_the_writer_with_its_server_down_writes_the_report_from_the_evidence(chaos_run) -> None:
    from actors.steps.tools.verify import verify_report
    from actors.steps.write.step import WriteStep
    from infra.store import build_store
    from messages.forage import RequirementCoverage
    from messages.write import WriteRequest

    settings = chaos_run["settings"]
    assert chaos_run["summary"].status == "finished"
    state = json.loads(RunDir(settings.run.runs_dir, RUN).run_json.read_text(encoding="utf-8"))
    coverages = tuple(RequirementCoverage.model_validate(c) for c in state["last_coverages"])
    written = [c.requirement.id for c in coverages if c.status == "ok" and c.evidence]  # sections the LLM writes
    assert written
    request = WriteRequest(run_id=RUN, query=ResearchQuery(run_id=RUN, text=QUERY), coverages=coverages,
                           iterations=len(state["iterations"]))
    store = build_store(settings)
    server = ChaosOllama(lambda i, _: "always_500", models=(MODEL,))
    with server:
        report = asyncio.run(WriteStep(settings, store, llm_for(server)).write(request))
    assert all(attempts == 3 for _, attempts in server.calls.values())  # every call tried 1 + max_retries times

    checks = verify_report(report, list(report.cited_chunks), store)
    assert checks and all(c.ok for c in checks), [c for c in checks if not c.ok]
    cited = sorted({c.n for c in report.cited_chunks})
    assert cited and report.comparison is not None and [r.n for r in report.comparison.records] == cited
    assert report.comparison.compliant == 0  # every record left empty
    failed = [f.split(": Ollama")[0].split("; ")[0] for f in report.failed_steps]
    assert failed == [*(f"section {rid}: LLMUnavailable" for rid in written), "overview: LLMUnavailable",
                      *(f"comparison: record [{n}]: LLMUnavailable" for n in cited),
                      *(["comparison: overlap pass: LLMUnavailable", "comparison: differentiation pass: LLMUnavailable"]
                        if len(cited) >= 2 else [])], report.failed_steps
    # each section quotes its evidence instead (with [n]) and says why
    assert report.markdown.count("(the language model's synthesis failed)") == len(written)
    # (an answer's quote is Evidence, a related paper's is Related)
    assert report.markdown.count("Evidence: “") + report.markdown.count("Related: “") >= len(written)
