"""Zotero both ways: file accepted papers in a collection (push), read a library's PDFs (pull), and
read a Zotero CSV export.

Everything goes through pyzotero with an httpx2 client from :class:`infra.net.Egress`, so every
request (redirect hops and the attachment upload to Zotero's storage included) is in the egress
ledger and nothing is sent offline. ``ZoteroSettings.endpoint`` replaces pyzotero's hard-coded base
URL (``Zotero.endpoint``), which is how a loopback server stands in for api.zotero.org in tests.

* :meth:`ZoteroLibrary.push` files papers in a collection named after the run: the collection is
  found or created, each paper becomes one item (journalArticle, or preprint for arXiv papers)
  from the API's own item template, a local PDF is uploaded as a child attachment (the Web API's
  authorise → upload → register flow), and a paper already in the library (same DOI, or same
  normalised title and year) is not created again. Failures (403 no write access, 412, 429 after
  retries, offline) are reported per paper, never raised.
* :meth:`ZoteroLibrary.pull` lists a collection's (or the library's) items with their PDF
  attachments and versions, fetches each PDF (Web API ``/file``; the Zotero 7 local API's
  ``file://`` redirect or a linked file is used where it lies) and returns Candidates. A small
  JSON state file (attachment key → version, md5, sha256, path) makes it incremental: unchanged
  attachments are neither fetched nor returned. The state is written by :meth:`commit` (``pull``
  does it unless told not to), so a caller can commit only what it ingested.
* :func:`read_zotero_csv` reads Zotero's CSV export: each row's first readable PDF attachment
  becomes a Candidate; rows without one are skipped with the reason.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import tempfile
import time
import unicodedata
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar
from urllib.parse import unquote, urljoin, urlsplit
from urllib.request import url2pathname

from pydantic import BaseModel, ConfigDict, Field

from infra.errors import ConfigError, ForageError, SourceError
from infra.net.egress import Egress, OfflineError
from infra.settings import ZoteroSettings
from messages.search import Candidate, Skipped

WEB_ENDPOINT = "https://api.zotero.org"
LOCAL_ENDPOINT = "http://127.0.0.1:23119/api"
PDF_MAGIC = b"%PDF-"
SOURCE_NAMES = {"openalex": "OpenAlex", "arxiv": "arXiv", "library": "local library", "zotero": "Zotero"}
MAX_WRITE = 50  # the Web API takes at most 50 objects per write request

T = TypeVar("T")


class ZoteroError(SourceError):
    """A Zotero request failed; the message says why and what to do."""


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# ---------------------------------------------------------------------------------------------- push

class PushedItem(_Model):
    """What happened to one paper: created, already in the library, or failed (with the reason)."""

    candidate_key: str
    title: str | None = None
    status: Literal["created", "existing", "failed"]
    item_key: str | None = Field(default=None, description="Zotero key of the (new or existing) item.")
    attachment: Literal["uploaded", "present", "none", "failed"] = "none"
    reason: str | None = Field(default=None, description="Why it failed (or why its PDF did not go up).")
    retryable: bool = False


class PushResult(_Model):
    collection_name: str
    collection_key: str | None = None
    collection_created: bool = False
    items: tuple[PushedItem, ...] = ()
    error: str | None = Field(default=None, description="A failure that stopped the whole push.")

    @property
    def created(self) -> list[PushedItem]:
        return [i for i in self.items if i.status == "created"]

    @property
    def existing(self) -> list[PushedItem]:
        return [i for i in self.items if i.status == "existing"]

    @property
    def failed(self) -> list[PushedItem]:
        return [i for i in self.items if i.status == "failed"]


# ---------------------------------------------------------------------------------------------- pull

class AttachmentState(_Model):
    """What the last pull saw of one attachment."""

    version: int
    sha256: str
    path: str
    md5: str | None = None
    parent: str | None = None


class PulledItem(_Model):
    attachment_key: str
    status: Literal["new", "changed", "unchanged"]
    candidate: Candidate
    state: AttachmentState


class PullResult(_Model):
    library: str = Field(description="'users/<id>' or 'groups/<id>' (local: as the local API names it).")
    collection: str | None = Field(default=None, description="Collection key, None for the whole library.")
    items: tuple[PulledItem, ...] = ()
    failed: tuple[Skipped, ...] = ()

    @property
    def candidates(self) -> list[Candidate]:
        """New and changed attachments: what needs ingesting."""
        return [i.candidate for i in self.items if i.status != "unchanged"]

    def with_status(self, status: str) -> list[PulledItem]:
        return [i for i in self.items if i.status == status]


class CsvResult(_Model):
    candidates: tuple[Candidate, ...] = ()
    skipped: tuple[Skipped, ...] = ()


# ------------------------------------------------------------------------------------------- helpers

def normalize_doi(value: str | None) -> str | None:
    """Bare lower-case DOI (``10.xxxx/...``) from a DOI, a doi.org URL or a ``DOI: ...`` line."""
    if not value:
        return None
    match = re.search(r"10\.\d{4,9}/\S+", value.strip())
    return match.group(0).rstrip(".,;").lower() if match else None


def normalize_title(value: str | None) -> str:
    """Casefolded letters and digits only (accents removed): for comparing titles."""
    text = unicodedata.normalize("NFKD", value or "")
    return "".join(ch for ch in text.casefold() if ch.isalnum())


def year_of(value: str | None) -> int | None:
    match = re.search(r"\b(1[5-9]\d\d|20\d\d)\b", value or "")
    return int(match.group(1)) if match else None


def creator_names(creators: Sequence[dict[str, Any]]) -> tuple[str, ...]:
    """'First Last' of the authors (all creators when none is marked author)."""
    authors = [c for c in creators if c.get("creatorType", "author") == "author"] or list(creators)
    names = []
    for c in authors:
        name = c.get("name") or " ".join(p for p in (c.get("firstName", ""), c.get("lastName", "")) if p)
        if name.strip():
            names.append(" ".join(name.split()))
    return tuple(names)


def split_name(name: str) -> dict[str, str]:
    """A Zotero two-field creator from 'First Last' or 'Last, First'."""
    name = " ".join(name.split())
    if "," in name:
        last, first = (p.strip() for p in name.split(",", 1))
    elif " " in name:
        first, last = name.rsplit(" ", 1)
    else:
        return {"creatorType": "author", "name": name}
    return {"creatorType": "author", "firstName": first, "lastName": last}


def sha256_file(path: Path) -> str:
    with path.open("rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def pdf_problem(path: Path) -> str | None:
    """Why ``path`` is not a readable PDF, or None when it is one."""
    try:
        if path.is_dir():
            return f"is a folder, not a file: {path}"
        with path.open("rb") as handle:
            head = handle.read(1024)
    except FileNotFoundError:
        return f"file not found: {path}"
    except OSError as exc:
        return f"cannot read {path}: {exc}"
    if not head:
        return f"empty file: {path}"
    if PDF_MAGIC not in head:
        shown = head[:20].decode("latin-1").replace("\n", " ").strip()
        return f"not a PDF: {path.name} starts with {shown!r}"
    return None


def _safe_name(name: str, fallback: str) -> str:
    name = Path(name or "").name
    name = re.sub(r"[^\w.\- ]+", "_", name).strip(" .")
    return name or fallback


def describe_error(exc: BaseException, *, writing: bool = False) -> tuple[str, bool]:
    """A sentence a person can act on, and whether trying again may help."""
    from pyzotero import errors as ze

    status = getattr(exc, "status_code", None)
    detail = _server_text(exc)
    if isinstance(exc, OfflineError):
        return "offline (net.offline): nothing was sent to Zotero", False
    if isinstance(exc, ze.UserNotAuthorisedError):
        if writing:
            return ("no write access (403): the Zotero API key may not write to this library; allow "
                    f"'write access' for the key at zotero.org/settings/keys{detail}"), False
        return f"not authorised (403): check zotero.api_key and zotero.library_id{detail}", False
    if isinstance(exc, ze.PreConditionFailedError):
        return f"precondition failed (412): the library changed meanwhile or the write was repeated{detail}", True
    if isinstance(exc, ze.TooManyRetriesError | ze.TooManyRequestsError):
        return f"rate-limited by Zotero (429) after retries; try again later{detail}", True
    if isinstance(exc, ze.ResourceNotFoundError):
        return f"not found (404){detail}", False
    if isinstance(exc, ze.RequestEntityTooLargeError):
        return f"the Zotero storage quota is full (413){detail}", False
    if isinstance(exc, ze.PyZoteroError):
        return f"Zotero answered an error: {' '.join(str(exc).split())[:300]}", status in (None, 500, 502, 503)
    if isinstance(exc, ForageError):
        return str(exc), exc.retryable
    import httpx2

    if isinstance(exc, httpx2.TimeoutException):
        return f"Zotero did not answer in time ({type(exc).__name__})", True
    if isinstance(exc, httpx2.TransportError):
        return f"cannot reach Zotero: {type(exc).__name__}: {exc}", True
    return f"unexpected {type(exc).__name__}: {exc}", False


def _server_text(exc: BaseException) -> str:
    match = re.search(r"Response: (.*)", str(exc), re.S)
    text = " ".join(match.group(1).split())[:200] if match else ""
    return f" (Zotero: {text})" if text else ""


# ------------------------------------------------------------------------------------------ library

class ZoteroLibrary:
    """One Zotero library (user or group; Web API or the Zotero 7 local API) through pyzotero."""

    def __init__(self, settings: ZoteroSettings, egress: Egress, *, retries: int | None = None) -> None:
        from pyzotero import zotero

        library_id = settings.library_id or ("0" if settings.local else None)
        if not library_id:
            raise ConfigError("no Zotero library id: set FORAGE_ZOTERO__LIBRARY_ID (your user id from "
                              "zotero.org/settings/keys, or a group id with FORAGE_ZOTERO__LIBRARY_TYPE=group)")
        if not settings.local and not settings.api_key:
            raise ConfigError("no Zotero API key: set FORAGE_ZOTERO__API_KEY (create one at "
                              "zotero.org/settings/keys), or read a running Zotero 7 with --local")
        self.settings = settings
        self.egress = egress
        self.retries = egress.settings.retries if retries is None else retries
        self.client = egress.httpx2_client("zotero")
        self.zot = zotero.Zotero(library_id, settings.library_type, settings.api_key, local=settings.local,
                                 client=self.client)
        endpoint = settings.endpoint.rstrip("/")
        if settings.local and endpoint == WEB_ENDPOINT:
            endpoint = LOCAL_ENDPOINT
        self.zot.endpoint = endpoint
        self.library = f"{self.zot.library_type}/{library_id}"

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> ZoteroLibrary:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading helpers ----------------------------------------------------------------------------
    def _read(self, what: str, call: Callable[[], T]) -> T:
        try:
            return call()
        except Exception as exc:  # noqa: BLE001 - every failure becomes one clear ZoteroError
            reason, retryable = describe_error(exc)
            raise ZoteroError(f"Zotero {what} at {self.zot.endpoint}: {reason}", retryable=retryable) from exc

    def collections(self) -> list[dict[str, Any]]:
        return self._read("listing collections", lambda: self.zot.everything(self.zot.collections()))

    def find_collection(self, name_or_key: str) -> dict[str, Any] | None:
        """A collection by key or by name (exact, then case-insensitive); None when absent."""
        found = self.collections()
        for match in (lambda c: c["key"] == name_or_key or c["data"]["name"] == name_or_key,
                      lambda c: c["data"]["name"].casefold() == name_or_key.casefold()):
            hits = [c for c in found if match(c)]
            if hits:
                return hits[0]
        return None

    # -- writing helpers ----------------------------------------------------------------------------
    def _write(self, call: Callable[[], T]) -> T:
        """Run a pyzotero write, again after a 429 (pyzotero waits out the server's Retry-After before the
        next request); its own exceptions go up."""
        for _ in range(self.retries + 1):
            before = self.zot.request
            try:
                out = call()
            except ValueError:  # a 429 body is not JSON: pyzotero fails decoding it
                if self.zot.request is not before and self.zot.request.status_code == 429:
                    continue
                raise
            if self.zot.request is not before and self.zot.request.status_code == 429:
                continue
            return out
        from pyzotero import errors as ze

        raise ze.TooManyRetriesError(f"still rate-limited after {self.retries + 1} attempts")

    # ============================================================================================ push
    def push(self, run_id: str, collection_name: str | None, candidates: Sequence[Candidate]) -> PushResult:
        """File ``candidates`` in the collection ``collection_name`` (default ``Forage <run_id>``).

        Never raises: a failure that stops everything (no write access, offline, unreachable) is in
        ``error`` and on every paper; per-paper failures are on the paper.
        """
        name = collection_name or f"Forage {run_id}"
        if not candidates:
            return PushResult(collection_name=name)
        if self.zot.local:
            reason = ("the Zotero local API is read-only: pushing needs the Web API (set FORAGE_ZOTERO__LIBRARY_ID "
                      "and FORAGE_ZOTERO__API_KEY, without zotero.local)")
            return PushResult(collection_name=name, error=reason, items=tuple(
                PushedItem(candidate_key=c.key, title=c.title, status="failed", reason=reason) for c in candidates))
        try:
            collection = self.find_collection(name)
            created_collection = collection is None
            if collection is None:
                response = self._write(lambda: self.zot.create_collections([{"name": name}]))
                if not response.get("success"):
                    failure = next(iter((response.get("failed") or {}).values()), {})
                    raise ZoteroError(f"Zotero refused to create collection {name!r}: "
                                      f"{failure.get('message', response)}")
                collection_key = next(iter(response["success"].values()))
            else:
                collection_key = collection["key"]
        except Exception as exc:  # noqa: BLE001
            reason, retryable = describe_error(exc, writing=True)
            items = tuple(PushedItem(candidate_key=c.key, title=c.title, status="failed", reason=reason,
                                     retryable=retryable) for c in candidates)
            return PushResult(collection_name=name, items=items, error=reason)

        outcomes: dict[int, PushedItem] = {}
        to_create: list[tuple[int, Candidate, dict[str, Any]]] = []
        seen: dict[str, int] = {}
        for i, candidate in enumerate(candidates):
            ident = normalize_doi(candidate.doi) or normalize_title(candidate.title) or candidate.key
            if ident in seen:  # the same paper twice in one push
                outcomes[i] = PushedItem(candidate_key=candidate.key, title=candidate.title, status="failed",
                                         reason=f"same paper as {candidates[seen[ident]].key} in this push")
                continue
            seen[ident] = i
            try:
                existing = self._find_existing(candidate)
                if existing is not None:
                    outcomes[i] = self._file_existing(candidate, existing, collection_key)
                else:
                    to_create.append((i, candidate, self._item_for(run_id, candidate, collection_key)))
            except Exception as exc:  # noqa: BLE001
                reason, retryable = describe_error(exc, writing=True)
                outcomes[i] = PushedItem(candidate_key=candidate.key, title=candidate.title, status="failed",
                                         reason=reason, retryable=retryable)

        for start in range(0, len(to_create), MAX_WRITE):
            batch = to_create[start:start + MAX_WRITE]
            try:
                response = self._write(lambda b=batch: self.zot.create_items([item for _, _, item in b]))
            except Exception as exc:  # noqa: BLE001
                reason, retryable = describe_error(exc, writing=True)
                for i, candidate, _ in batch:
                    outcomes[i] = PushedItem(candidate_key=candidate.key, title=candidate.title, status="failed",
                                             reason=reason, retryable=retryable)
                continue
            success = response.get("success") or {}
            failed = response.get("failed") or {}
            for n, (i, candidate, _) in enumerate(batch):
                key = success.get(str(n))
                if key is None:
                    failure = failed.get(str(n), {})
                    outcomes[i] = PushedItem(
                        candidate_key=candidate.key, title=candidate.title, status="failed",
                        reason=f"Zotero refused the item ({failure.get('code', '?')}): "
                               f"{failure.get('message', 'no reason given')}",
                        retryable=failure.get("code") in (409, 412, 429, 500, 503))
                    continue
                attachment, reason = self._attach(candidate, key)
                outcomes[i] = PushedItem(candidate_key=candidate.key, title=candidate.title, status="created",
                                         item_key=key, attachment=attachment, reason=reason)
        return PushResult(collection_name=name, collection_key=collection_key,
                          collection_created=created_collection,
                          items=tuple(outcomes[i] for i in range(len(candidates))))

    def _find_existing(self, candidate: Candidate) -> dict[str, Any] | None:
        """An item of the library that is this paper: same DOI, else same normalised title (and year)."""
        doi = normalize_doi(candidate.doi)
        if doi:
            for item in self.zot.items(q=doi, qmode="everything", itemType="-attachment", limit=25):
                data = item["data"]
                if doi in (normalize_doi(data.get("DOI")), normalize_doi(_extra_doi(data.get("extra")))):
                    return item
        title = normalize_title(candidate.title)
        if title:
            query = " ".join((candidate.title or "").split())[:200]
            for item in self.zot.items(q=query, qmode="titleCreatorYear", itemType="-attachment", limit=25):
                data = item["data"]
                year = year_of(data.get("date"))
                if normalize_title(data.get("title")) == title and (
                        year is None or candidate.year is None or year == candidate.year):
                    item_doi = normalize_doi(data.get("DOI")) or normalize_doi(_extra_doi(data.get("extra")))
                    if not (doi and item_doi and item_doi != doi):
                        return item
        return None

    def _file_existing(self, candidate: Candidate, item: dict[str, Any], collection_key: str) -> PushedItem:
        key = item["key"]
        if collection_key not in item["data"].get("collections", []):
            self._write(lambda: self.zot.addto_collection(collection_key, item))
        attachment, reason = "none", None
        if candidate.path:
            pdfs = [c for c in self.zot.children(key)
                    if c["data"].get("itemType") == "attachment" and _is_pdf(c["data"])]
            if any(c["data"].get("md5") or c["data"].get("linkMode") == "linked_file" for c in pdfs):
                attachment = "present"
            else:  # no PDF yet, or an attachment item whose upload never finished: (re)use it
                empty = next((c for c in pdfs if c["data"].get("linkMode") == "imported_file"), None)
                attachment, reason = self._attach(candidate, key, existing=empty)
        return PushedItem(candidate_key=candidate.key, title=candidate.title, status="existing", item_key=key,
                          attachment=attachment, reason=reason)

    def _item_for(self, run_id: str, candidate: Candidate, collection_key: str) -> dict[str, Any]:
        """A new item from the API's template for its type, with the paper's metadata."""
        preprint = bool(candidate.arxiv_id) and (candidate.source == "arxiv" or not candidate.venue)
        item_type = "preprint" if preprint else "journalArticle"
        template = self.zot.item_template(item_type)
        doi = normalize_doi(candidate.doi)
        url = candidate.landing_url or candidate.url or (f"https://doi.org/{doi}" if doi else None) or (
            f"https://arxiv.org/abs/{candidate.arxiv_id}" if candidate.arxiv_id else None)
        extra = [f"Forage run: {run_id}",
                 f"Source database: {SOURCE_NAMES.get(candidate.source, candidate.source)}"]
        if candidate.openalex_id:
            extra.append(f"OpenAlex: {candidate.openalex_id}")
        if candidate.arxiv_id:
            extra.append(f"arXiv: {candidate.arxiv_id}")
        if doi and "DOI" not in template:
            extra.append(f"DOI: {doi}")
        values: dict[str, Any] = {
            "title": candidate.title or Path(candidate.path or candidate.key).stem,
            "creators": [split_name(a) for a in candidate.authors if a.strip()],
            "date": str(candidate.year) if candidate.year else "",
            "DOI": doi or "",
            "url": url or "",
            "abstractNote": candidate.abstract or "",
            "publicationTitle": candidate.venue or "",
            "repository": "arXiv" if preprint else "",
            "archiveID": f"arXiv:{candidate.arxiv_id}" if preprint else "",
            "extra": "\n".join(extra),
            "collections": [collection_key],
        }
        item = dict(template)
        for field, value in values.items():
            if field in template and (value or field in ("creators", "collections")):
                item[field] = value
        return item

    def _attach(self, candidate: Candidate, item_key: str,
                existing: dict[str, Any] | None = None) -> tuple[str, str | None]:
        """Upload the candidate's local PDF under the item: ('uploaded'|'present'|'none'|'failed', reason).

        ``existing``: an attachment item of the paper without its file yet (an earlier upload that
        did not finish); the file goes into it instead of a new attachment item.
        """
        if not candidate.path:
            return "none", None
        path = Path(candidate.path).expanduser()
        problem = pdf_problem(path)
        if problem:
            return "failed", problem
        try:
            if existing is not None:
                payload = [{"key": existing["key"], "filename": str(path), "contentType": "application/pdf"}]
            else:
                template = self.zot.item_template("attachment", "imported_file")
                payload = [{**template, "title": "Full Text PDF", "filename": str(path),
                            "contentType": "application/pdf"}]
            outcome = self._write(lambda: _egress_upload(self.zot, payload, item_key, self.client).upload())
        except Exception as exc:  # noqa: BLE001
            reason, _ = describe_error(exc, writing=True)
            return "failed", f"PDF not uploaded: {reason}"
        if outcome["success"]:
            return "uploaded", None
        if outcome["unchanged"]:
            return "present", None
        error = (outcome["failure"] or [{}])[0].get("error")
        return "failed", f"PDF not uploaded: {error or 'Zotero refused the attachment'}"

    # ============================================================================================ pull
    def pull(self, collection: str | None = None, state_path: Path | None = None, *, folder: Path,
             commit: bool = True) -> PullResult:
        """The PDFs of a collection (key or name) or of the whole library, as Candidates.

        New and changed attachments are fetched into ``folder`` (or used where they lie: linked
        files, the local API's storage); unchanged ones (same version, or same md5, and the file
        from last time still there with the same sha256) are not fetched. Listing failures raise
        ZoteroError; a single attachment that cannot be had is in ``failed`` with the reason.
        """
        state = load_state(state_path, self.library)
        collection_key = None
        if collection:
            found = self.find_collection(collection)
            if found is None:
                names = sorted(c["data"]["name"] for c in self.collections())
                raise ZoteroError(f"no Zotero collection named {collection!r} in {self.library}; "
                                  f"collections: {', '.join(names[:20]) or 'none'}")
            collection_key = found["key"]
            items = self._read("listing items", lambda: self.zot.everything(
                self.zot.collection_items(collection_key)))
        else:
            items = self._read("listing items", lambda: self.zot.everything(self.zot.items()))

        by_key = {i["key"]: i for i in items}
        attachments = [i for i in items if i["data"].get("itemType") == "attachment"]
        with_children = {a["data"].get("parentItem") for a in attachments}
        for item in items:  # a collection listing may leave out child items: ask for them
            if (item["data"].get("itemType") not in ("attachment", "note", "annotation")
                    and item.get("meta", {}).get("numChildren", 0) > 0 and item["key"] not in with_children):
                attachments.extend(c for c in self._read("listing attachments", lambda k=item["key"]:
                                                         self.zot.children(k))
                                   if c["data"].get("itemType") == "attachment")
        folder = Path(folder)
        pulled: list[PulledItem] = []
        failed: list[Skipped] = []
        for attachment in attachments:
            data = attachment["data"]
            if not _is_pdf(data) or data.get("linkMode") == "linked_url":
                continue
            parent = by_key.get(data.get("parentItem") or "")
            if parent is None and data.get("parentItem"):
                parent = self._parent(data["parentItem"])
            try:
                pulled.append(self._pull_one(attachment, parent, state.get(attachment["key"]), folder))
            except Exception as exc:  # noqa: BLE001 - one attachment never stops the pull
                reason, retryable = describe_error(exc)
                title = (parent or attachment)["data"].get("title") or attachment["key"]
                failed.append(Skipped(item=f"{attachment['key']} ({title})", reason=reason, retryable=retryable))
        result = PullResult(library=self.library, collection=collection_key, items=tuple(pulled),
                            failed=tuple(failed))
        if commit and state_path is not None:
            self.commit(result, state_path)
        return result

    def _parent(self, key: str) -> dict[str, Any] | None:
        try:
            return self.zot.item(key)
        except Exception:  # noqa: BLE001 - metadata is a nicety; the attachment's own title will do
            return None

    def _pull_one(self, attachment: dict[str, Any], parent: dict[str, Any] | None,
                  known: AttachmentState | None, folder: Path) -> PulledItem:
        key, data = attachment["key"], attachment["data"]
        version = int(attachment.get("version") or data.get("version") or 0)
        md5 = data.get("md5")
        same = known is not None and (known.version == version or bool(md5 and known.md5 == md5))
        if known is not None and same and Path(known.path).is_file() and sha256_file(Path(known.path)) == known.sha256:
            state = known.model_copy(update={"version": version, "md5": md5 or known.md5})
            return PulledItem(attachment_key=key, status="unchanged", state=state,
                              candidate=self._candidate(key, data, parent, Path(known.path)))
        path = self._fetch(key, data, folder)
        problem = pdf_problem(path)
        if problem:
            raise ZoteroError(problem)
        digest = sha256_file(path)
        state = AttachmentState(version=version, sha256=digest, path=str(path), md5=md5,
                                parent=data.get("parentItem"))
        status = "new" if known is None else ("unchanged" if known.sha256 == digest else "changed")
        return PulledItem(attachment_key=key, status=status, state=state,
                          candidate=self._candidate(key, data, parent, path))

    def _fetch(self, key: str, data: dict[str, Any], folder: Path) -> Path:
        """The attachment's file on this machine: where it lies (linked file, local storage) or downloaded."""
        if data.get("linkMode") == "linked_file":
            raw = data.get("path") or ""
            if raw.startswith("attachments:"):
                raise ZoteroError(f"linked file {raw!r} is relative to Zotero's linked-attachment base "
                                  "folder, which Forage cannot see; export the collection as CSV instead")
            return Path(raw).expanduser()
        url = f"{self.zot.endpoint}/{self.library}/items/{key}/file"
        response = self._get(url, self.zot.default_headers())
        if response.is_redirect:
            location = urljoin(url, response.headers.get("location", ""))
            if location.startswith("file:"):  # the local API points at the file in Zotero's storage
                return Path(url2pathname(unquote(urlsplit(location).path)))
            # the storage URL is signed: it gets no API key
            response = self._get(location, {"User-Agent": self.zot.default_headers()["User-Agent"]})
        if response.status_code != 200:
            raise ZoteroError(f"Zotero answered {response.status_code} for the file of {key}"
                              f"{_server_text(Exception('Response: ' + response.text[:200]))}",
                              retryable=response.status_code in (429, 500, 502, 503, 504))
        content = response.content
        target = folder / key / _safe_name(data.get("filename") or data.get("title") or "", f"{key}.pdf")
        target.parent.mkdir(parents=True, exist_ok=True)
        _atomic_write(target, content)
        return target

    def _get(self, url: str, headers: dict[str, str]) -> Any:
        """GET without following redirects, again after a 429 / 503 (waiting Retry-After, capped)."""
        net = self.egress.settings
        for attempt in range(self.retries + 1):
            response = self.client.get(url, headers=headers, follow_redirects=False)
            if response.status_code not in (429, 503) or attempt == self.retries:
                return response
            try:
                wait = float(response.headers.get("retry-after") or response.headers.get("backoff") or "")
            except ValueError:
                wait = net.backoff_s * 2 ** attempt
            time.sleep(min(max(wait, 0.0), net.max_backoff_s))
        return response

    def _candidate(self, key: str, data: dict[str, Any], parent: dict[str, Any] | None, path: Path) -> Candidate:
        meta = parent["data"] if parent else {}
        doi = normalize_doi(meta.get("DOI")) or normalize_doi(_extra_doi(meta.get("extra")))
        return Candidate(
            key=f"zotero:{self.library}/items/{key}", source="zotero", path=str(path),
            title=meta.get("title") or data.get("title") or None, authors=creator_names(meta.get("creators", [])),
            year=year_of(meta.get("date")), doi=doi, url=meta.get("url") or None,
            abstract=meta.get("abstractNote") or None,
            venue=meta.get("publicationTitle") or meta.get("proceedingsTitle") or None, found_by="zotero")

    def commit(self, result: PullResult, state_path: Path, keys: Sequence[str] | None = None) -> None:
        """Remember the pulled attachments (all, or only ``keys``) in the state file."""
        state = load_state(state_path, self.library)
        chosen = set(keys) if keys is not None else None
        for item in result.items:
            if chosen is None or item.attachment_key in chosen:
                state[item.attachment_key] = item.state
        save_state(state_path, self.library, state)


