"""PDF parsers that misbehave on purpose, importable by the worker processes of a parallel library add: the real
PyMuPDF parser, except on a file whose name says ``hang`` (it never returns) or ``crash`` (the process dies)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from infra.pdf.base import ParsedDocument
from infra.pdf.pymupdf import PyMuPDFParser


class MisbehavingParser(PyMuPDFParser):
    def parse(self, path: Path) -> ParsedDocument:
        if "hang" in path.name:
            threading.Event().wait()  # a parse that never returns: the pool's timeout must stop it
        if "crash" in path.name:
            os._exit(3)  # as a segfault in the parser's C code would end the worker
        return super().parse(path)
