"""OpenAlex works search, title/author lookup and snowballing, through pyalex and the egress layer.

pyalex builds the request URLs (``Works().search(...).filter(...).url``) and reads the works
(``pyalex.Work`` rebuilds the abstract from ``abstract_inverted_index``); the requests go through an
httpx client from :class:`~infra.net.Egress` (timeouts, ledger, offline refusal) because pyalex's
own session has no timeout and its base URL is hard-coded: the ``https://api.openalex.org`` prefix
is replaced by ``search.openalex_url``. Retries on 429/5xx/network errors follow
:mod:`infra.sources.retry`. Paging uses cursors and resumes across iterations: asking the same
search again continues where the last call stopped.

The approved filters become OpenAlex filters: ``publication_year``, ``is_oa``, ``has_pdf_url``,
``raw_author_name.search`` (each name quoted, so it matches one byline; ``~1`` lets a middle initial
in; several names are OR-ed) and, for a venue, ``primary_location.source.id`` with the ids of the
sources of that name (OpenAlex cannot filter works by a source's name: the name is looked up with
``/sources?search=`` first, as OpenAlex documents for names).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pyalex
from tenacity import Retrying

from infra.errors import SourceError
from infra.net import Egress
from infra.settings import NetSettings, SearchSettings
from infra.sources.keys import normalize_arxiv_id, normalize_doi, normalize_openalex_id, primary_key
from infra.sources.retry import RetryableStatus, is_retryable_status, retry_after, retry_kwargs
from messages.plan import SearchQuery
from messages.search import Candidate, VenueKind

PYALEX_BASE = "https://api.openalex.org"
_OR_CHUNK = 50  # ids per openalex_id:W1|W2 filter (OpenAlex allows up to 100)
# OpenAlex source types that are a venue in a bibliography (a repository such as arXiv or PMC is not)
_VENUE_KINDS: dict[str, VenueKind] = {"journal": "journal", "conference": "conference"}
_VENUE_SOURCES = 10  # sources of a venue's name asked for, and the most ids put in the filter


@dataclass
class _Pager:
    """Where a search stands: the next cursor (None: exhausted) and results fetched but not yet handed out."""

    cursor: str | None = "*"
    buffer: list[Candidate] = field(default_factory=list)


class OpenAlexSource:
    name = "openalex"
    kinds = frozenset({"keywords", "title", "author"})
    cites = True  # references and citing works of a work (citation snowballing)

    def __init__(self, search: SearchSettings, net: NetSettings, egress: Egress) -> None:
        self.search_settings, self.net = search, net
        self._base = search.openalex_url.rstrip("/")
        self._client = egress.client("openalex")
        if search.openalex_api_key:  # a header, so the key never lands in the egress ledger
            self._client.headers["Authorization"] = f"Bearer {search.openalex_api_key}"
        self._pagers: dict[tuple[Any, ...], _Pager] = {}
        self._venues: dict[str, tuple[str, ...]] = {}  # venue name → ids of the sources of that name

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> OpenAlexSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- public -------------------------------------------------------------------------------------
    def search(self, q: SearchQuery, limit: int | None = None) -> list[Candidate]:
        """Up to ``limit`` works for an approved search string; the next call continues after them.

        ``kind='title'`` and ``kind='author'`` are answered by :meth:`lookup_title` / :meth:`lookup_author`.
        """
        if q.kind == "title":
            return self.lookup_title(q.text, limit=limit, query=q)
        if q.kind == "author":
            return self.lookup_author(q.text, limit=limit, query=q)
        return self._paged(_key("search", q.text, q),
                           lambda: self._filtered(pyalex.Works().search(q.text), q, has_abstract=True),
                           limit, found_by=q.text)

    def lookup_title(self, title: str, limit: int | None = None, query: SearchQuery | None = None) -> list[Candidate]:
        """Works whose title matches (``title.search`` filter): a named paper, found directly."""
        q = query or SearchQuery(text=title, kind="title")
        return self._paged(_key("title", title, q),
                           lambda: self._filtered(pyalex.Works().filter(**{"title.search": _filter_text(title)}), q),
                           limit, found_by=q.text)

    def lookup_author(self, name: str, limit: int | None = None, query: SearchQuery | None = None) -> list[Candidate]:
        """Works by a named author (``raw_author_name.search`` filter over the works' bylines)."""
        q = query or SearchQuery(text=name, kind="author")
        return self._paged(_key("author", name, q),
                           lambda: self._filtered(pyalex.Works().filter(**{"raw_author_name.search": _names((name,))}),
                                                 q, authors=False),
                           limit, found_by=q.text)

    def exhausted(self, q: SearchQuery) -> bool:
        """True once a search has handed out everything OpenAlex has for it."""
        pager = self._pagers.get(_key("search" if q.kind == "keywords" else q.kind, q.text, q))
        return pager is not None and pager.cursor is None and not pager.buffer

    def venue_sources(self, venue: str) -> tuple[str, ...]:
        """Ids of the OpenAlex sources (journals, conferences, repositories) named ``venue``.

        The sources whose name (or alternate title, or abbreviation) holds every word of ``venue``; ()
        when none does (OpenAlex's nearest match could be another journal, and would narrow the search to it).
        """
        key = " ".join(venue.split()).casefold()
        if key not in self._venues:
            sources = pyalex.Sources().search(_filter_text(venue))
            sources.params["per-page"] = _VENUE_SOURCES
            found = self._get_json(self._url(sources)).get("results") or []
            wanted = set(_words(venue))
            named = [s for s in found if wanted <= set(_words(" ".join(
                [s.get("display_name") or "", s.get("abbreviated_title") or "", *(s.get("alternate_titles") or [])])))]
            self._venues[key] = tuple(dict.fromkeys(
                sid for s in named if (sid := _source_id(s.get("id")))))[:_VENUE_SOURCES]
        return self._venues[key]

    def work(self, openalex_id: str) -> Candidate:
        """One work by id (``/works/W123``)."""
        wid = _require_id(openalex_id)
        return to_candidate(self._get_json(self._url(pyalex.Works(wid))), found_by=f"openalex:{wid}")

    def by_doi(self, doi: str) -> Candidate | None:
        """The work with this DOI (``/works/https://doi.org/<doi>``); None when OpenAlex has none (404)."""
        clean = normalize_doi(doi)
        if clean is None:
            raise SourceError(f"not a DOI: {doi!r}", retryable=False)
        data = self._get_json(self._url(pyalex.Works(f"https://doi.org/{clean}")), missing_ok=True)
        return to_candidate(data, found_by=f"doi:{clean}") if data else None

    def references(self, openalex_id: str, limit: int) -> list[Candidate]:
        """Works the given work cites (its ``referenced_works``), fetched by id in OR-filter batches."""
        wid = _require_id(openalex_id)
        ids = [i for x in self._get_json(self._url(pyalex.Works(wid))).get("referenced_works") or []
               if (i := normalize_openalex_id(x))][:max(limit, 0)]
        found: list[Candidate] = []
        for start in range(0, len(ids), _OR_CHUNK):
            chunk = ids[start:start + _OR_CHUNK]
            works = pyalex.Works().filter_or(openalex_id=chunk)
            works.params["per-page"] = len(chunk)
            page = self._get_json(self._url(works))
            found += [to_candidate(w, found_by=f"snowball:{wid}") for w in page.get("results") or []]
        return found[:limit]

    def cited_by(self, openalex_id: str, limit: int) -> list[Candidate]:
        """Works citing the given work (``cites:W`` filter), first ``limit`` by OpenAlex's order."""
        wid = _require_id(openalex_id)
        out: list[Candidate] = []
        for page in self._pages(lambda: pyalex.Works().filter(cites=wid), "*", limit):
            out += [to_candidate(w, found_by=f"snowball:{wid}") for w in page.get("results") or []]
            if len(out) >= limit:
                break
        return out[:limit]

    # -- paging -------------------------------------------------------------------------------------
    def _paged(self, key: tuple[Any, ...], build: Any, limit: int | None, found_by: str) -> list[Candidate]:
        limit = self.search_settings.per_query if limit is None else limit
        pager = self._pagers.setdefault(key, _Pager())
        while len(pager.buffer) < limit and pager.cursor is not None:
            works = build()
            if works is None:  # the filters cannot match anything (a venue OpenAlex does not know)
                pager.cursor = None
                break
            works.params["per-page"] = self.search_settings.per_query
            works.params["cursor"] = pager.cursor
            page = self._get_json(self._url(works))
            results = page.get("results") or []
            pager.buffer += [to_candidate(w, found_by=found_by) for w in results]
            next_cursor = (page.get("meta") or {}).get("next_cursor")
            pager.cursor = next_cursor if results and next_cursor and next_cursor != pager.cursor else None
        out, pager.buffer = pager.buffer[:limit], pager.buffer[limit:]
        return out

    def _pages(self, build: Any, cursor: str, limit: int) -> Iterator[dict[str, Any]]:
        current: str | None = cursor
        while current is not None:
            works = build()
            works.params["per-page"] = min(max(limit, 1), 200)
            works.params["cursor"] = current
            page = self._get_json(self._url(works))
            yield page
            nxt = (page.get("meta") or {}).get("next_cursor")
            current = nxt if page.get("results") and nxt and nxt != current else None

    def _filtered(self, works: Any, q: SearchQuery, *, has_abstract: bool = False, authors: bool = True) -> Any:
        """``works`` with the query's filters; None when they cannot match (a venue with no source)."""
        filters: dict[str, Any] = {}
        if q.year_from and q.year_to:
            filters["publication_year"] = f"{q.year_from}-{q.year_to}"
        elif q.year_from:
            works = works.filter_gt(publication_year=q.year_from - 1)
        elif q.year_to:
            works = works.filter_lt(publication_year=q.year_to + 1)
        if q.open_access:
            filters["is_oa"] = True
        if q.has_pdf:
            filters["has_pdf_url"] = True
        if authors and q.authors:
            filters["raw_author_name.search"] = _names(q.authors)
        if q.venue:
            ids = self.venue_sources(q.venue)
            if not ids:
                return None
            filters["primary_location.source.id"] = "|".join(ids)  # '|': any of them
        if has_abstract:
            filters["has_abstract"] = True
        return works.filter(**filters) if filters else works

    # -- HTTP ---------------------------------------------------------------------------------------
    def _url(self, works: Any) -> str:
        url: str = works.url
        if not url.startswith(PYALEX_BASE):
            raise SourceError(f"pyalex built an unexpected URL: {url}")
        return self._base + url[len(PYALEX_BASE):]

    def _get_json(self, url: str, *, missing_ok: bool = False) -> dict[str, Any]:
        """The JSON body at ``url`` (retried on 429/5xx/network errors); {} for a 404 when ``missing_ok``."""
        if self.search_settings.mailto and "mailto=" not in url:
            url += ("&" if "?" in url else "?") + str(httpx.QueryParams({"mailto": self.search_settings.mailto}))
        try:
            for attempt in Retrying(**retry_kwargs(self.net)):  # type: ignore[arg-type]
                with attempt:
                    response = self._client.get(url)
                    if is_retryable_status(response.status_code):
                        raise RetryableStatus(response.status_code, url, retry_after(response.headers))
        except RetryableStatus as exc:
            raise SourceError(f"OpenAlex answered HTTP {exc.status} after {self.net.retries + 1} tries: {url}",
                              retryable=True) from exc
        except httpx.TransportError as exc:
            raise SourceError(f"OpenAlex unreachable after {self.net.retries + 1} tries "
                              f"({type(exc).__name__}: {exc}): {url}", retryable=True) from exc
        if response.status_code == 404 and missing_ok:
            return {}
        if response.status_code >= 400:
            raise SourceError(f"OpenAlex refused the request (HTTP {response.status_code}: "
                              f"{_error_text(response)}): {url}", retryable=False)
        try:
            data = response.json()
        except ValueError as exc:
            raise SourceError(f"OpenAlex answered something that is not JSON: {url}", retryable=True) from exc
        if not isinstance(data, dict):
            raise SourceError(f"OpenAlex answered an unexpected JSON shape: {url}", retryable=False)
        return data


def _key(kind: str, text: str, q: SearchQuery) -> tuple[Any, ...]:
    """A search's identity for paging: what is asked and every filter sent with it."""
    return (kind, text, q.year_from, q.year_to, q.open_access, q.has_pdf, q.authors, q.venue)


def _filter_text(value: str) -> str:
    """A filter value: ',' separates filters and '|' means OR in OpenAlex filters, so neither may appear."""
    return " ".join(value.replace(",", " ").replace("|", " ").split())


def _names(names: tuple[str, ...] | list[str]) -> str:
    """A ``raw_author_name.search`` value: each name a quoted phrase (one byline; ``~1`` admits a middle
    name or initial), several names OR-ed."""
    phrases = []
    for name in names:
        clean = _filter_text(name.replace('"', " "))
        if clean:
            phrases.append(f'"{clean}"~1' if " " in clean else f'"{clean}"')
    return " OR ".join(phrases)


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.casefold())


