"""Matching stored documents against OpenAlex, to fill the bibliographic fields their PDFs left out.

Online and only with the researcher's approval (``forage library match`` shows every lookup before sending
any, as search strings are shown before a run). Per document one lookup: by its DOI when it has one (the
paper's own, printed with a DOI label on page 1), else by its title (OpenAlex's ``title.search`` filter).

A work is taken as the document's only when the evidence agrees, never on OpenAlex's ranking alone:

* titles equal once case, accents, punctuation and spacing are set aside, or nearly equal (a similarity of at
  least :data:`TITLE_SIMILARITY`, for a subtitle's punctuation or a hyphen) — a DOI lookup is held to the same
  test, so a mistyped DOI naming another work changes nothing;
* the first author's surname, when the document has authors, among the work's authors;
* the year, when the document has one, within a year of the work's (a preprint and its publication).

Of several works that pass, the closest title wins, then a journal or conference version over a preprint. A
match fills only what is **missing** (authors, year, DOI, arXiv id, venue); what differs from OpenAlex is
reported, never overwritten (`forage library fix-metadata` corrects a field by hand). The title is never
changed. An arXiv DataCite DOI (10.48550/arxiv.…) is not taken as the paper's DOI: the arXiv id says it.
"""

from __future__ import annotations

import difflib
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from actors.steps.ingest.documents import identifier_changes
from infra.store.base import DocumentRecord
from messages.search import Candidate, weight_of

TITLE_SIMILARITY = 0.92
# a document's flag once its lookup was answered (matched or not): a later `library match` does not send its DOI or
# title again unless asked (a preprint never gets a venue, so it would be looked up on every run)
LOOKED_UP = "openalex_looked_up"
YEAR_SLACK = 1
_ARXIV_DOI = re.compile(r"^10\.48550/arxiv\.", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Lookup:
    """One request to OpenAlex for one document: what leaves the machine is ``text``."""

    doc_id: str
    kind: Literal["doi", "title"]
    text: str

    def shown(self) -> str:
        return f"doi {self.text}" if self.kind == "doi" else f"title \"{self.text}\""


@dataclass(slots=True)
class Outcome:
    """What a lookup gave for a document: the changes to write, the differences left alone, or why none."""

    doc_id: str
    work: Candidate | None = None
    changes: dict[str, Any] = field(default_factory=dict)
    differences: list[str] = field(default_factory=list)
    reason: str = ""


def missing_fields(doc: DocumentRecord) -> list[str]:
    """The bibliographic fields a document lacks (what a match could fill)."""
    return [name for name, absent in (("authors", not doc.authors), ("year", doc.year is None),
                                      ("doi", not doc.doi), ("venue", not doc.venue)) if absent]


def looked_up(doc: DocumentRecord) -> bool:
    """Whether ``doc``'s lookup was sent and answered before (:data:`LOOKED_UP`)."""
    return LOOKED_UP in doc.flags


def lookup_for(doc: DocumentRecord) -> Lookup | None:
    """The one lookup for ``doc``: its DOI, else its title; None when it has neither worth sending."""
    if doc.doi:
        return Lookup(doc.doc_id, "doi", doc.doi)
    title = " ".join(doc.title.split())
    if len(normalized(title).split()) >= 3:  # two words would match too much, and say little
        return Lookup(doc.doc_id, "title", title)
    return None


def normalized(text: str | None) -> str:
    """Lower case, accents and punctuation dropped, hyphens as spaces, one space between words."""
    text = unicodedata.normalize("NFKD", text or "").encode("ascii", "ignore").decode("ascii").casefold()
    return " ".join(re.findall(r"[a-z0-9]+", text))


def title_similarity(a: str | None, b: str | None) -> float:
    left, right = normalized(a), normalized(b)
    if not left or not right:
        return 0.0
    return 1.0 if left == right else difflib.SequenceMatcher(None, left, right).ratio()


def _surname(name: str) -> str:
    name = name.strip()
    words = normalized(name.split(",")[0] if "," in name else name).split()
    return words[-1] if words else ""


def agrees(doc: DocumentRecord, work: Candidate) -> tuple[bool, str]:
    """(whether ``work`` is ``doc``, and why not when it is not)."""
    similarity = title_similarity(doc.title, work.title)
    if similarity < TITLE_SIMILARITY:
        return False, f"title differs ({similarity:.2f}): \"{work.title}\""
    if doc.authors and work.authors:
        surname = _surname(doc.authors[0])
        if surname and not any(surname in normalized(a).split() for a in work.authors):
            return False, f"first author {doc.authors[0]!r} is not among its authors"
    if doc.year is not None and work.year is not None and abs(doc.year - work.year) > YEAR_SLACK:
        return False, f"year {work.year} is not {doc.year}"
    return True, ""


def best_match(doc: DocumentRecord, works: Sequence[Candidate]) -> tuple[Candidate | None, str]:
    """The work that is ``doc`` among ``works`` (see the module docstring), or (None, why none is)."""
    passing = [w for w in works if agrees(doc, w)[0]]
    if not passing:
        if not works:
            return None, "OpenAlex does not know that DOI" if doc.doi else \
                "OpenAlex has no work by that title"
        nearest = max(works, key=lambda w: title_similarity(doc.title, w.title))
        return None, f"no work agrees (nearest: {agrees(doc, nearest)[1]})"
    return max(passing, key=lambda w: (round(title_similarity(doc.title, w.title), 2), bool(w.venue_kind),
                                       w.year is not None)), ""


def outcome(doc: DocumentRecord, works: Sequence[Candidate]) -> Outcome:
    """What matching ``doc`` against what its lookup returned gives: only missing fields are filled."""
    work, why = best_match(doc, works)
    result = Outcome(doc.doc_id, work, reason=why)
    if work is None:
        return result
    if not doc.authors and work.authors:
        result.changes["authors"] = tuple(" ".join(a.split()) for a in work.authors)
    elif doc.authors and work.authors and _surname(doc.authors[0]) != _surname(work.authors[0]):
        result.differences.append(f"first author: {doc.authors[0]} here, {work.authors[0]} in OpenAlex")
    if doc.year is None and work.year is not None:
        result.changes["year"] = work.year
    elif doc.year is not None and work.year is not None and doc.year != work.year:
        result.differences.append(f"year: {doc.year} here, {work.year} in OpenAlex")
    if not doc.venue and work.venue and work.venue_kind:
        result.changes["venue"], result.changes["venue_kind"] = " ".join(work.venue.split()), work.venue_kind
    elif doc.venue and work.venue and work.venue_kind and normalized(doc.venue) != normalized(work.venue):
        result.differences.append(f"venue: {doc.venue} here, {work.venue} in OpenAlex")
    doi = work.doi if work.doi and not _ARXIV_DOI.match(work.doi) else None
    new_doi = doi if doi and not doc.doi else None
    new_arxiv = work.arxiv_id if work.arxiv_id and not doc.arxiv_id else None
    if doi and doc.doi and doi.lower() != doc.doi:
        result.differences.append(f"DOI: {doc.doi} here, {doi} in OpenAlex")
    if new_doi or new_arxiv:
        result.changes.update(identifier_changes(doc, new_doi, new_arxiv))
    # what a reader weighs it by is OpenAlex's to say (a retraction comes later than the PDF): taken when it changed
    result.changes.update({k: v for k, v in weight_of(work).items() if getattr(doc, k) != v})
    return result
