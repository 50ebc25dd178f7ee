"""PDF → Markdown parsers. ``build_parser(settings)`` picks the backend named in ``settings.ingest``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from infra.errors import ConfigError
from infra.pdf.base import ParsedDocument, PDFParser

if TYPE_CHECKING:
    from infra.settings import Settings

__all__ = ["PDFParser", "ParsedDocument", "build_parser"]


def build_parser(settings: Settings) -> PDFParser:
    """The parser named by ``settings.ingest.parser`` with its page and size limits."""
    ingest = settings.ingest
    if ingest.parser == "pymupdf":
        from infra.pdf.pymupdf import PyMuPDFParser

        return PyMuPDFParser(max_pages=ingest.max_pages, max_bytes=ingest.max_bytes)
    raise ConfigError(f"unknown PDF parser {ingest.parser!r}; available: 'pymupdf'")
