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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

RATE_FLOOR = 0.01  # rates are clipped to [0.01, 0.99]: a perfect judge's ratio is 99, not infinite


@dataclass(frozen=True)
class JudgeCredit:
    """The judge's rates and the signal's calibration curve (None: not calibrated)."""

    tpr: float
    fpr: float
    curve: tuple[float, float, float] | None = None  # (intercept, slope, penalty) of the signal's log-odds

    def weight(self) -> float:
        """The log-likelihood ratio of the judge's 'answers' (0 when it is no better than chance)."""
        def clip(rate: float) -> float:
            return min(max(rate, RATE_FLOOR), 1.0 - RATE_FLOOR)

        return max(0.0, math.log(clip(self.tpr) / clip(self.fpr)))

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
