"""bisectbot.statistics.stats: calibration by simulation (fixed seeds) and property tests.

Monte Carlo margins: with N simulated sequences an error rate r is estimated with standard
error sqrt(r(1−r)/N); assertions allow ~3 standard errors (or a Clopper-Pearson-style count
bound) so a fixed seed cannot pass by luck nor fail by it.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import xlogy

from bench import simulate as sim
from bisectbot.core import broken_end, search
from bisectbot.statistics import control_sample, sequential, skips, tvnull, two_sample
from bisectbot.statistics import stats as S

REF = sim.ref_29975()
P_COND = list(sim.P_29975.values())
GROSS = sim.joint([1.0, 0.0, 0.0])
TV10 = sim.joint(sim.hardest_tv_shift(P_COND, 0.1))


# -- reference ---------------------------------------------------------------------------------


def test_reference_layout_and_index() -> None:
    assert REF.names == ("e", "g", "h", S.OTHER, S.MISSED)
    assert REF.probs[3] == 0.0 and math.isclose(sum(REF.probs), 1.0)
    assert math.isclose(REF.probs[4], 0.18)
    assert REF.index("g") == 1
    assert REF.index("zzz") == 3 and REF.index(None) == 3
    assert REF.index("g", met_condition=False) == 4
    plain = S.Reference.from_probs({"a": 0.5, "b": 0.5})
    assert plain.names == ("a", "b", S.OTHER) and plain.index("a", met_condition=False) is None


@pytest.mark.parametrize(
    "probs, cond, msg",
    [
        ({"a": 0.5, "b": 0.4}, None, "sum to 0.9"),
        ({"a": -0.1, "b": 1.1}, None, "≥ 0"),
        ({}, None, "empty"),
        ({"a": 1.0}, 0.0, "condition_prob"),
        ({S.OTHER: 1.0}, None, "reserved"),
    ],
)
def test_reference_validation(probs, cond, msg) -> None:
    with pytest.raises(ValueError, match=msg):
        S.Reference.from_probs(probs, cond)


def test_reference_renormalises_within_tolerance() -> None:
    r = S.Reference.from_probs({"a": 0.5004, "b": 0.5})
    assert math.isclose(sum(r.probs), 1.0)


FAILING = S.Reference.from_probs(sim.P_29975, sim.CONDITION_29975, failures=True)


def crashing(rate: float) -> np.ndarray:
    """#29975's reference as category probabilities (e, g, h, OTHER, FAILED, MISSED) when a
    share `rate` of the runs fail (whatever they would have printed)."""
    q = REF.p
    return np.concatenate([q[:4] * (1 - rate), [rate], [q[4] * (1 - rate)]])


def test_failed_runs_as_an_outcome_are_a_category_the_reference_never_gives() -> None:
    assert FAILING.names == ("e", "g", "h", S.OTHER, S.FAILED, S.MISSED) and FAILING.failed == 4
    assert FAILING.probs[4] == 0.0 and FAILING.probs[:4] == REF.probs[:4] and REF.failed is None
    # the glitch allowance predicts a rare crash as it predicts a stray outcome (η/2 of the met runs each)
    tolerant, plain = np.asarray(FAILING.tolerant(ETA)), np.asarray(REF.tolerant(ETA))
    assert tolerant[3] == pytest.approx(ETA / 2 * 0.82) and tolerant[4] == pytest.approx(ETA / 2 * 0.82)
    assert plain[3] == pytest.approx(ETA / 2 * 0.82) and plain[:3] == pytest.approx(REF.p[:3] * (1 - ETA / 2))
    control = S.Reference.from_control({"a": 60, "b": 40}, failures=True)
    assert control.names == ("a", "b", S.OTHER, S.FAILED) and control.index(S.FAILED) == 3
    with pytest.raises(ValueError, match="reserved"):
        S.Reference.from_probs({S.FAILED: 1.0})


@pytest.mark.longest  # the longest tier: by hand, not in CI (README: Tests)
def test_a_crash_rate_of_30_percent_is_bad_and_none_is_good() -> None:
    """With failed runs an outcome (statistic.failures: outcome), a commit whose runs crash 30% of
    the time departs from a reference where they never crash (TV 0.3): BAD within a few dozen
    runs; one that never crashes is GOOD as before; a crash rate at the edge of the BAD null (a
    failed share of eta among the runs that met the condition or failed) is not BAD beyond alpha."""
    kw = dict(alpha=5e-4, beta=5e-4, tolerance=0.1, eta=ETA)
    bad = sim.simulate_generic(np.random.default_rng(31), FAILING, crashing(0.3), max_runs=300, paths=1000, **kw)
    assert bad.rate(sim.BAD) == 1.0 and bad.mean_runs() < 60, bad.mean_runs()
    good = sim.simulate_generic(np.random.default_rng(32), FAILING, crashing(0.0), max_runs=2000, paths=1000, **kw)
    assert good.rate(sim.GOOD) >= 0.95 and good.rate(sim.BAD) == 0.0
    c = sim.CONDITION_29975
    at_edge = c * ETA / (1 - (1 - c) * ETA)  # r / (c·(1 − r) + r) = eta
    edge = sim.simulate_generic(
        np.random.default_rng(33), FAILING, crashing(at_edge), alpha=ALPHA, beta=ALPHA, tolerance=0.1, eta=ETA,
        max_runs=1000, paths=2000,
    )  # fmt: skip
    assert edge.rate(sim.BAD) <= ALPHA + 3 * math.sqrt(ALPHA / 2000), edge.rate(sim.BAD)


# -- calibration (fixed seeds) -----------------------------------------------------------------

ALPHA = 5e-3  # larger than the pipeline's so false alarms are frequent enough to measure


@pytest.mark.heavy  # whole bisects or long simulations, 4 s or more: after the default suite (README: Tests)
def test_false_bad_rate_under_reference_is_at_most_alpha() -> None:
    out = sim.simulate_generic(
        np.random.default_rng(11), REF, REF.p, alpha=ALPHA, beta=ALPHA, tolerance=0.1, max_runs=1000, paths=4000
    )
    false_bad = out.rate(sim.BAD)
    # Ville: ≤ α at any stopping time; allow 3 Monte Carlo standard errors.
    assert false_bad <= ALPHA + 3 * math.sqrt(ALPHA / 4000), false_bad
    assert out.rate(sim.GOOD) >= 0.9  # GOOD at tolerance 0.1 within 1000 runs, mostly


@pytest.mark.heavy  # whole bisects or long simulations, 4 s or more: after the default suite (README: Tests)
def test_false_good_rate_at_tolerance_boundary_is_at_most_beta() -> None:
    """Truth exactly at TV = tolerance (the hardest point of the GOOD null)."""
    out = sim.simulate_generic(
        np.random.default_rng(12), REF, TV10, alpha=ALPHA, beta=ALPHA, tolerance=0.1, max_runs=1500, paths=1500
    )
    assert out.rate(sim.GOOD) <= ALPHA + 3 * math.sqrt(ALPHA / 1500)
    assert out.rate(sim.BAD) >= 0.9


def test_power_gross_bug() -> None:
    out = sim.simulate_generic(
        np.random.default_rng(13), REF, GROSS, alpha=5e-4, beta=5e-4, tolerance=0.1, max_runs=200, paths=3000
    )
    assert out.rate(sim.BAD) == 1.0
    assert out.mean_runs() <= 15.0  # acceptance: ≤ 15 runs at α = 5e-4 (measured ≈ 13.9)


def test_with_eta_zero_an_unseen_token_is_bad_at_once() -> None:
    q = sim.joint(P_COND, other=0.02)
    out = sim.simulate_generic(
        np.random.default_rng(14), REF, q, alpha=5e-4, beta=5e-4, tolerance=0.1, max_runs=2000, paths=500
    )
    assert out.rate(sim.BAD) == 1.0


# -- the indifference zone (eta): BAD means "farther than eta from the reference" ---------------

ETA = 0.03  # the default for tolerance 0.1 (StatTestConfig.indifference)
TV15 = sim.joint(sim.hardest_tv_shift(P_COND, 0.15))


@pytest.mark.longest  # the longest tier: by hand, not in CI (README: Tests)
def test_a_stray_outcome_in_2_percent_of_runs_is_not_bad() -> None:
    """Issue 10: a point null called such a commit BAD 95–99.8% of the time; inside the η ball
    it is in the null, so false BAD ≤ α, and GOOD still comes (the GOOD numerator bets on it)."""
    q = sim.joint(P_COND, other=0.02)
    out = sim.simulate_generic(
        np.random.default_rng(21), REF, q, alpha=ALPHA, beta=ALPHA, tolerance=0.1, max_runs=2000, paths=2000, eta=ETA
    )
    assert out.rate(sim.BAD) <= ALPHA + 3 * math.sqrt(ALPHA / 2000), out.rate(sim.BAD)
    assert out.rate(sim.GOOD) >= 0.9


@pytest.mark.heavy  # whole bisects or long simulations, 4 s or more: after the default suite (README: Tests)
@pytest.mark.parametrize("where", ["conditional", "condition"])
def test_false_bad_at_the_edge_of_the_ball_is_at_most_alpha(where: str) -> None:
    """The hardest point of the BAD null: TV exactly η in the conditional outcome distribution,
    or in P(condition)."""
    if where == "conditional":
        q = sim.joint(sim.hardest_tv_shift(P_COND, ETA))
    else:
        q = sim.joint(P_COND, condition_prob=sim.CONDITION_29975 + ETA)
    out = sim.simulate_generic(
        np.random.default_rng(22), REF, q, alpha=ALPHA, beta=ALPHA, tolerance=0.1, max_runs=1000, paths=2000, eta=ETA
    )
    assert out.rate(sim.BAD) <= ALPHA + 3 * math.sqrt(ALPHA / 2000), out.rate(sim.BAD)


@pytest.mark.heavy  # whole bisects or long simulations, 4 s or more: after the default suite (README: Tests)
def test_with_eta_a_gross_bug_is_still_bad_within_16_runs_and_tv_015_within_the_budget() -> None:
    gross = sim.simulate_generic(
        np.random.default_rng(23), REF, GROSS, alpha=5e-4, beta=5e-4, tolerance=0.1, max_runs=100, paths=2000, eta=ETA
    )
    assert gross.rate(sim.BAD) == 1.0 and gross.mean_runs() <= 16.0, gross.mean_runs()
    mild = sim.simulate_generic(
        np.random.default_rng(24), REF, TV15, alpha=5e-4, beta=5e-4, tolerance=0.1, max_runs=4000, paths=300, eta=ETA
    )
    assert mild.rate(sim.BAD) >= 0.99


@pytest.mark.heavy  # after the default suite (README: Tests)
def test_betting_toward_the_bad_end_keeps_false_bad_below_alpha_and_speeds_a_subtle_bug() -> None:
    """`toward` (the bad end's q̂, fixed before the re-test's runs) moves half the BAD mixture onto
    it: at the edge of the ball false BAD stays ≤ α; a TV 0.1 bug like q̂ is BAD sooner."""
    rng = np.random.default_rng(27)
    tv10 = sim.joint(sim.hardest_tv_shift(P_COND, 0.1))
    q_hat = np.asarray(S.kt_smooth(rng.multinomial(1800, tv10)))
    lb = math.log(1 / ALPHA)
    edge = sim.draw_counts(rng, sim.joint(sim.hardest_tv_shift(P_COND, ETA)), 2000, 1500).astype(float)
    false_bad = (sequential.log_e_depart_many(edge, REF, ETA, toward=q_hat) >= lb).any(-1).mean()
    assert false_bad <= ALPHA + 3 * math.sqrt(ALPHA / 2000), false_bad
    bug = sim.draw_counts(rng, tv10, 200, 4000).astype(float)
    with_q = sim.first_true(sequential.log_e_depart_many(bug, REF, ETA, toward=q_hat) >= math.log(2000))
    without = sim.first_true(sequential.log_e_depart_many(bug, REF, ETA) >= math.log(2000))
    assert (with_q >= 0).mean() >= 0.97  # measured 0.99 (0.975 without), median 1,430 runs (1,790)
    assert np.median(np.where(with_q >= 0, with_q, 4000)) < 0.9 * np.median(np.where(without >= 0, without, 4000))


@pytest.mark.heavy  # after the default suite (README: Tests)
def test_the_ball_maximum_is_never_underestimated() -> None:
    """log_sup_tv_ball_many against a numerical optimiser (SLSQP, several starts) on random
    counts, references (some with a zero category) and radii: the closed form is never below
    the optimum (an underestimate would inflate the BAD e-value)."""
    from scipy.optimize import minimize

    rng = np.random.default_rng(25)
    for trial in range(30):
        k = int(rng.integers(2, 6))
        p = rng.dirichlet(np.ones(k))
        if trial % 3 == 0:
            p[0] = 0.0
            p /= p.sum()
        n = rng.multinomial(int(rng.integers(1, 80)), rng.dirichlet(np.full(k, 0.5))).astype(float)
        eta = float(rng.choice([0.02, 0.05, 0.1, 0.3]))
        got = float(sequential.log_sup_tv_ball_many(n, p, eta))
        best = -math.inf
        for start in range(4):
            x0 = p if start == 0 else 0.5 * p + 0.5 * rng.dirichlet(np.ones(k))
            res = minimize(
                lambda r: -(n * np.log(np.maximum(r, 1e-300))).sum(),
                x0,
                method="SLSQP",
                bounds=[(0, 1)] * k,
                options={"maxiter": 500, "ftol": 1e-12},
                constraints=[
                    {"type": "eq", "fun": lambda r: r.sum() - 1},
                    {"type": "ineq", "fun": lambda r: eta - 0.5 * np.abs(r - p).sum()},
                ],
            )
            if abs(res.x.sum() - 1) < 1e-6 and 0.5 * np.abs(res.x - p).sum() <= eta + 1e-7:
                best = max(best, -float(res.fun))
        assert got >= best - 1e-4, (trial, n, p, eta, got, best)


def test_sticky_learns_the_good_side_around_a_tolerant_reference() -> None:
    """With the glitch-tolerant reference as its good side, a known-p model pays ~η/2 per good
    run, and over thousands of runs "all bad, one pooled q" wins (found in the pipeline: the
    search named the first commit again and again). Learning the good side around p fixes it."""
    rng = np.random.default_rng(26)
    good = np.asarray(REF.tolerant(ETA))
    cdf_good, cdf_bad = np.cumsum(REF.p)[:-1], np.cumsum(TV15)[:-1]
    bad_counts = rng.multinomial(800, TV15)
    right = 0
    for _ in range(10):
        culprit = int(rng.integers(5, 40))

        def run(i: int) -> int:
            return int(np.searchsorted(cdf_bad if i >= culprit else cdf_good, rng.random(), side="right"))

        res = search.sticky_bisect(
            45, run, good, bad_counts, confidence=0.999, max_runs=60_000, good_strength=broken_end.STICKY_GOOD_STRENGTH
        )
        right += res.culprit == culprit
    assert right == 10


# -- the change test, likeness seed for seed, and skips for failing runs --------------------------


def _change_first_passage(
    rng: np.random.Generator,
    q_x: np.ndarray,
    q_y: np.ndarray,
    *,
    paths: int,
    runs: int,
    alpha: float,
    centres_x: list,
    centres_y: list,
) -> np.ndarray:
    cx, cy = sim.draw_counts(rng, q_x, paths, runs), sim.draw_counts(rng, q_y, paths, runs)
    log_e = two_sample.log_e_change_many(cx, cy, [REF.estimate, *centres_x], [REF.estimate, *centres_y])
    return sim.first_true(log_e >= math.log(1 / alpha))


# the reference case in the default suite, the other two (10 s each) after it (README: Tests)
@pytest.mark.heavy  # whole bisects or long simulations, 4 s or more: after the default suite (README: Tests)
@pytest.mark.parametrize(
    "where",
    ["reference", pytest.param("gross", marks=pytest.mark.heavy), pytest.param("stray 5%", marks=pytest.mark.heavy)],
)
def test_the_change_test_seldom_sees_a_change_where_there_is_none(where: str) -> None:
    """Two commits with one distribution (anywhere, not only the reference): false CHANGED ≤ α,
    whatever the mixtures lean toward (here: away from the truth, the worst case for them)."""
    q = {"reference": REF.p, "gross": GROSS, "stray 5%": sim.joint(P_COND, other=0.05)}[where]
    rng = np.random.default_rng({"reference": 31, "gross": 32, "stray 5%": 33}[where])
    wrong = np.asarray(S.kt_smooth([10, 1, 1, 1, 5]))
    first = _change_first_passage(
        rng, q, q, paths=3000, runs=1500, alpha=ALPHA, centres_x=[wrong], centres_y=[S.kt_smooth(list(GROSS * 100))]
    )
    assert (first >= 0).mean() <= ALPHA + 3 * math.sqrt(ALPHA / 3000)


def test_the_change_test_finds_a_gross_change_fast_and_a_tv_015_one_within_the_budget() -> None:
    rng = np.random.default_rng(34)
    gross = _change_first_passage(
        rng, GROSS, REF.p, paths=500, runs=200, alpha=5e-4, centres_x=[S.kt_smooth(list(GROSS * 50))], centres_y=[]
    )
    assert (gross >= 0).all() and np.median(gross) <= 30
    tv15 = sim.joint(sim.hardest_tv_shift(P_COND, 0.15))
    q_hat = S.kt_smooth(list(sim.draw_counts(rng, tv15, 1, 500)[0, -1]))  # the commit's own search runs
    subtle = _change_first_passage(rng, tv15, REF.p, paths=300, runs=4000, alpha=5e-4, centres_x=[q_hat], centres_y=[])
    assert (subtle >= 0).mean() >= 0.99 and np.median(subtle) <= 800


def test_likeness_seed_for_seed_is_a_valid_placement() -> None:
    """Commits run on the same seeds differ on a share d ≥ TV of them (the coupling inequality):
    at d = delta a commit is placed beside the end at most STEER_LEVEL of the time; identical
    outputs are placed after ~120 seeds; a few differing seeds only delay it."""
    rng = np.random.default_rng(35)
    threshold = math.log(1 / two_sample.STEER_LEVEL)
    differ = rng.random((20_000, 2000)) < two_sample.ALIKE_DELTA
    agree_n, differ_n = np.cumsum(~differ, axis=1), np.cumsum(differ, axis=1)
    log_e = agree_n * math.log((1 - two_sample.ALIKE_DELTA / 4) / (1 - two_sample.ALIKE_DELTA)) + differ_n * math.log(
        0.25
    )
    placed = (log_e >= threshold).any(axis=1).mean()
    assert placed <= two_sample.STEER_LEVEL + 3 * math.sqrt(two_sample.STEER_LEVEL / 20_000), placed
    assert two_sample.log_e_alike(118, 0) < threshold <= two_sample.log_e_alike(119, 0)
    assert two_sample.log_e_alike(119 + 36, 1) >= threshold > two_sample.log_e_alike(119 + 34, 1)


def test_skipping_for_failing_runs_needs_evidence_in_proportion() -> None:
    """Every run failing: skipped after 7 runs. Half of them failing (the null's edge): skipped
    at most SKIP_LEVEL of the time. 10% failing (the audit's case, 5 early failures in 7 runs
    used to skip): never within 4,000 runs."""
    assert not skips.mostly_failing(6, 0) and skips.mostly_failing(7, 0)
    assert not skips.mostly_failing(5, 2)  # the audit's 5 failures in 7 runs
    rng = np.random.default_rng(36)

    def skipped(rate: float, paths: int, runs: int) -> float:
        fails = np.cumsum(rng.random((paths, runs)) < rate, axis=1)
        oks = np.arange(1, runs + 1) - fails
        terms = [
            math.log(w) + fails * math.log(2 * f) + oks * math.log(2 * (1 - f)) for f, w in skips.SKIP_ALTERNATIVES
        ]
        log_e = np.logaddexp.reduce(np.stack(terms), axis=0)
        return float((log_e >= math.log(1 / skips.SKIP_LEVEL)).any(axis=1).mean())

    assert skipped(0.5, 20_000, 400) <= skips.SKIP_LEVEL + 3 * math.sqrt(skips.SKIP_LEVEL / 20_000)
    assert skipped(0.1, 2_000, 4000) == 0.0
    assert skipped(0.9, 2_000, 60) == 1.0


def test_a_quick_step_never_says_good() -> None:
    q_hat = S.kt_smooth([82, 0, 0, 0, 18])
    like_reference = [30, 40, 18, 0, 18]
    ev = broken_end.test_quick(like_reference, REF, q_hat, alpha=1e-3, beta=1e-3, max_runs=1000, eta=0.03)
    assert ev.decision is S.Verdict.GOOD_SIDE and "not a test against the reference" in ev.reason
    # a milder defect is unlike the broken end too: placed GOOD-SIDE after a few runs, which is
    # why a placement never counts as GOOD (the confirmation tests the parent against the reference)
    mild = [round(x) for x in 20 * sim.joint(sim.hardest_tv_shift(P_COND, 0.15))]
    assert (
        broken_end.test_quick(mild, REF, q_hat, alpha=1e-3, beta=1e-3, max_runs=1000, eta=0.03).decision
        is S.Verdict.GOOD_SIDE
    )
    assert (
        broken_end.test_quick([60, 0, 0, 0, 10], REF, q_hat, alpha=1e-3, beta=1e-3, max_runs=1000, eta=0.03).decision
        is S.Verdict.BAD
    )


def _coupled_paths(rng: np.random.Generator, q: np.ndarray, p: np.ndarray, paths: int, runs: int, **kw) -> list:
    """Simulated tests as the pipeline pairs them: each tested run and its one control run come from the same seed:
    one uniform draw through each commit's inverse CDF (a program whose change moves a
    threshold: the runs agree wherever the change does not reach)."""
    out = []
    for _ in range(paths):
        u = rng.random(runs)
        tested = np.minimum(np.searchsorted(np.cumsum(q), u, side="right"), q.size - 1)
        control = np.minimum(np.searchsorted(np.cumsum(p), u, side="right"), p.size - 1)
        out.append(control_sample.paired_evidence(tested.tolist(), control.tolist(), q.size, max_runs=runs, **kw))
    return out


@pytest.mark.longest  # the longest tier: by hand, not in CI (README: Tests)
def test_control_sample_paired_seed_for_seed_is_calibrated() -> None:
    """The pipeline's pairing (the control's run on the tested run's seed), by simulation: with
    runs tied by their seed, false BAD exactly eta away ≤ alpha (also betting toward the way it
    leans), false GOOD exactly at the tolerance ≤ beta; pairs of independent runs (a change that
    reshuffles every seed) stay calibrated too; and where the runs agree the test is far shorter
    than with independent pairs: the control's own program GOOD, a 0.12 move BAD."""
    rng = np.random.default_rng(29)
    p = np.asarray(REF.p)
    levels = dict(alpha=0.05, beta=0.05, tolerance=0.1, eta=0.03)
    at_eta = np.asarray(sim.hardest_tv_shift(p, 0.03))
    at_tol = np.asarray(sim.hardest_tv_shift(p, 0.1))
    for paths in (_coupled_paths, _paired_paths_one):
        false_bad = sum(ev.decision is S.Verdict.BAD for ev in paths(rng, at_eta, p, 150, 1500, **levels))
        assert false_bad <= 15, (paths.__name__, false_bad)  # 15: past the 99.9% binomial quantile of 5%
        leaning = paths(rng, at_eta, p, 150, 1500, toward=at_tol, **levels)
        assert sum(ev.decision is S.Verdict.BAD for ev in leaning) <= 15, paths.__name__
        false_good = sum(ev.decision is S.Verdict.GOOD for ev in paths(rng, at_tol, p, 150, 1500, **levels))
        assert false_good <= 15, (paths.__name__, false_good)
    strict = dict(alpha=5e-4, beta=5e-4, tolerance=0.1, eta=0.03)
    gross = _paired_paths_one(rng, np.asarray(GROSS, dtype=float), p, 20, 200, **strict)
    assert all(ev.decision is S.Verdict.BAD and ev.n < 100 for ev in gross)  # the exact reference: ~15
    assert np.median([ev.n for ev in gross]) < 45
    same = _coupled_paths(rng, p, p, 20, 4000, **strict)
    alone = _paired_paths_one(rng, p, p, 20, 4000, **strict)
    assert (
        all(ev.decision is S.Verdict.GOOD for ev in same) and sum(ev.decision is S.Verdict.GOOD for ev in alone) >= 19
    )
    assert not any(ev.decision is S.Verdict.BAD for ev in same + alone)
    assert max(ev.n for ev in same) < 150 < min(ev.n for ev in alone)
    moved = np.asarray(sim.hardest_tv_shift(p, 0.12))  # beyond the tolerance: BAD is the answer
    tied = _coupled_paths(rng, moved, p, 10, 4000, **strict)
    loose = _paired_paths_one(rng, moved, p, 10, 4000, **strict)
    assert all(ev.decision is S.Verdict.BAD for ev in tied + loose)
    assert np.median([ev.n for ev in tied]) * 3 < np.median([ev.n for ev in loose])


