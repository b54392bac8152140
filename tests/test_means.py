"""The numeric tests (statistics.means): calibration and power by simulation with fixed seeds,
the interval agreeing with the verdict, the bands each config asks for."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bench.bench_means import SHAPES, case
from bisectbot.statistics import means
from bisectbot.statistics.means import Band, MeanTest, Scale, change_test, one_sided, spec
from bisectbot.statistics.outcome import Verdict

TOL, ETA = 0.1, 0.03
LEVEL = 0.05  # large, so that a rate at the level is measurable with a few thousand sequences


def _rates(
    shape: str, at: float, sequences: int, runs: int, seed: int, level: float = LEVEL
) -> tuple[float, float, float]:
    dec, when = case(
        SHAPES[shape],
        at,
        tolerance=TOL,
        eta=ETA,
        sd=0.2,
        runs=runs,
        sequences=sequences,
        alpha=level,
        beta=level,
        seed=seed,
    )
    return float((dec == 1).mean()), float((dec == -1).mean()), float(when.mean())


@pytest.mark.parametrize("shape", ["beta(2,1) in [0,1]", "bernoulli(0.3) in [0,1]"])
def test_bounded_values_hold_both_levels_at_the_boundaries(shape: str) -> None:
    """Declared bounds: the betting tests are exact, so false BAD at ±eta and false GOOD at
    ±tolerance stay under the level (800 sequences each)."""
    for at in (ETA, -ETA):
        bad, _, _ = _rates(shape, at, 800, 1200, seed=11)
        assert bad <= LEVEL, (shape, at, bad)
    for at in (TOL, -TOL):
        _, good, _ = _rates(shape, at, 800, 1200, seed=12)
        assert good <= LEVEL, (shape, at, good)


@pytest.mark.parametrize("shape", ["normal", "exponential", "lognormal(σ=1)", "t(3)"])
def test_unbounded_values_hold_the_levels_by_waiting_for_the_approximation(shape: str) -> None:
    """No bounds: the normal mixture decides only once the normal approximation holds at the
    level (MIN_RUNS, and longer for skewed values): false GOOD at ±tolerance and false BAD at
    ±eta stay under the level, skewed and heavy-tailed shapes included."""
    for at in (TOL, -TOL):
        _, good, _ = _rates(shape, at, 800, 1000, seed=21)
        assert good <= LEVEL, (shape, at, good)
    for at in (ETA, -ETA):
        bad, _, _ = _rates(shape, at, 800, 1000, seed=22)
        assert bad <= LEVEL, (shape, at, bad)


@pytest.mark.parametrize("shape", ["normal", "beta(2,1) in [0,1]"])
def test_power_at_no_change_and_at_twice_the_tolerance(shape: str) -> None:
    """A commit like the reference is GOOD and one at 2 × the tolerance BAD, nearly always, and
    the half-tolerance case (inside the band) is decided one way or the other."""
    bad, good, _ = _rates(shape, 0.0, 300, 1500, seed=31)
    assert good >= 0.99 and bad <= LEVEL
    bad, good, runs = _rates(shape, 2 * TOL, 300, 1500, seed=32)
    assert bad >= 0.99 and good == 0.0 and runs < 200
    bad, good, _ = _rates(shape, 0.5 * TOL, 300, 1500, seed=33)
    assert bad + good >= 0.99


def test_skewed_values_wait_longer_than_symmetric_ones() -> None:
    """The skewness gate: exponential runs take several times the runs normal ones take before
    GOOD at the pipeline's level (the price of not deciding early on a skewed mean), and
    `skew_runs` says how many."""
    _, good_n, runs_n = _rates("normal", 0.0, 200, 2000, seed=41, level=5e-4)
    _, good_e, runs_e = _rates("exponential", 0.0, 200, 2000, seed=41, level=5e-4)
    assert good_n >= 0.99 and good_e >= 0.95
    assert runs_e > 2 * runs_n
    rng = np.random.default_rng(5)
    assert means.skew_runs(rng.exponential(1, 5000), 5e-4) > 4 * means.skew_runs(rng.standard_normal(5000), 5e-4)
    assert means.skew_runs(rng.standard_normal(5000), 5e-4) >= means.MIN_RUNS


def test_a_bounded_bet_is_a_supermartingale_at_every_bet_size() -> None:
    """Exactness of the bounded test does not rest on the simulation: every factor 1 + λu is
    positive at the largest bet allowed, so the wealth never goes negative even on the worst
    run sequence (all runs at the bound against it)."""
    worst = np.zeros(200)  # every value at the lower bound 0, tested against "mean ≤ 1"... (u = −1)
    log_e = one_sided(worst - 1.0, +1, (-1.0, 0.0), floor=0.0)
    assert np.all(np.isfinite(log_e)) and log_e[-1] < 0


def _test_with(values: np.ndarray, scale: Scale, band: Band, control: np.ndarray | None = None) -> MeanTest:
    t = MeanTest(scale, band, floor=0.025, level=5e-4)
    for i, x in enumerate(values):
        t.add(float(x), None if control is None else float(control[i]))
    return t


def test_the_interval_agrees_with_the_verdict() -> None:
    """GOOD at beta has its interval (at beta) inside the tolerance band; BAD at alpha has its
    interval (at alpha/2 a side) outside the eta band: a report never shows a GOOD whose
    interval crosses the tolerance."""
    rng = np.random.default_rng(3)
    band = Band(0.54, 0.74, 0.61, 0.67)
    for mean, want in ((0.64, Verdict.GOOD), (0.45, Verdict.BAD), (0.85, Verdict.BAD)):
        values = np.clip(rng.normal(mean, 0.15, 3000), 0, 1)
        t = MeanTest(Scale("mean", (0.0, 1.0)), band, floor=0.025)
        ev = None
        for x in values:
            t.add(float(x))
            ev = t.evidence(alpha=5e-4, beta=5e-4, max_runs=3000, what="mean")
            if ev.decision is not None:
                break
        assert ev is not None and ev.decision is want, (mean, ev)
        assert ev.interval is not None
        lo, hi = ev.interval
        if want is Verdict.GOOD:
            assert band.good_lo <= lo < hi <= band.good_hi
        else:
            assert hi < band.bad_lo or lo > band.bad_hi
        assert f"[{lo:.4g}, {hi:.4g}]" in ev.reason


@pytest.mark.parametrize(
    ("kind", "relative", "value", "control_mean", "want"),
    [
        ("mean", False, 0.64, None, ("mean", (0.59, 0.69, 0.625, 0.655))),
        ("mean", True, 40.0, None, ("mean", (38.0, 42.0, 39.4, 40.6))),
        ("mean", False, None, 0.6, ("difference", (-0.05, 0.05, -0.015, 0.015))),
        ("mean", True, None, 20.0, ("ratio", (0.95, 1.05, 0.985, 1.015))),
        (
            "time",
            True,
            None,
            1.5,
            ("median-ratio", (-math.log(1.05), math.log(1.05), -math.log(1.015), math.log(1.015))),
        ),
    ],
)
def test_each_config_gets_its_scale_and_band(kind, relative, value, control_mean, want) -> None:
    got = spec(kind, tolerance=0.05, eta=0.015, relative=relative, value=value, control_mean=control_mean)
    assert got.scale.kind == want[0]
    b = got.band
    assert (b.good_lo, b.good_hi, b.bad_lo, b.bad_hi) == pytest.approx(want[1])


def test_paired_scales_judge_the_difference_the_ratio_and_the_time_ratio() -> None:
    """Paired with the control's run on each seed: a commit 20% slower is BAD on the median-ratio
    scale, one as fast GOOD (noise common to the pair cancels: drift on the machine)."""
    rng = np.random.default_rng(9)
    drift = 1 + 0.3 * np.sin(np.arange(400) / 30)  # the machine's speed wanders, for both alike
    control = drift * rng.lognormal(0, 0.02, 400)
    time_spec = spec("time", tolerance=0.05, eta=0.015)
    same = _test_with(drift * rng.lognormal(0, 0.02, 400), time_spec.scale, time_spec.band, control)
    slower = _test_with(1.2 * drift * rng.lognormal(0, 0.02, 400), time_spec.scale, time_spec.band, control)
    assert same.evidence(alpha=5e-4, beta=5e-4, max_runs=400).decision is Verdict.GOOD
    assert slower.evidence(alpha=5e-4, beta=5e-4, max_runs=400).decision is Verdict.BAD
    ratio = spec("mean", tolerance=0.05, eta=0.015, relative=True, control_mean=10.0)
    ctrl = 10 + rng.normal(0, 1, 400)
    down = _test_with(ctrl * 0.8, ratio.scale, ratio.band, ctrl)
    ev = down.evidence(alpha=5e-4, beta=5e-4, max_runs=400)
    assert ev.decision is Verdict.BAD and ev.estimate == pytest.approx(0.8)


def test_the_change_test_holds_its_level_and_finds_a_shift() -> None:
    """Two commits' runs on fresh seeds of their own: no CHANGED when nothing changed (1,000
    pairs of sequences, level 0.05), CHANGED when the mean moved by the tolerance."""
    rng = np.random.default_rng(17)
    scale = Scale("mean", (0.0, 1.0))
    changed = 0
    for _ in range(300):
        x, y = rng.beta(2, 1, 400), rng.beta(2, 1, 400)
        for n in range(10, 401, 10):  # looked at every 10 runs, as the confirmation does after each
            if change_test(x[:n], y[:n], scale, 0.025, alpha=LEVEL, max_runs=400).decision is Verdict.CHANGED:
                changed += 1
                break
    assert changed / 300 <= LEVEL
    x, y = rng.beta(2, 1, 400), rng.beta(2, 1, 400) - 0.1
    assert change_test(x, np.clip(y, 0, 1), scale, 0.025, alpha=5e-4, max_runs=400).decision is Verdict.CHANGED


def test_a_test_needs_the_control_beside_each_run_when_paired() -> None:
    t = MeanTest(Scale("difference"), Band(-1, 1, -0.3, 0.3), floor=0.25)
    with pytest.raises(ValueError, match="control's value"):
        t.add(1.0)


def test_a_timing_holds_its_levels_with_a_busy_machines_outliers() -> None:
    """Timings judged by the median of the pairs' log ratios, with noise 3% a pair and one run in
    ten delayed 2–5× (another process took the core): at the tolerance the median test stays
    exact (false GOOD under the level, 600 sequences) and a 10% slowdown is BAD every time."""
    rng = np.random.default_rng(23)
    time_spec = spec("time", tolerance=0.05, eta=0.015)

    def runs(shift: float, n: int) -> tuple[np.ndarray, np.ndarray]:
        control = rng.lognormal(0, 0.02, (600, n))
        tested = shift * rng.lognormal(0, 0.02, (600, n))
        for side in (control, tested):
            slow = rng.random(side.shape) < 0.1
            side[slow] *= rng.uniform(2, 5, slow.sum())
        return tested, control

    def decide(tested: np.ndarray, control: np.ndarray) -> np.ndarray:
        scale, band = time_spec.scale, time_spec.band
        w = lambda theta: scale.contrast(tested, control, theta)  # noqa: E731
        span = scale.contrast_range(0.0)
        log_good = np.minimum(one_sided(w(band.good_hi), -1, span, 0.0), one_sided(w(band.good_lo), +1, span, 0.0))
        log_bad = np.logaddexp(one_sided(w(band.bad_hi), +1, span, 0.0), one_sided(w(band.bad_lo), -1, span, 0.0))
        log_bad -= math.log(2)
        good = (log_good >= math.log(1 / LEVEL)).argmax(-1) + np.where(
            (log_good >= math.log(1 / LEVEL)).any(-1), 0, 10**9
        )
        bad = (log_bad >= math.log(1 / LEVEL)).argmax(-1) + np.where((log_bad >= math.log(1 / LEVEL)).any(-1), 0, 10**9)
        return np.where(bad <= good, np.where(bad < 10**9, 1, 0), -1)

    at_tolerance = decide(*runs(1.05, 400))
    assert (at_tolerance == -1).mean() <= LEVEL
    slower = decide(*runs(1.10, 400))
    assert (slower == 1).mean() == 1.0
    same = decide(*runs(1.0, 400))
    assert (same == -1).mean() >= 0.99
