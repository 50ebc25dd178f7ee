"""The one HTTP layer every outbound request of Forage goes through, and its egress ledger.

Every client Forage uses gets its connections from an :class:`Egress`: httpx clients (OpenAlex, PDF
downloads), a requests session (arXiv's client) and an httpx2 client (pyzotero). Each request,
redirect hops included, is appended to the run's ledger (``runs/<run_id>/egress.jsonl``) with
method, host, path, query string, bytes sent, status and bytes received, and the purpose the
caller gave. With ``net.offline`` the layer refuses before any socket is opened.

The ledger is how a researcher checks what left the machine: the only query strings in it are the
search strings they approved (tests prove the full query never appears).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from infra.errors import ForageError
from infra.private_files import private_dir
from infra.settings import NetSettings


class OfflineError(ForageError):
    """A request was attempted while Forage runs offline. Not retryable: nothing may leave."""

    retryable = False


@dataclass(frozen=True, slots=True)
class EgressRecord:
    ts: float
    purpose: str
    method: str
    scheme: str
    host: str
    port: int | None
    path: str
    query: str
    bytes_out: int
    status: int | None = None
    bytes_in: int | None = None
    error: str | None = None

    @property
    def url(self) -> str:
        port = f":{self.port}" if self.port else ""
        query = f"?{self.query}" if self.query else ""
        return f"{self.scheme}://{self.host}{port}{self.path}{query}"


class EgressLedger:
    """Append-only record of outbound requests: in memory and, given a path, as JSON lines.

    Several processes of one run (Searcher, Ingestors) append to the same file: each record is one
    ``write`` of one line in append mode, so lines never interleave.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = Path(path) if path is not None else None
        self._records: list[EgressRecord] = []
        self._lock = threading.Lock()
        if self.path is not None:
            private_dir(self.path.parent)  # runs/<run_id>/ holds the run's data: the user's alone (0700)

    def append(self, record: EgressRecord) -> None:
        line = json.dumps(asdict(record), ensure_ascii=False) + "\n"
        with self._lock:
            self._records.append(record)
            if self.path is not None:
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                try:
                    os.write(fd, line.encode())
                finally:
                    os.close(fd)

    def records(self) -> list[EgressRecord]:
        with self._lock:
            return list(self._records)

    def __iter__(self) -> Iterator[EgressRecord]:
        return iter(self.records())

    def __len__(self) -> int:
        return len(self._records)

    @staticmethod
    def read(path: Path) -> list[EgressRecord]:
        """Records of a ledger file (for ``forage`` commands and tests)."""
        if not Path(path).exists():
            return []
        return [EgressRecord(**json.loads(line)) for line in Path(path).read_text().splitlines() if line.strip()]


def _split(url: str) -> tuple[str, str, int | None, str, str]:
    parts = urlsplit(url)
    return parts.scheme, parts.hostname or "", parts.port, parts.path or "/", parts.query


