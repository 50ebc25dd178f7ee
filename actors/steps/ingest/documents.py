"""What identifies a document on its way into the store, whichever way it came: its content hash, the origin the
report and the exports name it by (file name, DOI, arXiv id), the venue a search result names, and the Markdown a
document given as text becomes."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infra.pdf.base import PDFParser
from infra.store.base import DocumentRecord
from messages.search import Candidate, VenueKind, weight_of

TEXT_PARSER = "text"


def file_sha256(path: Path) -> str:
    """Hex sha256 of the file's bytes (streamed)."""
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def source_origin(file_name: str, doi: str | None, arxiv_id: str | None) -> str:
    """What the report and the BibTeX/RIS exports name a PDF by: its file name, then its DOI and arXiv id when
    known ("paper.pdf, doi:10.1186/…, arXiv:2302.07302"; actors/steps/tools/export.py reads them back)."""
    parts = [file_name] if file_name else []
    return ", ".join([*parts, *([f"doi:{doi}"] if doi else []), *([f"arXiv:{arxiv_id}"] if arxiv_id else [])])


_ID_PARTS = re.compile(r"^(?:doi:|arxiv:)", re.IGNORECASE)
_DOI_GIVEN = re.compile(r"^(?:doi:\s*|https?://(?:dx\.)?doi\.org/)?(10\.\d{4,9}/\S+)$", re.IGNORECASE)
_ARXIV_GIVEN = re.compile(r"^(?:arxiv:\s*|https?://arxiv\.org/abs/)?(\d{4}\.\d{4,5}|[a-z][a-z.\-]*/\d{7})(?:v\d+)?$",
                          re.IGNORECASE)


def identifier_changes(doc: DocumentRecord, doi: str | None, arxiv_id: str | None) -> dict[str, str]:
    """The changes that give a stored document this DOI and/or arXiv id (None: keep the one it has; "": drop it):
    its typed fields and the origin the report names it by (the file name first, as the ingest wrote it); only the
    fields that change. ValueError for a DOI or arXiv id that is not one."""
    if doi:
        found = _DOI_GIVEN.match(doi.strip())
        if not found:
            raise ValueError(f"{doi!r} is not a DOI (10.<registrant>/<suffix>)")
        doi = found.group(1).lower()
    if arxiv_id:
        found = _ARXIV_GIVEN.match(arxiv_id.strip())
        if not found:
            raise ValueError(f"{arxiv_id!r} is not an arXiv id (e.g. 2302.07302 or hep-th/0101001)")
        arxiv_id = found.group(1)
    new_doi = doc.doi if doi is None else doi
    new_arxiv = doc.arxiv_id if arxiv_id is None else arxiv_id
    parts = [p for p in (p.strip() for p in (doc.origin or doc.key).split(", ")) if p]
    name = ", ".join(p for p in parts if not _ID_PARTS.match(p))
    changes = {"doi": new_doi, "arxiv_id": new_arxiv,
               "origin": source_origin(name, new_doi or None, new_arxiv or None)}
    return {column: value for column, value in changes.items() if getattr(doc, column) != value}


def known_venue(candidate: Candidate) -> tuple[str, VenueKind]:
    """(venue, kind) a search result names; ("", "") when it names none of a known kind (a repository such as
    arXiv is not a venue, and page 1 may then say more)."""
    if candidate.venue and candidate.venue_kind:
        return " ".join(candidate.venue.split()), candidate.venue_kind
    return "", ""


def text_markdown(title: str, text: str) -> str:
    """The Markdown a text document is stored as: ``# <title>`` (whitespace collapsed), a blank line, the text.

    Without a title it is the text alone. The title heading is not chunk text (headings never are):
    it reaches the embedder through the context line, as a PDF's title does.
    """
    title = " ".join(title.split())
    body = text.strip("\n")
    return f"# {title}\n\n{body}\n" if title else f"{body}\n"


@dataclass(frozen=True, slots=True)
class TextDocument:
    """A document given as text: ``key`` says where it came from (e.g. ``beir:scifact:4983``)."""

    key: str
    title: str
    text: str
    authors: tuple[str, ...] = ()
    year: int | None = None
    origin: str = ""
    flags: tuple[str, ...] = ()
    venue: str = ""
    venue_kind: VenueKind = ""
    weight: dict[str, Any] | None = None  # what the search result says it weighs (messages.search.weight_of)
    doi: str | None = None
    arxiv_id: str | None = None


def abstract_document(candidate: Candidate) -> TextDocument | None:
    """The text document of a candidate with no PDF but an abstract (``abstract_only``): no PDF could be had, but the
    title and abstract still carry evidence, stored flagged ``abstract_only``. None for a file."""
    if candidate.path or not candidate.abstract_only or not (candidate.abstract or "").strip():
        return None
    venue, venue_kind = known_venue(candidate)
    return TextDocument(key=candidate.key, title=candidate.title or "", text=candidate.abstract or "",
                        authors=candidate.authors, year=candidate.year, origin=candidate.key,
                        flags=("abstract_only",), venue=venue, venue_kind=venue_kind, weight=weight_of(candidate),
                        doi=candidate.doi, arxiv_id=candidate.arxiv_id)


def parser_label(parser: PDFParser) -> str:
    """What a document record says parsed it: the parser's name (with its version) and Forage's revision of what it
    reads from that parser's output ("pymupdf4llm-2.0+layout r5"), so a library knows which documents an older
    reading parsed."""
    return f"{parser.name} r{parser.revision}" if parser.revision else parser.name


def stale_parse(recorded: str, label: str) -> bool:
    """Whether a stored document's parser (``recorded``) is an older reading by the same parser as ``label``: the
    same parser and version, another (or no) revision. Another parser's record (Marker's, a text's) is not stale:
    the researcher chose it."""
    return recorded != label and recorded.split(" r")[0] == label.split(" r")[0]

