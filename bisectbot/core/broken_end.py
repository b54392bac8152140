"""Steps that lean on the broken end's measured distribution q̂ (pure): quick steps, sticky search.

When builds are cheap and a GOOD against the reference is costly, a search step need not prove
GOOD: showing a commit *unlike the broken end* (Wald's SPRT toward the reference with a
Dirichlet side bet) orders the search, and the commit the search ends at is re-tested against
the reference before anything is named. BAD is still the real test (`statistics.sequential`).
`bad_endpoint_enough` says when q̂ = kt_smooth(counts) has been measured long enough to be
plugged in; the sticky search's constants, tuned like the rest, live here too.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from bisectbot.statistics.outcome import Verdict
from bisectbot.statistics.sequential import log_e_depart_many
from bisectbot.statistics.stats import (
    SUM_TOLERANCE,
    Evidence,
    Reference,
    as_counts,
    check_levels,
    decide,
    kl,
    log_e_bad_many,
    log_lik_many,
    prior_matrix,
    zero_prob_hit,
)

# The sticky search learns the good side from Dirichlet(A·p̃), A = this (see sticky_bisect),
# and stops at this posterior: it only steers (the re-tests against the reference decide), and a
# wrong stop costs one more re-test pair; measured in bench/bench_stats.py.
STICKY_GOOD_STRENGTH = 100.0
STICKY_STOP = 0.99
# A visit that has not settled after this many runs (nor run.max_runs) ends the search at that
# commit: it fits neither side, and the pipeline tests it against the reference.
STICKY_VISIT_RUNS = 4000
UNLIKE_WEIGHT = 0.1  # share of the "unlike the broken end" e-value bet on any other distribution


BAD_ENDPOINT_NATS_PER_DF = 10.0  # see bad_endpoint_enough
BAD_ENDPOINT_MIN_RUNS = 100


def bad_endpoint_enough(
    counts_bad: Sequence[int],
    ref: Reference,
    *,
    nats_per_df: float = BAD_ENDPOINT_NATS_PER_DF,
    minimum: int = BAD_ENDPOINT_MIN_RUNS,
    eta: float = 0.0,
) -> bool:
    """Has the bad endpoint been measured long enough to use q̂ = kt_smooth(b) in bisect mode?

    At a bad commit the two-point statistic drifts by KL(q‖p) − KL(q‖q̂) per run, and
    E KL(q‖q̂) ≈ (d−1)/(2 n_b) for n_b runs over d used categories. A wrong GOOD there has
    probability ≈ β^θ with θ ≈ 1 − 2·KL(q‖q̂)/KL(q‖p) (drift shrinks, variance grows), so q̂
    must be good *relative to the size of the bug*. We measure until n_b·KL(q̂‖p) ≥
    nats_per_df·(d−1): for a gross bug that is the `minimum` 100 runs; for a TV-0.1 bug ~1,700.
    The rule looks at q̂ as it evolves, so an early lucky streak does not stop it short.
    Measured (bench/bench_stats.py): enough for gross bugs (two-point bisects 99.8% right);
    for TV-0.1 bugs a wrong GOOD still happens at 0.5% of bad commits (bisects 95.5% right):
    use :func:`sticky_bisect`, which integrates q out instead of plugging q̂ in.
    With η > 0 the bug's size is measured from the glitch-tolerant reference.
    """
    b = np.asarray(counts_bad, dtype=float)
    n_b = b.sum()
    if n_b < minimum:
        return False
    p = np.asarray(ref.tolerant(eta)) if eta > 0 else ref.p
    if zero_prob_hit(b, p, ref.names) is not None:
        return True  # an impossible outcome: q̂ differs from p in a way no good run can match
    used = int(((b > 0) | (p > 0)).sum())
    return n_b * kl(b / n_b, p) >= nats_per_df * max(used - 1, 1)


def log_lr_many(counts: np.ndarray, p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """Σ n_k log(q_k / p_k); +inf when a category with p_k = 0 occurred (q must be > 0)."""
    n = np.asarray(counts, dtype=float)
    lp = log_lik_many(n, p)
    with np.errstate(invalid="ignore"):
        return np.where(np.isneginf(lp), np.inf, log_lik_many(n, q) - lp)


def log_e_unlike_many(
    counts: np.ndarray, p_good: np.ndarray, q_bad: np.ndarray, w: float = UNLIKE_WEIGHT
) -> np.ndarray:
    """log E against H0 "the commit's distribution is the broken end's q̂":
    (1−w)·Π(p̃/q̂)^n + w·M_q̂/L_q̂. The first term is Wald's SPRT toward the (tolerant)
    reference p̃, the second a Dirichlet side bet, so any distribution other than q̂ rejects it
    too. Both terms are test martingales under q̂, so P(E ever ≥ 1/β | q̂) ≤ β."""
    lr = log_lr_many(counts, q_bad, p_good)  # Σ n log(p̃/q̂)
    a_q = prior_matrix(tuple(float(x) for x in q_bad))
    return np.logaddexp(math.log1p(-w) + lr, math.log(w) + log_e_bad_many(counts, q_bad, a_q))


def test_quick(
    counts: Sequence[int],
    ref: Reference,
    q_bad: Sequence[float],
    *,
    alpha: float,
    beta: float,
    max_runs: int,
    eta: float = 0.0,
    bad: Evidence | None = None,
) -> Evidence:
    """A quick search step, for when builds are cheap and GOOD against the reference is costly.

    BAD       when the commit departs from the reference by more than η: the BAD test of
              :func:`test_against_reference` (betting half its mixture toward q̂), a real BAD
              at level α;
    GOOD_SIDE when it is shown unlike the broken end's q̂ (:func:`log_e_unlike_many` ≥ 1/β).
              Not GOOD: a commit unlike the broken end may still depart from the reference (a
              milder form of the bug, another defect). It only orders the search; the parent of
              the commit the search ends at is tested against the reference before anything is
              named (bisecting.bisect).
    INCONCLUSIVE at max_runs. Which of the two fires first decides; BAD wins a tie. `bad`: the
    reference test's evidence on these counts when it is not the exact one (a control sample's
    test, :func:`test_against_control`), whose BAD statistic is then used instead."""
    check_levels(alpha, beta)
    n = as_counts(counts, ref)
    q = np.asarray(q_bad, dtype=float)
    if q.shape != n.shape or (q <= 0).any() or abs(q.sum() - 1) > SUM_TOLERANCE:
        raise ValueError(
            "q_bad must be a strictly positive distribution over the reference's "
            "categories (use kt_smooth on the broken end's counts)"
        )
    q = q / q.sum()
    total = int(n.sum())
    hit = zero_prob_hit(n, ref.p, ref.names) if eta <= 0 and bad is None else None
    if hit is not None:
        return Evidence(Verdict.BAD, total, math.inf, -math.inf, f"outcome {hit!r} has reference probability 0")
    log_bad = bad.log_e_bad if bad is not None else float(log_e_depart_many(n, ref, eta, toward=q))
    p_good = np.asarray(ref.tolerant(eta) if eta > 0 else ref.estimate, dtype=float)
    log_unlike = float(log_e_unlike_many(n, p_good, q))
    return decide(
        total,
        log_bad,
        log_unlike,
        alpha,
        beta,
        max_runs,
        "unlike the broken end; not a test against the reference",
        f"TV > {eta:g}" if eta > 0 else "",
        good=Verdict.GOOD_SIDE,
        good_name="E_unlike",
    )
