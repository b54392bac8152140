"""Tests against a reference known only through a control sample (pure).

Control-sample mode: no exact reference, but m runs of a known-good commit on seeds disjoint
from every test (`Reference.from_control`). A KT confidence set for p, paid for with δ once per
bisect, turns the BAD and GOOD tests of `core.sequential` into tests against that set, so
their errors stay below α + δ and β + δ.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Sequence

import numpy as np
from scipy.special import gammaln, xlogy

from bisectbot.core.sequential import GOOD_NUMERATOR_WEIGHT, log_sup_tv_ball_many, log_sup_tv_null_many
from bisectbot.core.stats import (
    Evidence,
    Reference,
    as_counts,
    binary_kl,
    check_levels,
    decide,
    log_lik_many,
    log_mixture_many,
    prior_matrix,
    subset_masks,
)


def log_kt(m: Sequence[int]) -> float:
    """log of the Krichevsky–Trofimov (Dirichlet ½) marginal likelihood of a sequence with counts m."""
    ma = np.asarray(m, dtype=float)
    k = ma.size
    return float(gammaln(ma + 0.5).sum() - k * gammaln(0.5) - gammaln(ma.sum() + k / 2) + gammaln(k / 2))


def control_radius(control: Reference) -> float:
    """max TV(r, m/M) over the confidence set C_p = {r : Σ m_k log r_k ≥ log KT(m) − log(1/δ)}.

    C_p holds p with probability ≥ 1 − δ (Markov on KT(m)/L_p(m), whose mean is 1). In KL terms
    C_p = {r : KL(m/M ‖ r) ≤ κ}, κ = [Σ m log(m/M) − log KT(m) + log(1/δ)] / M, and for each S
    the largest r(S) solves d(p̂(S) ‖ t) = κ (data processing makes it binary).
    """
    return _control_geometry(control.control, control.delta)[1]


@lru_cache(maxsize=16)
def _control_geometry(m: tuple[int, ...], delta: float) -> tuple[float, float]:
    """(threshold on Σ m log r, TV radius)."""
    ma = np.asarray(m, dtype=float)
    tot = ma.sum()
    thr = log_kt(m) - math.log(1 / delta)
    kappa = (float(xlogy(ma, ma / tot).sum()) - thr) / tot
    p_hat = ma / tot
    radius = 0.0
    for mask in subset_masks(ma.size):
        ps = float(mask @ p_hat)
        lo, hi = ps, 1.0
        if binary_kl(ps, hi) <= kappa:
            radius = max(radius, 1.0 - ps)
            continue
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if binary_kl(ps, mid) <= kappa else (lo, mid)
        radius = max(radius, lo - ps)
    return thr, radius


def _control_max_loglik(n: np.ndarray, m: np.ndarray, thr: float) -> float:
    """max_{r ∈ C_p} Σ n_k log r_k. KKT puts the maximiser on r(s) = (1−s)·n/N + s·m/M, at the
    smallest s ∈ [0, 1] where Σ m log r(s) ≥ thr (concave along the segment, max at s = 1)."""
    tot_n, tot_m = n.sum(), m.sum()
    if tot_n == 0:
        return 0.0
    a, b = n / tot_n, m / tot_m

    def h(s: float) -> float:
        with np.errstate(divide="ignore"):
            return float(xlogy(m, (1 - s) * a + s * b).sum())

    if h(0.0) >= thr:
        s = 0.0
    else:
        lo, hi = 0.0, 1.0
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (lo, mid) if h(mid) >= thr else (mid, hi)
        s = hi
    with np.errstate(divide="ignore"):
        return float(xlogy(n, (1 - s) * a + s * b).sum())


def test_against_control(
    counts: Sequence[int],
    control: Reference,
    *,
    alpha: float,
    beta: float,
    tolerance: float,
    max_runs: int,
    eta: float = 0.0,
) -> Evidence:
    """Generic test when the reference is a control sample m (Reference.from_control).

    BAD:  log M_n − max_{r ∈ C_p} Σ n_k log r_k ≥ log(1/α). On the event p ∈ C_p (prob ≥ 1−δ)
          the max is ≥ log L_p(n), so the statistic is below the BAD e-process: false BAD ≤ α + δ.
    GOOD: the universal-inference test around p̂ = m/M with tolerance shrunk by the set's TV
          radius ρ (TV(q,p) ≥ ε and TV(p,p̂) ≤ ρ imply TV(q,p̂) ≥ ε − ρ): false GOOD ≤ β + δ.
    The mixture priors centre on the KT-smoothed control (m + ½)/(M + K/2), never 0.
    δ is paid once for the whole bisect (the control sample is collected once).
    With an indifference zone η > 0 the BAD null is every r within η of C_p; C_p lies within
    TV ρ of p̂, so the sup over the ball of radius ρ + η around p̂ bounds it (valid, a little
    conservative).
    """
    check_levels(alpha, beta)
    if control.control is None:
        raise ValueError("test_against_control needs a Reference built with Reference.from_control")
    n = as_counts(counts, control)
    m = np.asarray(control.control, dtype=float)
    total = int(n.sum())
    thr = _control_geometry(control.control, control.delta)[0]
    radius = control_radius(control)
    p_smooth = np.asarray(control.estimate)
    a = prior_matrix(tuple(p_smooth))
    if eta > 0:
        log_bad = float(log_mixture_many(n, a)) - float(log_sup_tv_ball_many(n, m / m.sum(), min(radius + eta, 1.0)))
    else:
        log_bad = float(log_mixture_many(n, a)) - _control_max_loglik(n, m, thr)
    eps = tolerance - radius
    if eps <= 0:
        log_good = -math.inf
        what = f"cannot certify: control radius {radius:.3g} ≥ tolerance {tolerance:g}"
    else:
        num = np.logaddexp(
            math.log(GOOD_NUMERATOR_WEIGHT) + log_lik_many(n, p_smooth),
            math.log1p(-GOOD_NUMERATOR_WEIGHT) + log_mixture_many(n, a),
        )
        log_good = float(num - log_sup_tv_null_many(n, m / m.sum(), eps))
        what = f"TV < {tolerance:g} incl. control radius {radius:.3g}"
    return decide(total, log_bad, log_good, alpha, beta, max_runs, good_what=what)
