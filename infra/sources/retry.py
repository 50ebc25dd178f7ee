"""Retry policy shared by the online sources and the downloader (tenacity).

Retried: HTTP 429 and 5xx, and network errors. The wait doubles from ``net.backoff_s``; a server's
``Retry-After`` (seconds or an HTTP date) wins, and no single wait exceeds ``net.max_backoff_s``.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Mapping

import httpx
from tenacity import RetryCallState, retry_if_exception, stop_after_attempt
from tenacity.wait import wait_base

from infra.net import OfflineError
from infra.settings import NetSettings


class RetryableStatus(Exception):
    """An HTTP answer worth another try (429, 5xx), with the server's Retry-After if any."""

    def __init__(self, status: int, url: str, retry_after: float | None = None) -> None:
        super().__init__(f"HTTP {status}")
        self.status, self.url, self.retry_after = status, url, retry_after


def is_retryable_status(status: int) -> bool:
    return status == 429 or 500 <= status <= 599


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds from a ``Retry-After`` header (delta seconds or HTTP date); None if absent or unreadable."""
    value = headers.get("retry-after") or headers.get("Retry-After")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class BackoffWait(wait_base):
    """Exponential backoff from settings; Retry-After wins; both capped at ``max_backoff_s``."""

    def __init__(self, net: NetSettings) -> None:
        self.net = net

    def __call__(self, retry_state: RetryCallState) -> float:
        exc = retry_state.outcome.exception() if retry_state.outcome else None
        if isinstance(exc, RetryableStatus) and exc.retry_after is not None:
            wait = exc.retry_after
        else:
            wait = self.net.backoff_s * (2 ** (retry_state.attempt_number - 1))
        return min(wait, self.net.max_backoff_s)


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, OfflineError):
        return False
    return isinstance(exc, RetryableStatus | httpx.TransportError)


def retry_kwargs(net: NetSettings) -> dict[str, object]:
    """Arguments for ``tenacity.Retrying`` / ``AsyncRetrying``: ``net.retries`` extra attempts."""
    return {"retry": retry_if_exception(_transient), "wait": BackoffWait(net),
            "stop": stop_after_attempt(net.retries + 1), "reraise": True}
