"""Numeric statistics (pure): is a commit's mean within a tolerance of the reference, or beyond eta?

Each run gives one number x, paired with the control's number y on the same seed when the
reference is a control. The quantity judged is a parameter θ (`Scale`): the mean itself, its
difference from the control's, its ratio to it, or the ratio of geometric means (timings). Every
claim about θ is a one-sided e-process on a contrast w(θ) (`one_sided`); GOOD and BAD combine
them as the categorical tests do, and the interval a report shows is their inversion
(`interval`), so a verdict and its interval never disagree. docs/how-it-decides.md has the sources.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal, Sequence

import numpy as np
from scipy.special import log_ndtr
from scipy.stats import norm

from bisectbot.statistics.outcome import Verdict
from bisectbot.statistics.stats import Evidence, check_levels, decide, fmt_e

ScaleKind = Literal["mean", "difference", "ratio", "median-ratio"]

# Bounded values (declared `statistic.bounds`): betting on the contrast (Waudby-Smith & Ramdas,
# JRSS-B 2024), half on a grid of bet sizes (fractions of the largest allowed), half on the
# predictable plug-in size μ̂/(σ̂² + μ̂²) (aGRAPA), the estimates shrunk toward PRIOR_RUNS
# pseudo-runs of mean 0 and spread a quarter of the range. Any fixed choice is valid.
GRID = (0.01, 0.02, 0.04, 0.07, 0.11, 0.17, 0.25, 0.4, 0.6, 0.85)
PLUG_IN_CAP = 0.85
PRIOR_RUNS = 4.0
# Unbounded values: Robbins' normal mixture with the variance estimated from the runs (the
# asymptotic confidence sequences of Waudby-Smith, Arbour, Sinha, Kennedy & Ramdas, Ann. Statist.
# 2024), over two mixture widths tuned for decisions after ~200 and ~2,000 runs. Valid as the
# runs grow, so no decision is made before the normal approximation holds at the test's level:
# MIN_RUNS runs, and for skewed values n ≥ (SKEW_FACTOR(level)·skewness)² (the first Edgeworth
# term of the mean's tail at that level, Hall 1992, set below the level); the spread is never
# taken below a quarter of the tolerance (`floor`). Calibrated by simulation (bench/bench_means.py).
MIXTURE_RUNS = (200.0, 2000.0)
MIN_RUNS = 100
FLOOR_SHARE = 0.25


@dataclass(frozen=True)
class Scale:
    """What θ is and how a run (x, and y: the control's run on its seed) gives the contrast
    w(θ), whose mean is > 0 exactly when the true θ is above θ (E[w(θ)] decreases in θ):

    * ``mean``: θ = E[x], w = x − θ (an exact reference value; no control);
    * ``difference``: θ = E[x] − E[y], w = x − y − θ;
    * ``ratio``: θ = E[x] / E[y], w = x − θ·y (needs E[y] > 0);
    * ``median-ratio``: θ = the median of d = log x − log y, w = sign(d − θ) (timings: e^θ is a
      typical pair's time ratio; robust to the slow outliers of a busy machine; needs x, y > 0).
      w is bounded whatever the values are, so this test is always the exact one.

    `bounds`: every run's value lies in [lo, hi] (declared by the config): the betting test,
    exact at any sample size; None: the normal mixture, valid as runs grow."""

    kind: ScaleKind
    bounds: tuple[float, float] | None = None

    @property
    def paired(self) -> bool:
        return self.kind != "mean"

    def contrast(self, x: np.ndarray, y: np.ndarray | None, theta: float) -> np.ndarray:
        if self.kind == "mean":
            return x - theta
        assert y is not None, "a paired scale needs the control's runs"
        if self.kind == "difference":
            return x - y - theta
        if self.kind == "ratio":
            return x - theta * y
        return np.sign(np.log(x) - np.log(y) - theta)

    def contrast_range(self, theta: float) -> tuple[float, float] | None:
        """Where w(θ) lies when every value is within `bounds` (None: unbounded)."""
        if self.kind == "median-ratio":
            return -1.0, 1.0
        if self.bounds is None:
            return None
        lo, hi = self.bounds
        if self.kind == "mean":
            return lo - theta, hi - theta
        if self.kind == "difference":
            return lo - hi - theta, hi - lo - theta
        t = max(theta, 0.0)
        return lo - t * hi, hi - t * lo


def one_sided(
    w: np.ndarray, direction: int, span: tuple[float, float] | None, floor: float, level: float = 5e-4
) -> np.ndarray:
    """log e-values, after each run, against H0 "E[w] ≤ 0" (direction +1) or "E[w] ≥ 0" (−1),
    for the runs' contrasts `w` (shape (..., n)); the last one is the test's value now.

    Bounded (`span` = where w lies): wealth ∏(1 + λ_i·u_i), u = direction·w, λ_i predictable and
    below 1/|min u|, a nonnegative supermartingale under H0 at every λ: anytime valid (Ville).
    Unbounded (`span` None): the one-sided normal mixture of the standardised sum, the spread
    estimated from the runs and floored at `floor`; never above 1 before the approximation holds
    at `level` (the smallest level the value is compared with: `skew_runs`)."""
    u = direction * np.asarray(w, dtype=float)
    if span is None:
        return _normal_mixture(u, floor, level)
    lo, hi = (span[0], span[1]) if direction > 0 else (-span[1], -span[0])
    return _betting(u, lo, hi)


def _betting(u: np.ndarray, lo: float, hi: float) -> np.ndarray:
    width = max(hi - lo, 1e-12)
    top = 1.0 / max(-lo, width * 1e-6)  # the largest bet that keeps every factor positive
    n = u.shape[-1]
    done = np.arange(n, dtype=float)  # runs before run i
    before = np.cumsum(u, axis=-1) - u  # Σ of the runs before
    before_sq = np.cumsum(u * u, axis=-1) - u * u
    prior_var = (width / 4) ** 2
    mean = before / (done + PRIOR_RUNS)
    var = (before_sq - 2 * mean * before + done * mean * mean + PRIOR_RUNS * (prior_var + mean * mean)) / (
        done + PRIOR_RUNS
    )
    lam = np.clip(mean / (var + mean * mean), 0.0, PLUG_IN_CAP * top)
    plug = np.cumsum(np.log1p(lam * u), axis=-1)
    grid = np.stack([np.cumsum(np.log1p(c * top * u), axis=-1) for c in GRID])
    top_grid = grid.max(axis=0)
    mixed = top_grid + np.log(np.exp(grid - top_grid).mean(axis=0))
    return np.logaddexp(plug, mixed) - math.log(2)


def _normal_mixture(u: np.ndarray, floor: float, level: float) -> np.ndarray:
    n = np.arange(1, u.shape[-1] + 1, dtype=float)
    total = np.cumsum(u, axis=-1)
    mean = total / n
    sq = np.cumsum(u * u, axis=-1)
    cube = np.cumsum(u * u * u, axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        var = np.where(n > 1, (sq - n * mean * mean) / np.maximum(n - 1, 1), 0.0)
        third = cube / n - 3 * mean * sq / n + 2 * mean**3
        skew = np.where(var > 0, np.abs(third) / np.maximum(var, 1e-300) ** 1.5, 0.0)
    sd = np.sqrt(np.maximum(var, floor * floor))
    z = total / sd
    parts = []
    for runs in MIXTURE_RUNS:
        rho2 = _mixture_width(runs)
        a = 1 + rho2 * n
        parts.append(
            math.log(2) - 0.5 * np.log(a) + rho2 * z * z / (2 * a) + log_ndtr(math.sqrt(rho2) * z / np.sqrt(a))
        )
    stacked = np.stack(parts)
    top = stacked.max(axis=0)
    out = top + np.log(np.exp(stacked - top).mean(axis=0))
    ready = (n >= MIN_RUNS) & (n >= (skew_factor(level) * skew) ** 2)
    return np.where(ready, out, np.minimum(out, 0.0))


def skew_factor(level: float) -> float:
    """K such that after (K·skewness)² runs the first Edgeworth correction to the standardised
    mean's tail at `level`, skewness·(2z² + 1)·φ(z)/(6√n), is at most the level itself (z the
    normal quantile of `level`): before that the normal mixture may decide too early."""
    z = float(norm.isf(level))
    return (2 * z * z + 1) * float(norm.pdf(z)) / (6 * level)


def skew_runs(values: Sequence[float] | np.ndarray, level: float) -> int:
    """The runs the normal mixture waits for before deciding on values this skewed (see
    `skew_factor`), at least MIN_RUNS: for a report's "why undecided"."""
    v = np.asarray(values, dtype=float)
    if v.size < 3 or float(v.std()) == 0.0:
        return MIN_RUNS
    skew = abs(float(((v - v.mean()) ** 3).mean()) / float(v.std()) ** 3)
    return max(MIN_RUNS, math.ceil((skew_factor(level) * skew) ** 2))


def _mixture_width(runs: float, level: float = 5e-4) -> float:
    """ρ² of the normal mixture (in units of the spread) whose boundary is tightest after
    `runs` runs at `level` (Howard, Ramdas, McAuliffe & Sekhon, Ann. Statist. 2021, eq. (3.8))."""
    ll = 2 * math.log(1 / level)
    return (ll + math.log(1 + ll)) / runs


@dataclass(frozen=True)
class Band:
    """The hypotheses about θ: GOOD is within (good_lo, good_hi), BAD outside [bad_lo, bad_hi]
    (the tolerance band holds the eta band)."""

    good_lo: float
    good_hi: float
    bad_lo: float
    bad_hi: float


@dataclass
class MeanTest:
    """One commit's numeric test: its runs' values (and the control's on the same seeds) so
    far, and the verdict on them (`evidence`). Depends only on the values in the order given."""

    scale: Scale
    band: Band
    floor: float  # the least spread of a contrast the normal mixture assumes (unbounded values)
    level: float = 5e-4  # the smallest level its e-values are compared with (unbounded values)
    x: list[float] = field(default_factory=list)
    y: list[float] = field(default_factory=list)

    def add(self, x: float, y: float | None = None) -> None:
        if self.scale.paired:
            if y is None:
                raise ValueError("a paired test needs the control's value beside each run")
            self.y.append(float(y))
        self.x.append(float(x))

    @property
    def n(self) -> int:
        return len(self.x)

    def _arrays(self) -> tuple[np.ndarray, np.ndarray | None]:
        return np.asarray(self.x, dtype=float), (np.asarray(self.y, dtype=float) if self.scale.paired else None)

    def log_e(self, theta: float, direction: int) -> float:
        """The one-sided e-value now: evidence that θ is above `theta` (+1) or below it (−1)."""
        if not self.x:
            return 0.0
        x, y = self._arrays()
        w = self.scale.contrast(x, y, theta)
        return float(one_sided(w, direction, self.scale.contrast_range(theta), self.floor, self.level)[-1])

    @property
    def log_e_good(self) -> float:
        """GOOD: θ is below good_hi and above good_lo (both one-sided claims, the least of them)."""
        return min(self.log_e(self.band.good_hi, -1), self.log_e(self.band.good_lo, +1))

    @property
    def log_e_bad(self) -> float:
        """BAD: θ is above bad_hi or below bad_lo (half the wealth on each)."""
        return float(np.logaddexp(self.log_e(self.band.bad_hi, +1), self.log_e(self.band.bad_lo, -1)) - math.log(2))

    def estimate(self) -> float:
        """θ's point estimate from the runs so far (NaN without runs)."""
        if not self.x:
            return math.nan
        x, y = self._arrays()
        if self.scale.kind == "mean":
            return float(x.mean())
        assert y is not None
        if self.scale.kind == "difference":
            return float(x.mean() - y.mean())
        if self.scale.kind == "ratio":
            return float(x.mean() / y.mean()) if y.mean() != 0 else math.nan
        return float(np.median(np.log(x) - np.log(y)))

    def interval(self, level: float) -> tuple[float, float]:
        """The θ the runs so far do not rule out at `level` per side: its ends are where each
        one-sided e-value reaches 1/level (found by bisection: each is monotone in θ). A GOOD at
        level β has this interval (at β) inside the tolerance band; a BAD at α, at α/2, outside
        the eta band."""
        est = self.estimate()
        if not math.isfinite(est) or self.n == 0:
            return (-math.inf, math.inf)
        target = math.log(1 / level)
        width = self._search_width()
        lo = self._edge(est, -width, target, +1)
        hi = self._edge(est, width, target, -1)
        return lo, hi

    def _search_width(self) -> float:
        x, y = self._arrays()
        w = self.scale.contrast(x, y, 0.0)
        spread = float(np.std(w)) if w.size > 1 else 0.0
        return max(spread, abs(self.estimate()), self.floor, 1e-9) * 4

    def _edge(self, start: float, step: float, target: float, direction: int) -> float:
        """The θ beyond `start` (moving by `step`, doubling) where the e-value of `direction`
        reaches `target`; ±inf when it never does within 2^40 steps."""
        inside, far = start, start + step
        for _ in range(40):
            if self.log_e(far, direction) >= target:
                break
            inside, far = far, far + (far - start)
        else:
            return math.inf if step > 0 else -math.inf
        for _ in range(60):
            mid = (inside + far) / 2
            if self.log_e(mid, direction) >= target:
                far = mid
            else:
                inside = mid
            if abs(far - inside) <= 1e-9 * max(1.0, abs(mid)):
                break
        return (inside + far) / 2

    def evidence(self, *, alpha: float, beta: float, max_runs: int, what: str = "θ") -> Evidence:
        """GOOD at E_good ≥ 1/β, BAD at E_bad ≥ 1/α (BAD wins a tie), INCONCLUSIVE at the
        budget; the reason names the estimate and its interval at the verdict's level."""
        check_levels(alpha, beta)
        log_bad, log_good = self.log_e_bad, self.log_e_good
        ev = decide(self.n, log_bad, log_good, alpha, beta, max_runs, good_what="")
        level = beta if ev.decision is Verdict.GOOD else alpha / 2
        lo, hi = self.interval(level) if self.n else (-math.inf, math.inf)
        said = f"{what} {_num(self.estimate())} [{_num(lo)}, {_num(hi)}] at {1 - level:.4g}"
        b = self.band
        if ev.decision is Verdict.GOOD:
            head = f"E_good = {fmt_e(log_good)} ≥ 1/beta = {1 / beta:.3g} after {self.n} runs"
            claim = f"within ({_num(b.good_lo)}, {_num(b.good_hi)})"
        elif ev.decision is Verdict.BAD:
            head = f"E_bad = {fmt_e(log_bad)} ≥ 1/alpha = {1 / alpha:.3g} after {self.n} runs"
            claim = f"outside [{_num(b.bad_lo)}, {_num(b.bad_hi)}]"
        else:
            head = ev.reason
            claim = (
                f"GOOD needs ({_num(b.good_lo)}, {_num(b.good_hi)}), BAD outside [{_num(b.bad_lo)}, {_num(b.bad_hi)}]"
            )
        waits = self.waits()
        if ev.decision is None and waits > self.n:
            claim += f"; values this skewed are judged from run {waits:,} on (statistic.bounds makes it exact)"
        reason = f"{head}: {said}; {claim}"
        return Evidence(ev.decision, ev.n, log_bad, log_good, reason, (lo, hi), self.estimate(), waits, self.noise())

    def noise(self) -> float:
        """The spread of one run: the sd of its contrast; for a timing, the robust spread (1.4826 ×
        the median absolute deviation) of the log of a pair's time ratio, ~ the relative noise of
        one pair, untouched by the odd run a busy machine delays; 0 before two runs."""
        if self.n < 2:
            return 0.0
        x, y = self._arrays()
        if self.scale.kind == "median-ratio":
            assert y is not None
            d = np.log(x) - np.log(y)
            return float(1.4826 * np.median(np.abs(d - np.median(d))))
        return float(np.std(self.scale.contrast(x, y, 0.0), ddof=1))

    def waits(self) -> int:
        """Runs the normal approximation waits for before it may decide (0: bounded, exact)."""
        if self.scale.contrast_range(self.band.good_hi) is not None or not self.x:
            return 0
        x, y = self._arrays()
        return skew_runs(self.scale.contrast(x, y, self.band.good_hi), self.level)


def change_test(
    x: Sequence[float], y: Sequence[float], scale: Scale, floor: float, *, alpha: float, max_runs: int
) -> Evidence:
    """Did the mean change between two commits (runs x and y on fresh seeds of their own, taken
    in turn)? Run i of each forms a pair whose contrast has mean 0 when nothing changed:
    CHANGED when either one-sided e-value (half the wealth each) reaches 1/α; INCONCLUSIVE once
    both have `max_runs` runs. Valid whatever the reference says, like the categorical test."""
    if not (0.0 < alpha < 1.0):
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    n = min(len(x), len(y))
    if n == 0:
        return Evidence(None, len(x) + len(y), 0.0, 0.0, "no pair of runs yet")
    pair_scale = Scale("median-ratio" if scale.kind == "median-ratio" else "difference", scale.bounds)
    xa, ya = np.asarray(x[:n], dtype=float), np.asarray(y[:n], dtype=float)
    w = pair_scale.contrast(xa, ya, 0.0)
    span = pair_scale.contrast_range(0.0)
    sides = [one_sided(w, d, span, floor, alpha / 2)[-1] for d in (+1, -1)]
    log_e = float(np.logaddexp(*sides) - math.log(2))
    if scale.kind == "median-ratio":
        shown = f"median time ratio ×{math.exp(float(np.median(np.log(xa) - np.log(ya)))):.4f} over {n} pairs"
    else:
        shown = f"difference {_num(float(w.mean()))} over {n} pairs"
    total = len(x) + len(y)
    if log_e >= math.log(1 / alpha):
        return Evidence(
            Verdict.CHANGED, total, log_e, 0.0, f"E_change = {fmt_e(log_e)} ≥ 1/alpha = {1 / alpha:.3g} ({shown})"
        )
    if min(len(x), len(y)) >= max_runs:
        return Evidence(Verdict.INCONCLUSIVE, total, log_e, 0.0, f"no change shown after {n} pairs ({shown})")
    return Evidence(None, total, log_e, 0.0, f"undecided after {n} pairs ({shown})")


def _num(v: float) -> str:
    """A number for a reason line: 4 significant digits, ±inf as such."""
    if not math.isfinite(v):
        return "inf" if v > 0 else "-inf" if v < 0 else "nan"
    return f"{v:.4g}"


@dataclass(frozen=True)
class Spec:
    """One numeric statistic's test, as the config asks for it: the scale θ lives on, the band
    of its GOOD and BAD hypotheses, and the least spread the normal mixture assumes."""

    scale: Scale
    band: Band
    floor: float

    def test(self, level: float) -> MeanTest:
        return MeanTest(self.scale, self.band, self.floor, level)

    @property
    def exact(self) -> bool:
        """The tests are exact at any number of runs (declared bounds), not asymptotic."""
        return self.scale.contrast_range(self.band.good_hi) is not None


def spec(
    kind: str,
    *,
    tolerance: float,
    eta: float,
    relative: bool = False,
    value: float | None = None,
    control_mean: float | None = None,
    bounds: tuple[float, float] | None = None,
) -> Spec:
    """The test a config asks for. `kind` mean against an exact `value` (θ = the mean), or
    against a control (θ = the difference, or with `relative` the ratio, of the means; the
    control's first runs give `control_mean`, which sets a relative floor); `kind` time (θ =
    the median log-ratio of the run's time to the control's; tolerance and eta are fractions)."""
    if kind == "time":
        good, bad = math.log1p(tolerance), math.log1p(eta)
        return Spec(Scale("median-ratio"), Band(-good, good, -bad, bad), good * FLOOR_SHARE)
    if value is not None:
        size = abs(value) if relative else 1.0
        t, e = tolerance * size, eta * size
        return Spec(Scale("mean", bounds), Band(value - t, value + t, value - e, value + e), t * FLOOR_SHARE)
    if relative:
        scale = abs(control_mean) if control_mean else 1.0
        return Spec(
            Scale("ratio", bounds),
            Band(1 - tolerance, 1 + tolerance, 1 - eta, 1 + eta),
            tolerance * scale * FLOOR_SHARE,
        )
    return Spec(Scale("difference", bounds), Band(-tolerance, tolerance, -eta, eta), tolerance * FLOOR_SHARE)


def distance(scale: str, theta: float, center: float | None = None, relative: bool = False) -> float:
    """How far θ is from the reference, in the units the config's tolerance and eta are in, so
    that GOOD is "distance < tolerance" and BAD "distance > eta" on every scale: |θ − mean|
    (a fraction of the mean with `relative`), |θ| for a difference, |θ − 1| for a ratio,
    e^|θ| − 1 for a timing's median log-ratio (5% slower or 1/1.05 faster is 0.05 away)."""
    if not math.isfinite(theta):
        return math.inf
    if scale == "mean":
        ref = center or 0.0
        return abs(theta - ref) / (abs(ref) if relative and ref else 1.0)
    if scale == "difference":
        return abs(theta)
    if scale == "ratio":
        return abs(theta - 1.0)
    return math.expm1(abs(theta))
