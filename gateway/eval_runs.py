"""`forage eval runs SUITE.yaml` and bench/runs.py: every query of a run suite end to end, scored without an LLM.

Each query runs as ``forage research QUERY --library DIR --offline --yes`` would (gateway/eval_suite.py's
:func:`~gateway.eval_suite.research_run`: a ResearchSession plans, its requirements are accepted as derived, the
loop runs and the report is written), then its run folder is scored by
:func:`actors.steps.evaluation.runs.score_run`. ``plan_only`` stops each query after planning: its proposed
requirements are scored, and the files its first iteration would read are the real library Searcher's first
batch for those requirements (no ingestion, no foraging), so planning is measured in minutes, not hours.

A suite whose ``library`` lists several folders is run over one folder of links to all their PDFs, made for the
suite and removed after it (a run's documents are keyed by the files' real paths, so the store and the ingest
cache see the same files either way).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from actors.steps.evaluation.runs import RunSuite, library_names, score_run, totals
from actors.steps.search.library import LibrarySearch
from gateway.eval_suite import research_run
from gateway.session import ResearchSession
from infra.settings import Settings
from messages.run_state import RunState
from messages.search import SearchRequest

COLUMNS = ("query", "ans", "questions", "not needs", "read 1st", "cited recall", "cited prec", "coverage",
           "false cov", "iters", "idle iters", "stop", "LLM calls", "wall s")
PLAN_COLUMNS = ("query", "ans", "questions", "not needs", "read 1st", "wall s")  # --plan-only: what planning shows


@contextmanager
def suite_library(suite: RunSuite) -> Iterator[Path]:
    """The folder the suite's runs search: its one library folder, or a temporary folder of links to the PDFs of
    its several folders."""
    if len(suite.library) == 1:
        yield suite.library[0]
        return
    with tempfile.TemporaryDirectory(prefix="forage-suite-library-") as tmp:
        for name, path in library_names(suite).items():
            (Path(tmp) / name).symlink_to(path.resolve())
        yield Path(tmp)


def plan_query(settings: Settings, query: str, llm: Any | None = None) -> Path:
    """Only the planning of ``query`` (a run left awaiting approval); returns its run folder."""
    session = ResearchSession(settings, llm=llm, quiet=True)
    try:
        session.plan(query)
    finally:
        session.close()
    return session.rundir.path


def first_batch(settings: Settings, run_dir: Path, searcher: Any) -> list[str]:
    """The file names the library Searcher offers first for the run's proposed requirements."""
    state = RunState.load(run_dir / "run.json")
    assert state is not None
    request = SearchRequest(run_id=state.run_id, iteration=1, query=state.query or "",
                            requirements=tuple(state.proposed_requirements),
                            max_results=settings.search.batch_size)
    return [Path(c.path or c.key.removeprefix("file:")).name for c in searcher.search(request).candidates]


def run_suite_runs(settings: Settings, suite: RunSuite, *, plan_only: bool = False, limit: int | None = None,
                   llm: Any | None = None,
                   progress: Callable[[int, int, str], None] | None = None,
                   scored: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """Every query of ``suite`` (the first ``limit``), offline over its library; {"rows", "totals", "settings"}.
    ``llm``: the model handed to the runs (tests); None for the one ``settings`` names. A query that fails is a
    row with its error, not the end of the suite."""
    queries = suite.queries[:limit] if limit else suite.queries
    rows: list[dict[str, Any]] = []
    with suite_library(suite) as library:
        run_settings = settings.updated(search={"library": library}, net={"offline": True})
        searcher = LibrarySearch(library)
        for i, q in enumerate(queries, start=1):
            if progress:
                progress(i, len(queries), q.query)
            started = time.monotonic()
            try:
                if plan_only:
                    run_dir = plan_query(run_settings, q.query, llm)
                    first = first_batch(run_settings, run_dir, searcher)
                else:
                    run_dir, first = research_run(run_settings, q.query, llm).path, None
                row = score_run(run_dir, q, wall_s=time.monotonic() - started, first_read=first)
            except Exception as exc:  # noqa: BLE001 (a failed query is a row of the table, not the end)
                row = {"query": q.query, "answerable": q.answerable, "status": "failed",
                       "error": f"{type(exc).__name__}: {exc}"}
            rows.append(row)
            if scored:
                scored(row)
    return {"suite_library": [str(f) for f in suite.library], "plan_only": plan_only,
            "llm": settings.llm.backend, "model": settings.llm.model, "preset": settings.preset,
            "totals": totals(rows), "rows": rows}


def _fig(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def columns(result: dict[str, Any]) -> tuple[str, ...]:
    return PLAN_COLUMNS if result["plan_only"] else COLUMNS


def table_rows(result: dict[str, Any]) -> list[list[str]]:
    """One line of cells (:func:`columns`) per query."""
    out = []
    for r in result["rows"]:
        if "fidelity" not in r:
            out.append([r["query"], _fig(r["answerable"]), "failed: " + r.get("error", "")[:60]]
                       + [""] * (len(COLUMNS) - 3))
            continue
        f = r["fidelity"]  # a full line of COLUMNS; --plan-only keeps its PLAN_COLUMNS below
        out.append([r["query"], _fig(r["answerable"]), f"{f['questions_kept']}/{f['questions']}",
                    f"{len(f['not_needs'])}/{f['requirements']}", _fig(r["answering_read_first"]),
                    _fig(r["cited_recall"]), _fig(r["cited_precision"]), _fig(r["mean_coverage"]),
                    _fig(r["false_coverage"]), _fig(r["iterations"] if r["iterations"] else None),
                    _fig(r["iterations_nothing_new"] if r["iterations"] else None),
                    (r["stop_reason"] or "—")[:50], _fig(r["llm_calls"]), _fig(r["wall_s"])])
    if result["plan_only"]:
        keep = [COLUMNS.index(c) for c in PLAN_COLUMNS]
        out = [[cells[i] for i in keep] for cells in out]
    return out


TOTAL_LABELS = {
    "queries": "queries", "failed": "failed", "answerable": "answerable", "unanswerable": "unanswerable",
    "questions": "questions", "questions_without_requirement": "questions without a requirement",
    "queries_every_question_kept": "queries with every question kept",
    "requirements": "requirements", "status_or_meta_requirements": "status, meta or context requirements",
    "answer_requirements": "requirements stating an answer",
    "off_query_requirements": "off-query requirements", "replanned_requirements": "re-planned requirements",
    "runs_with_fallbacks": "runs where a step fell back (run.json degraded)",
    "answering_read_first": "answering files read in iteration 1 (mean share)",
    "queries_all_answering_read_first": "answerable queries with all answering files read in iteration 1",
    "cited_recall": "answering files cited (mean recall)",
    "queries_answering_cited": "answerable queries with an answering file cited",
    "cited_precision": "cited-file precision", "coverage_answerable": "coverage, answerable",
    "coverage_unanswerable": "coverage, unanswerable", "false_coverage": "false coverage (share of unanswerable)",
    "median_iterations": "median iterations", "iterations_nothing_new": "iterations that read nothing new",
    "llm_calls": "LLM calls (forage + write)", "median_wall_s": "median wall s", "wall_s": "total wall s",
}


def totals_lines(result: dict[str, Any]) -> list[tuple[str, str]]:
    return [(TOTAL_LABELS.get(k, k), _fig(v)) for k, v in result["totals"].items()]
