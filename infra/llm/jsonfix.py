"""From raw model text to a validated schema instance, with bounded repair attempts.

Every LLM implementation (Ollama, the embedded GGUF model, the test fakes) shares this code, so
invalid output takes exactly the same path everywhere:

1. :func:`extract_json` drops ``<think>…</think>`` blocks and Markdown code fences and cuts the
   first complete JSON value out of the text (trailing whitespace or chatter is ignored).
2. :func:`parse_structured` validates it with ``schema.model_validate_json``; an empty answer, an
   answer cut off by the token limit, broken JSON or a schema violation raise :class:`InvalidOutput`.
3. :class:`RetryingLLM.structured` asks again (at most ``max_retries`` times), telling the model
   what was wrong; a cut-off answer also gets a doubled token budget. When no attempt validates it
   raises :class:`~infra.errors.LLMOutputError` (retryable) carrying the last problem.

Subclasses only implement :meth:`RetryingLLM._complete`: one model round trip returning a
:class:`Completion` (text and finish reason).
"""

from __future__ import annotations

import json
import logging
import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from infra.errors import LLMOutputError
from infra.llm.base import ChatMessage, T

log = logging.getLogger("forage.llm")

FinishReason = str | None
Problem = Literal["empty", "truncated", "not_json", "schema"]

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"^```[A-Za-z0-9_-]*\s*\n(.*?)\n?```\s*$", re.DOTALL)
_MAX_ECHO_CHARS = 4000  # how much of a bad answer is shown back to the model
_MAX_FEEDBACK_CHARS = 1500  # how much of a validation error is shown back to the model


@dataclass(frozen=True)
class Completion:
    """One raw model answer: its text and why generation stopped ("stop", "length", ...)."""

    content: str
    finish_reason: FinishReason = "stop"


class InvalidOutput(ValueError):
    """The model answered, but the answer is not a valid instance of the requested schema."""

    def __init__(self, problem: Problem, detail: str) -> None:
        super().__init__(f"{problem}: {detail}")
        self.problem: Problem = problem
        self.detail = detail

    def feedback(self, schema_name: str) -> str:
        """The correction request sent to the model as a user message."""
        if self.problem == "empty":
            return (f"Your answer was empty. Reply with one JSON object that matches the {schema_name} "
                    "schema, and nothing else.")
        if self.problem == "truncated":
            return (f"Your answer was cut off before the JSON was complete ({self.detail}). Reply again "
                    f"with one complete, shorter JSON object that matches the {schema_name} schema: keep "
                    "every text field brief.")
        if self.problem == "not_json":
            return (f"Your answer was not valid JSON ({self.detail}). Reply with one JSON object that "
                    f"matches the {schema_name} schema, and nothing else.")
        return (f"Your answer did not match the {schema_name} schema:\n{self.detail}\n"
                "Reply with a corrected JSON object only.")


def strip_thinking(text: str) -> str:
    """Remove ``<think>…</think>`` blocks; an unclosed ``<think>`` swallows the rest of the text."""
    text = _THINK_BLOCK.sub("", text)
    opened = text.lower().find("<think>")
    if opened != -1:
        text = text[:opened]
    return text.strip()


def extract_json(text: str) -> str:
    """The first complete JSON object or array in a model answer, as text.

    Thinking blocks and a surrounding Markdown code fence are removed first; text before the first
    ``{``/``[`` and after the end of that value is ignored. Raises :class:`InvalidOutput` when there
    is nothing or no complete JSON value.
    """
    cleaned = strip_thinking(text)
    fenced = _FENCE.match(cleaned)
    if fenced:
        cleaned = fenced.group(1).strip()
    if not cleaned:
        raise InvalidOutput("empty", "the answer contained no text" + (" after the thinking block" if text.strip() else ""))
    starts = [i for i in (cleaned.find("{"), cleaned.find("[")) if i != -1]
    if not starts:
        raise InvalidOutput("not_json", f"no JSON object found in {_preview(cleaned)}")
    start = min(starts)
    try:
        _, end = json.JSONDecoder().raw_decode(cleaned, start)
    except json.JSONDecodeError as err:
        raise InvalidOutput("not_json", f"{err.msg} (character {err.pos})") from None
    return cleaned[start:end]


