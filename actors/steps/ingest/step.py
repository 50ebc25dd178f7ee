"""Documents through sections → chunks → embeddings → store, without Ray.

Two ways in, one shared indexing path (:meth:`IngestStep._prepare` → :meth:`IngestStep._embed` →
:meth:`IngestStep._store`):

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
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter
from typing import Any

from actors.steps.ingest.chunking import chunk_context_line, chunk_sections, context_line, window_for
from actors.steps.ingest.contextual import Contextualizer
from actors.steps.events import Emit, null_emit
from actors.steps.ingest.sections import outline
from actors.steps.text import sentence_window_spans
from infra.embed.base import Embedder, Windowed
from infra.errors import ForageError, PDFError
from infra.ingest_cache import IngestCache
from infra.llm.base import LLM
from infra.pdf.base import ParsedDocument, PDFParser
from infra.settings import Settings
from infra.store.base import ChunkRecord, DocumentRecord, Store, Upsert
from messages.ingest import IngestRequest, IngestResult
from messages.search import Candidate, VenueKind, weight_of
from messages.status import Stage

log = logging.getLogger(__name__)

TEXT_PARSER = "text"

#: the phases of a document's ``ingest/progress`` events, in order: ``queued`` (the Orchestrator handed
#: it to the Ingestor pool), ``parsing`` (file read and parsed; its payload has the Ingestor's ``pid``),
#: ``chunking``, ``embedding``, then one of ``stored``, ``skipped`` (already in the store) or
#: ``failed`` (with ``reason``). A document that fails stops at the phase it reached, then ``failed``.
PHASES = ("queued", "parsing", "chunking", "embedding", "stored", "skipped", "failed")


def file_sha256(path: Path) -> str:
    """Hex sha256 of the file's bytes (streamed)."""
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def source_origin(file_name: str, doi: str | None, arxiv_id: str | None) -> str:
    """What the report and the BibTeX/RIS exports name a PDF by: its file name, then its DOI and arXiv id when
    known ("paper.pdf, doi:10.1186/…, arXiv:2302.07302"; actors/steps/tools/export.py reads them back)."""
    parts = [file_name] if file_name else []
    return ", ".join([*parts, *([f"doi:{doi}"] if doi else []), *([f"arXiv:{arxiv_id}"] if arxiv_id else [])])


_ID_PARTS = re.compile(r"^(?:doi:|arxiv:)", re.IGNORECASE)
_DOI_GIVEN = re.compile(r"^(?:doi:\s*|https?://(?:dx\.)?doi\.org/)?(10\.\d{4,9}/\S+)$", re.IGNORECASE)
_ARXIV_GIVEN = re.compile(r"^(?:arxiv:\s*|https?://arxiv\.org/abs/)?(\d{4}\.\d{4,5}|[a-z][a-z.\-]*/\d{7})(?:v\d+)?$",
                          re.IGNORECASE)


def origin_identifiers(origin: str) -> tuple[str | None, str | None]:
    """(DOI, arXiv id) an origin names (what :func:`source_origin` wrote), None for each it does not."""
    parts = [p.strip() for p in origin.split(", ")]
    return (next((p[4:] for p in parts if p.lower().startswith("doi:")), None),
            next((p[6:] for p in parts if p.lower().startswith("arxiv:")), None))


def with_identifiers(origin: str, doi: str | None, arxiv_id: str | None) -> str:
    """``origin`` with its DOI and/or arXiv id replaced (None: keep the one it has; "": drop it). ValueError
    for a DOI or arXiv id that is not one."""
    parts = [p for p in (p.strip() for p in origin.split(", ")) if p]
    name = ", ".join(p for p in parts if not _ID_PARTS.match(p))
    old_doi, old_arxiv = origin_identifiers(origin)
    if doi:
        found = _DOI_GIVEN.match(doi.strip())
        if not found:
            raise ValueError(f"{doi!r} is not a DOI (10.<registrant>/<suffix>)")
        doi = found.group(1).lower()
    if arxiv_id:
        found = _ARXIV_GIVEN.match(arxiv_id.strip())
        if not found:
            raise ValueError(f"{arxiv_id!r} is not an arXiv id (e.g. 2302.07302 or hep-th/0101001)")
        arxiv_id = found.group(1)
    return source_origin(name, old_doi if doi is None else doi or None,
                         old_arxiv if arxiv_id is None else arxiv_id or None)


def known_venue(candidate: Candidate) -> tuple[str, VenueKind]:
    """(venue, kind) a search result names; ("", "") when it names none of a known kind (a repository such as
    arXiv is not a venue, and page 1 may then say more)."""
    if candidate.venue and candidate.venue_kind:
        return " ".join(candidate.venue.split()), candidate.venue_kind
    return "", ""


