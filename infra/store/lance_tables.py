"""Tables and locks of a LanceDB store folder (mixed into :class:`~infra.store.lancedb.LanceStore`): a table opened,
or created with its columns, indexes and the library record under a cross-process lock; the write locks (64 stripes
under ``<store>/_locks``); a read that turns LanceDB's failures into :class:`StoreError`."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from filelock import FileLock, Timeout
from lancedb.table import Table

from infra.errors import StoreError
from infra.store.lance_index import CHUNKS, has_fts, missing_indexes, table_indexes
from infra.store.lance_schema import DOCUMENT_SCHEMA, chunk_schema, missing_columns
from infra.store.meta import LibraryMeta, check_meta

T = TypeVar("T")

LOCK_DIR = "_locks"
LOCK_STRIPES = 64
LIBRARY_META = "library.json"  # the embedding model and size (infra.store.meta)


class LanceTables:
    """The tables and locks of a LanceDB store folder (see the module docstring)."""

    path: Path
    dim: int
    embed_model: str | None
    _db: Any
    _tables: dict[str, Table]

    if TYPE_CHECKING:  # the index upkeep (LanceUpkeep, part of LanceStore) provides these; declared for the type
        # checker only, so that nothing here shadows them at run time
        def _ensure_fts(self, table: Table) -> None: ...

        def _ensure_scalar_indexes(self, name: str, table: Table) -> None: ...


    def _table(self, name: str, *, create: bool) -> Table | None:
        """The table ``name``; None when it does not exist yet and ``create`` is False.

        Opening and creating happen under a cross-process lock: a table another process is still
        creating exists as a folder before it can be opened.
        """
        table = self._tables.get(name)
        if table is not None:
            return table
        if not create and name not in self._db:
            return None
        table = self._ready_table(name)
        if table is not None:  # nothing to add or create: no lock, so readers opening a store never queue
            self._tables[name] = table
            return table
        with self._lock_files(["tables.lock"], what=f"table {name}"):
            try:
                if name in self._db:
                    table = self._db.open_table(name)
                else:
                    schema = chunk_schema(self.dim) if name == CHUNKS else DOCUMENT_SCHEMA
                    table = self._db.create_table(name, schema=schema)
            except Exception as exc:  # noqa: BLE001
                raise StoreError(f"cannot open table {name!r} of the store at {self.path}: {exc}") from exc
            self._add_missing_columns(name, table)
            if name == CHUNKS:
                self._check_dim(table)
                self._check_library_meta()
                self._ensure_fts(table)
            self._ensure_scalar_indexes(name, table)
        self._tables[name] = table
        return table

    def _ready_table(self, name: str) -> Table | None:
        """The existing table ``name`` opened without the tables lock when it needs nothing (columns, indexes,
        the library record) from :meth:`_table`'s set-up; None when it does, or cannot be opened yet (another
        process still creating it)."""
        if name not in self._db:
            return None
        try:
            table = self._db.open_table(name)
            indexed = table_indexes(table)
        except Exception:  # noqa: BLE001 - the locked path opens it again and says what failed
            return None
        if missing_columns(name, table) or missing_indexes(name, table, indexed):
            return None
        if name == CHUNKS:
            if not has_fts(indexed):
                return None
            recorded = self.library_meta()
            if recorded is None or self._unrecorded(recorded):
                return None  # the record is written under the lock
            self._check_dim(table)
            check_meta(recorded, self.embed_model, self.dim, str(self.path))
        return table

    def _add_missing_columns(self, name: str, table: Table) -> None:
        """Columns of :data:`ADDED_COLUMNS` (and the chunks' :data:`WINDOWS`) a table written by an older Forage
        lacks, added as nulls (read back as the field's default; a chunk without windows is scored by its own
        vector). Caller holds the tables lock."""
        missing = missing_columns(name, table)
        if not missing:
            return
        try:
            table.add_columns(missing)
        except Exception as exc:  # noqa: BLE001
            raise StoreError(f"cannot add the columns {[f.name for f in missing]} to table {name!r} of the "
                             f"store at {self.path}: {exc}") from exc

    def _check_dim(self, table: Table) -> None:
        vector_type = table.schema.field("vector").type
        found = getattr(vector_type, "list_size", None)
        if found != self.dim:
            raise StoreError(
                f"the store at {self.path} holds {found}-dimensional vectors but this store was opened "
                f"for {self.dim}; use the embedder it was built with or another store.path",
                retryable=False)

    def _check_library_meta(self) -> None:
        """Refuse another embedding model than the one recorded in ``library.json``; record it
        when missing (a store written before the record existed adopts the model it is opened with)."""
        meta_file = self.path / LIBRARY_META
        recorded = self.library_meta()
        if recorded is not None:
            check_meta(recorded, self.embed_model, self.dim, str(self.path))
        if not self._unrecorded(recorded):
            return
        try:
            tmp = meta_file.with_suffix(".tmp")
            tmp.write_text(LibraryMeta(embed_model=self.embed_model, dim=self.dim).dumps())
            tmp.replace(meta_file)
        except OSError as exc:
            raise StoreError(f"cannot record the embedding model in {meta_file}: {exc}") from exc

    def _unrecorded(self, recorded: LibraryMeta | None) -> bool:
        """Whether ``library.json`` must be written: no record yet, or one without the model this store knows."""
        return recorded is None or bool(self.embed_model and not recorded.embed_model)

    def library_meta(self) -> LibraryMeta | None:
        """What the library records about its vectors (None before the first write)."""

        meta_file = self.path / LIBRARY_META
        return LibraryMeta.loads(meta_file.read_text()) if meta_file.exists() else None

    def _locked(self, *names: str) -> AbstractContextManager[None]:
        """Hold the cross-process write locks of ``names`` (doc ids, keys)."""
        stripes = sorted({int(hashlib.sha256(n.encode()).hexdigest(), 16) % LOCK_STRIPES for n in names})
        return self._lock_files([f"{stripe:02d}.lock" for stripe in stripes], what=names[0][:24])

    @contextmanager
    def _lock_files(self, files: Sequence[str], *, what: str, timeout_s: float = 300.0) -> Iterator[None]:
        """Hold file locks under ``<store>/_locks``, taken in the given (sorted) order."""
        lock_dir = self.path / LOCK_DIR
        with ExitStack() as stack:
            try:
                lock_dir.mkdir(parents=True, exist_ok=True)
                for file in files:
                    stack.enter_context(FileLock(lock_dir / file, timeout=timeout_s))
            except Timeout as exc:
                raise StoreError(f"another writer held the lock for {what} for {timeout_s:.0f}s "
                                 f"in {self.path}") from exc
            except OSError as exc:
                raise StoreError(f"cannot create locks in {lock_dir}: {exc}") from exc
            yield

    def _lock_now(self, name: str) -> FileLock:
        """The lock ``<store>/_locks/<name>``, taken without waiting: entering it raises ``Timeout`` while another
        process holds it (who holds it does the work: optimizing, training the vector index)."""
        (self.path / LOCK_DIR).mkdir(parents=True, exist_ok=True)
        return FileLock(self.path / LOCK_DIR / name, blocking=False)

    def _read(self, name: str, what: str, fn: Callable[[Table], T], empty: T) -> T:
        table = self._table(name, create=False)
        if table is None:
            return empty
        try:
            return fn(table)
        except StoreError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise StoreError(f"LanceDB read failed ({what}) at {self.path}: {exc}") from exc
