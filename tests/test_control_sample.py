"""statistics.control_sample's GOOD side without the power set: each set's wealth is a sum over
its categories plus a cut, so its least over the sets is exact on few categories and a lower
bound on many — checked against the wealth of every set computed pair by pair (brute force,
small K) — and the test stays calibrated where pairs agree seed for seed, where they are
independent, and in between (fixed seeds)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bisectbot.statistics import control_sample as cs
from bisectbot.statistics.outcome import Verdict


def per_set_least(test: cs.PairedTest, xs: list[int], ys: list[int], bets: list[float]) -> float:
    """min over every set S of the GOOD wealth's log, pair by pair: half on the plug-in bets
    `bets`, half on the grid (the definition the decomposition must reproduce)."""
    tol = test.tolerance
    grid = np.asarray(cs.GOOD_GRID) / (1 - tol)
    best = math.inf
    for bits in itertools.product((0, 1), repeat=test.k):
        z = np.array([bits[a] - bits[b] for a, b in zip(xs, ys)], float)
        mix = np.log(np.mean([np.exp(np.log1p(lam * (tol - z)).sum()) for lam in grid]))
        plug = np.log1p(np.asarray(bets) * (tol - z)).sum()
        best = min(best, float(np.logaddexp(math.log(0.5) + plug, math.log(0.5) + mix)))
    return best


def plug_in_bet(test: cs.PairedTest) -> float:
    """The plug-in's bet for the next pair, as `add` computes it (from the pairs before it)."""
    second = (test._worst + cs.PRIOR_PAIRS * 0.5) / (test.n + cs.PRIOR_PAIRS)
    return min(test.tolerance / (test.tolerance**2 + second), 0.8 / (1 - test.tolerance))  # hidden 0 here


@st.composite
def pair_runs(draw: st.DrawFn) -> tuple[int, list[tuple[int, int]]]:
    k = draw(st.integers(2, 6))
    pairs = draw(
        st.lists(st.tuples(st.integers(0, k - 1), st.integers(0, k - 1), st.booleans()), min_size=1, max_size=40)
    )
    return k, [(x, x if same else y) for x, y, same in pairs]  # about half the pairs agree


@pytest.mark.parametrize("whole", [8, 2, 0], ids=["exact", "two-whole", "none-whole"])
@settings(max_examples=60, deadline=None)
@given(case=pair_runs())
def test_the_least_wealth_is_the_per_set_minimum_or_below_it(whole: int, case) -> None:
    """With every category seen kept whole the least is the per-set minimum itself; with fewer
    (the others bounded) it is never above it: a GOOD from it is a GOOD every set agrees on."""
    k, pairs = case
    test = cs.PairedTest(k, 0.1, 0.03)
    xs, ys, bets = [], [], []
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cs, "WHOLE_NODES", whole)
        for x, y in pairs:
            bets.append(plug_in_bet(test))
            test.add(x, y)
            xs.append(x)
            ys.append(y)
    want = per_set_least(test, xs, ys, bets)
    if whole >= k:
        assert test.log_e_good == pytest.approx(want, abs=1e-9)
    else:
        assert test.log_e_good <= want + 1e-9


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 9), st.randoms(use_true_random=False))
def test_the_cut_bound_is_never_below_the_largest_cut(n: int, rnd) -> None:
    weights = np.zeros((n, n))
    for a in range(n):
        for b in range(a + 1, n):
            if rnd.random() < 0.6:
                weights[a, b] = weights[b, a] = rnd.randint(1, 9)
    largest = max(
        float(sum(weights[a, b] for a in range(n) for b in range(n) if bits[a] and not bits[b]))
        for bits in itertools.product((0, 1), repeat=n)
    )
    assert cs.cut_bound(weights) >= largest - 1e-9


def coupled_pairs(
    rng: np.random.Generator, q: np.ndarray, p: np.ndarray, runs: int, reshuffled: float
) -> tuple[list[int], list[int]]:
    """Pairs as one seed gives them: one uniform through each distribution's inverse CDF (the
    runs agree wherever the change does not reach), except a share `reshuffled` of the seeds,
    where the tested run draws afresh (a change that also moves another random stream)."""
    u = rng.random(runs)
    fresh = np.where(rng.random(runs) < reshuffled, rng.random(runs), u)
    tested = np.minimum(np.searchsorted(np.cumsum(q), fresh, side="right"), q.size - 1)
    control = np.minimum(np.searchsorted(np.cumsum(p), u, side="right"), p.size - 1)
    return tested.tolist(), control.tolist()


