"""A loopback server that replays the recorded OpenAlex and arXiv responses and serves real PDFs.

:class:`LoopbackSources` is a real HTTP server on ``127.0.0.1`` (stdlib ``ThreadingHTTPServer`` in a
thread, port 0), usable as a context manager (``with LoopbackSources(shared_data) as srv: ...``) or
as the ``loopback_sources`` pytest fixture (``from tests.loopback_sources import loopback_sources``
in a test module: a fresh server per test). Point
the clients at it with ``SearchSettings(openalex_url=srv.openalex_url, arxiv_url=srv.arxiv_url)``
and ``Downloader(..., arxiv_pdf_base=srv.url("/pdf/"))``.

**OpenAlex** (``/works``), answered from the recorded works in ``api-fixtures/openalex`` (all files
together form the "known works"; ``add_work`` adds more, e.g. a copy of a recorded work whose
``referenced_works`` point at other recorded works, to test snowballing):

- ``/works?search=...`` → the recorded search page (``works_search_machine_learning_public_health.json``,
  49 works) for *any* search text; it is the only recorded search.
- ``filter=title.search:...`` → the recorded title-search file whose query words match; otherwise
  the known works whose title contains every word.
- ``filter=raw_author_name.search:...`` → known works with an author whose name contains every word
  (of one quoted phrase: ``"jane doe"~1 OR "ann lee"`` matches a byline holding either name).
- ``filter=openalex_id:W1|W2`` → those of the known works; ``filter=cites:W`` → known works whose
  ``referenced_works`` contain W.
- The filters ``publication_year`` (``2019-2023``, ``>2018``, ``<2024``, ``2020``), ``is_oa``,
  ``has_abstract``, ``has_pdf_url`` (a location with a ``pdf_url``), ``raw_author_name.search`` and
  ``primary_location.source.id`` (``S1|S2``) are applied to the recorded fields, so a filter test sees
  real effects; an unknown filter is answered 400, as OpenAlex does.
- ``/sources?search=...`` → the sources of the known works (their ``primary_location.source``) whose
  name holds every word of the search.
- Paging: ``per-page`` and ``cursor`` (``*`` to start) slice the result list; ``meta.next_cursor`` is
  an opaque offset token, None on the last page. ``page`` works too.
- ``/works/https://doi.org/<doi>`` → the recorded by-DOI file (or a known work with that DOI);
  ``/works/W123`` → that known work; otherwise 404.

**arXiv** (``/api/query``): ``id_list`` → the recorded id_list feed for those ids
(``abc`` → HTTP 400 with arXiv's error feed; an id not recorded → the recorded empty feed);
``search_query`` containing ``del_maestro`` → the 2016 feed; any other search → the recorded
10-result "testing" feed, sliced by ``start``/``max_results`` (``totalResults`` set to the entries
served, so paging ends where the recording does). ``ti:"..."`` and ``au:"..."`` terms are honoured:
only entries whose title holds the words of every ``ti:`` term, and with an author named by one of
the ``au:`` terms, are served (``all:`` words are not checked: the recording is the only search).

**PDFs and misbehaviour** (``<name>`` is a file in ``shared/data/pdfs``):

- ``/pdf/<name>``: the real PDF (``?delay=0.2``: after that many seconds). ``/pdf/<arxiv id>`` for an
  id given to ``arxiv_pdfs`` (``{"2202.00535": "novelty_paraphrase_arxiv2202.00535v1.pdf"}``) too.
  ``max_in_flight`` is the most requests the server answered at once.
- ``/flaky429/<n>/<name>``: the first ``n`` requests of that path get 429 with ``Retry-After`` (the
  ``after`` query parameter, default ``1``), then the PDF. ``/flaky500/<n>/<name>``: ``n`` × 500.
- ``/status/<code>``: always that status (e.g. ``/status/500``, ``/status/404``).
- ``/hang/<name>``: accepts and never answers (until ``close`` or ``hang_limit_s``).
- ``/trickle/<name>``: a 200 with the PDF's length, then a few bytes per second, forever.
- ``/html/<name>``: 200 ``text/html`` (a publisher's landing page instead of the PDF).
- ``/truncated/<name>``: the first half of the PDF (starts ``%PDF-``, no ``%%EOF``).
- ``/redirect/<n>/<name>``: a chain of ``n`` 302 redirects ending at ``/pdf/<name>``.
- ``/oversized/<name>``: the PDF without ``Content-Length`` (read until close), so only a
  streaming size check stops it; ``/oversized-declared/<name>`` declares its length.

``fail_next(prefix, status, times, retry_after)`` makes the next ``times`` requests whose path starts
with ``prefix`` answer ``status`` first (any route, e.g. ``/works`` for OpenAlex retries).
``pdf_map`` rewrites the PDF locations of served works: ``{openalex id: [loopback urls]}``; with
``localize_pdfs=True`` every other external ``pdf_url``/``oa_url`` becomes a loopback 404, and the
arXiv feeds' PDF links point at ``/pdf/<id>`` (served when ``arxiv_pdfs`` maps the id), so no test
can leave the machine. Every request, of any method, is recorded in ``requests`` (method, path, query,
headers, body, time; ``Request.text()`` is all of it as text, for "this never left" checks); a method
other than GET is answered 405 unless a route takes it. Routes can be added: ``srv.route(prefix,
handler)`` with ``handler(srv, request) -> Reply``.
"""

