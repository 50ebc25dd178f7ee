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
    # a call waits for a slot before it reaches a server (infra/llm/slotted.py): callers may issue many at once;
    # else they go one after another (a local server would queue them itself and the last ones could time out)
    queues_calls: bool
    # the object itself may be sent to other Ray workers (a fake whose script must be shared); else each worker
    # builds its own client from Settings
    shippable: bool

    async def structured(self, messages: Sequence[ChatMessage], schema: type[T]) -> T: ...

    async def warm(self, schemas: Sequence[type[BaseModel]] = ()) -> None:
        """Prepare the way to the model before the first call that waits on it (a slotted LLM's endpoint actors
        and their grammars for ``schemas``); nothing where there is nothing to prepare."""
        ...

    async def check(self) -> None:
        """Raise LLMUnavailable with one clear sentence if the model cannot be used."""
        ...
