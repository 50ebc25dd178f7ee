"""`forage library …` — bring papers from Zotero into the store, and list what the store holds.

    forage library add zotero [--collection NAME] [--local] [--store PATH]   a Zotero library or collection
    forage library add csv FILE [--store PATH]                              a Zotero CSV export
    forage library list [--store PATH]                                      documents in the store

Zotero credentials come from Settings (``FORAGE_ZOTERO__LIBRARY_ID``, ``FORAGE_ZOTERO__API_KEY``,
``FORAGE_ZOTERO__LIBRARY_TYPE``; ``--local`` reads a running Zotero 7 through its local API). Pulls
are incremental: a state file next to the store remembers each attachment's version and sha256, so
unchanged attachments are neither downloaded nor ingested again; it is updated only for what was
ingested (or already known), so a failure is tried again next time. Documents are ingested
in-process (no Ray) through the same IngestStep as ``forage research``. Every request is recorded
in ``<runs_dir>/library-<time>/egress.jsonl``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from infra.errors import ForageError
from infra.settings import Settings
from messages.search import Candidate, Skipped


def register(app: typer.Typer) -> None:
    from gateway import cli as base

    add_app = next((g.typer_instance for g in base.library_app.registered_groups if g.name == "add"), None)
    if add_app is None:
        add_app = typer.Typer(no_args_is_help=True, help="Add papers to the store from a source.")
        base.library_app.add_typer(add_app, name="add")
    add_app.command("zotero")(add_zotero)
    add_app.command("csv")(add_csv)
    if not any(c.name == "list" for c in base.library_app.registered_commands):
        base.library_app.command("list")(list_documents)


# ------------------------------------------------------------------------------------------- helpers

def _settings(store: Path | None, **zotero: Any) -> Settings:
    settings = Settings.load()
    changes: dict[str, dict[str, Any]] = {}
    if store is not None:
        changes["store"] = {"path": store}
    zotero = {k: v for k, v in zotero.items() if v is not None}
    if zotero:
        changes["zotero"] = zotero
    return settings.updated(**changes) if changes else settings


def _fail(message: str, code: int = 2) -> typer.Exit:
    from gateway.cli import err

    err.print(f"[red]error:[/red] {' '.join(message.split())}", highlight=False)
    return typer.Exit(code)


def ingest_candidates(settings: Settings, run_id: str, candidates: Sequence[Candidate]) -> list[Any]:
    """IngestResults for ``candidates``, in order, ingested in this process (as the Ingestor actor does)."""
    if not candidates:
        return []
    from actors.steps.ingest import IngestStep
    from infra.embed import build_embedder
    from infra.pdf import build_parser
    from infra.store import build_store
    from messages.ingest import IngestRequest

    step = IngestStep(settings, build_store(settings), build_embedder(settings), build_parser(settings))
    return [step.ingest(IngestRequest(run_id=run_id, candidate=c)) for c in candidates]


def _status(result: Any, pulled: str = "new") -> tuple[str, str]:
    """Table status and detail of one ingest outcome."""
    if result.status == "failed":
        return "failed", result.reason or "failed"
    if result.status == "skipped":
        return "unchanged", result.reason or "already in the store"
    if result.reason and result.reason.startswith("replaces"):
        return "changed", f"{result.n_chunks} chunks; {result.reason}"
    return pulled, f"{result.n_chunks} chunks"


STYLE = {"new": "green", "changed": "yellow", "unchanged": "dim", "failed": "red"}


def show_outcomes(title: str, rows: list[tuple[str, str, str, str]]) -> dict[str, int]:
    """Print (status, title, year, detail) rows as a table; returns the counts per status."""
    from gateway.cli import console

    table = Table(title=title)
    for col in ("status", "title", "year", "detail"):
        table.add_column(col, max_width=70 if col in ("title", "detail") else None)
    order = {"new": 0, "changed": 1, "failed": 2, "unchanged": 3}
    for status, name, year, detail in sorted(rows, key=lambda r: order[r[0]]):
        table.add_row(f"[{STYLE[status]}]{status}[/]", name, year, detail)
    counts = {s: sum(r[0] == s for r in rows) for s in ("new", "changed", "unchanged", "failed")}
    table.caption = " · ".join(f"{n} {s}" for s, n in counts.items())
    console.print(table)
    return counts


def _title(candidate: Candidate) -> str:
    return candidate.title or Path(candidate.path or candidate.key).name


def _year(candidate: Candidate) -> str:
    return str(candidate.year) if candidate.year else ""


def _skipped_rows(skipped: Sequence[Skipped]) -> list[tuple[str, str, str, str]]:
    return [("failed", s.item, "", s.reason) for s in skipped]


# ---------------------------------------------------------------------------------------- commands

def add_zotero(
    collection: Annotated[str | None, typer.Option(help="Collection name or key (default: the whole library).")] = None,
    local: Annotated[bool, typer.Option("--local", help="Read a running Zotero 7 through its local API "
                                        "(127.0.0.1:23119; enable it in Zotero's settings).")] = False,
    store: Annotated[Path | None, typer.Option(help="Store folder (default: settings).")] = None,
    state: Annotated[Path | None, typer.Option(help="Incremental state file (default: next to the store).")] = None,
    files: Annotated[Path | None, typer.Option(help="Where downloaded PDFs go (default: "
                                               "<search.papers_dir>/zotero/<library>).")] = None,
) -> None:
    """Ingest the PDFs of a Zotero library or collection; unchanged attachments are skipped."""
    from infra.net import Egress, EgressLedger
    from infra.sources.zotero import ZoteroLibrary

    settings = _settings(store, local=True if local else None)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    ledger = EgressLedger(settings.run.runs_dir / f"library-{stamp}" / "egress.jsonl")
    try:
        library = ZoteroLibrary(settings.zotero, Egress(settings.net, ledger))
    except ForageError as exc:
        raise _fail(str(exc)) from None
    slug = library.library.replace("/", "-") + ("-local" if settings.zotero.local else "")
    state = state or Path(f"{settings.store.path}.zotero-{slug}.json")
    files = files or settings.search.papers_dir / "zotero" / slug
    try:
        with library:
            from gateway.cli import console

            with console.status(f"reading Zotero {library.library}…"):
                pulled = library.pull(collection, state, folder=files, commit=False)
            candidates = pulled.candidates
            results = ingest_candidates(settings, f"library-{stamp}", candidates)
            outcome = {c.key: r for c, r in zip(candidates, results, strict=True)}
            rows: list[tuple[str, str, str, str]] = []
            done: list[str] = []
            for item in pulled.items:
                c = item.candidate
                if item.status == "unchanged":
                    rows.append(("unchanged", _title(c), _year(c), "same version and file as last time"))
                    done.append(item.attachment_key)
                    continue
                status, detail = _status(outcome[c.key], item.status)
                rows.append((status, _title(c), _year(c), detail))
                if status != "failed":
                    done.append(item.attachment_key)
            library.commit(pulled, state, keys=done)
    except ForageError as exc:
        raise _fail(str(exc), 1 if exc.retryable else 2) from None
    rows += _skipped_rows(pulled.failed)
    where = f"collection {collection!r}" if collection else "the whole library"
    counts = show_outcomes(f"Zotero {library.library} · {where} → {settings.store.path}", rows)
    from gateway.cli import console

    console.print(f"[dim]state: {state} · requests: {len(ledger)} (ledger {ledger.path})[/dim]", highlight=False)
    raise typer.Exit(1 if counts["failed"] else 0)


def add_csv(
    file: Annotated[Path, typer.Argument(help="A Zotero CSV export (File → Export Collection… → CSV).")],
    store: Annotated[Path | None, typer.Option(help="Store folder (default: settings).")] = None,
) -> None:
    """Ingest the PDFs listed in a Zotero CSV export; files already in the store are skipped."""
    from infra.sources.zotero import read_zotero_csv

    settings = _settings(store)
    try:
        export = read_zotero_csv(file)
        results = ingest_candidates(settings, f"library-{time.strftime('%Y%m%d-%H%M%S')}", export.candidates)
    except ForageError as exc:
        raise _fail(str(exc), 1 if exc.retryable else 2) from None
    rows = []
    for candidate, result in zip(export.candidates, results, strict=True):
        status, detail = _status(result)
        rows.append((status, _title(candidate), _year(candidate), detail))
    rows += _skipped_rows(export.skipped)
    counts = show_outcomes(f"{file.name} → {settings.store.path}", rows)
    raise typer.Exit(1 if counts["failed"] else 0)


def list_documents(
    store: Annotated[Path | None, typer.Option(help="Store folder (default: settings).")] = None,
) -> None:
    """List the documents in the store: title, year, chunks, where they came from."""
    from gateway.cli import console
    from infra.store import build_store

    settings = _settings(store)
    if not Path(settings.store.path).exists():
        raise _fail(f"no store at {settings.store.path}: add papers first (forage library add …)")
    try:
        documents = build_store(settings).list_documents()
    except ForageError as exc:
        raise _fail(str(exc), 1) from None
    table = Table(title=f"{len(documents)} documents in {settings.store.path}")
    for col in ("title", "year", "chunks", "origin"):
        table.add_column(col, max_width=70 if col == "title" else None)
    for doc in sorted(documents, key=lambda d: (d.title or "").casefold()):
        table.add_row(doc.title, str(doc.year or ""), str(doc.n_chunks), doc.origin or doc.key)
    console.print(table)
