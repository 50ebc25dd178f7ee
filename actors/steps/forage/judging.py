"""Judging passages for one requirement: the batched judging call, and the relevance check that weighs its verdicts.

:class:`BatchJudge` asks the LLM about several numbered passages in ONE structured call — each *answers* /
*interesting* / *unrelated* with a motive and a kind (*method*, *result* or *background*) — and judges the passages
left without a valid verdict once more together. It is what the Forager and ``forage calibrate`` judge with.

:class:`RelevanceCheck` holds the floors a verdict is checked against (the relevance signal's, moved down for a
reliable judge by :class:`~actors.steps.forage.credit.JudgeCredit`): passages below the topic floor are not shown to
the judge; an 'answers' below the answer floor counts as 'interesting'; one above it is confirmed or not by the
signal plus the requirement's words it holds; a method or result from an introduction or background section counts
as background.
"""

from __future__ import annotations

import math
import re
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from actors.steps.forage.credit import JudgeCredit
from actors.steps.forage.ledger import Iteration
from actors.steps.plan.requirements import content_words, own_question, word_share
from actors.steps.prompts import JUDGE_INTERESTING, JUDGE_SYSTEM
from actors.steps.schemas import PassageVerdict, batch_schema
from actors.steps.text import block, clip
from infra.llm.base import ChatMessage
from infra.rerank import Relevance
from infra.calibrated import CONFIRM_WORD_WEIGHT
from infra.settings import Settings
from infra.store.base import ChunkRecord
from messages.forage import ChunkJudgement
from messages.plan import Requirement

PASSAGE_CHARS = 3000  # chunk text shown to the LLM

_BACKGROUND_SECTION = re.compile(
    r"^\W*(?:(?:\d+|[ivxlc]+|[a-h])[.)]?\s+)*(?:\d+(?:\.\d+)*\.?\s+)?"
    r"(?:introduction|background|related\s+work|prior\s+work|previous\s+work|motivation|preliminaries|"
    r"literature\s+review|state\s+of\s+the\s+art)\b", re.IGNORECASE)


def background_section(section_path: str) -> bool:
    """Whether a chunk sits in a paper's introduction, background, related-work or motivation section (by its
    top-level heading: "1 Introduction > 1.2 Contributions" is; "Results > Background noise" is not)."""
    top = section_path.split(">", 1)[0].strip()
    return bool(_BACKGROUND_SECTION.match(top))


class RelevanceCheck:
    """The floors of one Forager's check: ``floors`` (answer, topic) of the relevance signal as configured (-inf
    each with ``forage.relevance_check`` off), and, moved down by the judge's relief, the ``answer_floor``, the
    ``topic_floor`` and the ``confirmation`` its verdicts are checked against."""

    def __init__(self, settings: Settings, relevance: Relevance) -> None:
        on = settings.forage.relevance_check
        self.floors = relevance.floors if on else (-math.inf, -math.inf)
        # what the judge's 'answers' is worth beside the signal (its rates, the signal's calibration curve): the
        # topic, answer and confirmation floors move down by its relief (credit.py); the floor a related passage
        # must reach (Ledger.supported) does not: the rates are those of its 'answers'
        self.credit = JudgeCredit(*settings.judge_rates(), curve=relevance.curve, prior=relevance.prior if on else None)
        relief = self.credit.relief() if on else 0.0
        self.answer_floor = self.floors[0] - relief
        self.topic_floor = self.floors[1] - relief  # a reliable judge is shown more, as its answers count more
        # the confirmation an 'answers' needs to count (similarity + word share; the signal's own, calibrated for
        # embedding similarities only: a reranker's scores are on their own scale); None: none
        confirmation = relevance.confirmation if on else None
        self.confirmation = confirmation - relief if confirmation is not None else None

    def shown(self, chunks: Sequence[ChunkRecord],
              relevance: dict[str, float]) -> tuple[list[ChunkRecord], list[ChunkRecord]]:
        """The chunks the judge sees — from the topic floor on, the closest first (a weak model does best at the
        start of its prompt) — and those below it."""
        off_topic = [c for c in chunks if relevance.get(c.chunk_id, 1.0) < self.topic_floor]
        shown = sorted((c for c in chunks if c not in off_topic), key=lambda c: -relevance.get(c.chunk_id, 0.0))
        return shown, off_topic

    def off_topic(self, chunk: ChunkRecord, relevance: float, stage: str) -> ChunkJudgement:
        """The verdict of a chunk not shown to the judge."""
        motive = (f"not shown to the judge: similarity {relevance:.2f} to the requirement is below "
                  f"{self.topic_floor:.2f}")
        return ChunkJudgement(chunk_id=chunk.chunk_id, doc_id=chunk.doc_id, tag="unrelated",
                              stage=stage, relevance=relevance, motive=motive)  # type: ignore[arg-type]

    def checked(self, judgement: ChunkJudgement, relevance: float | None, chunk: ChunkRecord,
                req: Requirement) -> ChunkJudgement:
        """The judge's verdict after the checks: an 'answers' below the answer floor (moved down for a reliable judge:
        :class:`~actors.steps.forage.credit.JudgeCredit`) counts as 'interesting' (the judge's tag kept in
        ``model_tag``); an 'answers' at or above it is confirmed or not (:meth:`confirms`); a 'method' or 'result'
        from an introduction, background or related-work section counts as background (the judge's kind kept in
        ``model_kind``): there a paper reports others' work and its own motivation, not its methods and results."""
        if relevance is None:
            return judgement
        update: dict[str, Any] = {"relevance": relevance}
        if self.credit.prior is not None:  # what the calibrated coverage weighs the verdict by (Ledger.coverage)
            update["signal"] = self.signal(req, chunk.text, relevance)
        if judgement.tag == "answers" and relevance < self.answer_floor:
            update.update(tag="interesting", model_tag="answers")
        elif judgement.tag == "answers" and self.confirmation is not None:
            update["confirmed"] = self.confirms(req, chunk.text, relevance)
        if judgement.kind in ("method", "result") and background_section(chunk.section_path):
            update.update(kind="background", model_kind=judgement.kind)
        return judgement.model_copy(update=update)

    def confirms(self, req: Requirement, text: str, relevance: float) -> bool:
        """Whether retrieval signals confirm a passage the judge calls an answer: its similarity to the requirement
        plus CONFIRM_WORD_WEIGHT x the share of the requirement's content words it holds reaches
        ``forage.answer_confirmation``. On BEIR SciFact a related paper of the same topic is as similar to a claim as
        the paper that answers it; the words the answer shares with the claim tell them apart more often (at the
        calibrated floor, 0.39 of answerable claims confirmed, 0.10 of unanswerable ones: docs/evidence.md). The words
        of a requirement anchored to the query's subject are those of its own question (:func:`own_question`): the
        subject in brackets is what every passage on the topic shares, not what the requirement asks."""
        assert self.confirmation is not None
        return self.signal(req, text, relevance) >= self.confirmation

    @staticmethod
    def signal(req: Requirement, text: str, relevance: float) -> float:
        """The check's score of a passage: its similarity to the requirement plus CONFIRM_WORD_WEIGHT x the share of
        the requirement's own content words it holds."""
        return relevance + CONFIRM_WORD_WEIGHT * word_share(content_words(own_question(req.text)), text)


