"""Dedupe keys and the Deduper: one paper found by several sources and iterations is one candidate."""

from __future__ import annotations

import pytest

from infra.sources.keys import (
    Deduper,
    candidate_keys,
    merge,
    normalize_arxiv_id,
    normalize_doi,
    normalize_openalex_id,
    primary_key,
    title_key,
)
from messages.search import Candidate


@pytest.mark.parametrize(("raw", "expected"), [
    ("https://doi.org/10.1145/3580305.3599544", "10.1145/3580305.3599544"),
    ("http://dx.doi.org/10.1073/PNAS.1414271111", "10.1073/pnas.1414271111"),
    ("doi:10.5121/vlsic.2012.3205", "10.5121/vlsic.2012.3205"),
    ("  10.1162/99608F92.18DA72DB ", "10.1162/99608f92.18da72db"),
    ("not a doi", None), ("", None), (None, None),
])
def test_normalize_doi(raw, expected):
    assert normalize_doi(raw) == expected


@pytest.mark.parametrize(("raw", "expected"), [
    ("2101.00001v2", "2101.00001"),
    ("arXiv:2101.00001", "2101.00001"),
    ("https://arxiv.org/abs/2101.00001v2", "2101.00001"),
    ("http://arxiv.org/pdf/2304.05376v3.pdf", "2304.05376"),
    ("https://arxiv.org/pdf/2208.03461", "2208.03461"),
    ("https://doi.org/10.48550/arxiv.2312.07559", "2312.07559"),
    ("hep-th/9901001v1", "hep-th/9901001"),
    ("math.CO/0101001", "math.CO/0101001"),
    ("abc", None), ("https://example.org/abs/x", None), (None, None),
])
def test_normalize_arxiv_id(raw, expected):
    assert normalize_arxiv_id(raw) == expected


def test_openalex_id_and_title_key():
    assert normalize_openalex_id("https://openalex.org/W2068311567") == "W2068311567"
    assert normalize_openalex_id("w12") == "W12" and normalize_openalex_id("A123") is None
    a = title_key("Café: Über-Learning, Revisited!", "José  Müller", 2021)
    b = title_key("cafe uber learning revisited", "J. Muller", 2021)
    assert a == b == "title:cafe uber learning revisited|muller|2021"
    assert title_key("Same", "X", 2020) != title_key("Same", "X", 2021)
    assert title_key("  ", "X", 2020) is None


def _c(**kw) -> Candidate:
    kw.setdefault("key", primary_key(doi=kw.get("doi"), arxiv_id=kw.get("arxiv_id"),
                                     openalex_id=kw.get("openalex_id"), title=kw.get("title"),
                                     first_author=(kw.get("authors") or [None])[0], year=kw.get("year")))
    return Candidate(**kw)


def test_primary_key_order_doi_arxiv_openalex_title():
    assert primary_key(doi="10.1/X", arxiv_id="2101.00001", openalex_id="W1", title="t") == "doi:10.1/x"
    assert primary_key(arxiv_id="2101.00001v3", openalex_id="W1", title="t") == "arxiv:2101.00001"
    assert primary_key(openalex_id="https://openalex.org/W1", title="t") == "openalex:W1"
    assert primary_key(title="A Title", first_author="Ann Lee", year=2020) == "title:a title|lee|2020"
    with pytest.raises(ValueError):
        primary_key()
    keys = candidate_keys(_c(doi="10.1/x", arxiv_id="2101.00001v1", openalex_id="W1", title="T",
                             authors=("A B",), year=2020))
    assert keys == {"doi:10.1/x", "arxiv:2101.00001", "openalex:W1", "title:t|b|2020"}


def test_arxiv_and_openalex_hits_of_one_paper_merge_keeping_both_pdfs_and_ids():
    arxiv_hit = _c(source="arxiv", arxiv_id="2306.14003", title="A Paper on Things", authors=("Ann Lee",),
                   year=2023, abstract="short", pdf_urls=("https://arxiv.org/pdf/2306.14003",), found_by="things")
    openalex_hit = _c(source="openalex", doi="10.1145/3580305.3599544", openalex_id="W4385568269",
                      arxiv_id="2306.14003", title="A paper on things", authors=("Ann Lee", "Bo Chen"), year=2023,
                      abstract="a much longer abstract", venue="KDD",
                      pdf_urls=("https://dl.acm.org/x.pdf", "https://arxiv.org/pdf/2306.14003"))
    d = Deduper()
    out = d.add([arxiv_hit, openalex_hit])
    assert len(out) == 1
    m = out[0]
    assert m.key == "doi:10.1145/3580305.3599544" and m.source == "arxiv"
    assert (m.doi, m.arxiv_id, m.openalex_id, m.venue) == ("10.1145/3580305.3599544", "2306.14003",
                                                           "W4385568269", "KDD")
    assert m.pdf_urls == ("https://arxiv.org/pdf/2306.14003", "https://dl.acm.org/x.pdf")
    assert m.abstract == "a much longer abstract" and m.authors == ("Ann Lee", "Bo Chen")
    assert d.get("arxiv:2306.14003") == m == d.get("openalex:W4385568269")


def test_found_again_in_a_later_iteration_is_not_new_but_merged():
    d = Deduper()
    first = _c(openalex_id="W1", title="Title One", authors=("X Y",), year=2020)
    assert d.add([first]) == [first]
    again = _c(openalex_id="W1", doi="10.9/abc", title="Title One", authors=("X Y",), year=2020,
               pdf_urls=("https://x/y.pdf",))
    by_title = _c(title="title one!", authors=("X. Y",), year=2020)
    assert d.add([again, by_title]) == []
    assert d.get("openalex:W1").pdf_urls == ("https://x/y.pdf",) and d.get("doi:10.9/abc").doi == "10.9/abc"
    assert d.seen(by_title) and not d.seen(_c(title="Other", year=2020))


def test_a_candidate_linking_two_known_records_merges_them():
    d = Deduper()
    a = _c(doi="10.1/a", title="Alpha", year=2020)
    b = _c(arxiv_id="2101.00001", title="Alpha preprint", year=2019)
    assert len(d.add([a, b])) == 2
    link = _c(doi="10.1/a", arxiv_id="2101.00001v2", title="Alpha", year=2020)
    assert d.add([link]) == []
    assert d.get("doi:10.1/a") is d.get("arxiv:2101.00001")
    assert d.get("doi:10.1/a").arxiv_id == "2101.00001"


def test_seen_keys_from_earlier_iterations_exclude():
    d = Deduper(seen_keys=["doi:10.1/a"])
    assert d.add([_c(doi="10.1/A", title="x")]) == []
    assert len(d.add([_c(doi="10.1/b", title="y")])) == 1


def test_merge_unions_failures_and_keeps_path():
    a = _c(doi="10.1/a", title="t", path="/p/a.pdf", download_failures=("u1: HTTP 404",))
    b = _c(doi="10.1/a", title="t", abstract_only=True, download_failures=("u2: not a PDF",))
    m = merge(a, b)
    assert m.path == "/p/a.pdf" and not m.abstract_only
    assert m.download_failures == ("u1: HTTP 404", "u2: not a PDF")