def _source_id(value: str | None) -> str | None:
    sid = (value or "").rsplit("/", 1)[-1]
    return sid.upper() if re.fullmatch(r"[Ss]\d+", sid) else None


def _require_id(value: str) -> str:
    wid = normalize_openalex_id(value)
    if wid is None:
        raise SourceError(f"not an OpenAlex work id: {value!r}", retryable=False)
    return wid


def _error_text(response: httpx.Response) -> str:
    try:
        body = response.json()
        return str(body.get("message") or body.get("error") or body)[:300]
    except ValueError:
        return response.text[:300]


# -- mapping --------------------------------------------------------------------------------------
def _arxiv_from_work(work: dict[str, Any]) -> str | None:
    ids = work.get("ids") or {}
    for value in (ids.get("arxiv"), work.get("doi")):
        if a := normalize_arxiv_id(value):
            return a
    for loc in work.get("locations") or []:
        for value in (loc.get("landing_page_url"), loc.get("pdf_url")):
            if value and "arxiv.org/" in value and (a := normalize_arxiv_id(value)):
                return a
    return None


def pdf_locations(work: dict[str, Any]) -> tuple[str, ...]:
    """PDF URLs in the order to try: best_oa_location, the other locations, then open_access.oa_url."""
    urls: list[str | None] = [(work.get("best_oa_location") or {}).get("pdf_url")]
    urls += [(loc or {}).get("pdf_url") for loc in work.get("locations") or []]
    urls.append((work.get("open_access") or {}).get("oa_url"))
    return tuple(dict.fromkeys(u for u in urls if u))


