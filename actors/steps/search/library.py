"""Finding documents in a local library (a folder of PDFs).

The Searcher offers each iteration up to ``max_results`` files it has not offered before in the
run, so the Orchestrator's loop (forage → search more → ingest → forage) works through a library
in batches — **by relevance, not by file name**: a cheap first pass reads the text of every file's
first pages (PyMuPDF, no layout analysis; ``FIRST_PAGE_CHARS`` characters, cached by the file's sha256
in the ingest cache when one is set, so a second run reads nothing again) and ranks the files by BM25
against each requirement and approved search string, and the query: a file's score is its best
share of any one of them (its BM25 over that text's best file's), so every requirement's best files
come first. Files no text was read from (broken, scanned) come last, in name order: the Ingestor still
records why they fail. The online databases answer the same SearchRequest (actors/steps/search/web.py).
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from actors.steps.events import Emit, null_emit
from actors.steps.plan.requirements import content_tokens
from infra.errors import SourceError
from infra.ingest_cache import IngestCache
from messages.search import Candidate, SearchRequest, SearchResults, Skipped
from messages.status import Stage


def library_files(folder: Path) -> list[Path]:
    """PDF-looking files under ``folder`` (recursive, sorted). Raises SourceError if unusable."""
    folder = Path(folder).expanduser()
    if not folder.exists():
        raise SourceError(f"library folder {folder} does not exist")
    if not folder.is_dir():
        raise SourceError(f"library {folder} is not a folder")
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix.lower() == ".pdf")
    if not files:
        raise SourceError(f"library folder {folder} holds no .pdf files")
    return files


def file_key(path: Path) -> str:
    """Dedupe key of a library file: its resolved path (a changed file keeps its key)."""
    return f"file:{Path(path).resolve()}"


FIRST_PAGE_CHARS = 4000  # title, authors, abstract and the start of the introduction
FIRST_PAGES = 2
BM25_K1, BM25_B = 1.2, 0.75


def first_page_text(path: Path, chars: int = FIRST_PAGE_CHARS) -> str:
    """Plain text of the first pages of a PDF ('' when nothing can be read: a broken or scanned file)."""
    import pymupdf

    try:
        with pymupdf.open(path) as doc:
            text = ""
            for page in doc.pages(0, min(FIRST_PAGES, doc.page_count)):
                text += page.get_text() + "\n"
                if len(text) >= chars:
                    break
    except Exception:  # noqa: BLE001 — any unreadable file: ranked last, the Ingestor says why it fails
        return ""
    return " ".join(text.split())[:chars]


def bm25_scores(query: str, docs: Sequence[Sequence[str]]) -> list[float]:
    """Okapi BM25 of ``query`` (its content words) against token lists ``docs`` (IDF over ``docs``)."""
    n = len(docs)
    if not n:
        return []
    avg = sum(len(d) for d in docs) / n or 1.0
    df = Counter(t for d in docs for t in set(d))
    terms = set(content_tokens(query))
    out = []
    for doc in docs:
        tf = Counter(doc)
        score = 0.0
        for t in terms & tf.keys():
            idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
            score += idf * tf[t] * (BM25_K1 + 1) / (tf[t] + BM25_K1 * (1 - BM25_B + BM25_B * len(doc) / avg))
        out.append(score)
    return out


def rank_files(texts: Sequence[str], wanted: Sequence[str]) -> list[int]:
    """Indexes of ``texts`` best first: each text's score is its best share, over the ``wanted`` texts
    (requirements, search strings, the query), of that wanted text's best BM25; ties (and texts with no
    score) keep their order."""
    docs = [content_tokens(t) for t in texts]
    best = [0.0] * len(texts)
    for query in wanted:
        scores = bm25_scores(query, docs)
        top = max(scores, default=0.0)
        if top > 0:
            best = [max(b, s / top) for b, s in zip(best, scores, strict=True)]
    return sorted(range(len(texts)), key=lambda i: (-best[i] if docs[i] else 1.0, i))


class LibrarySearch:
    """Offers the files of a local folder, a batch per request, each file once per run, the most relevant
    to the request's requirements first (see the module docstring). ``cache``: first pages by file hash."""

    name = "library"

    def __init__(self, folder: Path, emit: Emit = null_emit, cache: IngestCache | None = None,
                 confined: bool = False) -> None:
        self.folder = Path(folder)
        self.emit = emit
        self.cache = cache
        self.confined = confined  # read no file whose real path lies outside the folder (gateway/allowed.py)
        self._texts: dict[Path, str] = {}  # this process's first pages (the run's iterations read each once)

    def _first_page(self, path: Path) -> tuple[str, bool]:
        """(first-page text, whether it came from a cache)."""
        if path in self._texts:
            return self._texts[path], True
        key = None
        if self.cache is not None:
            try:
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
            except OSError:
                digest = None
            if digest is not None:
                key = self.cache.first_page_key(digest, FIRST_PAGE_CHARS)
                cached = self.cache.get_text(key)
                if cached is not None:
                    self._texts[path] = cached
                    return cached, True
        text = first_page_text(path)
        if key is not None and self.cache is not None:
            self.cache.put_text(key, text)
        self._texts[path] = text
        return text, False

    def ranked(self, files: Sequence[Path], request: SearchRequest) -> tuple[list[Path], int]:
        """``files`` most relevant first for the request, and how many first pages came from a cache."""
        wanted = [r.text for r in request.requirements] + [q.text for q in request.search_queries]
        wanted.append(request.query)
        read = [self._first_page(p) for p in files]
        order = rank_files([t for t, _ in read], wanted)
        return [files[i] for i in order], sum(1 for _, cached in read if cached)

    def search(self, request: SearchRequest) -> SearchResults:
        self.emit(Stage.SEARCH, "started", f"searching library {self.folder}", iteration=request.iteration)
        files = library_files(self.folder)
        escaped: list[Path] = []
        if self.confined:
            root = self.folder.expanduser().resolve()
            escaped = [p for p in files if not p.resolve().is_relative_to(root)]
            files = [p for p in files if p not in escaped]
        seen = set(request.exclude_keys)
        unseen = [p for p in files if file_key(p) not in seen]
        files_cached = 0
        if len(unseen) > request.max_results:  # all of them fit in this batch: no order to choose
            ranked, files_cached = self.ranked(unseen, request)
            files = [*ranked, *(p for p in files if file_key(p) in seen)]
        fresh: list[Candidate] = []
        skipped: list[Skipped] = [
            Skipped(item=str(p), reason="a link to a file outside the library folder: not read (the run's library "
                                        "was named through the gateway)")
            for p in escaped if request.iteration == 1]  # said once: the run's search_skipped keeps it
        for path in files:
            key = file_key(path)
            if key in seen:
                continue
            if len(fresh) >= request.max_results:
                break
            try:
                path.stat()
            except OSError as exc:
                skipped.append(Skipped(item=str(path), reason=f"cannot read: {exc}", retryable=True))
                continue
            # zero-byte and broken files are offered too: the Ingestor records why each one fails
            # no title: the parser reads the real one from the PDF (a file name is not a title)
            fresh.append(Candidate(key=key, source="library", path=str(path.resolve())))
        offered = len(seen) + len(fresh)
        exhausted = offered >= len(files) or not fresh
        results = SearchResults(run_id=request.run_id, iteration=request.iteration, candidates=tuple(fresh),
                                skipped=tuple(skipped), exhausted=exhausted)
        self.emit(Stage.SEARCH, "results", f"{len(fresh)} new documents from the library"
                  + (", most relevant first" if len(unseen) > request.max_results else ""),
                  iteration=request.iteration, found=len(fresh), exhausted=exhausted,
                  library_size=len(files), unread=len(unseen) - len(fresh), first_pages_cached=files_cached,
                  offered=[Path(c.path or "").name for c in fresh])
        return results
