"""`forage verify RUN` and `forage export RUN --format …`: check and share a finished report."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from gateway import cli_base as base
from infra.errors import ConfigError
from infra.settings import Settings


class ExportFormat(str, Enum):
    md = "md"
    html = "html"
    bibtex = "bibtex"
    ris = "ris"
    json = "json"


def verify(
    run: Annotated[str, typer.Argument(help="Run id (or the path of its folder).")],
    runs_dir: Annotated[Path, typer.Option(help="Runs folder.")] = Path("runs"),
    store: Annotated[Path | None, typer.Option(help="Store folder (default: the one recorded in run.json).")] = None,
) -> None:
    """Re-check a finished report against the store: every citation resolves, every cited chunk exists with the
    same sha256 and quote. Exit code 1 when something fails."""
    from actors.steps.tools.verify import find_run, store_path, verify_run
    from infra.store import build_store

    try:
        rundir = find_run(run, runs_dir)
        settings = Settings.load().updated(store={"path": store or store_path(rundir)})
        checks = verify_run(rundir, build_store(settings))
    except (FileNotFoundError, ValueError, ConfigError) as exc:
        base.err.print(f"[red]error:[/red] {base.one_line(exc)}")
        raise typer.Exit(2) from None
    failed = [c for c in checks if not c.ok]
    table = Table(title=f"verify {rundir.run_id}: {len(checks) - len(failed)} of {len(checks)} checks passed")
    table.add_column("check")
    table.add_column("result")
    table.add_column("detail", max_width=80)
    for c in checks:
        table.add_row(c.what, "[green]ok[/green]" if c.ok else "[red]FAIL[/red]", c.detail)
    base.console.print(table)
    raise typer.Exit(1 if failed else 0)


def export(
    run: Annotated[str, typer.Argument(help="Run id (or the path of its folder).")],
    fmt: Annotated[ExportFormat, typer.Option("--format", "-f", help="md, html (self-contained), bibtex, ris "
                                              "or json.")] = ExportFormat.md,
    out: Annotated[Path | None, typer.Option(help="Write here instead of printing.")] = None,
    runs_dir: Annotated[Path, typer.Option(help="Runs folder.")] = Path("runs"),
) -> None:
    """Export a finished run's report: Markdown, self-contained HTML (charts inline, readable offline),
    BibTeX or RIS of its sources, or everything as JSON."""
    from actors.steps.tools.export import export as render
    from actors.steps.run.rundir import atomic_write
    from actors.steps.tools.verify import find_run

    try:
        text = render(find_run(run, runs_dir), fmt.value)
    except (FileNotFoundError, ValueError, ConfigError) as exc:
        base.err.print(f"[red]error:[/red] {base.one_line(exc)}")
        raise typer.Exit(2) from None
    if out is None:
        typer.echo(text, nl=False)
        return
    atomic_write(out.expanduser(), text)
    base.console.print(f"{fmt.value}: {out}")


def register(app: typer.Typer) -> None:
    app.command("verify")(verify)
    app.command("export")(export)
