"""`forage runs`, `forage cancel RUN` and `forage resume RUN`.

`forage runs` lists the runs of the runs folder (``run.runs_dir``, or ``--runs-dir``) with their state
(:func:`run_state`): the status in run.json, except that a "running" run whose owner process (the one
that claimed it, :meth:`RunDir.owner_alive`) is gone shows as "interrupted" with the command that
continues it, and a run.json that cannot be read shows as "unreadable" (listed, never a crash).

Cancel writes ``runs/<run_id>/cancel``; the Orchestrator stops at its next stage boundary (before the
next iteration or the report) with status "cancelled". Resume starts a new driver for the same run
id: the Orchestrator finds the run's earlier progress in run.json and continues it — documents
already ingested, a searched batch, iterations already foraged and the requirements already foraged
in an unfinished iteration are not done again (see RunRecord.start in actors/steps/run/record.py).
The run's settings come from run.json (preset, coverage goal, iterations, LLM and embedder backends,
store, library; online when it had approved search strings); the rest (e.g. the Ollama model) from
the environment, as for `forage research`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer

from actors.steps.run.record import shown_status
from actors.steps.run.rundir import RunDir, find_run_dir
from gateway import cli_base as base
from infra.errors import ConfigError, ForageError
from infra.settings import Settings
from messages.run_state import RunState

RunsDir = Annotated[Path | None, typer.Option(help="Runs folder (default: settings).")]


def _settings(runs_dir: Path | None) -> Any:
    settings = Settings.load()
    if runs_dir is not None:
        settings = settings.updated(run={"runs_dir": runs_dir})
    return settings


def run_state(rundir: RunDir) -> tuple[str, RunState | None]:
    """(the state to show, run.json's content) for one run folder: run.json's status; "interrupted
    (forage resume RUN)" for a "running" run whose owner process is gone (its driver was killed, the
    machine restarted); "unreadable: <why>" with None for a run.json that is not a run's state."""
    from pydantic import ValidationError

    try:
        state = rundir.load_state()
    except ValidationError as exc:
        return f"unreadable: {exc.error_count()} field(s) not as a run's state", None
    except json.JSONDecodeError:
        return "unreadable: JSONDecodeError", None
    except (OSError, ValueError) as exc:
        return f"unreadable: {exc if isinstance(exc, ValueError) else type(exc).__name__}", None
    shown = shown_status(state, rundir)
    if shown == "interrupted":
        return f"interrupted (forage resume {rundir.run_id})", state
    return shown, state


def runs(runs_dir: RunsDir = None) -> None:
    """List runs with their state."""
    from rich.markup import escape
    from rich.table import Table


    folder = Path(_settings(runs_dir).run.runs_dir).expanduser()
    table = Table(title=f"runs in {folder}")
    table.add_column("run", no_wrap=True, min_width=32)  # a run id is copied whole into other commands
    for col in ("status", "coverage", "query"):
        table.add_column(col, no_wrap=col != "query")
    for path in sorted(folder.glob("*/run.json")):
        shown, state = run_state(RunDir(folder, path.parent.name))
        cov = state.final_coverage if state else None
        table.add_row(path.parent.name, shown, f"{cov:.2f}" if cov is not None else "",
                      escape(((state.query or "") if state else "")[:60]))  # a query is text, not markup
    base.console.print(table)


def _load(run_id: str, runs_dir: Path | None) -> tuple[Any, Any, RunState]:
    settings = _settings(runs_dir)
    try:
        rundir = find_run_dir(settings.run.runs_dir, run_id)
        state = rundir.load_state()
    except (ForageError, ValueError, OSError) as exc:
        base.err.print(f"[red]error:[/red] {base.one_line(exc)}")
        raise typer.Exit(2) from None
    if state is None:
        base.err.print(f"[red]error:[/red] no run {run_id!r} in {rundir.path.parent}")
        raise typer.Exit(2)
    return settings, rundir, state


def cancel(run_id: Annotated[str, typer.Argument(help="The run to stop (see `forage runs`).")],
           runs_dir: RunsDir = None) -> None:
    """Stop a run cleanly at its next stage boundary; `forage resume` continues it."""

    _, rundir, state = _load(run_id, runs_dir)
    run_id = rundir.run_id  # the whole id, when a prefix named it
    if state.status in ("finished", "cancelled"):
        base.console.print(f"run {run_id} is already {state.status}")
        return
    rundir.request_cancel()
    base.console.print(f"run {run_id}: cancel requested; it stops before its next stage")


def resume(run_id: Annotated[str, typer.Argument(help="The run to continue (see `forage runs`).")],
           runs_dir: RunsDir = None,
           address: Annotated[str | None, typer.Option(help="Ray cluster to run on (as for `forage research`).")]
           = None) -> None:
    """Continue a run whose driver died, was cancelled or failed, without redoing finished work."""
    from gateway.session import ResearchSession, resume_plan

    settings, rundir, state = _load(run_id, runs_dir)
    run_id = rundir.run_id  # the whole id, when a prefix named it
    try:  # refuses a finished run and one never approved
        settings, plan = resume_plan(settings, run_id, state, address=address)
    except ConfigError as exc:
        finished = f": {rundir.report_md}" if state.status == "finished" else ""
        base.err.print(f"[red]error:[/red] {exc}{finished}")
        raise typer.Exit(2) from None
    base.console.print(f"resuming run [bold]{run_id}[/bold] after {len(state.iterations)} "
                       f"iteration(s), {len(state.documents)} document(s) already ingested")
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
    for rid, why in summary.settled.items():  # per requirement, why it settled
        base.console.print(f"  {rid}: {why}", highlight=False)
    base.console.print(f"[bold green]report:[/bold green] {summary.report_path}")


def register(app: typer.Typer) -> None:
    app.command("runs")(runs)
    app.command("cancel")(cancel)
    app.command("resume")(resume)
