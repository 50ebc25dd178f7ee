"""A Forager's LLM sub-steps on whole documents: their summaries (:class:`Summaries`) and the deep dives into them
(:class:`DeepDives`).

* **summarize** — every document with a verdict that stands gets a short summary, once, from its title, abstract
  (else its introduction's first chunk) and its list of sections; a summary being made is waited for, not asked
  for again.
* **deep dive** — up to ``forage.max_deep_dives`` documents with interesting chunks (or unconfirmed answers) that
  still have an unjudged chunk: a relevance gate; if it says go on, the LLM picks up to
  ``forage.deep_dive_sections`` of the document's real section paths (invented ones are ignored) and up to
  ``forage.deep_dive_chunks`` chunks of each are judged *answers* / *unrelated*.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Sequence

from actors.steps.forage.ledger import Iteration, Ledger
from actors.steps.forage.retrieval import Retrieval
from actors.steps.forage.runtime import Doc, Runtime
from actors.steps.prompts import DIVE_GATE_SYSTEM, DIVE_SECTIONS_SYSTEM, SUMMARIZE_SYSTEM
from actors.steps.schemas import MAX_SECTIONS_CHOSEN, DocumentGist, RelevanceGate, SectionChoice
from actors.steps.text import block, clip, declaration
from infra.llm.slotted import rounds_ahead
from infra.settings import Settings
from infra.store.base import ChunkRecord
from messages.forage import ChunkJudgement
from messages.plan import Requirement
from messages.status import Stage

CONTEXT_CHARS = 2500  # abstract / introduction shown when summarizing
MAX_SECTIONS_SHOWN = 80
_INTRO = re.compile(r"\bintroduction\b", re.IGNORECASE)
# Rounds of dependent LLM calls, for the order in which an endpoint that queues calls serves them (the chain
# with more rounds ahead first, infra.llm.slotted.rounds_ahead): a deep dive is summary, gate, sections, judge.
DIVE_ROUNDS = 4

#: judging chunks of a deep dive: (requirement, chunks, stage, iteration, relevance=…, record=False) -> verdicts
JudgeAll = Callable[..., Awaitable[list[ChunkJudgement]]]
#: what judging chunks needs before its LLM calls: (requirement, chunks) -> chunk id -> relevance
Prepare = Callable[[Requirement, Sequence[ChunkRecord]], Awaitable[dict[str, float]]]


def _norm_path(path: str) -> str:
    return " ".join(path.casefold().split())


class Summaries:
    """doc id → its summary (``done``), made once per document for one requirement."""

    def __init__(self, rt: Runtime, retrieval: Retrieval) -> None:
        self.rt = rt
        self.retrieval = retrieval
        self.done: dict[str, str] = {}
        self._making: dict[str, asyncio.Future[None]] = {}  # doc_id -> its summary being made now

    async def make(self, req: Requirement, doc_ids: Sequence[str], it: Iteration) -> None:
        """Summaries of ``doc_ids`` that have none yet (concurrent where the LLM queues calls:
        :meth:`Runtime.together`)."""
        await self.rt.together([self.summary(req, doc_id, it) for doc_id in doc_ids if doc_id not in self.done])

    async def summary(self, req: Requirement, doc_id: str, it: Iteration) -> None:
        """The document's summary, made once: a summary already being made (by another step running
        at the same time) is waited for, not asked for again."""
        if doc_id in self.done:
            return
        task = self._making.get(doc_id)
        if task is None:
            task = self._making[doc_id] = asyncio.ensure_future(self._summarize(req, doc_id, it))
            task.add_done_callback(lambda _, d=doc_id: self._making.pop(d, None))
        await asyncio.shield(task)

    async def _summarize(self, req: Requirement, doc_id: str, it: Iteration) -> None:
        doc = self.rt.doc(doc_id)
        context_label, context, paths = await self.rt.thread(self._context, doc)
        sections = "\n".join(f"- {p}" for p in paths[:MAX_SECTIONS_SHOWN]) or "(none)"
        user = (f"Title: {doc.title}\n\n{block(context_label, clip(context, CONTEXT_CHARS))}\n\n"
                f"{block('SECTIONS', sections)}\n\n"
                "Summarize what this document is about in two or three sentences.")
        gist = await self.rt.ask([
            {"role": "system", "content": SUMMARIZE_SYSTEM},
            {"role": "user", "content": user}], DocumentGist, f"summarize {doc_id[:16]}", it)
        if gist is not None:
            self.done[doc_id] = " ".join(gist.summary.split())

    def _context(self, doc: Doc) -> tuple[str, str, list[str]]:
        """What a summary reads besides the title (store reads: called in a thread): the abstract, else the
        introduction's first chunk, with its label; the section paths."""
        context_label, context = "ABSTRACT", doc.abstract.strip()
        if not context:
            first = self._intro_chunk(doc)
            context_label, context = "INTRODUCTION", first.text if first else ""
        return context_label, context, self.rt.sections(doc)

    def _intro_chunk(self, doc: Doc) -> ChunkRecord | None:
        """The first chunk of the introduction, else the document's first chunk."""
        for path in self.rt.sections(doc):
            if _INTRO.search(path):
                chunks = self.retrieval.section_chunks(doc.doc_id, path, 1, exclude=())
                if chunks:
                    return chunks[0]
        return self.retrieval.first_chunk(doc.doc_id)


