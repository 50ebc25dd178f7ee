"""The embedded LanceDB store: chunks with vectors, native BM25, cosine vector search, hybrid fusion.

Layout on disk: one LanceDB folder holding two tables.

* ``chunks`` — one row per :class:`ChunkRecord` plus ``vector`` (``fixed_size_list<float32>[dim]``)
  and ``search_text``: the document's context line (title, and the section path when it says more)
  above the chunk text (:func:`~infra.store.base.search_text`). A native (Lance) full-text index on ``search_text``
  serves BM25, so a paper's title counts for every one of its chunks; ``text`` itself is stored
  unchanged (citations quote it). A store written before ``search_text`` existed keeps its BM25
  index on ``text``. Rows written after the index was
  built are *not* in the index until :meth:`LanceStore.optimize` runs, but LanceDB searches those
  unindexed rows with a flat BM25 scan, so fresh chunks are always found.
* ``documents`` — the registry, one row per :class:`DocumentRecord`.

B-tree scalar indexes on ``chunks.chunk_id``, ``chunks.doc_id``, ``documents.doc_id`` and
``documents.key`` keep the per-document replace and the registry look-ups from scanning the tables
(created when a table is opened or created, so an older store gains them too).

Write order (``upsert_document``, and ``upsert_documents`` for many documents in one write): the
documents' chunks are replaced in ONE atomic commit
(``merge_insert`` on ``chunk_id`` that also deletes the document's stale chunks), then the registry
row is written, then chunks of a replaced older version (same key, other doc_id) are deleted. A
reader therefore never sees a registered document without its chunks. If the registry write
fails, freshly written chunks of a new document are removed again and :class:`StoreError` is raised.

Several processes may write the same folder at once (Ingestor actors): Lance commits are
optimistic and conflicting commits are retried by Lance itself; a commit conflict that still
escapes is retried here (tenacity). Lance does not stop two writers from inserting the same new
``chunk_id`` at once, so writes of one document (or one key) are serialized across processes with
a file lock (one of 64 lock stripes under ``<store>/_locks``); different documents go in
parallel. Readers in other processes see new commits at once because the connection checks for
new table versions on every read (``read_consistency_interval=0``). The locks assume a local
file system (flock); a store on NFS or object storage needs another writer coordination.

Search: BM25 and vector search run with prefiltering (SQL where-clauses built by
:func:`~infra.store.lance_sql.filter_sql`); vector search is exact (flat) cosine, fine for tens of thousands of chunks.
Filters on the document (year range, source: the key's prefix) are answered by the registry
first (:func:`~infra.store.lance_sql.document_sql`), then applied to the chunks as a doc-id list: chunks carry no year or
key, so an older store needs no new columns. Hits of both sides are fused by :func:`infra.store.fusion.fuse`.

The indexes' upkeep (the BM25, B-tree, bitmap and ANN indexes, folding new rows in, compaction, physical deletes) is
:class:`~infra.store.lance_index.LanceUpkeep`, the tables and locks :class:`~infra.store.lance_tables.LanceTables`, the
searches :class:`~infra.store.lance_search.LanceSearch`: all part of :class:`LanceStore`.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path
from typing import Any

import lancedb
import numpy as np
import pyarrow as pa
from lancedb.query import ColumnOrdering
from lancedb.table import Table

from infra.errors import StoreError
from infra.private_files import private_dir
from infra.store.base import ChunkFilter, ChunkRecord, DocumentRecord, Store, Upsert, documents_named, search_text
from infra.store.fusion import Fusion
from infra.store.lance_index import CHUNKS, DOCUMENTS, SEARCH_TEXT, LanceUpkeep, VectorIndexType, retry_conflicts
from infra.store.lance_schema import CHUNK_COLUMNS, DOCUMENT_SCHEMA, WINDOWS, chunk_schema, window_column
from infra.store.lance_search import LanceSearch
from infra.store.lance_sql import document_sql, filter_sql, sql_list, sql_str
from infra.store.lance_tables import LanceTables

log = logging.getLogger(__name__)


VECTOR_INDEX_ROWS = 50_000  # below this many chunks an exact (flat) vector scan is fast enough (bench/search_scale.py)

_DOC_COLUMNS = list(DocumentRecord.model_fields)
def _reopen(path: Path, dim: int, options: dict[str, Any]) -> LanceStore:
    return LanceStore(path, dim, **options)


def _owner_only(path: Path) -> None:
    """The store folder for its owner only (0700): created so, and an existing one (an older Forage made them
    0755) tightened on open, so other users of the machine cannot read the library's text. A folder that is
    not ours is left as it is (the open then fails or succeeds on its own terms)."""

    try:
        private_dir(path)
        if path.stat().st_mode & 0o077 and path.stat().st_uid == os.getuid():
            os.chmod(path, 0o700)
    except OSError:
        pass


class LanceStore(LanceTables, LanceSearch, LanceUpkeep, Store):
    """The :class:`~infra.store.base.Store` contract on an embedded LanceDB folder.

    Tables are created lazily on the first write; reads on a fresh folder return nothing.
    ``read_consistency``: how stale a read may be with respect to other processes' writes
    (0: always see the latest commit). ``hybrid_candidates``: each side of a hybrid search
    contributes ``k * hybrid_candidates`` hits. ``auto_optimize_rows``: once this many chunks sit
    outside the BM25 index (flat-scanned, slower with every row), an upsert runs :meth:`optimize`
    (skipped while another process optimizes; None turns it off).

    ``vector_index_rows``: once the chunk table holds this many rows, :meth:`optimize` trains an approximate
    nearest-neighbour index on the vectors (``vector_index_type``, cosine; :meth:`build_vector_index`), and trains
    it again when the table has grown fourfold since; rows added in between are folded into it by ``optimize``
    and found by an exact scan until then. Filters (doc ids, kinds, sections) are applied before the index is
    searched, so they stay exact. None: never (every vector search scans every row). ``ann_nprobes``,
    ``ann_refine`` and ``ann_ef``: how many IVF partitions a query visits, by what factor it re-ranks candidates
    with the full vectors, and the HNSW candidate list (recall against speed; bench/search_scale.py measures them).
    """

    name = "lancedb"
    keeps_windows = True  # each chunk's sentence-window vectors (WINDOWS), for vector search to re-score with

    def __init__(self, path: Path | str, dim: int = 384, *,
                 read_consistency: timedelta = timedelta(0), hybrid_candidates: int = 4,
                 auto_optimize_rows: int | None = 2000, embed_model: str | None = None,
                 vector_index_rows: int | None = VECTOR_INDEX_ROWS, vector_index_type: VectorIndexType = "IVF_HNSW_SQ",
                 ann_nprobes: int = 20, ann_refine: int | None = 10, ann_ef: int | None = None,
                 fusion: Fusion = "relative_score") -> None:
        if dim <= 0:
            raise StoreError(f"vector dimension must be positive, got {dim}", retryable=False)
        self.path = Path(path)
        self.dim = dim
        self.hybrid_candidates = max(1, hybrid_candidates)
        self.fusion: Fusion = fusion  # what hybrid() fuses with when not told
        self.auto_optimize_rows = auto_optimize_rows
        self.embed_model = embed_model
        self.vector_index_rows = vector_index_rows
        self.vector_index_type: VectorIndexType = vector_index_type
        self.ann_nprobes = ann_nprobes
        self.ann_refine = ann_refine
        self.ann_ef = ann_ef
        self.exact_vector = False  # True: scan every row even where an index exists (what recall is measured by)
        self._read_consistency = read_consistency
        _owner_only(self.path)
        try:
            self._db = lancedb.connect(str(self.path), read_consistency_interval=read_consistency)
        except Exception as exc:  # noqa: BLE001 - any failure to open is a store error
            raise StoreError(f"cannot open LanceDB store at {self.path}: {exc}") from exc
        self._tables: dict[str, Table] = {}
        self._sides: ThreadPoolExecutor | None = None

    def __reduce__(self) -> tuple[Any, ...]:
        # table handles hold a runtime that cannot cross processes: ship the recipe instead
        options = {"read_consistency": self._read_consistency, "hybrid_candidates": self.hybrid_candidates,
                   "auto_optimize_rows": self.auto_optimize_rows, "embed_model": self.embed_model,
                   "vector_index_rows": self.vector_index_rows, "vector_index_type": self.vector_index_type,
                   "ann_nprobes": self.ann_nprobes, "ann_refine": self.ann_refine, "ann_ef": self.ann_ef,
                   "fusion": self.fusion}
        return (_reopen, (self.path, self.dim, options))

    def __repr__(self) -> str:
        return f"LanceStore({str(self.path)!r}, dim={self.dim})"

    def export_documents(self, doc_ids: Sequence[str] | None = None) -> Iterator[
            tuple[DocumentRecord, list[ChunkRecord], list[list[float]]]]:
        """Every document with its chunks (ordinal order) and their vectors, by (key, doc_id) (for migration);
        ``doc_ids``: only those documents (for a metadata fix), in that order."""
        for doc in documents_named(self, doc_ids):
            where = f"doc_id = {sql_str(doc.doc_id)}"
            rows = self._read(CHUNKS, where, lambda t, w=where: t.search().where(w)
                              .select([*CHUNK_COLUMNS, "vector"]).to_list(), [])
            rows.sort(key=lambda r: r["ordinal"])
            yield doc, [self._to_chunk(r) for r in rows], [[float(x) for x in r["vector"]] for r in rows]

    def windows_of(self, doc_id: str) -> list[list[list[float]]] | None:
        """The window vectors of the document's chunks in ordinal order (empty lists for a store written before they
        existed)."""
        where = f"doc_id = {sql_str(doc_id)}"

        def run(t: Table) -> list[dict[str, Any]]:
            columns = ["ordinal", *([WINDOWS] if WINDOWS in t.schema.names else [])]
            return t.search().where(where).select(columns).to_list()

        none: list[dict[str, Any]] = []
        rows = sorted(self._read(CHUNKS, where, run, none), key=lambda r: r["ordinal"])
        return [[[float(x) for x in w] for w in (r.get(WINDOWS) or [])] for r in rows]

    # ------------------------------------------------------------------ conversion

    def _chunk_table(self, chunks: Sequence[ChunkRecord], vectors: np.ndarray, titles: Sequence[str],
                     windows: Sequence[np.ndarray], target: pa.Schema | None = None) -> pa.Table:
        """Arrow rows of ``chunks`` (``titles[i]``: the title of chunk i's document, ``windows[i]`` its window
        vectors); with ``target`` (the table's own schema) only the columns it has, in its types (a store written
        before some of them existed, or with float32 windows)."""
        schema = chunk_schema(self.dim)
        columns: dict[str, Any] = {name: [getattr(c, name) for c in chunks] for name in CHUNK_COLUMNS}
        columns["pages"] = [list(c.pages) for c in chunks]
        columns[SEARCH_TEXT] = [search_text(title, c) for title, c in zip(titles, chunks, strict=True)]
        arrays = [pa.FixedSizeListArray.from_arrays(pa.array(vectors.reshape(-1), pa.float32()), self.dim)
                  if f.name == "vector" else window_column(windows, self.dim) if f.name == WINDOWS else
                  pa.array(columns[f.name], type=f.type) for f in schema]
        data = pa.Table.from_arrays(arrays, schema=schema)
        if target is None:
            return data
        kept = [f for f in schema if f.name in set(target.names)]
        data = data.select([f.name for f in kept])
        wanted = pa.schema([target.field(f.name).with_nullable(f.nullable) for f in kept])
        return data if data.schema.equals(wanted) else data.cast(wanted)

    @staticmethod
    def _doc_table(docs: Sequence[DocumentRecord]) -> pa.Table:
        rows = []
        for doc in docs:
            row = doc.model_dump()
            for name in ("authors", "sections", "flags", "references"):
                row[name] = list(row[name])
            rows.append(row)
        return pa.Table.from_pylist(rows, schema=DOCUMENT_SCHEMA)

    @staticmethod
    def _to_chunk(row: dict[str, Any]) -> ChunkRecord:
        data = {name: row[name] for name in CHUNK_COLUMNS}
        data["context"] = data["context"] or ""
        return ChunkRecord(**data)

    @staticmethod
    def _to_doc(row: dict[str, Any]) -> DocumentRecord:
        data = {name: row[name] for name in _DOC_COLUMNS}
        data["references"] = tuple(data["references"] or ())
        data["venue"], data["venue_kind"] = data["venue"] or "", data["venue_kind"] or ""
        data["is_retracted"], data["preprint_only"] = bool(data["is_retracted"]), bool(data["preprint_only"])
        data["oa_status"] = data["oa_status"] or ""
        return DocumentRecord(**data)

    # ------------------------------------------------------------------ documents and the registry

    def upsert_documents(self, items: Sequence[Upsert]) -> None:
        """Store many documents as :meth:`upsert_document` does, in one write: ONE commit replaces
        the chunks of all of them, ONE commit then writes their registry rows, then chunks of the
        versions they replaced are deleted. All or nothing: a bad item (vectors, duplicate chunk
        ids, chunks of another document, two items with the same doc_id or key) raises
        :class:`StoreError` before anything is written, and a failed write registers none of them.
        """
        if not items:
            return
        docs, arrays, per_item = self.checked_batch(items)
        windows = [w for item_windows in per_item for w in item_windows]
        chunk_rows = [c for item in items for c in item[1]]
        titles = [item[0].title for item in items for _ in item[1]]
        vectors = np.concatenate(arrays) if arrays else np.zeros((0, self.dim), dtype=np.float32)
        names = [n for d in docs for n in ("doc:" + d.doc_id, "key:" + d.key)]
        with self._locked(*names):
            self._replace(docs, chunk_rows, vectors, titles, windows)
        self._maybe_optimize()

    def _replace(self, docs: Sequence[DocumentRecord], chunks: Sequence[ChunkRecord], vectors: np.ndarray,
                 titles: Sequence[str], windows: Sequence[np.ndarray]) -> None:
        """Chunks, then registry rows, then the replaced versions' chunks (caller holds the locks)."""
        chunk_table = self._table(CHUNKS, create=True)
        doc_table = self._table(DOCUMENTS, create=True)
        assert chunk_table is not None and doc_table is not None
        doc_ids = [d.doc_id for d in docs]
        keys = [d.key for d in docs]
        what = docs[0].origin or docs[0].key if len(docs) == 1 else f"{len(docs)} documents"
        mine = f"doc_id = {sql_str(doc_ids[0])}" if len(docs) == 1 else f"doc_id IN {sql_list(doc_ids)}"
        their_keys = f"key = {sql_str(keys[0])}" if len(docs) == 1 else f"key IN {sql_list(keys)}"
        chunk_data = self._chunk_table(chunks, vectors, titles, windows, chunk_table.schema)
        doc_data = self._doc_table(docs)
        try:
            earlier = (doc_table.search().where(f"{their_keys} OR {mine}")
                       .select(["doc_id"]).to_arrow().column("doc_id").to_pylist())
        except Exception as exc:  # noqa: BLE001
            raise StoreError(f"cannot read the registry at {self.path}: {exc}") from exc
        new = sorted(set(doc_ids) - set(earlier))
        replaced = sorted(set(earlier) - set(doc_ids))

        # 1. the documents' chunks, replaced in one atomic commit
        try:
            self._write_chunks(chunk_table, chunk_data, mine)
        except Exception as exc:  # noqa: BLE001 - a failed commit leaves the table as it was
            raise StoreError(f"writing {chunk_data.num_rows} chunks of {what} failed; "
                             f"nothing was registered: {exc}") from exc
        # 2. the registry rows, last: each replaces rows with the same doc_id or the same key
        try:
            retry_conflicts(
                lambda: doc_table.merge_insert("doc_id").when_matched_update_all().when_not_matched_insert_all()
                .when_not_matched_by_source_delete(their_keys).execute(doc_data))()
        except Exception as exc:  # noqa: BLE001
            if new:
                self._cleanup(chunk_table, f"doc_id IN {sql_list(new)}")
            raise StoreError(f"registering {what} failed; its chunks were removed: {exc}") from exc
        # 3. chunks of replaced older versions (same key, other bytes)
        if replaced:
            self._cleanup(chunk_table, f"doc_id IN {sql_list(replaced)}")

    @staticmethod
    def _write_chunks(table: Table, data: pa.Table, mine: str) -> None:
        if data.num_rows == 0:
            retry_conflicts(lambda: table.delete(mine))()
            return
        retry_conflicts(
            lambda: table.merge_insert("chunk_id").when_matched_update_all().when_not_matched_insert_all()
            .when_not_matched_by_source_delete(mine).execute(data))()

    def _cleanup(self, table: Table, where: str) -> None:
        """Delete chunks; a failure here leaves orphans (never a registered document without chunks)."""
        try:
            retry_conflicts(lambda: table.delete(where))()
        except Exception:  # noqa: BLE001
            log.exception("could not delete chunks where %s in %s; remove_orphans() cleans them up", where, self.path)

    def open(self) -> None:
        """Open the tables, then search the chunks once each way (one hit, the default filter): a process's first
        full-text and vector queries load Lance's search paths and the table's indexes (about 7 ms more than the
        next query on a small table, measured in one process), which would otherwise fall on a Forager's first
        retrieval, on the way to its first LLM call."""
        for name in (CHUNKS, DOCUMENTS):
            self._table(name, create=False)
        if CHUNKS not in self._tables:
            return
        try:
            self.bm25("search", 1)
            self.vector([1.0] + [0.0] * (self.dim - 1), 1)
        except Exception:  # noqa: BLE001 - a search that fails here fails again, and is reported, when it matters
            log.debug("priming searches of %s failed", self.path, exc_info=True)

    def get_document(self, doc_id: str) -> DocumentRecord | None:
        return self._one_doc(f"doc_id = {sql_str(doc_id)}")

    def document_by_key(self, key: str) -> DocumentRecord | None:
        return self._one_doc(f"key = {sql_str(key)}")

    def get_documents(self, doc_ids: Sequence[str]) -> list[DocumentRecord]:
        wanted = list(dict.fromkeys(doc_ids))
        if not wanted:
            return []
        where = f"doc_id IN {sql_list(wanted)}"
        rows = self._read(DOCUMENTS, where, lambda t: t.search().where(where).limit(len(wanted)).to_list(), [])
        found = {d.doc_id: d for d in map(self._to_doc, rows)}
        return [found[d] for d in wanted if d in found]

    def _one_doc(self, where: str) -> DocumentRecord | None:
        rows = self._read(DOCUMENTS, where, lambda t: t.search().where(where).limit(1).to_list(), [])
        return self._to_doc(rows[0]) if rows else None

    def list_documents(self) -> list[DocumentRecord]:
        """Every registered document, ordered by (key, doc_id)."""
        rows = self._read(DOCUMENTS, "list documents", lambda t: t.search().to_list(), [])
        return sorted((self._to_doc(r) for r in rows), key=lambda d: (d.key, d.doc_id))

    def document_ids(self, flt: ChunkFilter) -> list[str]:
        """Ids of the registered documents meeting the filter's document conditions (doc_ids,
        years, sources), sorted."""
        if flt.doc_ids == () or flt.sources == ():
            return []
        where = document_sql(flt)

        def run(t: Table) -> list[str]:
            query = t.search()
            if where:
                query = query.where(where)
            return [str(d) for d in query.select(["doc_id"]).to_arrow().column("doc_id").to_pylist()]

        none: list[str] = []
        return sorted(self._read(DOCUMENTS, "document ids", run, none))

    def _resolve(self, flt: ChunkFilter) -> ChunkFilter:
        """``flt`` on chunk columns only: its years and sources become the ids of the documents
        that meet them (one registry read), intersected with its doc_ids."""
        return flt.narrowed(self.document_ids(flt)) if flt.by_document else flt

    def _prefilter(self, flt: ChunkFilter) -> str | None:
        """The where-clause on chunks for ``flt`` (:meth:`_resolve`, then :func:`filter_sql`; "" for no condition),
        or None when no document can match (a read of nothing)."""
        flt = self._resolve(flt)
        return None if flt.doc_ids == () else filter_sql(flt) or ""

    def delete_document(self, doc_id: str) -> None:
        """Unregister the document first, then delete its chunks. Unknown ids are a no-op."""
        if not any(name in self._db for name in (DOCUMENTS, CHUNKS)):
            return
        where = f"doc_id = {sql_str(doc_id)}"
        with self._locked("doc:" + doc_id):
            self._delete_where(where, doc_id)

    def _delete_where(self, where: str, doc_id: str) -> None:
        for name in (DOCUMENTS, CHUNKS):
            table = self._table(name, create=False)
            if table is None:
                continue
            try:
                retry_conflicts(lambda t=table: t.delete(where))()
            except Exception as exc:  # noqa: BLE001
                raise StoreError(f"deleting document {doc_id[:16]} from {name} failed: {exc}") from exc

    # ------------------------------------------------------------------ chunks

    def get_chunk(self, chunk_id: str) -> ChunkRecord | None:
        where = f"chunk_id = {sql_str(chunk_id)}"
        rows = self._read(CHUNKS, where,
                          lambda t: t.search().where(where).select(CHUNK_COLUMNS).limit(1).to_list(), [])
        return self._to_chunk(rows[0]) if rows else None

    def count_chunks(self, doc_id: str | None = None) -> int:
        where = None if doc_id is None else f"doc_id = {sql_str(doc_id)}"
        return self._read(CHUNKS, "count chunks", lambda t: t.count_rows(where), 0)

    def sections(self, doc_id: str) -> list[str]:
        """Distinct section paths of the document's chunks, in document order (all kinds)."""
        where = f"doc_id = {sql_str(doc_id)}"
        rows = self._read(CHUNKS, where, lambda t: t.search().where(where)
                          .select(["ordinal", "section_path"]).to_list(), [])
        seen: dict[str, None] = {}
        for row in sorted(rows, key=lambda r: r["ordinal"]):
            seen.setdefault(row["section_path"], None)
        return list(seen)

    def chunks(self, flt: ChunkFilter, limit: int = 50) -> list[ChunkRecord]:
        """Chunks matching the filter in document order (doc_id, ordinal), at most ``limit``."""
        where = self._prefilter(flt) if limit > 0 else None
        if where is None:
            return []
        order = [ColumnOrdering(column_name="doc_id"), ColumnOrdering(column_name="ordinal")]

        def run(t: Table) -> list[dict[str, Any]]:
            query = t.search()
            if where:
                query = query.where(where)
            return query.order_by(order).select(CHUNK_COLUMNS).limit(limit).to_list()

        return [self._to_chunk(r) for r in self._read(CHUNKS, "list chunks", run, [])]

