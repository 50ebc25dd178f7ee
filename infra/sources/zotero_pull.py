"""Reading a Zotero library's PDFs (mixed into :class:`~infra.sources.zotero.ZoteroLibrary`): the PDF attachments of a
collection or of the whole library, fetched into a folder (or used where they lie), incremental through a state
file."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import unquote, urljoin, urlsplit
from urllib.request import url2pathname

from infra.net.egress import Egress
from infra.sources.zotero_records import (AttachmentState, PulledItem, PullResult, ZoteroError, atomic_write,
                                          creator_names, describe_error, extra_doi, is_pdf, load_state, normalize_doi,
                                          pdf_problem, safe_name, save_state, server_text, sha256_file, year_of)
from messages.search import Candidate, Skipped

T = TypeVar("T")


class ZoteroPull:
    """:meth:`pull` and :meth:`commit` of a :class:`~infra.sources.zotero.ZoteroLibrary`."""

    zot: Any
    library: str
    egress: Egress
    client: Any
    retries: int

    if TYPE_CHECKING:  # the rest of ZoteroLibrary provides these; declared for the type checker only, so that
        # nothing here shadows them at run time
        def _read(self, what: str, call: Callable[[], T]) -> T: ...

        def collections(self) -> list[dict[str, Any]]: ...

        def find_collection(self, name_or_key: str) -> dict[str, Any] | None: ...

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
            if not is_pdf(data) or data.get("linkMode") == "linked_url":
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
                              f"{server_text(Exception('Response: ' + response.text[:200]))}",
                              retryable=response.status_code in (429, 500, 502, 503, 504))
        content = response.content
        target = folder / key / safe_name(data.get("filename") or data.get("title") or "", f"{key}.pdf")
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(target, content)
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
        doi = normalize_doi(meta.get("DOI")) or normalize_doi(extra_doi(meta.get("extra")))
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