class DeepDives:
    """The deep dives of one requirement: each document's gate answer (``gate``) and the documents done
    (``dived``: the gate said no, or sections were judged)."""

    def __init__(self, settings: Settings, rt: Runtime, retrieval: Retrieval, ledger: Ledger, summaries: Summaries,
                 judge_all: JudgeAll, prepare: Prepare) -> None:
        self.cfg = settings.forage
        self.rt = rt
        self.retrieval = retrieval
        self.ledger = ledger
        self.summaries = summaries
        self.judge_all = judge_all
        self.prepare = prepare
        self.gate: dict[str, bool] = {}  # doc_id -> the relevance gate's answer
        self.dived: set[str] = set()  # deep dive finished (gate said no, or sections judged)

    async def queue(self) -> list[str]:
        """This iteration's deep dives: the first ``forage.max_deep_dives`` documents of the ledger's deep-dive queue
        that still have a chunk to read (references aside). A document whose every chunk is judged already (an
        abstract-only record, a short note) is left out: its gate and section choice could only lead to nothing."""
        queue = self.ledger.deep_dive_queue(self.dived)
        if not queue or self.cfg.max_deep_dives <= 0:
            return []
        return await self.rt.thread(self.retrieval.with_unread_chunks, queue, self.ledger.judged_by_doc(),
                                  self.cfg.max_deep_dives)

    async def dive(self, req: Requirement, doc_id: str, it: Iteration) -> list[ChunkJudgement]:
        """Gate, section choice, judging of the chosen sections' chunks; the judgements, which the
        caller records (deep dives of different documents may run concurrently)."""
        doc = self.rt.doc(doc_id)
        if doc_id not in self.gate:
            motives = "\n".join(f"- {j.motive}" for j in self.ledger.verdicts()
                                if j.doc_id == doc_id and j.tag == "interesting" and j.motive) or "- (none)"
            with rounds_ahead(DIVE_ROUNDS - 1 + it.follow):  # gate, sections, judge, then what follows
                gate = await self.rt.ask([
                    {"role": "system", "content": DIVE_GATE_SYSTEM},
                    {"role": "user", "content": (
                        f"Requirement: {req.text}\n\nDocument: {doc.title}\n"
                        f"{block('SUMMARY', self.summaries.done.get(doc_id, '') or '(no summary)')}\n"
                        f"Why passages of it looked related:\n{block('MOTIVES', motives)}\n\n"
                        "Should the search continue inside this document? Give continue_search and a short reason.")}],
                    RelevanceGate, f"deep dive gate {doc_id[:16]}", it)
            if gate is None:
                return []  # tried again next iteration
            self.gate[doc_id] = gate.continue_search
            if not gate.continue_search:
                self.dived.add(doc_id)
                self.rt.emit(Stage.FORAGE, "deep_dive", f"{req.id}: not diving into {doc.title!r}: {gate.reason}",
                          iteration=it.number, requirement_id=req.id, doc_id=doc_id, title=doc.title,
                          continue_search=False, reason=gate.reason, sections=[], ignored_sections=[])
                return []
        elif not self.gate[doc_id]:
            self.dived.add(doc_id)
            return []

        available = await self.rt.thread(self.rt.sections, doc)
        n_sections = min(self.cfg.deep_dive_sections, MAX_SECTIONS_CHOSEN)
        chosen: list[str] = []
        ignored: list[str] = []
        if available and n_sections > 0:
            shown = "\n".join(f"- {p}" for p in available[:MAX_SECTIONS_SHOWN])
            with rounds_ahead(DIVE_ROUNDS - 2 + it.follow):
                choice = await self.rt.ask([
                    {"role": "system", "content": DIVE_SECTIONS_SYSTEM},
                    {"role": "user", "content": (
                        f"Requirement: {req.text}\n\nDocument: {doc.title}\n{block('SECTIONS', shown)}\n\n"
                        f"Choose at most {n_sections} section paths from the list.")}],
                    SectionChoice, f"deep dive sections {doc_id[:16]}", it)
            if choice is None:
                return []  # the gate's answer is kept; the choice is tried again next iteration
            chosen, ignored = self.valid_sections(choice.sections, available, n_sections)

        exclude = tuple(self.ledger.judgements)

        def pick() -> dict[str, ChunkRecord]:
            picked: dict[str, ChunkRecord] = {}
            for path in chosen:
                for chunk in self.retrieval.section_chunks(doc_id, path, self.cfg.deep_dive_chunks, exclude=exclude):
                    if not declaration(chunk.section_path):  # "Conclusions > Funding" under "Conclusions"
                        picked.setdefault(chunk.chunk_id, chunk)
            return picked

        async with self.rt.one_place():
            picked = await self.rt.thread(pick) if chosen else {}
            relevance = await self.prepare(req, list(picked.values()))
        with rounds_ahead(DIVE_ROUNDS - 3 + it.follow):
            judged = await self.judge_all(req, list(picked.values()), "deep_dive", it, record=False,
                                           relevance=relevance)
        answers = sum(1 for j in judged if j.tag == "answers")
        self.dived.add(doc_id)
        self.rt.emit(Stage.FORAGE, "deep_dive", f"{req.id}: read {len(chosen)} sections of {doc.title!r}",
                  iteration=it.number, requirement_id=req.id, doc_id=doc_id, title=doc.title,
                  continue_search=True, sections=chosen, ignored_sections=ignored, answers=answers)
        return judged

    @staticmethod
    def valid_sections(proposed: Sequence[str], available: Sequence[str], limit: int) -> tuple[list[str], list[str]]:
        """The proposed paths that exist (matched ignoring case and spacing), at most ``limit``; and the rest."""
        index = {_norm_path(p): p for p in available}
        chosen: list[str] = []
        ignored: list[str] = []
        for path in proposed:
            real = index.get(_norm_path(path))
            if real is None:
                ignored.append(path)
            elif real not in chosen and len(chosen) < limit:
                chosen.append(real)
        return chosen, ignored
