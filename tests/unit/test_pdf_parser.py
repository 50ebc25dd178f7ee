"""PyMuPDFParser on PDFs generated here (pymupdf Story → PDF) and on bad files made from them."""

from __future__ import annotations

from pathlib import Path

import pymupdf
import pytest

from infra.errors import PDFError
from infra.pdf import build_parser
from infra.pdf.page_year import pick_year
from infra.pdf.pymupdf import PyMuPDFParser, _page_markdown, _running_keys
from infra.settings import Settings
from tests.factories import html_pdf

SENTENCE = "Heat stress reduces wheat yield through faster grain filling and lower photosynthesis. "
PARA = SENTENCE * 6
PAPER_HTML = (
    "<h1>Heat Stress in Wheat Crops</h1><p>Ada Lovelace, Alan Turing</p>"
    f"<h2>Abstract</h2><p>{PARA}</p><h2>1 Introduction</h2><p>{PARA}</p><p>{PARA}</p>"
    f"<h2>2 Methods</h2><h3>2.1 Field trials</h3><p>{PARA}</p>"
    "<h2>References</h2><p>[1] A. Author. A paper about wheat. Journal of Crops, 2001.</p>"
    "<p>[2] B. Author. Another paper. 2002.</p>"
)


def make_pdf(path: Path, html: str = PAPER_HTML, *, repeat: int = 1, metadata: dict | None = None) -> Path:
    """The module's paper (or ``html``) as a PDF (tests/factories.py)."""
    return html_pdf(path, html, repeat=repeat, metadata=metadata)


@pytest.fixture(scope="module")
def parser() -> PyMuPDFParser:
    return PyMuPDFParser(max_pages=60, max_bytes=10_000_000)


@pytest.fixture(scope="module")
def paper(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_pdf(tmp_path_factory.mktemp("pdf") / "paper.pdf", metadata={
        "title": "Heat Stress in Wheat Crops", "author": "Ada Lovelace; Alan Turing", "creationDate": "D:20210304"})


def parse_error(parser: PyMuPDFParser, path: Path) -> PDFError:
    with pytest.raises(PDFError) as err:
        parser.parse(path)
    assert err.value.retryable is False
    return err.value


# ---------------------------------------------------------------- good files

def test_parses_markdown_with_headings_tables_of_pages_and_metadata(parser: PyMuPDFParser, paper: Path) -> None:
    doc = parser.parse(paper)
    assert doc.title == "Heat Stress in Wheat Crops"
    assert doc.authors == ("Ada Lovelace", "Alan Turing")
    assert doc.year == 2002  # latest year printed on page 1 (not after the creation year + 1)
    assert doc.n_pages == 1 and doc.flags == () and doc.parser.startswith("pymupdf4llm")
    assert "## **1 Introduction**" in doc.markdown and "### **2.1 Field trials**" in doc.markdown
    assert doc.page_spans == ((1, 0, len(doc.markdown)),)


TABLE_AND_EQUATION_HTML = (
    "<h1>Heat Stress in Wheat Crops</h1><p>Ada Lovelace</p>"
    f"<h2>Abstract</h2><p>{PARA}</p><h2>2 Results</h2><p>{PARA}</p>"
    "<table border='1'><tr><th>Cultivar</th><th>Yield (t/ha)</th><th>Loss (%)</th></tr>"
    "<tr><td>Alpha</td><td>5.2</td><td>12</td></tr><tr><td>Beta</td><td>4.8</td><td>18</td></tr></table>"
    f"<p>{PARA}</p><p style='text-align:center'>E = m c<sup>2</sup> + &#8721; x<sub>i</sub> (1)</p>"
    f"<p>{PARA}</p><p style='text-align:center'>G = k T<sup>2</sup> - &#8721; y<sub>j</sub> (2)</p>"
)


def test_tables_stay_markdown_tables_and_equations_stay_text(parser: PyMuPDFParser, tmp_path: Path) -> None:
    doc = parser.parse(make_pdf(tmp_path / "table.pdf", TABLE_AND_EQUATION_HTML))
    lines = doc.markdown.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("|") and "Cultivar" in line)
    assert set(lines[header + 1].replace("|", "")) == {"-"}  # the Markdown table's delimiter row
    assert lines[header + 2].split("|")[1:4] == ["Alpha", "5.2", "12"]
    assert lines[header + 3].split("|")[1:4] == ["Beta", "4.8", "18"]
    # equations stay as text, also one the layout model takes for a page footer though it is mid-page
    for start, number in (("E = m c", "(1)"), ("G = k T", "(2)")):
        equation = next(line for line in lines if line.startswith(start)).strip()
        assert "∑" in equation and equation.endswith(number)
    assert "<!--" not in doc.markdown and "<br>" not in doc.markdown  # no extraction markup around the equation


