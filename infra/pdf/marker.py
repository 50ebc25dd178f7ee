"""PDF → Markdown with Marker (marker-pdf), for machines that have it and its models; a GPU helps.

Optional: ``pip install 'forage[marker]'`` (the extra pins marker-pdf 2.0.0 with torch 2.13.0 and
torchvision 0.28.0, so the CPU torch stays; see docs/ingestion.md). Its models are fetched once, on
a connected machine, into ``MODEL_CACHE_DIR``::

    hf download datalab-to/surya_layout2 --local-dir "$MODEL_CACHE_DIR/surya_layout2"

What Forage runs: Marker's ``PdfConverter`` with ``disable_ocr`` (the PDF's own text layer, as with
PyMuPDF; no OCR server is started), which uses the rf-detr layout model (and its reading-order head
when ``surya_layout2/order`` is there) from ``MODEL_CACHE_DIR`` — on the GPU Ray gave the Ingestor,
else on the CPU. Nothing is downloaded at run time: the checkpoints are pointed at the local folders
and the Hugging Face hub is put offline before Marker is imported.

Same contract as :class:`infra.pdf.pymupdf.PyMuPDFParser`: the same file checks before Marker
sees the file (:func:`infra.pdf.pymupdf.read_pdf` / :func:`~infra.pdf.pymupdf.preflight`: empty,
not a PDF, too large, password-protected, truncated → PDFError; ``repaired``, ``encrypted``,
``truncated_pages:<n>`` flags; at most ``max_pages`` pages), page spans from Marker's paginated
output, title / authors / year picked the same way. ``parser`` is ``marker-<version>``.

Everything in this module but :class:`MarkerParser` works without marker-pdf installed: ``auto``
parser selection (:func:`infra.pdf.resolve_parser`) calls :func:`models_present` and
:func:`marker_importable` only.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from infra import privacy
from infra.errors import ConfigError, PDFError
from infra.pdf.base import ParsedDocument

MODEL_CACHE_ENV = "MODEL_CACHE_DIR"
LAYOUT_DIR = "surya_layout2"  # hf://datalab-to/surya_layout2 (marker-pdf 2.0.0 / surya-ocr 0.22.1 fast layout)
ORDER_DIR = "surya_layout2/order"  # its reading-order head (optional: Marker runs without it)
LAYOUT_REPO = "datalab-to/surya_layout2"
FONT_FILE = "GoNotoCurrent-Regular.ttf"  # Marker's converter insists on its font file (marker.util.download_font)
FETCH_COMMAND = f"{MODEL_CACHE_ENV}=/path/to/models python -m infra.pdf.marker fetch"
INSTALL_HINT = "pip install 'forage[marker]'"

# Marker's paginated Markdown: "\n\n{<0-based page>}" + 48 dashes + "\n\n" before every page
_PAGE_MARK = re.compile(r"\n*\{(\d+)\}-{48}\n*")
_BLOCKS = re.compile(r"\n\s*\n")


def model_cache_dir(env: Mapping[str, str] | None = None) -> Path:
    """Where Marker's models are: ``$MODEL_CACHE_DIR``, else surya's default (``~/.cache/datalab/models``)."""
    env = os.environ if env is None else env
    explicit = (env.get(MODEL_CACHE_ENV) or "").strip()
    if explicit:
        return Path(explicit).expanduser()
    cache_home = (env.get("XDG_CACHE_HOME") or "").strip() or str(Path.home() / ".cache")
    return Path(cache_home) / "datalab" / "models"


def models_present(cache_dir: Path) -> tuple[bool, str]:
    """(True, what was found) when ``cache_dir`` holds the layout model Marker needs (a
    ``config.json`` and ``.pth`` weights in ``surya_layout2/``), else (False, what is missing)."""
    layout = cache_dir / LAYOUT_DIR
    if not cache_dir.is_dir():
        return False, f"no Marker models: {MODEL_CACHE_ENV} folder {cache_dir} does not exist"
    if not (layout / "config.json").is_file() or not any(layout.glob("*.pth")):
        return False, (f"no Marker models in {cache_dir}: {LAYOUT_DIR}/ needs config.json and .pth weights "
                       f"(fetch them on a connected machine: {FETCH_COMMAND})")
    if not (cache_dir / FONT_FILE).is_file():
        return False, f"Marker's font {FONT_FILE} is missing in {cache_dir} (fetch it: {FETCH_COMMAND})"
    order = cache_dir / ORDER_DIR
    has_order = (order / "config.json").is_file() and any(order.glob("*.pth"))
    return True, f"Marker models in {cache_dir} ({LAYOUT_DIR}{', with reading order' if has_order else ''})"


def marker_importable() -> bool:
    """marker-pdf is installed (its distribution and its ``marker`` package); nothing is imported."""
    try:
        importlib.metadata.version("marker-pdf")
    except importlib.metadata.PackageNotFoundError:
        return False
    return importlib.util.find_spec("marker") is not None


def point_at_models(cache_dir: Path, env: dict[str, str] | None = None) -> None:
    """Make Marker and surya read the local checkpoints and never reach the network (before import).
    Settings someone already exported win."""
    env = os.environ if env is None else env
    env[MODEL_CACHE_ENV] = str(cache_dir)
    env.setdefault("FAST_LAYOUT_MODEL_CHECKPOINT", str(cache_dir / LAYOUT_DIR))
    env.setdefault("FONT_PATH", str(cache_dir / FONT_FILE))
    order = cache_dir / ORDER_DIR
    if order.is_dir():
        env.setdefault("FAST_ORDER_MODEL_CHECKPOINT", str(order))
    else:
        env.setdefault("FAST_LAYOUT_USE_ORDER", "false")
    env.setdefault("HF_HUB_OFFLINE", "1")
    env.setdefault("TRANSFORMERS_OFFLINE", "1")
    env.setdefault("DISABLE_TQDM", "true")


def split_pages(paginated: str) -> tuple[str, tuple[tuple[int, int, int], ...]]:
    """Marker's paginated Markdown → (Markdown without the page marks, (page starting at 1, start, end)
    of every non-empty page). Text before the first mark (none in practice) counts as page 1."""
    marks = list(_PAGE_MARK.finditer(paginated))
    pieces: list[tuple[int, str]] = []
    if not marks:
        pieces.append((1, paginated))
    else:
        if paginated[:marks[0].start()].strip():
            pieces.append((1, paginated[:marks[0].start()]))
        for k, mark in enumerate(marks):
            end = marks[k + 1].start() if k + 1 < len(marks) else len(paginated)
            pieces.append((int(mark.group(1)) + 1, paginated[mark.end():end]))
    parts: list[str] = []
    spans: list[tuple[int, int, int]] = []
    offset = 0
    for page, text in pieces:
        text = text.strip("\n")
        if not text.strip():
            continue
        if parts:
            parts.append("\n\n")
            offset += 2
        parts.append(text)
        spans.append((page, offset, offset + len(text)))
        offset += len(text)
    markdown = "".join(parts)
    return (markdown + "\n" if markdown else markdown), tuple(spans)


def page_boxes(markdown: str) -> list[tuple[str, str]]:
    """(layout class, block) of a page's Markdown blocks: '#' lines are section headers, the rest text
    (the shape :func:`infra.pdf.pymupdf.pick_title` and ``authors_under_title`` read)."""
    return [("section-header" if block.lstrip().startswith("#") else "text", block)
            for block in _BLOCKS.split(markdown) if block.strip()]


class MarkerParser:
    """PDF → Markdown with Marker; at most ``max_pages`` pages of files up to ``max_bytes``.

    ConfigError at construction when marker-pdf is not installed or its models are not in
    ``cache_dir`` (default: :func:`model_cache_dir`). The models load on the first parse and stay
    loaded for the life of the process (one Ingestor).
    """

    def __init__(self, max_pages: int = 60, max_bytes: int = 100_000_000, cache_dir: Path | None = None) -> None:
        if not marker_importable():
            raise ConfigError(f"ingest.parser = 'marker' needs marker-pdf: {INSTALL_HINT}")
        cache = Path(cache_dir) if cache_dir is not None else model_cache_dir()
        ok, why = models_present(cache)
        if not ok:
            raise ConfigError(why)
        privacy.apply()
        point_at_models(cache)
        self.revision = ""  # what Forage reads from Marker's Markdown (page 1's metadata rules) has no revision yet
        self.max_pages = max_pages
        self.max_bytes = max_bytes
        self.cache_dir = cache
        self.name = f"marker-{importlib.metadata.version('marker-pdf')}"
        self._models: dict[str, Any] | None = None

    def _convert(self, path: Path, keep: int) -> str:
        from marker.converters.pdf import PdfConverter
        from marker.models import create_model_dict

        if self._models is None:
            self._models = create_model_dict()
        config = {"output_format": "markdown", "paginate_output": True, "disable_image_extraction": True,
                  "disable_ocr": True, "disable_tqdm": True, "page_range": list(range(keep))}
        converter = PdfConverter(artifact_dict=self._models, config=config)
        return converter(str(path)).markdown

    def parse(self, path: Path) -> ParsedDocument:
        """Markdown, page spans and metadata of the PDF at ``path``; PDFError for files that cannot be used."""
        from infra.pdf.page_one import (authors_under_title, choose_authors, metadata_authors, page_one_lines,
                                        pick_title)
        from infra.pdf.page_year import pick_year
        from infra.pdf.pymupdf import open_pdf, preflight, read_pdf

        path = Path(path)
        data = read_pdf(path, self.max_bytes)
        with open_pdf(data, path) as doc:
            n_pages, keep, flags = preflight(doc, data, path, self.max_pages)
            meta = doc.metadata or {}
            first_page = page_one_lines(doc)
            try:
                page1_text = doc[0].get_text()
            except Exception:  # noqa: BLE001 - a title hint only
                page1_text = ""
        try:
            paginated = self._convert(path, keep)
        except Exception as exc:  # noqa: BLE001 - whatever Marker raises, the document fails alone
            raise PDFError(f"{path.name}: Marker could not convert it ({type(exc).__name__}: {exc})",
                           retryable=False) from exc
        markdown, spans = split_pages(paginated.replace("\r\n", "\n").replace("\r", "\n").replace("\x00", ""))
        if not any(ch.isalnum() for ch in markdown):
            raise PDFError(f"{path.name}: no extractable text (scanned pages without a text layer? OCR is not "
                           f"enabled)", retryable=False)
        page1 = markdown[spans[0][1]:spans[0][2]] if spans and spans[0][0] == 1 else ""
        boxes1 = page_boxes(page1)
        title = pick_title(meta.get("title") or "", boxes1, first_page, page1_text or page1)
        if keep < n_pages:
            markdown += (f"\n> Note: only the first {keep} of {n_pages} pages were parsed "
                         f"(ingest.max_pages = {keep}); pages {keep + 1}–{n_pages} are not in this document.\n")
        authors = choose_authors(metadata_authors(meta.get("author") or ""), authors_under_title(boxes1, title))
        return ParsedDocument(markdown=markdown, page_spans=spans, title=title or None, authors=tuple(authors),
                              year=pick_year(meta, page1_text or page1), n_pages=n_pages, parser=self.name,
                              flags=tuple(flags))


# ---------------------------------------------------------------------- fetching the models (connected machine)
def fetch_models(cache_dir: Path) -> str:
    """Download what :func:`models_present` checks into ``cache_dir``: the layout model (with its
    reading-order head) from the Hugging Face hub and Marker's font, with Marker's own downloader.
    Needs the network and ``forage[marker]``; run once, then copy the folder where Ingestors run."""
    from huggingface_hub import snapshot_download

    cache_dir.mkdir(parents=True, exist_ok=True)
    snapshot_download(LAYOUT_REPO, local_dir=str(cache_dir / LAYOUT_DIR))
    os.environ["FONT_PATH"] = str(cache_dir / FONT_FILE)  # read by marker.settings at import
    from marker.util import download_font

    download_font()
    ok, why = models_present(cache_dir)
    if not ok:
        raise ConfigError(f"download finished but {why}")
    return why


def main(argv: list[str] | None = None) -> int:
    """``python -m infra.pdf.marker fetch|check`` with ``MODEL_CACHE_DIR`` set (or ``--dir``)."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m infra.pdf.marker",
                                     description="Fetch or check the models of Forage's Marker PDF backend.")
    parser.add_argument("action", choices=["fetch", "check"])
    parser.add_argument("--dir", type=Path, default=None, help=f"model folder (default: ${MODEL_CACHE_ENV})")
    args = parser.parse_args(argv)
    cache = args.dir.expanduser() if args.dir else model_cache_dir()
    if args.action == "fetch":
        print(fetch_models(cache))
        return 0
    ok, why = models_present(cache)
    print(why if marker_importable() else f"{why}; marker-pdf is not installed ({INSTALL_HINT})")
    return 0 if ok and marker_importable() else 1


if __name__ == "__main__":
    raise SystemExit(main())