def _egress_upload(zinstance: Any, payload: list[dict[str, Any]], parentid: str, client: Any) -> Any:
    """pyzotero's upload flow (``Zupload``), with step 2 (the file to Zotero's storage) sent through the
    egress client: pyzotero sends that step with a bare ``httpx2.post``, which would bypass the ledger
    and the offline check. Steps 0, 1 and 3 are pyzotero's own."""
    from pyzotero._upload import Zupload

    class Upload(Zupload):
        def _upload_file(self, authdata: dict[str, Any], attachment: str, reg_key: str,
                         md5: str | None = None) -> None:
            params = dict(authdata["params"])
            pairs = [("key", params.pop("key"))] + list(params.items())  # the key field first, as S3 wants
            pairs.append(("file", Path(attachment).read_bytes()))
            headers = {"User-Agent": zinstance.default_headers()["User-Agent"]}  # no API key to the storage
            if zinstance.local:
                headers["Zotero-Server-ID"] = zinstance._ensure_server_id()

            def send() -> Any:
                request = client.build_request("POST", authdata["url"], files=tuple(pairs), headers=headers,
                                               timeout=zinstance.upload_timeout)
                request.read()  # a sized body: the ledger records the bytes sent
                return client.send(request)

            self._post_with_retry(send)
            return self._register_upload(authdata, reg_key, md5=md5)

    return Upload(zinstance, payload, parentid)


