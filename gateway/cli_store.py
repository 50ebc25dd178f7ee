"""`forage library migrate` — copy the library between stores.

    forage library migrate --to weaviate [--from-path DIR] [--library NAME]        LanceDB -> Weaviate
    forage library migrate --to lancedb --from weaviate --to-path DIR [--library NAME]   Weaviate -> LanceDB
    forage library migrate --to lancedb --from-path OLD --to-path NEW               one folder to another

The source defaults to the configured store (``store.backend``, ``store.path``); Weaviate's address
comes from Settings (``FORAGE_STORE__WEAVIATE_HOST`` …), ``--library`` names the Weaviate library on
either side. Chunks, vectors and the document registry are copied in batches and the counts are
checked in the target (:mod:`infra.store.migrate`); the target keeps the source's embedding model.
Re-running is safe: objects are overwritten, never duplicated.
"""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Any

import typer

from gateway import cli_base as base
from gateway.cli_base import console, err
from infra.errors import ForageError
from infra.settings import Settings


class Backend(str, Enum):
    lancedb = "lancedb"
    weaviate = "weaviate"


def register(app: typer.Typer) -> None:

    base.library_app.command("migrate")(migrate_cmd)


def _fail(message: str, code: int = 2) -> typer.Exit:

    err.print(f"[red]error:[/red] {' '.join(message.split())}", highlight=False)
    return typer.Exit(code)


def _open(settings: Settings, backend: str, path: Path | None, library: str | None, dim: int | None,
          embed_model: str | None) -> Any:
    from infra.store import build_store

    changes: dict[str, Any] = {"backend": backend}
    if path is not None:
        changes["path"] = path
    if library is not None:
        changes["weaviate_library"] = library
    store = build_store(settings.updated(store=changes), dim=dim)
    if embed_model is not None:
        store.embed_model = embed_model  # read when the library is first opened
    return store


def migrate_cmd(
    to: Annotated[Backend, typer.Option("--to", help="The store to copy into.")],
    source: Annotated[Backend | None, typer.Option("--from", help="The store to copy from (default: store.backend).")] = None,
    from_path: Annotated[Path | None, typer.Option(help="LanceDB folder to copy from (default: store.path).")] = None,
    to_path: Annotated[Path | None, typer.Option(help="LanceDB folder to copy into (needed for --to lancedb).")] = None,
    library: Annotated[str | None, typer.Option(help="Weaviate library name (default: store.weaviate_library).")] = None,
    batch: Annotated[int, typer.Option(min=1, help="Documents per write.")] = 16,
) -> None:
    """Copy chunks, vectors and the document registry to another store, then verify the counts."""
    from infra.store import embedding_dim, embedding_name
    from infra.store.meta import LibraryMeta
    from infra.store.migrate import migrate, same_location

    settings = Settings.load()
    src_backend = (source.value if source else settings.store.backend)
    if to is Backend.lancedb and to_path is None:
        raise _fail("--to lancedb needs --to-path: the folder to copy into")
    try:
        try:
            configured = LibraryMeta(embed_model=embedding_name(settings), dim=embedding_dim(settings))
        except ForageError:
            configured = None
        src = _open(settings, src_backend, from_path, library, configured.dim if configured else 384, None)
        meta = src.library_meta() or configured
        src.close()
        if meta is None:
            raise _fail("the source records no embedding model and the configured one has no known size")
        src = _open(settings, src_backend, from_path, library, meta.dim, meta.embed_model)
        dst = _open(settings, to.value, to_path, library, meta.dim, meta.embed_model)
        if same_location(src, dst):
            raise _fail(f"the source and the target are the same library ({src!r})")
        console.print(f"copying {src!r} -> {dst!r} (embedding {meta.embed_model or 'unrecorded'}, {meta.dim} dims)")

        def progress(docs: int, chunks: int) -> None:
            console.print(f"  {docs} documents, {chunks} chunks copied")

        report = migrate(src, dst, batch_documents=batch, progress=progress)
    except ForageError as exc:
        raise _fail(str(exc)) from exc
    finally:
        for store in (locals().get("src"), locals().get("dst")):
            if store is not None:
                store.close()
    console.print(f"copied {report.documents} documents and {report.chunks} chunks in {report.batches} batches; "
                  f"the target holds {report.target_documents} documents")
    if report.problems:
        for problem in report.problems:
            console.print(f"[red]mismatch:[/red] {problem}", highlight=False)
        raise typer.Exit(1)
    console.print("[green]verified:[/green] every document, chunk count and vector matches the source")
