"""Documents through sections → chunks → embeddings → store, without Ray.

Two ways in, one shared indexing path (:class:`~actors.steps.ingest.indexing.Indexer`: prepare → embed → store;
what identifies a document: :mod:`actors.steps.ingest.documents`):

* :meth:`IngestStep.ingest` — a PDF candidate: parse → outline → chunks → context line → embed → store.
* :meth:`IngestStep.ingest_text` / :meth:`IngestStep.ingest_texts` — documents given as text (title and
  body, e.g. abstracts of a benchmark corpus): the text becomes the Markdown ``# <title>\\n\\n<text>``
  and takes the same path from the outline on, with ``parser="text"`` and no pages. ``ingest_texts``
  embeds the chunks of all its documents in one embedder call (the embedder batches them), then
  stores them all in one write (``infra.store.base.upsert_documents``), falling back to one
  ``store.upsert_document`` per document when that write fails (so a failure names its document).

Neither raises for a bad document: each returns an ``IngestResult`` with ``status="failed"``, a
reason a person can act on, and ``retryable`` (from the ForageError that stopped it; anything
unexpected counts as not retryable). Documents are identified by the sha256 of their bytes (the
PDF file, or the UTF-8 Markdown built from a text), so the same content is stored once (a second
request is ``skipped`` without parsing or embedding) and changed content under the same key
replaces the earlier version (``store.upsert_document`` replaces by key).
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter

from actors.steps.events import Emit, null_emit
from actors.steps.ingest.contextual import Contextualizer
from actors.steps.ingest.documents import (TEXT_PARSER, TextDocument, abstract_document, file_sha256, known_venue,
                                           parser_label, source_origin, stale_parse, text_markdown)
from actors.steps.ingest.indexing import Indexer, Prepared
from infra.embed.base import Embedder
from infra.errors import ForageError, PDFError
from infra.ingest_cache import IngestCache
from infra.llm.base import LLM
from infra.pdf.base import ParsedDocument, PDFParser
from infra.settings import Settings
from infra.store.base import DocumentRecord, Store
from messages.ingest import IngestRequest, IngestResult
from messages.search import Candidate, weight_of
from messages.status import Stage

log = logging.getLogger(__name__)


#: the phases of a document's ``ingest/progress`` events, in order: ``queued`` (the Orchestrator handed
#: it to the Ingestor pool), ``parsing`` (file read and parsed; its payload has the Ingestor's ``pid``),
#: ``chunking``, ``embedding``, then one of ``stored``, ``skipped`` (already in the store) or
#: ``failed`` (with ``reason``). A document that fails stops at the phase it reached, then ``failed``.
PHASES = ("queued", "parsing", "chunking", "embedding", "stored", "skipped", "failed")


@dataclass(frozen=True)
class CheckedFile:
    """A candidate's file that may be parsed: found, under the size limit, not stored yet (``previous``: the
    document stored under the same key before, which this one replaces)."""

    request: IngestRequest
    path: Path
    doc_id: str
    started: float
    previous: DocumentRecord | None


class IngestStep:
    """Parse (PDFs) or take text, chunk, embed and store documents; report what happened to each."""

    def __init__(self, settings: Settings, store: Store, embedder: Embedder, parser: PDFParser | None = None,
                 emit: Emit = null_emit, llm: LLM | None = None) -> None:
        """``parser`` is needed for :meth:`ingest` (PDFs) only; text documents need none. ``llm`` writes
        the chunk contexts when ``ingest.contextual`` is on (built from the settings when not given);
        with the setting off no LLM is built or used."""
        self.settings = settings
        self.store = store
        self.embedder = embedder
        self.parser = parser
        self.emit = emit
        cache_dir = settings.ingest.cache_dir
        self.cache = IngestCache(cache_dir) if cache_dir is not None else None
        contextualizer: Contextualizer | None = None
        if settings.ingest.contextual:
            if llm is None:
                from infra.llm import build_llm

                llm = build_llm(settings)
            contextualizer = Contextualizer.from_settings(settings, llm)
        self.indexer = Indexer(settings, store, embedder, self.cache, contextualizer)

    @property
    def max_tokens(self) -> int:
        """Tokens per chunk (the settings' window, capped to fit the embedder)."""
        return self.indexer.max_tokens

    @property
    def contextualizer(self) -> Contextualizer | None:
        return self.indexer.contextualizer

    # ------------------------------------------------------------------ PDFs

    def ingest(self, request: IngestRequest) -> IngestResult:
        """Store the candidate's file (or skip it when known); a bad document gives status 'failed'."""
        abstract = abstract_document(request.candidate)
        if abstract is not None:
            return self.ingest_texts(request.run_id, [abstract])[0]
        started = perf_counter()
        timings: dict[str, float] = {}
        try:
            result = self._ingest(request, started, timings)
        except ForageError as exc:
            result = self._failed(request.run_id, request.candidate.key, request.candidate.path, str(exc),
                                  exc.retryable, started)
        except Exception as exc:  # noqa: BLE001 - a bad document must never take the caller down
            result = self._failed(request.run_id, request.candidate.key, request.candidate.path,
                                  _unexpected(exc), False, started)
        self.report(result, timings)
        return result

    def _ingest(self, request: IngestRequest, started: float, timings: dict[str, float]) -> IngestResult:
        checked = self.check_file(request, started)
        if isinstance(checked, IngestResult):
            return checked
        t = perf_counter()
        if self.cache is not None:
            parsed, cached = self.cache.parse(self.parser, checked.path, checked.doc_id)
            timings["parse_cached"] = float(cached)
        else:
            parsed = self.parser.parse(checked.path)  # type: ignore[union-attr]  # check_file made sure
        timings["parse_s"] = perf_counter() - t
        [(result, own)] = self.store_parsed([(checked, parsed)], report=False)
        timings.update(own)
        return result

    def check_file(self, request: IngestRequest, started: float | None = None) -> CheckedFile | IngestResult:
        """What must hold before a candidate's file is parsed: a parser, a readable file under the size limit;
        its content hash (the doc_id). An IngestResult instead when the file is already stored ('skipped').
        PDFError / ForageError when the file cannot be ingested."""
        started = perf_counter() if started is None else started
        candidate = request.candidate
        if not candidate.path:
            raise PDFError(f"{candidate.key}: no local file to ingest (candidate has only "
                           f"{'a URL' if candidate.url else 'metadata'})", retryable=False)
        if self.parser is None:
            raise PDFError(f"{candidate.key}: this ingest step has no PDF parser (it was built for text)",
                           retryable=False)
        path = Path(candidate.path).expanduser()
        # reading the file (its hash) is part of parsing; pid: the process a crash would take down
        self._progress(candidate.key, "parsing", path=str(path), pid=os.getpid())
        try:
            size = path.stat().st_size
            if size > self.settings.ingest.max_bytes:
                raise PDFError(f"{path.name}: {size:,} bytes is over the limit of "
                               f"{self.settings.ingest.max_bytes:,} (ingest.max_bytes)", retryable=False)
            doc_id = file_sha256(path)
        except FileNotFoundError:
            raise PDFError(f"{path.name}: file not found ({path})", retryable=False) from None
        except IsADirectoryError:
            raise PDFError(f"{path}: is a folder, not a file", retryable=False) from None
        except OSError as exc:
            raise ForageError(f"{path.name}: cannot read the file: {exc}", retryable=True) from exc
        stored = self.store.get_document(doc_id)
        if stored is None:
            return CheckedFile(request, path, doc_id, started, self.store.document_by_key(candidate.key))
        if stale_parse(stored.parser, parser_label(self.parser)):
            # parsed by an older revision of Forage's reading of this parser (a fix since: line numbers, a title
            # rule): parsed again, and the stored document replaced
            return CheckedFile(request, path, doc_id, started, stored)
        return self._skipped(request.run_id, candidate.key, str(path), stored, started)

    def store_parsed(self, parsed: Sequence[tuple[CheckedFile, ParsedDocument]], *,
                     report: bool = True) -> list[tuple[IngestResult, dict[str, float]]]:
        """Chunk, embed (one embedder call for all of them) and store documents parsed from checked files; each
        one's result and timings, in order. A document that cannot be chunked or stored fails alone.
        ``report``: emit each result's events here (:meth:`ingest` reports its own)."""
        prepared: list[tuple[int, Prepared]] = []
        out: list[tuple[IngestResult, dict[str, float]] | None] = [None] * len(parsed)
        for i, (checked, doc) in enumerate(parsed):
            key = checked.request.candidate.key
            try:
                self._progress(key, "chunking")
                item = self.prepare_parsed(checked.doc_id, checked.request.candidate, checked.path, doc)
                self._progress(key, "embedding", chunks=len(item.chunks))
                prepared.append((i, item))
            except Exception as exc:  # noqa: BLE001 - one bad document fails alone
                out[i] = (self.failed_on(checked, exc), {})
        try:
            vectors = self.indexer.embed([item for _, item in prepared]) if prepared else []
        except Exception as exc:  # noqa: BLE001 - nothing of the batch was embedded: each says why
            for i, _ in prepared:
                out[i] = (self.failed_on(parsed[i][0], exc), {})
            prepared, vectors = [], []
        items = [item for _, item in prepared]
        batched = len(items) > 1 and self.indexer.store_batch(items, vectors)
        for (i, item), v in zip(prepared, vectors, strict=True):
            checked = parsed[i][0]
            try:
                if not batched:
                    self.indexer.store_one(item, v)
            except Exception as exc:  # noqa: BLE001 - a failed write fails its document only
                out[i] = (self.failed_on(checked, exc), {})
                continue
            out[i] = (self._stored(checked.request.run_id, item, str(checked.path), checked.previous,
                                   checked.started, "file changed"), dict(item.timings))
        results = [r for r in out if r is not None]
        if report:
            for result, timings in results:
                self.report(result, timings)
        return results

    def prepare_parsed(self, doc_id: str, candidate: Candidate, path: Path, parsed: ParsedDocument) -> Prepared:
        """A parsed PDF as a document record, its chunks and the embedder's inputs (nothing embedded or
        stored yet). Also used by bench/ingest.py to time embedding alone."""
        venue, venue_kind = known_venue(candidate)
        if not venue:  # the search result names none: what page 1 prints
            venue, venue_kind = parsed.venue or "", parsed.venue_kind
        identifiers = (candidate.doi or parsed.doi, candidate.arxiv_id or parsed.arxiv_id)
        return self.indexer.prepare(
            doc_id, candidate.key, parsed.markdown, outline_title=parsed.title or candidate.title,
            title=candidate.title or parsed.title, fallback_title=path.stem, page_spans=parsed.page_spans,
            authors=candidate.authors or parsed.authors, year=candidate.year or parsed.year,
            parser=parser_label(self.parser) if self.parser is not None else parsed.parser, flags=parsed.flags,
            origin=source_origin(path.name, *identifiers), identifiers=identifiers,
            venue=venue, venue_kind=venue_kind, weight=weight_of(candidate))

    # ------------------------------------------------------------------ text

    def ingest_text(self, run_id: str, key: str, title: str, text: str, *, authors: Sequence[str] = (),
                    year: int | None = None, origin: str = "") -> IngestResult:
        """Store one document given as text (title + body) through the same path as PDFs."""
        document = TextDocument(key=key, title=title, text=text, authors=tuple(authors), year=year, origin=origin)
        return self.ingest_texts(run_id, [document])[0]

    def ingest_texts(self, run_id: str, documents: Sequence[TextDocument]) -> list[IngestResult]:
        """Store many text documents: chunks of all of them embedded in one embedder call, then all
        of them in one store write (``upsert_documents``; if that write fails, one
        ``store.upsert_document`` per document). One result per document, in order; never raises.

        A document whose content is already stored (also earlier in the same batch) is ``skipped``.
        An embedder failure fails every document of the batch that still needed embedding (with the
        embedder's ``retryable``); a store failure fails only that document.
        """
        started = perf_counter()
        results: list[IngestResult | None] = [None] * len(documents)
        prepared: dict[int, tuple[Prepared, DocumentRecord | None]] = {}
        first_with: dict[str, int] = {}  # doc_id → index of the first document of this batch with that content
        repeats: dict[int, int] = {}  # index → index of the earlier document with the same content
        for i, document in enumerate(documents):
            try:
                outcome = self._prepare_text(run_id, document, first_with, started)
            except ForageError as exc:
                outcome = self._failed(run_id, document.key, None, str(exc), exc.retryable, started)
            except Exception as exc:  # noqa: BLE001
                outcome = self._failed(run_id, document.key, None, _unexpected(exc), False, started)
            if isinstance(outcome, int):
                repeats[i] = outcome
            elif isinstance(outcome, IngestResult):
                results[i] = outcome
            else:
                prepared[i] = outcome
                first_with[outcome[0].doc.doc_id] = i

        order = list(prepared)
        for i in order:
            self._progress(documents[i].key, "embedding", chunks=len(prepared[i][0].chunks))
        try:
            vectors = self.indexer.embed([prepared[i][0] for i in order])
        except Exception as exc:  # noqa: BLE001 - the whole batch shares the embedder call
            retryable = exc.retryable if isinstance(exc, ForageError) else False
            reason = str(exc) if isinstance(exc, ForageError) else _unexpected(exc)
            for i in order:
                results[i] = self._failed(run_id, documents[i].key, None, reason, retryable, started)
            order = []
        keys = [documents[i].key for i in order]
        if len(order) > 1 and len(set(keys)) == len(keys) and self.indexer.store_batch(
                [prepared[i][0] for i in order], vectors):
            for i in order:
                item, previous = prepared[i]
                results[i] = self._stored(run_id, item, None, previous, started, "text changed")
            order = []
        for n, i in enumerate(order):  # one document at a time: a failure fails only that document
            item, previous = prepared[i]
            try:
                self.indexer.store_one(item, vectors[n])
                results[i] = self._stored(run_id, item, None, previous, started, "text changed")
            except ForageError as exc:
                results[i] = self._failed(run_id, documents[i].key, None, str(exc), exc.retryable, started)
            except Exception as exc:  # noqa: BLE001
                results[i] = self._failed(run_id, documents[i].key, None, _unexpected(exc), False, started)
        for i, j in repeats.items():
            results[i] = self._repeat(documents[i], results[j], started)

        final: list[IngestResult] = []
        for i, result in enumerate(results):
            assert result is not None
            self.report(result, prepared[i][0].timings if i in prepared else {})
            final.append(result)
        return final

    def _repeat(self, document: TextDocument, first: IngestResult | None, started: float) -> IngestResult:
        """The outcome of a document whose content an earlier document of the same batch has."""
        assert first is not None
        if first.status == "failed":
            return first.model_copy(update={"key": document.key, "seconds": perf_counter() - started})
        note = None if first.key == document.key else f"same text already stored as {first.key}"
        return IngestResult(run_id=first.run_id, key=document.key, doc_id=first.doc_id, status="skipped",
                            title=first.title, n_chunks=first.n_chunks, parser=first.parser, flags=first.flags,
                            reason=note, seconds=perf_counter() - started)

    def _prepare_text(self, run_id: str, document: TextDocument, first_with: dict[str, int],
                      started: float) -> int | IngestResult | tuple[Prepared, DocumentRecord | None]:
        """The index of an earlier document of the batch with the same content, a 'skipped' result
        (content already stored), or the prepared document and the version it replaces (same key)."""
        if not document.key.strip():
            raise ForageError("a text document needs a key (where it came from)", retryable=False)
        if not document.text.strip():
            raise ForageError(f"{document.key}: empty text, nothing to index", retryable=False)
        markdown = text_markdown(document.title, document.text)
        doc_id = hashlib.sha256(markdown.encode("utf-8")).hexdigest()
        if doc_id in first_with:
            return first_with[doc_id]
        known = self.store.get_document(doc_id)
        if known is not None:
            return self._skipped(run_id, document.key, None, known, started)
        previous = self.store.document_by_key(document.key)
        self._progress(document.key, "chunking")
        title = " ".join(document.title.split())
        item = self.indexer.prepare(doc_id, document.key, markdown, outline_title=title or None, title=title or None,
                                    fallback_title=document.origin or document.key, page_spans=(),
                                    authors=document.authors, year=document.year, parser=TEXT_PARSER,
                                    flags=document.flags, origin=document.origin or document.key,
                                    venue=document.venue, venue_kind=document.venue_kind, weight=document.weight,
                                    identifiers=(document.doi, document.arxiv_id))
        return item, previous

    # ------------------------------------------------------------------ the shared path

    @staticmethod
    def _skipped(run_id: str, key: str, path: str | None, known: DocumentRecord, started: float) -> IngestResult:
        """The 'skipped' result of content already stored as ``known``."""
        note = None if known.key == key else f"same {'file' if path else 'text'} already stored as {known.key}"
        return IngestResult(run_id=run_id, key=key, path=path, doc_id=known.doc_id, status="skipped", title=known.title,
                            n_chunks=known.n_chunks, parser=known.parser, flags=known.flags, reason=note,
                            seconds=perf_counter() - started)

    def _stored(self, run_id: str, item: Prepared, path: str | None, previous: DocumentRecord | None,
                started: float, changed: str) -> IngestResult:
        doc = item.doc
        note = None
        if previous is not None and previous.doc_id != doc.doc_id:
            note = f"replaces {previous.doc_id[:16]} ({changed})"
        elif previous is not None and previous.parser != doc.parser:
            note = f"parsed again: stored by {previous.parser}, now {doc.parser}"
        return IngestResult(run_id=run_id, key=doc.key, path=path, doc_id=doc.doc_id, status="stored",
                            title=doc.title, n_chunks=len(item.chunks), parser=doc.parser, flags=doc.flags,
                            reason=note, seconds=perf_counter() - started)

    def index_new_chunks(self) -> int:
        """After a batch of documents: fold their chunks into the store's search indexes before the Foragers search
        (:meth:`Store.index_new_chunks`); one ``ingest/indexed`` event says how many and how long. How many chunks
        were folded in. A failure is logged and reported in that event, never raised: the chunks stay searchable,
        only slower."""
        started = perf_counter()
        try:
            folded = self.store.index_new_chunks()
        except ForageError as exc:
            log.warning("indexing the new chunks failed; search stays correct but slower: %s", exc)
            self.emit(Stage.INGEST, "indexed", f"indexing the new chunks failed ({exc}); search stays correct but "
                      "slower", folded=0, error=str(exc), seconds=round(perf_counter() - started, 3))
            return 0
        if folded:
            self.emit(Stage.INGEST, "indexed", f"{folded} new chunks folded into the search index",
                      folded=folded, seconds=round(perf_counter() - started, 3))
        return folded

    def _failed(self, run_id: str, key: str, path: str | None, reason: str, retryable: bool,
                started: float) -> IngestResult:
        return IngestResult(run_id=run_id, key=key, path=path, status="failed", reason=reason, retryable=retryable,
                            seconds=perf_counter() - started)

    def failed(self, request: IngestRequest, exc: ForageError, started: float) -> IngestResult:
        """The failed result of ``request``, its reason and retry hint from ``exc``."""
        candidate = request.candidate
        return self._failed(request.run_id, candidate.key, candidate.path, str(exc), exc.retryable, started)

    def failed_on(self, checked: CheckedFile, exc: Exception) -> IngestResult:
        """The failed result of a checked file, its reason and retry hint from ``exc``."""
        key, path = checked.request.candidate.key, str(checked.path)
        if isinstance(exc, ForageError):
            return self._failed(checked.request.run_id, key, path, str(exc), exc.retryable, checked.started)
        return self._failed(checked.request.run_id, key, path, _unexpected(exc), False, checked.started)

    def _progress(self, key: str, phase: str, **payload: object) -> None:
        """One step of a document's way through ingestion (:data:`PHASES`), as an ``ingest/progress`` event."""
        self.emit(Stage.INGEST, "progress", f"{key}: {phase}", key=key, phase=phase, **payload)

    def report(self, result: IngestResult, timings: dict[str, float]) -> None:
        """A document's last progress phase, then its summary event ('document' or 'failed')."""
        self._progress(result.key, result.status, **({"reason": result.reason} if result.status == "failed" else {}))
        if result.status == "failed":
            self.emit(Stage.INGEST, "failed", f"{result.key}: {result.reason}", key=result.key,
                      path=result.path, reason=result.reason, retryable=result.retryable)
        else:
            self.emit(Stage.INGEST, "document", f"{result.status}: {result.title} ({result.n_chunks} chunks)",
                      key=result.key, path=result.path, status=result.status, doc_id=result.doc_id,
                      title=result.title, n_chunks=result.n_chunks, flags=list(result.flags),
                      seconds=round(result.seconds, 3), **{k: round(v, 3) for k, v in timings.items()},
                      note=result.reason)


def _unexpected(exc: BaseException) -> str:
    return f"unexpected {type(exc).__name__} while ingesting: {exc}"
