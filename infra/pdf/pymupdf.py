"""PDF → Markdown with PyMuPDF4LLM (layout mode), page spans, title / authors / year.

Layout mode: ``pymupdf4llm`` switches to the PyMuPDF-Layout engine by itself when the
``pymupdf-layout`` package is importable (``import pymupdf.layout`` succeeds at import time). It
classifies every box of a page (title, section-header, text, list-item, table, caption, footnote,
page-header, page-footer, picture, formula), emits headings as ``#`` lines and tables as Markdown
tables. Without it the parser still works on pymupdf4llm's older path (flag ``no_layout``), where
headings are often bold lines (the section parser recognises those too).

What this parser does on top of pymupdf4llm:

* refuses bad files with a :class:`PDFError` (``retryable=False``) and a reason a person can act on:
  empty file, not a PDF (says what it starts with), larger than ``max_bytes``, password-protected,
  truncated (MuPDF had to repair it and the ``%%EOF`` marker is missing), no pages, no text layer;
* flags ``repaired`` (MuPDF rebuilt a damaged cross-reference table but the file ends properly),
  ``encrypted`` (encrypted without a user password, readable), ``truncated_pages:<n>`` (only the
  first ``n = max_pages`` pages were parsed; a note at the end of the Markdown says so),
  ``unreadable_pages:<list>`` and ``no_layout``;
* drops page headers and footers (layout classes ``page-header`` / ``page-footer``) and short text
  boxes that repeat at the top or bottom of most pages (running heads, "3 / 21"); a page-1
  "header" that is really the paper's title is kept as a ``#`` heading;
* joins the per-page Markdown (``page_chunks=True``) and records ``page_spans``;
* picks the title (sensible metadata title confirmed by page-1 text → layout ``title`` box →
  largest page-1 heading → largest horizontal page-1 font; a venue, issue or publisher line is never one),
  then sets it against the page-1 lines in the title's font: completed over a line break, cut before an
  author line glued on, a smaller subtitle line joined with ": "; authors (the PDF Author field without marks
  and degrees, unless the byline under the title's boxes gives a longer list that includes its first author;
  names are recognised by shape: 2–5 capitalised words, no digits, no institution or publishing words, degrees
  and affiliation marks dropped, a collaboration one author — a line that is not mostly names gives none;
  when neither gives any, the page-1 lines under the title that are all names, skipping e-mail, affiliation
  and place lines: the author grid of ACM papers), year (a labelled publication year, the info dictionary's
  Published/Year/Date keys, else the latest plausible year on page 1 — arXiv stamp and id, NeurIPS volume,
  never a download or generation stamp — else the PDF creation year), the paper's DOI (only one written with
  a DOI label — "doi:", "DOI", "doi.org/" — on page 1 or in the file's subject/keywords, so a cited work's
  DOI is not taken) and its arXiv id (the "arXiv:NNNN.NNNNN" stamp on page 1). docs/ingestion.md has the
  rules' figures on the shared and pdfs-extra papers. The metadata rules live in :mod:`infra.pdf.page_one`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from infra import privacy
from infra.errors import PDFError
from infra.pdf.base import ParsedDocument
from infra.pdf.page_one import (authors_under_title, choose_authors, metadata_authors,
                                 names_in_lines_under, norm_text, page_one_ids, page_one_lines, page_one_text,
                                 page_one_venue, pick_title, plain_text)
from infra.pdf.page_year import info_extras, pick_year

REVISION = "6"  # bump when what parse() derives from the same pymupdf4llm output changes (metadata, ids, line numbers)
PDF_MAGIC = b"%PDF-"
MAGIC_WINDOW = 1024  # readers accept the header anywhere in the first KiB
EOF_WINDOW = 2048  # %%EOF must sit near the end of a complete file
FURNITURE_CLASSES = frozenset({"page-header", "page-footer"})
RUNNING_BOX_MAX_CHARS = 120
MARGIN_SHARE = 0.12  # headers and footers live in the top and bottom 12 % of a page
LINE_NUMBER_MARGIN = 0.15  # a manuscript's line numbers sit in the outer 15 % of the page's width, left or right
LINE_NUMBER_RUN = 5  # consecutive line numbers on a page before they count as a manuscript's
LINE_NUMBER_SPACING = 2.5  # one number per text line: their spacing is at most this many times their height
LINE_NUMBER_ALIGN = 2.0  # points: the numbers of one run share their right (or left) edge
_WS = re.compile(r"\s+")
_PICTURE_TEXT = re.compile(r"<!--\s*(?:Start|End) of picture text\s*-->")
def _layout_active() -> bool:
    import pymupdf4llm

    return bool(getattr(pymupdf4llm, "_use_layout", False))


class PyMuPDFParser:
    """PDF → Markdown with pymupdf4llm; at most ``max_pages`` pages of files up to ``max_bytes``."""

    def __init__(self, max_pages: int = 60, max_bytes: int = 100_000_000) -> None:
        privacy.apply()  # before onnxruntime (the layout engine) starts: it would send telemetry otherwise
        import pymupdf4llm

        self.max_pages = max_pages
        self.max_bytes = max_bytes
        self.layout = _layout_active()
        self.name = f"pymupdf4llm-{pymupdf4llm.__version__}" + ("+layout" if self.layout else "")
        self.revision = REVISION  # Forage's own reading of the parse: part of the ingest cache's key

    # ------------------------------------------------------------------ reading and opening
    def _read(self, path: Path) -> bytes:
        return read_pdf(path, self.max_bytes)

    def _open(self, data: bytes, path: Path):  # noqa: ANN202 - a context manager of a pymupdf.Document
        return open_pdf(data, path)

    # ------------------------------------------------------------------ parse
    def parse(self, path: Path) -> ParsedDocument:
        """Markdown, page spans and metadata of the PDF at ``path``; PDFError for files that cannot be used."""
        path = Path(path)
        return self._assemble(path, *self.extract(path))

    def extract(self, path: Path, chunks: list[dict[str, Any]] | None = None) -> tuple[Any, ...]:
        """What ``parse`` reads from the file (pymupdf4llm page chunks, info dictionary, page-1 lines and text,
        page counts, flags), before Forage's own reading of it. ``chunks``: pymupdf4llm's page chunks of this
        file from an earlier call (the costly part, a pure function of the bytes and the parser's name), so
        ``bench/metadata.py`` can keep them while the metadata rules change."""
        path = Path(path)
        data = self._read(path)
        with self._open(data, path) as doc:
            n_pages, keep, flags = preflight(doc, data, path, self.max_pages)
            if not self.layout:
                flags.append("no_layout")
            pages, unreadable = (chunks, []) if chunks is not None else self._page_chunks(doc, keep, path)
            if unreadable:
                flags.append("unreadable_pages:" + ",".join(map(str, unreadable)))
            meta = {**(doc.metadata or {}), **info_extras(doc)}
            first_page = page_one_lines(doc)
            page1_raw = page_one_text(doc)
        return pages, meta, first_page, page1_raw, n_pages, keep, flags

    def _page_chunks(self, doc: Any, keep: int, path: Path) -> tuple[list[dict[str, Any]], list[int]]:
        """pymupdf4llm page chunks for the first ``keep`` pages; page by page if the whole run fails."""
        import pymupdf4llm

        for pno in range(keep):  # a line-numbered manuscript's numbers would run through its sentences
            remove_line_numbers(doc[pno])
        options: dict[str, Any] = {"page_chunks": True, "show_progress": False}
        if self.layout:  # header/footer kept here and dropped in _assemble, where a page-1 title can be rescued
            options.update(header=True, footer=True, use_ocr=False)
        try:
            pages, unreadable = list(pymupdf4llm.to_markdown(doc, pages=list(range(keep)), **options)), []
        except Exception as whole_error:  # noqa: BLE001 - retried page by page to keep what can be read
            pages, unreadable = [], []
            for pno in range(keep):
                try:
                    pages.extend(pymupdf4llm.to_markdown(doc, pages=[pno], **options))
                except Exception:  # noqa: BLE001
                    unreadable.append(pno + 1)
            if not pages:
                raise PDFError(f"{path.name}: no page could be converted ({type(whole_error).__name__}: "
                               f"{whole_error})", retryable=False) from whole_error
        for chunk in pages:  # where a page's margins are: a header or footer box must lie in one
            chunk["page_height"] = float(doc[_page_no(chunk) - 1].rect.height)
        return pages, unreadable

    def _assemble(self, path: Path, pages: list[dict[str, Any]], meta: dict[str, Any],
                  first_page: list[tuple[float, float, str]], page1_raw: str, n_pages: int, keep: int,
                  flags: list[str]) -> ParsedDocument:
        page1 = pages[0] if pages and _page_no(pages[0]) == 1 else None
        boxes1 = _boxes(page1) if page1 else []
        page1_text = " ".join(seg for _, seg in boxes1) if boxes1 else (page1 or {}).get("text", "")
        title = pick_title(meta.get("title") or "", boxes1, first_page, page1_text)
        running = _running_keys(pages)

        parts: list[str] = []
        spans: list[tuple[int, int, int]] = []
        offset = 0
        for chunk in pages:
            pno = _page_no(chunk)
            text = _page_markdown(chunk, running, title if pno == 1 else None)
            text = text.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", "")
            if not text.strip():
                continue
            if parts and not parts[-1].endswith("\n\n"):
                sep = "\n\n" if not parts[-1].endswith("\n") else "\n"
                parts.append(sep)
                offset += len(sep)
            parts.append(text)
            spans.append((pno, offset, offset + len(text)))
            offset += len(text)
        markdown = "".join(parts)
        if not any(ch.isalnum() for ch in markdown):
            raise PDFError(f"{path.name}: no extractable text (scanned pages without a text layer? OCR is not "
                           f"enabled)", retryable=False)
        if keep < n_pages:
            markdown += (f"\n\n> Note: only the first {keep} of {n_pages} pages were parsed "
                         f"(ingest.max_pages = {keep}); pages {keep + 1}–{n_pages} are not in this document.\n")
        boxed = choose_authors(metadata_authors(meta.get("author") or ""), authors_under_title(boxes1, title))
        # the page's lines, where they give more authors beginning with the same one (a box that joined a line per
        # author, "NOOR AHMED, University of Toronto, Canada LIAM O'BRIEN, …", hides all but the first)
        authors = choose_authors(boxed, names_in_lines_under(first_page, title))  # boxed empty: the lines
        doi, arxiv_id = page_one_ids(page1_raw, meta)
        venue, venue_kind = page_one_venue(page1_raw, meta)
        return ParsedDocument(markdown=markdown, page_spans=tuple(spans), title=title or None,
                              authors=tuple(authors), year=pick_year(meta, page1_raw or page1_text), doi=doi,
                              arxiv_id=arxiv_id,
                              venue=venue, venue_kind=venue_kind, n_pages=n_pages, parser=self.name, flags=tuple(flags))


# ---------------------------------------------------------------------- helpers (module level, testable)
def read_pdf(path: Path, max_bytes: int) -> bytes:
    """The bytes of the PDF at ``path``; PDFError for a missing, empty, oversized or non-PDF file."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise PDFError(f"{path.name}: file not found ({path})", retryable=False) from None
    except OSError as exc:
        raise PDFError(f"{path.name}: cannot read the file: {exc}", retryable=False) from exc
    if size == 0:
        raise PDFError(f"{path.name}: empty file (0 bytes)", retryable=False)
    if size > max_bytes:
        raise PDFError(f"{path.name}: {size:,} bytes is over the limit of {max_bytes:,} "
                       f"(ingest.max_bytes)", retryable=False)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise PDFError(f"{path.name}: cannot read the file: {exc}", retryable=False) from exc
    if PDF_MAGIC not in data[:MAGIC_WINDOW]:
        raise PDFError(f"{path.name}: not a PDF: starts with {_describe_start(data)}", retryable=False)
    return data


@contextmanager
def open_pdf(data: bytes, path: Path) -> Iterator[Any]:
    """The PDF bytes opened with PyMuPDF (closed on exit); PDFError when MuPDF cannot open them."""
    import pymupdf

    try:
        doc = pymupdf.open(stream=data, filetype="pdf")
    except Exception as exc:  # noqa: BLE001 - every open failure means the same: unreadable file
        raise PDFError(f"{path.name}: not a readable PDF ({type(exc).__name__}: {exc})", retryable=False) from exc
    try:
        yield doc
    finally:
        doc.close()


def preflight(doc: Any, data: bytes, path: Path, max_pages: int) -> tuple[int, int, list[str]]:
    """(pages, pages to parse, flags) of an open PDF; PDFError for password-protected, truncated or
    empty files. Flags: ``encrypted``, ``repaired``, ``truncated_pages:<n>``. Every parser runs it."""
    flags: list[str] = []
    if doc.needs_pass:
        raise PDFError(f"{path.name}: password-protected (encrypted) PDF; it cannot be read without "
                       f"the password — save an unprotected copy to ingest it", retryable=False)
    if (doc.metadata or {}).get("encryption"):
        flags.append("encrypted")
    if doc.is_repaired:
        if b"%%EOF" not in data[-EOF_WINDOW:]:
            raise PDFError(f"{path.name}: truncated or damaged PDF (no %%EOF marker at the end and the "
                           f"cross-reference table is broken) — an incomplete download?", retryable=False)
        flags.append("repaired")
    n_pages = doc.page_count
    if n_pages == 0:
        raise PDFError(f"{path.name}: the PDF has no pages", retryable=False)
    keep = min(n_pages, max_pages)
    if keep < n_pages:
        flags.append(f"truncated_pages:{keep}")
    return n_pages, keep, flags


def _describe_start(data: bytes) -> str:
    head = data[:16].lstrip()
    text = head.decode("latin-1")
    printable = "".join(ch if ch.isprintable() else "." for ch in text)
    return repr(printable[:12]) if printable else f"{len(data)} non-text bytes"


def line_number_boxes(page: Any) -> list[tuple[float, float, float, float]]:
    """The boxes of a line-numbered manuscript's line numbers on ``page`` (a preprint or a journal submission: a
    number in the margin beside every line, which text extraction runs into the sentences: "… measurements 628
    indicate that …"): words alone on their line, all digits, in the page's outer :data:`LINE_NUMBER_MARGIN`,
    counting up by 1 or 2 down the page in one aligned column, one per text line (:data:`LINE_NUMBER_SPACING`), at
    least :data:`LINE_NUMBER_RUN` in a run. Numbered paragraphs and reference lists are spaced wider than their
    lines, a page number stands alone: neither is taken. [] on a page without line numbers."""
    width = page.rect.width
    lines: dict[tuple[int, int], list[tuple[float, float, float, float, str]]] = {}
    for x0, y0, x1, y1, word, block, line, _ in page.get_text("words"):
        lines.setdefault((block, line), []).append((x0, y0, x1, y1, word))
    numbers = sorted((y0, int(word), x0, x1, y1) for (x0, y0, x1, y1, word), *more in lines.values()
                     if not more and word.isdigit() and len(word) <= 5
                     and (x1 <= LINE_NUMBER_MARGIN * width or x0 >= (1 - LINE_NUMBER_MARGIN) * width))
    best: list[tuple[float, int, float, float, float]] = []
    run: list[tuple[float, int, float, float, float]] = []
    for number in numbers:
        prev = run[-1] if run else None
        aligned = prev is not None and (abs(number[3] - prev[3]) <= LINE_NUMBER_ALIGN
                                        or abs(number[2] - prev[2]) <= LINE_NUMBER_ALIGN)
        run = [*run, number] if prev is not None and aligned and 1 <= number[1] - prev[1] <= 2 else [number]
        if len(run) > len(best):
            best = run
    if len(best) < LINE_NUMBER_RUN:
        return []
    gaps = sorted(b[0] - a[0] for a, b in zip(best, best[1:]))
    heights = sorted(n[4] - n[0] for n in best)
    if gaps[len(gaps) // 2] > LINE_NUMBER_SPACING * heights[len(heights) // 2]:
        return []
    return [(x0, y0, x1, y1) for y0, _, x0, x1, y1 in best]


def remove_line_numbers(page: Any) -> int:
    """Take a line-numbered manuscript's line numbers (:func:`line_number_boxes`) out of ``page``'s text (of the
    document in memory; images and drawings stay); how many."""
    import pymupdf

    boxes = line_number_boxes(page)
    for box in boxes:
        page.add_redact_annot(pymupdf.Rect(*box))
    if boxes:
        page.apply_redactions(images=pymupdf.PDF_REDACT_IMAGE_NONE, graphics=pymupdf.PDF_REDACT_LINE_ART_NONE)
    return len(boxes)


def _page_no(chunk: dict[str, Any]) -> int:
    """1-based page number of a pymupdf4llm page chunk ('page_number' in layout mode, 'page' without)."""
    meta = chunk.get("metadata") or {}
    return int(meta.get("page_number") or meta["page"])


def _boxes(chunk: dict[str, Any]) -> list[tuple[str, str]]:
    """(layout class, Markdown segment) of every box of a page chunk; one 'text' box without layout."""
    text = chunk.get("text") or ""
    boxes = chunk.get("page_boxes")
    if not boxes:
        return [("text", text)]
    return [(str(b["class"]), text[b["pos"][0]:b["pos"][1]]) for b in boxes]


def _running_key(segment: str) -> str:
    return re.sub(r"\d+", "#", _WS.sub(" ", segment.strip().lower()))


def _edge_text_boxes(chunk: dict[str, Any]) -> list[tuple[int, str]]:
    """Index and segment of short 'text' boxes among the first two and last two boxes of a page."""
    boxes = _boxes(chunk) if chunk.get("page_boxes") else []
    content = [(i, seg) for i, (cls, seg) in enumerate(boxes) if cls not in FURNITURE_CLASSES and seg.strip()]
    edges = content[:2] + content[-2:]
    return [(i, seg) for i, seg in dict(edges).items()
            if boxes[i][0] == "text" and len(seg.strip()) <= RUNNING_BOX_MAX_CHARS]


def _running_keys(pages: list[dict[str, Any]]) -> frozenset[str]:
    """Keys of short edge text boxes repeated on at least 3 pages and 40% of the pages (running heads)."""
    if len(pages) < 4:
        return frozenset()
    counts: Counter[str] = Counter()
    for chunk in pages:
        counts.update({_running_key(seg) for _, seg in _edge_text_boxes(chunk)})
    need = max(3, int(0.4 * len(pages) + 0.999))
    return frozenset(k for k, n in counts.items() if n >= need and k)


def _page_markdown(chunk: dict[str, Any], running: frozenset[str], title: str | None) -> str:
    """A page's Markdown without headers, footers and running heads (a page-1 header equal to the title stays)."""
    if not chunk.get("page_boxes"):
        return chunk.get("text") or ""
    edges = {i for i, seg in _edge_text_boxes(chunk) if _running_key(seg) in running}
    out: list[str] = []
    for i, (cls, seg) in enumerate(_boxes(chunk)):
        if cls in FURNITURE_CLASSES and _in_margin(chunk, i):
            if title and seg.strip() and norm_text(plain_text(seg)) == norm_text(title):
                out.append(f"# {title}\n\n")
            continue
        if i in edges:
            continue
        out.append(_formula_text(seg) if cls == "formula" else seg)
    return "".join(out)


def _in_margin(chunk: dict[str, Any], index: int) -> bool:
    """Whether box ``index`` lies in the page's top or bottom ``MARGIN_SHARE``: the layout model sometimes
    calls a centred equation or a short line mid-page a page-footer, and dropping it would lose content.
    True when the page height is unknown (the box is dropped as its class says)."""
    height = chunk.get("page_height")
    if not height:
        return True
    _, top, _, bottom = chunk["page_boxes"][index]["bbox"]
    return bottom <= MARGIN_SHARE * height or top >= (1 - MARGIN_SHARE) * height


def _formula_text(segment: str) -> str:
    """An equation box as a plain text paragraph: pymupdf4llm wraps the text it reads in a formula box in
    ``<!-- Start of picture text -->`` … ``<!-- End of picture text -->`` with ``<br>`` line breaks, markup
    that would otherwise end up in chunks, prompts and quotes."""
    text = _PICTURE_TEXT.sub("", segment).replace("<br>", "\n")
    lines = [_WS.sub(" ", line).strip() for line in text.splitlines()]
    body = "\n".join(line for line in lines if line)
    return f"\n\n{body}\n\n" if body else ""
