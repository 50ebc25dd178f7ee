"""Section tree (markdown-it tokens → paths, kinds, exact spans) and token-window chunking.

Chunking uses the real all-MiniLM-L6-v2 tokenizer (``tokenizer.json`` only; the model is not loaded).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.steps.ingest.chunking import chunk_sections, context_line, pages_for, window_for, windows
from actors.steps.ingest.sections import FRONT_MATTER, outline, parse_number
from infra.embed.minilm import MiniLMEmbedder
from infra.embed.ollama import OllamaEmbedder
from infra.settings import Settings

DOC_ID = "ab" * 32

PAPER = (
    "# A Study of Things\n\n"
    "Alice Smith, Bob Jones\n\n"
    "## Abstract\n\n"
    "We study things.\n\n"
    "## 1 Introduction\n\n"
    "Intro text.\n\n"
    "## 2 Methods\n\n"
    "Methods text.\n\n"
    "### 2.1 Data Collection\n\n"
    "Data text. **Figure 1:** a caption stays here.\n\n"
    "#### Preprocessing\n\n"
    "Pre text.\n\n"
    "## References\n\n"
    "- [1] A. Author. A paper. 2001.\n"
    "- [2] B. Author. Another paper. 2002.\n"
)


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder()


def spans_of(md: str):
    return [(s.path, s.kind, s.char_start, s.char_end) for s in outline(md).sections]


# ---------------------------------------------------------------- sections

def test_paths_kinds_and_exact_offsets() -> None:
    out = outline(PAPER)
    at = PAPER.index
    assert out.title == "A Study of Things"
    assert [(s.path, s.kind, s.level) for s in out.sections] == [
        ("A Study of Things", "title", 0),
        ("Abstract", "abstract", 1),
        ("1 Introduction", "body", 1),
        ("2 Methods", "body", 1),
        ("2 Methods > 2.1 Data Collection", "body", 2),
        ("2 Methods > 2.1 Data Collection > Preprocessing", "body", 3),
        ("References", "references", 1),
    ]
    starts = [0, at("## Abstract"), at("## 1 Intro"), at("## 2 Methods"), at("### 2.1"), at("#### Pre"),
              at("## References")]
    assert [s.char_start for s in out.sections] == starts
    assert [s.char_end for s in out.sections] == starts[1:] + [len(PAPER)]
    data = out.sections[4]
    assert PAPER[data.char_start:data.body_start] == "### 2.1 Data Collection\n"
    assert "**Figure 1:** a caption stays here." in PAPER[data.body_start:data.char_end]
    assert out.abstract == "We study things."
    assert out.references == ("[1] A. Author. A paper. 2001.", "[2] B. Author. Another paper. 2002.")
    assert out.paths[0] == "A Study of Things" and len(out.paths) == 7


def test_offsets_count_crlf_and_cr_line_ends_like_markdown_it() -> None:
    md = PAPER.replace("\n", "\r\n")
    out = outline(md)
    assert [s.path for s in out.sections] == [s.path for s in outline(PAPER).sections]
    methods = out.sections[3]
    assert md[methods.char_start:methods.body_start] == "## 2 Methods\r\n"
    mixed = "# T\r\rtext\r\n\n## Next\nmore\n"
    nxt = outline(mixed).sections[-1]
    assert mixed[nxt.char_start:] == "## Next\nmore\n"


def test_sections_cover_all_text_and_preamble_is_front_matter() -> None:
    md = "Some words before any heading.\n\n## 1 Introduction\n\nText.\n"
    assert spans_of(md) == [(FRONT_MATTER, "title", 0, md.index("## 1")),
                            ("1 Introduction", "body", md.index("## 1"), len(md))]
    assert outline("").sections == () and outline("  \n\n ").sections == ()


def test_numbered_lines_and_one_item_lists_are_headings() -> None:
    md = ("Intro words.\n\n1 Introduction\n\nSome text here.\n\n2. METHODS\n\nMore text.\n\n"
          "2.1 Data Sources\n\nData.\n\n3 Results are shown in the table below.\n\nNot a heading.\n")
    paths = [s.path for s in outline(md).sections]
    assert paths == [FRONT_MATTER, "1 Introduction", "2. METHODS", "2. METHODS > 2.1 Data Sources"]
    methods = outline(md).sections[2]
    assert md[methods.char_start:methods.body_start] == "2. METHODS\n"


def test_an_affiliation_set_as_a_numbered_heading_is_not_a_section() -> None:
    """Seen in bench/suites/deep.yaml: the probation paper's every section after its first page sat under
    "1 Department of Policy Analysis and Management, Cornell University, Ithaca, NY, USA" (a one-line paragraph
    after Keywords); the Higgs paper's affiliation list made 15 such sections."""
    md = ("# Mortality on Probation\n\n## Abstract\n\nWe measure things.\n\n1 Department of Policy Analysis and "
          "Management, Cornell University, Ithaca, NY, USA\n\n## Methods\n\nWe counted.\n\n## Results\n\nRates rose."
          "\n\n### 3.7. Hospital stay\n\nShorter.\n\n## 36 Niels Bohr Institute, University of Copenhagen, Kobenhavn, "
          "Denmark\n\nMore names.\n\n## 30 CERN, Geneva, Switzerland\n\n## 82 Benemerita Universidad Autonoma de "
          "Puebla, Puebla, Mexico\n\n## 4 Data, methods, and results\n\nKept.\n")
    paths = [s.path for s in outline(md).sections]
    assert paths == ["Mortality on Probation", "Abstract", "Methods", "Results", "Results > 3.7. Hospital stay",
                     "4 Data, methods, and results"]


