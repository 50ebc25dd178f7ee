"""`forage library …` — bring papers into the store (files, Zotero), list, remove and count what it holds.

    forage library add PATH... [--store PATH]                               PDF files and folders (recursive)
    forage library add zotero [--collection NAME] [--local] [--store PATH]   a Zotero library or collection
    forage library add csv FILE [--store PATH]                              a Zotero CSV export
    forage library list [--json] [--store PATH]                             documents in the store
    forage library remove DOC... [--store PATH]                             documents by id or unique id prefix
    forage library fix-metadata DOC [--title T] [--author A]... [--year Y] [--doi D] [--arxiv ID] [--venue V]
                                                                            correct what a PDF's page 1 gave
    forage library match [DOC...] [--yes]                                   fill missing fields from OpenAlex,
                                                                            after showing every lookup
                                                                            (gateway/cli_metadata.py)
    forage library stats [--json] [--store PATH]                            counts, parsers, flags, size on disk
    forage library allow DIR / disallow DIR / allowed                       folders runs started through the
                                                                            gateway may read (gateway/allowed.py)

``add PATH...`` is ``add files PATH...`` (a first argument that is not ``zotero``/``csv``/``files`` is
taken as a path; write ``add files zotero`` for a folder named so). Files are keyed by their absolute
path, as ``forage research --library`` keys them, and a file whose bytes are already stored is skipped.
``remove`` deletes the document and its chunks from the store only: runs keep their report and
``evidence.jsonl``; the default Zotero state files next to the store forget the removed file, so a
later ``add zotero`` brings it back.

Zotero credentials come from Settings (``FORAGE_ZOTERO__LIBRARY_ID``, ``FORAGE_ZOTERO__API_KEY``,
``FORAGE_ZOTERO__LIBRARY_TYPE``; ``--local`` reads a running Zotero 7 through its local API). Pulls
are incremental: a state file next to the store remembers each attachment's version and sha256, so
unchanged attachments are neither downloaded nor ingested again; it is updated only for what was
ingested (or already known), so a failure is tried again next time. Documents are ingested
in-process (no Ray) through the same IngestStep as ``forage research``. Every request is recorded
in ``<runs_dir>/library-<time>/egress.jsonl``.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from typer.core import TyperGroup

from gateway import cli_base as base
from gateway.cli_base import console, err
from infra.errors import ForageError
from infra.settings import Settings
from messages.search import Candidate, Skipped

FILES = "files"  # the subcommand ``add PATH...`` stands for


class AddGroup(TyperGroup):
    """``add``'s subcommands, where a first argument that names none of them (a path, or an option
    such as ``--store``) goes to ``add files``: ``forage library add a.pdf papers/``."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:  # typer's own (vendored) click Context
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = [FILES, *args]
        return super().parse_args(ctx, args)


def register(app: typer.Typer) -> None:
    add_app = next((g.typer_instance for g in base.library_app.registered_groups if g.name == "add"), None)
    if add_app is None:
        add_app = typer.Typer(cls=AddGroup, no_args_is_help=True, subcommand_metavar="PATH... | COMMAND [ARGS]...",
                              help="Add papers to the store: PDF files and folders (forage library add PATH...), "
                                   "a Zotero library or a Zotero CSV export.")
        base.library_app.add_typer(add_app, name="add")
    add_app.command(FILES)(add_files)
    add_app.command("zotero")(add_zotero)
    add_app.command("csv")(add_csv)
    for name, command in (("list", list_documents), ("remove", remove_documents), ("stats", stats),
                          ("allow", allow_folder), ("disallow", disallow_folder), ("allowed", allowed_folders)):
        if not any(c.name == name for c in base.library_app.registered_commands):
            base.library_app.command(name)(command)


# ------------------------------------------------------------------------------------------- helpers

def library_settings(store: Path | None, **zotero: Any) -> Settings:
    settings = Settings.load()
    changes: dict[str, dict[str, Any]] = {}
    if store is not None:
        changes["store"] = {"path": store}
    zotero = {k: v for k, v in zotero.items() if v is not None}
    if zotero:
        changes["zotero"] = zotero
    return settings.updated(**changes) if changes else settings


