"""arXiv search through the ``arxiv`` package, over the egress layer.

The library's ``arxiv.Client`` does the paging and Atom parsing; its ``query_url_format`` points at
``search.arxiv_url`` and its ``requests`` session comes from :class:`~infra.net.Egress` (which adds
the timeout the library lacks, records every request and refuses offline). arXiv asks for at least
3 s between requests: ``search.arxiv_delay_s`` applies, but never below 3.0 against
export.arxiv.org. arXiv has no year or venue filter, so years and the venue (the paper's journal
reference) are checked after the fact; every arXiv paper is open access and has a PDF. A client
error (HTTP 400 with arXiv's error feed) is not retried; every failure becomes a :class:`SourceError`.

Search strings are sent as arXiv query terms: ``kind='keywords'`` → every word as ``all:word``
joined by AND, ``kind='title'`` → ``ti:"..."``, ``kind='author'`` → ``au:"..."``; an authors filter
adds ``AND (au:"..." OR au:"...")``. Only the words of the approved string and its filters leave the
machine. :meth:`ArxivSource.lookup_title` / :meth:`ArxivSource.lookup_author` answer direct lookups.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import arxiv
import requests

from infra.errors import SourceError
from infra.net import Egress, OfflineError
from infra.settings import NetSettings, SearchSettings
from infra.sources.keys import normalize_arxiv_id, normalize_doi, primary_key
from messages.plan import SearchQuery
from messages.search import Candidate

ARXIV_HOST = "export.arxiv.org"
MIN_ARXIV_DELAY_S = 3.0
MAX_PAGES_PER_CALL = 3  # pages read by one search call when the year filter leaves nothing




class _Client(arxiv.Client):
    """``arxiv.Client`` that does not retry a client error (4xx other than 429): it cannot succeed.

    It also refuses a page that is not an Atom feed (the library would read it as "no results").
    """

    def _parse_feed(self, url: str, first_page: bool = True, _try_index: int = 0) -> Any:
        try:
            feed = super()._parse_feed(url, first_page=first_page, _try_index=self.num_retries)
            if feed.malformed and not feed.results:
                raise SourceError(f"arXiv answered something that is not an Atom feed ({feed.error}): {url}",
                                  retryable=True)
            return feed
        except arxiv.HTTPError as err:
            if 400 <= err.status < 500 and err.status != 429 or _try_index >= self.num_retries:
                raise
        except (arxiv.UnexpectedEmptyPageError, requests.exceptions.ConnectionError):
            if _try_index >= self.num_retries:
                raise
        return self._parse_feed(url, first_page=first_page, _try_index=_try_index + 1)


def arxiv_delay(search: SearchSettings) -> float:
    host = urlsplit(search.arxiv_url).hostname or ""
    if host == ARXIV_HOST or host.endswith(".arxiv.org") or host == "arxiv.org":
        return max(search.arxiv_delay_s, MIN_ARXIV_DELAY_S)
    return search.arxiv_delay_s


_OPERATORS = {"AND", "OR", "ANDNOT", "NOT"}


def _words(text: str) -> list[str]:
    return [w for w in re.findall(r"[\w\-.']+", text) if w not in _OPERATORS]


def arxiv_query(q: SearchQuery) -> str:
    """The arXiv ``search_query`` for an approved string and its authors: their words, without arXiv
    query syntax."""
    words = _words(q.text)
    if q.kind == "title":
        base = 'ti:"' + " ".join(words) + '"'
    elif q.kind == "author":
        return 'au:"' + " ".join(words) + '"'
    else:
        base = " AND ".join(f"all:{w}" for w in words)
    names = [f'au:"{" ".join(n)}"' for a in q.authors if (n := _words(a))]
    if not names:
        return base
    by = names[0] if len(names) == 1 else "(" + " OR ".join(names) + ")"
    return f"({base}) AND {by}" if " " in base and q.kind != "title" else f"{base} AND {by}"


class ArxivSource:
    name = "arxiv"
    kinds = frozenset({"keywords", "title", "author"})
    cites = False  # arXiv's API knows no citations

    def __init__(self, search: SearchSettings, net: NetSettings, egress: Egress) -> None:
        self.search_settings, self.net = search, net
        self.client = _Client(page_size=search.per_query, delay_seconds=arxiv_delay(search),
                              num_retries=net.retries)
        self.client.query_url_format = search.arxiv_url.rstrip("?") + "?{}"
        self.client._session = egress.requests_session("arxiv")
        self.client._session.hooks["response"].append(_require_feed)
        self._offsets: dict[tuple[object, ...], int] = {}
        self._exhausted: set[tuple[object, ...]] = set()

    def close(self) -> None:
        self.client._session.close()

    def search(self, q: SearchQuery, limit: int | None = None) -> list[Candidate]:
        """Up to ``limit`` arXiv results within the query's years and venue; the next call continues after them.

        arXiv cannot filter by year or venue, so when a page has nothing that fits the next page is
        read, up to ``MAX_PAGES_PER_CALL`` pages; [] then means "nothing this time", see :meth:`exhausted`.
        """
        limit = self.search_settings.per_query if limit is None else limit
        key = _key(q)
        found: list[Candidate] = []
        pages = 0
        while not found and key not in self._exhausted and limit > 0 and pages < MAX_PAGES_PER_CALL:
            pages += 1
            offset = self._offsets.get(key, 0)
            self.client.page_size = min(limit, 2000)
            search = arxiv.Search(query=arxiv_query(q), max_results=offset + limit)
            results = self._run(lambda: self.client.results(search, offset=offset))  # noqa: B023
            self._offsets[key] = offset + len(results)
            if len(results) < limit:
                self._exhausted.add(key)
            found = [c for r in results
                     if _in_years((c := to_candidate(r, found_by=q.text)).year, q.year_from, q.year_to)
                     and _in_venue(c.venue, q.venue)]
        return found

    def lookup_title(self, title: str, limit: int | None = None, query: SearchQuery | None = None) -> list[Candidate]:
        """Papers whose title holds the named title's words (``ti:"..."``): a named paper, found directly."""
        return self.search(_as_kind(query, title, "title"), limit)

    def lookup_author(self, name: str, limit: int | None = None, query: SearchQuery | None = None) -> list[Candidate]:
        """Papers by a named author (``au:"..."``)."""
        return self.search(_as_kind(query, name, "author"), limit)

    def references(self, work_id: str, limit: int) -> list[Candidate]:
        """Nothing: arXiv's API knows no citations (``cites`` is False, so no one asks)."""
        return []

    def cited_by(self, work_id: str, limit: int) -> list[Candidate]:
        """Nothing: arXiv's API knows no citations (``cites`` is False, so no one asks)."""
        return []

    def exhausted(self, q: SearchQuery) -> bool:
        return _key(q) in self._exhausted

    def by_ids(self, ids: list[str]) -> list[Candidate]:
        """Papers by arXiv id (``id_list``)."""
        clean = [i for x in ids if (i := normalize_arxiv_id(x))]
        bad = [x for x in ids if not normalize_arxiv_id(x)]
        if bad:
            raise SourceError(f"not arXiv ids: {bad}", retryable=False)
        if not clean:
            return []
        return self.run(arxiv.Search(id_list=clean, max_results=len(clean)))

    def run(self, search: arxiv.Search, found_by: str | None = None) -> list[Candidate]:
        """Any ``arxiv.Search`` through this source's client; every failure becomes a SourceError."""
        return [to_candidate(r, found_by=found_by or f"arxiv:{normalize_arxiv_id(r.get_short_id())}")
                for r in self._run(lambda: self.client.results(search))]

    def _run(self, results: Any) -> list[arxiv.Result]:
        try:
            out = list(_checked(results()))
        except OfflineError:
            raise
        except arxiv.HTTPError as err:
            retryable = err.status == 429 or err.status >= 500
            raise SourceError(f"arXiv answered HTTP {err.status} for {err.url}"
                              + ("" if retryable else " (a malformed query or id; not retried)"),
                              retryable=retryable) from err
        except arxiv.UnexpectedEmptyPageError as err:
            raise SourceError(f"arXiv returned an unexpectedly empty page after retries: {err.url}",
                              retryable=True) from err
        except requests.exceptions.Timeout as err:
            raise SourceError(f"arXiv did not answer within {self.net.timeout_s}s: {err}", retryable=True) from err
        except requests.exceptions.RequestException as err:
            raise SourceError(f"arXiv unreachable ({type(err).__name__}: {err})", retryable=True) from err
        return out


