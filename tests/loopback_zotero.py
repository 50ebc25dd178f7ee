"""A loopback Zotero Web API v3 server for tests (stdlib ``ThreadingHTTPServer`` on 127.0.0.1, port 0).

The library starts as the recorded real responses in ``api-fixtures/zotero`` (``items_doc.json``,
``collections_doc.json`` of the public test library 475425): GET routes answer from it in the API's
JSON shapes — ``/items``, ``/items/top``, ``/items/<k>``, ``/items/<k>/children``,
``/collections``, ``/collections/<k>``, ``/collections/<k>/items``, ``format=versions``, ``q`` /
``qmode`` / ``itemType`` filters, ``start`` / ``limit`` paging with ``Link: rel="next"`` and
``Total-Results`` / ``Last-Modified-Version`` headers — and ``/itemFields``, ``/itemTypes`` are the
recorded files. ``/items/new`` (item templates): the recorded ``item_template.json`` for ``book``;
for another type the fields of a recorded item of that type, emptied; ``preprint`` and ``attachment``
templates follow the API's documented field lists (no recorded item of those types exists).

Writes change the in-memory library, so push → pull round trips: ``POST /items`` and ``POST
/collections`` answer the documented write shape ``{"success", "successful", "unchanged",
"failed"}``, a reused ``Zotero-Write-Token`` gets 412; ``PATCH /items/<k>`` honours
``If-Unmodified-Since-Version`` (412 when stale). Attachment upload follows the documented flow as
pyzotero drives it (``_upload.py``): ``POST /items/<k>/file`` with ``md5, filename, filesize,
mtime, params=1`` → ``{"exists": 1}`` or ``{"url", "params", "uploadKey"}``; the multipart ``POST``
to that URL (our stand-in for S3) → 201; ``POST /items/<k>/file`` with ``upload=<uploadKey>`` → 204,
and the attachment's md5 / mtime / version change. ``GET /items/<k>/file`` answers 302 to a storage
URL that serves the bytes (the Web API's redirect to S3), or, with ``local=True`` (the Zotero 7
local API under ``/api``), 302 to a ``file://`` URL of the file in a Zotero data folder.

:meth:`LoopbackZotero.fail` makes a route answer an error status (403, 412, 429 with Retry-After...)
for the next N matching requests. Every request, of any method, is recorded in ``requests`` (method,
path, query, headers, body; ``RecordedRequest.text()`` is all of it as text, for "this never left"
checks).
"""

from __future__ import annotations

import copy
import email.parser
import email.policy
import hashlib
import json
import re
import secrets
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote_plus, urlencode, urlsplit

from tests.loopback_sources import read_body

KEY_ALPHABET = "23456789ABCDEFGHIJKLMNPQRSTUVWXYZ"

# Documented field lists (zotero.org/support/dev/web_api/v3/types_and_fields; schema.json) for the
# templates no recorded item shows.
PREPRINT_FIELDS = ("title", "abstractNote", "genre", "repository", "archiveID", "place", "date", "series",
                   "seriesNumber", "DOI", "citationKey", "url", "accessDate", "archive", "archiveLocation",
                   "shortTitle", "language", "libraryCatalog", "callNumber", "rights", "extra")
ATTACHMENT_TEMPLATE: dict[str, Any] = {"itemType": "attachment", "linkMode": "imported_file", "title": "", "accessDate": "",
                       "url": "", "note": "", "tags": [], "collections": [], "relations": {}, "contentType": "",
                       "charset": "", "filename": "", "md5": None, "mtime": None}


def new_key() -> str:
    return "".join(secrets.choice(KEY_ALPHABET) for _ in range(8))


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes
    raw_query: str = ""

    def json(self) -> Any:
        return json.loads(self.body)

    def text(self) -> str:
        """Everything the server received, as text: method, path, query (raw and decoded), headers, body."""
        body = self.body.decode("utf-8", "replace")
        return "\n".join([self.method, self.path, self.raw_query, unquote_plus(self.raw_query),
                          *(f"{k}: {v}" for k, v in self.headers.items()), body, unquote_plus(body)])


@dataclass
class _Failure:
    method: str | None
    pattern: re.Pattern[str]
    status: int
    times: int
    retry_after: str | None
    body: str