def test_a_misspelt_references_heading_still_heads_the_references() -> None:
    """Seen in bench/suites/asks.yaml: the silkworm paper (pdfs-extra) heads its references "REFFERENCES", and two
    reference entries were quoted as its findings."""
    md = ("# Phytojuvenoid\n\n## RESULTS\n\nLarvae grew.\n\n## REFFERENCES\n\n1. A. Author, 2001. A paper.\n\n"
          "## Preferences\n\nUsers liked it.\n")
    assert [(s.path, s.kind) for s in outline(md).sections] == [
        ("Phytojuvenoid", "body"), ("Phytojuvenoid > RESULTS", "body"), ("REFFERENCES", "references"),
        ("Preferences", "body")]


def test_roman_sections_and_letter_subsections() -> None:
    md = "# I. INTRODUCTION\n\na\n\n# II. MODEL\n\nb\n\n## A. Setup\n\nc\n\n# III. RESULTS\n\nd\n"
    assert [s.path for s in outline(md, title="Unrelated").sections] == [
        "I. INTRODUCTION", "II. MODEL", "II. MODEL > A. Setup", "III. RESULTS"]


def test_bold_lines_are_headings_only_without_real_headings() -> None:
    plain = "**Introduction**\n\nText one.\n\n**Related Work**\n\nText two.\n\n**Figure 2: A plot**\n\nmore\n"
    assert [s.path for s in outline(plain).sections] == ["Introduction", "Related Work"]
    with_headings = "# T\n\n## Abstract\n\nx\n\n## 1 Intro\n\n**Bold sentence**\n\ny\n\n## 2 End\n\nz\n"
    assert "1 Intro > Bold sentence" not in outline(with_headings).paths
    assert outline(with_headings).paths == ("T", "Abstract", "1 Intro", "2 End")


def test_unnumbered_headings_nest_by_markdown_level_and_top_names_stay_top() -> None:
    md = ("# Paper\n\n##### Abstract\n\nabs\n\n## Introduction\n\ni\n\n## Theory\n\nt\n\n### Sub one\n\ns\n\n"
          "#### Deeper\n\nd\n\n### Sub two\n\ns2\n\n#### References\n\n1. Ref one is here.\n")
    out = outline(md, title="Paper")
    assert [(s.path, s.kind) for s in out.sections] == [
        ("Paper", "title"), ("Abstract", "abstract"), ("Introduction", "body"), ("Theory", "body"),
        ("Theory > Sub one", "body"), ("Theory > Sub one > Deeper", "body"), ("Theory > Sub two", "body"),
        ("References", "references")]


def test_an_empty_heading_groups_its_same_level_successors_until_a_known_section() -> None:
    md = ("# Wheat\n\n### Introduction\n\ni\n\n### Materials and methods\n\n### Genetic materials\n\ng\n\n"
          "### Field trials\n\nf\n\n### Results\n\n### Yield\n\ny\n\n### Discussion\n\nd\n\n### Funding\n\nm\n")
    assert outline(md, title="Wheat").paths == (
        "Wheat", "Introduction", "Materials and methods", "Materials and methods > Genetic materials",
        "Materials and methods > Field trials", "Results", "Results > Yield", "Discussion", "Funding")


def test_front_matter_furniture_captions_and_repeated_title_are_not_sections() -> None:
    md = ("#### RESEARCH ARTICLE\n\n# Heat stress in wheat\n\n## Alice Smith, Bob Jones\n\n## Abstract\n\n"
          "#### OPEN ACCESS\n\nabstract text\n\n### Introduction\n\nintro\n\n#### Figure 4: Overview of things\n\n"
          "caption text\n\n### References\n\n1. One ref here.\n\n## Heat stress in wheat\n\n### Supplementary methods\n\n"
          "sup\n")
    out = outline(md, title="Heat stress in wheat")
    assert [(s.path, s.kind) for s in out.sections] == [
        ("Heat stress in wheat", "title"), ("Heat stress in wheat", "title"), ("Abstract", "abstract"),
        ("Introduction", "body"), ("References", "references"), ("Supplementary methods", "body")]
    assert "OPEN ACCESS" in out.abstract and "abstract text" in out.abstract
    intro = out.sections[3]
    assert "#### Figure 4: Overview of things" in md[intro.char_start:intro.char_end]


