"""`forage forget` — delete what Forage keeps about a run (see gateway/forget.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gateway import cli_base as base
from infra.errors import ForageError
from infra.settings import Settings


def forget(
    run_ids: Annotated[list[str] | None, typer.Argument(help="Run ids to forget (see `forage runs`).")] = None,
    documents: Annotated[bool, typer.Option("--documents", help="Also delete the documents only these runs "
                                            "brought into the shared store (and their downloaded PDFs).")] = False,
    zotero: Annotated[bool, typer.Option("--zotero", help="Also delete each run's Zotero collection "
                                         "('Forage RUN'); its items stay in your library.")] = False,
    expired: Annotated[bool, typer.Option("--expired", help="Forget every run older than run.retention_days "
                                          "(or --days).")] = False,
    days: Annotated[int | None, typer.Option(min=0, help="With --expired: this many days instead of the "
                                             "setting.")] = None,
    runs_dir: Annotated[Path | None, typer.Option(help="Runs folder (default: settings).")] = None,
) -> None:
    """Forget runs: their query, requirements, events, evidence, report and egress ledger."""
    from gateway.forget import forget_expired, forget_run

    settings = Settings.load()
    if runs_dir is not None:
        settings = settings.updated(run={"runs_dir": runs_dir})
    if not run_ids and not expired:
        base.err.print("[red]error:[/red] name a run (see `forage runs`) or pass --expired")
        raise typer.Exit(2)
    try:
        reports = []
        if expired:
            if days is None and settings.run.retention_days is None:
                base.err.print("[red]error:[/red] retention is off: set FORAGE_RUN__RETENTION_DAYS or pass --days")
                raise typer.Exit(2)
            reports += forget_expired(settings, days=days)
        for run_id in run_ids or []:
            reports.append(forget_run(settings, run_id, documents=documents, zotero=zotero))
    except ForageError as exc:
        base.err.print(f"[red]error:[/red] {base.one_line(exc)}")
        raise typer.Exit(1 if exc.retryable else 2) from None
    if not reports:
        base.console.print("nothing to forget")
    for r in reports:
        base.console.print(f"forgot run [bold]{r.run_id}[/bold]: {r.files_removed} files in {r.run_dir}")
        if r.documents_deleted or r.documents_kept:
            base.console.print(f"  documents: {len(r.documents_deleted)} deleted from the store, "
                               f"{len(r.documents_kept)} kept (used by other runs), "
                               f"{len(r.papers_removed)} downloaded PDFs removed")
        if r.zotero:
            base.console.print(f"  {r.zotero}")


def register(app: typer.Typer) -> None:
    app.command("forget")(forget)
