"""The judgement ledger of one requirement, and what it adds up to: coverage, the answering papers and the evidence.

Every verdict a Forager records lands here, once per chunk, in judging order, for all iterations; everything the
iteration's end node reports is a function of the ledger (and of the documents' titles, summaries and retrieval
ranking, which the step passes in), so it is tested without a model, a store or Ray.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from actors.steps.forage.credit import JudgeCredit
from messages.forage import ChunkJudgement, Evidence

KIND_RANK = {"method": 0, "result": 0, None: 0, "background": 1}


def counts(judgement: ChunkJudgement) -> bool:
    """Whether a verdict counts as an answer: 'answers', and confirmed by retrieval signals where that is checked."""
    return judgement.tag == "answers" and judgement.confirmed is not False


def relevance_of(judgement: ChunkJudgement) -> float:
    return judgement.relevance if judgement.relevance is not None else 0.0


@dataclass
class Iteration:
    """Bookkeeping of one iteration of one requirement: its verdicts, LLM calls and chunks left unjudged."""

    number: int
    judged: list[ChunkJudgement] = field(default_factory=list)
    calls: int = 0
    unjudged: int = 0  # chunks left without a verdict this iteration (tried again next iteration)
    follow: int = 0  # rounds of dependent calls a deep dive's last call is still followed by (a reformulation)


class Ledger:
    """chunk id → its verdict, in judging order. ``related_floor``: the similarity an 'interesting' verdict needs to
    stand as evidence (the relevance check's answer floor; -inf without the check). ``credit``: what the judge's
    verdicts are worth beside the signal; where it is calibrated (:meth:`JudgeCredit.coverage`), coverage is a
    probability over the verdicts of passages from ``shown_floor`` (the calibrated topic floor) on."""

    def __init__(self, related_floor: float, credit: JudgeCredit | None = None,
                 shown_floor: float = float("-inf")) -> None:
        self.related_floor = related_floor
        self.credit = credit
        self.shown_floor = shown_floor
        self.judgements: dict[str, ChunkJudgement] = {}

    def __contains__(self, chunk_id: object) -> bool:
        return chunk_id in self.judgements

    def __len__(self) -> int:
        return len(self.judgements)

    def verdicts(self) -> Iterable[ChunkJudgement]:
        return self.judgements.values()

    def record(self, judged: Iterable[ChunkJudgement], it: Iteration) -> None:
        """Keep ``judged`` (a later verdict on a chunk replaces an earlier one) and list them as this iteration's."""
        for judgement in judged:
            self.judgements[judgement.chunk_id] = judgement
            it.judged.append(judgement)

    def coverage(self) -> float:
        """Where the check is calibrated: the probability that the library answers the requirement, from the
        passages shown to the judge and its verdicts on them (:meth:`JudgeCredit.coverage`). Else a ladder: 1.0: a
        confirmed answer with a method or a result; 0.75: confirmed answers are background only; 0.5: answers the
        retrieval signals do not confirm, or interesting chunks as close to the requirement as an answer must be
        (:meth:`supported`); 0.0: nothing. (Without a confirmation configured every answer counts as confirmed.)"""
        if self.credit is not None:
            weighed = self.credit.coverage(self.best_shown(), self.shown_floor)
            if weighed is not None:
                return round(weighed, 4)
        return self.ladder()

    def best_shown(self) -> list[tuple[float, bool]]:
        """Per document, its highest-scoring passage shown to the judge from ``shown_floor`` on: (its score, whether
        the judge called it an answer). One per document: a paper read passage by passage (a deep dive) weighs as
        one candidate, as the coverage prior was fitted."""
        best: dict[str, ChunkJudgement] = {}
        for j in self.judgements.values():
            if j.signal is None or j.relevance is None or j.relevance < self.shown_floor:
                continue
            if j.doc_id not in best or j.signal > best[j.doc_id].signal:  # type: ignore[operator]
                best[j.doc_id] = j
        return [(j.signal, (j.model_tag or j.tag) == "answers") for j in best.values()]  # type: ignore[misc]

    def ladder(self) -> float:
        """The coverage ladder (:meth:`coverage` without a calibration)."""
        answers = [j for j in self.judgements.values() if counts(j)]
        if any(KIND_RANK[j.kind] == 0 for j in answers):
            return 1.0
        if answers:
            return 0.75
        return 0.5 if any(self.supported(j) for j in self.judgements.values()) else 0.0

    def supported(self, judgement: ChunkJudgement) -> bool:
        """Whether a verdict other than 'unrelated' stands as evidence: an answer (confirmed or not; one below the
        answer floor is interesting by now), or an 'interesting' passage whose similarity to the requirement reaches
        the answer floor. The judge sees passages from the looser topic floor on (so that few answers are hidden from
        it), and a weak judge calls many of those interesting: the similarity a relevant passage reaches is what a
        related one must reach to count toward coverage or be cited (docs/evidence.md, "A related passage must be as
        close as an answer", has the run that showed why). Below it the verdict still steers the deep dives."""
        if judgement.tag == "answers":
            return True
        return judgement.tag == "interesting" and (judgement.relevance is None
                                                   or judgement.relevance >= self.related_floor)

    def answered_docs(self) -> set[str]:
        """Documents with at least one confirmed answering chunk."""
        return {j.doc_id for j in self.judgements.values() if counts(j)}

    def answering_papers(self) -> int:
        """How many distinct documents hold a confirmed answering chunk."""
        return len(self.answered_docs())

    def unconfirmed(self) -> int:
        """Answers the retrieval signals did not confirm, all iterations."""
        return sum(1 for j in self.judgements.values() if j.tag == "answers" and j.confirmed is False)

    def useful_docs(self) -> list[str]:
        """Documents with a verdict that stands (:meth:`supported`), first seen first: summarized, named to the
        reformulation as seen. A document that only a verdict below the answer floor points to is dived into, not
        summarized for itself."""
        return list(dict.fromkeys(j.doc_id for j in self.judgements.values() if self.supported(j)))

    def deep_dive_queue(self, dived: set[str]) -> list[str]:
        """Documents with interesting chunks or unconfirmed answers not in ``dived``; those without a (confirmed)
        answer first, first seen first within each group."""
        answered = self.answered_docs()
        queue = [d for d in dict.fromkeys(j.doc_id for j in self.judgements.values()
                                          if j.tag == "interesting" or (j.tag == "answers" and not counts(j)))
                 if d not in dived]
        return sorted(queue, key=lambda d: d in answered)

    def judged_by_doc(self) -> dict[str, list[str]]:
        """doc id → the chunk ids judged in it."""
        judged: dict[str, list[str]] = {}
        for j in self.judgements.values():
            judged.setdefault(j.doc_id, []).append(j.chunk_id)
        return judged

    def evidence(self, title_of: Callable[[str], str], summaries: Mapping[str, str],
                 rank: Mapping[str, int]) -> tuple[Evidence, ...]:
        """One Evidence per document with answers or interesting chunks that stand (:meth:`supported`): documents
        with a confirmed answer first (those whose best confirmed answer is a method or a result before background
        ones), then every other one; within each group by ``rank`` (the retrieval ranking of the documents for the
        requirement; a document it lacks comes after the ranked ones), then the most similar to the requirement
        first (the relevance check's similarity). The judge's own labels — an unconfirmed 'answers' against
        'interesting', the kind of an unconfirmed passage — do not order the documents: a weak judge's labels are
        noise, and a judgment the retrieval signals did not confirm does not stand alone. Chunk ids in the order
        confirmed answers first, methods and results before background, most similar first."""
        by_doc: dict[str, list[ChunkJudgement]] = {}
        for j in self.judgements.values():
            if self.supported(j):
                by_doc.setdefault(j.doc_id, []).append(j)

        def group(j: ChunkJudgement) -> int:
            return 0 if counts(j) else 1 if j.tag == "answers" else 2

        unranked = len(rank)
        ranked: list[tuple[tuple[int, int, int, float], Evidence]] = []
        for doc_id, judged in by_doc.items():
            ordered = sorted(judged, key=lambda j: (group(j), KIND_RANK[j.kind], -relevance_of(j)))  # stable
            lead = ordered[0]
            confirmed = counts(lead)
            key = (0 if confirmed else 1, KIND_RANK[lead.kind] if confirmed else 0, rank.get(doc_id, unranked),
                   -max(relevance_of(j) for j in judged))
            ranked.append((key, Evidence(
                doc_id=doc_id, title=title_of(doc_id), tag="answers" if confirmed else "interesting",
                motive=lead.motive, summary=summaries.get(doc_id, ""),
                chunk_ids=tuple(j.chunk_id for j in ordered))))
        return tuple(e for _, e in sorted(ranked, key=lambda pair: pair[0]))  # stable: judging order within a rank