def test_abstract_from_a_labelled_paragraph_or_a_long_front_paragraph() -> None:
    labelled = "# My Title\n\nJane Doe\n\n**Abstract.** We show a thing. It works.\n\n## 1 Introduction\n\nx\n"
    out = outline(labelled)
    assert [(s.path, s.kind) for s in out.sections] == [
        ("My Title", "title"), ("Abstract", "abstract"), ("1 Introduction", "body")]
    assert out.abstract == "We show a thing. It works."

    long_para = " ".join(["This paper studies dark matter in the early universe."] * 8)
    unlabelled = f"# Ultra light bosons\n\nJane Doe and John Roe\n\n{long_para}\n\nA footnote.\n\n# I. INTRODUCTION\n\nx\n"
    out = outline(unlabelled)
    assert [(s.path, s.kind) for s in out.sections] == [
        ("Ultra light bosons", "title"), ("Abstract", "abstract"), ("Ultra light bosons", "title"),
        ("I. INTRODUCTION", "body")]
    assert out.abstract == long_para


def test_appendix_letters_after_references_are_top_level() -> None:
    md = ("# T\n\n## 1 Intro\n\na\n\n## References\n\n- Ref one, 2001.\n\n## A Background & Terminology\n\nb\n\n"
          "### A.1 Details\n\nc\n\n## B PDF filters\n\nd\n")
    out = outline(md)
    assert [(s.path, s.kind) for s in out.sections][2:] == [
        ("References", "references"), ("A Background & Terminology", "body"),
        ("A Background & Terminology > A.1 Details", "body"), ("B PDF filters", "body")]


def test_reference_paragraphs_are_split_at_consecutive_numbers() -> None:
    md = ("# T\n\n## References\n\n**1.** Fischer R. Trends of wheat. 1991; 3–27.\n\n"
          "**2.** Asseng S. Rising temperatures. Nat Clim Change. 2015; 5: 143–147. **3.** Reynolds M. Traits. "
          "Aust J Plant Physiol. 1994; 21: 717–730.\n")
    assert outline(md).references == (
        "1. Fischer R. Trends of wheat. 1991; 3–27.",
        "2. Asseng S. Rising temperatures. Nat Clim Change. 2015; 5: 143–147.",
        "3. Reynolds M. Traits. Aust J Plant Physiol. 1994; 21: 717–730.")


@pytest.mark.parametrize("text,expected", [
    ("2.1 Data Collection", ("arabic", ("2", "1"), "Data Collection")),
    ("3.1. Interactive", ("arabic", ("3", "1"), "Interactive")),
    ("IV. RESULTS", ("roman", ("IV",), "RESULTS")),
    ("A.1 Comparison", ("letter", ("A", "1"), "Comparison")),
    ("Abstract", None),
    ("2010s in review", None),
])
def test_parse_number(text: str, expected) -> None:
    assert parse_number(text) == expected


# ---------------------------------------------------------------- chunking

def test_window_follows_the_embedder() -> None:
    minilm_settings = Settings.load()
    assert window_for(minilm_settings, MiniLMEmbedder()) == (222, 32)  # 256 - [CLS]/[SEP] - 32 context tokens
    ollama_settings = Settings.load(embed={"backend": "ollama"})
    assert window_for(ollama_settings, OllamaEmbedder()) == (512, 64)
    small = Settings.load(embed={"chunk_tokens": 40, "chunk_overlap": 30})
    assert window_for(small, MiniLMEmbedder()) == (40, 20)  # overlap never above half the window


def test_chunks_slice_back_exactly_with_paths_kinds_pages(minilm: MiniLMEmbedder) -> None:
    out = outline(PAPER)
    pages = ((1, 0, PAPER.index("## 2 Methods")), (2, PAPER.index("## 2 Methods"), len(PAPER)))
    chunks = chunk_sections(DOC_ID, PAPER, out.sections, pages, minilm.token_spans, 50, 10)
    assert [c.chunk_id for c in chunks] == [f"{DOC_ID[:16]}:{i:05d}" for i in range(len(chunks))]
    assert [c.section_path for c in chunks] == [
        "A Study of Things", "Abstract", "1 Introduction", "2 Methods", "2 Methods > 2.1 Data Collection",
        "2 Methods > 2.1 Data Collection > Preprocessing", "References"]
    for chunk in chunks:
        assert PAPER[chunk.char_start:chunk.char_end] == chunk.text
        assert chunk.token_count == len(minilm.token_spans(chunk.text)) <= 50
        assert chunk.doc_id == DOC_ID
    assert chunks[1].text == "We study things." and chunks[1].section_kind == "abstract"
    assert chunks[-1].section_kind == "references" and chunks[-1].text.startswith("- [1] A. Author")
    assert chunks[2].pages == (1,) and chunks[4].pages == (2,)
    assert not any(c.text.startswith("#") for c in chunks)  # heading lines are not chunk text


