"""The LanceDB store's upkeep: its indexes (native BM25, B-tree and bitmap look-ups, the ANN vector index trained
once the table is big enough), folding new rows into them, compaction, and making deletions physical. Kept apart
from the reads and writes of :mod:`infra.store.lancedb` (whose :class:`~infra.store.lancedb.LanceStore` it is a
part of): none of it changes what a search finds, only how fast and what stays on disk."""

from __future__ import annotations

import json
import logging
import math
import warnings
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from filelock import FileLock, Timeout
from lancedb.index import FTS, Bitmap, BTree, HnswSq, IvfPq
from lancedb.table import Table
from tenacity import before_sleep_log, retry, retry_if_exception, stop_after_attempt, wait_random_exponential

from infra.errors import StoreError
from infra.store.base import DocumentRecord
from infra.store.lance_sql import sql_list

log = logging.getLogger("infra.store.lancedb")

T = TypeVar("T")
VectorIndexType = Literal["IVF_HNSW_SQ", "IVF_PQ"]

CHUNKS = "chunks"
DOCUMENTS = "documents"
OPTIMIZE_LOCK = "optimize.lock"  # held by whoever optimizes; others leave it to them
VECTOR_INDEX_LOCK = "vector-index.lock"  # held by whoever trains the ANN index; others leave it to them
VECTOR_INDEX_META = "vector-index.json"  # rows and settings the ANN index was trained with
SCALAR_INDEXES = {CHUNKS: ("chunk_id", "doc_id"), DOCUMENTS: ("doc_id", "key")}
# a bitmap index on the section kind: every search's default filter (references left out) is answered from it; as a
# scan of the column it cost ~30 ms per search side at 1M chunks, more than the indexed search itself
BITMAP_INDEXES = {CHUNKS: ("section_kind",), DOCUMENTS: ()}
SEARCH_TEXT = "search_text"  # the chunks' column BM25 indexes (infra.store.base.search_text)


def table_indexes(table: Table) -> set[tuple[str, str]]:
    """(index type, column) of every index the table has, types upper-case (``BTREE``, ``BITMAP``, ``FTS``, ...)."""
    return {(ix.index_type.upper(), col) for ix in table.list_indices() for col in ix.columns}


def has_fts(indexed: set[tuple[str, str]]) -> bool:
    """Whether a BM25 (full-text) index is among ``indexed``."""
    return any(kind == "FTS" for kind, _ in indexed)


def missing_indexes(name: str, table: Table, indexed: set[tuple[str, str]]) -> list[tuple[str, str]]:
    """(column, ``BTREE`` | ``BITMAP``) of the scalar indexes (:data:`SCALAR_INDEXES`, :data:`BITMAP_INDEXES`) the
    table lacks; a bitmap only on a column the table has."""
    names = set(table.schema.names)
    return ([(c, "BTREE") for c in SCALAR_INDEXES[name] if ("BTREE", c) not in indexed]
            + [(c, "BITMAP") for c in BITMAP_INDEXES[name] if c in names and ("BITMAP", c) not in indexed])


def is_commit_conflict(exc: BaseException) -> bool:
    """Lance reports lost optimistic-commit races as errors mentioning a commit conflict."""
    text = str(exc).lower()
    return "conflict" in text and ("commit" in text or "concurrent" in text or "retry" in text)


retry_conflicts = retry(
    retry=retry_if_exception(is_commit_conflict),
    wait=wait_random_exponential(multiplier=0.05, max=2.0),
    stop=stop_after_attempt(8),
    before_sleep=before_sleep_log(log, logging.WARNING),
    reraise=True,
)


