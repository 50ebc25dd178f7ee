"""Property tests of the section parser and chunker on paper-shaped Markdown.

tests/unit/test_sections_chunking.py fuzzes them with arbitrary text; here hypothesis builds
documents the parser must understand: ATX headings at any level (numbered, roman, empty, with
emphasis), bold pseudo-headings, lists, front matter, an Abstract and References, CRLF line ends.
Sections must come in order without overlapping and cover the text, each heading must sit between
its ``char_start`` and ``body_start``, and chunks must slice back exactly within the token window.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from actors.steps.ingest.chunking import chunk_sections
from actors.steps.ingest.sections import outline

WORDS = st.sampled_from(["fin", "zebrafish", "regrowth", "was", "measured", "daily", "Methods", "Results",
                         "ﬁsh", "中文", "naïve", "x²", "10.5%", "(n = 12)", "et al.", "[3]", "e.g.", "α-helix"])
SENTENCE = st.lists(WORDS, min_size=1, max_size=30).map(" ".join)
NAME = st.one_of(st.sampled_from(["Introduction", "Abstract", "Methods", "Results", "Discussion", "References",
                                  "Acknowledgements", "Appendix A", "Related Work", ""]), SENTENCE)
NUMBER = st.sampled_from(["", "1 ", "2. ", "3.1 ", "4.2.1 ", "IV. ", "A. ", "B.2 "])


@st.composite
def heading(draw) -> str:
    level = draw(st.integers(min_value=1, max_value=6))
    text = draw(NUMBER) + draw(NAME)
    if draw(st.booleans()):
        text = f"**{text}**" if text.strip() else text
    return f"{'#' * level} {text}".rstrip()


BLOCK = st.one_of(
    heading(),
    SENTENCE,
    st.lists(SENTENCE, min_size=1, max_size=4).map(lambda items: "\n".join(f"- {i}" for i in items)),
    NAME.map(lambda n: f"**{n}**"),
    st.lists(SENTENCE, min_size=2, max_size=6).map(lambda s: " ".join(s)),
)


@st.composite
def document(draw) -> str:
    blocks = draw(st.lists(BLOCK, min_size=1, max_size=25))
    newline = draw(st.sampled_from(["\n", "\r\n"]))
    return (newline * 2).join(b.replace("\n", newline) for b in blocks) + draw(st.sampled_from(["", newline]))


@pytest.fixture(scope="module")
def token_spans():
    from infra.embed.minilm import MiniLMEmbedder

    return MiniLMEmbedder().token_spans


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(markdown=document(), size=st.integers(min_value=4, max_value=80), overlap=st.integers(0, 20),
       title=st.one_of(st.none(), SENTENCE))
def test_outline_and_chunks_of_paper_shaped_markdown(token_spans, markdown: str, size: int, overlap: int,
                                                     title: str | None) -> None:
    out = outline(markdown, title)
    previous_end = 0
    for section in out.sections:
        assert previous_end <= section.char_start <= section.body_start <= section.char_end <= len(markdown)
        previous_end = section.char_end
        assert section.path.strip(), section
        if section.heading:  # the heading's words are in its heading lines
            head = markdown[section.char_start:section.body_start]
            assert all(w in head for w in section.heading.replace("*", "").split()[:3]), (section, head)
    covered = {i for s in out.sections for i in range(s.char_start, s.char_end)}
    assert all(i in covered for i, ch in enumerate(markdown) if not ch.isspace())
    chunks = chunk_sections("f" * 64, markdown, out.sections, ((1, 0, len(markdown)),), token_spans, size, overlap)
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))
    assert len({c.chunk_id for c in chunks}) == len(chunks)
    for chunk in chunks:
        assert markdown[chunk.char_start:chunk.char_end] == chunk.text
        assert chunk.token_count == len(token_spans(chunk.text)) <= size
