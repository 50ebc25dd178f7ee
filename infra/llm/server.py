"""What the LLM ports that talk to a model server share: transport retries with exponential backoff (tenacity),
each one logged, and one TLS context per process (:func:`tls_context`). Ollama (:mod:`infra.llm.ollama`) and
OpenAI-compatible servers (:mod:`infra.llm.openai_compat`) say which failures are transient; a failure a retry
cannot cure is raised at once."""

from __future__ import annotations

import functools
import logging
import ssl
from collections.abc import Callable

import httpx
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt, wait_exponential

from infra.llm.jsonfix import RetryingLLM

log = logging.getLogger("forage.llm")


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The TLS context every model-server client of this process verifies an ``https`` host with: what httpx would
    build for each client (certifi's CAs, or ``SSL_CERT_FILE`` / ``SSL_CERT_DIR``), built once. Both clients open a
    fresh HTTP client per round trip (one instance works from any event loop); building this context was most of
    what that cost (53 ms of CPU per call for Ollama on the 2-core CI machine, 16-33 ms for the OpenAI client on
    this one; under 1 ms with the shared context)."""
    return httpx.create_ssl_context()


class ServerLLM(RetryingLLM):
    """A :class:`RetryingLLM` over HTTP: ``backoff_s`` is the first wait between transport attempts (doubling up to
    ``backoff_max_s``), ``max_retries`` bounds them as it bounds the repair attempts."""

    host: str  # the server's base URL (a cluster points a copy at its node's server: infra.cluster.on_this_node)
    backoff_s: float = 0.5
    backoff_max_s: float = 8.0

    def transport_retries(self, transient: Callable[[BaseException], bool]) -> AsyncRetrying:
        """``async for attempt in self.transport_retries(is_transient): with attempt: ...`` — one round trip,
        repeated after a transient failure; the last failure is raised as itself."""
        return AsyncRetrying(stop=stop_after_attempt(self.max_retries + 1),
                             wait=wait_exponential(multiplier=self.backoff_s, max=self.backoff_max_s),
                             retry=retry_if_exception(transient), before_sleep=self._log_retry, reraise=True)

    def _log_retry(self, state: RetryCallState) -> None:
        outcome = state.outcome
        err = outcome.exception() if outcome is not None else None
        wait = state.next_action.sleep if state.next_action is not None else 0.0
        log.warning("%s: transient failure (%s: %s); retry %d in %.2fs", self.name, type(err).__name__, err,
                    state.attempt_number, wait)
