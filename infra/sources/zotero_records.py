"""What Zotero's push and pull produce and read, apart from the API calls (infra/sources/zotero.py): the results'
models, the normalisation of DOIs, titles, years and names, a PDF's check, an error's one-sentence reason, the
incremental pull's state file, and Zotero's CSV export (:func:`read_zotero_csv`)."""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import tempfile
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from infra.errors import ConfigError, ForageError, SourceError
from infra.net.egress import OfflineError
from messages.search import Candidate, Skipped

PDF_MAGIC = b"%PDF-"
SOURCE_NAMES = {"openalex": "OpenAlex", "arxiv": "arXiv", "library": "local library", "zotero": "Zotero"}


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


def safe_name(name: str, fallback: str) -> str:
    name = Path(name or "").name
    name = re.sub(r"[^\w.\- ]+", "_", name).strip(" .")
    return name or fallback


def describe_error(exc: BaseException, *, writing: bool = False) -> tuple[str, bool]:
    """A sentence a person can act on, and whether trying again may help."""
    from pyzotero import errors as ze

    status = getattr(exc, "status_code", None)
    detail = server_text(exc)
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


def server_text(exc: BaseException) -> str:
    match = re.search(r"Response: (.*)", str(exc), re.S)
    text = " ".join(match.group(1).split())[:200] if match else ""
    return f" (Zotero: {text})" if text else ""


# ------------------------------------------------------------------------------------------ library


def is_pdf(data: dict[str, Any]) -> bool:
    content_type = (data.get("contentType") or "").lower()
    name = (data.get("filename") or data.get("path") or "").lower()
    return content_type == "application/pdf" or name.endswith(".pdf")


def extra_doi(extra: str | None) -> str | None:
    match = re.search(r"^\s*DOI:\s*(\S+)", extra or "", re.M | re.I)
    return match.group(1) if match else None


def atomic_write(path: Path, content: bytes) -> None:
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
    atomic_write(path, (json.dumps(payload, indent=1) + "\n").encode("utf-8"))


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