def _paired_paths_one(rng: np.random.Generator, q: np.ndarray, p: np.ndarray, paths: int, runs: int, **kw) -> list:
    """Independent pairs, one control run beside each tested run (runs on unrelated seeds)."""
    out = []
    for _ in range(paths):
        tested = rng.choice(q.size, size=runs, p=q).tolist()
        control = rng.choice(p.size, size=runs, p=p).tolist()
        out.append(control_sample.paired_evidence(tested, control, q.size, max_runs=runs, **kw))
    return out


@pytest.mark.heavy  # whole bisects or long simulations, 4 s or more: after the default suite (README: Tests)
def test_paired_test_is_valid_whatever_the_control_says() -> None:
    """With eta = 0 (the point null q = p), a commit identical to the control's commit is BAD in
    at most alpha of the paths: the control's own noise is in the test (a test against the
    control's frequencies taken as exact would fire far more often); bad input is refused."""
    rng = np.random.default_rng(23)
    p = np.array([0.5, 0.3, 0.2, 0.0])
    levels = dict(alpha=0.05, beta=0.05, tolerance=0.1, eta=0.0)
    false_bad = sum(ev.decision is S.Verdict.BAD for ev in _paired_paths_one(rng, p, p, 200, 800, **levels))
    assert false_bad <= 18
    with pytest.raises(ValueError, match="eta"):
        control_sample.PairedTest(4, 0.1, 0.2)


