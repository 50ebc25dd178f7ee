"""A library run reads the library by relevance, not by file name: LibrarySearch over the 16 shared real PDFs
(PyMuPDF first pages, BM25 against the requirements), the first pages cached by file hash."""

from __future__ import annotations

import shutil
from pathlib import Path

from actors.steps.events import RecordingEmit
from actors.steps.search.library import LibrarySearch, file_key, rank_files
from infra.ingest_cache import IngestCache
from messages.plan import Requirement, SearchQuery
from messages.search import SearchRequest
from messages.status import Stage

# written for two papers whose names sort last but two (sepsis_…, tracemonkey_…): by name they come in iteration 2
QUERY = ("How do tracing just-in-time compilers speed up JavaScript, and how is the onset of sepsis predicted "
         "from clinical time series?")
REQUIREMENTS = (Requirement(id="R1", text="How does trace-based just-in-time compilation speed up dynamically "
                                          "typed languages such as JavaScript?"),
                Requirement(id="R2", text="How is sepsis onset predicted early from irregularly sampled clinical "
                                          "time series?"))


def request(iteration: int = 1, exclude: tuple[str, ...] = (), **more) -> SearchRequest:
    return SearchRequest(run_id="run-rank", iteration=iteration, query=QUERY, requirements=REQUIREMENTS,
                         max_results=8, exclude_keys=exclude, **more)


def names(results) -> list[str]:
    return [Path(c.path).name for c in results.candidates]


def test_the_papers_a_query_is_about_are_offered_in_the_first_batch(tmp_path: Path, shared_pdfs: list[Path]) -> None:
    pdfs = shared_pdfs[0].parent
    by_name = sorted(p.name for p in pdfs.glob("*.pdf"))
    assert len(by_name) == 16
    assert {"sepsis_mgp_rnn_mlhc2017.pdf", "tracemonkey_pldi2009.pdf"}.isdisjoint(by_name[:8])  # name order fails
    emit = RecordingEmit("run-rank")
    cache = IngestCache(tmp_path / "cache")
    first = LibrarySearch(pdfs, emit=emit, cache=cache).search(request())
    offered = names(first)
    assert len(offered) == 8 and set(offered[:2]) == {"sepsis_mgp_rnn_mlhc2017.pdf", "tracemonkey_pldi2009.pdf"}
    results = [e.payload for e in emit.events if e.stage == Stage.SEARCH and e.kind == "results"]
    assert results[0]["offered"] == offered and results[0]["first_pages_cached"] == 0
    # the next iteration offers the other eight; every file exactly once over the run
    second = LibrarySearch(pdfs, cache=cache).search(request(2, tuple(c.key for c in first.candidates)))
    assert set(names(second)) == set(by_name) - set(offered) and second.exhausted


def test_a_second_run_reads_no_first_page_again(tmp_path: Path, monkeypatch, shared_pdfs: list[Path]) -> None:
    pdfs = shared_pdfs[0].parent
    import actors.steps.search.library as search

    cache = IngestCache(tmp_path / "cache")
    LibrarySearch(pdfs, cache=cache).search(request())
    monkeypatch.setattr(search, "first_page_text", lambda path, chars=0: (_ for _ in ()).throw(
        AssertionError(f"{path} read again")))
    emit = RecordingEmit("run-rank")
    again = LibrarySearch(pdfs, emit=emit, cache=cache).search(request())
    assert set(names(again)[:2]) == {"sepsis_mgp_rnn_mlhc2017.pdf", "tracemonkey_pldi2009.pdf"}
    assert [e.payload["first_pages_cached"] for e in emit.events if e.kind == "results"] == [16]


def test_search_strings_rank_too_and_unreadable_files_come_last_but_are_offered(
        tmp_path: Path, shared_pdfs: list[Path]) -> None:
    pdfs = shared_pdfs[0].parent
    lib = tmp_path / "lib"
    lib.mkdir()
    for name in ("dvt_prophylaxis_trauma_bmc2010.pdf", "reverb_openie_emnlp2011.pdf", "vespa_peerjcs2017.pdf"):
        shutil.copy(pdfs / name, lib / name)
    (lib / "a_empty.pdf").write_bytes(b"")
    (lib / "b_fake.pdf").write_bytes(b"not a pdf at all")
    req = SearchRequest(run_id="r", iteration=1, query="x", max_results=3, search_queries=(
        SearchQuery(text="open information extraction relation phrases"),))
    results = LibrarySearch(lib).search(req)
    assert names(results)[0] == "reverb_openie_emnlp2011.pdf"
    rest = LibrarySearch(lib).search(req.model_copy(update={
        "iteration": 2, "exclude_keys": tuple(c.key for c in results.candidates)}))
    assert names(rest) == ["a_empty.pdf", "b_fake.pdf"]  # no text read: last, in name order, still offered
    assert {c.key for c in rest.candidates} == {file_key(lib / "a_empty.pdf"), file_key(lib / "b_fake.pdf")}


def test_rank_files_keeps_name_order_on_ties_and_puts_empty_texts_last() -> None:
    texts = ["", "heparin prophylaxis trauma", "heparin", "unrelated words here", "javascript tracing compiler"]
    order = rank_files(texts, ["heparin prophylaxis after trauma", "tracing javascript compiler"])
    assert order[:2] == [1, 4] and order[-1] == 0 and order.index(2) < order.index(3)
    assert rank_files(["a b", "c d"], []) == [0, 1]
