"""Sequential tests of one commit against the reference (pure): is its distribution p, or not?

* BAD,  H0: q = p.  Dirichlet-mixture Bayes factor against the point null (Robbins' mixture
  SPRT); a mixture of several priors so gross and subtle shifts are both caught early.
  Lindon & Malek, "Anytime-valid inference for multinomial count data", NeurIPS 2022;
  Howard, Ramdas, McAuliffe, Sekhon, Ann. Statist. 2021; Ramdas, Grünwald, Vovk, Shafer,
  Stat. Sci. 2023. With an indifference zone η the null is the TV ball around p.
* GOOD, H0: TV(q, p) ≥ tolerance.  Universal inference: a predictable mixture likelihood over
  the null's maximised likelihood (Wasserman, Ramdas, Balakrishnan, PNAS 2020), bounded from
  above in O(K log K) by `tvnull`.
`test_against_reference` is what the pipeline calls after every run; the ``*_many`` forms are
the same formulas over count arrays (..., K), for bench/ and tests/.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy.special import xlogy

from bisectbot.statistics.outcome import Verdict
from bisectbot.statistics.stats import (
    DEFAULT_PRIORS,
    Evidence,
    Reference,
    as_counts,
    check_levels,
    decide,
    log_lik_many,
    log_mixture_many,
    prior_matrix,
    zero_prob_hit,
)
from bisectbot.statistics.tvnull import log_sup_tv_null_many, null_rises

# The BAD test's mixture: two flat priors (a collapse onto one token, ~14–16 runs) and two
# centred on the reference (subtle shifts); with an indifference zone one more component, flat
# over every category including OTHER, carries OTHER_PRIOR_WEIGHT (stray outcomes must be
# predictable for the mixture to stay a likelihood). Tuned with bench/bench_stats.py.
DEPART_PRIORS: tuple[tuple[str, float], ...] = (("flat", 0.05), ("flat", 0.2), ("ref", 20.0), ("ref", 100.0))
OTHER_PRIOR_WEIGHT = 0.1
# Concentrations of the BAD mixture's components centred on an expected departure (`toward`).
TOWARD_STRENGTHS = (30.0, 300.0)
# Weight of the reference's own likelihood in the GOOD numerator (the rest on the mixture,
# which keeps it robust to q near but not at p). Any fixed weight is valid.
GOOD_NUMERATOR_WEIGHT = 0.9


def log_sup_tv_ball_many(counts: np.ndarray, p: np.ndarray, eta: float) -> np.ndarray:
    """max_{r: TV(r,p) ≤ η} Σ n_k log r_k: the best a distribution within η of p can explain
    the counts (the denominator of the BAD test with an indifference zone).

    When the empirical n/N lies in the ball it is the maximiser. Otherwise (KKT) the maximiser
    raises some categories to r_k = c_up·n_k, lowers others to r_k = c_down·n_k, keeps the rest
    at p_k, i.e. r_k = clip(p_k, c_up·n_k, c_down·n_k), with η moved each way:
    Σ (c_up·n_k − p_k)⁺ = η and Σ (p_k − c_down·n_k)⁺ = η (c_down = ∞ when the categories never
    seen already hold η). Both sums are piecewise linear and monotone in c with breakpoints
    p_k/n_k, so each c is found exactly: the segment holding η, then one linear equation. Both
    sums at every breakpoint come from cumulative sums in breakpoint order: O(K log K).
    """
    n = np.asarray(counts, dtype=float)
    tot = n.sum(-1, keepdims=True)
    safe = np.where(tot > 0, tot, 1.0)
    emp = n / safe
    inside = 0.5 * np.abs(emp - p).sum(-1) <= eta
    mle = (xlogy(n, emp)).sum(-1)
    if (inside | (tot[..., 0] == 0)).all():  # the usual case of a commit like the reference: the
        return np.where(tot[..., 0] > 0, mle, 0.0)  # same value as below, without the search
    seen = n > 0
    pb = np.broadcast_to(p, n.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        b = np.where(seen, pb / np.where(seen, n, 1.0), np.inf)  # breakpoints (..., K)
    order = np.argsort(b, axis=-1, kind="stable")
    bs, ns, ps = (np.take_along_axis(x, order, -1) for x in (b, n, pb))
    with np.errstate(invalid="ignore"):
        # Σ (b_i n_k − p_k)⁺ takes the categories up to b_i; Σ (p_k − b_i n_k)⁺ those from it (and the unseen)
        up_sorted = bs * np.cumsum(ns, -1) - np.cumsum(ps, -1)
        tail_n, tail_p = (np.flip(np.cumsum(np.flip(x, -1), -1), -1) for x in (ns, ps))
        down_sorted = tail_p - bs * tail_n
    up_at, down_at = np.empty_like(b), np.empty_like(b)
    np.put_along_axis(up_at, order, up_sorted, -1)
    np.put_along_axis(down_at, order, down_sorted, -1)
    finite = np.isfinite(b)
    # raise: the last breakpoint where less than η has moved; categories at or below it rise
    b_up = np.where(finite & (up_at <= eta), b, -np.inf).max(-1, keepdims=True)
    rise = seen & (b <= b_up)
    with np.errstate(divide="ignore", invalid="ignore"):
        c_up = (eta + np.where(rise, p, 0).sum(-1)) / np.where(rise, n, 0).sum(-1)
    # lower: the first breakpoint where less than η is left to move; categories at or above it
    # (and the unseen ones) fall
    b_dn = np.where(finite & (down_at <= eta), b, np.inf).min(-1, keepdims=True)
    fall = b >= b_dn
    unseen = np.where(seen, 0.0, p).sum(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        c_dn = (np.where(fall, p, 0).sum(-1) - eta) / np.where(fall, n, 0).sum(-1)
    c_dn = np.where(unseen >= eta, np.inf, c_dn)
    with np.errstate(invalid="ignore"):
        r = np.where(
            n * c_up[..., None] > p, n * c_up[..., None], np.where(n * c_dn[..., None] < p, n * c_dn[..., None], p)
        )
    with np.errstate(divide="ignore"):
        ball = xlogy(n, r).sum(-1)
    return np.where(inside | (tot[..., 0] == 0), np.where(tot[..., 0] > 0, mle, 0.0), ball)


def log_e_good_tv_many(
    counts: np.ndarray,
    p: np.ndarray,
    eps: float,
    a: np.ndarray,
    w: float = GOOD_NUMERATOR_WEIGHT,
    p_alt: np.ndarray | None = None,
) -> np.ndarray:
    """log G_n = log(w·L_p + (1−w)·M_n) − max_{q: TV(q,p) ≥ ε} log L_q (universal inference).

    The numerator is a fixed mixture of predictable likelihoods, so for the true q in the null,
    G_n ≤ (w·L_p + (1−w)·M_n) / L_q, a nonnegative martingale with mean 1: anytime valid.
    (w = ½ is the textbook choice; w = 0.9 certifies GOOD ~40 runs sooner at q = p.)
    With `p_alt` (the glitch-tolerant reference) a tenth of w moves to L_{p_alt}, so a good
    commit that prints a stray outcome now and then is still certified quickly.
    """
    n = np.asarray(counts, dtype=float)
    terms = [math.log(w) + log_lik_many(n, p), math.log1p(-w) + log_mixture_many(n, a)]
    if p_alt is not None:
        terms = [math.log(w * 0.9) + log_lik_many(n, p), math.log(w * 0.1) + log_lik_many(n, p_alt), terms[1]]
    num = terms[0]
    for t in terms[1:]:
        num = np.logaddexp(num, t)
    return num - log_sup_tv_null_many(n, p, eps)


def log_e_depart_many(
    counts: np.ndarray,
    ref: Reference,
    eta: float,
    priors: tuple[tuple[str, float], ...] = DEPART_PRIORS,
    toward: Sequence[float] | None = None,
) -> np.ndarray:
    """The BAD e-value: evidence that the commit departs from the reference by more than η.

    η = 0: the point null q = p (log M_n − log L_p; +inf once an outcome of probability 0
    occurs). η > 0, an indifference zone: H0 is "TV(q, p) ≤ η" (with a condition probability:
    the conditional outcome distribution within η and P(condition) within η), and
        log E_n = log M_n − max_{r ∈ H0} log L_r(n)
    (universal inference, as the GOOD test): for the true q in H0, E_n ≤ M_n / L_q(n), a
    nonnegative martingale, so P(false BAD) ≤ α at any stopping time. A stray outcome in 2% of
    runs (TV 0.02 < η) is inside the null; a gross bug still pays ~log(1/(p_k + η)) per run.
    The mixture: `priors` on the reference's categories, plus a flat component over every
    category (OTHER too) with weight OTHER_PRIOR_WEIGHT.
    `toward`: a distribution the commit is expected to look like if it departs (the bad end's
    smoothed q̂, measured on other commits and seeds, so fixed before these runs): half of the
    mixture then bets on it (Dirichlet centred on it, TOWARD_STRENGTHS). A subtle bug near the
    ball pays far less for learning its direction; anything else loses at most log 2.
    """
    n = np.asarray(counts, dtype=float)
    main = prior_matrix(ref.probs, priors)
    j = main.shape[0]
    rows, weights = [main], [(1 - OTHER_PRIOR_WEIGHT) / j if eta > 0 else 1 / j] * j
    if eta > 0:
        rows.append(prior_matrix(ref.tolerant(eta), (("flat", 0.2),)))
        weights.append(OTHER_PRIOR_WEIGHT)
    if toward is not None:
        q = np.asarray(toward, dtype=float)
        if q.shape != ref.p.shape or (q < 0).any() or not math.isclose(q.sum(), 1.0, abs_tol=1e-6):
            raise ValueError(f"toward must be a distribution over the {ref.p.size} categories")
        rows.append(np.array([c * q for c in TOWARD_STRENGTHS]))
        weights = [w / 2 for w in weights] + [0.5 / len(TOWARD_STRENGTHS)] * len(TOWARD_STRENGTHS)
    a = np.vstack(rows)
    log_m = log_mixture_many(n, a, weights)
    if eta <= 0:
        ll = log_lik_many(n, ref.p)
        with np.errstate(invalid="ignore"):
            return np.where(np.isneginf(ll), np.inf, log_m - ll)
    if not ref.has_condition:
        return log_m - log_sup_tv_ball_many(n, ref.p, eta)
    assert ref.condition_prob is not None
    c = float(ref.condition_prob)
    met = n[..., :-1]
    bern = np.stack([met.sum(-1), n[..., -1]], axis=-1)
    return log_m - (
        log_sup_tv_ball_many(met, ref.p[:-1] / c, eta) + log_sup_tv_ball_many(bern, np.array([c, 1.0 - c]), eta)
    )


def log_e_good_many(
    counts: np.ndarray,
    ref: Reference,
    eps: float,
    priors: tuple[tuple[str, float], ...] = DEFAULT_PRIORS,
    eta: float = 0.0,
) -> np.ndarray:
    """The GOOD e-value: small when some q with "TV ≥ tolerance" explains the data as well as p.

    Without a condition probability: TV(q, p) ≥ ε over all categories.
    With P(condition) = c: the tolerance means what a user means by it, namely the *conditional*
    outcome distribution moved by TV ≥ ε, or P(condition) moved by ≥ ε. GOOD needs both
      A: the runs that met the condition, tested against p_cond (TV ≥ ε), and
      B: met/missed as a Bernoulli, tested against c (|c_q − c| ≥ ε is TV ≥ ε on 2 points)
    to fire; any q in the null lies in A's or B's null, so P(false GOOD) ≤ β. We return
    min(log G_A, log G_B). (Judging A on the met runs only is valid because they are i.i.d.
    from q_cond whatever c is, and cheaper than fitting c inside A's null.)
    With η > 0 the numerator also bets on the glitch-tolerant reference (`Reference.tolerant`).
    With pooled outcomes the outcome distribution is tested at ε − `ref.hidden`: what a bucket
    can hide (statistics.pooling), so that GOOD still means TV < ε among the outcomes themselves.
    """
    n = np.asarray(counts, dtype=float)
    alt = np.asarray(ref.tolerant(eta)) if eta > 0 else None
    if not ref.has_condition:
        return log_e_good_tv_many(n, ref.p, eps - ref.hidden, prior_matrix(ref.tolerant(eta), priors), p_alt=alt)
    assert ref.condition_prob is not None
    c = float(ref.condition_prob)
    p_cond = tuple(float(x) for x in ref.p[:-1] / c)
    met = n[..., :-1]
    alt_cond = None if alt is None else alt[:-1] / alt[:-1].sum()
    a_cond = prior_matrix(p_cond if alt_cond is None else tuple(alt_cond), priors)
    g_a = log_e_good_tv_many(met, np.asarray(p_cond), eps - ref.hidden, a_cond, p_alt=alt_cond)
    bern = np.stack([met.sum(-1), n[..., -1]], axis=-1)
    p_c = (c, 1.0 - c)
    g_b = log_e_good_tv_many(bern, np.asarray(p_c), eps, prior_matrix(p_c, priors))
    return np.minimum(g_a, g_b)


# Below this much of a threshold a bound is not trusted to decide that a test cannot fire yet
# (the e-values are sums of terms of size ~n·log K; their rounding is ~1e-10 at 10^4 runs).
HEADROOM_MARGIN = 1e-6


@dataclass(frozen=True)
class Headroom:
    """How far each e-value of `test_against_reference` can rise, at most, on one more run of
    each category, from the counts it was last computed on (inf: no bound, e.g. a category the
    null's best fit gives probability 0).

    Why there is a bound: each numerator is a mixture of likelihoods, which one more run
    multiplies by at most 1; each denominator is a likelihood maximised over a hypothesis, which
    one more run of category x multiplies by at least r(x) for a fixed r of that hypothesis:
    BAD's ball (TV ≤ η) holds only r with r(x) ≥ p(x) − η (η = 0: r = p); for GOOD, r is the
    relaxed null's maximiser at the last computation (`tvnull.null_rises`). So after that computation,
    log E rises by at most Σ −log r(x_i) over the runs since: until that sum reaches the gap to
    the threshold the test cannot decide, and computing it on those runs changes nothing."""

    bad: np.ndarray  # (K,)
    good: tuple[np.ndarray, ...]  # (K,) for each part of the GOOD test (its value is their minimum)


def _rises(r: np.ndarray) -> np.ndarray:
    """−log r where r > 0, else inf."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(r > 0, -np.log(np.where(r > 0, r, 1.0)), np.inf)


def headroom(counts: Sequence[int], ref: Reference, *, tolerance: float, eta: float = 0.0) -> Headroom:
    """The per-run bounds for `test_against_reference` at these counts (see `Headroom`)."""
    n = as_counts(counts, ref)
    p = ref.p
    if not ref.has_condition:
        bad = _rises(p - eta) if eta > 0 else _rises(p)
        return Headroom(bad, (null_rises(n, p, tolerance - ref.hidden),))
    assert ref.condition_prob is not None
    c = float(ref.condition_prob)
    met = n[:-1]
    if eta > 0:
        bad = np.append(_rises(p[:-1] / c - eta) + _rises(np.array(c - eta)), _rises(np.array(1.0 - c - eta)))
    else:
        bad = _rises(p)
    # A, the conditional part, moves only on runs that met the condition; B, met or missed, on all
    good_a = np.append(null_rises(met, p[:-1] / c, tolerance - ref.hidden), 0.0)
    q_b = null_rises(np.array([met.sum(), n[-1]]), np.array([c, 1.0 - c]), tolerance)
    good_b = np.append(np.full(met.shape, q_b[0]), q_b[1])
    return Headroom(bad, (good_a, good_b))


class JudgeGate:
    """Which runs `test_against_reference` must be computed on so that its answer is exactly
    what computing it after every run gives (same decision, at the same run, same e-values):
    after each computation (`judged`), the runs whose summed `Headroom` cannot reach a threshold
    are skipped (`needed` says False); the budget's last run is always computed. ~300 µs a
    computation, in the bot's thread while two runs share the cores."""

    def __init__(self, ref: Reference, *, alpha: float, beta: float, tolerance: float, eta: float, budget: int):
        self.ref, self.tolerance, self.eta, self.budget = ref, tolerance, eta, budget
        self.bad_at = math.log(1 / alpha) - HEADROOM_MARGIN
        self.good_at = math.log(1 / beta) - HEADROOM_MARGIN
        self._room: Headroom | None = None
        self._values = (0.0, 0.0)
        self._rise_bad = 0.0
        self._rise_good: list[float] = []
        self.skipped = 0  # runs since the last computation

    def judged(self, counts: Sequence[int], evidence: Evidence) -> None:
        """The test was computed on these counts (with this result)."""
        self.skipped = 0
        self._room = None
        if evidence.decision is None and sum(counts) > 0 and math.isfinite(evidence.log_e_bad):
            self._room = headroom(counts, self.ref, tolerance=self.tolerance, eta=self.eta)
            self._values = (evidence.log_e_bad, evidence.log_e_good)
            self._rise_bad, self._rise_good = 0.0, [0.0] * len(self._room.good)

    def needed(self, category: int | None, total: int) -> bool:
        """One more run, of `category` (None: not counted; `total` now counted): must the test
        be computed? When the runs end on skipped ones (`skipped`), compute it once more."""
        room = self._room
        if room is None or total >= self.budget:
            return True
        if category is None:  # the counts did not change, nor did the answer
            self.skipped += 1
            return False
        self._rise_bad += float(room.bad[category])
        for i, rises in enumerate(room.good):
            self._rise_good[i] += float(rises[category])
        log_bad, log_good = self._values
        # GOOD is the minimum of its parts: it rises by at most the most any part rises
        if log_bad + self._rise_bad >= self.bad_at or log_good + max(self._rise_good) >= self.good_at:
            return True
        self.skipped += 1
        return False


def test_against_reference(
    counts: Sequence[int],
    ref: Reference,
    *,
    alpha: float,
    beta: float,
    tolerance: float,
    max_runs: int,
    eta: float = 0.0,
    priors: tuple[tuple[str, float], ...] = DEFAULT_PRIORS,
    toward: Sequence[float] | None = None,
) -> Evidence:
    """Generic test of a commit against the reference, valid after every run (`toward`: see
    :func:`log_e_depart_many`).

    BAD  when E_bad ≥ 1/α  (P(false BAD) ≤ α whenever TV(q, p) ≤ η; η = 0: under q = p, and
                            an outcome of reference probability 0 is BAD at once);
    GOOD when G ≥ 1/β      (P(false GOOD) ≤ β whenever TV(q, p) ≥ tolerance; see
                            :func:`log_e_good_many` for the conditional reading);
    INCONCLUSIVE when n ≥ max_runs and neither fired. Continuing past the budget later stays
    valid (both statistics are e-processes). If both fire at once, BAD wins: a detected change
    is reported even when it is within tolerance. Depends only on counts (order-free).
    """
    check_levels(alpha, beta)
    if not (0.0 < tolerance < 1.0):
        raise ValueError(f"tolerance must be in (0, 1), got {tolerance!r}")
    if not (0.0 <= eta < tolerance - ref.hidden):
        raise ValueError(
            f"eta (indifference) must be in [0, tolerance{' − what pooling hides' if ref.hidden else ''}), got {eta!r}"
        )
    n = as_counts(counts, ref)
    total = int(n.sum())
    hit = zero_prob_hit(n, ref.p, ref.names) if eta <= 0 else None
    if hit is not None:
        return Evidence(
            Verdict.BAD,
            total,
            math.inf,
            -math.inf,
            f"outcome {hit!r} has reference probability 0 (seen {int(n[ref.names.index(hit)])}× in {total} runs)",
        )
    log_bad = float(log_e_depart_many(n, ref, eta, toward=toward))
    log_good = float(log_e_good_many(n, ref, tolerance, priors, eta))
    return decide(
        total,
        log_bad,
        log_good,
        alpha,
        beta,
        max_runs,
        good_what=f"TV < {tolerance:g}",
        bad_what=f"TV > {eta:g}" if eta > 0 else "",
    )