def _require_feed(response: requests.Response, *args: Any, **kwargs: Any) -> None:
    """A 200 answer must be an Atom feed; the library would read an HTML page as "no results"."""
    if response.status_code == 200 and b"<feed" not in response.content[:4096]:
        ctype = response.headers.get("content-type", "no content-type")
        raise SourceError(f"arXiv answered something that is not an Atom feed ({ctype}): {response.url}",
                          retryable=True)


def _checked(results: Iterator[arxiv.Result]) -> Iterator[arxiv.Result]:
    """arXiv answers some errors as a 200 feed with one 'Error' entry: raise those."""
    for r in results:
        if "arxiv.org/api/errors" in r.entry_id:
            raise SourceError(f"arXiv reported an error: {r.summary.strip()}", retryable=False)
        yield r


def _key(q: SearchQuery) -> tuple[object, ...]:
    """A search's identity for paging: what arXiv is asked, and the filters applied afterwards."""
    return (q.kind, arxiv_query(q), q.year_from, q.year_to, q.venue)


def _as_kind(query: SearchQuery | None, text: str, kind: str) -> SearchQuery:
    if query is None:
        return SearchQuery(text=text, kind=kind)  # type: ignore[arg-type]
    return SearchQuery.model_validate({**query.model_dump(), "text": text, "kind": kind})


