"""A commit against a reference known only through a control sample: a two-sample test (pure).

Control-sample mode: no exact reference, but runs of a known-good commit. Each counted run of
the tested commit is paired with a block of control runs (in the pipeline: the control's run on
the very same seed, `judge.reference.GrowingControl`). For a set S of categories,

    z = 1[x ∈ S] − (share of the block in S)      has mean  q(S) − p(S),  z ∈ [−1, 1],

whatever p is, and whatever ties the run to its block: a deterministic program run on the same
seed at two commits that behave alike prints the same, so z is 0 wherever the two agree and its
variance is the chance they disagree (common random numbers), not p(1−p) + q(1−q). Betting on z
(Waudby-Smith & Ramdas, "Estimating means of bounded random variables by betting", JRSS-B 2023)
gives anytime-valid tests at the same α, β and η as the exact reference:

* BAD,  H0: TV(q, p) ≤ η, i.e. q(S) − p(S) ≤ η for every S. One bet per run on the set S the
  pairs seen so far point at (predictable), wealth ∏(1 + λ(z − η)): a supermartingale under
  H0 for any predictable S and λ ∈ [0, 1/(1+η)). A mixture over a grid of λ.
  With `toward` (the broken end's q̂, fixed before these runs) half of the wealth bets the size
  that grows fastest if the commit looks like it, as the exact test's BAD mixture bets half on it.
* GOOD, H0: TV(q, p) ≥ tolerance, i.e. q(S) − p(S) ≥ tolerance for some S. For every S a wealth
  ∏(1 + λ(tolerance − z)); GOOD needs all of them past 1/β (the null is their union).

The plug-in bet sizes use the second moment of z seen so far (predictable: computed before the
run it bets on), so a tight pairing is bet on hard and a loose one (independent runs) gently;
validity needs only that each pair's z has mean q(S) − p(S) given the pairs before it, which
holds when seeds are exchangeable draws (the assumption every test here makes).

The control is shared by every test of a bisect (that is what makes it cheap: it is as long as
the longest test, not the sum). Each test is valid for a commit chosen apart from the control's
noise; the search's path depends on earlier verdicts, which saw the same control.
The confirmation that names a commit compares it with its parent directly (`two_sample`), on
fresh seeds, never through the control.

`PairedTest` keeps one test's running wealth (runs are fed in seed order, so a replay from the
database gives the same numbers); `evidence` turns it into the verdict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from bisectbot.statistics.stats import Evidence, check_levels, decide, subset_masks

# Bet sizes as fractions of the largest allowed (1/(1+η) for BAD, 1/(1−tolerance) for GOOD):
# a subtle change wants a small bet, a gross one a large one. Any fixed grid is valid.
BAD_GRID = (0.01, 0.02, 0.04, 0.07, 0.11, 0.17, 0.25, 0.4, 0.6, 0.85)
GOOD_GRID = (0.05, 0.1, 0.15, 0.22, 0.3, 0.4, 0.55, 0.75)
# Half of the GOOD wealth bets, per set S, the size that grows fastest when the commit is the
# control's own distribution: λ = tol / (tol² + E z²), with E z² estimated from the pairs so far
# (predictable) and shrunk toward the independent pairs' p(S)(1 − p(S))(1 + 1/block) by PRIOR_PAIRS
# pseudo-pairs, as the exact test's GOOD numerator weighs the reference itself. The other half
# is the grid (any q).
GOOD_PLUG_IN_WEIGHT = 0.5
PRIOR_PAIRS = 20.0


@dataclass
class PairedTest:
    """The running two-sample wealth of one commit's test against the control.

    `add(x, block)`: one tested run (its category) with its block of control runs."""

    k: int
    tolerance: float
    eta: float
    toward: Sequence[float] | None = None  # the expected departure, if any (see the module)
    masks: np.ndarray = field(init=False, repr=False)
    n: int = field(init=False, default=0)
    tested: np.ndarray = field(init=False, repr=False)  # counts of the tested runs paired so far
    control: np.ndarray = field(init=False, repr=False)  # counts of their control blocks
    _bad: np.ndarray = field(init=False, repr=False)  # log wealth per BAD bet size
    _good: np.ndarray = field(init=False, repr=False)  # (subsets, bet sizes)

    def __post_init__(self) -> None:
        if not (0.0 < self.tolerance < 1.0) or not (0.0 <= self.eta < self.tolerance):
            raise ValueError(f"need 0 ≤ eta < tolerance < 1, got eta {self.eta!r}, tolerance {self.tolerance!r}")
        self.masks = subset_masks(self.k)
        self.tested = np.zeros(self.k)
        self.control = np.zeros(self.k)
        self._bad_l = np.asarray(BAD_GRID) / (1 + self.eta)
        self._good_l = np.asarray(GOOD_GRID) / (1 - self.tolerance)
        self._bad = np.zeros(len(BAD_GRID))
        self._good = np.zeros((len(self.masks), len(GOOD_GRID)))
        self._good_plug = np.zeros(len(self.masks))
        self._toward = None if self.toward is None else np.asarray(self.toward, dtype=float)
        if self._toward is not None and self._toward.shape != (self.k,):
            raise ValueError(f"toward must be a distribution over the {self.k} categories")
        self._bad_plug = 0.0
        self._zz = np.zeros(len(self.masks))  # Σ z² per set S (the GOOD plug-in's variance)
        self._toward_z = [0.0, 0.0]  # Σ z, Σ z² on the toward set (the BAD plug-in's variance)

    def add(self, x: int, block: Sequence[int]) -> None:
        """One tested run in category `x`, paired with `block` (categories of control runs no
        earlier run of this test was paired with)."""
        if not block:
            raise ValueError("a tested run needs at least one control run beside it")
        share = np.bincount(np.asarray(block), minlength=self.k)[: self.k] / len(block)
        # BAD: bet on the categories the pairs so far show above the control (predictable)
        q = (self.tested + 0.5) / (self.n + self.k / 2)
        p = (self.control + 0.5) / (self.control.sum() + self.k / 2)
        up = q > p
        if 0 < up.sum() < self.k:
            z = float(up[x]) - float(share[up].sum())
            self._bad += np.log1p(self._bad_l * (z - self.eta))
        if self._toward is not None:
            s = self._toward > p
            if 0 < s.sum() < self.k:
                gap = float(self._toward[s].sum() - p[s].sum()) - self.eta
                qs, ps_ = float(self._toward[s].sum()), float(p[s].sum())
                prior = qs * (1 - qs) + ps_ * (1 - ps_) / len(block)  # independent pairs
                total, squares = self._toward_z
                mean = total / self.n if self.n else 0.0
                seen = squares - self.n * mean * mean  # Σ (z − mean)², pairs so far
                var = (seen + PRIOR_PAIRS * prior) / (self.n + PRIOR_PAIRS)
                lam = min(max(gap / (gap * gap + var), 0.0), 0.8 / (1 + self.eta))
                z = float(s[x]) - float(share[s].sum())
                self._bad_plug += math.log1p(lam * (z - self.eta))
                self._toward_z = [total + z, squares + z * z]
        zs = self.masks[:, x] - self.masks @ share
        self._good += np.log1p(self._good_l[None, :] * (self.tolerance - zs)[:, None])
        ps = self.masks @ p
        prior = ps * (1 - ps) * (1 + 1 / len(block))  # independent pairs
        second = (self._zz + PRIOR_PAIRS * prior) / (self.n + PRIOR_PAIRS)
        lam = np.minimum(self.tolerance / (self.tolerance**2 + second), 0.8 / (1 - self.tolerance))
        self._good_plug += np.log1p(lam * (self.tolerance - zs))
        self._zz += zs * zs
        self.tested[x] += 1
        self.control += np.bincount(np.asarray(block), minlength=self.k)[: self.k]
        self.n += 1

    @property
    def log_e_bad(self) -> float:
        """log of the BAD wealth (the mixture over bet sizes; with `toward`, half on its bet)."""
        grid = float(np.logaddexp.reduce(self._bad) - math.log(len(self._bad)))
        if self._toward is None:
            return grid
        return float(np.logaddexp(grid, self._bad_plug) - math.log(2))

    @property
    def log_e_good(self) -> float:
        """log of the GOOD wealth: the least over the sets S (each a mixture over bet sizes)."""
        if self.n == 0:
            return 0.0
        grid = np.logaddexp.reduce(self._good, axis=1) - math.log(self._good.shape[1])
        w = GOOD_PLUG_IN_WEIGHT
        return float(np.logaddexp(math.log(w) + self._good_plug, math.log1p(-w) + grid).min())

    def evidence(self, *, alpha: float, beta: float, max_runs: int, pairing: str = "") -> Evidence:
        """The verdict so far: BAD at E_bad ≥ 1/α, GOOD at E_good ≥ 1/β, INCONCLUSIVE at the budget."""
        check_levels(alpha, beta)
        return decide(
            self.n,
            self.log_e_bad,
            self.log_e_good,
            alpha,
            beta,
            max_runs,
            good_what=f"TV < {self.tolerance:g}, against {self.control.sum():.0f} control runs{pairing}",
            bad_what=f"TV > {self.eta:g}, against {self.control.sum():.0f} control runs{pairing}"
            if self.eta > 0
            else f"against {self.control.sum():.0f} control runs{pairing}",
        )


def paired_evidence(
    tested: Sequence[int],
    control: Sequence[int],
    k: int,
    *,
    ratio: int = 1,
    alpha: float,
    beta: float,
    tolerance: float,
    eta: float,
    max_runs: int,
    toward: Sequence[float] | None = None,
) -> Evidence:
    """The test over whole sequences (for tests and benches): run i of `tested` paired with
    control runs [i·ratio, (i+1)·ratio) (ratio 1 with both drawn from one seed each: the
    pipeline's pairing); stops at the first decision, like the pipeline."""
    test = PairedTest(k, tolerance, eta, toward)
    ev = test.evidence(alpha=alpha, beta=beta, max_runs=max_runs)
    for i, x in enumerate(tested):
        block = control[i * ratio : (i + 1) * ratio]
        if len(block) < ratio:
            break
        test.add(x, block)
        ev = test.evidence(alpha=alpha, beta=beta, max_runs=max_runs)
        if ev.decision is not None:
            break
    return ev
