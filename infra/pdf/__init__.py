"""PDF → Markdown parsers. ``build_parser(settings)`` builds the backend ``resolve_parser`` picks.

``ingest.parser``: ``pymupdf`` (PyMuPDF4LLM, the CPU default of a plain install), ``marker``
(marker-pdf, optional extra, models in ``MODEL_CACHE_DIR``) or ``auto``: Marker when its models are
in ``MODEL_CACHE_DIR`` and marker-pdf is importable, PyMuPDF otherwise. The parser that ran is
recorded on every document (``DocumentRecord.parser``: ``pymupdf4llm-<v>[+layout]`` or ``marker-<v>``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal

from infra.errors import ConfigError
from infra.pdf.base import ParsedDocument, PDFParser

if TYPE_CHECKING:
    from infra.settings import Settings

__all__ = ["PDFParser", "ParsedDocument", "build_parser", "resolve_parser"]

log = logging.getLogger(__name__)

Backend = Literal["pymupdf", "marker"]


def resolve_parser(settings: Settings, env: Mapping[str, str] | None = None) -> tuple[Backend, str]:
    """(backend, why) for ``settings.ingest.parser``; ``auto`` looks at ``MODEL_CACHE_DIR`` (in ``env``,
    default the process environment) first, then whether marker-pdf is importable. Imports nothing heavy."""
    requested = settings.ingest.parser
    if requested == "pymupdf" or requested == "marker":
        return requested, f"ingest.parser = {requested!r}"
    if requested != "auto":
        raise ConfigError(f"unknown PDF parser {requested!r}; choose 'auto', 'pymupdf' or 'marker'")
    from infra.pdf.marker import INSTALL_HINT, marker_importable, model_cache_dir, models_present

    present, why = models_present(model_cache_dir(env))
    if not present:
        return "pymupdf", why
    if not marker_importable():
        return "pymupdf", f"marker-pdf is not installed ({INSTALL_HINT}); {why}"
    return "marker", why


def build_parser(settings: Settings) -> PDFParser:
    """The parser :func:`resolve_parser` picks, with the page and size limits of ``settings.ingest``."""
    ingest = settings.ingest
    backend, why = resolve_parser(settings)
    log.info("PDF parser: %s (%s)", backend, why)
    if backend == "marker":
        from infra.pdf.marker import MarkerParser

        return MarkerParser(max_pages=ingest.max_pages, max_bytes=ingest.max_bytes)
    from infra.pdf.pymupdf import PyMuPDFParser

    return PyMuPDFParser(max_pages=ingest.max_pages, max_bytes=ingest.max_bytes)
