"""The store contract: chunks with vectors, BM25 / vector / hybrid search, a document registry.

Implementations: LanceDB (embedded default), Weaviate (a lab's shared library). The same contract tests run on each.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Literal

import numpy as np

from pydantic import BaseModel, ConfigDict, Field, model_validator

from infra.errors import StoreError
from infra.store.meta import LibraryMeta
from messages.search import OaStatus, VenueKind

SectionKind = Literal["title", "abstract", "body", "references", "caption"]
RRF_K = 60  # the usual constant of reciprocal-rank fusion (the LanceDB store's hybrid, the Forager's paper ranking)


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ChunkRecord(_Record):
    chunk_id: str = Field(description="'<doc_id[:16]>:<ordinal>' — stable for the same file bytes.")
    doc_id: str
    ordinal: int = Field(ge=0)
    text: str
    section_path: str = Field(description="'Methods > Data Collection > Preprocessing'.")
    section_kind: SectionKind = "body"
    char_start: int = Field(ge=0, description="Offset into the document's stored Markdown.")
    char_end: int = Field(ge=0)
    token_count: int = Field(ge=0)
    pages: tuple[int, ...] = ()
    context: str = Field(default="", description="Contextual retrieval: what an LLM wrote to situate the chunk in "
                                                 "its paper. Put before the text for embedding and BM25; never "
                                                 "part of ``text`` (citations quote ``text``).")


class DocumentRecord(_Record):
    doc_id: str = Field(description="sha256 of the source file bytes.")
    key: str = Field(description="Where it came from: 'file:/abs/path', 'doi:…' — a changed file keeps its key.")
    title: str
    authors: tuple[str, ...] = ()
    year: int | None = None
    abstract: str = ""
    sections: tuple[str, ...] = ()
    markdown: str
    parser: str
    flags: tuple[str, ...] = ()
    n_chunks: int = 0
    origin: str = Field(default="", description="File name, DOI or URL shown in the report.")
    doi: str = Field(default="", description="Its DOI, lower-cased ('' when not known).")
    arxiv_id: str = Field(default="", description="Its arXiv id, without version ('' when not known).")
    venue: str = Field(default="", description="The journal or proceedings it appeared in ('' when not known).")
    venue_kind: VenueKind = Field(default="", description="'journal', 'conference' or '' (see messages.search).")
    references: tuple[str, ...] = Field(
        default=(), description="The paper's reference list, one entry per cited work, as printed (kept apart: "
                                "never evidence, for later citation use).")
    is_retracted: bool = Field(default=False, description="OpenAlex marks the work retracted.")
    cited_by_count: int | None = Field(default=None, ge=0, description="Works citing it (OpenAlex; None: not known).")
    oa_status: OaStatus = Field(default="", description="Open-access status ('' when not known).")
    preprint_only: bool = Field(default=False, description="Only a preprint of it exists.")

    @model_validator(mode="before")
    @classmethod
    def _identifiers_of_an_older_record(cls, data: object) -> object:
        """A record stored before the DOI and arXiv id had fields of their own (their columns read back null) named
        them only in its origin ("paper.pdf, doi:10.…, arXiv:…", as the ingest wrote it): taken from there."""
        if not isinstance(data, dict):
            return data
        doi, arxiv_id = data.get("doi") or "", data.get("arxiv_id") or ""
        if not (doi or arxiv_id):
            named = origin_identifiers(str(data.get("origin") or ""))
            doi, arxiv_id = (named[0] or "").lower(), named[1] or ""
        return {**data, "doi": doi, "arxiv_id": arxiv_id}


def origin_identifiers(origin: str) -> tuple[str | None, str | None]:
    """(DOI, arXiv id) an origin names in the parts the ingest writes ("doi:…", "arXiv:…"), None for each it does
    not."""
    parts = [p.strip() for p in origin.split(", ")]
    return (next((p[4:] for p in parts if p.lower().startswith("doi:")), None),
            next((p[6:] for p in parts if p.lower().startswith("arxiv:")), None))


class Hit(_Record):
    chunk: ChunkRecord
    score: float


def search_text(title: str, chunk: ChunkRecord) -> str:
    """What BM25 indexes for a chunk: '<title> — <section path>' (the path left out when it is the
    title or empty), a newline, the chunk's LLM context and a newline when it has one (contextual
    retrieval), then the chunk text. Mirrors what the embedder reads. Both stores index
    it (Weaviate stemmed)."""
    title = " ".join(title.split())
    path = " ".join(chunk.section_path.split())
    head = " — ".join(p for p in (title, "" if path == title else path) if p)
    context = " ".join(chunk.context.split())
    body = f"{context}\n{chunk.text}" if context else chunk.text
    return f"{head}\n{body}" if head else body


class ChunkFilter(_Record):
    """Which chunks a read or search may return. ``doc_ids``, ``year_min``/``year_max`` and
    ``sources`` are conditions on the chunk's document (read from the registry: chunks carry no
    year or key); the others are conditions on the chunk itself. All conditions must hold."""

    doc_ids: tuple[str, ...] | None = None
    section_path: str | None = Field(default=None, description="Exact path, or prefix when it ends with '*'.")
    exclude_chunk_ids: tuple[str, ...] = ()
    exclude_kinds: tuple[SectionKind, ...] = ("references",)
    year_min: int | None = Field(default=None, description="Only documents published in or after this year; "
                                                           "a document with no recorded year is left out.")
    year_max: int | None = Field(default=None, description="Only documents published in or before this year; "
                                                           "a document with no recorded year is left out.")
    sources: tuple[str, ...] | None = Field(
        default=None, description="Only documents whose key (where they came from) starts with one of these: a "
                                  "bare name ('file', 'zotero', 'zotero-csv', 'doi', 'arxiv', 'openalex') means "
                                  "'<name>:'; a prefix holding ':' is taken as written ('file:/data/papers/': "
                                  "the PDFs under that folder). () matches nothing.")

    @model_validator(mode="after")
    def _years_in_order(self) -> ChunkFilter:
        if self.year_min is not None and self.year_max is not None and self.year_min > self.year_max:
            raise ValueError(f"year_min {self.year_min} is after year_max {self.year_max}")
        return self

    @property
    def by_document(self) -> bool:
        """Whether the filter has conditions only the registry can answer (years, sources)."""
        return self.year_min is not None or self.year_max is not None or self.sources is not None

    def key_prefixes(self) -> tuple[str, ...] | None:
        """``sources`` as key prefixes ('arxiv' → 'arxiv:'); None when sources are not filtered."""
        if self.sources is None:
            return None
        return tuple(s if ":" in s else f"{s}:" for s in self.sources)

    def admits(self, doc: DocumentRecord) -> bool:
        """Whether ``doc`` meets the document conditions (doc_ids, years, sources)."""
        if self.doc_ids is not None and doc.doc_id not in self.doc_ids:
            return False
        if self.year_min is not None and (doc.year is None or doc.year < self.year_min):
            return False
        if self.year_max is not None and (doc.year is None or doc.year > self.year_max):
            return False
        prefixes = self.key_prefixes()
        return prefixes is None or any(doc.key.startswith(p) for p in prefixes)

    def narrowed(self, doc_ids: Sequence[str]) -> ChunkFilter:
        """This filter with its registry conditions replaced by the ids of the documents that meet
        them (``doc_ids``, already read from the registry): a filter on chunk columns only."""
        return self.model_copy(update={"doc_ids": tuple(sorted(set(doc_ids))), "year_min": None, "year_max": None,
                                       "sources": None})


#: One document's write: the document, its chunks and one vector per chunk; optionally a fourth element, each chunk's
#: window vectors (its sentence windows embedded on their own: the vector search re-scores its candidates with them,
#: :meth:`Store.checked_windows`). A store that keeps no windows ignores them.
Vectors = Sequence[Sequence[float]]
Upsert = (tuple[DocumentRecord, Sequence[ChunkRecord], Vectors]
          | tuple[DocumentRecord, Sequence[ChunkRecord], Vectors, Sequence[Vectors]])
FUSIONS = ("relative_score", "rrf")


class Store(ABC):
    """What every store backend implements, with the checks they share written once here: a write's vectors and
    chunks (:meth:`checked_batch`), a query vector (:meth:`checked_vector`) and a hybrid search's arguments
    (:meth:`check_hybrid`). Bad input raises :class:`StoreError` (not retryable) before anything is written."""

    name: str
    dim: int
    keeps_windows: bool = False  # whether it stores window vectors (Upsert's fourth element) and scores with them
    embed_model: str | None  # the model whose vectors it holds (None: not recorded yet)

    # -- the shared checks ------------------------------------------------------------------------
    def checked_vectors(self, vectors: Sequence[Sequence[float]], n: int) -> np.ndarray:
        """``vectors`` as an (n, dim) float32 array: exactly ``n`` of them, each of this store's size, finite and
        not zero (cosine search needs a direction)."""
        if len(vectors) != n:
            raise StoreError(f"got {len(vectors)} vectors for {n} chunks; they must pair up one to one",
                             retryable=False)
        if n == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
        for i, vec in enumerate(vectors):
            if len(vec) != self.dim:
                raise StoreError(f"vector {i} has {len(vec)} dimensions; this store holds {self.dim}",
                                 retryable=False)
        array = np.asarray(vectors, dtype=np.float32).reshape(n, self.dim)
        bad = ~np.isfinite(array).all(axis=1) | (np.linalg.norm(array, axis=1) == 0)
        if bad.any():
            raise StoreError(f"vector {int(np.argmax(bad))} is zero or not finite; cosine search needs a direction",
                             retryable=False)
        return array

    def checked_vector(self, vector: Sequence[float]) -> np.ndarray:
        """A query vector, checked as a stored one is."""
        return self.checked_vectors([vector], 1)[0]

    def checked_batch(self, items: Sequence[Upsert]
                      ) -> tuple[list[DocumentRecord], list[np.ndarray], list[list[np.ndarray]]]:
        """The documents of one write (``n_chunks`` set), each one's vectors as an array and its chunks' window
        vectors (:meth:`checked_windows`), once every item is checked: vectors and windows paired with chunks, no
        chunk id twice in a document, no chunk of another document, no doc_id or key twice in the write."""
        docs: list[DocumentRecord] = []
        arrays: list[np.ndarray] = []
        for doc, chunks, vectors, *_ in items:
            arrays.append(self.checked_vectors(vectors, len(chunks)))
            ids = [c.chunk_id for c in chunks]
            if len(set(ids)) != len(ids):
                raise StoreError(f"document {doc.doc_id[:16]} has duplicate chunk ids", retryable=False)
            strangers = sorted({c.doc_id for c in chunks} - {doc.doc_id})
            if strangers:
                raise StoreError(f"chunks of document(s) {strangers} passed with document {doc.doc_id[:16]}",
                                 retryable=False)
            docs.append(doc.model_copy(update={"n_chunks": len(chunks)}))
        for field_name in ("doc_id", "key"):
            values = [getattr(d, field_name) for d in docs]
            if len(set(values)) != len(values):
                twice = sorted(v for v, n in Counter(values).items() if n > 1)
                raise StoreError(f"one write holds several documents with the same {field_name}: "
                                 f"{', '.join(t[:40] for t in twice[:3])}", retryable=False)
        return docs, arrays, self.checked_windows(items)

    def checked_windows(self, items: Sequence[Upsert]) -> list[list[np.ndarray]]:
        """Each item's window vectors, per chunk a (windows, dim) float32 array (none: (0, dim)), each window checked
        as a chunk's vector is; an item without windows gives empty arrays."""
        out: list[list[np.ndarray]] = []
        for item in items:
            chunks = item[1]
            given = item[3] if len(item) > 3 else None  # type: ignore[misc]
            windows: Sequence[Sequence[Sequence[float]]] = [()] * len(chunks) if given is None else given
            if len(windows) != len(chunks):
                raise StoreError(f"got windows for {len(windows)} chunks of {len(chunks)}; they must pair up one "
                                 "to one", retryable=False)
            out.append([self.checked_vectors(w, len(w)) for w in windows])
        return out

    def check_hybrid(self, alpha: float, fusion: str, vector: Sequence[float]) -> np.ndarray:
        """A hybrid search's weight, fusion and query vector (bad input fails the same way whatever alpha is)."""
        if not 0.0 <= alpha <= 1.0:
            raise StoreError(f"alpha must be within [0, 1], got {alpha}", retryable=False)
        if fusion not in FUSIONS:
            raise StoreError(f"unknown fusion {fusion!r}; use one of {', '.join(FUSIONS)}", retryable=False)
        return self.checked_vector(vector)

    # -- documents and the registry ---------------------------------------------------------------
    def upsert_document(self, doc: DocumentRecord, chunks: Sequence[ChunkRecord],
                        vectors: Sequence[Sequence[float]],
                        windows: Sequence[Sequence[Sequence[float]]] | None = None) -> None:
        """Store a document and its chunks (and each chunk's window vectors, see :data:`Upsert`), replacing any
        earlier version with the same key or doc_id. Readers never see a document without its chunks (registry row
        written last)."""
        self.upsert_documents([(doc, chunks, vectors) if windows is None else (doc, chunks, vectors, windows)])

    @abstractmethod
    def upsert_documents(self, items: Sequence[Upsert]) -> None:
        """Store many documents as :meth:`upsert_document` does, in one write. All or nothing: a bad item
        (:meth:`checked_batch`) raises before anything is written, and a failed write registers none of them."""

    def open(self) -> None:
        """Connect and open the tables now rather than on first use (an actor does it before its first request);
        a store with nothing stored yet opens nothing."""
        self.count_chunks()

    def close(self) -> None:
        """Let go of connections held open (a server's client); nothing for a store of files."""

    def optimize(self) -> None:
        """Compact what many small writes left behind and rebuild the search indexes where the backend keeps them
        itself (a bulk load's end); nothing for a backend that does this on its own."""

    def purge_deleted(self) -> None:
        """Remove what deleted documents left behind (old table versions, index entries), so a forgotten document
        leaves no trace on disk. A store that removes deleted objects itself has nothing to do."""

    def index_new_chunks(self) -> int:
        """Make the chunks written so far searchable at full speed before a search-heavy stage (the crew runs it
        after each batch's ingestion); how many chunks it folded in. A store that indexes every write
        as it happens (Weaviate) has nothing to do."""
        return 0

    @abstractmethod
    def get_document(self, doc_id: str) -> DocumentRecord | None: ...
    @abstractmethod
    def get_documents(self, doc_ids: Sequence[str]) -> list[DocumentRecord]:
        """The registered documents of ``doc_ids`` in that order, each once (unknown ids left out): one
        read for all of them."""
    @abstractmethod
    def document_by_key(self, key: str) -> DocumentRecord | None: ...
    @abstractmethod
    def list_documents(self) -> list[DocumentRecord]: ...
    @abstractmethod
    def delete_document(self, doc_id: str) -> None: ...
    @abstractmethod
    def document_ids(self, flt: ChunkFilter) -> list[str]:
        """Ids of the registered documents meeting the filter's document conditions (doc_ids,
        years, sources; the chunk conditions are ignored), sorted."""

    # -- chunks ------------------------------------------------------------------------------------
    @abstractmethod
    def get_chunk(self, chunk_id: str) -> ChunkRecord | None: ...
    @abstractmethod
    def count_chunks(self, doc_id: str | None = None) -> int: ...
    @abstractmethod
    def sections(self, doc_id: str) -> list[str]: ...
    @abstractmethod
    def chunks(self, flt: ChunkFilter, limit: int = 50) -> list[ChunkRecord]:
        """Chunks matching the filter in document order (doc, ordinal)."""

    @abstractmethod
    def export_documents(self, doc_ids: Sequence[str] | None = None) -> Iterator[
            tuple[DocumentRecord, list[ChunkRecord], list[list[float]]]]:
        """Every document (or those of ``doc_ids`` that exist, in that order) with its chunks in ordinal order
        and their vectors: what a migration or a metadata fix writes back."""

    def windows_of(self, doc_id: str) -> list[list[list[float]]] | None:
        """The window vectors of a stored document's chunks, in ordinal order (what a migration or a metadata fix
        writes back beside :meth:`export_documents`); None when this store keeps none."""
        return None

    @abstractmethod
    def library_meta(self) -> LibraryMeta | None:
        """What the library records of itself (its embedding model), or None before the first write."""

    # -- search ------------------------------------------------------------------------------------
    @abstractmethod
    def similarity(self, vector: Sequence[float], chunk_ids: Sequence[str]) -> dict[str, float]:
        """chunk id -> the score :meth:`vector` gives that chunk for ``vector`` (the cosine of its own vector, or on a
        store that :attr:`keeps_windows` the best of its own and its windows'), for each of ``chunk_ids`` the store
        holds (others are left out), whatever their kind: no search, the stored vectors are read and compared."""

    @abstractmethod
    def bm25(self, query: str, k: int, flt: ChunkFilter | None = None) -> list[Hit]: ...
    @abstractmethod
    def vector(self, vector: Sequence[float], k: int, flt: ChunkFilter | None = None) -> list[Hit]: ...
    @abstractmethod
    def hybrid(self, query: str, vector: Sequence[float], k: int, alpha: float = 0.5,
               flt: ChunkFilter | None = None) -> list[Hit]:
        """Fuse BM25 and vector results; alpha=1 is pure vector, alpha=0 pure BM25."""


