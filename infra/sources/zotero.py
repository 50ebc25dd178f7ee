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
* :func:`~infra.sources.zotero_records.read_zotero_csv` reads Zotero's CSV export: each row's first readable PDF
  attachment becomes a Candidate; rows without one are skipped with the reason.

The pull is :class:`~infra.sources.zotero_pull.ZoteroPull` (part of :class:`ZoteroLibrary`); the results' models, the
normalisations, the state file and the CSV reader are :mod:`infra.sources.zotero_records`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from infra.errors import ConfigError
from infra.net.egress import Egress
from infra.settings import ZoteroSettings
from infra.sources.zotero_pull import ZoteroPull
from infra.sources.zotero_records import (SOURCE_NAMES, PushedItem, PushResult, ZoteroError, describe_error,
                                          extra_doi, is_pdf, normalize_doi, normalize_title, pdf_problem, split_name,
                                          year_of)
from messages.search import Candidate

WEB_ENDPOINT = "https://api.zotero.org"
LOCAL_ENDPOINT = "http://127.0.0.1:23119/api"
MAX_WRITE = 50  # the Web API takes at most 50 objects per write request

T = TypeVar("T")


class ZoteroLibrary(ZoteroPull):
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
                if doi in (normalize_doi(data.get("DOI")), normalize_doi(extra_doi(data.get("extra")))):
                    return item
        title = normalize_title(candidate.title)
        if title:
            query = " ".join((candidate.title or "").split())[:200]
            for item in self.zot.items(q=query, qmode="titleCreatorYear", itemType="-attachment", limit=25):
                data = item["data"]
                year = year_of(data.get("date"))
                if normalize_title(data.get("title")) == title and (
                        year is None or candidate.year is None or year == candidate.year):
                    item_doi = normalize_doi(data.get("DOI")) or normalize_doi(extra_doi(data.get("extra")))
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
                    if c["data"].get("itemType") == "attachment" and is_pdf(c["data"])]
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