def text_markdown(title: str, text: str) -> str:
    """The Markdown a text document is stored as: ``# <title>`` (whitespace collapsed), a blank line, the text.

    Without a title it is the text alone. The title heading is not chunk text (headings never are):
    it reaches the embedder through the context line, as a PDF's title does.
    """
    title = " ".join(title.split())
    body = text.strip("\n")
    return f"# {title}\n\n{body}\n" if title else f"{body}\n"


@dataclass(frozen=True, slots=True)
class TextDocument:
    """A document given as text: ``key`` says where it came from (e.g. ``beir:scifact:4983``)."""

    key: str
    title: str
    text: str
    authors: tuple[str, ...] = ()
    year: int | None = None
    origin: str = ""
    flags: tuple[str, ...] = ()
    venue: str = ""
    venue_kind: VenueKind = ""
    weight: dict[str, Any] | None = None  # what the search result says it weighs (messages.search.weight_of)


@dataclass(slots=True)
class _Prepared:
    """A document cut into chunks, with what the embedder will read: each chunk's string (context line + chunk text)
    and its sentence windows as spans of that string."""

    doc: DocumentRecord
    chunks: list[ChunkRecord]
    items: list[Windowed]
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def inputs(self) -> list[str]:
        """Every string a model behind a server reads for this document: the chunks', then their windows'."""
        return [item.text for item in self.items] + [text for item in self.items for text in item.window_texts()]

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
        self.max_tokens, self.overlap = window_for(settings, embedder)
        # sentence windows only for a store that keeps them (their embedding would be wasted elsewhere)
        self.window_sentences = settings.embed.window_sentences if store.keeps_windows else 0
        cache_dir = settings.ingest.cache_dir
        self.cache = IngestCache(cache_dir) if cache_dir is not None else None
        self.contextualizer: Contextualizer | None = None
        if settings.ingest.contextual:
            if llm is None:
                from infra.llm import build_llm

                llm = build_llm(settings)
            self.contextualizer = Contextualizer.from_settings(settings, llm)

    # ------------------------------------------------------------------ PDFs

    def ingest(self, request: IngestRequest) -> IngestResult:
        """Store the candidate's file (or skip it when known); a bad document gives status 'failed'."""
        abstract = self.abstract_document(request.candidate)
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

    @staticmethod
    def abstract_document(candidate: Candidate) -> TextDocument | None:
        """The text document of a candidate with no PDF but an abstract (``abstract_only``): no PDF could be had,
        but the title and abstract still carry evidence, stored flagged ``abstract_only``. None for a file."""
        if candidate.path or not candidate.abstract_only or not (candidate.abstract or "").strip():
            return None
        venue, venue_kind = known_venue(candidate)
        return TextDocument(key=candidate.key, title=candidate.title or "", text=candidate.abstract or "",
                            authors=candidate.authors, year=candidate.year, origin=candidate.key,
                            flags=("abstract_only",), venue=venue, venue_kind=venue_kind,
                            weight=weight_of(candidate))

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
        known = self._known(request.run_id, candidate.key, str(path), doc_id, started)
        if known is not None:
            return known
        return CheckedFile(request, path, doc_id, started, self.store.document_by_key(candidate.key))

    def store_parsed(self, parsed: Sequence[tuple[CheckedFile, ParsedDocument]], *,
                     report: bool = True) -> list[tuple[IngestResult, dict[str, float]]]:
        """Chunk, embed (one embedder call for all of them) and store documents parsed from checked files; each
        one's result and timings, in order. A document that cannot be chunked or stored fails alone.
        ``report``: emit each result's events here (:meth:`ingest` reports its own)."""
        prepared: list[tuple[int, _Prepared]] = []
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
            vectors = self._embed([item for _, item in prepared]) if prepared else []
        except Exception as exc:  # noqa: BLE001 - nothing of the batch was embedded: each says why
            for i, _ in prepared:
                out[i] = (self.failed_on(parsed[i][0], exc), {})
            prepared, vectors = [], []
        items = [item for _, item in prepared]
        batched = len(items) > 1 and self._store_batch(items, vectors)
        for (i, item), v in zip(prepared, vectors, strict=True):
            checked = parsed[i][0]
            try:
                if not batched:
                    self._store(item, v)
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

    def prepare_parsed(self, doc_id: str, candidate: Candidate, path: Path, parsed: ParsedDocument) -> _Prepared:
        """A parsed PDF as a document record, its chunks and the embedder's inputs (nothing embedded or
        stored yet). Also used by bench/ingest.py to time embedding alone."""
        venue, venue_kind = known_venue(candidate)
        if not venue:  # the search result names none: what page 1 prints
            venue, venue_kind = parsed.venue or "", parsed.venue_kind
        return self._prepare(
            doc_id, candidate.key, parsed.markdown, outline_title=parsed.title or candidate.title,
            title=candidate.title or parsed.title, fallback_title=path.stem, page_spans=parsed.page_spans,
            authors=candidate.authors or parsed.authors, year=candidate.year or parsed.year,
            parser=parsed.parser, flags=parsed.flags,
            origin=source_origin(path.name, candidate.doi or parsed.doi, candidate.arxiv_id or parsed.arxiv_id),
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
        prepared: dict[int, tuple[_Prepared, DocumentRecord | None]] = {}
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
            vectors = self._embed([prepared[i][0] for i in order])
        except Exception as exc:  # noqa: BLE001 - the whole batch shares the embedder call
            retryable = exc.retryable if isinstance(exc, ForageError) else False
            reason = str(exc) if isinstance(exc, ForageError) else _unexpected(exc)
            for i in order:
                results[i] = self._failed(run_id, documents[i].key, None, reason, retryable, started)
            order = []
        keys = [documents[i].key for i in order]
        if len(order) > 1 and len(set(keys)) == len(keys) and self._store_batch(
                [prepared[i][0] for i in order], vectors):
            for i in order:
                item, previous = prepared[i]
                results[i] = self._stored(run_id, item, None, previous, started, "text changed")
            order = []
        for n, i in enumerate(order):  # one document at a time: a failure fails only that document
            item, previous = prepared[i]
            try:
                self._store(item, vectors[n])
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
                      started: float) -> int | IngestResult | tuple[_Prepared, DocumentRecord | None]:
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
        known = self._known(run_id, document.key, None, doc_id, started)
        if known is not None:
            return known
        previous = self.store.document_by_key(document.key)
        self._progress(document.key, "chunking")
        title = " ".join(document.title.split())
        item = self._prepare(doc_id, document.key, markdown, outline_title=title or None, title=title or None,
                             fallback_title=document.origin or document.key, page_spans=(),
                             authors=document.authors, year=document.year, parser=TEXT_PARSER,
                             flags=document.flags, origin=document.origin or document.key,
                             venue=document.venue, venue_kind=document.venue_kind, weight=document.weight)
        return item, previous

    # ------------------------------------------------------------------ the shared path

    def _known(self, run_id: str, key: str, path: str | None, doc_id: str, started: float) -> IngestResult | None:
        """A 'skipped' result when content with this doc_id is already stored, else None."""
        known = self.store.get_document(doc_id)
        if known is None:
            return None
        note = None if known.key == key else f"same {'file' if path else 'text'} already stored as {known.key}"
        return IngestResult(run_id=run_id, key=key, path=path, doc_id=doc_id, status="skipped", title=known.title,
                            n_chunks=known.n_chunks, parser=known.parser, flags=known.flags, reason=note,
                            seconds=perf_counter() - started)

    def _prepare(self, doc_id: str, key: str, markdown: str, *, outline_title: str | None, title: str | None,
                 fallback_title: str, page_spans: Sequence[tuple[int, int, int]], authors: Sequence[str],
                 year: int | None, parser: str, flags: Sequence[str], origin: str, venue: str = "",
                 venue_kind: VenueKind = "", weight: dict[str, Any] | None = None) -> _Prepared:
        """Outline → chunks → the embedder's inputs (context line + chunk text) and the DocumentRecord."""
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
            origin=origin, references=tree.references, venue=venue, venue_kind=venue_kind, **(weight or {}))
        return _Prepared(doc, chunks, items, timings)

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

    def _embed(self, items: Sequence[_Prepared]) -> list[list[list[float]]]:
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

    def _store_batch(self, items: Sequence[_Prepared], vectors: Sequence[Sequence[Sequence[float]]]) -> bool:
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

    def _store(self, item: _Prepared, vectors: Sequence[Sequence[float]]) -> None:
        t = perf_counter()
        doc, chunks, own, *windows = item.upsert(vectors)
        self.store.upsert_document(doc, chunks, own, windows[0] if windows else None)
        item.timings["store_s"] = perf_counter() - t

    def _stored(self, run_id: str, item: _Prepared, path: str | None, previous: DocumentRecord | None,
                started: float, changed: str) -> IngestResult:
        doc = item.doc
        note = (f"replaces {previous.doc_id[:16]} ({changed})"
                if previous is not None and previous.doc_id != doc.doc_id else None)
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
