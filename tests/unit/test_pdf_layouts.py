"""Page-1 metadata on synthetic first pages in the layouts of common publishers and venues that neither shared folder
holds (ICLR, NeurIPS, IEEE, Elsevier, Springer LNCS, PLOS, ACM, MDPI, Nature, a technical report, a thesis …): title,
first author and year, as a new user's library would have them. The layouts are written from those templates' public
first pages; the names and titles are invented. Found with them (docs/ingestion.md): ACM's "NAME, affiliation" lines
gave one author, a byline in capitals joined by "AND" one author of both, a thesis's degree statement hid its author."""

from __future__ import annotations

import unicodedata
from pathlib import Path

import pytest

from infra.pdf.pymupdf import PyMuPDFParser
from tests.factories import html_pdf

BODY = "We study how the method behaves on several data sets and report what we measured. " * 10


def p(size: int, text: str, bold: bool = False, align: str = "left") -> str:
    style = f"font-size:{size}px;text-align:{align}" + (";font-weight:bold" if bold else "")
    return f'<p style="{style}">{text}</p>'


T: dict[str, tuple[str, str, str, int]] = {}
T["iclr"] = (p(9, "Published as a conference paper at ICLR 2021") +
    p(17, "LEARNING TO SEGMENT RARE OBJECTS WITH FEW LABELS", True) +
    p(10, "Ada Lovelace<sup>1</sup> &amp; Alan Turing<sup>2</sup>", True) +
    p(10, "<sup>1</sup>Department of Computer Science, University of Oxford<br/><sup>2</sup>Google "
          "Research<br/>{ada,alan}@example.org") +
    p(12, "ABSTRACT", True, "center") + p(10, BODY),
    "Learning to Segment Rare Objects with Few Labels", "Lovelace", 2021)
T["neurips"] = (p(17, "Sparse Attention for Long Protein Sequences", True, "center") +
    p(10, "Grace Hopper<br/>Department of Biology<br/>Stanford University<br/>hopper@stanford.edu", False, "center") +
    p(10, "Barbara Liskov<br/>CSAIL<br/>MIT<br/>liskov@mit.edu", False, "center") +
    p(12, "Abstract", True, "center") + p(10, BODY) +
    p(8, "35th Conference on Neural Information Processing Systems (NeurIPS 2021), Sydney, Australia."),
    "Sparse Attention for Long Protein Sequences", "Hopper", 2021)
T["ieee"] = (p(8, "IEEE TRANSACTIONS ON PATTERN ANALYSIS AND MACHINE INTELLIGENCE, VOL. 40, NO. 2, FEBRUARY 2018") +
    p(20, "Robust Stereo Matching Under Changing Illumination", False, "center") +
    p(10, "Kenji Tanaka, <i>Member, IEEE</i>, and Maria Rossi, <i>Fellow, IEEE</i>", False, "center") +
    p(9, "<b>Abstract</b>—" + BODY),
    "Robust Stereo Matching Under Changing Illumination", "Tanaka", 2018)
T["elsevier"] = (p(8, "Journal of Hydrology 310 (2005) 28–61") + p(8, "Contents lists available at ScienceDirect") +
    p(16, "Groundwater recharge beneath irrigated cropland in a semi-arid basin", False) +
    p(11, "Peter Smith<sup>a,∗</sup>, Jane Doe<sup>b</sup>") +
    p(8, "<sup>a</sup>School of Earth Sciences, University of Melbourne, "
         "Australia<br/><sup>b</sup>CSIRO Land and Water, Canberra, Australia") +
    p(8, "Received 12 March 2004; accepted 5 January 2005") + p(9, "Abstract " + BODY),
    "Groundwater recharge beneath irrigated cropland in a semi-arid basin", "Smith", 2005)