def fail(message: str, code: int = 2) -> typer.Exit:
    err.print(f"[red]error:[/red] {' '.join(message.split())}", highlight=False)
    return typer.Exit(code)


def ingest_candidates(settings: Settings, run_id: str, candidates: Sequence[Candidate],
                      progress: Callable[[Any, Any], None] | None = None) -> list[Any]:
    """IngestResults for ``candidates``, in order, ingested from this process with ``ingest.parse_workers`` parsing
    processes (actors/steps/ingest/parallel.py); ``progress`` hears of each file as it finishes."""
    if not candidates:
        return []
    from actors.steps.ingest.parallel import ParallelIngest, parse_workers
    from actors.steps.ingest.step import IngestStep
    from infra.embed import build_embedder
    from infra.pdf import build_parser
    from infra.store import build_store

    parser = build_parser(settings)
    step = IngestStep(settings, build_store(settings), build_embedder(settings), parser)
    workers = parse_workers(settings.ingest.parse_workers)
    return ParallelIngest(step, parser, workers, progress=progress).ingest(run_id, candidates)


@contextmanager
def ingest_progress(total: int) -> Iterator[Callable[[Any, Any], None]]:
    """Progress on stderr for a library add of ``total`` files — files done, pages/s, time left: a bar on a
    terminal, else one line per finished file (a log of a long add run under nohup or a scheduler); each file's
    outcome is listed in the table afterwards."""
    if not err.is_terminal:
        def line(state: Any, result: Any) -> None:
            parts = [f"ingesting {state.done}/{total} files"]
            if state.pages:
                parts.append(f"{state.pages_per_s():.1f} pages/s")
            if (eta := _eta(state)) is not None:
                parts.append(f"about {eta:.0f} s left")
            name = Path(result.path).name if result.path else result.key
            err.print(" · ".join([*parts, f"{result.status} {name}"]), highlight=False, soft_wrap=True)

        yield line
        return
    columns = (TextColumn("ingesting"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[rate]}"),
               TimeElapsedColumn(), TextColumn("{task.fields[eta]}"))
    with Progress(*columns, console=err, transient=True) as bar:
        task = bar.add_task("files", total=total, rate="", eta="")

        def update(state: Any, result: Any) -> None:
            eta = _eta(state)
            bar.update(task, completed=state.done, rate=f"{state.pages_per_s():.1f} pages/s" if state.pages else "",
                       eta=f"about {eta:.0f} s left" if eta is not None else "")

        yield update


def _eta(state: Any) -> float | None:
    """Seconds left while files are still to parse, else None."""
    eta = state.eta_s()
    return eta if eta is not None and state.parsed < state.to_parse else None


def _status(result: Any, pulled: str = "new") -> tuple[str, str]:
    """Table status and detail of one ingest outcome."""
    if result.status == "failed":
        return "failed", result.reason or "failed"
    if result.status == "skipped":
        return "unchanged", result.reason or "already in the store"
    if result.reason and result.reason.startswith("replaces"):
        return "changed", f"{result.n_chunks} chunks; {result.reason}"
    return pulled, f"{result.n_chunks} chunks"


STYLE = {"new": "green", "changed": "yellow", "unchanged": "dim", "skipped": "dim", "failed": "red",
         "filled": "green", "no match": "yellow"}
SOURCE_STATUSES = ("new", "changed", "unchanged", "failed")
FILE_STATUSES = ("new", "changed", "skipped", "failed")


