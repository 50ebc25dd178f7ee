"""LLM fakes for tests: scripted answers and computed answers, through the real validation path.

Both fakes subclass :class:`~infra.llm.jsonfix.RetryingLLM`, the same base as the Ollama and
embedded clients: an answer is turned into text and validated exactly as a model's would be, so
an invalid scripted answer exercises the real repair/retry path and, when nothing validates,
raises the real :class:`~infra.errors.LLMOutputError`.

``ScriptedLLM(script)``: every round trip takes the next item. The script is either one list
(taken in call order) or a dict of lists keyed by schema class or schema name (robust when steps
run concurrently). Items may be a pydantic instance of the requested schema, a dict, a JSON
string (valid or not), a :class:`Raw` answer (text plus finish reason, e.g. cut off by the token
limit), or an exception instance (raised as if the model call failed). Running out raises
:class:`~infra.errors.ScriptExhausted`.

``FunctionLLM(fn)``: ``fn(messages, schema)`` (sync or async) returns an instance, dict, string
or :class:`Raw` for each round trip.
"""

from __future__ import annotations

import inspect
import json
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from pydantic import BaseModel

from infra.errors import LLMUnavailable, ScriptExhausted
from infra.llm.base import ChatMessage
from infra.llm.jsonfix import Completion, RetryingLLM


@dataclass(frozen=True)
class Raw:
    """A scripted answer given verbatim, e.g. ``Raw('{"a": "cut', finish_reason="length")``."""

    content: str
    finish_reason: str | None = "stop"


Answer: TypeAlias = BaseModel | Mapping[str, Any] | str | Raw
ScriptItem: TypeAlias = Answer | BaseException
Script: TypeAlias = Sequence[ScriptItem] | Mapping[type[BaseModel] | str, Sequence[ScriptItem]]


@dataclass
class LoggedCall:
    """One round trip a fake answered: what it was asked, and what it gave."""

    messages: list[ChatMessage]
    schema: str
    max_tokens: int
    answer: str | None = None
    error: str | None = None
    json_schema: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def last_user_message(self) -> str:
        return next((m["content"] for m in reversed(self.messages) if m["role"] == "user"), "")


def to_completion(answer: Answer, schema: type[BaseModel]) -> Completion:
    """Text for one fake answer. A pydantic instance must be of the requested schema."""
    if isinstance(answer, Raw):
        return Completion(answer.content, answer.finish_reason)
    if isinstance(answer, BaseModel):
        if not isinstance(answer, schema):
            raise AssertionError(f"the fake LLM was asked for {schema.__name__} but its answer is a "
                                 f"{type(answer).__name__}: {answer!r}")
        return Completion(answer.model_dump_json())
    if isinstance(answer, str):
        return Completion(answer)
    if isinstance(answer, Mapping):
        return Completion(json.dumps(answer, default=str))
    raise TypeError(f"a fake LLM answer must be a pydantic model, dict, str or Raw, not {type(answer).__name__}")


class _FakeLLM(RetryingLLM):
    # the Orchestrator hands a fake to its worker actors (each gets its own copy); real clients are
    # built by every worker from Settings in its own process instead
    shippable = True

    def __init__(self, *, name: str, max_retries: int, max_tokens: int, unavailable: str | None) -> None:
        super().__init__(name=name, max_retries=max_retries, max_tokens=max_tokens)
        self.unavailable = unavailable
        self.calls_log: list[LoggedCall] = []
        self._mutex = threading.Lock()

    # picklable (e.g. handed to a Ray actor); the copy keeps its own script and log
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_mutex"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._mutex = threading.Lock()

    async def check(self) -> None:
        """Raise LLMUnavailable(unavailable) when the fake was built to be unavailable."""
        if self.unavailable:
            raise LLMUnavailable(self.unavailable)

    def schemas_asked(self) -> list[str]:
        """Schema names of all round trips so far, in order."""
        return [c.schema for c in self.calls_log]

    def _record(self, messages: list[ChatMessage], schema: type[BaseModel], json_schema: dict[str, Any],
                max_tokens: int) -> LoggedCall:
        entry = LoggedCall(messages=[dict(m) for m in messages], schema=schema.__name__,  # type: ignore[misc]
                           max_tokens=max_tokens, json_schema=json_schema)
        with self._mutex:
            self.calls += 1
            self.calls_log.append(entry)
        return entry

    @staticmethod
    def _finish(entry: LoggedCall, answer: ScriptItem, schema: type[BaseModel]) -> Completion:
        if isinstance(answer, BaseException):
            entry.error = f"{type(answer).__name__}: {answer}"
            raise answer
        completion = to_completion(answer, schema)
        entry.answer = completion.content
        return completion