def documents_named(store: Store, doc_ids: Sequence[str] | None) -> list[DocumentRecord]:
    """The registered documents of ``doc_ids`` in that order (unknown ids left out); all of them for None."""
    if doc_ids is None:
        return store.list_documents()
    return store.get_documents(doc_ids)


METADATA_FIELDS = frozenset({"title", "authors", "year", "origin", "doi", "arxiv_id", "venue", "venue_kind",
                             "is_retracted", "cited_by_count", "oa_status", "preprint_only"})


def update_metadata(store: Store, doc_id: str, changes: dict[str, object],
                    add_flags: Sequence[str] = ()) -> DocumentRecord:
    """Rewrite a stored document's bibliographic fields (:data:`METADATA_FIELDS`), and add ``add_flags`` to its
    flags, by writing it back with its own chunks, vectors and window vectors through
    :meth:`Store.upsert_document` (one atomic write; the chunks' search text, which holds the title, follows). The
    vectors are kept: their context line read the old title. StoreError when the document is not stored or a field
    is not one of these."""
    unknown = sorted(set(changes) - METADATA_FIELDS)
    if unknown:
        raise StoreError(f"not a bibliographic field: {', '.join(unknown)} "
                         f"(one of {', '.join(sorted(METADATA_FIELDS))})", retryable=False)
    found = next(iter(store.export_documents([doc_id])), None)
    if found is None:
        raise StoreError(f"no document {doc_id[:16]} in the store", retryable=False)
    doc, chunks, vectors = found
    updated = DocumentRecord.model_validate({**doc.model_dump(), **changes,
                                             "flags": tuple(dict.fromkeys((*doc.flags, *add_flags)))})
    store.upsert_document(updated, chunks, vectors, store.windows_of(doc_id))
    return updated