def show_outcomes(title: str, rows: list[tuple[str, str, str, str]],
                  statuses: Sequence[str] = SOURCE_STATUSES) -> dict[str, int]:
    """Print (status, title, year, detail) rows as a table; returns the counts per status."""

    table = Table(title=title)
    for col in ("status", "title", "year", "detail"):
        table.add_column(col, max_width=70 if col in ("title", "detail") else None)
    order = {"new": 0, "changed": 1, "filled": 1, "no match": 2, "failed": 2, "unchanged": 3, "skipped": 3}
    for status, name, year, detail in sorted(rows, key=lambda r: order[r[0]]):
        table.add_row(f"[{STYLE[status]}]{status}[/]", name, year, detail)
    counts = {s: sum(r[0] == s for r in rows) for s in statuses}
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

    settings = library_settings(store, local=True if local else None)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    ledger = EgressLedger(settings.run.runs_dir / f"library-{stamp}" / "egress.jsonl")
    try:
        library = ZoteroLibrary(settings.zotero, Egress(settings.net, ledger))
    except ForageError as exc:
        raise fail(str(exc)) from None
    slug = library.library.replace("/", "-") + ("-local" if settings.zotero.local else "")
    state = state or Path(f"{settings.store.path}.zotero-{slug}.json")
    files = files or settings.search.papers_dir / "zotero" / slug
    try:
        with library:
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
        raise fail(str(exc), 1 if exc.retryable else 2) from None
    rows += _skipped_rows(pulled.failed)
    where = f"collection {collection!r}" if collection else "the whole library"
    counts = show_outcomes(f"Zotero {library.library} · {where} → {settings.store.path}", rows)

    console.print(f"[dim]state: {state} · requests: {len(ledger)} (ledger {ledger.path})[/dim]", highlight=False)
    raise typer.Exit(1 if counts["failed"] else 0)


def add_csv(
    file: Annotated[Path, typer.Argument(help="A Zotero CSV export (File → Export Collection… → CSV).")],
    store: Annotated[Path | None, typer.Option(help="Store folder (default: settings).")] = None,
) -> None:
    """Ingest the PDFs listed in a Zotero CSV export; files already in the store are skipped."""
    from infra.sources.zotero_records import read_zotero_csv

    settings = library_settings(store)
    try:
        export = read_zotero_csv(file)
        results = ingest_candidates(settings, f"library-{time.strftime('%Y%m%d-%H%M%S')}", export.candidates)
    except ForageError as exc:
        raise fail(str(exc), 1 if exc.retryable else 2) from None
    rows = []
    for candidate, result in zip(export.candidates, results, strict=True):
        status, detail = _status(result)
        rows.append((status, _title(candidate), _year(candidate), detail))
    rows += _skipped_rows(export.skipped)
    counts = show_outcomes(f"{file.name} → {settings.store.path}", rows)
    raise typer.Exit(1 if counts["failed"] else 0)


def _collect_pdfs(paths: Sequence[Path]) -> list[Path]:
    """The files to add, in order, each once: a file as given, a folder's ``*.pdf`` (recursive, sorted).
    Bad input (a path that does not exist, nothing to add) raises typer.Exit(2)."""

    missing = [str(p) for p in paths if not p.expanduser().exists()]
    if missing:
        raise fail(f"no such file or folder: {', '.join(missing)}")
    found: dict[Path, None] = {}
    for given in paths:
        path = given.expanduser().resolve()
        if path.is_dir():
            pdfs = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix.lower() == ".pdf")
            if not pdfs:
                err.print(f"[yellow]note:[/yellow] no .pdf files under {given}", highlight=False)
            found.update(dict.fromkeys(p.resolve() for p in pdfs))
        else:
            found[path] = None  # a file named on the command line is tried whatever its suffix
    if not found:
        raise fail(f"no PDFs found in {', '.join(str(p) for p in paths)}")
    return list(found)


def _check_embedder(settings: Settings) -> None:
    """Refuse (exit 2) to add to a library built with another embedding model, before ingesting anything."""
    from infra.store import build_store
    from infra.store.meta import check_meta

    store = build_store(settings)
    meta = store.library_meta()
    if meta is not None:
        check_meta(meta, store.embed_model, store.dim, str(settings.store.path))