class Egress:
    """Hands out HTTP clients whose every request is checked (offline) and recorded (ledger)."""

    def __init__(self, settings: NetSettings, ledger: EgressLedger | None = None) -> None:
        self.settings = settings
        self.ledger = ledger if ledger is not None else EgressLedger()

    # -- the check and the record, shared by every client kind --------------------------------------
    def before(self, method: str, url: str, purpose: str) -> None:
        if self.settings.offline:
            scheme, host, port, path, _query = _split(url)
            # the refusal is recorded too, so a researcher sees what offline mode stopped
            self.ledger.append(EgressRecord(ts=time.time(), purpose=purpose, method=method, scheme=scheme,
                                            host=host, port=port, path=path, query="", bytes_out=0,
                                            error="refused: offline"))
            raise OfflineError(f"offline: refused {method} {host}{path} ({purpose})")

    def record(self, method: str, url: str, purpose: str, bytes_out: int, status: int | None,
               bytes_in: int | None, error: str | None = None) -> None:
        scheme, host, port, path, query = _split(url)
        self.ledger.append(EgressRecord(ts=time.time(), purpose=purpose, method=method, scheme=scheme, host=host,
                                        port=port, path=path, query=query, bytes_out=bytes_out, status=status,
                                        bytes_in=bytes_in, error=error))

    # -- clients ----------------------------------------------------------------------------------
    def _headers(self) -> dict[str, str]:
        return {"User-Agent": self.settings.user_agent}

    def client(self, purpose: str, *, timeout: float | None = None, follow_redirects: bool = True) -> httpx.Client:
        """A synchronous httpx client (no proxies from the environment: requests go where they say)."""
        transport = _LedgerTransport(httpx.HTTPTransport(trust_env=False), self, purpose)
        return httpx.Client(transport=transport, timeout=timeout or self.settings.timeout_s, trust_env=False,
                            headers=self._headers(), follow_redirects=follow_redirects)

    def async_client(self, purpose: str, *, timeout: float | None = None,
                     follow_redirects: bool = True) -> httpx.AsyncClient:
        transport = _AsyncLedgerTransport(httpx.AsyncHTTPTransport(trust_env=False), self, purpose)
        return httpx.AsyncClient(transport=transport, timeout=timeout or self.settings.timeout_s, trust_env=False,
                                 headers=self._headers(), follow_redirects=follow_redirects)

    def requests_session(self, purpose: str, *, timeout: float | None = None) -> Any:
        """A ``requests.Session`` (for the arxiv client) with a default timeout; the library sets none."""
        import requests

        session = requests.Session()
        session.trust_env = False
        adapter = _make_requests_adapter(self, purpose, timeout or self.settings.timeout_s)
        session.mount("http://", adapter)
        session.mount("https://", adapter)
        session.headers.update(self._headers())
        return session

    def httpx2_client(self, purpose: str, *, timeout: float | None = None) -> Any:
        """An ``httpx2.Client`` (pyzotero's HTTP library) over the same check and ledger."""
        import httpx2

        class _T(httpx2.BaseTransport):
            def __init__(inner, egress: Egress) -> None:  # noqa: N805
                inner._next = httpx2.HTTPTransport(trust_env=False)
                inner._egress = egress

            def handle_request(inner, request: Any) -> Any:  # noqa: N805
                url, method = str(request.url), request.method
                inner._egress.before(method, url, purpose)
                try:
                    out = len(request.content)
                except httpx2.RequestNotRead:  # a streamed body (multipart upload, redirect hop)
                    out = _int(request.headers.get("content-length")) or 0
                try:
                    response = inner._next.handle_request(request)
                except BaseException as exc:
                    inner._egress.record(method, url, purpose, out, None, None, f"{type(exc).__name__}: {exc}")
                    raise
                inner._egress.record(method, url, purpose, out, response.status_code,
                                     _int(response.headers.get("content-length")))
                return response

            def close(inner) -> None:  # noqa: N805
                inner._next.close()

        return httpx2.Client(transport=_T(self), timeout=timeout or self.settings.timeout_s, trust_env=False,
                             headers=self._headers())


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _request_bytes(request: httpx.Request) -> int:
    try:
        return len(request.content)
    except httpx.RequestNotRead:
        return _int(request.headers.get("content-length")) or 0


class _LedgerTransport(httpx.BaseTransport):
    def __init__(self, inner: httpx.BaseTransport, egress: Egress, purpose: str) -> None:
        self._inner, self._egress, self._purpose = inner, egress, purpose

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url, method = str(request.url), request.method
        self._egress.before(method, url, self._purpose)
        try:
            response = self._inner.handle_request(request)
        except BaseException as exc:  # cancelled by a caller's timeout too: still recorded
            self._egress.record(method, url, self._purpose, _request_bytes(request), None, None,
                                f"{type(exc).__name__}: {exc}")
            raise
        self._egress.record(method, url, self._purpose, _request_bytes(request), response.status_code,
                            _int(response.headers.get("content-length")))
        return response

    def close(self) -> None:
        self._inner.close()


class _AsyncLedgerTransport(httpx.AsyncBaseTransport):
    def __init__(self, inner: httpx.AsyncBaseTransport, egress: Egress, purpose: str) -> None:
        self._inner, self._egress, self._purpose = inner, egress, purpose

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        url, method = str(request.url), request.method
        self._egress.before(method, url, self._purpose)
        try:
            response = await self._inner.handle_async_request(request)
        except BaseException as exc:  # cancelled by a caller's timeout too: still recorded
            self._egress.record(method, url, self._purpose, _request_bytes(request), None, None,
                                f"{type(exc).__name__}: {exc}")
            raise
        self._egress.record(method, url, self._purpose, _request_bytes(request), response.status_code,
                            _int(response.headers.get("content-length")))
        return response

    async def aclose(self) -> None:
        await self._inner.aclose()


def _make_requests_adapter(egress: Egress, purpose: str, timeout: float) -> Any:
    from requests.adapters import HTTPAdapter

    class LedgerAdapter(HTTPAdapter):
        def send(self, request: Any, **kwargs: Any) -> Any:  # type: ignore[override]
            if kwargs.get("timeout") is None:
                kwargs["timeout"] = timeout
            url, method = request.url, request.method
            egress.before(method, url, purpose)
            body = request.body or b""
            out = len(body.encode() if isinstance(body, str) else body)
            try:
                response = super().send(request, **kwargs)
            except BaseException as exc:
                egress.record(method, url, purpose, out, None, None, f"{type(exc).__name__}: {exc}")
                raise
            egress.record(method, url, purpose, out, response.status_code,
                          _int(response.headers.get("content-length")))
            return response

    return LedgerAdapter()