def _in_venue(journal_ref: str | None, venue: str | None) -> bool:
    """Whether a paper's journal reference names the venue (every word of it); arXiv has no venue filter."""
    if not venue:
        return True
    wanted = set(re.findall(r"\w+", venue.casefold()))
    return bool(journal_ref) and wanted <= set(re.findall(r"\w+", (journal_ref or "").casefold()))


def _in_years(year: int | None, year_from: int | None, year_to: int | None) -> bool:
    if year is None:
        return not (year_from or year_to)
    return (year_from is None or year >= year_from) and (year_to is None or year <= year_to)


def to_candidate(r: arxiv.Result, *, found_by: str) -> Candidate:
    arxiv_id = normalize_arxiv_id(r.get_short_id()) or normalize_arxiv_id(r.entry_id)
    doi = normalize_doi(r.doi)
    authors = tuple(a.name for a in r.authors)
    year = r.published.year if r.published and r.published.year > 1 else None
    title = " ".join(r.title.split()) or None
    pdf = _pdf_url(r.pdf_url, arxiv_id)
    return Candidate(
        key=primary_key(doi=doi, arxiv_id=arxiv_id, title=title, first_author=authors[0] if authors else None,
                        year=year),
        source="arxiv", title=title, authors=authors, year=year, doi=doi, arxiv_id=arxiv_id,
        abstract=" ".join(r.summary.split()) or None, venue=r.journal_ref or None,
        pdf_urls=(pdf,) if pdf else (), landing_url=f"https://arxiv.org/abs/{arxiv_id}" if arxiv_id else r.entry_id,
        url=r.entry_id, found_by=found_by, oa_status="green",  # arXiv is an open repository
        preprint_only=not (r.journal_ref or doi))  # no journal reference and no publisher's DOI: a preprint only


def _pdf_url(pdf_url: str | None, arxiv_id: str | None) -> str | None:
    """The feed's PDF link without its version (``https://arxiv.org/pdf/<id>``: the latest version)."""
    if not pdf_url:
        return f"https://arxiv.org/pdf/{arxiv_id}" if arxiv_id else None
    parts = urlsplit(pdf_url)
    if arxiv_id and "/pdf/" in parts.path:
        pdf_url = pdf_url.split("/pdf/")[0] + f"/pdf/{arxiv_id}"
    if parts.hostname in ("arxiv.org", "export.arxiv.org") and parts.scheme == "http":
        pdf_url = "https://" + pdf_url[len("http://"):]
    return pdf_url
