"""One document through parse → sections → chunks → embeddings → store, without Ray.

:meth:`IngestStep.ingest` never raises for a bad document: it returns an ``IngestResult`` with
``status="failed"``, a reason a person can act on, and ``retryable`` (from the ForageError that
stopped it; anything unexpected counts as not retryable). Documents are identified by the sha256 of
their bytes, so the same file is stored once (a second request is ``skipped`` without parsing) and a
changed file under the same key replaces the earlier version (``store.upsert_document`` replaces by
key).
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from time import perf_counter
from typing import Any

from actors.steps.chunking import chunk_sections, context_line, window_for
from actors.steps.events import Emit, null_emit
from actors.steps.sections import outline
from infra.embed.base import Embedder
from infra.errors import ForageError, PDFError
from infra.pdf.base import PDFParser
from infra.settings import Settings
from infra.store.base import DocumentRecord, Store
from messages.ingest import IngestRequest, IngestResult
from messages.status import Stage


def file_sha256(path: Path) -> str:
    """Hex sha256 of the file's bytes (streamed)."""
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


class IngestStep:
    """Parse, chunk, embed and store one candidate document; report what happened."""

    def __init__(self, settings: Settings, store: Store, embedder: Embedder, parser: PDFParser,
                 emit: Emit = null_emit) -> None:
        self.settings = settings
        self.store = store
        self.embedder = embedder
        self.parser = parser
        self.emit = emit
        self.max_tokens, self.overlap = window_for(settings, embedder)

    def ingest(self, request: IngestRequest) -> IngestResult:
        """Store the candidate's file (or skip it when known); a bad document gives status 'failed'."""
        started = perf_counter()
        candidate = request.candidate
        timings: dict[str, float] = {}
        try:
            result = self._ingest(request, started, timings)
        except ForageError as exc:
            result = self._failed(request, str(exc), exc.retryable, started)
        except Exception as exc:  # noqa: BLE001 - a bad document must never take the caller down
            result = self._failed(request, f"unexpected {type(exc).__name__} while ingesting: {exc}", False, started)
        if result.status == "failed":
            self.emit(Stage.INGEST, "failed", f"{candidate.key}: {result.reason}", key=candidate.key,
                      path=result.path, reason=result.reason, retryable=result.retryable)
        else:
            self.emit(Stage.INGEST, "document", f"{result.status}: {result.title} ({result.n_chunks} chunks)",
                      key=candidate.key, path=result.path, status=result.status, doc_id=result.doc_id,
                      title=result.title, n_chunks=result.n_chunks, flags=list(result.flags),
                      seconds=round(result.seconds, 3), **{k: round(v, 3) for k, v in timings.items()},
                      note=result.reason)
        return result

    def _failed(self, request: IngestRequest, reason: str, retryable: bool, started: float) -> IngestResult:
        return IngestResult(run_id=request.run_id, key=request.candidate.key, path=request.candidate.path,
                            status="failed", reason=reason, retryable=retryable, seconds=perf_counter() - started)

    def _ingest(self, request: IngestRequest, started: float, timings: dict[str, float]) -> IngestResult:
        candidate = request.candidate
        if not candidate.path:
            raise PDFError(f"{candidate.key}: no local file to ingest (candidate has only "
                           f"{'a URL' if candidate.url else 'metadata'})", retryable=False)
        path = Path(candidate.path).expanduser()
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

        common: dict[str, Any] = {"run_id": request.run_id, "key": candidate.key, "path": str(path),
                                  "doc_id": doc_id}
        known = self.store.get_document(doc_id)
        if known is not None:
            note = None if known.key == candidate.key else f"same file already stored as {known.key}"
            return IngestResult(**common, status="skipped", title=known.title, n_chunks=known.n_chunks,
                                parser=known.parser, flags=known.flags, reason=note,
                                seconds=perf_counter() - started)
        previous = self.store.document_by_key(candidate.key)

        t = perf_counter()
        parsed = self.parser.parse(path)
        timings["parse_s"] = perf_counter() - t

        t = perf_counter()
        tree = outline(parsed.markdown, parsed.title or candidate.title)
        title = candidate.title or parsed.title or tree.title or path.stem
        chunks = chunk_sections(doc_id, parsed.markdown, tree.sections, parsed.page_spans,
                                self.embedder.token_spans, self.max_tokens, self.overlap)
        timings["chunk_s"] = perf_counter() - t
        if not chunks:
            raise PDFError(f"{path.name}: no text to index after parsing", retryable=False)

        t = perf_counter()
        contexts: dict[str, str] = {}
        texts = []
        for chunk in chunks:
            if chunk.section_path not in contexts:
                contexts[chunk.section_path] = context_line(title, chunk.section_path, self.embedder.token_spans)
            texts.append(contexts[chunk.section_path] + chunk.text)
        vectors = self.embedder.embed(texts)
        timings["embed_s"] = perf_counter() - t
        if len(vectors) != len(chunks):
            raise ForageError(f"embedder {self.embedder.name} returned {len(vectors)} vectors for "
                              f"{len(chunks)} chunks", retryable=False)

        doc = DocumentRecord(
            doc_id=doc_id, key=candidate.key, title=title, authors=candidate.authors or parsed.authors,
            year=candidate.year or parsed.year, abstract=tree.abstract, sections=tree.paths,
            markdown=parsed.markdown, parser=parsed.parser, flags=parsed.flags, n_chunks=len(chunks),
            origin=path.name)
        t = perf_counter()
        self.store.upsert_document(doc, chunks, vectors)
        timings["store_s"] = perf_counter() - t
        note = f"replaces {previous.doc_id[:16]} (file changed)" if previous and previous.doc_id != doc_id else None
        return IngestResult(**common, status="stored", title=title, n_chunks=len(chunks), parser=parsed.parser,
                            flags=parsed.flags, reason=note, seconds=perf_counter() - started)