_OA_STATUSES = ("diamond", "gold", "hybrid", "bronze", "green", "closed")
_PUBLISHED_VERSIONS = ("publishedVersion", "acceptedVersion")


def preprint_only(work: dict[str, Any]) -> bool:
    """Whether only a preprint of the work exists: OpenAlex types it 'preprint', or none of its locations is a
    journal's, a conference's or a book's, nor holds a published or accepted version (an arXiv-only paper)."""
    if work.get("type") == "preprint":
        return True
    locations = [loc for loc in work.get("locations") or [] if loc]
    if not locations:
        return False  # nothing known about where it appeared: not said to be a preprint
    for loc in locations:
        kind = (loc.get("source") or {}).get("type")
        if kind in _VENUE_KINDS or kind in ("book series", "ebook platform") or loc.get("version") in _PUBLISHED_VERSIONS:
            return False
    return any("arxiv.org/" in (loc.get("landing_page_url") or "") or loc.get("version") == "submittedVersion"
               for loc in locations)


def weight(work: dict[str, Any]) -> dict[str, Any]:
    """What a reader weighs the work by: is_retracted, cited_by_count, oa_status, preprint_only."""
    oa = work.get("open_access") or {}
    status = oa.get("oa_status") if oa.get("oa_status") in _OA_STATUSES else ""
    if not status and isinstance(oa.get("is_oa"), bool):
        status = "closed" if not oa["is_oa"] else ""
    count = work.get("cited_by_count")
    return {"is_retracted": work.get("is_retracted") is True,
            "cited_by_count": count if isinstance(count, int) and count >= 0 else None,
            "oa_status": status, "preprint_only": preprint_only(work)}