from __future__ import annotations

import copy
import html
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, unquote_plus, urlsplit

SEARCH_FILE = "works_search_machine_learning_public_health.json"
TITLE_FILES = ("works_filter_title_search_chemistry_tools.json", "works_filter_title_search_paperqa.json")
DOI_FILES = ("work_by_doi_10.1073_pnas.1414271111.json",)
ARXIV_SEARCH = "query_search_testing_start0_max10.xml"
ARXIV_LEGACY = "legacy2016_search_au_del_maestro_AND_ti_checkerboard.xml"
ARXIV_EMPTY = "query_idlist_0000.0000_no_results.xml"
ARXIV_ERROR = "query_idlist_abc_error_http400.xml"



def read_body(handler: BaseHTTPRequestHandler) -> bytes:
    """A request's whole body, with Content-Length or chunked (the canary test reads every byte sent)."""
    if "chunked" in (handler.headers.get("Transfer-Encoding") or "").lower():
        chunks = []
        while (size := int(handler.rfile.readline().split(b";")[0].strip() or b"0", 16)) > 0:
            chunks.append(handler.rfile.read(size))
            handler.rfile.readline()
        while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
            pass  # trailers
        return b"".join(chunks)
    length = int(handler.headers.get("Content-Length") or 0)
    return handler.rfile.read(length) if length else b""

@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: dict[str, list[str]]
    raw_query: str
    headers: dict[str, str]
    at: float
    body: bytes = b""

    def param(self, name: str) -> str | None:
        values = self.query.get(name)
        return values[0] if values else None

    def text(self) -> str:
        """Everything the server received, as text: method, path, query (raw and decoded), headers, body."""
        body = self.body.decode("utf-8", "replace")
        return "\n".join([self.method, self.path, self.raw_query, unquote_plus(self.raw_query),
                          *(f"{k}: {v}" for k, v in self.headers.items()), body, unquote_plus(body)])


@dataclass
class Reply:
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    declare_length: bool = True
    hang: bool = False
    trickle: bool = False


Handler = Callable[["LoopbackSources", Request], Reply]


def _json(data: Any, status: int = 200) -> Reply:
    return Reply(status, json.dumps(data).encode(), "application/json")


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.casefold())