SHAPES = {"tied": 0.0, "half reshuffled": 0.5, "independent": 1.0}
P4 = np.array([0.30, 0.45, 0.25, 0.0])
AT_TOLERANCE = np.array([0.40, 0.35, 0.25, 0.0])  # TV 0.1 exactly


@pytest.mark.parametrize("shape", list(SHAPES))
def test_false_good_at_the_tolerance_stays_rare(shape: str) -> None:
    """TV exactly the tolerance, beta 0.1, 40 histories per shape: GOOD at most in a share the
    binomial(40, 0.1) reaches with probability < 0.2% (10 of 40); measured 0 in each."""
    rng = np.random.default_rng({"tied": 51, "half reshuffled": 52, "independent": 53}[shape])
    good = 0
    for _ in range(40):
        tested, control = coupled_pairs(rng, AT_TOLERANCE, P4, 600, SHAPES[shape])
        ev = cs.paired_evidence(tested, control, 4, alpha=0.1, beta=0.1, tolerance=0.1, eta=0.03, max_runs=600)
        good += ev.decision is Verdict.GOOD
    assert good < 10, good


@pytest.mark.heavy  # one to two minutes each: after the default suite (README: Tests)
@pytest.mark.parametrize("shape", list(SHAPES))
def test_false_good_at_the_tolerance_is_at_most_beta_on_many_categories(shape: str) -> None:
    """Twelve categories (more than WHOLE_NODES: the bounded path) at TV exactly the tolerance,
    beta 0.05, 100 histories per shape: at most 12 GOOD (past the 99.9% binomial quantile)."""
    rng = np.random.default_rng({"tied": 61, "half reshuffled": 62, "independent": 63}[shape])
    p = np.append(np.full(11, 0.9 / 11), 0.1)
    q = p.copy()
    q[:5] += 0.02
    q[5:10] -= 0.02  # TV 0.1
    good = 0
    for _ in range(100):
        tested, control = coupled_pairs(rng, q, p, 1500, SHAPES[shape])
        ev = cs.paired_evidence(tested, control, 12, alpha=0.05, beta=0.05, tolerance=0.1, eta=0.03, max_runs=1500)
        good += ev.decision is Verdict.GOOD
    assert good <= 12, good


def test_a_commit_like_the_control_is_good_on_many_categories_too() -> None:
    """Twelve categories, the control's own distribution tied seed for seed: GOOD once the runs
    agree long enough (as with three), not stuck because the least is bounded past WHOLE_NODES."""
    rng = np.random.default_rng(64)
    p = np.append(np.full(11, 0.9 / 11), 0.1)
    for reshuffled, budget in ((0.0, 400), (0.05, 2500)):
        tested, control = coupled_pairs(rng, p, p, budget, reshuffled)
        ev = cs.paired_evidence(tested, control, 12, alpha=5e-4, beta=5e-4, tolerance=0.1, eta=0.03, max_runs=budget)
        assert ev.decision is Verdict.GOOD, (reshuffled, ev.reason)


@pytest.mark.parametrize("reshuffled", [0.0, 1.0], ids=["tied", "independent"])
def test_the_gate_changes_no_decision_of_its_own_test(reshuffled: float) -> None:
    """With `level` the least is computed only when it could reach 1/beta; at every pair the
    verdict is GOOD exactly when the least computed then would say so, and most pairs skip."""
    rng = np.random.default_rng(65)
    p = np.append(np.full(11, 0.9 / 11), 0.1)
    tested, control = coupled_pairs(rng, p, p, 3000, reshuffled)
    test = cs.PairedTest(12, 0.1, 0.03, level=1e-3)
    skipped = 0
    for x, y in zip(tested, control):
        test.add(x, y)
        skipped += test._rise > 0
        ev = test.evidence(alpha=1e-3, beta=1e-3, max_runs=10**6)
        least = test._least_good()[0]  # computed now, moving nothing
        assert (ev.decision is Verdict.GOOD) == (least >= math.log(1e3)), (test.n, least, ev)
        if ev.decision is not None:
            break
    assert ev.decision is Verdict.GOOD and skipped > 0.5 * test.n, (ev, skipped, test.n)