def test_long_sections_get_overlapping_windows_cut_at_paragraphs(minilm: MiniLMEmbedder) -> None:
    paragraphs = [" ".join(f"word{p}x{i}" for i in range(12)) + "." for p in range(10)]
    md = "## 1 Long\n\n" + "\n\n".join(paragraphs) + "\n"
    out = outline(md)
    chunks = chunk_sections(DOC_ID, md, out.sections, (), minilm.token_spans, 100, 20)
    assert len(chunks) > 2
    for a, b in zip(chunks, chunks[1:]):
        assert b.char_start < a.char_end  # overlap
        assert b.char_start > a.char_start
    for chunk in chunks[:-1]:
        assert chunk.text.endswith(".")  # every full window ended at a paragraph end
        assert chunk.token_count <= 100
    covered = set()
    for c in chunks:
        covered.update(range(c.char_start, c.char_end))
    body = out.sections[0].body_start
    assert all(i in covered for i in range(body, len(md)) if md[i].isalnum())


def test_sections_without_words_give_no_chunks(minilm: MiniLMEmbedder) -> None:
    md = "## 1 Empty\n\n## 2 Rules\n\n---\n\n| - | - |\n\n## 3 Real\n\nReal words.\n"
    chunks = chunk_sections(DOC_ID, md, outline(md).sections, (), minilm.token_spans, 50, 10)
    assert [(c.section_path, c.text) for c in chunks] == [("3 Real", "Real words.")]


def test_context_line_is_cut_to_its_token_budget(minilm: MiniLMEmbedder) -> None:
    line = context_line("A very long title " * 20, "Methods > Data", minilm.token_spans)
    assert line.endswith("\n") and len(minilm.token_spans(line)) <= 32
    assert context_line("Short", "Methods > Data", minilm.token_spans) == "Short — Methods > Data\n"


def test_pages_for() -> None:
    spans = ((1, 0, 10), (2, 10, 20), (3, 22, 30))
    assert pages_for(5, 12, spans) == (1, 2)
    assert pages_for(20, 22, spans) == ()
    assert pages_for(0, 30, spans) == (1, 2, 3)


_PIECES = st.sampled_from(list("abcXYZ019 .,;:-*#_>|[]()\n\t\r") + [
    "é", "ﬁ", "中", "\u0301", "😀", "\x00", "## ", "\n\n", "1 ", "2. ", "**", "word", "Abstract", "References"])
_TEXT = st.one_of(st.lists(_PIECES, max_size=400).map("".join), st.text(max_size=600))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_TEXT, size=st.integers(min_value=1, max_value=60), overlap=st.integers(min_value=0, max_value=30))
def test_property_chunks_slice_back_and_fit_the_budget(text: str, size: int, overlap: int) -> None:
    embedder = _MINILM
    out = outline(text)
    for section in out.sections:
        assert 0 <= section.char_start <= section.body_start <= section.char_end <= len(text)
    covered_by_sections = set()
    for section in out.sections:
        covered_by_sections.update(range(section.char_start, section.char_end))
    assert all(i in covered_by_sections for i, ch in enumerate(text) if not ch.isspace())
    chunks = chunk_sections(DOC_ID, text, out.sections, ((1, 0, len(text)),), embedder.token_spans, size, overlap)
    for chunk in chunks:
        assert text[chunk.char_start:chunk.char_end] == chunk.text
        assert any(ch.isalnum() for ch in chunk.text)
        assert chunk.token_count == len(embedder.token_spans(chunk.text)) <= size
        assert chunk.pages == (1,)
    for section in out.sections:  # nothing with letters or digits is lost
        body = text[section.body_start:section.char_end]
        inside = [c for c in chunks if section.body_start <= c.char_start and c.char_end <= section.char_end]
        covered = set()
        for c in inside:
            covered.update(range(c.char_start, c.char_end))
        spans = embedder.token_spans(body)
        for start, end in spans:
            if any(ch.isalnum() for ch in body[start:end]):
                assert all(section.body_start + i in covered for i in range(start, end))


def test_windows_rejects_empty_budget(minilm: MiniLMEmbedder) -> None:
    with pytest.raises(ValueError):
        windows("text", minilm.token_spans, 0, 0)


_MINILM = MiniLMEmbedder()
