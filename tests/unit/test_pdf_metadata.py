"""Page-1 metadata rules of the PyMuPDF parser (title, first author, year) for PDFs in general: on small PDFs made
here with the layouts that broke them (a running proceedings header, a title over several lines, an author line
with affiliation marks, download stamps), on the rules' own functions, and on every paper of the two shared folders
against their truth tables (tests/data/shared_pdfs_metadata.json, tests/data/extra_pdfs_metadata.json)."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import pytest

from infra.errors import PDFError
from infra.pdf.page_one import _sensible_title, _title_from_lines, metadata_authors, page_one_lines
from infra.pdf.page_year import pick_year
from infra.pdf.pymupdf import PyMuPDFParser
from tests.factories import html_pdf

DATA = Path(__file__).parents[1] / "data"
SHARED_DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
SETS = {"pdfs": DATA / "shared_pdfs_metadata.json", "pdfs-extra": DATA / "extra_pdfs_metadata.json"}

LONG_TITLE = ("Graph Attention over Citation Contexts Improves Retrieval of Scientific Claims in Biomedical "
              "Literature Search")
ACL_HEADER = ("Proceedings of the 45th Annual Meeting of the Association of Computational Linguistics, pages 104–111, "
              "Prague, Czech Republic, June 2007. ©2007 Association for Computational Linguistics")
BODY = "We study how citation contexts help find claims in papers. " * 12


def norm(text: str | None) -> str:
    return " ".join(unicodedata.normalize("NFKC", text or "").casefold().split())


@pytest.fixture(scope="module")
def parser() -> PyMuPDFParser:
    return PyMuPDFParser(max_pages=1)


def paper_html(header: str, title: str, byline: str, footer: str = "") -> str:
    return (f'<p style="font-size:8px">{header}</p>'
            f'<p style="font-size:22px;font-weight:bold">{title}</p>'
            f'<p style="font-size:11px">{byline}</p>'
            '<p style="font-size:9px"><sup>1</sup>University of Somewhere <sup>2</sup>Institute of Elsewhere</p>'
            f'<p style="font-size:12px;font-weight:bold">Abstract</p><p style="font-size:10px">{BODY}</p>'
            f'<p style="font-size:8px">{footer}</p>')


# ---------------------------------------------------------------------- synthetic PDFs, parsed as ingestion does
@pytest.mark.parametrize("info", [
    {},  # no title or author in the info dictionary: the page alone
    {"title": "Graph Attention over Citation Contexts"},  # the title's first line only
    {"title": "Proceedings of the 45th Annual Meeting of the Association of Computational Linguistics",
     "author": "Association for Computational Linguistics"},  # the running header's venue
    {"author": "Cambridge Journals"},  # the publisher
], ids=["page only", "title cut at its line break", "proceedings header", "publisher as author"])
def test_a_title_over_three_lines_under_a_proceedings_header_with_a_marked_byline(parser: PyMuPDFParser,
                                                                                tmp_path: Path, info: dict) -> None:
    byline = "Yichen He<sup>∗1</sup>, Guanhua Huang<sup>†2</sup> and Wei Zhang<sup>1</sup>"
    doc = parser.parse(html_pdf(tmp_path / "acl.pdf", paper_html(ACL_HEADER, LONG_TITLE, byline),
                                metadata={"title": "", "author": "", "creationDate": "D:20070601", **info}))
    assert norm(doc.title) == norm(LONG_TITLE)  # all three lines, not the proceedings header
    assert doc.authors[:3] == ("Yichen He", "Guanhua Huang", "Wei Zhang")  # marks dropped, never on the title
    assert doc.year == 2007


def test_marks_set_as_superscripts_are_not_part_of_the_page_lines(tmp_path: Path) -> None:
    import pymupdf

    path = html_pdf(tmp_path / "marks.pdf", paper_html("", "A Short Title", "Ada Lovelace<sup>1,2</sup>, "
                                                       "Alan Turing<sup>∗</sup>"))
    with pymupdf.open(path) as pdf:
        texts = [text for _, _, text in page_one_lines(pdf)]
    assert "Ada Lovelace , Alan Turing" in texts


def test_a_download_stamp_is_not_the_papers_year_and_a_venue_line_is(parser: PyMuPDFParser, tmp_path: Path) -> None:
    header = ("Downloaded from http://journals.example.org/abc by a reader on 08/16/2025<br/>"
              "Journal of Hydrology 310 (2005) 253–265")
    doc = parser.parse(html_pdf(tmp_path / "stamp.pdf", paper_html(header, "The Response of Flow Duration Curves to "
                                                                           "Afforestation", "Patrick Lane, Alice Best"),
                                metadata={"creationDate": "D:20250816"}))
    assert doc.year == 2005
    assert doc.authors[0] == "Patrick Lane"


@pytest.mark.parametrize(("byline", "authors"), [
    # ACM's journal layout: a line per author, the name in capitals, then the affiliation
    ("NOOR AHMED, University of Toronto, Canada<br/>LIAM O'BRIEN, Microsoft Research, USA",
     ("Noor Ahmed", "Liam O'Brien")),
    ("ADA LOVELACE AND ALAN TURING", ("Ada Lovelace", "Alan Turing")),  # a byline in capitals
], ids=["name and affiliation per line", "capitals joined by AND"])
def test_bylines_of_layouts_the_shared_papers_do_not_have(parser: PyMuPDFParser, tmp_path: Path, byline: str,
                                                          authors: tuple[str, ...]) -> None:
    """Found on synthetic first pages in common publishers' layouts (docs/ingestion.md): the byline gave one
    author, or all of them as one."""
    html = (f'<p style="font-size:17px;font-weight:bold">Designing Voice Assistants for Older Adults</p>'
            f'<p style="font-size:10px">{byline}</p><p style="font-size:9px">{BODY}</p>')
    doc = parser.parse(html_pdf(tmp_path / "byline.pdf", html, metadata={"title": "", "author": ""}))
    assert doc.title == "Designing Voice Assistants for Older Adults"
    assert doc.authors == authors


# ---------------------------------------------------------------------- the rules' functions
PAGE = [(8.0, 40.0, "Proceedings of the 45th Annual Meeting of the Association of Computational Linguistics"),
        (17.0, 80.0, "PaSa: An LLM Agent for Comprehensive"),
        (17.0, 100.0, "Academic Paper Search"),
        (11.0, 130.0, "Yichen He , Guanhua Huang , Wei Zhang")]


def test_a_title_cut_at_its_line_break_is_completed_from_the_lines_in_its_font() -> None:
    assert _title_from_lines("PaSa: An LLM Agent for Comprehensive", PAGE) == \
        "PaSa: An LLM Agent for Comprehensive Academic Paper Search"


def test_an_author_line_glued_onto_the_title_is_cut_off() -> None:
    glued = "PaSa: An LLM Agent for Comprehensive Academic Paper Search Yichen He∗1"
    assert _title_from_lines(glued, PAGE) == "PaSa: An LLM Agent for Comprehensive Academic Paper Search"


def test_a_subtitle_on_its_own_smaller_line_is_joined_with_a_colon_but_an_author_line_is_not() -> None:
    lines = [(19.9, 90.0, "Percutaneous endoscopic lumbar discectomy"), (19.9, 110.0, "herniation"),
             (15.9, 135.0, "A meta-analysis"), (10.5, 155.0, "Xiaoliang Bai, MD, Yong Lian, MM")]
    assert _title_from_lines("Percutaneous endoscopic lumbar discectomy herniation", lines) == \
        "Percutaneous endoscopic lumbar discectomy herniation: A meta-analysis"
    byline = [(19.9, 90.0, "A Study of Things"), (14.0, 115.0, "Jane Roe and John Doe"), (9.0, 135.0, "Somewhere")]
    assert _title_from_lines("A Study of Things", byline) == "A Study of Things"


def test_a_metadata_title_in_ascii_math_gives_way_to_the_page() -> None:
    lines = [(17.2, 233.0, "Combined Measurement of the Higgs Boson Mass in pp"),
             (17.9, 241.0, "Collisions at √s = 7 and 8 TeV"), (14.3, 327.0, "The ATLAS and CMS Collaborations")]
    meta = "Combined Measurement of the Higgs Boson Mass in pp Collisions at sqrt(s) = 7 and 8 TeV"
    assert _title_from_lines(meta, lines, from_metadata=True) == \
        "Combined Measurement of the Higgs Boson Mass in pp Collisions at √s = 7 and 8 TeV"


def test_venue_and_issue_lines_are_never_a_title() -> None:
    page = "Développement durable et territoires Vol. 4, n°3 | Octobre 2013 Proceedings of the 45th Annual Meeting"
    assert not _sensible_title("Développement durable et territoires, Vol. 4, n°3 | Octobre 2013", page)
    assert not _sensible_title("Proceedings of the 45th Annual Meeting of the Association of Computational "
                               "Linguistics", page + " of the Association of Computational Linguistics")


def test_metadata_authors_lose_degrees_marks_and_publishers() -> None:
    assert metadata_authors("Christopher Wildeman, PhD, Alyssa W. Goldman, MA, and Emily A. Wang, MD, MAS") == \
        ["Christopher Wildeman", "Alyssa W. Goldman", "Emily A. Wang"]
    assert metadata_authors("Pablo E. Branchi *") == ["Pablo E. Branchi"]
    assert metadata_authors("Nina Brooks MPP") == ["Nina Brooks"]
    assert metadata_authors("Cambridge Journals") == []
    assert metadata_authors("Association for Computational Linguistics") == []
    assert metadata_authors("ATLAS and CMS Collaborations") == ["ATLAS and CMS Collaborations"]


@pytest.mark.parametrize(("text", "meta", "year"), [
    ("Journal of Hydrology 310 (2005) 253–265\nDownloaded via UNIV on June 25, 2025 at 16:13:17 (UTC).", {}, 2005),
    ("Vol. 4, n°3 | Octobre 2013, mis en ligne le 30 octobre 2013, consulté le 03 septembre 2017.", {}, 2013),
    ("Received 20 May 1996\n131.155.81.2 On: Sat, 22 Nov 2014 00:09:14", {}, 1996),
    ("Year of publication: 2012\nPublished on OpenEdition Books: 1 June\n2015", {}, 2012),
    ("Open Book Publishers, 2012 (generated 26 October 2017)", {}, 2012),
    ("Advances in Neural Information Processing Systems 21; as shown by Smith (2006)", {}, 2008),
    ("as shown by Smith (2006)", {"Published": "2008", "creationDate": "D:20090101"}, 2008),
    ("arXiv:2501.10120v1 [cs.IR]; cites work of 2023", {}, 2025),
    ("Proceedings of NAACL-HLT 2018 c 2017 Association for Computational Linguistics", {}, 2018),
])
def test_the_year_comes_from_venue_date_and_copyright_lines_and_arxiv_ids(text: str, meta: dict, year: int) -> None:
    assert pick_year(meta, text) == year


# ---------------------------------------------------------------------- the real papers of both shared folders
def _cases() -> list[tuple[str, str, dict]]:
    return [(folder, name, truth) for folder, file in SETS.items()
            for name, truth in json.loads(file.read_text())["papers"].items()]


@pytest.mark.slow
@pytest.mark.parametrize(("folder", "name", "truth"), _cases(), ids=lambda v: v if isinstance(v, str) else "")
def test_title_first_author_and_year_of_the_shared_papers(parser: PyMuPDFParser, folder: str, name: str,
                                                          truth: dict) -> None:
    path = SHARED_DATA / folder / name
    if not path.exists():
        pytest.skip(f"the shared papers are not here: {path} (../shared/data/{folder} beside the repository)")
    try:
        doc = parser.parse(path)  # page 1 only: every metadata field is read from it
    except PDFError:
        assert truth["title"] is None and truth["first_author_surname"] is None  # no text layer, nothing printed
        return
    assert norm(doc.title) == norm(truth["title"])
    assert doc.authors and norm(truth["first_author_surname"]) in norm(doc.authors[0])
    if truth["year"] is not None:
        assert doc.year == truth["year"]
