"""`forage ask "QUESTION"`: a short cited answer from the stored library (no search, no new papers).

A message that names something (at least ``QUESTION_WORDS`` content words) is a question and always
retrieves; only a shorter one ("hi", "who are you?") goes to an intent step that may call it chit-chat
(answered directly). A question retrieves passages from the store (hybrid BM25 + vector search); with
the relevance check (``relevance``: the store's similarity, the text's or a reranker, with its floors) passages far
from the question are dropped, as the Forager drops
them. One structured LLM call answers from the passages with citations to their numbers; citations
outside 1..k are removed and a sentence without a valid citation is dropped (the Writer's checks).
``extractive`` (the embedded model), or a model call that fails or leaves no cited sentence while a
passage is close enough to answer (the answer floor): the answer quotes the passages' sentences
closest to the question, each with its number. Otherwise — nothing retrieved, nothing close enough,
the model says the passages do not suffice — the answer says that the stored library does not hold
enough evidence and what was searched, instead of answering.

A scope (a :class:`ChunkFilter`, e.g. :func:`library_filter` for ``--library DIR``) limits the
passages to the documents it admits. ``--run RUN`` scopes to one run's documents (:func:`run_filter`: the
sources its report cites and the documents it read into its store), and each answer is appended to the
run's asks.jsonl (:func:`record_ask`), so a follow-up question is part of the run's record and is forgotten
with it.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from actors.steps.plan.requirements import content_words
from actors.steps.prompts import ASK_ANSWER_SYSTEM, ASK_INTENT_SYSTEM
from actors.steps.schemas import MOTIVE_CHARS, SENTENCE_CHARS, AskAnswer, AskIntent
from actors.steps.search.library import file_key
from actors.steps.text import block, prose_sentences, tidy
from actors.steps.write.citations import citation_numbers
from infra.embed.base import Embedder
from infra.errors import LLMOutputError, LLMTimeout
from infra.llm.base import LLM
from infra.private_files import private_append
from infra.rerank import Relevance
from infra.store.base import ChunkFilter, ChunkRecord, Store
from messages.run_state import RunState

INSUFFICIENT = ("The stored library does not hold enough evidence to answer this question; add papers on it "
                "(forage research or forage library add) and ask again.")
RUN_INSUFFICIENT = ("The run's evidence does not hold enough to answer this question; ask the whole library "
                    "(forage ask without --run) or start a new run on it.")
PASSAGES = 6
PASSAGE_CHARS = 900
QUESTION_WORDS = 2  # content words that make a message a question about the library (never chit-chat)
QUOTED = 2  # passages an extractive answer quotes


@dataclass(frozen=True)
class Cited:
    n: int
    chunk_id: str
    doc_id: str
    title: str
    section_path: str
    sha256: str = ""  # of the chunk's text when it was cited: `forage verify` finds a changed chunk by it

    @classmethod
    def of(cls, n: int, chunk: ChunkRecord, title: str) -> Cited:
        return cls(n, chunk.chunk_id, chunk.doc_id, title, chunk.section_path,
                   hashlib.sha256(chunk.text.encode("utf-8")).hexdigest())


@dataclass
class AskResult:
    kind: str  # "answer", "chit_chat" or "insufficient"
    text: str
    cited: list[Cited] = field(default_factory=list)
    llm_calls: int = 0
    removed_citations: int = 0

    @property
    def abstained(self) -> bool:
        """Whether the answer is "not enough evidence" (`forage ask` exits 3: a script tells it from an answer)."""
        return self.kind == "insufficient"

    def as_dict(self) -> dict[str, object]:
        """The answer, its kind and the cited passages as plain JSON values (`forage ask --json`, the MCP tool,
        the REST API and a run's asks.jsonl)."""
        return {"kind": self.kind, "text": self.text,
                "cited": [{"n": c.n, "chunk_id": c.chunk_id, "doc_id": c.doc_id, "title": c.title,
                           "section_path": c.section_path, "sha256": c.sha256} for c in self.cited]}


def library_filter(folder: Path | str) -> ChunkFilter:
    """The documents read from the PDFs under ``folder`` (subfolders too), as ``forage research
    --library`` and ``forage library add`` stored them: their keys are ``file:<resolved path>``."""
    return ChunkFilter(sources=(file_key(Path(folder).expanduser()).rstrip(os.sep) + os.sep,))


def run_filter(state: RunState) -> ChunkFilter:
    """One run's documents: the sources its report cites, then every document it read into its store (or
    found there already), each once. A run with none admits nothing."""
    ids = dict.fromkeys([*(s.doc_id for s in state.sources), *state.stored_doc_ids()])
    return ChunkFilter(doc_ids=tuple(ids))


def record_ask(asks_jsonl: Path, question: str, result: AskResult, asked_at: datetime | None = None) -> dict[str, object]:
    """Append one question and its answer (kind, text, cited passages) to a run's asks.jsonl (user-only, like
    the run's other files); returns the line's record."""
    record = {"asked_at": (asked_at or datetime.now(UTC)).isoformat(), "question": " ".join(question.split()),
              **result.as_dict()}
    private_append(asks_jsonl, json.dumps(record, ensure_ascii=False) + "\n")
    return record


def read_asks(asks_jsonl: Path) -> list[dict[str, object]]:
    """The questions asked of a run so far, first first ([] when none); a line that is not a JSON object
    (a torn write) is skipped."""
    try:
        lines = asks_jsonl.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []
    out = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            out.append(record)
    return out


class AskStep:
    """``scope``: only passages of the documents it admits (None: the whole store). ``where`` names what was
    searched in the "not enough evidence" answer, which starts with ``insufficient``."""

    def __init__(self, store: Store, embedder: Embedder, llm: LLM, *, passages: int = PASSAGES,
                 alpha: float = 0.5, scope: ChunkFilter | None = None, relevance: Relevance | None = None,
                 extractive: bool = False, where: str = "the store", insufficient: str = INSUFFICIENT) -> None:
        self.store, self.embedder, self.llm = store, embedder, llm
        self.where, self.insufficient = where, insufficient
        self.passages, self.alpha, self.scope = passages, alpha, scope
        self.relevance, self.extractive = relevance, extractive  # the relevance check (None: no check)
        self.floors = relevance.floors if relevance is not None else None

    async def ask(self, question: str) -> AskResult:
        question = " ".join(question.split())
        if not question:
            raise ValueError("the question is empty")
        calls = 0
        if len(content_words(question)) < QUESTION_WORDS:
            calls += 1
            intent = await self.llm.structured([{"role": "system", "content": ASK_INTENT_SYSTEM},
                                                {"role": "user", "content": block("MESSAGE", question)}], AskIntent)
            if intent.intent == "chit_chat":
                reply = tidy(intent.reply, MOTIVE_CHARS) or "Hello! Ask me a question about the papers in your library."
                return AskResult("chit_chat", reply, llm_calls=calls)
        vector = self.embedder.embed([question])[0]
        hits = self.store.hybrid(question, vector, self.passages, alpha=self.alpha, flt=self.scope)
        chunks: list[ChunkRecord] = [h.chunk for h in hits]
        similarity: dict[str, float] = {}
        if self.relevance is not None and self.floors is not None and chunks:
            scores = self.relevance.score(question, chunks)
            similarity = {c.chunk_id: score for c, score in zip(chunks, scores, strict=True)}
            chunks = [c for c in chunks if similarity[c.chunk_id] >= self.floors[1]]
        searched = (f" Searched: {len(hits)} passage(s) of {self.where} for the question"
                    + (f", {len(chunks)} close enough to it" if self.floors is not None else "") + ".")
        if not chunks:
            return AskResult("insufficient", self.insufficient + searched, llm_calls=calls)
        titles = {}
        for c in chunks:
            if c.doc_id not in titles:
                doc = self.store.get_document(c.doc_id)
                titles[c.doc_id] = doc.title if doc else c.doc_id[:12]
        parts = [f"[{i}] {titles[c.doc_id]} — {c.section_path}\n"
                 f"{block('PASSAGE', ' '.join(c.text.split())[:PASSAGE_CHARS])}" for i, c in enumerate(chunks, 1)]
        answerable = [c for c in chunks if self.floors is None or similarity[c.chunk_id] >= self.floors[0]]
        if self.extractive:
            return self._quoted(question, answerable, titles, calls, searched)
        calls += 1
        try:
            draft: AskAnswer | None = await self.llm.structured([
                {"role": "system", "content": ASK_ANSWER_SYSTEM},
                {"role": "user", "content": f"{block('QUESTION', question)}\n\nPassages 1 to {len(chunks)}:\n\n"
                                            + "\n\n".join(parts)}], AskAnswer)
        except (LLMOutputError, LLMTimeout):
            draft = None
        if draft is None or (draft.sufficient and self.floors is not None and not _cited(draft, len(chunks))):
            # the model failed, or claimed an answer it could not cite: the passages close enough speak instead
            return self._quoted(question, answerable, titles, calls, searched)
        k = len(chunks)
        removed = 0
        sentences: list[tuple[str, list[int]]] = []
        for s in draft.sentences if draft.sufficient else []:
            wanted = list(dict.fromkeys([*citation_numbers(s.sentence), *s.sources]))
            labels = [n for n in wanted if 1 <= n <= k]
            removed += len(wanted) - len(labels)
            text = tidy(s.sentence, SENTENCE_CHARS).rstrip(".;:, ")
            if text and labels:
                sentences.append((text, labels))
        if not sentences:
            return AskResult("insufficient", self.insufficient + searched, llm_calls=calls, removed_citations=removed)
        order: dict[int, int] = {}  # passage label -> citation number in order of first use
        for _, labels in sentences:
            for label in labels:
                order.setdefault(label, len(order) + 1)
        text = " ".join(f"{t} {''.join(f'[{order[n]}]' for n in labels)}." for t, labels in sentences)
        cited = [Cited.of(order[label], chunks[label - 1], titles[chunks[label - 1].doc_id]) for label in order]
        return AskResult("answer", text, cited, llm_calls=calls, removed_citations=removed)

    def _quoted(self, question: str, chunks: list[ChunkRecord], titles: dict[str, str], calls: int,
                searched: str) -> AskResult:
        """An answer quoted from the ``QUOTED`` best passages: each one's sentence sharing the most content
        words with the question, numbered [1], [2] …; insufficient when there is no passage."""

        wanted = content_words(question)
        quotes: list[tuple[str, ChunkRecord]] = []
        for chunk in chunks:
            candidates = prose_sentences(chunk.text)
            if candidates:
                best = min(enumerate(candidates), key=lambda p: (-len(content_words(p[1]) & wanted), p[0]))[1]
                if best not in (q for q, _ in quotes):
                    quotes.append((best[:SENTENCE_CHARS].rstrip(), chunk))
            if len(quotes) == QUOTED:
                break
        if not quotes:
            return AskResult("insufficient", self.insufficient + searched, llm_calls=calls)
        text = "Quoted from the library: " + " ".join(f"“{q.rstrip('.;:, ')}” [{n}]." for n, (q, _) in
                                                      enumerate(quotes, start=1))
        cited = [Cited.of(n, c, titles[c.doc_id]) for n, (_, c) in enumerate(quotes, start=1)]
        return AskResult("answer", text, cited, llm_calls=calls)


def _cited(draft: AskAnswer, k: int) -> bool:
    """Whether some sentence of the draft cites a passage number 1..k."""

    return any(1 <= n <= k for s in draft.sentences for n in [*s.sources, *citation_numbers(s.sentence)])
