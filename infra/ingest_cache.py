"""A content-addressed cache of what ingestion computes: parsed PDFs and the vectors of a document's chunks.

Parsing (Marker: minutes per paper on a CPU) and embedding are the costly parts of ingestion, and both are
pure functions of their input. With ``ingest.cache_dir`` set, :class:`IngestCache` keeps

* ``parsed/<key>.json``: the :class:`~infra.pdf.base.ParsedDocument` of a PDF, keyed by the file's sha256,
  the parser's name (which carries its version), Forage's revision of what it reads from that output
  (`revision`) and its page limit;
* ``vectors/<key>.npy``: the vectors of one document's chunks (float64, exactly what the embedder gave),
  keyed by the embedder's name and the exact strings it read (context line + chunk text, in order) with their
  sentence windows (character spans);
* ``first-pages/<key>.txt``: the text of a library file's first pages, keyed by its sha256, which a library
  run reads to rank the library before ingesting it (actors/steps/search/library.py);

so the same paper ingested into another store (a new run folder, ``forage eval``, after ``forage forget``, on
another Ingestor of the same machine) is neither parsed nor embedded again, while any change to the file, the
parser, the chunking or the embedder misses. Only document text and its vectors are kept, never a query: a
query's vector is never written. Folders 0700, files 0600, each file written whole (temp file + rename), so
several Ingestors may share the cache; a damaged or unreadable entry is a miss, and a cache that cannot be
written costs time later, never a document.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from infra.embed.base import Windowed, separate_inputs
from infra.pdf.base import ParsedDocument, PDFParser
from infra.private_files import private_dir

log = logging.getLogger(__name__)

FORMAT = "1"  # part of every key: a change of what an entry holds makes every old entry a miss


def _digest(*parts: str) -> str:
    return hashlib.sha256("\x1f".join((FORMAT, *parts)).encode("utf-8")).hexdigest()


class IngestCache:
    """Parsed PDFs and chunk vectors under ``root`` (see the module docstring)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).expanduser()

    # ------------------------------------------------------------------ keys

    @staticmethod
    def parsed_key(doc_id: str, parser: PDFParser) -> str:
        """``doc_id`` (the file's sha256), the parser's name (with its version), Forage's own revision of what
        it reads from that parser's output, and its page limit."""
        return _digest("parsed", doc_id, parser.name, parser.revision, str(parser.max_pages))

    @staticmethod
    def vectors_key(embedder_name: str, items: Sequence[Windowed], pooled: bool = False) -> str:
        """The embedder's name and what it reads: each chunk's string, then each window's as a text of its own, or,
        where the windows are pooled from their chunk's pass, the chunks' strings and the windows' spans."""
        if not pooled:
            inputs = separate_inputs(items)
            return _digest("vectors", embedder_name, str(len(inputs)), *inputs)
        windows = [f"windows {n} {item.lead} {item.windows}" for n, item in enumerate(items) if item.windows]
        return _digest("vectors", embedder_name, str(len(items)), *(item.text for item in items), *windows,
                       "pooled")

    # ------------------------------------------------------------------ parsed PDFs

    def get_parsed(self, key: str) -> ParsedDocument | None:
        path = self.root / "parsed" / f"{key}.json"
        try:
            return ParsedDocument.model_validate_json(path.read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:  # damaged or unreadable: parse again
            log.warning("ingest cache: ignoring %s (%s)", path, exc)
            return None

    def put_parsed(self, key: str, parsed: ParsedDocument) -> None:
        self._write(self.root / "parsed", f"{key}.json", parsed.model_dump_json().encode("utf-8"))

    def parse(self, parser: PDFParser, path: Path, doc_id: str) -> tuple[ParsedDocument, bool]:
        """The parsed document (from the cache, else ``parser.parse`` and kept) and whether it came from
        the cache. Parser errors propagate and are not cached: a broken file is examined every time."""
        key = self.parsed_key(doc_id, parser)
        parsed = self.get_parsed(key)
        if parsed is not None:
            return parsed, True
        parsed = parser.parse(path)
        self.put_parsed(key, parsed)
        return parsed, False

    # ------------------------------------------------------------------ chunk vectors

    def get_vectors(self, key: str, count: int) -> list[list[float]] | None:
        path = self.root / "vectors" / f"{key}.npy"
        try:
            array = np.load(path, allow_pickle=False)
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("ingest cache: ignoring %s (%s)", path, exc)
            return None
        if array.ndim != 2 or array.shape[0] != count:
            log.warning("ingest cache: ignoring %s (shape %s, expected %d rows)", path, array.shape, count)
            return None
        return array.tolist()

    def put_vectors(self, key: str, vectors: Sequence[Sequence[float]]) -> None:
        array = np.asarray(vectors, dtype=np.float64)
        if array.ndim != 2:
            return
        buffer = io.BytesIO()
        np.save(buffer, array, allow_pickle=False)
        self._write(self.root / "vectors", f"{key}.npy", buffer.getvalue())

    # ------------------------------------------------------------------ first pages (library ranking)

    @staticmethod
    def first_page_key(doc_id: str, chars: int) -> str:
        return _digest("first-page", doc_id, str(chars))

    def get_text(self, key: str) -> str | None:
        try:
            return (self.root / "first-pages" / f"{key}.txt").read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            log.warning("ingest cache: ignoring first page %s (%s)", key, exc)
            return None

    def put_text(self, key: str, text: str) -> None:
        self._write(self.root / "first-pages", f"{key}.txt", text.encode("utf-8"))

    # ------------------------------------------------------------------ files

    def _write(self, folder: Path, name: str, data: bytes) -> None:
        """``data`` as ``folder/name``, whole or not at all (temp file + rename), 0600 in a 0700 folder."""
        try:
            private_dir(folder)
            fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")  # mkstemp creates it 0600
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                os.replace(tmp, folder / name)
            except BaseException:
                Path(tmp).unlink(missing_ok=True)
                raise
        except OSError as exc:  # a cache that cannot be written costs time later, never the document
            log.warning("ingest cache: cannot write %s: %s", folder / name, exc)