def test_page_spans_follow_pages(parser: PyMuPDFParser, tmp_path: Path) -> None:
    doc = parser.parse(make_pdf(tmp_path / "long.pdf", repeat=4))
    assert doc.n_pages > 1
    assert [p for p, _, _ in doc.page_spans] == list(range(1, doc.n_pages + 1))
    assert doc.page_spans[0][1] == 0 and doc.page_spans[-1][2] == len(doc.markdown)
    for (_, _, end), (_, start, _) in zip(doc.page_spans, doc.page_spans[1:]):
        assert end <= start
    assert "\r" not in doc.markdown


def test_max_pages_truncates_with_flag_and_note(tmp_path: Path) -> None:
    path = make_pdf(tmp_path / "long.pdf", repeat=4)
    full = PyMuPDFParser().parse(path)
    doc = PyMuPDFParser(max_pages=2).parse(path)
    assert doc.flags == ("truncated_pages:2",) and doc.n_pages == full.n_pages
    assert [p for p, _, _ in doc.page_spans] == [1, 2]
    assert doc.markdown.rstrip().endswith(f"pages 3–{full.n_pages} are not in this document.")
    first_two = doc.markdown[:doc.page_spans[-1][2]]
    assert first_two.count("## **1 Introduction**") == 2 and len(first_two) < len(full.markdown)


def test_owner_password_only_is_read_and_flagged(parser: PyMuPDFParser, paper: Path, tmp_path: Path) -> None:
    locked = tmp_path / "owner.pdf"
    pymupdf.open(paper).save(locked, encryption=pymupdf.PDF_ENCRYPT_AES_256, owner_pw="owner",
                             permissions=pymupdf.PDF_PERM_PRINT)
    doc = parser.parse(locked)
    assert "encrypted" in doc.flags and "1 Introduction" in doc.markdown


def test_repaired_file_is_flagged(parser: PyMuPDFParser, paper: Path, tmp_path: Path) -> None:
    data = paper.read_bytes()
    cut = data.rfind(b"startxref")
    broken = tmp_path / "broken_xref.pdf"
    broken.write_bytes(data[:cut] + b"startxref\n12345\n%%EOF\n")
    doc = parser.parse(broken)
    assert "repaired" in doc.flags and "1 Introduction" in doc.markdown


def test_running_heads_and_page_numbers_are_dropped(parser: PyMuPDFParser, tmp_path: Path) -> None:
    path = make_pdf(tmp_path / "heads.pdf", repeat=4)
    doc = pymupdf.open(path)
    for n, page in enumerate(doc):
        page.insert_text((60, 30), "Journal of Testing Things, Vol 3", fontsize=8)
        page.insert_text((280, 820), f"{n + 1} / {doc.page_count}", fontsize=8)
    doc.save(tmp_path / "with_heads.pdf")
    parsed = parser.parse(tmp_path / "with_heads.pdf")
    assert "Journal of Testing Things" not in parsed.markdown
    assert f" / {parsed.n_pages}" not in parsed.markdown
    assert parsed.markdown.count("1 Introduction") == 4


def test_repeated_edge_boxes_helper() -> None:
    def page(n: int) -> dict:
        segs = [("text", f"Running title of the paper {n}\n\n"), ("text", f"Body text {n} " * 20 + "\n\n"),
                ("page-footer", f"{n}\n\n"), ("text", f"{n} / 5\n\n")]
        text, boxes, pos = "", [], 0
        for cls, seg in segs:
            boxes.append({"class": cls, "pos": (pos, pos + len(seg))})
            text += seg
            pos += len(seg)
        return {"text": text, "page_boxes": boxes, "metadata": {"page_number": n}}

    pages = [page(n) for n in range(1, 6)]
    keys = _running_keys(pages)
    assert keys == {"running title of the paper #", "# / #"}
    assert _page_markdown(pages[2], keys, None) == "Body text 3 " * 20 + "\n\n"
    assert _running_keys(pages[:3]) == frozenset()  # too few pages to call anything running