class LoopbackSources:
    def __init__(self, shared_data: Path, *, hang_limit_s: float = 30.0) -> None:
        self.data = Path(shared_data)
        self.openalex_dir = self.data / "api-fixtures" / "openalex"
        self.arxiv_dir = self.data / "api-fixtures" / "arxiv"
        self.pdf_dir = self.data / "pdfs"
        self.hang_limit_s = hang_limit_s
        self.requests: list[Request] = []
        self.pdf_map: dict[str, list[str]] = {}
        self.localize_pdfs = False
        self.arxiv_pdfs: dict[str, str] = {}  # arXiv id -> file name in pdfs/
        self._lock = threading.Lock()
        self._closing = threading.Event()
        self._counts: dict[str, int] = {}
        self._faults: list[list[Any]] = []  # [prefix, status, remaining, retry_after]
        self._routes: list[tuple[str, Handler]] = []
        self.in_flight = 0
        self.max_in_flight = 0  # most requests being answered at once (concurrency limits)
        self._works: dict[str, dict[str, Any]] = {}
        for f in sorted(self.openalex_dir.glob("*.json")):
            data = json.loads(f.read_text())
            for w in data.get("results") or ([data] if "id" in data else []):
                self._works.setdefault(w["id"].rsplit("/", 1)[-1], w)
        self._server = _Server(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True)

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> LoopbackSources:
        self._thread.start()
        return self

    def close(self) -> None:
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> LoopbackSources:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- addresses ----------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    @property
    def openalex_url(self) -> str:
        return self.base_url

    @property
    def arxiv_url(self) -> str:
        return self.base_url + "/api/query"

    def url(self, path: str) -> str:
        return self.base_url + path

    # -- test controls ------------------------------------------------------------------------------
    def fail_next(self, prefix: str, status: int, times: int = 1, retry_after: str | None = None) -> None:
        with self._lock:
            self._faults.append([prefix, status, times, retry_after])

    def route(self, prefix: str, handler: Handler) -> None:
        """Serve paths starting with ``prefix`` with ``handler`` (checked before the built-in routes)."""
        self._routes.append((prefix, handler))

    def add_work(self, work: dict[str, Any]) -> None:
        self._works[work["id"].rsplit("/", 1)[-1]] = work

    def known_work(self, wid: str) -> dict[str, Any]:
        return copy.deepcopy(self._works[wid])

    def recorded_search(self) -> list[dict[str, Any]]:
        return json.loads((self.openalex_dir / SEARCH_FILE).read_text())["results"]

    def received(self, prefix: str = "") -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.path.startswith(prefix)]

    # -- dispatch -----------------------------------------------------------------------------------
    def _handle(self, req: Request) -> Reply:
        with self._lock:
            self.requests.append(req)
            for fault in self._faults:
                if req.path.startswith(fault[0]) and fault[2] > 0:
                    fault[2] -= 1
                    headers = {"Retry-After": fault[3]} if fault[3] is not None else {}
                    return Reply(fault[1], json.dumps({"error": f"injected {fault[1]}"}).encode(), headers=headers)
        for prefix, handler in self._routes:
            if req.path.startswith(prefix):
                return handler(self, req)
        if req.method != "GET":
            return Reply(405, b"method not allowed", "text/plain", {"Allow": "GET"})
        if req.path == "/works" or req.path.startswith("/works/"):
            return self._openalex(req)
        if req.path == "/sources":
            return self._sources(req)
        if req.path == "/api/query":
            return self._arxiv(req)
        parts = req.path.strip("/").split("/")
        return self._misbehave(req, parts)

    # -- OpenAlex -----------------------------------------------------------------------------------
    def _openalex(self, req: Request) -> Reply:
        if req.path.startswith("/works/"):
            ident = unquote(req.path[len("/works/"):])
            work = self._work_by_ident(ident)
            if work is None:
                return _json({"error": "Not Found", "message": f"no work {ident}"}, 404)
            return _json(self._localize(work))
        raw_filters = _raw_filters(req.raw_query)
        search = req.param("search")
        works: list[dict[str, Any]]
        if search is not None:
            works = self.recorded_search()
        elif "title.search" in raw_filters:
            works = self._title_search(raw_filters.pop("title.search"))
        elif "raw_author_name.search" in raw_filters:
            value = raw_filters.pop("raw_author_name.search")
            works = [w for w in self._works.values() if _by(w, value)]
        elif "openalex_id" in raw_filters:
            ids = [i.rsplit("/", 1)[-1] for i in raw_filters.pop("openalex_id").split("|")]
            works = [self._works[i] for i in ids if i in self._works]
        elif "cites" in raw_filters:
            target = raw_filters.pop("cites").rsplit("/", 1)[-1]
            works = [w for w in self._works.values()
                     if any(r.rsplit("/", 1)[-1] == target for r in w.get("referenced_works") or [])]
        else:
            return _json({"error": "Invalid query parameters", "message": "loopback: no search or filter"}, 400)
        for name, value in raw_filters.items():
            if name not in KNOWN_FILTERS:
                return _json({"error": "Invalid query parameters",
                              "message": f"{name} is not a valid field (loopback)"}, 400)
            works = [w for w in works if _keep(w, name, value)]
        per_page = int(req.param("per-page") or 25)
        cursor, page = req.param("cursor"), req.param("page")
        start = 0
        if cursor and cursor != "*":
            start = int(cursor.removeprefix("offset-"))
        elif page:
            start = (int(page) - 1) * per_page
        chunk = works[start:start + per_page]
        nxt = f"offset-{start + per_page}" if cursor and start + per_page < len(works) else None
        meta = {"count": len(works), "db_response_time_ms": 1, "page": None if cursor else int(page or 1),
                "per_page": per_page, "next_cursor": nxt, "groups_count": None}
        return _json({"meta": meta, "results": [self._localize(w) for w in chunk], "group_by": []})

    def _sources(self, req: Request) -> Reply:
        words = _words(req.param("search") or "")
        if not words:
            return _json({"error": "Invalid query parameters", "message": "loopback: no search"}, 400)
        known: dict[str, dict[str, Any]] = {}
        for w in self._works.values():
            source = (w.get("primary_location") or {}).get("source")
            if source and source.get("id"):
                known.setdefault(source["id"], source)
        found = [s for s in known.values() if all(x in _words(s.get("display_name") or "") for x in words)]
        per_page = int(req.param("per-page") or 25)
        meta = {"count": len(found), "db_response_time_ms": 1, "page": 1, "per_page": per_page, "next_cursor": None,
                "groups_count": None}
        return _json({"meta": meta, "results": found[:per_page], "group_by": []})

    def _work_by_ident(self, ident: str) -> dict[str, Any] | None:
        if ident.rsplit("/", 1)[-1].upper() in self._works:
            return self._works[ident.rsplit("/", 1)[-1].upper()]
        doi = re.sub(r"^(https?://doi\.org/|doi:)", "", ident, flags=re.I).lower()
        for w in self._works.values():
            if (w.get("doi") or "").lower().endswith(doi):
                return w
        return None

    def _title_search(self, text: str) -> list[dict[str, Any]]:
        words = _words(text)
        for name in TITLE_FILES:
            page = json.loads((self.openalex_dir / name).read_text())
            if page["results"] and all(x in _words(page["results"][0].get("display_name") or "") for x in words):
                return list(page["results"])
        return [w for w in self._works.values() if all(x in _words(w.get("display_name") or "") for x in words)]

    def _localize(self, work: dict[str, Any]) -> dict[str, Any]:
        wid = work["id"].rsplit("/", 1)[-1]
        if wid not in self.pdf_map and not self.localize_pdfs:
            return work
        work = copy.deepcopy(work)
        urls = list(self.pdf_map.get(wid, []))
        gone = self.url(f"/status/404?work={wid}")
        memo: dict[str, str] = {}  # the same original URL gets the same replacement everywhere

        def swap(current: str | None) -> str | None:
            if not current:
                return current
            if current not in memo:
                memo[current] = urls.pop(0) if urls else (gone if self.localize_pdfs else current)
            return memo[current]

        locations = [work.get("best_oa_location"), *(work.get("locations") or []), work.get("primary_location")]
        for loc in locations[:-1]:
            if loc:
                loc["pdf_url"] = swap(loc.get("pdf_url"))
        if work.get("open_access"):
            work["open_access"]["oa_url"] = swap(work["open_access"].get("oa_url"))
        if locations[-1]:
            locations[-1]["pdf_url"] = swap(locations[-1].get("pdf_url"))
        return work

    # -- arXiv --------------------------------------------------------------------------------------
    def _arxiv(self, req: Request) -> Reply:
        ids = [i for i in (req.param("id_list") or "").split(",") if i]
        query = req.param("search_query") or ""
        if ids:
            if "abc" in ids:
                return Reply(400, (self.arxiv_dir / ARXIV_ERROR).read_bytes(), "application/atom+xml")
            for f in sorted(self.arxiv_dir.glob("query_idlist_*.xml")):
                if f.name not in (ARXIV_ERROR, ARXIV_EMPTY) and all(i in f.name for i in ids):
                    return Reply(200, f.read_bytes(), "application/atom+xml")
            return Reply(200, (self.arxiv_dir / ARXIV_EMPTY).read_bytes(), "application/atom+xml")
        if not query:
            return Reply(400, (self.arxiv_dir / ARXIV_ERROR).read_bytes(), "application/atom+xml")
        name = ARXIV_LEGACY if "del_maestro" in query else ARXIV_SEARCH
        feed = (self.arxiv_dir / name).read_text()
        if self.localize_pdfs:  # the feed's PDF links point at this server's /pdf/<id>
            feed = re.sub(r'href="https?://arxiv\.org/pdf/', f'href="{self.base_url}/pdf/', feed)
        start, size = int(req.param("start") or 0), int(req.param("max_results") or 10)
        return Reply(200, _slice_feed(feed, start, size, keep=_arxiv_terms(query)).encode(), "application/atom+xml")

    # -- PDFs and misbehaviour ----------------------------------------------------------------------
    def _pdf(self, name: str) -> bytes | None:
        name = self.arxiv_pdfs.get(name, name)
        path = self.pdf_dir / name
        if "/" in name or not path.is_file():
            return None
        return path.read_bytes()

    def _misbehave(self, req: Request, parts: list[str]) -> Reply:
        kind, rest = parts[0], parts[1:]
        not_found = Reply(404, b"not found", "text/plain")
        if kind == "status" and rest:
            return Reply(int(rest[0]), f"status {rest[0]}".encode(), "text/plain")
        if kind in ("flaky429", "flaky500", "redirect") and len(rest) >= 2:
            n, name = int(rest[0]), "/".join(rest[1:])
        elif rest:
            n, name = 0, "/".join(rest)
        else:
            return not_found
        pdf = self._pdf(name) if kind != "pdf" else self._pdf("/".join(rest))
        if pdf is None:
            return not_found
        if kind == "pdf":
            if delay := float(req.param("delay") or 0):
                self._closing.wait(delay)
            return Reply(200, pdf, "application/pdf")
        if kind in ("flaky429", "flaky500"):
            with self._lock:
                self._counts[req.path] = seen = self._counts.get(req.path, 0) + 1
            if seen <= n:
                if kind == "flaky429":
                    return Reply(429, b"slow down", "text/plain", {"Retry-After": req.param("after") or "1"})
                return Reply(500, b"internal error", "text/plain")
            return Reply(200, pdf, "application/pdf")
        if kind == "redirect":
            target = f"/redirect/{n - 1}/{name}" if n > 1 else f"/pdf/{name}"
            return Reply(302, b"", "text/plain", {"Location": target})
        if kind == "hang":
            return Reply(hang=True)
        if kind == "trickle":
            return Reply(200, pdf, "application/pdf", trickle=True)
        if kind == "html":
            page = b"<!DOCTYPE html><html><head><title>Article</title></head><body>Sign in to download</body></html>"
            return Reply(200, page, "text/html; charset=utf-8")
        if kind == "truncated":
            return Reply(200, pdf[: len(pdf) // 2], "application/pdf")
        if kind == "oversized":
            return Reply(200, pdf, "application/pdf", declare_length=False)
        if kind == "oversized-declared":
            return Reply(200, pdf, "application/pdf")
        return not_found

    # -- the stdlib handler -------------------------------------------------------------------------
    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        owner = self

        class _H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self) -> None:  # noqa: N802
                self._receive("GET")

            def do_HEAD(self) -> None:  # noqa: N802
                self._receive("HEAD")

            def do_POST(self) -> None:  # noqa: N802
                self._receive("POST")

            def do_PUT(self) -> None:  # noqa: N802
                self._receive("PUT")

            def do_PATCH(self) -> None:  # noqa: N802
                self._receive("PATCH")

            def do_DELETE(self) -> None:  # noqa: N802
                self._receive("DELETE")

            def _receive(self, method: str) -> None:
                parts = urlsplit(self.path)
                req = Request(method, unquote(parts.path) if not parts.path.startswith("/works/") else parts.path,
                              parse_qs(parts.query, keep_blank_values=True), parts.query,
                              {k.lower(): v for k, v in self.headers.items()}, time.monotonic(), read_body(self))
                with owner._lock:
                    owner.in_flight += 1
                    owner.max_in_flight = max(owner.max_in_flight, owner.in_flight)
                try:
                    self._answer(req)
                finally:
                    with owner._lock:
                        owner.in_flight -= 1

            def _answer(self, req: Request) -> None:
                reply = owner._handle(req)
                if reply.hang:
                    owner._closing.wait(owner.hang_limit_s)
                    self.close_connection = True
                    return
                self.send_response(reply.status)
                self.send_header("Content-Type", reply.content_type)
                for k, v in reply.headers.items():
                    self.send_header(k, v)
                if reply.declare_length:
                    self.send_header("Content-Length", str(len(reply.body)))
                else:
                    self.send_header("Connection", "close")
                    self.close_connection = True
                self.end_headers()
                if req.method == "HEAD":
                    return
                try:
                    if reply.trickle:
                        for i in range(0, len(reply.body), 64):
                            if owner._closing.wait(0.5):
                                break
                            self.wfile.write(reply.body[i:i + 64])
                            self.wfile.flush()
                        self.close_connection = True
                        return
                    self.wfile.write(reply.body)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True

            def log_message(self, *args: object) -> None:
                pass

        return _H


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that gave up is expected here
            super().handle_error(request, client_address)


def _raw_filters(raw_query: str) -> dict[str, str]:
    """``filter=a:x,b:y`` split on literal commas before decoding (values may hold encoded commas)."""
    out: dict[str, str] = {}
    for part in raw_query.split("&"):
        if part.startswith("filter="):
            for item in part[len("filter="):].split(","):
                item = unquote(item)
                name, _, value = item.partition(":")
                out[name] = unquote_plus(value)
    return out


KNOWN_FILTERS = frozenset({"publication_year", "is_oa", "has_abstract", "has_pdf_url", "raw_author_name.search",
                           "primary_location.source.id"})


def _by(work: dict[str, Any], value: str) -> bool:
    """``raw_author_name.search``: each quoted phrase (``~N`` ignored) must be in one byline; unquoted words
    anywhere in the bylines; phrases OR-ed."""
    bylines = [_words(f"{a.get('raw_author_name') or ''} {(a.get('author') or {}).get('display_name') or ''}")
               for a in work.get("authorships") or []]
    phrases = re.findall(r'"([^"]*)"', value)
    if not phrases:
        words = _words(value)
        return bool(words) and all(any(x in b for b in bylines) for x in words)
    return any(words and any(all(x in b for x in words) for b in bylines) for words in map(_words, phrases))


def _keep(work: dict[str, Any], name: str, value: str) -> bool:
    if name == "publication_year":
        year = work.get("publication_year") or 0
        if value.startswith(">"):
            return year > int(value[1:])
        if value.startswith("<"):
            return year < int(value[1:])
        if "-" in value:
            lo, hi = value.split("-", 1)
            return int(lo) <= year <= int(hi)
        return year == int(value)
    if name == "is_oa":
        return bool((work.get("open_access") or {}).get("is_oa")) == (value == "true")
    if name == "has_abstract":
        return (work.get("abstract_inverted_index") is not None) == (value == "true")
    if name == "has_pdf_url":
        has = any((loc or {}).get("pdf_url") for loc in [work.get("best_oa_location"), *(work.get("locations") or [])])
        return has == (value == "true")
    if name == "raw_author_name.search":
        return _by(work, value)
    if name == "primary_location.source.id":
        sid = (((work.get("primary_location") or {}).get("source") or {}).get("id") or "").rsplit("/", 1)[-1]
        return bool(sid) and sid.upper() in {v.rsplit("/", 1)[-1].upper() for v in value.split("|")}
    raise AssertionError(f"unhandled filter {name}")


def _arxiv_terms(query: str) -> dict[str, list[list[str]]]:
    """The ``ti:`` and ``au:`` terms of an arXiv ``search_query``, each as its words."""
    terms: dict[str, list[list[str]]] = {"ti": [], "au": []}
    for field_, quoted, bare in re.findall(r'\b(ti|au):(?:"([^"]*)"|([^\s()"]+))', query):
        terms[field_].append(re.findall(r"[^\W_]+", (quoted or bare).casefold()))
    return terms


def _entry_kept(entry: str, terms: dict[str, list[list[str]]]) -> bool:
    title = re.search(r"<title>(.*?)</title>", entry, flags=re.S)
    title_words = set(re.findall(r"[^\W_]+", html.unescape(title.group(1)).casefold())) if title else set()
    authors = [set(re.findall(r"[^\W_]+", html.unescape(a).casefold()))
               for a in re.findall(r"<name>(.*?)</name>", entry, flags=re.S)]
    if not all(set(words) <= title_words for words in terms["ti"]):
        return False
    return not terms["au"] or any(set(words) <= a for words in terms["au"] for a in authors)


def _slice_feed(feed: str, start: int, size: int, keep: dict[str, list[list[str]]] | None = None) -> str:
    entries = re.findall(r"\s*<entry>.*?</entry>", feed, flags=re.S)
    head = feed.split("<entry>", 1)[0] if entries else feed.split("</feed>", 1)[0]
    if keep:  # the feed's head stays; only entries the query's ti:/au: terms name are served
        entries = [e for e in entries if _entry_kept(e, keep)]
    head = re.sub(r"<opensearch:totalResults>\d*</opensearch:totalResults>",
                  f"<opensearch:totalResults>{len(entries)}</opensearch:totalResults>", head)
    head = re.sub(r"<opensearch:startIndex>\d*</opensearch:startIndex>",
                  f"<opensearch:startIndex>{start}</opensearch:startIndex>", head)
    return head.rstrip() + "".join(entries[start:start + size]) + "\n</feed>\n"



def _fixture() -> Any:
    import pytest

    @pytest.fixture
    def loopback_sources(shared_data: Path) -> Any:
        """A fresh :class:`LoopbackSources` per test (import this name into a test module to use it)."""
        with LoopbackSources(shared_data, hang_limit_s=10.0) as srv:
            yield srv

    return loopback_sources


loopback_sources = _fixture()
