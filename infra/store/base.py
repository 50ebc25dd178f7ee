"""The store contract: chunks with vectors, BM25 / vector / hybrid search, a document registry.

Implementations: LanceDB (embedded default), Weaviate (a lab's shared library). The same contract tests run on each.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field, model_validator

from infra.errors import StoreError

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
    references: tuple[str, ...] = Field(
        default=(), description="The paper's reference list, one entry per cited work, as printed (kept apart: "
                                "never evidence, for later citation use).")


class Hit(_Record):
    chunk: ChunkRecord
    score: float


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


@runtime_checkable
class Store(Protocol):
    name: str

    # documents and the registry
    def upsert_document(self, doc: DocumentRecord, chunks: Sequence[ChunkRecord],
                        vectors: Sequence[Sequence[float]]) -> None:
        """Store a document and its chunks, replacing any earlier version with the same key or doc_id.
        Readers never see a document without its chunks (registry row written last)."""
        ...

    # Optional, recommended for bulk loads (LanceStore has it; see :func:`upsert_documents` below):
    #     def upsert_documents(self, items: Sequence[tuple[DocumentRecord, Sequence[ChunkRecord],
    #                                                     Sequence[Sequence[float]]]]) -> None
    # Same result as calling upsert_document for each item, written in one batch. All or nothing:
    # a bad item, or two items with the same doc_id or key, raises StoreError before anything is
    # written, and a failed write registers none of the items. It is not a Protocol member, so a
    # store without it still satisfies ``isinstance(x, Store)``; callers use upsert_documents().

    def get_document(self, doc_id: str) -> DocumentRecord | None: ...
    def document_by_key(self, key: str) -> DocumentRecord | None: ...
    def list_documents(self) -> list[DocumentRecord]: ...
    def delete_document(self, doc_id: str) -> None: ...
    def document_ids(self, flt: ChunkFilter) -> list[str]:
        """Ids of the registered documents meeting the filter's document conditions (doc_ids,
        years, sources; the chunk conditions are ignored), sorted."""
        ...

    # chunks
    def get_chunk(self, chunk_id: str) -> ChunkRecord | None: ...
    def count_chunks(self, doc_id: str | None = None) -> int: ...
    def sections(self, doc_id: str) -> list[str]: ...
    def chunks(self, flt: ChunkFilter, limit: int = 50) -> list[ChunkRecord]:
        """Chunks matching the filter in document order (doc, ordinal)."""
        ...

    def export_documents(self, doc_ids: Sequence[str] | None = None) -> Iterator[
            tuple[DocumentRecord, list[ChunkRecord], list[list[float]]]]:
        """Every document (or those of ``doc_ids`` that exist, in that order) with its chunks in ordinal order
        and their vectors: what a migration or a metadata fix writes back."""
        ...

    # search
    def bm25(self, query: str, k: int, flt: ChunkFilter | None = None) -> list[Hit]: ...
    def vector(self, vector: Sequence[float], k: int, flt: ChunkFilter | None = None) -> list[Hit]: ...
    def hybrid(self, query: str, vector: Sequence[float], k: int, alpha: float = 0.5,
               flt: ChunkFilter | None = None) -> list[Hit]:
        """Fuse BM25 and vector results; alpha=1 is pure vector, alpha=0 pure BM25."""
        ...


def documents_named(store: Store, doc_ids: Sequence[str] | None) -> list[DocumentRecord]:
    """The registered documents of ``doc_ids`` in that order (unknown ids left out); all of them for None."""
    if doc_ids is None:
        return store.list_documents()
    return [doc for doc_id in doc_ids if (doc := store.get_document(doc_id)) is not None]


METADATA_FIELDS = frozenset({"title", "authors", "year", "origin"})


def update_metadata(store: Store, doc_id: str, changes: dict[str, object]) -> DocumentRecord:
    """Rewrite a stored document's bibliographic fields (``title``, ``authors``, ``year``, ``origin``) by
    writing it back with its own chunks and vectors through :meth:`Store.upsert_document` (one atomic
    write; the chunks' search text, which holds the title, follows). The vectors are kept: their context
    line read the old title. StoreError when the document is not stored or a field is not one of these."""
    unknown = sorted(set(changes) - METADATA_FIELDS)
    if unknown:
        raise StoreError(f"not a bibliographic field: {', '.join(unknown)} "
                         f"(one of {', '.join(sorted(METADATA_FIELDS))})", retryable=False)
    found = next(iter(store.export_documents([doc_id])), None)
    if found is None:
        raise StoreError(f"no document {doc_id[:16]} in the store", retryable=False)
    doc, chunks, vectors = found
    updated = DocumentRecord.model_validate({**doc.model_dump(), **changes})
    store.upsert_document(updated, chunks, vectors)
    return updated


def upsert_documents(store: Store, items: Sequence[tuple[DocumentRecord, Sequence[ChunkRecord],
                                                         Sequence[Sequence[float]]]]) -> None:
    """Store many documents: the store's own batch ``upsert_documents`` (one write, all or
    nothing) when it has one, else ``upsert_document`` per item (which stops at the first failure,
    the items before it stored)."""
    batch = getattr(store, "upsert_documents", None)
    if callable(batch):
        batch(items)
        return
    for doc, chunks, vectors in items:
        store.upsert_document(doc, chunks, vectors)