def test_a_footer_box_mid_page_is_kept_and_one_in_the_margin_dropped() -> None:
    segs = [("page-header", "Journal of Things\n\n", (60, 20, 300, 32)),
            ("text", "Body text. " * 20 + "\n\n", (60, 100, 520, 400)),
            ("page-footer", "E = m c 2 (1)\n\n", (240, 580, 350, 594)),  # mid-page: the model misread it
            ("page-footer", "Page 3\n\n", (280, 810, 330, 822))]
    text, boxes = "", []
    for cls, seg, bbox in segs:
        boxes.append({"class": cls, "pos": (len(text), len(text) + len(seg)), "bbox": bbox})
        text += seg
    chunk = {"text": text, "page_boxes": boxes, "metadata": {"page_number": 3}, "page_height": 842.0}
    assert _page_markdown(chunk, frozenset(), None) == "Body text. " * 20 + "\n\nE = m c 2 (1)\n\n"
    del chunk["page_height"]  # margins unknown: every box goes as its class says
    assert _page_markdown(chunk, frozenset(), None) == "Body text. " * 20 + "\n\n"


def test_year_is_never_after_the_creation_year() -> None:
    meta = {"creationDate": "D:20090803160921Z"}
    assert pick_year(meta, "arXiv:0908.0054v1 1 Aug 2009; see [Smith 2004] and 2031 events") == 2009
    assert pick_year(meta, "no year printed") == 2009
    assert pick_year({}, "Proceedings 2017, cites 2015") == 2017
    assert pick_year({}, "nothing") is None


# ---------------------------------------------------------------- bad files: clear, non-retryable PDFError

def test_zero_byte_file(parser: PyMuPDFParser, tmp_path: Path) -> None:
    (tmp_path / "empty.pdf").write_bytes(b"")
    assert "empty file (0 bytes)" in str(parse_error(parser, tmp_path / "empty.pdf"))


def test_html_renamed_pdf(parser: PyMuPDFParser, tmp_path: Path) -> None:
    path = tmp_path / "paywall.pdf"
    path.write_text("<html><body>Please log in</body></html>")
    assert "not a PDF: starts with '<html><body>'" in str(parse_error(parser, path))


def test_truncated_download(parser: PyMuPDFParser, tmp_path: Path) -> None:
    data = make_pdf(tmp_path / "long.pdf", repeat=6).read_bytes()
    (tmp_path / "cut.pdf").write_bytes(data[:int(len(data) * 0.3)])
    assert "truncated" in str(parse_error(parser, tmp_path / "cut.pdf"))


def test_truncated_real_paper(parser: PyMuPDFParser, shared_pdfs: list[Path], tmp_path: Path) -> None:
    source = next(p for p in shared_pdfs if p.name.startswith("s2orc"))
    data = source.read_bytes()
    (tmp_path / "s2orc_cut.pdf").write_bytes(data[:int(len(data) * 0.3)])
    assert "truncated" in str(parse_error(parser, tmp_path / "s2orc_cut.pdf"))


def test_password_protected(parser: PyMuPDFParser, paper: Path, tmp_path: Path) -> None:
    locked = tmp_path / "locked.pdf"
    pymupdf.open(paper).save(locked, encryption=pymupdf.PDF_ENCRYPT_AES_256, user_pw="x", owner_pw="y")
    assert "password-protected" in str(parse_error(parser, locked))


def test_no_text_layer(parser: PyMuPDFParser, tmp_path: Path) -> None:
    doc = pymupdf.open()
    doc.new_page().draw_rect(pymupdf.Rect(50, 50, 200, 200), color=(1, 0, 0))
    doc.save(tmp_path / "scan.pdf")
    assert "no extractable text" in str(parse_error(parser, tmp_path / "scan.pdf"))


def test_too_large_and_missing(paper: Path, tmp_path: Path) -> None:
    small = PyMuPDFParser(max_bytes=1000)
    assert "over the limit of 1,000" in str(parse_error(small, paper))
    assert "file not found" in str(parse_error(small, tmp_path / "nope.pdf"))


def test_garbage_after_pdf_magic(parser: PyMuPDFParser, tmp_path: Path) -> None:
    path = tmp_path / "garbage.pdf"
    path.write_bytes(b"%PDF-1.7\n" + bytes(range(256)) * 20)
    err = parse_error(parser, path)
    assert path.name in str(err)


def test_build_parser_follows_settings() -> None:
    parser = build_parser(Settings.load(ingest={"max_pages": 7, "max_bytes": 1234}))
    assert isinstance(parser, PyMuPDFParser) and (parser.max_pages, parser.max_bytes) == (7, 1234)


@pytest.fixture
def without_layout():
    """pymupdf4llm's older (non-layout) path, as on a machine without pymupdf-layout; restored after."""
    import pymupdf4llm

    was = pymupdf4llm._use_layout
    pymupdf4llm.use_layout(False)
    try:
        yield
    finally:
        pymupdf4llm.use_layout(was)


