"""The LLM port: one typed call.

``await llm.structured(messages, Schema) -> Schema instance``. Implementations constrain the model
with the schema's JSON schema (Ollama's ``format=``, llama.cpp's grammar), validate the answer with
pydantic, retry invalid output a bounded number of times, and raise :class:`LLMOutputError`
(retryable) when it never validates, :class:`LLMUnavailable` when the server or model is missing.
Every implementation counts its calls in ``calls`` (attempts that reached the model).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, Protocol, TypedDict, TypeVar, runtime_checkable

from pydantic import BaseModel


class ChatMessage(TypedDict):
    role: Literal["system", "user", "assistant"]
    content: str


T = TypeVar("T", bound=BaseModel)


@runtime_checkable
class LLM(Protocol):
    name: str
    calls: int

    async def structured(self, messages: Sequence[ChatMessage], schema: type[T]) -> T: ...

    async def check(self) -> None:
        """Raise LLMUnavailable with one clear sentence if the model cannot be used."""
        ...