class ScriptedLLM(_FakeLLM):
    """Answers from a script (a list, or a dict of lists per schema); see the module docstring."""

    def __init__(self, script: Script, *, max_retries: int = 2, max_tokens: int = 1024,
                 unavailable: str | None = None, name: str = "scripted") -> None:
        super().__init__(name=name, max_retries=max_retries, max_tokens=max_tokens, unavailable=unavailable)
        self._by_schema: dict[str, deque[ScriptItem]] | None
        self._queue: deque[ScriptItem]
        if isinstance(script, Mapping):
            self._by_schema = {self._key(k): deque(v) for k, v in script.items()}
            self._queue = deque()
        else:
            if isinstance(script, (str, bytes, BaseModel)):
                raise TypeError("script must be a list of items or a dict of lists per schema")
            self._by_schema = None
            self._queue = deque(script)

    @staticmethod
    def _key(key: type[BaseModel] | str) -> str:
        if isinstance(key, str):
            return key
        if isinstance(key, type) and issubclass(key, BaseModel):
            return key.__name__
        raise TypeError(f"script keys are schema classes or names, not {key!r}")

    @property
    def remaining(self) -> int:
        """Items not used yet (all schemas)."""
        with self._mutex:
            if self._by_schema is None:
                return len(self._queue)
            return sum(len(q) for q in self._by_schema.values())

    def push(self, *items: ScriptItem, schema: type[BaseModel] | str | None = None) -> None:
        """Append items to the script (to the per-schema queue of ``schema`` for a dict script)."""
        with self._mutex:
            if self._by_schema is None:
                if schema is not None:
                    raise TypeError("this script is one list; push without schema=")
                self._queue.extend(items)
            else:
                if schema is None:
                    raise TypeError("this script is keyed by schema; push(..., schema=Schema)")
                self._by_schema.setdefault(self._key(schema), deque()).extend(items)

    def assert_exhausted(self) -> None:
        """Fail the test if some scripted answers were never asked for."""
        left = self.remaining
        if left:
            raise AssertionError(f"{self.name}: {left} scripted answer(s) were never used")

    def _next(self, schema: type[BaseModel]) -> ScriptItem:
        with self._mutex:
            if self._by_schema is None:
                if self._queue:
                    return self._queue.popleft()
                raise ScriptExhausted(f"{self.name}: the script ran out at call {self.calls} "
                                      f"(asked for {schema.__name__}; schemas asked so far: "
                                      f"{[c.schema for c in self.calls_log[:-1]]})")
            queue = self._by_schema.get(schema.__name__)
            if queue:
                return queue.popleft()
            scripted = sorted(self._by_schema)
            raise ScriptExhausted(f"{self.name}: no scripted answer left for {schema.__name__} "
                                  f"(script has queues for {scripted})")

    async def _complete(self, messages: list[ChatMessage], schema: type[BaseModel], json_schema: dict[str, Any],
                        max_tokens: int) -> Completion:
        entry = self._record(messages, schema, json_schema, max_tokens)
        try:
            item = self._next(schema)
        except ScriptExhausted as err:
            entry.error = str(err)
            raise
        return self._finish(entry, item, schema)


AnswerFn: TypeAlias = Callable[[list[ChatMessage], type[BaseModel]], "Answer | Awaitable[Answer]"]


class FunctionLLM(_FakeLLM):
    """Answers computed by ``fn(messages, schema)`` (sync or async); raising from fn raises from the call."""

    def __init__(self, fn: AnswerFn, *, max_retries: int = 2, max_tokens: int = 1024,
                 unavailable: str | None = None, name: str = "function") -> None:
        super().__init__(name=name, max_retries=max_retries, max_tokens=max_tokens, unavailable=unavailable)
        self.fn = fn

    async def _complete(self, messages: list[ChatMessage], schema: type[BaseModel], json_schema: dict[str, Any],
                        max_tokens: int) -> Completion:
        entry = self._record(messages, schema, json_schema, max_tokens)
        try:
            answer = self.fn(list(messages), schema)
            if inspect.isawaitable(answer):
                answer = await answer
        except BaseException as err:
            entry.error = f"{type(err).__name__}: {err}"
            raise
        return self._finish(entry, answer, schema)