class LanceUpkeep:
    """Index upkeep of a LanceDB store folder (mixed into :class:`~infra.store.lancedb.LanceStore`, whose tables,
    locks and settings it uses)."""

    path: Path
    dim: int
    vector_index_rows: int | None
    vector_index_type: VectorIndexType
    auto_optimize_rows: int | None

    if TYPE_CHECKING:  # the rest of LanceStore provides these; declared for the type checker only, so that nothing
        # here shadows them at run time
        def _table(self, name: str, *, create: bool) -> Table | None: ...

        def _read(self, name: str, what: str, fn: Callable[[Table], T], empty: T) -> T: ...

        def _lock_now(self, name: str) -> FileLock: ...

        def list_documents(self) -> list[DocumentRecord]: ...

    def _ensure_fts(self, table: Table) -> None:
        """Create the native BM25 index on ``search_text`` (``text`` in a store written before that
        column existed) unless it exists (caller holds the tables lock)."""
        try:
            if not has_fts(table_indexes(table)):
                table.create_index(self._fts_column(table), config=FTS())
        except Exception as exc:  # noqa: BLE001
            raise StoreError(f"cannot create the full-text index at {self.path}: {exc}") from exc

    @staticmethod
    def _fts_column(table: Table) -> str:
        return SEARCH_TEXT if SEARCH_TEXT in table.schema.names else "text"

    def _ensure_scalar_indexes(self, name: str, table: Table) -> None:
        """B-tree indexes on the look-up columns (:data:`SCALAR_INDEXES`) and bitmap indexes on the filter columns
        (:data:`BITMAP_INDEXES`), created when missing. A failure only makes look-ups and filters slower: it is
        logged, never raised."""
        try:
            for column, kind in missing_indexes(name, table, table_indexes(table)):
                table.create_index(column, config=BTree() if kind == "BTREE" else Bitmap())
        except Exception:  # noqa: BLE001
            log.warning("could not create the scalar indexes of %s in %s; look-ups scan the table",
                        name, self.path, exc_info=True)

    def remove_orphans(self) -> int:
        """Delete chunks whose document is not registered (left by a crash between commits).
        Run only while no writer is active: an upsert in flight has chunks but no registry row yet."""
        chunk_table = self._table(CHUNKS, create=False)
        if chunk_table is None:
            return 0
        registered = [d.doc_id for d in self.list_documents()]
        where = f"doc_id NOT IN {sql_list(registered)}" if registered else None
        n = chunk_table.count_rows(where)
        if n:
            retry_conflicts(lambda: chunk_table.delete(where or "TRUE"))()
        return n

    def unindexed_chunks(self) -> int:
        """Chunks not yet in the BM25 index (found by a slower flat scan until :meth:`optimize`)."""
        def count(t: Table) -> int:
            fts = next((ix for ix in t.list_indices() if ix.index_type == "FTS"), None)
            return t.count_rows() if fts is None else t.index_stats(fts.name).num_unindexed_rows
        return self._read(CHUNKS, "index statistics", count, 0)

    def optimize(self, cleanup_older_than: timedelta = timedelta(hours=1)) -> None:
        """Fold unindexed chunks into the BM25 index, compact small files, drop table versions
        older than ``cleanup_older_than``. Search is correct without it; it keeps search fast.
        Safe while other processes read and write (only old versions are removed)."""
        for name in (CHUNKS, DOCUMENTS):
            table = self._table(name, create=False)
            if table is not None:
                try:
                    retry_conflicts(lambda t=table: t.optimize(cleanup_older_than=cleanup_older_than))()
                except Exception as exc:  # noqa: BLE001
                    raise StoreError(f"optimizing {name} at {self.path} failed: {exc}") from exc
        self.build_vector_index()

    def vector_index(self) -> dict[str, Any] | None:
        """What the ANN index was trained with (type, partitions, rows), or None when the vectors have none."""
        table = self._table(CHUNKS, create=False)
        if table is None or not any(ix.columns == ["vector"] for ix in table.list_indices()):
            return None
        try:
            return json.loads((self.path / VECTOR_INDEX_META).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {"type": "unknown"}  # trained by another tool: used, never retrained by the size rule

    def build_vector_index(self, *, force: bool = False) -> dict[str, Any] | None:
        """Train the ANN index when the table has reached ``vector_index_rows`` chunks and has none, or has grown
        fourfold since it was trained (or always, ``force``); returns what it was trained with, None when nothing
        was done. Another process training it at the same time: this one leaves it (a file lock)."""
        table = self._table(CHUNKS, create=False)
        if table is None:
            return None
        rows = table.count_rows()
        current = self.vector_index()
        if not force:
            if self.vector_index_rows is None or rows < self.vector_index_rows:
                return None
            if current is not None and rows < 4 * int(current.get("rows") or rows):
                return None
        if rows < 256:  # IVF training needs some rows; below that a scan is instant anyway
            return None
        kind = self.vector_index_type
        if kind == "IVF_HNSW_SQ":  # few partitions: each one HNSW graph (fewer only cost training memory)
            options: dict[str, Any] = {"num_partitions": max(1, rows // 500_000)}
        else:
            options = {"num_partitions": max(1, int(math.sqrt(rows))), "num_sub_vectors": max(1, self.dim // 8)}
        try:
            with self._lock_now(VECTOR_INDEX_LOCK):
                config = (HnswSq if kind == "IVF_HNSW_SQ" else IvfPq)(distance_type="cosine", **options)
                table.create_index("vector", config=config, replace=True)
                info = {"type": kind, "rows": rows, **options}
                meta = self.path / VECTOR_INDEX_META
                tmp = meta.with_suffix(".tmp")
                tmp.write_text(json.dumps(info) + "\n", encoding="utf-8")
                tmp.replace(meta)
        except Timeout:
            return None
        except Exception as exc:  # noqa: BLE001 - search stays exact (a scan) without it
            log.warning("could not build the vector index of %s (%s); vector search scans every row", self.path,
                        exc)
            return None
        return info

    def purge_deleted(self) -> None:
        """Make deletions physical, in the indexes too (``forage forget``): LanceDB keeps deleted rows in older table
        versions, and an index folded forward by :meth:`optimize` keeps the values of rows deleted since it was built
        (a deleted paper's key in the B-tree pages, its words in the BM25 postings, its vector in the ANN index). So
        every index is built again from the rows left, then every older version and the files only they used are
        removed. Costs a full index build: for a forget, not for routine upkeep."""
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "removes every version except the latest": wanted here
            self.optimize(cleanup_older_than=timedelta(0))
            for name in (CHUNKS, DOCUMENTS):
                table = self._table(name, create=False)
                if table is None:
                    continue
                for ix in table.list_indices():
                    kind = ix.index_type.upper()
                    config = {"FTS": FTS, "BTREE": BTree, "BITMAP": Bitmap}.get(kind)
                    if config is None or len(ix.columns) != 1:
                        continue  # the ANN vector index: trained again below
                    try:
                        retry_conflicts(lambda t=table, c=ix.columns[0], k=config: t.create_index(
                            c, config=k(), replace=True))()
                    except Exception as exc:  # noqa: BLE001
                        raise StoreError(f"rebuilding the {kind} index on {name}.{ix.columns[0]} at {self.path} "
                                         f"failed: {exc}") from exc
            if self.vector_index() is not None and self.build_vector_index(force=True) is None:
                self._drop_vector_index()  # too few rows left to train one, or training failed: exact scans
            self.optimize(cleanup_older_than=timedelta(0))

    def _drop_vector_index(self) -> None:
        """Remove the ANN index (and its record): vector search scans every row until one is trained again."""
        table = self._table(CHUNKS, create=False)
        if table is None:
            return
        for ix in table.list_indices():
            if ix.columns == ["vector"]:
                try:
                    retry_conflicts(lambda n=ix.name: table.drop_index(n))()
                except Exception as exc:  # noqa: BLE001
                    raise StoreError(f"dropping the vector index at {self.path} failed: {exc}") from exc
        (self.path / VECTOR_INDEX_META).unlink(missing_ok=True)

    def index_new_chunks(self) -> int:
        """Fold the chunks written since the last optimize into the BM25 index now (:meth:`optimize`), so the searches
        that follow stop flat-scanning them: every unindexed chunk costs every BM25 query time, and folding them in
        costs a fraction of a second (docs/retrieval.md, bench/store_index.py). How many chunks were waiting; 0 when
        none were, or when another process is optimizing right now (it folds them in)."""
        waiting = self.unindexed_chunks()
        if waiting == 0:
            return 0
        try:
            with self._lock_now(OPTIMIZE_LOCK):
                self.optimize()
        except Timeout:
            return 0
        return waiting

    def _maybe_optimize(self) -> None:
        """After a write: optimize once ``auto_optimize_rows`` chunks are unindexed, unless another
        process is already at it. Never fails the write that triggered it."""
        if self.auto_optimize_rows is None:
            return
        try:
            if self.unindexed_chunks() < self.auto_optimize_rows:
                return
            with self._lock_now(OPTIMIZE_LOCK):
                # a writer that found this lock taken left its rows to the holder: they were committed before it
                # tried the lock, so the holder's check after optimizing sees them and folds them in too
                for _ in range(5):
                    self.optimize()
                    if self.unindexed_chunks() < self.auto_optimize_rows:
                        break
        except Timeout:
            return  # someone else is optimizing right now
        except Exception:  # noqa: BLE001 - the data is written; a slow index is not an error
            log.warning("automatic optimize of %s failed; search stays correct but slower", self.path,
                        exc_info=True)