T["lncs"] = (p(15, "Verifying Smart Contracts with Symbolic Execution", True, "center") +
    p(10, "Liu Wei<sup>1</sup> and Sara Cohen<sup>2(✉)</sup>", False, "center") +
    p(9, "<sup>1</sup> Tsinghua University, Beijing, China<br/><sup>2</sup> Tel Aviv University, "
         "Tel Aviv, Israel<br/>sara@tau.ac.il", False, "center") +
    p(9, "<b>Abstract.</b> " + BODY) +
    p(8, "© Springer Nature Switzerland AG 2019<br/>A. Editor (Ed.): CAV 2019, LNCS 11561, pp. "
         "1–18, 2019.<br/>https://doi.org/10.1007/978-3-030-25540-4_1"),
    "Verifying Smart Contracts with Symbolic Execution", "Liu", 2019)
T["plos"] = (p(10, "RESEARCH ARTICLE", True) +
    p(18, "Sleep duration and school performance in adolescents: A cohort study", True) +
    p(10, "Maria Garcia<sup>1☯*</sup>, Tom Becker<sup>2☯</sup>, Aiko Sato<sup>1</sup>") +
    p(8, "<b>Citation:</b> Garcia M, Becker T, Sato A (2018) Sleep duration and school performance "
         "in adolescents: A cohort study. PLoS ONE 13(5): e0197155. "
         "https://doi.org/10.1371/journal.pone.0197155") +
    p(8, "<b>Editor:</b> John Roe, University of Leeds<br/><b>Received:</b> November 2, "
         "2017<br/><b>Accepted:</b> April 30, 2018<br/><b>Published:</b> May 16, 2018") +
    p(10, "Abstract " + BODY),
    "Sleep duration and school performance in adolescents: A cohort study", "Garcia", 2018)
T["acm"] = (p(17, "Designing Voice Assistants for Older Adults", True) +
    p(10, "NOOR AHMED, University of Toronto, Canada<br/>LIAM O'BRIEN, Microsoft Research, USA") +
    p(9, BODY) +
    p(8, "<b>ACM Reference Format:</b><br/>Noor Ahmed and Liam O'Brien. 2023. Designing Voice "
         "Assistants for Older Adults. In <i>Proceedings of the 2023 CHI Conference on Human "
         "Factors in Computing Systems (CHI '23), April 23–28, 2023, Hamburg, Germany.</i> ACM, New "
         "York, NY, USA, 14 pages."),
    "Designing Voice Assistants for Older Adults", "Ahmed", 2023)
T["caps-authors"] = (p(18, "A Survey of Soil Carbon Models", True, "center") +
    p(10, "ADA LOVELACE AND ALAN TURING", False, "center") +
    p(9, "Rothamsted Research, Harpenden, UK", False, "center") + p(10, BODY) +
    p(8, "Soil Biology &amp; Biochemistry 45 (2012) 1–12"),
    "A Survey of Soil Carbon Models", "Lovelace", 2012)
T["report"] = (p(10, "Technical Report No. 2017-04") +
    p(20, "Estimating Traffic Demand from Mobile Phone Data", True, "center") +
    p(12, "by", False, "center") + p(12, "Martin L. King Jr. and Ana Souza", False, "center") +
    p(11, "May 2017", False, "center") + p(10, BODY),
    "Estimating Traffic Demand from Mobile Phone Data", "King", 2017)
T["mdpi"] = (p(9, "<i>Sustainability</i> <b>2020</b>, <i>12</i>, 4567; doi:10.3390/su12114567") +
    p(9, "Article", False) +
    p(17, "Urban Heat Islands and Green Roofs: Evidence from Twelve Cities", True) +
    p(10, "Chen Li <sup>1,*</sup>, Olga Petrova <sup>2</sup> and Ahmed Hassan <sup>1</sup>", True) +
    p(8, "<sup>1</sup> School of Architecture, Tongji University, Shanghai 200092, China<br/>* "
         "Correspondence: chenli@tongji.edu.cn") +
    p(8, "Received: 14 April 2020; Accepted: 28 May 2020; Published: 3 June 2020") + p(9, "<b>Abstract:</b> " + BODY),
    "Urban Heat Islands and Green Roofs: Evidence from Twelve Cities", "Li", 2020)