def to_candidate(data: dict[str, Any], *, found_by: str) -> Candidate:
    """A Candidate from one OpenAlex work (as JSON)."""
    work = pyalex.Work(data)
    authors = tuple(name for a in work.get("authorships") or []
                    if (name := (a.get("author") or {}).get("display_name") or a.get("raw_author_name")))
    doi, arxiv_id = normalize_doi(work.get("doi")), _arxiv_from_work(work)
    wid = normalize_openalex_id(work.get("id"))
    title = work.get("display_name") or work.get("title")
    year = work.get("publication_year")
    primary = work.get("primary_location") or {}
    source = primary.get("source") or {}
    venue = source.get("display_name")
    venue_kind = _VENUE_KINDS.get(source.get("type") or "", "")
    landing = primary.get("landing_page_url") or (f"https://doi.org/{doi}" if doi else None)
    abstract = work["abstract"] if work.get("abstract_inverted_index") else None
    return Candidate(
        key=primary_key(doi=doi, arxiv_id=arxiv_id, openalex_id=wid, title=title,
                        first_author=authors[0] if authors else None, year=year),
        source="openalex", title=title, authors=authors, year=year, doi=doi, arxiv_id=arxiv_id,
        openalex_id=wid, abstract=abstract, venue=venue, venue_kind=venue_kind, pdf_urls=pdf_locations(work), landing_url=landing,
        url=landing, found_by=found_by, **weight(work))
