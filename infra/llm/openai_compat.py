"""The LLM port over an OpenAI-compatible server (vLLM, SGLang, llama.cpp's server, LM Studio, LocalAI), through the
official ``openai`` client: ``POST {base_url}/chat/completions`` with ``response_format`` ``json_schema``.

The answer is validated with pydantic and repaired by :class:`~infra.llm.jsonfix.RetryingLLM` (``<think>`` blocks,
truncated or invalid JSON, schema violations), exactly as for Ollama. A server that rejects ``response_format``
(HTTP 400 naming it: older vLLM and some proxies) is asked again with vLLM's ``guided_json`` and then remembered as
such. Transport trouble (429, 5xx, dropped connections, timeouts) is retried with short exponential backoff
(tenacity; the client's own retries are off so there is one policy) and then raised as :class:`LLMTimeout` or
:class:`LLMUnavailable`; an unknown model or a refused API key is one sentence at once.

Nothing is sent anywhere the settings do not name: the base URL and the API key are always passed explicitly, so
the client never falls back to ``OPENAI_BASE_URL`` or to api.openai.com, and a cloud ``OPENAI_API_KEY`` in the
environment is never sent to a lab server. The attribute ``host`` holds the base URL, so a cluster's per-node
servers (``ray.ollama_hosts``: node → URL) point each node's calls at its own server
(:func:`infra.cluster.on_this_node`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from pydantic import BaseModel

from infra.errors import LLMTimeout, LLMUnavailable
from infra.llm.base import ChatMessage
from infra.llm.jsonfix import Completion
from infra.llm.server import ServerLLM, tls_context

log = logging.getLogger("forage.llm")

DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"  # vLLM's default; llama.cpp's server: :8080/v1, LM Studio: :1234/v1
NO_KEY = "none"  # servers without authentication accept any key; the client insists on one


def is_transient(err: BaseException) -> bool:
    """True for failures a later identical request may not hit: 408/409/429/5xx, dropped connections, timeouts."""
    import openai

    if isinstance(err, openai.APIStatusError):
        return err.status_code in (408, 409, 429) or err.status_code >= 500
    return isinstance(err, (openai.APIConnectionError, TimeoutError))


def _mentions_response_format(err: BaseException) -> bool:
    text = str(err).lower()
    return "response_format" in text or "json_schema" in text


class OpenAICompatLLM(ServerLLM):
    """Structured output from a model served by an OpenAI-compatible server.

    ``host`` is the server's base URL (with its ``/v1``); ``model`` the served model id (``GET /v1/models``);
    ``timeout_s`` bounds one HTTP round trip; ``max_retries`` bounds both the repair attempts after invalid output
    and the transport retries of one round trip.
    """

    def __init__(
        self,
        host: str = DEFAULT_BASE_URL,
        model: str = "qwen2.5-7b-instruct",
        *,
        api_key: str | None = None,
        timeout_s: float = 180.0,
        max_retries: int = 2,
        temperature: float = 0.0,
        max_tokens: int = 1024,
        n_ctx: int = 8192,
        backoff_s: float = 0.5,
        backoff_max_s: float = 8.0,
        check_timeout_s: float = 10.0,
    ) -> None:
        super().__init__(name=f"openai:{model}", max_retries=max_retries, max_tokens=max_tokens,
                         max_tokens_ceiling=max(max_tokens, n_ctx // 2))
        if timeout_s <= 0:
            raise ValueError("timeout_s must be > 0")
        self.host = host.rstrip("/")
        self.model = model
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.temperature = temperature
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.check_timeout_s = check_timeout_s
        self.guided_json = False  # this server wanted vLLM's guided_json instead of response_format

    def __repr__(self) -> str:  # never the key
        return f"OpenAICompatLLM(host={self.host!r}, model={self.model!r})"

    def _client(self, timeout: float) -> Any:
        import openai

        # a fresh client per round trip (as for Ollama): one instance works from any event loop; its HTTP client
        # verifies with the process's one TLS context (building one per client cost 16-33 ms of CPU per call)
        return openai.AsyncOpenAI(base_url=self.host, api_key=self.api_key or NO_KEY, timeout=timeout, max_retries=0,
                                  http_client=openai.DefaultAsyncHttpxClient(verify=tls_context(), timeout=timeout))

    async def installed_models(self) -> list[str]:
        """The model ids the server serves (``GET /models``), sorted; LLMUnavailable (one sentence) when it
        cannot say."""
        import openai

        try:
            async with self._client(min(self.check_timeout_s, self.timeout_s)) as client:
                page = await client.models.list()
        except openai.AuthenticationError:
            raise LLMUnavailable(f"The model server at {self.host} refused the API key: set llm.api_key "
                                 "(FORAGE_LLM__API_KEY).") from None
        except openai.APIStatusError as err:
            raise LLMUnavailable(f"The model server at {self.host} answered HTTP {err.status_code} to /models; "
                                 "is llm.host its OpenAI-compatible base URL (ending in /v1)?",
                                 retryable=is_transient(err)) from None
        except (openai.APIConnectionError, TimeoutError, ValueError):
            raise LLMUnavailable(f"No OpenAI-compatible model server answers at {self.host}: start it (e.g. `vllm "
                                 f"serve MODEL`) or set llm.host.", retryable=True) from None
        return sorted({m.id for m in page.data if getattr(m, "id", None)})

    async def check(self) -> None:
        """Raise LLMUnavailable (one sentence, with the fix) unless the server answers and serves the model."""
        served = await self.installed_models()
        if self.model not in served:
            listing = ", ".join(served[:8]) + (" …" if len(served) > 8 else "") if served else "none"
            raise LLMUnavailable(f"The model server at {self.host} serves no model '{self.model}' (it serves: "
                                 f"{listing}): set llm.model to one of them.")

    async def _complete(self, messages: list[ChatMessage], schema: type[BaseModel], json_schema: dict[str, Any],
                        max_tokens: int) -> Completion:
        import openai

        attempts = self.max_retries + 1
        retrying = self.transport_retries(is_transient)
        try:
            async for attempt in retrying:
                with attempt:
                    response = await self._chat(messages, schema.__name__, json_schema, max_tokens)
        except openai.APITimeoutError:
            raise LLMTimeout(f"The model server at {self.host} did not answer within {self.timeout_s:g}s "
                             f"({attempts} attempt(s)).") from None
        except openai.APIConnectionError as err:
            raise LLMUnavailable(f"No OpenAI-compatible model server answers at {self.host} ({type(err).__name__}): "
                                 "start it or set llm.host.", retryable=True) from None
        except openai.AuthenticationError:
            raise LLMUnavailable(f"The model server at {self.host} refused the API key: set llm.api_key "
                                 "(FORAGE_LLM__API_KEY).") from None
        except openai.NotFoundError as err:
            raise LLMUnavailable(f"The model server at {self.host} has no model '{self.model}' (server said: "
                                 f"{_message(err)}): set llm.model to one its GET /v1/models lists.") from None
        except openai.APIStatusError as err:
            said = f"HTTP {err.status_code}: {_message(err)}"
            raise LLMUnavailable(
                f"The model server at {self.host} kept failing ({said}) after {attempts} attempt(s)."
                if is_transient(err) else f"The model server at {self.host} rejected the request ({said}).",
                retryable=is_transient(err)) from None
        except TimeoutError:
            raise LLMTimeout(f"The model server at {self.host} did not answer within {self.timeout_s:g}s.") from None
        if not response.choices:
            raise LLMUnavailable(f"The model server at {self.host} answered with no choices; is it an "
                                 "OpenAI-compatible server?")
        choice = response.choices[0]
        return Completion(content=choice.message.content or "", finish_reason=choice.finish_reason)

    async def _chat(self, messages: list[ChatMessage], name: str, json_schema: dict[str, Any],
                    max_tokens: int) -> Any:
        """One HTTP round trip (two when the server first turns ``response_format`` down), counted in ``calls``."""
        import openai

        async with self._client(self.timeout_s) as client:
            async with asyncio.timeout(self.timeout_s):
                request: dict[str, Any] = {"model": self.model, "messages": messages, "max_tokens": max_tokens,
                                           "temperature": self.temperature}
                if not self.guided_json:
                    try:
                        self.calls += 1
                        return await client.chat.completions.create(**request, response_format={
                            "type": "json_schema", "json_schema": {"name": name, "schema": json_schema}})
                    except openai.BadRequestError as err:
                        if not _mentions_response_format(err):
                            raise
                        log.warning("%s: the server turned response_format down (%s); using guided_json",
                                    self.name, _message(err))
                        self.guided_json = True
                self.calls += 1
                return await client.chat.completions.create(**request, extra_body={"guided_json": json_schema})



def _message(err: Any) -> str:
    """The server's own words from an ``openai.APIStatusError`` (its JSON ``error.message`` when it sent one)."""
    body = getattr(err, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])[:300]
        if isinstance(inner, str):
            return inner[:300]
    return str(getattr(err, "message", err))[:300]
