"""What every part of one requirement's Forager shares (:class:`Runtime`): the node's CPU gate, the LLM with its calls
counted and its failures recorded as failed steps, the events, and the documents read so far."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from actors.steps.events import Emit
from actors.steps.forage.ledger import Iteration
from actors.steps.schemas import SECTION_PATH_CHARS
from actors.steps.text import clip, declaration
from infra.errors import LLMOutputError, LLMTimeout
from infra.llm.base import LLM, ChatMessage, T
from infra.store.base import Store
from messages.status import Stage

R = TypeVar("R")
_HOLDING: ContextVar[bool] = ContextVar("forage_cpu_place", default=False)  # this task holds a CPU gate place


def _failure(exc: Exception) -> str:
    return f"{type(exc).__name__}: {clip(' '.join(str(exc).split()), 200)}"


@dataclass
class Doc:
    """What a Forager needs of a document (the store's record minus its Markdown)."""

    doc_id: str
    title: str
    abstract: str = ""
    sections: list[str] | None = None  # loaded on first use


class Runtime:
    """The services of one requirement's Forager. ``cpu(order)``: a place on a gate shared with the node's other
    Foragers (actors/cpu_gate.py) for CPU steps (store reads, embeddings: :meth:`one_place`); none: every step runs
    at once."""

    def __init__(self, llm: LLM, store: Store, emit: Emit,
                 cpu: Callable[[tuple[float, ...]], AbstractAsyncContextManager[Any]] | None = None) -> None:
        self.llm = llm
        self.store = store
        self.emit = emit
        self._cpu = cpu or nullcontext
        self.began = 0.0  # when this iteration began (time.time(): comparable between the node's processes)
        self.steps = 0  # places held this iteration
        self.llm_calls = 0
        self.failed_steps: list[str] = []
        self.requirement_id: str | None = None
        self.docs: dict[str, Doc] = {}

    def new_iteration(self) -> None:
        """An iteration begins: the gate serves it by when it began and how many places it has held."""
        self.began = time.time()
        self.steps = 0

    @asynccontextmanager
    async def one_place(self) -> AsyncIterator[None]:
        """Hold one place of the CPU gate for every CPU step of the body (a step inside needs no place of its own),
        so a Forager's steps up to its next LLM call are not interleaved with other Foragers' steps. Never around an
        LLM call: the place would sit idle for the call's length. The gate serves the Forager that has held more
        places this iteration first (the one nearer its next LLM call), then the one whose iteration began first."""
        if _HOLDING.get():
            yield
            return
        async with self._cpu((-self.steps, self.began)):
            holding = _HOLDING.set(True)
            try:
                yield
            finally:
                _HOLDING.reset(holding)
                self.steps += 1

    async def thread(self, fn: Callable[..., R], *args: Any) -> R:
        """``fn(*args)`` in a worker thread, holding a place on the CPU gate while it runs (the caller's place when
        it holds one: :meth:`one_place`)."""
        async with self.one_place():
            return await asyncio.to_thread(fn, *args)

    async def together(self, calls: list[Coroutine[Any, Any, R]]) -> list[R]:
        """Independent LLM steps: all at once when the LLM queues calls before they reach a server
        (``queues_calls``, e.g. :class:`infra.llm.slotted.SlottedLLM`: a call waits for a Ray slot, so
        its timeout does not run while it waits), else one after another (a local server would
        queue them itself and the last ones could time out)."""
        if self.llm.queues_calls:
            return list(await asyncio.gather(*calls))
        return [await call for call in calls]

    async def ask(self, messages: list[ChatMessage], schema: type[T], step: str, it: Iteration) -> T | None:
        """One counted structured call; None (and a failed_steps entry) if the LLM fails."""
        self.llm_calls += 1
        it.calls += 1
        try:
            return await self.llm.structured(messages, schema)
        except (LLMOutputError, LLMTimeout) as exc:
            self.step_failed(it, step, f"iteration {it.number}: {step}: {_failure(exc)}")
            return None

    def step_failed(self, it: Iteration, step: str, reason: str, **payload: Any) -> None:
        """Record a failed step of this requirement's iteration (its result lists it) and say so in an event."""
        self.failed_steps.append(reason)
        self.emit(Stage.FORAGE, "step_failed", reason, iteration=it.number,
                  requirement_id=self.requirement_id, step=step, **payload)

    async def load_docs(self, doc_ids: Sequence[str]) -> None:
        """Read the documents of ``doc_ids`` not known yet in one store read, in a thread: the event loop,
        which other steps of this requirement share, never waits on the store for a title."""
        missing = [d for d in dict.fromkeys(doc_ids) if d not in self.docs]
        if missing:
            for record in await self.thread(self.store.get_documents, missing):
                self.docs.setdefault(record.doc_id, Doc(record.doc_id, record.title, record.abstract))

    def doc(self, doc_id: str) -> Doc:
        doc = self.docs.get(doc_id)
        if doc is None:
            record = self.store.get_document(doc_id)
            doc = (Doc(doc_id, record.title, record.abstract) if record is not None
                   else Doc(doc_id, f"(document {doc_id[:12]} no longer in the store)", "", []))
            self.docs[doc_id] = doc
        return doc

    def sections(self, doc: Doc) -> list[str]:
        """The section paths a deep dive may choose from: not the declarations (acknowledgements, funding …)."""
        if doc.sections is None:
            doc.sections = [p for p in self.store.sections(doc.doc_id)
                            if p and len(p) <= SECTION_PATH_CHARS and not declaration(p)]
        return doc.sections