def test_sticky_bisect_finds_gross_culprit() -> None:
    rng = np.random.default_rng(17)
    right = 0
    for _ in range(20):
        culprit = int(rng.integers(1, 4096))
        found, runs, builds = sim.bisect_sticky(rng, REF, GROSS, 4096, culprit, 0.999)
        right += found == culprit
        assert builds <= 20
    assert right == 20


def test_step_level_follows_the_union_bound() -> None:
    # ⌈log2(n − 1)⌉ search steps, the two ends, the change test and one fresh re-test of the
    # parent share 1 − confidence
    for n, steps in ((3, 1), (4096, 12), (4097, 12), (4098, 13)):
        assert math.isclose(S.step_level(n), 0.01 / (steps + 4))
    assert math.isclose(S.step_level(2), 0.01 / 4)


def wald_bound(q: Sequence[float], p: Sequence[float], alpha: float, beta: float) -> float:
    """Lower bound on E_q[N] for ANY sequential test that decides "not p" with probability
    ≥ 1 − β under q and ≤ α under p (Wald 1945; Hoeffding 1960): d(1−β ‖ α) / KL(q‖p),
    d the binary KL. ≈ log(1/α)/KL(q‖p) for small α, β."""
    d = S.kl(q, p)
    return sim.binary_kl(1 - beta, alpha) / d if d > 0 else math.inf


