"""The one indexing path of every document (parsed PDF or text): outline → token-window chunks → context lines and
sentence windows (:meth:`Indexer.prepare`) → embeddings through the ingest cache (:meth:`Indexer.embed`: one
embedder call for a whole batch) → the store (:meth:`Indexer.store_batch`, else :meth:`Indexer.store_one` for each
document)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any

from actors.steps.ingest.chunking import chunk_context_line, chunk_sections, context_line, window_for
from actors.steps.ingest.contextual import Contextualizer
from actors.steps.ingest.sections import outline
from actors.steps.text import sentence_window_spans
from infra.embed.base import Embedder, Windowed, separate_inputs
from infra.errors import ForageError, PDFError
from infra.ingest_cache import IngestCache
from infra.settings import Settings
from infra.store.base import ChunkRecord, DocumentRecord, Store, Upsert
from messages.search import VenueKind

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Prepared:
    """A document cut into chunks, with what the embedder will read: each chunk's string (context line + chunk text)
    and its sentence windows as spans of that string."""

    doc: DocumentRecord
    chunks: list[ChunkRecord]
    items: list[Windowed]
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def inputs(self) -> list[str]:
        """Every string a model behind a server reads for this document: the chunks', then their windows'."""
        return separate_inputs(self.items)

    @property
    def n_vectors(self) -> int:
        """How many vectors the embedder returns for it: one per chunk and one per window."""
        return len(self.items) + sum(len(item.windows) for item in self.items)

    def upsert(self, vectors: Sequence[Sequence[float]]) -> Upsert:
        """The store write of this document from its vectors (chunks', then windows', as the embedder returns them)."""
        n = len(self.chunks)
        if n == len(vectors):
            return (self.doc, self.chunks, vectors[:n])
        windows: list[list[Sequence[float]]] = [[] for _ in range(n)]
        owners = [owner for owner, item in enumerate(self.items) for _ in item.windows]
        for owner, vector in zip(owners, vectors[n:], strict=True):
            windows[owner].append(vector)
        return (self.doc, self.chunks, vectors[:n], windows)


class Indexer:
    """Prepares, embeds and stores documents for one store and embedder. ``cache``: the ingest cache of vectors (None:
    none); ``contextualizer``: writes each chunk's context (contextual retrieval) when ``ingest.contextual`` is on."""

    def __init__(self, settings: Settings, store: Store, embedder: Embedder, cache: IngestCache | None,
                 contextualizer: Contextualizer | None) -> None:
        self.store = store
        self.embedder = embedder
        self.cache = cache
        self.contextualizer = contextualizer
        self.max_tokens, self.overlap = window_for(settings, embedder)
        # sentence windows only for a store that keeps them (their embedding would be wasted elsewhere)
        self.window_sentences = settings.embed.window_sentences if store.keeps_windows else 0

    def prepare(self, doc_id: str, key: str, markdown: str, *, outline_title: str | None, title: str | None,
                 fallback_title: str, page_spans: Sequence[tuple[int, int, int]], authors: Sequence[str],
                 year: int | None, parser: str, flags: Sequence[str], origin: str, venue: str = "",
                 venue_kind: VenueKind = "", weight: dict[str, Any] | None = None,
                 identifiers: tuple[str | None, str | None] = (None, None)) -> Prepared:
        """Outline → chunks → the embedder's inputs (context line + chunk text) and the DocumentRecord
        (``identifiers``: its DOI and arXiv id where known)."""
        t = perf_counter()
        tree = outline(markdown, outline_title)
        title = title or tree.title or fallback_title
        chunks = chunk_sections(doc_id, markdown, tree.sections, page_spans, self.embedder.token_spans,
                                self.max_tokens, self.overlap)
        if not chunks:
            raise PDFError(f"{origin}: no text to index after parsing", retryable=False)
        timings = {"chunk_s": perf_counter() - t}
        flags = tuple(flags)
        if self.contextualizer is not None:
            chunks, flags = self._contextualize(title, tree.abstract, chunks, flags, origin, timings)
        contexts: dict[str, str] = {}
        leads = []  # each chunk's context line(s), in front of its text and of its sentence windows
        for chunk in chunks:
            if chunk.section_path not in contexts:
                contexts[chunk.section_path] = context_line(title, chunk.section_path, self.embedder.token_spans)
            leads.append(contexts[chunk.section_path] + chunk_context_line(chunk.context, self.embedder.token_spans))
        items = []
        for lead, chunk in zip(leads, chunks, strict=True):
            # references are never searched by default: their windows would be embedding work for nothing
            spans = (sentence_window_spans(chunk.text, self.window_sentences)
                     if self.window_sentences and chunk.section_kind != "references" else [])
            items.append(Windowed(lead + chunk.text, len(lead),
                                  tuple((len(lead) + start, len(lead) + end) for start, end in spans)))
        doc = DocumentRecord(
            doc_id=doc_id, key=key, title=title, authors=tuple(authors), year=year, abstract=tree.abstract,
            sections=tree.paths, markdown=markdown, parser=parser, flags=flags, n_chunks=len(chunks),
            origin=origin, doi=(identifiers[0] or "").lower(), arxiv_id=identifiers[1] or "",
            references=tree.references, venue=venue, venue_kind=venue_kind, **(weight or {}))
        return Prepared(doc, chunks, items, timings)

    def _contextualize(self, title: str, abstract: str, chunks: list[ChunkRecord], flags: tuple[str, ...],
                       origin: str, timings: dict[str, float]) -> tuple[list[ChunkRecord], tuple[str, ...]]:
        """Chunks with their LLM contexts (contextual retrieval); chunks left without one are counted
        in the flag ``context_missing:<n>`` and logged with the reason. Never raises for the LLM."""
        assert self.contextualizer is not None
        t = perf_counter()
        found = self.contextualizer.contextualize(title, abstract, chunks)
        timings["context_s"] = perf_counter() - t
        timings["context_llm_calls"] = float(found.llm_calls)
        timings["context_cached"] = float(found.cached)
        if found.missing:
            flags = (*flags, f"context_missing:{len(found.missing)}")
            log.warning("%s: %d of %d chunks without context (%s)", origin, len(found.missing), len(chunks),
                        next(iter(found.missing.values())))
        return [c.model_copy(update={"context": found.contexts[c.chunk_id]}) if c.chunk_id in found.contexts else c
                for c in chunks], flags

    def embed(self, items: Sequence[Prepared]) -> list[list[list[float]]]:
        """One embedder call for the chunks (and sentence windows) of all ``items`` whose vectors the ingest cache
        does not hold; the vectors of each item, in order."""
        cached: dict[int, list[list[float]]] = {}
        keys: dict[int, str] = {}
        if self.cache is not None:
            for i, item in enumerate(items):
                keys[i] = self.cache.vectors_key(self.embedder.name, item.items, self.embedder.windows_pooled)
                hit = self.cache.get_vectors(keys[i], item.n_vectors)
                if hit is not None:
                    cached[i] = hit
                    item.timings["embed_cached"] = 1.0
        todo = [item for i, item in enumerate(items) if i not in cached]
        vectors: list[list[float]] = []
        if todo:
            t = perf_counter()
            vectors = self.embedder.embed_windowed([windowed for item in todo for windowed in item.items])
            seconds = perf_counter() - t
            expected = sum(item.n_vectors for item in todo)
            if len(vectors) != expected:
                raise ForageError(f"embedder {self.embedder.name} returned {len(vectors)} vectors for "
                                  f"{expected} chunks and windows", retryable=False)
            for item in todo:
                item.timings["embed_s"] = seconds * item.n_vectors / expected  # the item's share of the call
        # the embedder returns all chunks' vectors, then all windows': each item's share of both
        chunk_at, window_at = 0, sum(len(item.items) for item in todo)
        out: list[list[list[float]]] = []
        for i, item in enumerate(items):
            if i in cached:
                out.append(cached[i])
                continue
            n_windows = item.n_vectors - len(item.items)
            mine = vectors[chunk_at:chunk_at + len(item.items)] + vectors[window_at:window_at + n_windows]
            chunk_at += len(item.items)
            window_at += n_windows
            if self.cache is not None and mine:
                self.cache.put_vectors(keys[i], mine)
            out.append(mine)
        return out

    def store_batch(self, items: Sequence[Prepared], vectors: Sequence[Sequence[Sequence[float]]]) -> bool:
        """All ``items`` in one store write (:func:`infra.store.base.upsert_documents`); False when
        that write failed (nothing of it was registered: the caller stores them one by one)."""
        t = perf_counter()
        try:
            self.store.upsert_documents([item.upsert(v) for item, v in zip(items, vectors, strict=True)])
        except Exception as exc:  # noqa: BLE001 - retried per document, where a failure names its document
            log.warning("batch write of %d documents failed (%s); storing them one by one", len(items), exc)
            return False
        total = sum(len(item.chunks) for item in items) or 1
        seconds = perf_counter() - t
        for item in items:
            item.timings["store_s"] = seconds * len(item.chunks) / total  # the item's share of the write
        return True

    def store_one(self, item: Prepared, vectors: Sequence[Sequence[float]]) -> None:
        t = perf_counter()
        doc, chunks, own, *windows = item.upsert(vectors)
        self.store.upsert_document(doc, chunks, own, windows[0] if windows else None)
        item.timings["store_s"] = perf_counter() - t
