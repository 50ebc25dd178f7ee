"""JudgeCredit: how far a judge's rates move the check's floors (actors/steps/forage/credit.py)."""

from __future__ import annotations

import math

import pytest

from actors.steps.forage.credit import JudgeCredit
from infra.settings import Settings


def test_a_reliable_judge_gets_more_relief_than_an_unreliable_one() -> None:
    curve = (-9.0, 9.0, 0.0)
    perfect, good, weak = JudgeCredit(1.0, 0.0, curve), JudgeCredit(0.8, 0.2, curve), JudgeCredit(0.6, 0.4, curve)
    assert perfect.relief() == pytest.approx(math.log(99) / 9.0)  # rates clipped to [0.01, 0.99]
    assert good.relief() == pytest.approx(math.log(4) / 9.0)
    assert perfect.relief() > good.relief() > weak.relief() > 0.0
    # no better than chance, or worse: no relief, never a stricter check
    assert JudgeCredit(0.5, 0.5, curve).relief() == 0.0 and JudgeCredit(0.3, 0.6, curve).relief() == 0.0
    # a signal without a calibration curve: nothing to weigh the judge against
    assert JudgeCredit(1.0, 0.0, None).relief() == 0.0 and JudgeCredit(1.0, 0.0, None).posterior(1.0) is None


def test_the_posterior_at_the_moved_floor_is_what_the_floor_asked_of_a_judge_whose_word_carries_nothing() -> None:
    curve, floor = (-9.0, 9.0, 0.0), 1.0
    needed = JudgeCredit(1.0, 1.0, curve).posterior(floor)
    for tpr, fpr in ((1.0, 0.0), (0.8, 0.2), (0.6, 0.4)):
        credit = JudgeCredit(tpr, fpr, curve)
        assert credit.posterior(floor - credit.relief()) == pytest.approx(needed)
        assert credit.posterior(floor) > needed


def test_the_penalty_is_what_a_judges_word_must_make_up_for_before_it_relieves_the_floors() -> None:
    """A requirement is credited by the best of many passages: the judge's log-likelihood ratio first pays the
    curve's penalty; a (0.8, 0.2) judge (ratio 4) with a penalty of 1 moves the floors by (log 4 - 1) / slope, a
    (0.6, 0.4) judge (ratio 1.5, log 0.41) not at all."""
    curve = (-9.0, 9.0, 1.0)
    assert JudgeCredit(0.8, 0.2, curve).relief() == pytest.approx((math.log(4) - 1.0) / 9.0)
    assert JudgeCredit(0.6, 0.4, curve).relief() == 0.0
    assert JudgeCredit(1.0, 0.0, curve).relief() < JudgeCredit(1.0, 0.0, (-9.0, 9.0, 0.0)).relief()


def test_settings_give_the_judges_rates() -> None:
    told = Settings.load().updated(forage={"judge_tpr": 0.9, "judge_fpr": 0.1})
    assert told.judge_rates() == (0.9, 0.1)
    for backend in ("ollama", "embedded"):
        tpr, fpr = Settings.load().updated(llm={"backend": backend}).judge_rates()
        assert 0.0 <= fpr <= 1.0 and 0.0 <= tpr <= 1.0