def good_wald_bound(ref: S.Reference, tolerance: float, alpha: float, beta: float) -> float:
    """Wald bound for certifying GOOD under q = p against every q with TV ≥ tolerance:
    d(1−α ‖ β) / min_{q ∈ H0} KL(p‖q), the minimum over the same null as the GOOD test
    (binary reductions per subset S). With a condition probability c the conditional part
    learns only from the fraction c of runs that meet it, and both parts must be certified."""
    d = sim.binary_kl(1 - alpha, beta)
    if not ref.has_condition:
        return d / _min_binary_kl(ref.p, tolerance)
    assert ref.condition_prob is not None
    c = float(ref.condition_prob)
    part_a = d / (c * _min_binary_kl(ref.p[:-1] / c, tolerance))
    part_b = d / _min_binary_kl(np.array([c, 1 - c]), tolerance)
    return max(part_a, part_b)


def _min_binary_kl(p: np.ndarray, eps: float) -> float:
    """min over S of kl(p(S) ‖ p(S) + ε): the GOOD null's nearest point to p, i.e. the deficit of
    its maximum at counts ∝ p (exact here: at most three possible outcomes, tvnull.HEAVY)."""
    return float(xlogy(p, p).sum() - tvnull.log_sup_tv_null_many(p, p, eps))


