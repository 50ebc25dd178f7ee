"""The LLM port over an Ollama server (``ollama`` Python client, ``/api/chat`` with ``format=<schema>``).

Ollama constrains decoding with the schema's JSON schema; the answer is still validated with
pydantic and repaired by :class:`~infra.llm.jsonfix.RetryingLLM` (``<think>`` blocks, truncated or
invalid JSON, schema violations). Transport trouble (HTTP 5xx/429, dropped connections, timeouts)
is retried with short exponential backoff (tenacity) and then raised as :class:`LLMTimeout` or
:class:`LLMUnavailable`; a missing model is reported at once with the ``ollama pull`` to run.

A fresh ``ollama.AsyncClient`` is opened per round trip, so one instance works from any event
loop (Ray actors, the LLM endpoint actors of :mod:`actors.llm_endpoint`, ``asyncio.run`` in scripts
and tests). The clients share one TLS context per process (:func:`tls_context`): building it is
what made opening a client expensive (53 ms of CPU per call on the 2-core CI machine, more than
the rest of a call's client-side work; 1 ms with the shared context).
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import ollama
from pydantic import BaseModel

from infra.errors import LLMTimeout, LLMUnavailable
from infra.llm.base import ChatMessage
from infra.llm.jsonfix import Completion
from infra.llm.server import ServerLLM, tls_context

DEFAULT_HOST = "http://127.0.0.1:11434"
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})


def is_transient(err: BaseException) -> bool:
    """True for failures that a later identical request may not hit: 5xx/429, resets, timeouts."""
    if isinstance(err, ollama.ResponseError):
        return err.status_code in TRANSIENT_STATUS
    return isinstance(err, (ConnectionError, httpx.TransportError, TimeoutError))


def same_model(wanted: str, listed: str) -> bool:
    """Ollama model names match when equal after adding the implicit ``:latest`` tag."""

    def norm(name: str) -> str:
        name = name.strip()
        return name if ":" in name.rsplit("/", 1)[-1] else f"{name}:latest"

    return norm(wanted) == norm(listed)


class OllamaLLM(ServerLLM):
    """Structured output from a model served by Ollama.

    ``timeout_s`` bounds one HTTP round trip; ``max_retries`` bounds both the repair attempts after
    invalid output and the transport retries of one round trip; ``backoff_s`` is the first backoff
    wait (doubling up to ``backoff_max_s``).
    """

    def __init__(
        self,
        host: str = DEFAULT_HOST,
        model: str = "qwen2.5:7b-instruct",
        *,
        timeout_s: float = 180.0,
        max_retries: int = 2,
        temperature: float = 0.0,
        num_ctx: int = 8192,
        max_tokens: int = 1024,
        backoff_s: float = 0.5,
        backoff_max_s: float = 8.0,
        check_timeout_s: float = 10.0,
    ) -> None:
        super().__init__(name=f"ollama:{model}", max_retries=max_retries, max_tokens=max_tokens,
                         max_tokens_ceiling=max(max_tokens, num_ctx // 2))
        if timeout_s <= 0:
            raise ValueError("timeout_s must be > 0")
        self.host = host
        self.model = model
        self.timeout_s = timeout_s
        self.temperature = temperature
        self.num_ctx = num_ctx
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.check_timeout_s = check_timeout_s

    def __repr__(self) -> str:
        return f"OllamaLLM(host={self.host!r}, model={self.model!r})"

    async def installed_models(self) -> list[str]:
        """The models the server has (``/api/tags``), sorted; LLMUnavailable (one sentence) when it cannot say."""
        try:
            async with ollama.AsyncClient(host=self.host, timeout=min(self.check_timeout_s, self.timeout_s),
                                          verify=tls_context()) as client:
                listing = await client.list()
        except ollama.ResponseError as err:
            raise LLMUnavailable(
                f"Ollama at {self.host} answered HTTP {err.status_code} to /api/tags ({err.error}); "
                "is this an Ollama server?",
                retryable=err.status_code in TRANSIENT_STATUS,
            ) from None
        except (ConnectionError, httpx.TransportError, TimeoutError, ValueError):
            raise LLMUnavailable(f"Ollama is not reachable at {self.host}: start it with `ollama serve`.") from None
        return sorted({entry.model for entry in listing.models if entry.model})

    async def check(self) -> None:
        """Raise LLMUnavailable (one sentence, with the fix) unless the server answers and has the model."""
        if not any(same_model(self.model, name) for name in await self.installed_models()):
            raise LLMUnavailable(f"Ollama has no model '{self.model}': run `ollama pull {self.model}`.")

    async def _complete(self, messages: list[ChatMessage], schema: type[BaseModel], json_schema: dict[str, Any],
                        max_tokens: int) -> Completion:
        options = {"temperature": self.temperature, "num_ctx": self.num_ctx, "num_predict": max_tokens}
        attempts = self.max_retries + 1
        retrying = self.transport_retries(is_transient)
        try:
            async for attempt in retrying:
                with attempt:
                    response = await self._chat_once(messages, json_schema, options)
        except ollama.ResponseError as err:
            raise self._response_error(err, attempts) from None
        except (TimeoutError, httpx.TimeoutException):
            raise LLMTimeout(
                f"Ollama at {self.host} did not answer within {self.timeout_s:g}s ({attempts} attempt(s))."
            ) from None
        except ConnectionError:
            raise LLMUnavailable(f"Ollama is not reachable at {self.host}: start it with `ollama serve`.",
                                 retryable=True) from None
        except httpx.TransportError as err:
            raise LLMUnavailable(
                f"Ollama at {self.host} dropped the connection ({type(err).__name__}: {err}) "
                f"in {attempts} attempt(s).",
                retryable=True,
            ) from None
        except ValueError as err:  # a 200 whose body is not an Ollama chat response
            raise LLMUnavailable(
                f"Ollama at {self.host} answered with something that is not a chat response ({err}); "
                "is this an Ollama server?"
            ) from None
        return Completion(content=response.message.content or "", finish_reason=response.done_reason)

    async def _chat_once(self, messages: list[ChatMessage], json_schema: dict[str, Any],
                         options: dict[str, Any]) -> ollama.ChatResponse:
        """One HTTP round trip; counts it in ``calls`` unless the server was never reached."""
        reached = True
        try:
            async with ollama.AsyncClient(host=self.host, timeout=self.timeout_s, verify=tls_context()) as client:
                async with asyncio.timeout(self.timeout_s):
                    return await client.chat(model=self.model, messages=messages, format=json_schema,
                                             options=options, stream=False)
        except (ConnectionError, httpx.ConnectTimeout):
            reached = False
            raise
        finally:
            if reached:
                self.calls += 1

    def _response_error(self, err: ollama.ResponseError, attempts: int) -> LLMUnavailable:
        if err.status_code == 404:
            return LLMUnavailable(f"Ollama has no model '{self.model}': run `ollama pull {self.model}` "
                                  f"(server said: {err.error}).")
        if err.status_code in TRANSIENT_STATUS:
            return LLMUnavailable(
                f"Ollama at {self.host} kept failing (HTTP {err.status_code}: {err.error}) "
                f"after {attempts} attempt(s).",
                retryable=True,
            )
        return LLMUnavailable(f"Ollama at {self.host} rejected the request (HTTP {err.status_code}): {err.error}")
