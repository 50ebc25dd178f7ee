"""`forage eval suite FILE.yaml` and `forage eval report RUN`: report quality, measured.

A suite file lists research queries (and optionally a library, a preset and a judge model). Each query
runs end to end exactly as ``forage research --yes`` would; then every run folder is measured
(:func:`actors.steps.evaluation.report_judge.run_metrics`: coverage, sources, citations removed, schema compliance, LLM
calls, wall time) and, with a judge, scored on the thesis rubric (:func:`actors.steps.evaluation.report_judge.judge_run`).
The table is printed and written as JSON and Markdown. Nothing here is specific to a model: it runs on
any machine with Ollama; the tests drive it with scripted models.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]
from pydantic import BaseModel, ConfigDict, Field

from actors.steps.evaluation.report_judge import judge_run, run_metrics
from actors.steps.run.rundir import RunDir, atomic_write
from infra.llm.base import LLM
from infra.settings import PresetName, Settings

DEFAULT_SUITE = Path(__file__).resolve().parents[1] / "examples" / "eval_suite.yaml"
COLUMNS = ("query", "status", "coverage", "sources", "removed_citations", "compliance", "llm_calls", "wall_s",
           "correctness", "usefulness", "scope", "unsupported")


class SuiteFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    queries: list[str] = Field(min_length=1)
    library: Path | None = None
    preset: PresetName | None = None
    judge: str | None = None


def load_suite(path: Path) -> SuiteFile:
    """The suite in ``path``; ValueError with the reason when it is not a valid suite."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise ValueError(f"cannot read the suite {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError(f"the suite {path} must be a mapping with a 'queries' list")
    suite = SuiteFile.model_validate(data)
    if any(not q.strip() for q in suite.queries):
        raise ValueError(f"the suite {path} has an empty query")
    return suite


def research_run(settings: Settings, query: str, llm: Any | None = None) -> RunDir:
    """One query end to end with Ray, requirements accepted as derived (``forage research --yes``)."""
    from gateway.session import ResearchSession

    session = ResearchSession(settings, llm=llm, quiet=True)
    try:
        plan = session.plan(query).approve()
        session.run(plan)
    finally:
        session.close()
    return session.rundir


def judge_llm(settings: Settings, model: str) -> LLM:
    """The judge: ``model`` on the configured Ollama host."""
    from infra.llm import build_llm

    return build_llm(settings.updated(llm={"backend": "ollama", "model": model}))


def score_run(rundir: RunDir, settings: Settings, judge: LLM | None, judge_name: str = "") -> dict[str, Any]:
    """The run's metrics, with the judge's scores when there is a judge and a report."""
    from infra.store import build_store

    row = run_metrics(rundir)
    if judge is not None and rundir.report_md.exists():
        state = rundir.require_state()
        store = build_store(settings.updated(store={"path": state.store_path or settings.store.path}))
        try:
            verdict = asyncio.run(judge_run(rundir, store, judge, judge_name))
        except Exception as exc:  # noqa: BLE001 (one failed judgement must not lose the suite)
            row["judge_error"] = f"{type(exc).__name__}: {exc}"
        else:
            row.update(correctness=verdict.correctness, usefulness=verdict.usefulness, scope=verdict.scope,
                       unsupported=len(verdict.unsupported_claims), judgement=verdict.as_dict())
    return row


def run_suite(settings: Settings, suite: SuiteFile, *, judge: LLM | None = None, judge_name: str = "",
              run_query: Callable[[Settings, str], RunDir] = research_run,
              progress: Callable[[int, int, str], None] | None = None) -> list[dict[str, Any]]:
    rows = []
    for i, query in enumerate(suite.queries, start=1):
        if progress:
            progress(i, len(suite.queries), query)
        try:
            rundir = run_query(settings, query)
        except Exception as exc:  # noqa: BLE001 (a failed query is a row of the table, not the end)
            rows.append({"query": query, "status": "failed", "error": f"{type(exc).__name__}: {exc}"})
            continue
        rows.append(score_run(rundir, settings, judge, judge_name))
    return rows


def _cell(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def markdown_table(rows: list[dict[str, Any]]) -> str:
    out = ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
    for row in rows:
        cells = [_cell(row.get(c)).replace("|", "\\|").replace("\n", " ") for c in COLUMNS]
        out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def save_results(rows: list[dict[str, Any]], out: Path) -> tuple[Path, Path]:
    """``out``.json (every row in full) and ``out``.md (the table)."""
    json_path, md_path = out.with_suffix(".json"), out.with_suffix(".md")
    atomic_write(json_path, json.dumps(rows, indent=2, ensure_ascii=False, default=str) + "\n")
    atomic_write(md_path, markdown_table(rows))
    return json_path, md_path