@dataclass
class LoopbackZotero:
    """A fake api.zotero.org on 127.0.0.1. Use as a context manager (or start()/stop())."""

    fixtures: Path
    pdfs: Path | None = None
    library_id: str = "475425"
    library_type: str = "users"
    api_key: str | None = "loopback-key"
    local: bool = False
    data_dir: Path | None = None  # local mode: where 'storage/<key>/<file>' lives (the Zotero data folder)
    requests: list[RecordedRequest] = field(default_factory=list, init=False)
    version: int = field(default=0, init=False)
    items: dict[str, dict[str, Any]] = field(default_factory=dict, init=False)
    collections: dict[str, dict[str, Any]] = field(default_factory=dict, init=False)
    files: dict[str, bytes] = field(default_factory=dict, init=False)
    _uploads: dict[str, dict[str, Any]] = field(default_factory=dict, init=False, repr=False)
    _tokens: set[str] = field(default_factory=set, init=False, repr=False)
    _failures: list[_Failure] = field(default_factory=list, init=False, repr=False)
    _lock: threading.RLock = field(default_factory=threading.RLock, init=False, repr=False)
    _server: ThreadingHTTPServer | None = field(default=None, init=False, repr=False)
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.fixtures = Path(self.fixtures)
        for item in self._fixture("items_doc.json"):
            self.items[item["key"]] = item
            self.version = max(self.version, int(item["version"]))
        for coll in self._fixture("collections_doc.json"):
            self.collections[coll["key"]] = coll
            self.version = max(self.version, int(coll["version"]))

    def _fixture(self, name: str) -> Any:
        return json.loads((self.fixtures / name).read_text(encoding="utf-8"))

    # -- lifecycle ----------------------------------------------------------------------------------
    def start(self) -> LoopbackZotero:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        server.daemon_threads = True
        server.owner = self  # type: ignore[attr-defined]
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="loopback-zotero", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = self._thread = None

    def __enter__(self) -> LoopbackZotero:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def base(self) -> str:
        assert self._server is not None, "LoopbackZotero is not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def url(self) -> str:
        """The endpoint to give pyzotero (``ZoteroSettings.endpoint``)."""
        return f"{self.base}/api" if self.local else self.base

    # -- scripting ----------------------------------------------------------------------------------
    def fail(self, status: int, path_regex: str = ".*", *, method: str | None = None, times: int = 1,
             retry_after: str | None = None, body: str | None = None) -> LoopbackZotero:
        """Answer ``status`` to the next ``times`` requests whose path matches (``times=-1``: always)."""
        text = body or {403: "Write access denied", 412: "Library has been modified since specified version",
                        429: "Too many requests"}.get(status, f"loopback-zotero: scripted {status}")
        with self._lock:
            self._failures.append(_Failure(method, re.compile(path_regex), status, times, retry_after, text))
        return self

    def add_attachment(self, parent_key: str | None, pdf: Path, *, link_mode: str = "imported_file",
                       title: str = "Full Text PDF") -> str:
        """A PDF attachment (stored file, or a linked file at ``pdf``), shaped like attachments_doc.json."""
        content = Path(pdf).read_bytes()
        with self._lock:
            key = new_key()
            data = {**copy.deepcopy(ATTACHMENT_TEMPLATE), "key": key, "title": title, "linkMode": link_mode,
                    "contentType": "application/pdf", "dateAdded": _now(), "dateModified": _now()}
            if parent_key:
                data["parentItem"] = parent_key
            if link_mode == "linked_file":
                data["path"] = str(pdf)
                for name in ("md5", "mtime", "filename"):
                    data.pop(name, None)
            else:
                data["filename"] = Path(pdf).name
            self._put_item(data)
            if link_mode != "linked_file":
                self._store_file(key, content, Path(pdf).name)
            return key

    def replace_file(self, key: str, content: bytes) -> None:
        """Change a stored attachment's file (as another Zotero client would): new md5, new version."""
        with self._lock:
            self._store_file(key, content, self.items[key]["data"].get("filename") or f"{key}.pdf")
            self._touch(key)

    def touch(self, key: str) -> None:
        """Bump an item's version without changing its file (a metadata edit)."""
        with self._lock:
            self._touch(key)

    def in_collection(self, collection_key: str) -> list[dict[str, Any]]:
        return [i for i in self.items.values() if collection_key in i["data"].get("collections", [])]

    def collection_named(self, name: str) -> dict[str, Any] | None:
        return next((c for c in self.collections.values() if c["data"]["name"] == name), None)

    def children_of(self, key: str) -> list[dict[str, Any]]:
        return [i for i in self.items.values() if i["data"].get("parentItem") == key]

    def writes(self) -> list[RecordedRequest]:
        return [r for r in self.requests if r.method in ("POST", "PATCH", "PUT", "DELETE")]

    # -- the library --------------------------------------------------------------------------------
    def _links(self, kind: str, key: str) -> dict[str, Any]:
        return {"self": {"href": f"{self.url}/{self.library_type}/{self.library_id}/{kind}/{key}",
                         "type": "application/json"}}

    def _library(self) -> dict[str, Any]:
        return {"type": self.library_type.rstrip("s"), "id": int(self.library_id), "name": "loopback",
                "links": {}}

    def _put_item(self, data: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        data["version"] = self.version
        key = data["key"]
        item = {"key": key, "version": self.version, "library": self._library(), "links": self._links("items", key),
                "meta": {}, "data": data}
        if data["itemType"] != "attachment":
            item["meta"]["numChildren"] = len(self.children_of(key))
        self.items[key] = item
        parent = data.get("parentItem")
        if parent in self.items:
            self.items[parent]["meta"]["numChildren"] = len(self.children_of(parent))
        return item

    def _touch(self, key: str) -> None:
        self.version += 1
        self.items[key]["version"] = self.items[key]["data"]["version"] = self.version

    def _store_file(self, key: str, content: bytes, filename: str) -> None:
        self.files[key] = content
        data = self.items[key]["data"]
        data["md5"] = hashlib.md5(content).hexdigest()  # noqa: S324 - the API's own checksum
        data["mtime"] = int(time.time() * 1000)
        data["filename"] = filename
        if self.data_dir is not None:
            target = Path(self.data_dir) / "storage" / key / filename
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _words(text: str) -> list[str]:
    return [w for w in re.split(r"\W+", text.casefold()) if w]


def _matches_q(data: dict[str, Any], q: str, qmode: str) -> bool:
    if qmode == "everything":
        hay = " ".join(str(v) for v in data.values() if isinstance(v, str | int))
        hay += " " + " ".join(" ".join(str(v) for v in c.values()) for c in data.get("creators", []))
    else:  # titleCreatorYear
        creators = " ".join(" ".join(str(v) for v in c.values()) for c in data.get("creators", []))
        hay = f"{data.get('title', '')} {creators} {data.get('date', '')}"
    hay_words = set(_words(hay))
    return all(w in hay_words for w in _words(q))


def _matches_type(data: dict[str, Any], spec: str) -> bool:
    kind = data.get("itemType")
    for alt in spec.split("||"):
        alt = alt.strip()
        if alt.startswith("-"):
            if kind != alt[1:].strip():
                return True
        elif kind == alt:
            return True
    return False


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        self._route("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._route("POST")

    def do_PATCH(self) -> None:  # noqa: N802
        self._route("PATCH")

    def do_DELETE(self) -> None:  # noqa: N802
        self._route("DELETE")

    def do_PUT(self) -> None:  # noqa: N802
        self._route("PUT")

    def do_HEAD(self) -> None:  # noqa: N802
        self._route("HEAD")

    @property
    def owner(self) -> LoopbackZotero:
        return self.server.owner  # type: ignore[attr-defined]

    # -- plumbing -----------------------------------------------------------------------------------
    def _route(self, method: str) -> None:
        owner = self.owner
        parts = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        body = read_body(self)
        self._method = method
        with owner._lock:
            owner.requests.append(RecordedRequest(method, parts.path, query, dict(self.headers.items()), body,
                                                  parts.query))
            failure = next((f for f in owner._failures if f.times != 0 and (f.method in (None, method))
                            and f.pattern.search(parts.path)), None)
            if failure is not None:
                failure.times -= 1 if failure.times > 0 else 0
        if failure is not None:
            headers = {"Retry-After": failure.retry_after} if failure.retry_after is not None else {}
            self._send(failure.status, failure.body.encode(), "text/plain", headers)
            return
        path = parts.path
        if path.startswith("/_storage/") and method == "GET":
            return self._storage(path.rsplit("/", 1)[-1])
        if path.startswith("/_upload/") and method == "POST":
            return self._s3(path.rsplit("/", 1)[-1], body)
        if owner.local:
            if not path.startswith("/api/"):
                return self._send(404, b"Not found", "text/plain")
            path = path[len("/api"):]
        if path in ("/itemFields", "/itemTypes"):
            return self._json(200, owner._fixture("item_fields.json" if path == "/itemFields" else "item_types.json"))
        if path == "/items/new":
            return self._template(query)
        if path == "/":
            return self._send(200, b"Nothing to see here.", "text/plain")
        prefix = f"/{owner.library_type}/{owner.library_id}"
        if not path.startswith(prefix + "/") and path != prefix:
            return self._send(404, b"Not found", "text/plain")
        if owner.api_key and not owner.local and self.headers.get("Authorization") != f"Bearer {owner.api_key}":
            return self._send(403, b"Invalid key", "text/plain")
        rest = path[len(prefix):].strip("/").split("/")
        with owner._lock:
            self._library_route(method, rest, query, body)

    def _library_route(self, method: str, rest: list[str], query: dict[str, str], body: bytes) -> None:
        owner = self.owner
        head = rest[0]
        if method == "GET" and head == "items":
            if len(rest) == 1:
                return self._list(list(owner.items.values()), query)
            if rest[1] == "top" and len(rest) == 2:
                return self._list([i for i in owner.items.values() if not i["data"].get("parentItem")], query)
            key = rest[1]
            if key not in owner.items:
                return self._send(404, b"Item not found", "text/plain")
            if len(rest) == 2:
                return self._json(200, owner.items[key])
            if rest[2] == "children":
                return self._list(owner.children_of(key), query)
            if rest[2] == "file":
                return self._file(key)
        if method == "GET" and head == "collections":
            colls = list(owner.collections.values())
            if len(rest) == 1:
                return self._list(colls, query)
            if rest[1] == "top":
                return self._list([c for c in colls if not c["data"].get("parentCollection")], query)
            key = rest[1]
            if key not in owner.collections:
                return self._send(404, b"Collection not found", "text/plain")
            if len(rest) == 2:
                return self._json(200, owner.collections[key])
            if rest[2] == "collections":
                return self._list([c for c in colls if c["data"].get("parentCollection") == key], query)
            if rest[2] == "items":
                members = owner.in_collection(key)
                keys = {i["key"] for i in members}
                # as the API does: child items of the collection's items are listed too (not with /top)
                children = [i for i in owner.items.values() if i["data"].get("parentItem") in keys]
                return self._list(members if rest[3:] == ["top"] else members + children, query)
        if method == "DELETE" and head == "collections" and len(rest) == 2:  # items stay in the library
            if owner.collections.pop(rest[1], None) is None:
                return self._send(404, b"Collection not found", "text/plain")
            for item in owner.items.values():
                item["data"]["collections"] = [k for k in item["data"].get("collections", []) if k != rest[1]]
            return self._send(204, b"", "text/plain")
        if method == "POST" and rest == ["items"]:
            return self._write_items(body)
        if method == "POST" and rest == ["collections"]:
            return self._write_collections(body)
        if method == "PATCH" and head == "items" and len(rest) == 2:
            return self._patch_item(rest[1], body)
        if method == "POST" and head == "items" and len(rest) == 3 and rest[2] == "file":
            return self._upload_step(rest[1], body)
        return self._send(404, b"Not found", "text/plain")

    def _send(self, status: int, data: bytes, content_type: str, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Last-Modified-Version", str(self.owner.version))
        self.send_header("Zotero-API-Version", "3")
        if self.owner.local:
            self.send_header("Zotero-Server-ID", "loopback-server")
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if data and getattr(self, "_method", "GET") != "HEAD":
            self.wfile.write(data)

    def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json", headers)

    # -- reads --------------------------------------------------------------------------------------
    def _list(self, objects: list[dict[str, Any]], query: dict[str, str]) -> None:
        if query.get("q"):
            objects = [o for o in objects if _matches_q(o["data"], query["q"], query.get("qmode", "titleCreatorYear"))]
        if query.get("itemType"):
            objects = [o for o in objects if _matches_type(o["data"], query["itemType"])]
        if query.get("since"):
            objects = [o for o in objects if o["version"] > int(query["since"])]
        if query.get("format") == "versions":
            return self._json(200, {o["key"]: o["version"] for o in objects})
        total = len(objects)
        start = int(query.get("start") or 0)
        limit = min(int(query.get("limit") or 25), 100)
        page = objects[start:start + limit]
        headers = {"Total-Results": str(total)}
        if start + limit < total:
            nxt = {**query, "start": str(start + limit), "limit": str(limit)}
            headers["Link"] = f'<{self.owner.base}{urlsplit(self.path).path}?{urlencode(nxt)}>; rel="next"'
        self._json(200, page, headers)

    def _template(self, query: dict[str, str]) -> None:
        owner = self.owner
        kind = query.get("itemType", "")
        if kind == "attachment":
            return self._json(200, {**copy.deepcopy(ATTACHMENT_TEMPLATE),
                                    "linkMode": query.get("linkMode") or "imported_file"})
        recorded = owner._fixture("item_template.json")
        if kind == recorded["itemType"]:
            return self._json(200, recorded)
        if kind == "preprint":
            fields = PREPRINT_FIELDS
        else:
            sample = next((i["data"] for i in owner._fixture("items_doc.json") if i["data"]["itemType"] == kind), None)
            if sample is None:
                return self._send(400, f"Invalid item type '{kind}'".encode(), "text/plain")
            fields = tuple(k for k in sample if k not in ("key", "version", "itemType", "creators", "tags",
                                                          "collections", "relations", "dateAdded", "dateModified"))
        template: dict[str, Any] = {"itemType": kind}
        for name in fields:
            template[name] = ""
            if name == "title":
                template["creators"] = [{"creatorType": "author", "firstName": "", "lastName": ""}]
        template.update({"tags": [], "collections": [], "relations": {}})
        self._json(200, template)

    def _file(self, key: str) -> None:
        owner = self.owner
        if key not in owner.files:
            return self._send(404, b"File not found", "text/plain")
        if owner.local:
            data = owner.items[key]["data"]
            assert owner.data_dir is not None, "local mode needs data_dir"
            target = (Path(owner.data_dir) / "storage" / key / data["filename"]).resolve()
            return self._send(302, b"", "text/plain", {"Location": target.as_uri()})
        md5 = owner.items[key]["data"]["md5"]
        self._send(302, b"", "text/plain", {"Location": f"{owner.base}/_storage/{key}", "Zotero-File-MD5": md5,
                                            "Zotero-File-Compressed": "No"})

    def _storage(self, key: str) -> None:
        with self.owner._lock:
            content = self.owner.files.get(key)
        if content is None:
            return self._send(404, b"NoSuchKey", "application/xml")
        self._send(200, content, "application/pdf")

    # -- writes -------------------------------------------------------------------------------------
    def _token_ok(self) -> bool:
        token = self.headers.get("Zotero-Write-Token")
        if token is None:
            return True
        if token in self.owner._tokens:
            self._send(412, b"Write token already used", "text/plain")
            return False
        self.owner._tokens.add(token)
        return True

    def _version_ok(self, current: int) -> bool:
        wanted = self.headers.get("If-Unmodified-Since-Version")
        if wanted is not None and int(wanted) < current:
            self._send(412, b"Item has been modified since specified version", "text/plain")
            return False
        return True

    def _write_items(self, body: bytes) -> None:
        owner = self.owner
        if not self._token_ok() or not self._version_ok(0):
            return
        try:
            payload = json.loads(body)
        except ValueError:
            return self._send(400, b"Invalid JSON", "text/plain")
        if not isinstance(payload, list) or len(payload) > 50:
            return self._send(413 if isinstance(payload, list) else 400, b"Too many items or not a list",
                              "text/plain")
        known_fields = {f["field"] for f in owner._fixture("item_fields.json")} | {
            "itemType", "creators", "tags", "collections", "relations", "parentItem", "linkMode", "contentType",
            "charset", "filename", "md5", "mtime", "path", "note", "key", "version", "dateAdded", "dateModified",
            "deleted", "inPublications", "archiveID", "repository", "genre", "citationKey"}
        types = {t["itemType"] for t in owner._fixture("item_types.json")} | {"attachment", "note", "preprint"}
        result: dict[str, Any] = {"success": {}, "successful": {}, "unchanged": {}, "failed": {}}
        for n, data in enumerate(payload):
            index = str(n)
            bad = sorted(set(data) - known_fields)
            if data.get("itemType") not in types:
                result["failed"][index] = {"key": data.get("key", ""), "code": 400,
                                           "message": f"Invalid item type '{data.get('itemType')}'"}
                continue
            if bad:
                result["failed"][index] = {"key": data.get("key", ""), "code": 400,
                                           "message": f"Invalid property '{bad[0]}'"}
                continue
            missing = [c for c in data.get("collections", []) if c not in owner.collections]
            if missing:
                result["failed"][index] = {"key": data.get("key", ""), "code": 409,
                                           "message": f"Collection {missing[0]} doesn't exist"}
                continue
            data = {**data, "key": data.get("key") or new_key(), "dateAdded": _now(), "dateModified": _now()}
            data.pop("version", None)
            if data["itemType"] == "attachment" and data.get("linkMode") == "imported_file":
                data["md5"] = data["mtime"] = None  # the file itself comes with the upload flow
            item = owner._put_item(data)
            result["success"][index] = item["key"]
            result["successful"][index] = item
        self._json(200, result)

    def _write_collections(self, body: bytes) -> None:
        owner = self.owner
        if not self._token_ok():
            return
        payload = json.loads(body)
        result: dict[str, Any] = {"success": {}, "successful": {}, "unchanged": {}, "failed": {}}
        for n, data in enumerate(payload):
            if not data.get("name"):
                result["failed"][str(n)] = {"key": "", "code": 400, "message": "Collection name cannot be empty"}
                continue
            owner.version += 1
            key = new_key()
            coll = {"key": key, "version": owner.version, "library": owner._library(),
                    "links": owner._links("collections", key), "meta": {"numCollections": 0, "numItems": 0},
                    "data": {"key": key, "version": owner.version, "name": data["name"],
                             "parentCollection": data.get("parentCollection") or False, "relations": {}}}
            owner.collections[key] = coll
            result["success"][str(n)] = key
            result["successful"][str(n)] = coll
        self._json(200, result)

    def _patch_item(self, key: str, body: bytes) -> None:
        owner = self.owner
        if key not in owner.items:
            return self._send(404, b"Item not found", "text/plain")
        if not self._version_ok(owner.items[key]["version"]):
            return
        changes = json.loads(body)
        owner.items[key]["data"].update({k: v for k, v in changes.items() if k not in ("key", "version")})
        owner._touch(key)
        self._send(204, b"", "text/plain")

    def _upload_step(self, key: str, body: bytes) -> None:
        owner = self.owner
        item = owner.items.get(key)
        if item is None or item["data"].get("itemType") != "attachment":
            return self._send(404, b"Not an attachment item", "text/plain")
        form = {k: v[-1] for k, v in parse_qs(body.decode(), keep_blank_values=True).items()}
        if "upload" in form:  # step 3: register the upload
            pending = owner._uploads.pop(form["upload"], None)
            if pending is None or pending.get("content") is None:
                return self._send(400, b"Upload key not found or file not uploaded", "text/plain")
            if hashlib.md5(pending["content"]).hexdigest() != pending["md5"]:  # noqa: S324
                return self._send(412, b"File does not match the given md5", "text/plain")
            owner._store_file(key, pending["content"], pending["filename"])
            owner._touch(key)
            return self._send(204, b"", "text/plain")
        # step 1: authorisation
        current = item["data"].get("md5")
        if self.headers.get("If-None-Match") == "*" and current:
            return self._send(412, b"If-None-Match: * set but file exists", "text/plain")
        if self.headers.get("If-Match") and self.headers.get("If-Match") != current:
            return self._send(412, b"ETag does not match current version of file", "text/plain")
        for name in ("md5", "filename", "filesize", "mtime"):
            if not form.get(name):
                return self._send(400, f"'{name}' not provided".encode(), "text/plain")
        if current == form["md5"]:
            return self._json(200, {"exists": 1})
        upload_key = secrets.token_hex(16)
        owner._uploads[upload_key] = {"key": key, "md5": form["md5"], "filename": form["filename"], "content": None}
        self._json(200, {"url": f"{owner.base}/_upload/{upload_key}", "uploadKey": upload_key,
                         "params": {"key": f"{upload_key}/{form['filename']}", "acl": "bucket-owner-full-control",
                                    "success_action_status": "201", "Content-MD5": form["md5"],
                                    "policy": "loopback", "x-amz-signature": "loopback"}})

    def _s3(self, upload_key: str, body: bytes) -> None:
        owner = self.owner
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            f"Content-Type: {self.headers.get('Content-Type')}\r\n\r\n".encode() + body)
        fields = {part.get_param("name", header="content-disposition"): part.get_payload(decode=True)
                  for part in message.iter_parts()}
        with owner._lock:
            pending = owner._uploads.get(upload_key)
            if pending is None or "file" not in fields or fields.get("key") is None:
                return self._send(400, b"<Error><Code>InvalidArgument</Code></Error>", "application/xml")
            pending["content"] = fields["file"]
        self._send(201, b"<PostResponse></PostResponse>", "application/xml")
