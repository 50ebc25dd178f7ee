"""Foraging one requirement (Information Foraging Theory, thesis "Agentic RAG").

A :class:`ForageStep` belongs to one requirement and lives for the whole run (inside a Forager
actor). Each iteration it runs these nodes:

* **start** — two-stage retrieval (papers, then their chunks, plus the chunk search over the whole store:
  :mod:`actors.steps.forage.retrieval`), new chunks only (never reference sections), deduplicated.
* **classify** — the new chunks are judged in batches of ``forage.judge_batch`` (:mod:`actors.steps.forage.judging`):
  ONE structured LLM call judges several numbered passages for the requirement, each *answers* / *interesting* /
  *unrelated* with a motive and a kind (*method* or mechanism, quantitative *result*, or
  *background*). Passages left without a valid verdict (missing, unknown number, bad tag) are
  re-judged once in one smaller call; still missing, they are recorded in ``failed_steps`` and
  tried again next iteration. A whole call that fails leaves its passages for the next iteration. The relevance
  check (:class:`~actors.steps.forage.judging.RelevanceCheck`) weighs each verdict.
* **summarize** (:mod:`actors.steps.forage.reading`) — every document with an answers/interesting chunk gets a
  short summary, once,
  from its title, abstract (else its introduction's first chunk) and its list of sections.
  Independent calls (the judging batches of one round, the summaries, the deep dives of different
  documents, and a reformulation that will run whatever the deep dives find) run concurrently when
  the LLM queues calls for a slot (``ray.llm_slots``), each document's deep dive right after its own
  summary; else one after another, stage by stage. Queued calls carry the rounds of dependent calls
  still ahead of the requirement (the endpoint serves the longest chain first) and summaries no
  later call reads are background work, which nothing waits for (``infra.llm.slotted``).
* **deep dive** (:mod:`actors.steps.forage.reading`) — up to ``forage.max_deep_dives`` documents with interesting
  chunks (or unconfirmed answers) that still have an unjudged chunk (an abstract-only record whose chunks were all
  judged is not dived into: nothing could come of it but calls): a relevance gate; if it says go on, the
  LLM picks up to ``forage.deep_dive_sections`` of the document's real section paths (invented ones
  are ignored) and up to ``forage.deep_dive_chunks`` chunks of each are judged *answers* /
  *unrelated* (batched the same way).
* **reformulate** — when fewer than ``forage.min_papers`` distinct papers answer, the LLM writes
  another query and retrieval + classify run once more with it (at most once per iteration;
  recorded as a ``reformulated`` event).
* **end** — from the judgement ledger (:mod:`actors.steps.forage.ledger`): the coverage, where the check is
  calibrated the probability that the library answers the requirement, from the scores of the passages shown to the
  judge and its verdicts weighed by its rates (:meth:`~actors.steps.forage.credit.JudgeCredit.coverage`), else the
  ladder (:meth:`~actors.steps.forage.ledger.Ledger.ladder`); one :class:`Evidence` per useful document, confirmed
  answers first (methods and results above background), each group in the store's hybrid ranking of the documents
  for the requirement; the number of distinct papers with a confirmed answer.

A follow-up run (``forage research --from RUN``) scopes every search to ``request.doc_ids`` (the
earlier run's documents and its own) and judges ``request.seed_chunk_ids`` (the earlier run's
evidence) first, before the start node's retrieval, each once.

The result is cumulative over iterations (coverage, evidence, ``llm_calls``, ``failed_steps``),
except ``judgements``, which lists the chunks judged *in this iteration*, and ``new_passages``, how many of them
reached the topic floor: the Orchestrator reads 0 as "this iteration brought the requirement nothing new" (it is
settled). An LLM call that fails (LLMOutputError, LLMTimeout) is
recorded in ``failed_steps`` and its chunks or step skipped — skipped chunks are tried again next
iteration. Any other exception propagates; the Forager actor marks the requirement failed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

from actors.steps.events import Emit, null_emit
from actors.steps.forage.judging import BatchJudge, RelevanceCheck
from actors.steps.forage.ledger import Iteration, Ledger
from actors.steps.forage.reading import DIVE_ROUNDS, DeepDives, Summaries
from actors.steps.forage.retrieval import Retrieval
from actors.steps.forage.runtime import Runtime
from actors.steps.prompts import REFORMULATE_SYSTEM
from actors.steps.schemas import DocumentGist, Reformulation, RelevanceGate, SectionChoice, batch_schema
from actors.steps.text import block, declaration, echoes_prompt, search_query
from infra.embed.base import Embedder
from infra.errors import StoreError
from infra.llm.base import LLM
from infra.llm.slotted import background_calls, rounds_ahead
from infra.rerank import EmbeddingSimilarity, Relevance
from infra.settings import Settings
from infra.store.base import ChunkFilter, ChunkRecord, Store
from messages.forage import ChunkJudgement, Evidence, ForageRequest, RequirementCoverage
from messages.plan import Requirement
from messages.status import Stage

# Rounds of dependent LLM calls (infra.llm.slotted.rounds_ahead; a deep dive's: reading.DIVE_ROUNDS): a reformulation
# is reformulate, judge, summaries; an iteration starts by judging, then dives, then may reformulate.
REFORMULATE_ROUNDS = 3
START_ROUNDS = 1 + DIVE_ROUNDS + REFORMULATE_ROUNDS


class ForageStep:
    """Forages one requirement across iterations, remembering what it judged."""

    def __init__(self, settings: Settings, store: Store, embedder: Embedder, llm: LLM,
                 emit: Emit = null_emit, relevance: Relevance | None = None,
                 cpu: Callable[[tuple[float, ...]], AbstractAsyncContextManager[Any]] | None = None) -> None:
        self.settings = settings
        self.cfg = settings.forage
        self.store = store
        self.embedder = embedder
        self.llm = llm
        self.emit = emit
        self.requirement: Requirement | None = None
        self.rt = Runtime(llm, store, emit, cpu)  # the CPU gate, counted LLM calls, failed steps, documents read
        self._vector: list[float] | None = None
        self._scope: tuple[str, ...] | None = None  # doc_ids every search is limited to (None: the whole store)
        # the relevance check: its signal (embedding similarity unless a reranker is given) and its (answer, topic)
        # floors; -inf: no check
        self.relevance = relevance or EmbeddingSimilarity(embedder, settings.similarity_floors("text"),
                                                          settings.answer_confirmation("text"),
                                                          settings.answer_curve("text"))
        self.check = RelevanceCheck(settings, self.relevance)
        # every verdict, all iterations
        self.ledger = Ledger(related_floor=self.check.floors[0], credit=self.check.credit,
                             shown_floor=self.check.floors[1])
        self.retrieval = Retrieval(settings, store, embedder)
        self.judge = BatchJudge(self.rt.ask, self.rt.step_failed, lambda doc_id: self.rt.doc(doc_id).title)
        self.summaries = Summaries(self.rt, self.retrieval)
        self.dives = DeepDives(settings, self.rt, self.retrieval, self.ledger, self.summaries, self._judge_all,
                               self._prepare)
        self.overruled = 0  # verdicts the relevance check overruled, all iterations
        self._evidence_rank: dict[str, int] = {}  # doc id -> its place in the retrieval ranking (_rank_evidence)

    async def warm(self, requirement: Requirement | None = None) -> None:
        """Open what the first iteration reads before it starts: the store's tables, the LLM's way to its server
        where it has one to prepare (a slotted LLM's endpoint actors), and with ``requirement`` (this step's from
        now on) its embedding."""
        await self.rt.thread(self.store.open)  # through the CPU gate: the gate is found (or made) now too
        await self.llm.warm([batch_schema(self.cfg.judge_batch), batch_schema(self.cfg.judge_batch, deep=True),
                             DocumentGist, RelevanceGate, SectionChoice, Reformulation])
        if requirement is not None:
            await self._requirement_vector(self._bind(requirement))

    # -- the iteration ------------------------------------------------------------------------------
    async def forage(self, request: ForageRequest) -> RequirementCoverage:
        """One iteration for ``request.requirement``; returns the cumulative coverage."""
        req = self._bind(request.requirement)
        it = Iteration(request.iteration)
        self.rt.new_iteration()
        self.emit(Stage.FORAGE, "started", f"foraging {req.id}", iteration=it.number, requirement_id=req.id,
                  judged_before=len(self.ledger))

        # start + classify (a follow-up run's seeds first)
        self._scope = request.doc_ids
        async with self.rt.one_place():  # retrieval and the relevance check, up to the first LLM call
            seeds = (await self.rt.thread(self.retrieval.seeds, request.seed_chunk_ids, self.ledger, self._scope)
                     if request.seed_chunk_ids else [])
            found = await self._retrieve(req, req.text, await self._requirement_vector(req), it)
            chunks = list({c.chunk_id: c for c in (*seeds, *found)}.values())
            relevance = await self._prepare(req, chunks)
        with rounds_ahead(START_ROUNDS):
            await self._judge_all(req, chunks, "start", it, relevance=relevance)
        counts = {tag: sum(1 for j in it.judged if j.tag == tag) for tag in ("answers", "interesting", "unrelated")}
        self.emit(Stage.FORAGE, "judged", f"{req.id}: judged {len(it.judged)} of {len(chunks)} new chunks",
                  iteration=it.number, requirement_id=req.id, retrieved=len(chunks),
                  failed=len(chunks) - len(it.judged), llm_calls_iteration=it.calls, **counts)

        if self.llm.queues_calls:
            await self._summarize_dive_reformulate_at_once(req, it)
        else:
            # summarize every useful document (cached; a failed summary is tried again next iteration)
            await self.summaries.make(req, self.ledger.useful_docs(), it)

            # deep dive
            dives = [await self.dives.dive(req, doc_id, it) for doc_id in await self.dives.queue()]
            for judged in dives:
                self.ledger.record(judged, it)

            # reformulate: too few papers answer
            if self._too_few_papers():
                await self._reformulate(req, it)

        # end
        await self._rank_evidence(req, it)
        coverage = self.ledger.coverage()
        evidence = self.evidence()
        papers = self.ledger.answering_papers()
        self.emit(Stage.FORAGE, "coverage", f"{req.id}: coverage {coverage:.2f}", iteration=it.number,
                  requirement_id=req.id, coverage=coverage, llm_calls=self.rt.llm_calls, llm_calls_iteration=it.calls,
                  evidence_documents=len(evidence), answering_papers=papers, overruled=self.overruled,
                  unconfirmed=self.ledger.unconfirmed(),
                  judged_total=len(self.ledger),
                  judged_iteration=len(it.judged))
        return RequirementCoverage(
            run_id=request.run_id, requirement=req, iteration=it.number, coverage=coverage, evidence=evidence,
            judgements=tuple(it.judged), llm_calls=self.rt.llm_calls, answering_papers=papers,
            failed_steps=tuple(self.rt.failed_steps), overruled=self.overruled, unconfirmed=self.ledger.unconfirmed(),
            new_passages=sum(1 for j in it.judged if j.relevance is None or j.relevance >= self.check.floors[1]))

    async def _summarize_dive_reformulate_at_once(self, req: Requirement, it: Iteration) -> None:
        """Summarize, deep dive and reformulate with an LLM that queues calls: the same calls as one
        after another, started as soon as what they need is known. Each document to dive into is
        summarized and then dived into on its own chain (its gate reads its summary, not the other
        documents'); the other useful documents are summarized meanwhile, as background calls that
        nothing below waits for; and when the deep dives
        cannot bring enough answering papers (answering papers + documents to dive into that have no
        answer < ``forage.min_papers``) the reformulation runs at the same time, since it will run
        whatever they find. The chain of dependent calls of one requirement is then 5 calls long
        instead of 8 (judge, summarize, gate, sections, judge — beside reformulate, judge, summarize),
        and a requirement waiting for its next call holds up nothing else."""
        queue = await self.dives.queue()
        answered = self.ledger.answered_docs()
        certain = self.cfg.min_papers > 0 and len(answered | set(queue)) < self.cfg.min_papers
        reformulation = asyncio.ensure_future(self._reformulate(req, it)) if certain else None
        # with a reformulation that may follow the dives, this requirement's chain is the longest: its calls first
        possible = not certain and self.cfg.min_papers > 0 and len(answered) < self.cfg.min_papers
        it.follow = REFORMULATE_ROUNDS if possible else 0

        async def dive(doc_id: str) -> list[ChunkJudgement]:
            with rounds_ahead(DIVE_ROUNDS + it.follow):
                await self.summaries.summary(req, doc_id, it)
            return await self.dives.dive(req, doc_id, it)

        async def leaf(doc_id: str) -> None:
            with background_calls():  # nothing in this iteration reads it: served when no chain call waits
                await self.summaries.summary(req, doc_id, it)

        # the other useful documents' summaries run beside everything else; nothing below waits for them
        leaves = [asyncio.ensure_future(leaf(doc_id)) for doc_id in self.ledger.useful_docs() if doc_id not in queue]
        try:
            dives = await asyncio.gather(*(dive(doc_id) for doc_id in queue))
            judged_now = {j.chunk_id for j in it.judged}
            for judged in dives:  # in queue order; a chunk the reformulation judged meanwhile counts once
                self.ledger.record([j for j in judged if j.chunk_id not in judged_now], it)
            if reformulation is not None:
                await reformulation
            elif self._too_few_papers():
                await self._reformulate(req, it)
            await asyncio.gather(*leaves)
        except BaseException:
            for task in (reformulation, *leaves):
                if task is not None:
                    task.cancel()
            raise

    def _too_few_papers(self) -> bool:
        return self.cfg.min_papers > 0 and self.ledger.answering_papers() < self.cfg.min_papers

    def _bind(self, requirement: Requirement) -> Requirement:
        if self.requirement is None:
            self.requirement = requirement
            self.rt.requirement_id = requirement.id
        elif requirement != self.requirement:
            raise ValueError(f"this ForageStep forages {self.requirement.id} ({self.requirement.text!r}); "
                             f"it cannot take {requirement.id} ({requirement.text!r})")
        return requirement

    # -- end node: cumulative results ------------------------------------------------------------------
    def coverage(self) -> float:
        """The requirement's coverage so far (:meth:`Ledger.coverage`)."""
        return self.ledger.coverage()

    def evidence(self) -> tuple[Evidence, ...]:
        """One Evidence per document whose verdicts stand (:meth:`Ledger.evidence`), in the retrieval ranking of
        :meth:`_rank_evidence`."""
        return self.ledger.evidence(lambda doc_id: self.rt.doc(doc_id).title, self.summaries.done, self._evidence_rank)

    async def _rank_evidence(self, req: Requirement, it: Iteration) -> None:
        """Rank the documents with evidence that stands by the store's own search for the requirement (hybrid:
        BM25 and the embedding with its sentence windows, the run's fusion; BM25 alone without a query vector),
        each document at its best chunk's place, over those documents only. On SciFact the hybrid's first hit is
        relevant more often than the passage either similarity puts first (bench/relevance_signal.py). A
        document the search does not reach comes after the ranked ones. A failed search is a failed step (the
        evidence keeps the ranking it had), not a failed requirement: it only orders what was found."""
        docs = tuple(self.ledger.useful_docs())
        if len(docs) < 2:
            self._evidence_rank = {d: 0 for d in docs}
            return
        vector = await self._requirement_vector(req)
        try:
            self._evidence_rank = await self.rt.thread(self.retrieval.evidence_rank, req.text, vector, docs)
        except StoreError as exc:
            self.rt.step_failed(it, "rank_evidence", f"iteration {it.number}: rank evidence: {exc}")

    # -- start node ------------------------------------------------------------------------------------
    async def _requirement_vector(self, req: Requirement) -> list[float] | None:
        if self._vector is None and (self.cfg.vector_k > 0 or self.retrieval.paper_stage()):
            self._vector = (await self.rt.thread(self.embedder.embed, [req.text]))[0]
        return self._vector

    async def _retrieve(self, req: Requirement, query: str, vector: list[float] | None,
                        it: Iteration) -> list[ChunkRecord]:
        """Chunks for ``query`` (:meth:`Retrieval.candidates`): new chunks only, no references and no declarations
        (acknowledgements, funding …: :func:`declaration`), deduplicated (first seen kept)."""
        flt = ChunkFilter(exclude_chunk_ids=tuple(self.ledger.judgements), doc_ids=self._scope)
        scope = set(self._scope) if self._scope is not None else None
        summaries = {d: s for d, s in self.summaries.done.items() if scope is None or d in scope}  # a snapshot
        found, papers, by_summary = await self.rt.thread(self.retrieval.candidates, query, vector, flt, self._scope,
                                                       summaries)
        fresh: dict[str, ChunkRecord] = {}
        for hit in found:
            chunk = hit.chunk
            if chunk.chunk_id in self.ledger or chunk.section_kind == "references" or declaration(chunk.section_path):
                continue
            fresh.setdefault(chunk.chunk_id, chunk)
        self.emit(Stage.FORAGE, "retrieved", f"{req.id}: {len(fresh)} new chunks from {len(papers)} top papers "
                                             f"and the chunk search", iteration=it.number, requirement_id=req.id,
                  query=query, papers=papers, papers_by_summary=by_summary[: self.cfg.paper_k],
                  candidates=len(found), new_chunks=len(fresh))
        return list(fresh.values())

    # -- classify --------------------------------------------------------------------------------------
    async def _judge_all(self, req: Requirement, chunks: Sequence[ChunkRecord], stage: str,
                         it: Iteration, *, relevance: dict[str, float], record: bool = True) -> list[ChunkJudgement]:
        """Judge ``chunks`` in batches of ``forage.judge_batch`` (one LLM call per batch). The batches
        are independent, so with an LLM that queues calls their calls run concurrently (see
        :meth:`_together`); judgements are recorded in chunk order whatever order the answers come in.
        ``relevance``: what :meth:`_prepare` gave for these chunks (read with the CPU steps before the calls)."""
        shown, off_topic = self.check.shown(chunks, relevance)
        size = self.cfg.judge_batch
        batches = [list(shown[start:start + size]) for start in range(0, len(shown), size)]
        answers = await self.rt.together([self.judge.judge(req, b, stage, it) for b in batches])
        order = {chunk.chunk_id: n for n, chunk in enumerate(chunks)}
        by_id = {chunk.chunk_id: chunk for chunk in chunks}
        judged = [self.check.checked(j, relevance.get(j.chunk_id), by_id[j.chunk_id], req)
                  for batch in answers for j in batch]
        judged += [self.check.off_topic(c, relevance[c.chunk_id], stage) for c in off_topic]
        out = sorted(judged, key=lambda j: order[j.chunk_id])
        overruled = [j for j in out if j.model_tag is not None]
        rekinded = [j for j in out if j.model_kind is not None]
        unconfirmed = [j for j in out if j.tag == "answers" and j.confirmed is False]
        self.overruled += len(overruled)
        if off_topic or overruled or rekinded or unconfirmed:
            self.emit(Stage.FORAGE, "checked", f"{req.id}: relevance check: {len(off_topic)} passage(s) off-topic, "
                                               f"{len(overruled)} verdict(s) overruled"
                      + (f", {len(unconfirmed)} answer(s) not confirmed by retrieval signals (not counted for "
                         "coverage)" if unconfirmed else "")
                      + (f", {len(rekinded)} method/result passage(s) from an introduction or background section "
                         "counted as background" if rekinded else ""), iteration=it.number,
                      requirement_id=req.id, judged_at=stage, floors=list(self.check.floors),
                      answer_floor=self.check.answer_floor, judge_rates=[self.check.credit.tpr, self.check.credit.fpr],
                      off_topic=[{"chunk_id": c.chunk_id, "relevance": round(relevance[c.chunk_id], 4)}
                                 for c in off_topic],
                      overruled=[{"chunk_id": j.chunk_id, "model_tag": j.model_tag, "tag": j.tag,
                                  "relevance": round(j.relevance or 0.0, 4)} for j in overruled],
                      confirmation=self.check.confirmation,
                      unconfirmed=[{"chunk_id": j.chunk_id, "relevance": round(j.relevance or 0.0, 4)}
                                   for j in unconfirmed],
                      kinds_overruled=[{"chunk_id": j.chunk_id, "model_kind": j.model_kind, "kind": j.kind,
                                        "section": by_id[j.chunk_id].section_path} for j in rekinded])
        if record:
            self.ledger.record(out, it)
        return out

    async def _prepare(self, req: Requirement, chunks: Sequence[ChunkRecord]) -> dict[str, float]:
        """What judging ``chunks`` needs before its LLM calls: their relevance scores (:meth:`_relevance`) and
        their documents read (:meth:`_load_docs`), on one place of the CPU gate."""
        async with self.rt.one_place():
            relevance, _ = await asyncio.gather(self._relevance(req, chunks),
                                                self.rt.load_docs([c.doc_id for c in chunks]))
        return relevance

    async def _relevance(self, req: Requirement, chunks: Sequence[ChunkRecord]) -> dict[str, float]:
        """chunk id -> the relevance signal's score of the chunk's text for the requirement (embedding
        similarity or the reranker); empty when the check is off."""
        if not self.cfg.relevance_check or not chunks:
            return {}
        scores = await self.rt.thread(self.relevance.score, req.text, chunks)
        return {c.chunk_id: score for c, score in zip(chunks, scores, strict=True)}

    # -- reformulate -----------------------------------------------------------------------------------
    async def _reformulate(self, req: Requirement, it: Iteration) -> None:
        """Another query from the LLM, then retrieval and classify once more (once per iteration)."""
        before = self.ledger.answering_papers()
        seen = [self.rt.doc(d).title for d in self.ledger.useful_docs()][:10]
        listed = "\n".join(f"- {t}" for t in seen) or "- (none)"
        # reformulate, judge, summaries; the judging waits for a search first: no slot kept for it
        asked = (f"Only {before} paper(s) answer it so far (at least {self.cfg.min_papers} are wanted). Papers found "
                 f"on the topic:\n{block('TITLES', listed)}\n\nWrite one different search query for the requirement: "
                 "other words, the method or measurement names a paper would use.")
        with rounds_ahead(REFORMULATE_ROUNDS, next_at_once=False):
            answer = await self.rt.ask([
                {"role": "system", "content": REFORMULATE_SYSTEM},
                {"role": "user", "content": f"Requirement: {req.text}\n\n{asked}"}],
                Reformulation, "reformulate", it)
        if answer is None:
            return
        query = search_query(answer.query)  # a weak model's slug or repetition loop made a query, or ''
        if (not query or query.casefold() == req.text.casefold()
                or echoes_prompt(query, REFORMULATE_SYSTEM + asked.replace(listed, ""), f"{req.text} {listed}")):
            self.emit(Stage.FORAGE, "reformulated", f"{req.id}: no new query", iteration=it.number,
                      requirement_id=req.id, query=query, retrieved=0, judged=0, answering_papers_before=before,
                      answering_papers_after=before)
            return
        async with self.rt.one_place():
            vector = (await self.rt.thread(self.embedder.embed, [query]))[0]
            chunks = await self._retrieve(req, query, vector, it)
            relevance = await self._prepare(req, chunks)
        with rounds_ahead(REFORMULATE_ROUNDS - 1):
            judged = await self._judge_all(req, chunks, "reformulated", it, relevance=relevance)
        with rounds_ahead(REFORMULATE_ROUNDS - 2):
            await self.summaries.make(req, self.ledger.useful_docs(), it)
        after = self.ledger.answering_papers()
        self.emit(Stage.FORAGE, "reformulated", f"{req.id}: retried with {query!r}: {len(judged)} chunks judged, "
                                                f"{after - before} more answering paper(s)",
                  iteration=it.number, requirement_id=req.id, query=query, retrieved=len(chunks), judged=len(judged),
                  answers=sum(1 for j in judged if j.tag == "answers"), answering_papers_before=before,
                  answering_papers_after=after)

