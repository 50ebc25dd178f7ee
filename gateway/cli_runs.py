"""`forage cancel RUN` and `forage resume RUN`.

Cancel writes ``runs/<run_id>/cancel``; the Orchestrator stops at its next stage boundary (before the
next iteration or the report) with status "cancelled". Resume starts a new driver for the same run
id: the Orchestrator finds the run's earlier progress in run.json and continues it — documents
already ingested and iterations already foraged are not done again (see Orchestrator._resume_from).
The run's settings come from run.json (preset, coverage goal, iterations, LLM and embedder backends,
store, library; online when it had approved search strings); the rest (e.g. the Ollama model) from
the environment, as for `forage research`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

RunsDir = Annotated[Path | None, typer.Option(help="Runs folder (default: settings).")]


def _load(run_id: str, runs_dir: Path | None) -> tuple[Any, Any, dict[str, Any]]:
    from gateway import cli as base
    from gateway.forget import run_dir
    from infra.errors import ForageError
    from infra.settings import Settings

    settings = Settings.load()
    if runs_dir is not None:
        settings = settings.updated(run={"runs_dir": runs_dir})
    try:
        rundir = run_dir(Path(settings.run.runs_dir).expanduser(), run_id)
        state = rundir.read_state()
    except (ForageError, ValueError, OSError) as exc:
        base.err.print(f"[red]error:[/red] {base._one_line(exc)}")
        raise typer.Exit(2) from None
    if not state:
        base.err.print(f"[red]error:[/red] no run {run_id!r} in {rundir.path.parent}")
        raise typer.Exit(2)
    return settings, rundir, state


def cancel(run_id: Annotated[str, typer.Argument(help="The run to stop (see `forage runs`).")],
           runs_dir: RunsDir = None) -> None:
    """Stop a run cleanly at its next stage boundary; `forage resume` continues it."""
    from gateway import cli as base

    _, rundir, state = _load(run_id, runs_dir)
    if state.get("status") in ("finished", "cancelled"):
        base.console.print(f"run {run_id} is already {state['status']}")
        return
    rundir.request_cancel()
    base.console.print(f"run {run_id}: cancel requested; it stops before its next stage")


def resume(run_id: Annotated[str, typer.Argument(help="The run to continue (see `forage runs`).")],
           runs_dir: RunsDir = None,
           address: Annotated[str | None, typer.Option(help="Ray cluster to run on (as for `forage research`).")]
           = None) -> None:
    """Continue a run whose driver died, was cancelled or failed, without redoing finished work."""
    from gateway import cli as base
    from gateway.session import ResearchSession
    from messages.plan import Requirement, RequirementsPlan, ResearchQuery, SearchQuery

    settings, rundir, state = _load(run_id, runs_dir)
    if state.get("status") == "finished":
        base.err.print(f"[red]error:[/red] run {run_id} is already finished: {rundir.report_md}")
        raise typer.Exit(2)
    if not state.get("requirements"):
        base.err.print(f"[red]error:[/red] run {run_id} never started (no approved requirements); "
                       "start a new run with `forage research`")
        raise typer.Exit(2)
    recorded = state.get("settings") or {}
    searches = tuple(SearchQuery.model_validate(q) for q in state.get("search_queries") or ())
    changes: dict[str, dict[str, Any]] = {
        "run": {k: recorded[k] for k in ("min_coverage", "max_iterations") if k in recorded},
        "search": {"library": Path(state["library"]) if state.get("library") else None},
        "net": {"offline": not searches},
    }
    if state.get("store_path"):
        changes["store"] = {"path": Path(state["store_path"])}
    if recorded.get("llm"):
        changes["llm"] = {"backend": recorded["llm"]}
    if recorded.get("embedder"):
        changes["embed"] = {"backend": recorded["embedder"]}
    if address:
        changes["ray"] = {"address": address}
    settings = settings.updated(preset=recorded.get("preset", settings.preset), **changes)
    query = ResearchQuery(run_id=run_id, text=state["query"])
    plan = RequirementsPlan(run_id=run_id, query=query, approved=True, search_queries=searches,
                            requirements=tuple(Requirement.model_validate(r) for r in state["requirements"]))
    base.console.print(f"resuming run [bold]{run_id}[/bold] after {len(state.get('iterations', []))} "
                       f"iteration(s), {len(state.get('documents', {}))} document(s) already ingested")
    session = ResearchSession(settings, run_id=run_id, quiet=True)
    try:
        view = base.ProgressView(plan, live=False)
        summary = session.run(plan, on_event=view.update)
    finally:
        session.close()
    if summary.status != "finished":
        base.err.print(f"[red]run {summary.status}:[/red] {summary.stop_reason}")
        raise typer.Exit(1)
    base.console.print(f"stopped: {summary.stop_reason}")
    base.console.print(f"[bold green]report:[/bold green] {summary.report_path}")


def register(app: typer.Typer) -> None:
    app.command("cancel")(cancel)
    app.command("resume")(resume)
