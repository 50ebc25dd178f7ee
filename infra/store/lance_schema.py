"""The LanceDB store's table layout: the Arrow schemas of its ``chunks`` and ``documents`` tables, the columns an
older table gains when opened, and the sentence-window column (stored in half precision, compared by cosine)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
from lancedb.table import Table

from infra.store.base import ChunkRecord
from infra.store.lance_index import CHUNKS, SEARCH_TEXT

CHUNK_COLUMNS = list(ChunkRecord.model_fields)  # the chunk record's fields, as the chunks table stores them

# each chunk's sentence-window vectors (a list of vectors, maybe empty): vector search re-scores its candidates by the
# best of the chunk's own and its windows' similarity (docs/retrieval.md, "Sentence windows"). A store written before
# this column existed has none: its chunks are scored by their own vector, as they were.
WINDOWS = "windows"


def missing_columns(name: str, table: Table) -> list[pa.Field]:
    """The fields of :data:`ADDED_COLUMNS` (and, for the chunks, :data:`WINDOWS`) a table written by an older Forage
    lacks."""
    added = ADDED_COLUMNS.get(name, ())
    dim = getattr(table.schema.field("vector").type, "list_size", None) if name == CHUNKS else None
    if dim:  # (a table of another layout is refused by the dimension check, not changed here)
        added = (*added, chunk_schema(int(dim)).field(WINDOWS))
    return [f for f in added if f.name not in table.schema.names]


def chunk_schema(dim: int) -> pa.Schema:
    """Arrow schema of the ``chunks`` table for vectors of ``dim`` floats."""
    return pa.schema([
        pa.field("chunk_id", pa.string(), nullable=False),
        pa.field("doc_id", pa.string(), nullable=False),
        pa.field("ordinal", pa.int32(), nullable=False),
        pa.field("text", pa.string(), nullable=False),
        pa.field("section_path", pa.string(), nullable=False),
        pa.field("section_kind", pa.string(), nullable=False),
        pa.field("char_start", pa.int64(), nullable=False),
        pa.field("char_end", pa.int64(), nullable=False),
        pa.field("token_count", pa.int32(), nullable=False),
        pa.field("pages", pa.list_(pa.int32())),
        pa.field("vector", pa.list_(pa.float32(), dim)),
        pa.field(SEARCH_TEXT, pa.string(), nullable=False),
        pa.field("context", pa.string()),
        # half precision: the windows are most of a store's bytes (about 4 per chunk) and only re-score candidates;
        # SciFact nDCG@10 is the same to four decimals as with float32 (docs/retrieval.md)
        pa.field(WINDOWS, pa.list_(pa.list_(pa.float16(), dim))),
    ])


# what a reader weighs a paper by (messages.search.WEIGHT_FIELDS); null in a table written before them
WEIGHT_COLUMNS = (pa.field("is_retracted", pa.bool_()), pa.field("cited_by_count", pa.int64()),
                  pa.field("oa_status", pa.string()), pa.field("preprint_only", pa.bool_()))
# its DOI and arXiv id; null in a table written before them (read back from the origin: DocumentRecord)
IDENTIFIER_COLUMNS = (pa.field("doi", pa.string()), pa.field("arxiv_id", pa.string()))
DOCUMENT_SCHEMA = pa.schema([
    pa.field("doc_id", pa.string(), nullable=False),
    pa.field("key", pa.string(), nullable=False),
    pa.field("title", pa.string(), nullable=False),
    pa.field("authors", pa.list_(pa.string())),
    pa.field("year", pa.int32()),
    pa.field("abstract", pa.string()),
    pa.field("sections", pa.list_(pa.string())),
    pa.field("markdown", pa.string()),
    pa.field("parser", pa.string()),
    pa.field("flags", pa.list_(pa.string())),
    pa.field("n_chunks", pa.int32()),
    pa.field("origin", pa.string()),
    pa.field("references", pa.list_(pa.string())),
    pa.field("venue", pa.string()),
    pa.field("venue_kind", pa.string()),
    *WEIGHT_COLUMNS,
    *IDENTIFIER_COLUMNS,
])
# columns added after the first release: an older table gains them (all null) when opened
ADDED_COLUMNS: dict[str, tuple[pa.Field, ...]] = {
    "chunks": (pa.field("context", pa.string()),),
    "documents": (pa.field("references", pa.list_(pa.string())), pa.field("venue", pa.string()),
                  pa.field("venue_kind", pa.string()), *WEIGHT_COLUMNS, *IDENTIFIER_COLUMNS),
}


def window_column(windows: Sequence[np.ndarray], dim: int) -> pa.ListArray:
    """The :data:`WINDOWS` column of rows whose window vectors are ``windows[i]`` (an ``(n, dim)`` array each, n may
    be 0; none zero: :meth:`Store.checked_windows`), straight from the arrays: each vector scaled to unit length
    (they are only compared by cosine; no value then overflows half precision), in half precision."""
    counts = np.fromiter((len(w) for w in windows), dtype=np.int32, count=len(windows))
    offsets = np.concatenate([np.zeros(1, dtype=np.int32), np.cumsum(counts, dtype=np.int32)])
    filled = [np.asarray(w, dtype=np.float32).reshape(-1, dim) for w in windows if len(w)]
    flat = np.concatenate(filled) if filled else np.zeros((0, dim), dtype=np.float32)
    flat = (flat / np.linalg.norm(flat, axis=1, keepdims=True)).astype(np.float16) if len(flat) else flat
    values = pa.FixedSizeListArray.from_arrays(pa.array(flat.reshape(-1), type=pa.float16()), dim)
    return pa.ListArray.from_arrays(pa.array(offsets, type=pa.int32()), values)


def window_similarity(windows: pa.ChunkedArray | pa.Array, query: np.ndarray) -> np.ndarray:
    """Per row of a ``windows`` column (a list of vectors each), the best cosine similarity of one of them to
    ``query``; -inf for a row without windows (null or empty)."""
    column = windows.combine_chunks() if isinstance(windows, pa.ChunkedArray) else windows
    n = len(column)
    best = np.full(n, -np.inf)
    if n == 0:
        return best
    column = column.fill_null([])
    offsets = np.asarray(column.offsets)
    flat = column.flatten()  # FixedSizeList of every window, in row order
    if len(flat) == 0:
        return best
    dim = flat.type.list_size
    vectors = np.asarray(flat.flatten()).astype(np.float32, copy=False).reshape(len(flat), dim)
    norms = np.linalg.norm(vectors, axis=1)
    sims = (vectors @ query) / (np.where(norms > 0, norms, 1.0) * (np.linalg.norm(query) or 1.0))
    counts = np.diff(offsets)
    rows = np.flatnonzero(counts)
    best[rows] = np.maximum.reduceat(sims, offsets[:-1][rows] - offsets[0])
    return best
