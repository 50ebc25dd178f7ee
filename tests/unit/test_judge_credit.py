"""JudgeCredit: how far a judge's rates move the check's floors (actors/steps/forage/credit.py)."""

from __future__ import annotations

import math

import pytest

from actors.steps.forage.credit import JudgeCredit
from infra.settings import Settings


def test_a_reliable_judge_gets_more_relief_than_an_unreliable_one() -> None:
    curve = (-9.0, 9.0, 0.0)
    perfect, good, weak = JudgeCredit(1.0, 0.0, curve), JudgeCredit(0.8, 0.2, curve), JudgeCredit(0.6, 0.4, curve)
    assert perfect.relief() == pytest.approx(math.log(999) / 9.0)  # rates clipped to [0.001, 0.999]
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


CURVE, PRIOR = (-7.826, 8.038, 1.3), (-14.1, -1.879, 16.654)  # MiniLM's store signal (infra/calibrated.py)


def test_coverage_is_the_signals_prior_moved_by_the_judges_bayes_factor() -> None:
    """A yes-man's verdicts leave the prior; a reliable judge's 'answers' on the likeliest passage raises it, its
    'unrelated' lowers it, the more the more reliable the judge; nothing shown is 0; no calibration: None."""
    shown = [(0.95, True), (0.6, False), (0.55, False)]
    silent = [(0.95, False), (0.6, False), (0.55, False)]
    yes_man = JudgeCredit(1.0, 1.0, CURVE, PRIOR)
    prior = yes_man.coverage(shown)
    assert prior is not None and 0.0 < prior < 1.0
    assert yes_man.coverage(silent) == pytest.approx(prior)  # its word carries nothing
    good, perfect = JudgeCredit(0.8, 0.2, CURVE, PRIOR), JudgeCredit(1.0, 0.0, CURVE, PRIOR)
    assert perfect.coverage(shown) > good.coverage(shown) > prior  # type: ignore[operator]
    assert perfect.coverage(silent) < good.coverage(silent) < prior  # type: ignore[operator]
    assert perfect.coverage([]) == 0.0
    assert JudgeCredit(1.0, 0.0, CURVE, None).coverage(shown) is None
    assert JudgeCredit(1.0, 0.0, None, PRIOR).coverage(shown) is None


def test_coverage_weighs_an_answer_by_how_likely_the_signal_makes_it_the_answering_passage() -> None:
    """The same judge's 'answers' counts for more on the passage closest to the requirement than on a distant one.
    The prior reads the 12 highest-scoring passages only (a yes-man's coverage is the same with 30 more far below);
    the verdicts weigh over every passage shown: an answer found beyond the 12 still raises the coverage."""
    judge = JudgeCredit(0.9, 0.1, CURVE, PRIOR)
    near = judge.coverage([(0.95, True), (0.6, False)])
    far = judge.coverage([(0.95, False), (0.6, True)])
    assert near > far  # type: ignore[operator]
    many = [(0.95, False)] + [(0.5, False)] * 11
    yes_man = JudgeCredit(1.0, 1.0, CURVE, PRIOR)
    assert yes_man.coverage(many + [(0.4, False)] * 30) == pytest.approx(yes_man.coverage(many))
    perfect = JudgeCredit(1.0, 0.0, CURVE, PRIOR)
    deep = perfect.coverage(many + [(0.45, True)])
    assert deep > perfect.coverage(many + [(0.45, False)])  # type: ignore[operator]
    assert deep > perfect.coverage(many)  # type: ignore[operator]


def test_a_lone_weak_passage_does_not_stand_out_like_an_answer() -> None:
    """Seen on bench/suites/shapes.yaml: a CRISPR question over 42 papers of other fields, one distractor paper
    above the topic floor, credited 0.76 by a yes-man's prior. Fewer than 12 documents shown are made up to 12 at
    the floor (a passage not shown scores at most that): the lone weak passage falls to near nothing, a lone strong
    one is still likely an answer, and a dozen shown read as before."""
    from actors.steps.forage.credit import prior_scores

    yes_man, floor = JudgeCredit(1.0, 1.0, CURVE, PRIOR), 0.4
    assert yes_man.coverage([(0.36, True)]) > 0.75  # type: ignore[operator]  # the pathology, without the floor
    assert yes_man.coverage([(0.36, True)], floor) < 0.1  # type: ignore[operator]
    assert yes_man.coverage([(0.95, True)], floor) > 0.8  # type: ignore[operator]
    many = [(0.95, False)] + [(0.5, False)] * 11
    assert yes_man.coverage(many, floor) == pytest.approx(yes_man.coverage(many))
    assert prior_scores([(0.9, True), (0.5, False)], floor) == [0.9, 0.5] + [0.4] * 10
    assert prior_scores([(0.9, True)], float("-inf")) == [0.9]  # no floor (the check off): nothing made up
