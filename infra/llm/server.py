"""What the LLM ports that talk to a model server share: transport retries with exponential backoff (tenacity),
each one logged. Ollama (:mod:`infra.llm.ollama`) and OpenAI-compatible servers (:mod:`infra.llm.openai_compat`)
say which failures are transient; a failure a retry cannot cure is raised at once."""

from __future__ import annotations

import logging
from collections.abc import Callable

from tenacity import AsyncRetrying, RetryCallState, retry_if_exception, stop_after_attempt, wait_exponential

from infra.llm.jsonfix import RetryingLLM

log = logging.getLogger("forage.llm")


class ServerLLM(RetryingLLM):
    """A :class:`RetryingLLM` over HTTP: ``backoff_s`` is the first wait between transport attempts (doubling up to
    ``backoff_max_s``), ``max_retries`` bounds them as it bounds the repair attempts."""

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