T["nature"] = (p(9, "Article") +
    p(19, "Deep-sea microbes fix nitrogen under high pressure", True) +
    p(10, "https://doi.org/10.1038/s41586-022-01234-5") +
    p(8, "Received: 3 March 2021<br/>Accepted: 12 January 2022<br/>Published online: 2 March 2022") +
    p(10, "Hannah Weber<sup>1,2</sup>, Luis Ortega<sup>1</sup> &amp; Mei Tanaka<sup>3</sup> ✉") + p(9, BODY),
    "Deep-sea microbes fix nitrogen under high pressure", "Weber", 2022)
T["thesis"] = (p(20, "Essays on Labour Markets and Migration", True, "center") +
    p(12, "A dissertation submitted in partial fulfilment of the requirements for the degree of "
          "Doctor of Philosophy", False, "center") +
    p(12, "Sofia Andersson", False, "center") +
    p(12, "Department of Economics<br/>Uppsala University<br/>2016", False, "center"),
    "Essays on Labour Markets and Migration", "Andersson", 2016)
T["two-line-title"] = (
    p(16, "Measuring the Effect of Minimum Wages on Employment<br/>in Small Firms", True, "center") +
    p(10, "Paul Martin<sup>†</sup> &nbsp; Lena Fischer<sup>‡</sup>", False, "center") +
    p(8, "<sup>†</sup>LSE &nbsp; <sup>‡</sup>DIW Berlin", False, "center") +
    p(10, "January 15, 2019", False, "center") + p(10, BODY),
    "Measuring the Effect of Minimum Wages on Employment in Small Firms", "Martin", 2019)


def norm(text: str | None) -> str:
    return " ".join(unicodedata.normalize("NFKC", text or "").casefold().split())


@pytest.fixture(scope="module")
def parser() -> PyMuPDFParser:
    return PyMuPDFParser(max_pages=1)


@pytest.mark.parametrize("layout", sorted(T))
def test_title_first_author_and_year_of_a_layout(parser: PyMuPDFParser, tmp_path: Path, layout: str) -> None:
    html, title, surname, year = T[layout]
    doc = parser.parse(html_pdf(tmp_path / f"{layout}.pdf", html,
                                metadata={"title": "", "author": "", "creationDate": "D:20240101"}))
    assert norm(doc.title) == norm(title)
    assert doc.authors and norm(surname) in norm(doc.authors[0]), doc.authors
    assert doc.year == year


def test_an_author_grid_set_apart_on_one_line(parser: PyMuPDFParser, tmp_path: Path) -> None:
    """An arXiv-style byline: three names side by side, each over its affiliation, set apart by space alone."""
    import pymupdf

    pdf = pymupdf.open()
    page = pdf.new_page()
    page.insert_text((100, 80), "Contrastive Pretraining for Tabular Data", fontsize=16, fontname="hebo")
    for x, name in ((110, "Ravi Kumar"), (250, "Emma Schmidt"), (390, "Jonas Berg")):
        page.insert_text((x, 110), name, fontsize=10)
        page.insert_text((x, 122), "Univ. of Washington", fontsize=9)
    page.insert_text((280, 150), "Abstract", fontsize=12, fontname="hebo")
    for i in range(20):
        page.insert_text((72, 170 + 12 * i), BODY[:84], fontsize=10)
    page.insert_text((72, 420), "arXiv:2105.01234v2 [cs.LG] 3 Jun 2021", fontsize=8)
    pdf.save(tmp_path / "grid.pdf")
    doc = parser.parse(tmp_path / "grid.pdf")
    assert doc.title == "Contrastive Pretraining for Tabular Data"
    assert doc.authors == ("Ravi Kumar", "Emma Schmidt", "Jonas Berg")
    assert doc.year == 2021
