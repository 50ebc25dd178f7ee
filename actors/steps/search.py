"""Finding documents. In this version, one backend: a local library (a folder of PDFs).

The Searcher offers each iteration up to ``max_results`` files it has not offered before in the
run, so the Orchestrator's loop (forage → search more → ingest → forage) works through a library
in batches. Later backends (OpenAlex, arXiv, Zotero) answer the same SearchRequest.
"""

from __future__ import annotations

from pathlib import Path

from actors.steps.events import Emit, null_emit
from infra.errors import SourceError
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


class LibrarySearch:
    """Offers the files of a local folder, a batch per request, each file once per run."""

    name = "library"

    def __init__(self, folder: Path, emit: Emit = null_emit) -> None:
        self.folder = Path(folder)
        self.emit = emit

    def search(self, request: SearchRequest) -> SearchResults:
        self.emit(Stage.SEARCH, "started", f"searching library {self.folder}", iteration=request.iteration)
        files = library_files(self.folder)
        seen = set(request.exclude_keys)
        fresh: list[Candidate] = []
        skipped: list[Skipped] = []
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
        self.emit(Stage.SEARCH, "results", f"{len(fresh)} new documents from the library",
                  iteration=request.iteration, found=len(fresh), exhausted=exhausted,
                  library_size=len(files))
        return results
