"""Contextual retrieval (the Ai2 Paper Finder recipe): an LLM situates every chunk in its paper.

For each chunk an LLM writes one or two sentences from the document's title, abstract and the
chunk's section path ("This passage describes the survey sample of the paper's field study on ...").
The ingest step puts that context before the chunk for the embedder and BM25 (``search_text``) and
stores it apart from the text (:attr:`infra.store.base.ChunkRecord.context`): citations quote
``chunk.text``, which never changes.

* Batched: one ``llm.structured`` call for up to ``ingest.contextual_batch`` chunks of one document
  (schema :class:`ChunkContexts`, one entry per numbered passage).
* Cached by chunk hash (:func:`chunk_hash`: prompt version, title, abstract, section path, text) in
  a JSON-lines file next to the store (:func:`cache_path`), shared by the Ingestors of a machine
  (appends under a file lock): re-ingesting a document asks the LLM nothing.
* Never fails a document: a batch whose call fails (garbage that never validates, a timeout, a
  missing server) or an entry that is empty, too short, too long or not about a passage of the
  batch leaves those chunks without context; :class:`ContextResult` says which and why. Those are
  not cached, so the next ingest of the document asks again.
* Reference-list chunks get no context (they are never evidence).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import json
import logging
import re
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from filelock import FileLock
from pydantic import BaseModel, ConfigDict, Field, field_validator

from actors.steps.prompts import CONTEXTUAL_PROMPT_VERSION, CONTEXTUAL_SYSTEM
from infra.llm.base import LLM, ChatMessage
from infra.settings import Settings
from infra.store.base import ChunkRecord

log = logging.getLogger(__name__)

T = TypeVar("T")

MAX_PASSAGES = 32  # ingest.contextual_batch allows at most 32
CONTEXT_CHARS = 400  # what the schema allows; a kept context is cut after its second sentence
MIN_CONTEXT_WORDS = 4
PASSAGE_CHARS = 900  # of each chunk shown to the LLM
ABSTRACT_CHARS = 1500
SKIP_KINDS = frozenset({"references"})
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9(\"'])")


class ChunkContext(BaseModel):
    model_config = ConfigDict(extra="ignore")

    passage: int = Field(ge=1, le=MAX_PASSAGES, description="The passage's number [n].")
    context: str = Field(max_length=CONTEXT_CHARS, description="One or two sentences situating the passage.")


class ChunkContexts(BaseModel):
    """The LLM's answer for one batch. Entries that do not validate on their own are dropped (their
    passages stay without context); the answer as a whole still validates."""

    model_config = ConfigDict(extra="ignore")

    contexts: list[ChunkContext] = Field(max_length=MAX_PASSAGES)

    @field_validator("contexts", mode="before")
    @classmethod
    def _drop_bad(cls, value: object) -> object:
        if not isinstance(value, list):
            return value
        kept = []
        for entry in value:
            try:
                kept.append(ChunkContext.model_validate(entry))
            except ValueError:
                continue
        return kept


def chunk_hash(title: str, abstract: str, chunk: ChunkRecord) -> str:
    """What a context depends on: the prompt version, title, abstract, section path and chunk text."""
    parts = (CONTEXTUAL_PROMPT_VERSION, " ".join(title.split()), " ".join(abstract.split()), chunk.section_path,
             chunk.text)
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()


def cache_path(settings: Settings) -> Path:
    """The context cache next to the store: ``<store.path>.contexts.jsonl`` (beside the LanceDB
    folder; for Weaviate beside the local ``store.path`` it would use)."""
    store = Path(settings.store.path).expanduser()
    return store.with_name(store.name + ".contexts.jsonl")


def clean_context(text: str, chunk_text: str) -> str | None:
    """A usable context: whitespace collapsed, at most two sentences, at least a few words with
    letters, not a copy of the passage. None otherwise."""
    text = " ".join(text.split())
    if not text:
        return None
    sentences = _SENTENCE.split(text)
    text = " ".join(sentences[:2]).strip()
    words = text.split()
    if len(words) < MIN_CONTEXT_WORDS or sum(ch.isalpha() for ch in text) < 0.5 * len(text.replace(" ", "")):
        return None
    passage = " ".join(chunk_text.split())
    if len(text) >= 40 and text in passage:  # copied from the passage: says nothing new
        return None
    return text


class ContextCache:
    """chunk hash → context, in a JSON-lines file; several processes may append at once (file lock)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._entries: dict[str, str] = {}
        self._read_upto = 0

    def _refresh(self) -> None:
        """Read lines other processes appended since the last read (a torn last line waits for the next)."""
        try:
            with self.path.open("rb") as handle:
                handle.seek(self._read_upto)
                data = handle.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n") + 1
        for line in data[:end].splitlines():
            try:
                entry = json.loads(line)
                self._entries[str(entry["h"])] = str(entry["c"])
            except (ValueError, KeyError, TypeError):
                continue  # a damaged line costs one LLM call later, nothing else
        self._read_upto += end

    def get_many(self, hashes: Sequence[str]) -> dict[str, str]:
        if any(h not in self._entries for h in hashes):
            self._refresh()
        return {h: self._entries[h] for h in hashes if h in self._entries}

    def put_many(self, items: dict[str, str]) -> None:
        if not items:
            return
        lines = "".join(json.dumps({"h": h, "c": c}, ensure_ascii=False) + "\n" for h, c in items.items())
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with FileLock(str(self.path) + ".lock", timeout=60), self.path.open("a", encoding="utf-8") as handle:
                handle.write(lines)
        except OSError as exc:  # a cache that cannot be written costs LLM calls later, never the document
            log.warning("cannot write the context cache %s: %s", self.path, exc)
        self._entries.update(items)

    def __len__(self) -> int:
        self._refresh()
        return len(self._entries)


