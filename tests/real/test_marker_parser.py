"""The Marker backend on real shared papers: runs where marker-pdf (``pip install 'forage[marker]'``)
and its models (``python -m infra.pdf.marker fetch`` into ``MODEL_CACHE_DIR``) exist, skipped
elsewhere with the reason. Same checks as the PyMuPDF backend: title, sections, page spans and
chunk offsets that slice the Markdown back exactly, the bad-file checks, the page cap."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.steps.ingest.chunking import chunk_sections, window_for
from actors.steps.ingest.sections import outline
from infra.errors import PDFError
from infra.pdf.marker import FETCH_COMMAND, marker_importable, model_cache_dir, models_present
from infra.settings import Settings

pytestmark = pytest.mark.slow

PAPERS = ["s2orc_acl2020.pdf", "vespa_peerjcs2017.pdf", "papermage_emnlp2023demo.pdf"]


def _skip_reason() -> str | None:
    if not marker_importable():
        return "marker-pdf is not installed (pip install 'forage[marker]')"
    ok, why = models_present(model_cache_dir())
    return None if ok else f"{why} — on a connected machine: {FETCH_COMMAND}"


_REASON = _skip_reason()
if _REASON:
    pytestmark = [pytest.mark.slow, pytest.mark.skip(reason=_REASON)]


@pytest.fixture(scope="module")
def marker() -> object:
    from infra.pdf.marker import MarkerParser

    return MarkerParser(max_pages=30)


@pytest.mark.parametrize("name", PAPERS)
def test_marker_parses_a_real_paper(marker, shared_pdfs: list[Path], name: str) -> None:
    from infra.embed.minilm import MiniLMEmbedder

    path = next(p for p in shared_pdfs if p.name == name)
    parsed = marker.parse(path)
    assert parsed.parser.startswith("marker-")
    assert parsed.title and len(parsed.title.split()) >= 3
    assert parsed.n_pages >= 4 and parsed.page_spans
    pages = [p for p, _, _ in parsed.page_spans]
    assert pages == sorted(pages) and pages[0] == 1
    for _, start, end in parsed.page_spans:
        assert 0 <= start < end <= len(parsed.markdown)
    tree = outline(parsed.markdown, parsed.title)
    top = {s.path.split(" > ")[0] for s in tree.sections if s.kind == "body"}
    assert len(top) >= 3, sorted(top)
    assert tree.abstract
    assert len(tree.references) >= 10
    embedder = MiniLMEmbedder()
    max_tokens, overlap = window_for(Settings.load(), embedder)
    chunks = chunk_sections("d" * 64, parsed.markdown, tree.sections, parsed.page_spans, embedder.token_spans,
                            max_tokens, overlap)
    assert chunks
    for chunk in chunks:
        assert parsed.markdown[chunk.char_start:chunk.char_end] == chunk.text
        assert chunk.pages


def test_marker_keeps_the_bad_file_checks_and_the_page_cap(marker, shared_pdfs: list[Path],
                                                           tmp_path: Path) -> None:
    from infra.pdf.marker import MarkerParser

    fake = tmp_path / "notes.pdf"
    fake.write_text("not a pdf at all")
    with pytest.raises(PDFError, match="not a PDF"):
        marker.parse(fake)
    capped = MarkerParser(max_pages=2).parse(next(p for p in shared_pdfs if p.name == "vespa_peerjcs2017.pdf"))
    assert "truncated_pages:2" in capped.flags
    assert max(p for p, _, _ in capped.page_spans) <= 2
    assert "only the first 2 of" in capped.markdown