@pytest.mark.heavy  # whole bisects or long simulations, 4 s or more: after the default suite (README: Tests)
def test_wald_bounds_are_the_textbook_formula_and_no_test_beats_them() -> None:
    from scipy.stats import entropy  # KL computed independently of stats.kl

    d = entropy([1 - 1e-3, 1e-3], [1e-3, 1 - 1e-3])
    for q in (GROSS, TV10):
        assert wald_bound(q, REF.p, 1e-3, 1e-3) == pytest.approx(d / entropy(q, REF.p), rel=1e-6)
    # a lower bound on E[N] for any test with these error rates: the real tests respect it
    rng = np.random.default_rng(7)
    for q, budget in ((GROSS, 200), (TV10, 4000)):
        out = sim.simulate_generic(rng, REF, q, alpha=1e-3, beta=1e-3, tolerance=0.1, max_runs=budget, paths=300)
        assert (out.decision == sim.BAD).mean() > 0.95
        wald = wald_bound(q, REF.p, 1e-3, 1e-3)
        assert wald <= out.mean_runs() <= 3 * wald, (wald, out.mean_runs())
    good = sim.simulate_generic(rng, REF, REF.p, alpha=1e-3, beta=1e-3, tolerance=0.1, max_runs=5000, paths=200)
    assert good_wald_bound(REF, 0.1, 1e-3, 1e-3) <= good.mean_runs()


