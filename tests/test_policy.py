"""bisectbot.core.policy: which search steps a bisect takes, from what builds and runs cost."""

from __future__ import annotations

import pytest

from bisectbot.core import policy
from bisectbot.statistics import stats

REF = stats.Reference.from_probs({"e": 0.3455, "g": 0.4517, "h": 0.2028}, 0.82)
GROSS_COUNTS = [14, 0, 0, 0, 3]  # what the broken end's BAD took: 17 runs, all `e`


def here(**kw: float) -> policy.Situation:
    return policy.situation(
        1273,
        REF,
        eta=0.03,
        good_runs=kw.pop("good_runs", 650),
        bad_counts=GROSS_COUNTS,
        level=5e-4,
        max_runs=4000,
        model_budget=4000,
        **kw,
    )  # type: ignore[arg-type]


def test_llama_cpp_costs_choose_reference_steps() -> None:
    """A build ~75 s, a run ~0.04 s (issue 20's measurements): every step against the reference."""
    choice = policy.choose(here(), policy.UnitCosts(75.0, 0.04, builds=22, runs=2510))
    assert choice.strategy == "reference"
    text = choice.text()
    assert text.startswith("reference steps") and "plain:" in text and "measured in this state directory" in text
    ref, plain = choice.forecast("reference"), choice.forecast("plain")
    assert ref is not None and plain is not None and ref.seconds < plain.seconds and ref.builds < plain.builds


def test_when_builds_are_nearly_free_and_steps_cost_whole_tests_quick_steps_win() -> None:
    """Quick steps save runs and risk builds: with builds of 0.05 s and steps that cannot be
    placed by likeness (each a whole GOOD of 2,000 runs), they are the faster bet."""
    situation = here(good_runs=2000)
    costly_steps = policy.Situation(**{**situation.__dict__, "alike_runs": 2000.0})
    choice = policy.choose(costly_steps, policy.UnitCosts(0.05, 0.0023, builds=9, runs=4000))
    assert choice.strategy == "plain"
    # …but once a confirmation found a distribution quick steps misplace, the odds change
    found_one = policy.Situation(**{**costly_steps.__dict__, "third": 1.0})
    assert policy.choose(found_one, policy.UnitCosts(5.0, 0.0023, 9, 4000)).strategy == "reference"


def test_an_asked_strategy_is_kept_and_nothing_measured_means_llama_cpp_like_defaults() -> None:
    costs = policy.unit_costs([], [], at_once=2)
    assert costs == policy.DEFAULT_COSTS and not costs.measured and "defaults" in costs.text()
    assert policy.choose(here(), costs, allowed=("plain",)).strategy == "plain"
    measured = policy.unit_costs([60.0, 90.0, 70.0], [0.04] * 10, at_once=2)
    assert measured.build == 70.0 and measured.run == pytest.approx(0.02) and measured.measured


def test_the_forecast_grows_with_the_range_and_the_misplacement_odds() -> None:
    costs = policy.UnitCosts(75.0, 0.04, 10, 10)
    small, big = here(), policy.Situation(**{**here().__dict__, "commits": 100_000})
    assert policy.forecast("reference", big, costs).builds > policy.forecast("reference", small, costs).builds
    odds = [
        policy.forecast("plain", policy.Situation(**{**here().__dict__, "third": t}), costs).seconds
        for t in (0.0, 0.5, 1.0)
    ]
    assert odds == sorted(odds) and odds[0] < odds[-1]
    with pytest.raises(ValueError, match="no forecast"):
        policy.forecast("sticky", small, costs)