def parse_structured(completion: Completion, schema: type[T]) -> T:
    """Validate one completion against ``schema`` or raise :class:`InvalidOutput`.

    An answer that validates is accepted even when generation hit the token limit (some servers pad
    a finished JSON object with whitespace until the limit); one that does not validates and was
    cut off is reported as truncated, so the retry gets a larger budget.
    """
    try:
        payload = extract_json(completion.content)
        return schema.model_validate_json(payload)
    except InvalidOutput as err:
        if completion.finish_reason == "length":
            raise InvalidOutput("truncated", f"the token limit was reached; {err.detail}") from None
        raise
    except ValidationError as err:
        if completion.finish_reason == "length":
            raise InvalidOutput("truncated", f"the token limit was reached; {_summarise(err)}") from None
        raise InvalidOutput("schema", _summarise(err)) from None


def _summarise(err: ValidationError) -> str:
    lines = []
    for item in err.errors(include_url=False):
        where = ".".join(str(part) for part in item["loc"]) or "(root)"
        lines.append(f"- {where}: {item['msg']} (got {_preview(item.get('input'), 80)})")
    text = "\n".join(lines)
    return text if len(text) <= _MAX_FEEDBACK_CHARS else text[:_MAX_FEEDBACK_CHARS] + "\n- …"


def _preview(value: Any, limit: int = 120) -> str:
    text = repr(value) if isinstance(value, str) else json.dumps(value, default=str)
    return text if len(text) <= limit else text[:limit] + "…"


class RetryingLLM(ABC):
    """Implements the LLM port's ``structured()`` over one abstract round trip, :meth:`_complete`.

    ``calls`` counts round trips that reached the model; implementations increment it in
    :meth:`_complete`. ``max_tokens`` is the first attempt's budget; after a cut-off answer the next
    attempt gets twice as much, at most ``max_tokens_ceiling``.
    """

    name: str
    calls: int
    queues_calls = False
    shippable = False

    def __init__(self, *, name: str, max_retries: int, max_tokens: int, max_tokens_ceiling: int | None = None) -> None:
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        if max_tokens < 1:
            raise ValueError("max_tokens must be >= 1")
        self.name = name
        self.calls = 0
        self.max_retries = max_retries
        self.max_tokens = max_tokens
        self.max_tokens_ceiling = max(max_tokens, max_tokens_ceiling or max_tokens * 4)

    @abstractmethod
    async def _complete(self, messages: list[ChatMessage], schema: type[BaseModel], json_schema: dict[str, Any],
                        max_tokens: int) -> Completion:
        """One round trip: ask the model (constrained by ``json_schema`` where it can) and return its text."""

    async def check(self) -> None:
        """Raise LLMUnavailable with one clear sentence if the model cannot be used (default: usable)."""

    async def warm(self, schemas: Sequence[type[BaseModel]] = ()) -> None:
        """Nothing to prepare: the first call opens the way to the model."""

    async def structured(self, messages: Sequence[ChatMessage], schema: type[T]) -> T:
        """Ask for one ``schema`` instance; retry invalid answers; raise LLMOutputError if none validates."""
        original: list[ChatMessage] = [{"role": m["role"], "content": m["content"]} for m in messages]
        if not original:
            raise ValueError("structured() needs at least one message")
        json_schema = schema.model_json_schema()
        conversation = original
        budget = self.max_tokens
        attempts = self.max_retries + 1
        last: InvalidOutput | None = None
        for attempt in range(1, attempts + 1):
            completion = await self._complete(conversation, schema, json_schema, budget)
            try:
                return parse_structured(completion, schema)
            except InvalidOutput as err:
                last = err
                log.info("%s: invalid %s answer (attempt %d/%d): %s", self.name, schema.__name__, attempt,
                         attempts, err)
                conversation = [*original, *self._correction(completion, err, schema.__name__)]
                if err.problem == "truncated":
                    budget = min(budget * 2, self.max_tokens_ceiling)
        assert last is not None
        raise LLMOutputError(
            f"{self.name} gave no valid {schema.__name__} in {attempts} attempt(s); last problem: {last}",
            retryable=True,
        )

    @staticmethod
    def _correction(completion: Completion, err: InvalidOutput, schema_name: str) -> list[ChatMessage]:
        """Messages appended to the original conversation for the next attempt."""
        follow_up: list[ChatMessage] = []
        if err.problem in ("not_json", "schema"):
            echoed = (strip_thinking(completion.content) or completion.content)[:_MAX_ECHO_CHARS]
            follow_up.append({"role": "assistant", "content": echoed})
        follow_up.append({"role": "user", "content": err.feedback(schema_name)})
        return follow_up
