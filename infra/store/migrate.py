"""Copy a library from one store to another (LanceDB <-> Weaviate, or LanceDB folder to folder).

The target is opened with the embedding model and vector size the source recorded (not the ones
configured now), documents are copied in batches with their chunks and vectors
(:func:`~infra.store.base.upsert_documents`: re-running a migration overwrites, never duplicates),
then every document is checked in the target: registry row, chunk count, and its first chunk's
vector (found by itself, cosine ~1).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict

from infra.errors import StoreError
from infra.store.base import ChunkFilter, ChunkRecord, DocumentRecord, Store, Upsert
from infra.store.meta import LibraryMeta

Item = Upsert


class MigrationReport(BaseModel):
    model_config = ConfigDict(frozen=True)

    documents: int
    chunks: int
    batches: int
    target_documents: int
    problems: tuple[str, ...] = ()


def migrate(source: Store, target: Store, *, batch_documents: int = 16, batch_chunks: int = 2000,
            progress: Callable[[int, int], None] | None = None) -> MigrationReport:
    """Copy every document of ``source`` into ``target``; ``progress(documents_done, chunks_done)``
    after each batch. Raises StoreError when a batch fails (batches before it stay copied)."""
    batch: list[Item] = []
    documents = chunks = batches = 0
    expected: dict[str, tuple[DocumentRecord, int, ChunkRecord | None, list[float] | None]] = {}

    def flush() -> None:
        nonlocal documents, chunks, batches
        if not batch:
            return
        target.upsert_documents(batch)
        documents += len(batch)
        chunks += sum(len(item[1]) for item in batch)
        batches += 1
        batch.clear()
        if progress:
            progress(documents, chunks)

    for doc, doc_chunks, vectors in source.export_documents():
        if len(vectors) != len(doc_chunks):
            raise StoreError(f"the source returned {len(vectors)} vectors for {len(doc_chunks)} chunks of "
                             f"{doc.origin or doc.key}", retryable=False)
        expected[doc.doc_id] = (doc.model_copy(update={"n_chunks": len(doc_chunks)}), len(doc_chunks),
                                doc_chunks[0] if doc_chunks else None, vectors[0] if vectors else None)
        windows = source.windows_of(doc.doc_id)  # kept where both stores keep them (LanceDB to LanceDB)
        batch.append((doc, doc_chunks, vectors) if windows is None else (doc, doc_chunks, vectors, windows))
        if len(batch) >= batch_documents or sum(len(item[1]) for item in batch) >= batch_chunks:
            flush()
    flush()
    return MigrationReport(documents=documents, chunks=chunks, batches=batches,
                           target_documents=len(target.list_documents()), problems=tuple(verify(target, expected)))


def verify(target: Store, expected: dict[str, tuple[DocumentRecord, int, ChunkRecord | None,
                                                    list[float] | None]]) -> list[str]:
    """What does not match in ``target``: missing or different documents, chunk counts, vectors."""
    problems: list[str] = []
    for doc_id, (doc, n, first, vector) in expected.items():
        name = doc.origin or doc.key
        got = target.get_document(doc_id)
        if got != doc:
            problems.append(f"{name}: registry row {'missing' if got is None else 'differs'}")
            continue
        if (found := target.count_chunks(doc_id)) != n:
            problems.append(f"{name}: {found} chunks in the target, {n} in the source")
        if first is not None and vector is not None:
            hits = target.vector(vector, 1, ChunkFilter(doc_ids=(doc_id,), exclude_kinds=()))
            if not hits or hits[0].score < 0.999 or hits[0].chunk.text != first.text:
                problems.append(f"{name}: the first chunk's vector did not come across")
    return problems


def source_meta(source: Store, fallback: LibraryMeta) -> LibraryMeta:
    """The embedding record of ``source`` (``fallback``, the configured embedder, when it has none)."""
    return source.library_meta() or fallback


def same_location(a: Any, b: Any) -> bool:
    keys: Sequence[str] = ("name", "path", "host", "http_port", "library")
    return all(getattr(a, k, None) == getattr(b, k, None) for k in keys)
