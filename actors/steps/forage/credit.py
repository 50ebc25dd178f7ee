"""How much the judge's "answers" is worth beside the retrieval signal: the one place that weighs them.

The relevance check asked the same of every judge: an "answers" counted once the passage's similarity reached the
answer floor and its similarity + 0.4 x word share reached the confirmation floor. Those floors were calibrated for a
judge that calls nearly every passage an answer (the embedded 135M model; docs/evidence.md), so the signal alone had
to carry the decision, and a capable judge had most of its right answers overruled.

:class:`JudgeCredit` combines the two by what each is measured to be worth. The signal's calibration curve (fitted on
BEIR SciFact train: ``Settings.answer_curve``) gives the probability that a passage answers from its score ``x``
(similarity + 0.4 x word share): ``sigmoid(a + b x)``. The judge's "answers" multiplies those odds by its likelihood
ratio ``TPR / FPR`` (``Settings.judge_rates``), assuming the judge's errors do not follow the signal's. A passage
counts when that posterior reaches what the floors asked of a judge whose word carries nothing (likelihood ratio 1:
``sigmoid(a + b x_floor)``). Since the curve is linear in its log-odds, this is the floors moved down by
``(log(TPR / FPR) - c) / b`` (:meth:`JudgeCredit.relief`): a reliable judge needs little confirmation, an unreliable
one all of today's. ``c``, the curve's third number, is what the judge's word must first make up for: the curve is
fitted per passage on claims the library answers, but a requirement is credited by the best of the dozen or more
passages shown for it, and when the library holds no answer its best distractors sit where answers do; without it a
(0.8, 0.2) judge credited 0.19 of the unanswerable SciFact train claims (bench/judge_credit.py, docs/evidence.md). It
is chosen on train as the least that keeps that false coverage within 10 % for judges from (0.95, 0.05) to
(0.6, 0.4). A judge whose weight does not exceed it gets no relief, never a stricter check; a signal without a
calibration curve (an uncalibrated embedder, a reranker) gives none either.

:meth:`JudgeCredit.coverage` is a requirement's coverage as a probability: that the library answers it, given the
passages shown to the judge. The signal alone gives the prior, a logistic model of the shown passages' scores
(``Settings.coverage_prior``: the log of their summed odds under the curve and the best score; one passage per
document, its best, so that a paper read passage by passage weighs as one candidate), fitted on what the Forager
showed simulated judges for SciFact train claims, some with their relevant papers held out; the judge's verdicts
multiply its odds by their Bayes factor: with one passage answering, the passage the curve makes likeliest is the
likeliest answer, so the factor is the curve-weighted mean of each passage's likelihood ratio (``TPR / FPR`` where the
judge said 'answers', ``(1 - TPR) / (1 - FPR)`` where it did not). A judge whose word carries nothing leaves the
prior; a reliable one moves it far either way. The prior takes a requirement to be as likely answerable as not (the
fit weighs the answerable and the unanswerable claims alike).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

RATE_FLOOR = 0.001  # rates are clipped to [0.001, 0.999]: a judge said to be perfect is believed to one error in
# a thousand (its likelihood ratio 999, not infinite)
#: the passages a requirement's coverage weighs: its highest-scoring shown ones, as many as the prior was fitted on
COVERAGE_PASSAGES = 12


def clip_rate(rate: float) -> float:
    return min(max(rate, RATE_FLOOR), 1.0 - RATE_FLOOR)


def sigmoid(logit: float) -> float:
    return 1.0 / (1.0 + math.exp(-logit)) if logit > -700 else 0.0


@dataclass(frozen=True)
class JudgeCredit:
    """The judge's rates and the signal's calibration curve (None: not calibrated)."""

    tpr: float
    fpr: float
    curve: tuple[float, float, float] | None = None  # (intercept, slope, penalty) of the signal's log-odds
    # (intercept, weight of the log summed odds, weight of the best score): P(answerable) from the shown passages'
    # scores alone; None: not calibrated (coverage is then the ledger's ladder)
    prior: tuple[float, float, float] | None = None

    def weight(self) -> float:
        """The log-likelihood ratio of the judge's 'answers' (0 when it is no better than chance)."""
        return max(0.0, math.log(clip_rate(self.tpr) / clip_rate(self.fpr)))

    def relief(self) -> float:
        """How far the answer and confirmation floors move down for this judge, in the signal's units."""
        if self.curve is None or self.curve[1] <= 0:
            return 0.0
        return max(0.0, self.weight() - self.curve[2]) / self.curve[1]

    def posterior(self, score: float) -> float | None:
        """The probability, discounted by the penalty, that a passage the judge calls an answer answers, from its
        score (similarity + 0.4 x word share); None without a calibration curve."""
        if self.curve is None:
            return None
        logit = self.curve[0] + self.curve[1] * score + max(0.0, self.weight() - self.curve[2])
        return 1.0 / (1.0 + math.exp(-logit))

    def coverage(self, passages: Iterable[tuple[float, bool]], floor: float | None = None) -> float | None:
        """The probability that the library answers the requirement, from the passages shown to the judge (one per
        document, its best: :meth:`Ledger.best_shown`): each its score (similarity + 0.4 x word share) and whether the
        judge called it an answer. The prior reads the ``COVERAGE_PASSAGES`` highest scores (:func:`prior_scores`,
        as it was fitted; fewer shown are made up to that many at ``floor``, the score a passage needs to be shown);
        the judge's verdicts weigh over every passage shown, so that an answer found deep in a later iteration counts.
        0.0 with none shown; None without a calibration (curve and prior)."""
        if self.curve is None or self.prior is None:
            return None
        shown = list(passages)
        if not shown:
            return 0.0
        summed, best = signal_features(prior_scores(shown, floor), self.curve)
        prior = self.prior[0] + self.prior[1] * summed + self.prior[2] * best
        said, other = math.log(clip_rate(self.tpr) / clip_rate(self.fpr)), \
            math.log((1 - clip_rate(self.tpr)) / (1 - clip_rate(self.fpr)))
        # the Bayes factor of the verdicts: each passage's likelihood ratio weighted by how likely the curve makes it
        # the answering one
        everyone, _ = signal_features([score for score, _ in shown], self.curve)
        factor = sum(math.exp(self.curve[0] + self.curve[1] * score - everyone + (said if answers else other))
                     for score, answers in shown)
        return sigmoid(prior + math.log(factor))