def test_sequential_matches_vectorised() -> None:
    """The scalar test called after each run equals the vectorised simulation."""
    rng = np.random.default_rng(18)
    path = sim.draw_counts(rng, TV10, 1, 400)[0]
    for eta in (0.0, 0.03):
        vb = sequential.log_e_depart_many(path.astype(float), REF, eta)
        vg = sequential.log_e_good_many(path.astype(float), REF, 0.1, eta=eta)
        for t in range(0, 400, 37):
            ev = sequential.test_against_reference(
                path[t], REF, alpha=1e-9, beta=1e-9, tolerance=0.1, max_runs=10**6, eta=eta
            )
            assert ev.log_e_bad == pytest.approx(vb[t]) and ev.log_e_good == pytest.approx(vg[t])


# -- properties (hypothesis) -------------------------------------------------------------------

counts5 = st.lists(st.integers(0, 300), min_size=5, max_size=5)


@settings(max_examples=150, deadline=None)
@given(counts5, st.sampled_from([0.05, 0.1, 0.3]))
def test_e_values_nonnegative_and_well_defined(counts, tol) -> None:
    ev = sequential.test_against_reference(counts, REF, alpha=1e-3, beta=1e-3, tolerance=tol, max_runs=500)
    for v in (ev.log_e_bad, ev.log_e_good):  # log E ∈ [−inf, +inf], never NaN ⇔ E ≥ 0
        assert not math.isnan(v)
    assert ev.log_e_bad > -math.inf  # the mixture never gives zero mass to seen data
    assert ev.n == sum(counts)
    if sum(counts) >= 500 and ev.decision is None:
        pytest.fail("budget reached but undecided")


