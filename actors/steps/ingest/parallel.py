"""Ingesting many PDFs at once (`forage library add`): parsing, the slow part on a CPU (docs/ingestion.md), runs in
worker processes sized to the node's cores, while this process chunks the parsed documents, embeds several of them
per embedder call (large batches for a GPU) and stores them. A file is parsed only when its content is not stored
yet (:meth:`IngestStep.check_file`), so a library add that was killed and run again parses only what it had not
finished. A worker that hangs past ``ingest.timeout_s`` or crashes is killed and its file alone fails."""

from __future__ import annotations

import concurrent.futures
import multiprocessing
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter

from pebble import ProcessExpired, ProcessPool

from actors.steps.ingest.documents import abstract_document
from actors.steps.ingest.step import CheckedFile, IngestStep
from infra.errors import ForageError
from infra.ingest_cache import IngestCache
from infra.pdf.base import ParsedDocument, PDFParser
from messages.ingest import IngestRequest, IngestResult
from messages.search import Candidate

BATCH_DOCUMENTS = 8  # parsed documents per embedder call and store write


def parse_file(parser: PDFParser, path: str, doc_id: str, cache_dir: str | None) -> tuple[ParsedDocument, bool]:
    """Parse ``path`` in a worker (through the ingest cache when one is set); the document and whether it came from
    the cache. Module-level so that worker processes can import it."""
    if cache_dir is not None:
        return IngestCache(Path(cache_dir)).parse(parser, Path(path), doc_id)
    return parser.parse(Path(path)), False


def parse_workers(setting: int) -> int:
    """Worker processes for parsing: the setting, or this node's usable cores when it is 0."""
    if setting > 0:
        return setting
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


@dataclass
class Progress:
    """Where a library add stands: files done of all, files to parse and parsed so far, pages parsed; the rate and the
    time left follow from them."""

    total: int
    started: float
    done: int = 0
    to_parse: int = 0
    parsed: int = 0  # files through the parser (stored or failed): the estimate counts these
    pages: int = 0

    def pages_per_s(self) -> float:
        elapsed = perf_counter() - self.started
        return self.pages / elapsed if elapsed > 0 else 0.0

    def eta_s(self) -> float | None:
        """Seconds left for the files still to parse, at the rate so far; None before the first is parsed."""
        if not self.parsed:
            return None
        return (perf_counter() - self.started) / self.parsed * (self.to_parse - self.parsed)


class ParallelIngest:
    """Ingest many PDF candidates with ``workers`` parsing processes (1: parse here, one after another)."""

    def __init__(self, step: IngestStep, parser: PDFParser, workers: int, *, batch: int = BATCH_DOCUMENTS,
                 progress: Callable[[Progress, IngestResult], None] | None = None) -> None:
        self.step = step
        self.parser = parser
        self.workers = max(1, workers)
        self.batch = max(1, batch)
        self.progress = progress
        self.cache_dir = str(step.cache.root) if step.cache is not None else None
        self.timeout_s = step.settings.ingest.timeout_s

    def ingest(self, run_id: str, candidates: Sequence[Candidate]) -> list[IngestResult]:
        """One result per candidate, in order; a broken, hung or crashing file fails alone."""
        state = Progress(total=len(candidates), started=perf_counter())
        results: list[IngestResult | None] = [None] * len(candidates)
        todo: list[tuple[int, CheckedFile]] = []
        for i, candidate in enumerate(candidates):
            abstract = abstract_document(candidate)
            if abstract is not None:  # no file to parse: stored from its title and abstract (reports itself)
                self._finish(state, results, i, self.step.ingest_texts(run_id, [abstract])[0], reported=True)
                continue
            request = IngestRequest(run_id=run_id, candidate=candidate)
            started = perf_counter()
            try:
                checked = self.step.check_file(request, started)
            except ForageError as exc:
                checked = self.step.failed(request, exc, started)
            if isinstance(checked, IngestResult):
                self._finish(state, results, i, checked)
            else:
                todo.append((i, checked))
        state.to_parse = len(todo)
        if self.workers == 1 or len(todo) < 2:
            self._parse_here(state, results, todo)
        else:
            self._parse_in_workers(state, results, todo)
        if any(r is not None and r.status == "stored" for r in results):
            self.step.index_new_chunks()  # searchable at full speed when the next run starts
        return [r for r in results if r is not None]

    # ------------------------------------------------------------------ parsing

    def _parse_here(self, state: Progress, results: list[IngestResult | None],
                    todo: Sequence[tuple[int, CheckedFile]]) -> None:
        for i, checked in todo:
            try:
                parsed, _ = parse_file(self.parser, str(checked.path), checked.doc_id, self.cache_dir)
            except Exception as exc:  # noqa: BLE001 - a bad document fails alone
                self._parse_failed(state, results, i, checked, exc)
                continue
            self._store(state, results, [(i, checked, parsed)])

    def _parse_in_workers(self, state: Progress, results: list[IngestResult | None],
                          todo: Sequence[tuple[int, CheckedFile]]) -> None:
        # spawn, not fork: this process may hold the embedder's threads and open store handles
        context = multiprocessing.get_context("spawn")
        ready: list[tuple[int, CheckedFile, ParsedDocument]] = []
        with ProcessPool(max_workers=min(self.workers, len(todo)), context=context) as pool:
            futures = {pool.schedule(parse_file, (self.parser, str(c.path), c.doc_id, self.cache_dir),
                                     timeout=self.timeout_s): (i, c) for i, c in todo}
            for future in concurrent.futures.as_completed(futures):
                i, checked = futures[future]
                try:
                    parsed, _ = future.result()
                except concurrent.futures.TimeoutError:
                    self._parse_failed(state, results, i, checked, ForageError(
                        f"{checked.path.name}: parsing took over {self.timeout_s:g} s (ingest.timeout_s); the "
                        "worker was stopped", retryable=False))
                except ProcessExpired as exc:
                    self._parse_failed(state, results, i, checked, ForageError(
                        f"{checked.path.name}: the parser crashed on this file (worker exit code {exc.exitcode})",
                        retryable=False))
                except Exception as exc:  # noqa: BLE001 - a bad document fails alone
                    self._parse_failed(state, results, i, checked, exc)
                else:
                    ready.append((i, checked, parsed))
                    if len(ready) >= self.batch:
                        self._store(state, results, ready)
                        ready = []
        if ready:
            self._store(state, results, ready)

    # ------------------------------------------------------------------ results

    def _parse_failed(self, state: Progress, results: list[IngestResult | None], i: int, checked: CheckedFile,
                      exc: Exception) -> None:
        state.parsed += 1
        self._finish(state, results, i, self.step.failed_on(checked, exc))

    def _store(self, state: Progress, results: list[IngestResult | None],
               ready: Sequence[tuple[int, CheckedFile, ParsedDocument]]) -> None:
        for _, _, parsed in ready:
            state.parsed += 1
            state.pages += parsed.n_pages
        stored = self.step.store_parsed([(checked, parsed) for _, checked, parsed in ready])
        for (i, _, _), (result, _) in zip(ready, stored, strict=True):
            self._finish(state, results, i, result, reported=True)

    def _finish(self, state: Progress, results: list[IngestResult | None], i: int, result: IngestResult, *,
                reported: bool = False) -> None:
        if not reported:
            self.step.report(result, {})
        results[i] = result
        state.done += 1
        if self.progress is not None:
            self.progress(state, result)
