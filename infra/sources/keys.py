"""Dedupe keys for papers found by several sources, and the Deduper that merges them.

One paper can arrive as an arXiv hit, an OpenAlex work with a DOI, and again in a later iteration.
Each :class:`~messages.search.Candidate` gets every key it can (``doi:``, ``arxiv:``, ``openalex:``,
``title:``); two candidates sharing any key are the same paper. The :class:`Deduper` remembers the
keys across iterations and merges the metadata of duplicates (ids, PDF locations, abstract).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable

from messages.search import Candidate

_DOI_PREFIX = re.compile(r"^(?:https?://(?:dx\.)?doi\.org/|doi:\s*)", re.IGNORECASE)
_ARXIV_DOI = re.compile(r"^10\.48550/arxiv\.(.+)$", re.IGNORECASE)
# new-style 2101.00001 / old-style hep-th/9901001 or math.CO/0101001, optional version
_ARXIV_ID = re.compile(r"(\d{4}\.\d{4,5}|[a-z\-]+(?:\.[A-Z]{2})?/\d{7})(?:v\d+)?", re.IGNORECASE)
_ARXIV_URL = re.compile(r"arxiv\.org/(?:abs|pdf|html)/([^?#\s]+?)(?:\.pdf)?(?:[?#].*)?$", re.IGNORECASE)


def normalize_doi(doi: str | None) -> str | None:
    """Bare lower-case DOI (``10.xxxx/...``) from a DOI, ``doi:`` form or doi.org URL; None if not a DOI."""
    if not doi:
        return None
    value = _DOI_PREFIX.sub("", doi.strip()).strip().lower()
    return value if value.startswith("10.") and "/" in value else None


def normalize_arxiv_id(value: str | None) -> str | None:
    """arXiv id without version or prefix: from ``arXiv:2101.00001v2``, an abs/pdf URL or a 10.48550 DOI."""
    if not value:
        return None
    text = value.strip()
    if m := _ARXIV_URL.search(text):
        text = m.group(1)
    elif (doi := normalize_doi(text)) and (m := _ARXIV_DOI.match(doi)):
        text = m.group(1)
    text = re.sub(r"^arxiv:\s*", "", text, flags=re.IGNORECASE)
    m = _ARXIV_ID.fullmatch(text)
    return m.group(1) if m else None


def normalize_openalex_id(value: str | None) -> str | None:
    """``W123`` from ``https://openalex.org/W123`` or ``W123``."""
    if not value:
        return None
    tail = value.strip().rstrip("/").rsplit("/", 1)[-1].upper()
    return tail if re.fullmatch(r"W\d+", tail) else None


def _fold(text: str) -> str:
    text = unicodedata.normalize("NFKD", text).casefold()
    text = "".join(ch for ch in text if not unicodedata.combining(ch))
    return " ".join(re.sub(r"[\W_]+", " ", text).split())


def title_key(title: str | None, first_author: str | None = None, year: int | None = None) -> str | None:
    """``title:<folded title>|<first author's family name>|<year>``; None without a usable title."""
    if not title or not (folded := _fold(title)):
        return None
    family = _fold(first_author).split()[-1] if first_author and _fold(first_author) else ""
    return f"title:{folded}|{family}|{year or ''}"


def candidate_keys(c: Candidate) -> set[str]:
    """Every dedupe key of a candidate (its own ``key`` included)."""
    keys = {c.key}
    if doi := normalize_doi(c.doi):
        keys.add(f"doi:{doi}")
    if arxiv_id := normalize_arxiv_id(c.arxiv_id):
        keys.add(f"arxiv:{arxiv_id}")
    if wid := normalize_openalex_id(c.openalex_id):
        keys.add(f"openalex:{wid}")
    if tk := title_key(c.title, c.authors[0] if c.authors else None, c.year):
        keys.add(tk)
    return keys