#: one counted structured LLM call: (messages, schema, the step's name, the iteration) -> the answer, or None when
#: the call failed (the caller records why)
Ask = Callable[[list[ChatMessage], type[Any], str, Iteration], Awaitable[Any]]
#: a failed step of the iteration: (iteration, step, reason, event payload)
Failed = Callable[..., None]


def judging_messages(req: Requirement, batch: Sequence[ChunkRecord], title_of: Callable[[str], str],
                     deep: bool) -> list[ChatMessage]:
    """The judging prompt for the numbered passages of ``batch`` (a deep dive's: answers or unrelated only)."""
    system = JUDGE_SYSTEM.format(interesting="" if deep else JUDGE_INTERESTING)
    tags = "answers or unrelated" if deep else "answers, interesting or unrelated"
    passages = []
    for n, chunk in enumerate(batch, start=1):
        passages.append(f"[{n}] Document: {title_of(chunk.doc_id)}\nSection: {chunk.section_path}\n"
                        f"{block(f'PASSAGE {n}', clip(chunk.text, PASSAGE_CHARS))}")
    user = (f"Requirement: {req.text}\n\n" + "\n\n".join(passages) + "\n\n"
            f"For each passage [1] to [{len(batch)}] give its number, a tag ({tags}) for the requirement, "
            "its kind (method, result or background) and a one-sentence motive.")
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


class BatchJudge:
    """Judges numbered passages in one structured call through ``ask``; reports passages left without a verdict
    through ``failed``; reads documents' titles through ``title_of``."""

    def __init__(self, ask: Ask, failed: Failed, title_of: Callable[[str], str]) -> None:
        self.ask = ask
        self.failed = failed
        self.title_of = title_of

    async def judge(self, req: Requirement, batch: list[ChunkRecord], stage: str, it: Iteration, *,
                    retry: bool = True) -> list[ChunkJudgement]:
        """One call for the numbered passages of ``batch``; passages without a valid verdict are judged once more
        together (``retry``), then recorded as failed. Returns the judgements (recorded by the caller); a whole call
        that fails leaves its passages for the next iteration."""
        if not batch:
            return []
        deep = stage == "deep_dive"
        what = f"classify {len(batch)} chunk(s) {batch[0].chunk_id}" + (" …" if len(batch) > 1 else "")
        verdict = await self.ask(judging_messages(req, batch, self.title_of, deep), batch_schema(len(batch), deep),
                                 what, it)
        if verdict is None:  # the whole call failed (recorded by ask): every passage waits for the next iteration
            it.unjudged += len(batch)
            return []
        got: dict[int, PassageVerdict] = {}
        for v in verdict.verdicts:
            if 1 <= v.passage <= len(batch):
                got.setdefault(v.passage, v)
        out = [ChunkJudgement(chunk_id=chunk.chunk_id, doc_id=chunk.doc_id, tag=got[n].tag, kind=got[n].kind,
                              motive=" ".join(got[n].motive.split()), stage=stage)  # type: ignore[arg-type]
               for n, chunk in enumerate(batch, start=1) if n in got]
        missing = [chunk for n, chunk in enumerate(batch, start=1) if n not in got]
        if missing and retry:
            out += await self.judge(req, missing, stage, it, retry=False)
        elif missing:
            it.unjudged += len(missing)
            self.failed(it, "classify", f"iteration {it.number}: classify: no valid verdict for "
                                        f"{', '.join(c.chunk_id for c in missing)}",
                        chunk_ids=[c.chunk_id for c in missing])
        return out
