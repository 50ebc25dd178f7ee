"""Many PDFs ingested at once (actors/steps/ingest/parallel.py): parsed in worker processes, embedded several per
call and stored, each file's outcome its own — a broken, hanging or crashing file fails alone — and a second add
of the same files parses nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.steps.ingest.parallel import ParallelIngest, Progress, parse_workers
from actors.steps.ingest.step import IngestStep
from actors.steps.search.library import file_key
from infra.pdf.pymupdf import PyMuPDFParser
from infra.settings import Settings
from infra.store.lancedb import LanceStore
from messages.search import Candidate
from tests.factories import page_pdf
from tests.parsers import MisbehavingParser

TOPICS = ("Fin regeneration in zebrafish", "Heat stress in wheat", "Sourdough fermentation", "Coral bleaching")


def library(folder: Path, extra: dict[str, bytes] | None = None) -> list[Candidate]:
    """Four one-page papers (and ``extra`` files as given) as library candidates, in name order."""
    folder.mkdir(parents=True, exist_ok=True)
    for n, topic in enumerate(TOPICS):
        page_pdf(folder / f"paper{n}.pdf", topic, [f"Abstract. {topic} was studied in {n + 3} field seasons. " * 4])
    for name, data in (extra or {}).items():
        (folder / name).write_bytes(data)
    return [Candidate(key=file_key(p), source="library", path=str(p), found_by="test")
            for p in sorted(folder.glob("*.pdf"))]


def ingest(tmp_path: Path, embedder, candidates, workers: int, parser=None, timeout_s: float = 300.0,
           store: Path | None = None):
    settings = Settings.load().updated(ingest={"timeout_s": timeout_s})
    db = LanceStore(store or tmp_path / f"store{workers}", dim=384)
    parser = parser or PyMuPDFParser()
    seen: list[tuple[int, int, str]] = []

    def progress(state: Progress, result) -> None:
        seen.append((state.done, state.total, result.status))

    results = ParallelIngest(IngestStep(settings, db, embedder, parser), parser, workers,
                             progress=progress).ingest("run-parallel", candidates)
    return results, db, seen


@pytest.mark.slow  # worker processes that import the PDF stack (10-30 s each on 2 busy cores)
def test_two_workers_store_what_one_does_and_a_broken_file_fails_alone(tmp_path, minilm) -> None:
    candidates = library(tmp_path / "papers", {"broken.pdf": b"%PDF-1.7 this is not a PDF"})
    one, store_one, _ = ingest(tmp_path, minilm, candidates, workers=1)
    two, store_two, seen = ingest(tmp_path, minilm, candidates, workers=2)
    assert [r.key for r in two] == [c.key for c in candidates]  # in the candidates' order
    assert [r.status for r in two] == ["failed", "stored", "stored", "stored", "stored"]
    assert "broken.pdf" in (two[0].reason or "")
    assert [(r.status, r.doc_id, r.n_chunks, r.title) for r in one] == \
           [(r.status, r.doc_id, r.n_chunks, r.title) for r in two]
    for result in two[1:]:
        assert store_two.get_document(result.doc_id).markdown == store_one.get_document(result.doc_id).markdown
    assert sorted(done for done, _, _ in seen) == [1, 2, 3, 4, 5] and {t for _, t, _ in seen} == {5}


@pytest.mark.slow  # worker processes that import the PDF stack (10-30 s each on 2 busy cores)
def test_a_second_add_parses_nothing(tmp_path, minilm) -> None:
    candidates = library(tmp_path / "papers")
    first, _, _ = ingest(tmp_path, minilm, candidates, workers=2, store=tmp_path / "store")

    class Counting(PyMuPDFParser):
        calls = 0

        def parse(self, path):
            Counting.calls += 1
            return super().parse(path)

    again, _, _ = ingest(tmp_path, minilm, candidates, workers=1, parser=Counting(), store=tmp_path / "store")
    assert {r.status for r in first} == {"stored"}
    assert [r.status for r in again] == ["skipped"] * len(candidates) and Counting.calls == 0
    assert [r.doc_id for r in again] == [r.doc_id for r in first]


@pytest.mark.slow  # worker processes that import the PDF stack (10-30 s each on 2 busy cores)
def test_a_hanging_or_crashing_parse_fails_its_file_and_the_others_are_stored(tmp_path, minilm) -> None:
    papers = tmp_path / "papers"
    candidates = library(papers)
    page_pdf(papers / "crash.pdf", "A paper the parser dies on", ["Abstract. " * 20])
    page_pdf(papers / "hang.pdf", "A paper the parser never finishes", ["Abstract. " * 20])
    candidates = [Candidate(key=file_key(p), source="library", path=str(p), found_by="test")
                  for p in sorted(papers.glob("*.pdf"))]
    results, _, _ = ingest(tmp_path, minilm, candidates, workers=2, parser=MisbehavingParser(), timeout_s=20)
    by_name = {Path(r.path or "").name: r for r in results}
    assert by_name["crash.pdf"].status == "failed" and "crashed" in by_name["crash.pdf"].reason
    assert by_name["hang.pdf"].status == "failed" and "took over 20 s" in by_name["hang.pdf"].reason
    assert [by_name[f"paper{n}.pdf"].status for n in range(len(TOPICS))] == ["stored"] * len(TOPICS)


@pytest.mark.parametrize(("setting", "expected"), [(3, 3), (1, 1)])
def test_parse_workers_follow_the_setting(setting, expected) -> None:
    assert parse_workers(setting) == expected


def test_parse_workers_default_to_the_usable_cores() -> None:
    import os

    assert parse_workers(0) == len(os.sched_getaffinity(0))