def primary_key(*, doi: str | None = None, arxiv_id: str | None = None, openalex_id: str | None = None,
                title: str | None = None, first_author: str | None = None, year: int | None = None) -> str:
    """The ``Candidate.key``: DOI first, then arXiv id, OpenAlex id, title key."""
    if d := normalize_doi(doi):
        return f"doi:{d}"
    if a := normalize_arxiv_id(arxiv_id):
        return f"arxiv:{a}"
    if w := normalize_openalex_id(openalex_id):
        return f"openalex:{w}"
    if t := title_key(title, first_author, year):
        return t
    raise ValueError("a candidate needs a DOI, an arXiv id, an OpenAlex id or a title")


def _union(*groups: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(x for g in groups for x in g))


def merge(a: Candidate, b: Candidate) -> Candidate:
    """One candidate from two records of the same paper: ``a`` wins ties, nothing of ``b`` is lost."""
    doi, arxiv_id, wid = a.doi or b.doi, a.arxiv_id or b.arxiv_id, a.openalex_id or b.openalex_id
    abstract = max((x for x in (a.abstract, b.abstract) if x), key=len, default=None)
    authors = a.authors if len(a.authors) >= len(b.authors) else b.authors
    title = a.title or b.title
    year = a.year or b.year
    key = primary_key(doi=doi, arxiv_id=arxiv_id, openalex_id=wid, title=title,
                      first_author=authors[0] if authors else None, year=year)
    return a.model_copy(update={
        "key": key, "doi": doi, "arxiv_id": arxiv_id, "openalex_id": wid, "title": title, "authors": authors,
        "year": year, "abstract": abstract, "venue": a.venue or b.venue, "path": a.path or b.path,
        "url": a.url or b.url, "landing_url": a.landing_url or b.landing_url,
        "pdf_urls": _union(a.pdf_urls, b.pdf_urls), "found_by": a.found_by or b.found_by,
        "score": a.score if a.score is not None else b.score, "score_reason": a.score_reason or b.score_reason,
        "abstract_only": a.abstract_only and b.abstract_only,
        "download_failures": _union(a.download_failures, b.download_failures),
    })


class Deduper:
    """Remembers every key seen in a run and merges duplicates.

    ``add(batch)`` returns the papers of the batch not seen before (duplicates inside the batch
    merged into one); papers seen earlier are merged into the remembered record (``get``) and not
    returned again, so they are neither offered nor downloaded twice.
    """

    def __init__(self, seen_keys: Iterable[str] = ()) -> None:
        self._by_key: dict[str, int] = {}
        self._records: list[Candidate | None] = []
        for key in seen_keys:
            self._by_key.setdefault(key, -1)

    def seen(self, c: Candidate) -> bool:
        return any(k in self._by_key for k in candidate_keys(c))

    def get(self, key: str) -> Candidate | None:
        """The merged record of a paper by any of its keys (None if unknown or only an excluded key)."""
        index = self._by_key.get(key, -1)
        return self._records[index] if index >= 0 else None

    def keys(self) -> set[str]:
        return set(self._by_key)

    def add(self, batch: Iterable[Candidate]) -> list[Candidate]:
        new: dict[int, None] = {}  # ordered set of record indexes first seen in this batch
        for c in batch:
            keys = candidate_keys(c)
            hits = {self._by_key[k] for k in keys if k in self._by_key}
            if not hits:
                index = len(self._records)
                self._records.append(c)
                new[index] = None
            else:
                known = sorted(i for i in hits if i >= 0)
                if not known:  # excluded by an earlier iteration's key: remember, do not offer
                    index = len(self._records)
                    self._records.append(c)
                else:
                    index = known[0]
                    merged = self._records[index]
                    assert merged is not None
                    for other in known[1:]:  # c links records that were separate until now
                        extra = self._records[other]
                        if extra is not None:
                            merged = merge(merged, extra)
                            self._records[other] = None
                            new.pop(other, None)
                            for k, v in list(self._by_key.items()):
                                if v == other:
                                    self._by_key[k] = index
                    merged = merge(merged, c)
                    self._records[index] = merged
                    keys |= candidate_keys(merged)
            for k in keys:
                self._by_key[k] = index
        return [r for i in new if (r := self._records[i]) is not None]