@settings(max_examples=100, deadline=None)
@given(counts5, st.integers(1, 5))
def test_zero_probability_outcome_is_bad(counts, extra) -> None:
    counts = list(counts)
    counts[3] += extra  # OTHER has reference probability 0
    ev = sequential.test_against_reference(counts, REF, alpha=1e-6, beta=1e-6, tolerance=0.1, max_runs=10**6)
    assert ev.decision is S.Verdict.BAD and ev.log_e_bad == math.inf
    ev2 = broken_end.test_quick(counts, REF, S.kt_smooth([80, 0, 0, 0, 20]), alpha=1e-6, beta=1e-6, max_runs=10**6)
    assert ev2.decision is S.Verdict.BAD


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([0, 1, 2, 4]), min_size=1, max_size=60), st.randoms(use_true_random=False))
def test_mixture_is_exchangeable_and_equals_its_sequential_form(seq, rnd) -> None:
    """Run by run, the mixture is a product of one-step predictive probabilities; in any order
    of the same runs that product equals the closed form (so stopping after any run is fair)."""
    counts = np.bincount(seq, minlength=5).astype(float)
    closed = float(S.log_mixture_many(counts, S.prior_matrix(REF.probs)))
    shuffled = list(seq)
    rnd.shuffle(shuffled)
    amat = S.prior_matrix(REF.probs)
    for order in (seq, shuffled):
        log_m = np.log(np.mean([_sequential_dirichlet(order, aj) for aj in amat]))
        assert log_m == pytest.approx(closed, abs=1e-8)


def _sequential_dirichlet(seq: list[int], a: np.ndarray) -> float:
    """Π_t (a_k + n_k(t)) / (Σa + t): the Dirichlet predictive, one run at a time."""
    n = np.zeros_like(a)
    prob = 1.0
    for k in seq:
        prob *= (a[k] + n[k]) / (a.sum() + n.sum())
        n[k] += 1
    return prob


@settings(max_examples=80, deadline=None)
@given(counts5, st.lists(st.integers(0, 200), min_size=5, max_size=5))
def test_quick_statistic_is_valid_shape(counts, bad) -> None:
    ev = broken_end.test_quick(counts, REF, S.kt_smooth(bad), alpha=1e-3, beta=1e-3, max_runs=10**6)
    assert not math.isnan(ev.log_e_bad) and not math.isnan(ev.log_e_good)
    assert ev.decision is not S.Verdict.GOOD  # a quick step never says GOOD
    if counts[3] == 0:
        assert ev.log_e_bad < math.inf