def add_files(
    paths: Annotated[list[Path], typer.Argument(help="PDF files and folders (searched recursively for *.pdf).",
                                                show_default=False)],
    store: Annotated[Path | None, typer.Option(help="Store folder (default: settings).")] = None,
) -> None:
    """Ingest PDF files and folders into the store; files already stored are skipped, broken ones reported."""
    from actors.steps.search.library import file_key
    from infra.store import build_store

    settings = library_settings(store)
    files = _collect_pdfs(paths)
    candidates = [Candidate(key=file_key(p), source="library", path=str(p), found_by="library add") for p in files]
    try:
        _check_embedder(settings)
        with ingest_progress(len(candidates)) as progress:
            results = ingest_candidates(settings, f"library-{time.strftime('%Y%m%d-%H%M%S')}", candidates, progress)
        stored = build_store(settings)
        years = {r.doc_id: d.year for r in results if r.doc_id and (d := stored.get_document(r.doc_id))}
    except ForageError as exc:
        raise fail(str(exc), 1 if exc.retryable else 2) from None
    rows = []
    for path, result in zip(files, results, strict=True):
        status, detail = _status(result)
        if status == "unchanged":
            status = "skipped"
        year = years.get(result.doc_id or "")
        detail = detail if detail.startswith(path.name) else f"{path.name}: {detail}"
        rows.append((status, result.title or path.name, str(year or ""), detail))
    counts = show_outcomes(f"{len(files)} file{'s' if len(files) != 1 else ''} → {settings.store.path}", rows,
                           FILE_STATUSES)
    raise typer.Exit(1 if counts["failed"] else 0)


def open_library_store(settings: Settings) -> Any:
    """The configured store, opened for the embedding model it records (reading, counting and deleting
    need no embedder), or exit 2 when a LanceDB folder does not exist."""
    from infra.store import build_store

    if settings.store.backend == "lancedb" and not Path(settings.store.path).exists():
        raise fail(f"no store at {settings.store.path}: add papers first (forage library add …)")
    store: Any = build_store(settings)
    meta = store.library_meta()
    if meta is not None and (meta.dim != store.dim or meta.embed_model != store.embed_model):
        store = build_store(settings, dim=meta.dim)
        store.embed_model = meta.embed_model
    return store


def _document_json(doc: Any) -> dict[str, Any]:
    return {"doc_id": doc.doc_id, "key": doc.key, "title": doc.title, "authors": list(doc.authors),
            "year": doc.year, "n_chunks": doc.n_chunks, "parser": doc.parser, "flags": list(doc.flags),
            "origin": doc.origin, "doi": doc.doi, "arxiv_id": doc.arxiv_id, "venue": doc.venue,
            "venue_kind": doc.venue_kind}


ID_WIDTH = 12  # the doc_id prefix `library list` shows (sha256 hex)


def list_documents(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON (one object per document).")] = False,
    store: Annotated[Path | None, typer.Option(help="Store folder (default: settings).")] = None,
) -> None:
    """List the documents in the store: id, title, year, chunks, where they came from."""

    settings = library_settings(store)
    try:
        documents = open_library_store(settings).list_documents()
    except ForageError as exc:
        raise fail(str(exc), 1) from None
    documents = sorted(documents, key=lambda d: ((d.title or "").casefold(), d.doc_id))
    if as_json:
        typer.echo(json.dumps([_document_json(d) for d in documents], ensure_ascii=False, indent=2))
        return
    table = Table(title=f"{len(documents)} documents in {settings.store.path}")
    for col in ("id", "title", "year", "chunks", "origin"):
        table.add_column(col, max_width=70 if col == "title" else None, no_wrap=col == "id")
    for doc in documents:
        table.add_row(doc.doc_id[:ID_WIDTH], doc.title, str(doc.year or ""), str(doc.n_chunks), doc.origin or doc.key)
    console.print(table)


def resolve_ids(documents: Sequence[Any], wanted: Sequence[str],
                 unchanged: str = "nothing was removed") -> list[Any]:
    """The documents named by full ids or unique prefixes (case-insensitive), each once, in the order
    given; exit 2 naming every unknown or ambiguous one (and ``unchanged``: nothing was done)."""
    problems: list[str] = []
    chosen: dict[str, Any] = {}
    for given in wanted:
        prefix = given.strip().lower()
        matches = [d for d in documents if d.doc_id == prefix] or [d for d in documents
                                                                    if prefix and d.doc_id.startswith(prefix)]
        if not matches:
            problems.append(f"no document {given!r}")
        elif len(matches) > 1:
            problems.append(f"{given!r} is ambiguous ({len(matches)} documents: "
                            f"{', '.join(d.doc_id[:ID_WIDTH] for d in matches[:5])}{'…' if len(matches) > 5 else ''}); "
                            "give more of the id")
        else:
            chosen.setdefault(matches[0].doc_id, matches[0])
    if problems:
        raise fail("; ".join(problems) + f" — see forage library list; {unchanged}")
    return list(chosen.values())