def prior_scores(passages: Iterable[tuple[float, bool]], floor: float | None = None) -> list[float]:
    """The scores the coverage prior reads: the ``COVERAGE_PASSAGES`` highest of the shown passages', made up to that
    many at ``floor`` (the score a passage needs to be shown; None or -inf: not made up).

    The prior was fitted where a dozen documents or more were nearly always shown (one field's abstracts), and weighs
    how far the best stands out from the rest (the log of their summed odds, with a negative weight). In a small
    library of many fields an unanswerable question may show one weak distractor and nothing near it, which would
    then stand out like an answer. A passage not shown scores at most the floor, so the documents not shown count as
    if at the floor: a lone passage must stand out from them (measured: docs/evidence.md)."""
    top = sorted((score for score, _ in passages), reverse=True)[:COVERAGE_PASSAGES]
    if floor is not None and math.isfinite(floor):
        top += [floor] * (COVERAGE_PASSAGES - len(top))
    return top


def signal_features(scores: Sequence[float], curve: tuple[float, float, float]) -> tuple[float, float]:
    """What the coverage prior reads of the shown passages' scores: the log of their summed odds under the curve, and
    the best score."""
    odds = [curve[0] + curve[1] * score for score in scores]
    top = max(odds)
    return top + math.log(sum(math.exp(o - top) for o in odds)), max(scores)