def _is_pdf(data: dict[str, Any]) -> bool:
    content_type = (data.get("contentType") or "").lower()
    name = (data.get("filename") or data.get("path") or "").lower()
    return content_type == "application/pdf" or name.endswith(".pdf")


def _extra_doi(extra: str | None) -> str | None:
    match = re.search(r"^\s*DOI:\s*(\S+)", extra or "", re.M | re.I)
    return match.group(1) if match else None


def _atomic_write(path: Path, content: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(content)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


# -------------------------------------------------------------------------------------------- state

def load_state(path: Path | None, library: str) -> dict[str, AttachmentState]:
    """The attachments a pull remembered for ``library`` (empty when there is no state file yet)."""
    if path is None or not Path(path).exists():
        return {}
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
        if raw.get("library") != library:
            raise ConfigError(f"{path} is the Zotero state of {raw.get('library')!r}, not {library!r}: "
                              "use another --state file")
        return {k: AttachmentState.model_validate(v) for k, v in raw.get("attachments", {}).items()}
    except (ValueError, AttributeError) as exc:
        raise ConfigError(f"{path}: not a Forage Zotero state file ({exc}); move it away to start afresh") from exc


def save_state(path: Path, library: str, state: dict[str, AttachmentState]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"library": library, "attachments": {k: v.model_dump() for k, v in sorted(state.items())}}
    _atomic_write(path, (json.dumps(payload, indent=1) + "\n").encode("utf-8"))


# ---------------------------------------------------------------------------------------------- CSV

def read_zotero_csv(path: Path) -> CsvResult:
    """Candidates from a Zotero CSV export: each row's first readable PDF of 'File Attachments'.

    Relative attachment paths are taken from the CSV's folder. Rows without a readable PDF are
    skipped with the reason; a file that is not a Zotero export raises ConfigError.
    """
    path = Path(path).expanduser()
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ConfigError(f"{path}: file not found") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not a UTF-8 CSV file ({exc})") from None
    reader = csv.DictReader(text.splitlines())
    columns = set(reader.fieldnames or ())
    missing = {"Title", "File Attachments"} - columns
    if missing:
        raise ConfigError(f"{path}: not a Zotero CSV export (no {', '.join(sorted(missing))} column; "
                          "export with File → Export Collection… → CSV)")
    candidates: list[Candidate] = []
    skipped: list[Skipped] = []
    for n, row in enumerate(reader, start=2):
        key = (row.get("Key") or "").strip() or f"row{n}"
        title = " ".join((row.get("Title") or "").split()) or None
        label = f"{key} ({title or 'untitled'})"
        files = [f.strip() for f in (row.get("File Attachments") or "").split("; ") if f.strip()]
        if not files:
            skipped.append(Skipped(item=label, reason="no file attachment"))
            continue
        problems = []
        chosen = None
        for name in files:
            file = Path(name).expanduser()
            if not file.is_absolute():
                file = path.parent / file
            problem = pdf_problem(file)
            if problem is None:
                chosen = file
                break
            problems.append(problem)
        if chosen is None:
            skipped.append(Skipped(item=label, reason="no readable PDF: " + "; ".join(problems)))
            continue
        authors = tuple(" ".join(reversed([p.strip() for p in a.split(",", 1)])) if "," in a else a.strip()
                        for a in (row.get("Author") or "").split(";") if a.strip())
        candidates.append(Candidate(
            key=f"zotero-csv:{key}", source="zotero", path=str(chosen), title=title, authors=authors,
            year=year_of(row.get("Publication Year") or row.get("Date")), doi=normalize_doi(row.get("DOI")),
            url=(row.get("Url") or "").strip() or None, abstract=(row.get("Abstract Note") or "").strip() or None,
            venue=(row.get("Publication Title") or "").strip() or None, found_by="zotero-csv"))
    return CsvResult(candidates=tuple(candidates), skipped=tuple(skipped))