def _forget_in_zotero_state(settings: Settings, doc_ids: set[str]) -> list[Path]:
    """Drop the removed files from the default Zotero state files next to the store (``<store>.zotero-*.json``),
    so the next ``add zotero`` ingests them again instead of calling them unchanged. Returns the files changed."""
    from infra.sources.zotero_records import load_state, save_state

    store_path = Path(settings.store.path)
    changed = []
    for path in sorted(store_path.parent.glob(f"{store_path.name}.zotero-*.json")):
        try:
            library = json.loads(path.read_text(encoding="utf-8")).get("library")
            state = load_state(path, library)
        except (OSError, ValueError, AttributeError, ForageError):
            continue  # not ours to fix here; add zotero reports it
        kept = {k: v for k, v in state.items() if v.sha256 not in doc_ids}
        if len(kept) != len(state):
            save_state(path, library, kept)
            changed.append(path)
    return changed


def remove_documents(
    docs: Annotated[list[str], typer.Argument(metavar="DOC...", help="Document ids as `forage library list` shows "
                                              "them, or unique prefixes.", show_default=False)],
    store: Annotated[Path | None, typer.Option(help="Store folder (default: settings).")] = None,
) -> None:
    """Remove documents and their chunks from the store (runs keep their reports and evidence files)."""

    settings = library_settings(store)
    try:
        library = open_library_store(settings)
        chosen = resolve_ids(library.list_documents(), docs)
        for doc in chosen:
            library.delete_document(doc.doc_id)
            if library.get_document(doc.doc_id) is not None:
                raise ForageError(f"document {doc.doc_id[:ID_WIDTH]} is still registered after deleting it")
            console.print(f"[green]removed[/green] {doc.doc_id[:ID_WIDTH]}  {doc.title} "
                          f"({doc.n_chunks} chunks; {doc.origin or doc.key})", highlight=False)
        remaining = library.count_chunks()
    except ForageError as exc:
        raise fail(str(exc), 1) from None
    noted = _forget_in_zotero_state(settings, {d.doc_id for d in chosen})
    console.print(f"[dim]{len(chosen)} removed from {settings.store.path} ({remaining} chunks left); runs keep their "
                  f"reports and evidence.jsonl{'; Zotero state updated: ' + ', '.join(map(str, noted)) if noted else ''}"
                  "[/dim]", highlight=False)


def _page_counts(store: Any, documents: Sequence[Any], batch_chunks: int = 2000) -> dict[str, int]:
    """Pages per document: the highest page any of its chunks lies on (documents whose chunks carry no
    pages — text, abstract-only — are left out). Reads chunks in batches of about ``batch_chunks``."""
    from infra.store import ChunkFilter

    pages: dict[str, int] = {}
    batch: list[Any] = []

    def flush() -> None:
        if batch:
            flt = ChunkFilter(doc_ids=tuple(d.doc_id for d in batch), exclude_kinds=())
            for chunk in store.chunks(flt, limit=sum(d.n_chunks for d in batch)):
                if chunk.pages:
                    pages[chunk.doc_id] = max(pages.get(chunk.doc_id, 0), *chunk.pages)
            batch.clear()

    for doc in documents:
        if batch and sum(d.n_chunks for d in batch) + doc.n_chunks > batch_chunks:
            flush()
        batch.append(doc)
    flush()
    return pages