@dataclass(slots=True)
class ContextResult:
    """Contexts by chunk id, and what happened: LLM calls made, chunks answered from the cache,
    chunks left without context with the reason."""

    contexts: dict[str, str] = field(default_factory=dict)
    llm_calls: int = 0
    cached: int = 0
    missing: dict[str, str] = field(default_factory=dict)


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to the end from synchronous code, also when this thread already runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


class Contextualizer:
    """Writes contexts for the chunks of one document at a time, batched and cached."""

    def __init__(self, llm: LLM, cache: ContextCache | None = None, batch_size: int = 8) -> None:
        self.llm = llm
        self.cache = cache
        self.batch_size = max(1, min(batch_size, MAX_PASSAGES))

    @classmethod
    def from_settings(cls, settings: Settings, llm: LLM) -> Contextualizer:
        return cls(llm, ContextCache(cache_path(settings)), settings.ingest.contextual_batch)

    def contextualize(self, title: str, abstract: str, chunks: Sequence[ChunkRecord]) -> ContextResult:
        """Contexts for ``chunks`` (one document's): cached ones first, the rest asked in batches."""
        return run_sync(self.acontextualize(title, abstract, chunks))

    async def acontextualize(self, title: str, abstract: str, chunks: Sequence[ChunkRecord]) -> ContextResult:
        result = ContextResult()
        wanted = [c for c in chunks if c.section_kind not in SKIP_KINDS and c.text.strip()]
        hashes = {c.chunk_id: chunk_hash(title, abstract, c) for c in wanted}
        known = self.cache.get_many(list(hashes.values())) if self.cache is not None else {}
        todo: list[ChunkRecord] = []
        for chunk in wanted:
            context = known.get(hashes[chunk.chunk_id])
            if context is not None:
                result.contexts[chunk.chunk_id] = context
                result.cached += 1
            else:
                todo.append(chunk)
        fresh: dict[str, str] = {}
        for start in range(0, len(todo), self.batch_size):
            batch = todo[start:start + self.batch_size]
            result.llm_calls += 1
            try:
                answer = await self.llm.structured(self.messages(title, abstract, batch), ChunkContexts)
            except Exception as exc:  # noqa: BLE001 - a failed call leaves the batch without context
                reason = f"LLM call failed: {type(exc).__name__}: {str(exc)[:200]}"
                result.missing.update({c.chunk_id: reason for c in batch})
                log.warning("contextual retrieval: %d chunks of %r without context (%s)", len(batch), title, reason)
                continue
            given: dict[int, str] = {}
            for entry in answer.contexts:
                given.setdefault(entry.passage, entry.context)
            for n, chunk in enumerate(batch, start=1):
                raw = given.get(n)
                context = clean_context(raw, chunk.text) if raw is not None else None
                if context is None:
                    result.missing[chunk.chunk_id] = ("no context for this passage in the answer" if raw is None
                                                      else f"unusable context {raw[:80]!r}")
                    continue
                result.contexts[chunk.chunk_id] = context
                fresh[hashes[chunk.chunk_id]] = context
        if self.cache is not None:
            self.cache.put_many(fresh)
        return result

    @staticmethod
    def messages(title: str, abstract: str, batch: Sequence[ChunkRecord]) -> list[ChatMessage]:
        abstract = " ".join(abstract.split())
        if len(abstract) > ABSTRACT_CHARS:
            abstract = abstract[:ABSTRACT_CHARS].rsplit(" ", 1)[0] + " …"
        passages = []
        for n, chunk in enumerate(batch, start=1):
            text = " ".join(chunk.text.split())
            if len(text) > PASSAGE_CHARS:
                text = text[:PASSAGE_CHARS].rsplit(" ", 1)[0] + " …"
            passages.append(f"[{n}] Section: {chunk.section_path or '(none)'}\n{text}")
        user = (f"Title: {' '.join(title.split())}\nAbstract: {abstract or '(none)'}\n\n"
                f"Passages ({len(batch)}):\n\n" + "\n\n".join(passages) +
                f"\n\nWrite the context of each of the {len(batch)} passages.")
        return [{"role": "system", "content": CONTEXTUAL_SYSTEM}, {"role": "user", "content": user}]
