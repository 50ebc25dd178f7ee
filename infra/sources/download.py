"""PDF acquisition: every open-access location in turn, politely, with every failure kept.

For each candidate the :class:`Downloader` tries its ``pdf_urls`` in order, then the arXiv PDF of an
arXiv paper, until one gives a real PDF. Each location gets retries with backoff on 429/5xx/network
errors (Retry-After honoured, capped), one total time budget (``net.download_timeout_s``, so a
server that hangs or trickles is abandoned), a size cap (``net.max_pdf_bytes``, counted while
streaming) and a content check (``%PDF-`` at the start and ``%%EOF`` near the end: publishers often
answer HTML, and a cut-off transfer lacks the trailer). A good PDF is written atomically (temp file
+ rename) as ``<sha256>.pdf`` under ``papers_dir`` and remembered in ``index.json`` under every key
of the paper, so a paper found again is not downloaded again. A paper with no usable location
comes back ``abstract_only`` with ``'<url>: <reason>'`` per failed attempt.

Concurrency is bounded in all (``net.downloads``) and per host (``net.per_host``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from tenacity import AsyncRetrying

from infra.net import Egress, OfflineError
from infra.settings import NetSettings
from infra.sources.keys import candidate_keys, normalize_arxiv_id
from infra.sources.retry import RetryableStatus, is_retryable_status, retry_after, retry_kwargs
from messages.search import Candidate

ARXIV_PDF_BASE = "https://arxiv.org/pdf/"
MAX_REDIRECTS = 5
_EOF_WINDOW = 2048  # %%EOF must appear within the last bytes (trailing whitespace/junk is common)


_ARXIV_PDF = re.compile(r"^https?://(?:export\.|www\.)?arxiv\.org/pdf/", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class Acquired:
    """A candidate after acquisition: ``candidate.path`` set, or ``abstract_only`` with its failures."""

    candidate: Candidate
    sha256: str | None = None
    url: str | None = None  # the location that gave the PDF
    reused: bool = False  # already in papers_dir from an earlier download

    @property
    def ok(self) -> bool:
        return self.candidate.path is not None


@dataclass(frozen=True, slots=True)
class _Limits:
    """Concurrency bounds of one ``fetch`` (asyncio primitives belong to the loop that runs it)."""

    everyone: asyncio.Semaphore
    hosts: dict[str, asyncio.Semaphore]
    index: asyncio.Lock


class _NotAPDF(Exception):
    """A location answered, but not with a usable PDF (not retried: try the next location)."""


class Downloader:
    def __init__(self, net: NetSettings, egress: Egress, papers_dir: Path, *,
                 arxiv_pdf_base: str = ARXIV_PDF_BASE) -> None:
        self.net, self.egress = net, egress
        self.papers_dir = Path(papers_dir)
        self.arxiv_pdf_base = arxiv_pdf_base if arxiv_pdf_base.endswith("/") else arxiv_pdf_base + "/"
        self.index_path = self.papers_dir / "index.json"

    # -- public -------------------------------------------------------------------------------------
    def locations(self, c: Candidate) -> list[str]:
        """Where to look for the PDF, in order: the candidate's pdf_urls, then the arXiv PDF."""
        urls = list(c.pdf_urls)
        if arxiv_id := normalize_arxiv_id(c.arxiv_id):
            # arXiv's own PDF links go to the configured arXiv PDF host (a mirror, or a test server)
            own = f"{self.arxiv_pdf_base}{arxiv_id}"
            urls = [own if _ARXIV_PDF.match(u) else u for u in urls] + [own]
        return list(dict.fromkeys(urls))

    def known(self, c: Candidate) -> Path | None:
        """The PDF already downloaded for this paper (under any of its keys), if any."""
        entry = self._lookup(self._read_index(), c)
        return self.papers_dir / entry["file"] if entry else None

    async def fetch(self, candidates: Sequence[Candidate]) -> list[Acquired]:
        """Acquire every candidate (in parallel, politely); the result keeps the input order."""
        self.papers_dir.mkdir(parents=True, exist_ok=True)
        limits = _Limits(asyncio.Semaphore(self.net.downloads), {}, asyncio.Lock())  # bound to this event loop
        async with self.egress.async_client("download", timeout=self.net.timeout_s) as client:
            client.max_redirects = MAX_REDIRECTS
            return list(await asyncio.gather(*(self._one(client, limits, c) for c in candidates)))

    # -- one paper ----------------------------------------------------------------------------------
    async def _one(self, client: httpx.AsyncClient, limits: _Limits, c: Candidate) -> Acquired:
        entry = self._lookup(self._read_index(), c)
        if entry:
            return Acquired(c.model_copy(update={"path": str(self.papers_dir / entry["file"]),
                                                 "abstract_only": False}),
                            sha256=entry["sha256"], url=entry.get("url"), reused=True)
        failures = list(c.download_failures)
        for url in self.locations(c):
            try:
                sha, path = await self._location(client, limits, url)
            except OfflineError:
                raise
            except Exception as exc:  # every failure is kept with its reason; the next location is tried
                failures.append(f"{url}: {_reason(exc, self.net)}")
                continue
            async with limits.index:
                self._remember(c, sha, path.name, url)
            return Acquired(c.model_copy(update={"path": str(path), "abstract_only": False,
                                                 "download_failures": tuple(failures)}), sha256=sha, url=url)
        if not self.locations(c):
            failures.append("no open-access PDF location")
        return Acquired(c.model_copy(update={"abstract_only": True, "download_failures": tuple(failures)}))

    async def _location(self, client: httpx.AsyncClient, limits: _Limits, url: str) -> tuple[str, Path]:
        host = urlsplit(url).hostname or ""
        per_host = limits.hosts.setdefault(host, asyncio.Semaphore(self.net.per_host))
        async for attempt in AsyncRetrying(**retry_kwargs(self.net)):  # type: ignore[arg-type]
            with attempt:
                async with limits.everyone, per_host:
                    async with asyncio.timeout(self.net.download_timeout_s):
                        return await self._stream(client, url)
        raise AssertionError("unreachable: tenacity reraises")

    async def _stream(self, client: httpx.AsyncClient, url: str) -> tuple[str, Path]:
        async with client.stream("GET", url, headers={"Accept": "application/pdf"}) as response:
            if is_retryable_status(response.status_code):
                raise RetryableStatus(response.status_code, url, retry_after(response.headers))
            if response.status_code >= 400:
                raise _NotAPDF(f"HTTP {response.status_code}")
            declared = _int(response.headers.get("content-length"))
            if declared is not None and declared > self.net.max_pdf_bytes:
                raise _NotAPDF(f"too large ({declared} bytes > {self.net.max_pdf_bytes})")
            digest, size, head, tail = hashlib.sha256(), 0, b"", b""
            fd, tmp_name = tempfile.mkstemp(prefix=".part-", suffix=".pdf", dir=self.papers_dir)
            tmp = Path(tmp_name)
            try:
                with os.fdopen(fd, "wb") as out:
                    async for chunk in response.aiter_bytes():
                        size += len(chunk)
                        if size > self.net.max_pdf_bytes:
                            raise _NotAPDF(f"too large (more than {self.net.max_pdf_bytes} bytes)")
                        if len(head) < 1024:  # the header may follow a little junk, within the first 1 kB
                            head = (head + chunk)[:1024]
                            if len(head) == 1024 and b"%PDF-" not in head:
                                raise _NotAPDF(f"not a PDF ({_kind(response, head)})")
                        tail = (tail + chunk)[-_EOF_WINDOW:]
                        digest.update(chunk)
                        out.write(chunk)
                    out.flush()
                    os.fsync(out.fileno())
                if b"%PDF-" not in head:
                    raise _NotAPDF(f"not a PDF ({_kind(response, head)})")
                if b"%%EOF" not in tail:
                    raise _NotAPDF(f"truncated PDF (no %%EOF trailer after {size} bytes)")
                sha = digest.hexdigest()
                final = self.papers_dir / f"{sha}.pdf"
                os.replace(tmp, final)
                return sha, final
            finally:
                with contextlib.suppress(FileNotFoundError):
                    tmp.unlink()

    # -- index ------------------------------------------------------------------------------------
    def _read_index(self) -> dict[str, dict[str, str]]:
        try:
            data = json.loads(self.index_path.read_text())
        except FileNotFoundError:
            return {}
        except (ValueError, OSError):
            return {}  # unreadable index: downloads are redone (files are named by hash, nothing is lost)
        return data if isinstance(data, dict) else {}

    def _lookup(self, index: dict[str, dict[str, str]], c: Candidate) -> dict[str, str] | None:
        for key in sorted(candidate_keys(c)):
            entry = index.get(key)
            if entry and (self.papers_dir / entry.get("file", "")).is_file():
                return entry
        return None

    def _remember(self, c: Candidate, sha: str, file: str, url: str) -> None:
        index = self._read_index()
        for key in candidate_keys(c):
            index[key] = {"sha256": sha, "file": file, "url": url}
        fd, tmp = tempfile.mkstemp(prefix=".index-", suffix=".json", dir=self.papers_dir)
        with os.fdopen(fd, "w") as out:
            json.dump(index, out, indent=1, sort_keys=True)
        os.replace(tmp, self.index_path)


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _kind(response: httpx.Response, head: bytes) -> str:
    ctype = response.headers.get("content-type", "no content-type").split(";")[0]
    return f"{ctype}, starts {head[:16]!r}"


def _reason(exc: BaseException, net: NetSettings) -> str:
    if isinstance(exc, _NotAPDF):
        return str(exc)
    if isinstance(exc, TimeoutError):
        return f"timed out (no complete PDF within {net.download_timeout_s}s)"
    if isinstance(exc, RetryableStatus):
        return f"HTTP {exc.status} after {net.retries + 1} tries"
    if isinstance(exc, httpx.TooManyRedirects):
        return f"too many redirects (more than {MAX_REDIRECTS})"
    if isinstance(exc, httpx.TimeoutException):
        return f"timed out after {net.retries + 1} tries ({type(exc).__name__})"
    if isinstance(exc, httpx.TransportError):
        return f"network error after {net.retries + 1} tries ({type(exc).__name__}: {exc})"
    if isinstance(exc, httpx.InvalidURL | httpx.UnsupportedProtocol):
        return f"bad URL ({exc})"
    return f"{type(exc).__name__}: {exc}"
