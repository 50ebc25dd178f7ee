"""Errors that say whether a retry makes sense.

Every error Forage raises on purpose is a :class:`ForageError`. ``retryable`` tells the caller
(and the researcher reading run.json) whether trying the same thing again could succeed: a 429 or
a timeout is retryable, an encrypted PDF or a missing model is not.
"""

from __future__ import annotations

from typing import Any


class ForageError(Exception):
    retryable: bool = False

    def __init__(self, message: str, *, retryable: bool | None = None) -> None:
        super().__init__(message)
        if retryable is not None:
            self.retryable = retryable

    def __reduce__(self):  # keep ``retryable`` across pickling (Ray ships exceptions between processes)
        return (_rebuild, (type(self), str(self), self.retryable))


def _rebuild(cls: type[ForageError], message: str, retryable: bool) -> ForageError:
    err = cls.__new__(cls)
    ForageError.__init__(err, message, retryable=retryable)
    return err


class ConfigError(ForageError):
    """Bad settings or arguments: fix the input, do not retry."""


class LLMUnavailable(ForageError):
    """The model server is unreachable or the model is missing. Says how to fix it."""


class LLMOutputError(ForageError):
    """The model answered, but not with valid output for the schema (after retries)."""

    retryable = True


class LLMTimeout(ForageError):
    retryable = True


class ScriptExhausted(AssertionError):
    """A scripted fake LLM was called more often than its script allows (tests only)."""


class PDFError(ForageError):
    """A document could not be parsed: not a PDF, encrypted, broken."""


class StoreError(ForageError):
    """The store could not read or write; nothing half-written is visible."""

    retryable = True


class SourceError(ForageError):
    """A document source (library folder, API) failed."""


LLM_FAILURES = (LLMOutputError, LLMTimeout, LLMUnavailable)
"""What an LLM call can fail with after its own retries: a step that has a fallback catches these."""


def validation_text(exc: Any, *, field_names: dict[str, str] | None = None) -> str:
    """A pydantic ValidationError as one plain sentence per problem: which value, what is wrong with it
    ("the research query: String should have at most 4000 characters"), without pydantic's "Value error, "
    prefix and never the input itself. ``field_names``: plain names for field names."""
    names = field_names or {}
    parts = []
    for err in exc.errors():
        msg = str(err.get("msg", "")).removeprefix("Value error, ").removeprefix("Assertion failed, ")
        loc = [str(x) for x in err.get("loc", ()) if not isinstance(x, int) and x != "body"]
        where = names.get(loc[-1], loc[-1]) if loc else ""
        parts.append(f"{where}: {msg}" if where and where.casefold() not in msg.casefold() else msg)
    return "; ".join(parts)


_ANSI: Any = None  # compiled on first use


def strip_ansi(text: str) -> str:
    """``text`` without terminal escape codes (Ray colours its tracebacks)."""
    import re

    global _ANSI
    if _ANSI is None:
        _ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
    return _ANSI.sub("", text)


def unwrap(exc: BaseException) -> BaseException:
    """The error a Ray task raised, for a ``RayTaskError`` (its ``cause``); ``exc`` itself otherwise."""
    for _ in range(8):
        cause = getattr(exc, "cause", None)
        if not isinstance(cause, BaseException):
            break
        exc = cause
    return exc


def describe(exc: BaseException) -> str:
    """One line for a person: what went wrong, never a traceback or a terminal escape code. A Ray task's error
    is unwrapped to the error its task raised; Forage's own errors are their message (they say what to do); a
    validation error names the value and the problem; anything else is its type and the first line of its
    message."""
    exc = unwrap(exc)
    if hasattr(exc, "errors") and callable(exc.errors):  # pydantic's ValidationError
        try:
            return validation_text(exc, field_names={"query": "the research query", "text": "the research query"})
        except Exception:  # noqa: BLE001 — not pydantic's after all
            pass
    text = strip_ansi(str(exc))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = lines[0] if lines else ""
    if isinstance(exc, ForageError):
        return " ".join(text.split()) if len(lines) <= 3 else first
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__