def _size_on_disk(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.is_dir() else 0


def _human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def library_stats(settings: Settings) -> dict[str, Any]:
    """What ``forage library stats`` shows, as plain data."""
    from infra.store import embedding_name

    store = open_library_store(settings)
    documents = store.list_documents()
    pages = _page_counts(store, documents)
    meta = store.library_meta()
    flagged: dict[str, list[str]] = {}
    for doc in documents:
        for flag in dict.fromkeys(f.split(":", 1)[0] for f in doc.flags):
            flagged.setdefault(flag, []).append(doc.doc_id)
    lance = settings.store.backend == "lancedb"
    return {
        "store": {"backend": settings.store.backend,
                  "path": str(Path(settings.store.path).resolve()) if lance else None,
                  "library": None if lance else settings.store.weaviate_library,
                  "size_bytes": _size_on_disk(Path(settings.store.path)) if lance else None},
        "embedding": {"model": meta.embed_model if meta else embedding_name(settings),
                      "dim": meta.dim if meta else store.dim, "recorded": meta is not None},
        "documents": len(documents),
        "chunks": store.count_chunks(),
        "pages": sum(pages.values()),
        "documents_with_pages": len(pages),
        "by_parser": dict(Counter(d.parser for d in documents).most_common()),
        "flags": {flag: {"documents": len(ids), "doc_ids": ids} for flag, ids in sorted(flagged.items())},
        "flagged_documents": sum(bool(d.flags) for d in documents),
    }


def stats(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    store: Annotated[Path | None, typer.Option(help="Store folder (default: settings).")] = None,
) -> None:
    """Documents, chunks, pages, parsers, flagged documents, embedding model and size of the store."""

    settings = library_settings(store)
    try:
        data = library_stats(settings)
    except ForageError as exc:
        raise fail(str(exc), 1) from None
    if as_json:
        typer.echo(json.dumps(data, ensure_ascii=False, indent=2))
        return
    where = data["store"]
    table = Table(title=f"library {where['path'] or where['library']}", show_header=False)
    table.add_column("what", style="bold")
    table.add_column("value")
    table.add_row("store", f"{where['backend']} · {where['path'] or where['library']}")
    if where["size_bytes"] is not None:
        table.add_row("size on disk", _human_bytes(where["size_bytes"]))
    embedding = data["embedding"]
    table.add_row("embedding", f"{embedding['model']} ({embedding['dim']} dims)"
                  + ("" if embedding["recorded"] else " — configured; the store records none yet"))
    table.add_row("documents", str(data["documents"]))
    table.add_row("chunks", str(data["chunks"]))
    table.add_row("pages", f"{data['pages']} ({data['documents_with_pages']} of {data['documents']} documents "
                           "have page numbers)")
    table.add_row("by parser", ", ".join(f"{name} {n}" for name, n in data["by_parser"].items()) or "—")
    table.add_row("flagged", f"{data['flagged_documents']} documents" + "".join(
        f"\n  {flag}: {info['documents']}" for flag, info in data["flags"].items()))
    console.print(table)


# ------------------------------------------------------------------------------ the gateway's allow-list

def allow_folder(
    folder: Annotated[Path, typer.Argument(help="A folder of PDFs (it and everything under it).")],
) -> None:
    """Allow runs started through the gateway (dashboard, API, driver) to read FOLDER as their library."""
    from gateway.allowed import allow, allow_list_path

    try:
        resolved = allow(folder)
    except ValueError as exc:
        raise fail(str(exc)) from None
    console.print(f"allowed {resolved} (list: {allow_list_path()})", highlight=False)


def disallow_folder(
    folder: Annotated[Path, typer.Argument(help="A folder allowed before.")],
) -> None:
    """Take FOLDER off the gateway's allow-list (runs already started keep their settings)."""
    from gateway.allowed import disallow

    if not disallow(folder):
        raise fail(f"{folder} is not on the allow-list (forage library allowed lists it)")
    console.print(f"no longer allowed: {Path(folder).expanduser().resolve()}", highlight=False)


def allowed_folders() -> None:
    """The folders runs started through the gateway may read (none: the API accepts no library folder)."""
    from gateway.allowed import allow_list_path, allowed_libraries

    folders = allowed_libraries()
    if not folders:
        console.print(f"no folder allowed ({allow_list_path()}): runs started through the gateway read only the "
                      "gateway's own settings' library", highlight=False)
    for folder in folders:
        console.print(str(folder), highlight=False)