def test_without_layout_mode_still_parses(without_layout: None, paper: Path) -> None:
    from actors.steps.ingest.sections import outline

    doc = PyMuPDFParser().parse(paper)
    assert "no_layout" in doc.flags and not doc.parser.endswith("+layout")
    assert doc.title == "Heat Stress in Wheat Crops" and doc.page_spans == ((1, 0, len(doc.markdown)),)
    assert outline(doc.markdown, doc.title).paths == (
        "Heat Stress in Wheat Crops", "Abstract", "1 Introduction", "2 Methods", "2 Methods > 2.1 Field trials",
        "References")


# ---------------------------------------------------------------- line-numbered manuscripts

MANUSCRIPT_LINES = ["Residues next to the binding motif change how strongly the two proteins bind in cells.",
                    "We measured binding for 628 variants of the motif in living yeast cells.",
                    "Variants outside the canonical motif changed the strength of the interaction.",
                    "A structural model predicts contacts between these residues and the domain.",
                    "The model explains why residues beyond the motif modulate binding affinity.",
                    "Together these results show that the motif alone does not set the affinity.",
                    "We propose that an additional pocket on the domain binds the flanking residues."]


def line_numbered_pdf(path: Path, first: int = 41, spacing: float = 15.0) -> Path:
    """A manuscript page as a journal submission sets it: a number in the left margin beside every line, and below
    the body a numbered list whose numbers stand far apart (paragraph numbers, not line numbers)."""
    doc = pymupdf.open()
    page = doc.new_page(width=595, height=842)
    y = 100.0
    for n, line in enumerate(MANUSCRIPT_LINES, start=first):
        page.insert_text((40 - pymupdf.get_text_length(str(n), fontsize=10), y), str(n), fontsize=10)
        page.insert_text((90, y), line, fontsize=10)
        y += spacing
    for n in range(1, 6):  # numbered paragraphs: one number per paragraph, 60 points apart
        page.insert_text((40, 420 + 60 * n), str(n), fontsize=10)
        page.insert_text((90, 420 + 60 * n), f"Paragraph {n} states one more finding about the motif.", fontsize=10)
    doc.save(path)
    return path


def test_a_manuscripts_line_numbers_are_not_run_into_its_sentences(parser: PyMuPDFParser, tmp_path: Path) -> None:
    """Seen on the varied run suite: the bioRxiv SH3 paper's quote read "… our structural predictions and 628
    interaction measurements indicate that …" (its line numbers, parsed into the sentence)."""
    from infra.pdf.pymupdf import line_number_boxes

    path = line_numbered_pdf(tmp_path / "manuscript.pdf")
    with pymupdf.open(path) as doc:
        assert len(line_number_boxes(doc[0])) == len(MANUSCRIPT_LINES)  # the paragraph numbers are not taken
    text = " ".join(parser.parse(path).markdown.split())
    for line in MANUSCRIPT_LINES:
        assert line in text  # not one line number inside or between the lines
    for number in range(41, 41 + len(MANUSCRIPT_LINES)):
        assert f" {number} " not in f" {text} "
    assert "628 variants" in text  # a number of the body stays
    assert "1 Paragraph 1 states" in text and "3 Paragraph 3 states" in text  # the paragraph numbers stay


def test_numbers_spaced_wider_than_lines_or_out_of_order_are_not_line_numbers(tmp_path: Path) -> None:
    from infra.pdf.pymupdf import line_number_boxes

    with pymupdf.open(line_numbered_pdf(tmp_path / "wide.pdf", spacing=40.0)) as doc:
        assert line_number_boxes(doc[0]) == []  # a reference list's numbers: wider apart than its lines
    doc = pymupdf.open()
    page = doc.new_page(width=595, height=842)
    for k, n in enumerate((7, 3, 12, 5, 9, 1)):  # a column of figures in the margin, not counting up
        page.insert_text((30, 100 + 15 * k), str(n), fontsize=10)
    assert line_number_boxes(page) == []


@pytest.mark.slow
def test_the_shared_line_numbered_preprint_reads_as_prose(parser: PyMuPDFParser, shared_data: Path) -> None:
    """The bioRxiv preprint of pdfs-extra (a number beside each of its 1,144 lines): the sentence the run suite
    quoted reads whole."""
    path = shared_data / "pdfs-extra" / "biorxiv_sh3_motif_linenumbers.pdf"
    if not path.exists():
        pytest.skip(f"the shared extra papers are not here: {path}")
    text = " ".join(parser.parse(path).markdown.split())
    assert ("our structural predictions and interaction measurements indicate that residues outside the canonical "
            "Pbs2 motif could directly interact") in text
