"""Sequential tests (pure): is a commit's outcome distribution the reference's, or not?

Every run of the program under test is mapped to one *category*: an outcome of the reference's
support, ``OTHER`` (anything else), or ``MISSED`` (the run did not meet the condition, when the
reference gives P(condition)). A commit is then a multinomial source with unknown probabilities
q, and we watch its counts n grow one run at a time. Every decision below is an *e-process*
threshold: a nonnegative statistic E_n with E[E_τ] ≤ 1 at any stopping time τ under the null,
so by Ville's inequality P(∃n: E_n ≥ 1/α) ≤ α. That is what makes it safe to call these
functions after every single run and to stop, or to extend the budget later, whenever we like.

Tests (README.md, "How it decides", summarises them; bench/bench_stats.py measures them):

* BAD,  H0: q = p.  Dirichlet-mixture Bayes factor against the point null (Robbins' mixture
  SPRT); a mixture of several priors so gross and subtle shifts are both caught early.
  Lindon & Malek, "Anytime-valid inference for multinomial count data", NeurIPS 2022;
  Howard, Ramdas, McAuliffe, Sekhon, Ann. Statist. 2021; Ramdas, Grünwald, Vovk, Shafer,
  Stat. Sci. 2023.
* GOOD, H0: TV(q, p) ≥ tolerance.  Universal inference: a predictable mixture likelihood over
  the null's maximised likelihood (Wasserman, Ramdas, Balakrishnan, PNAS 2020).
* Quick search steps: BAD as above, or "unlike the broken end's smoothed distribution q̂" (Wald's
  SPRT toward the reference with a Dirichlet side bet): a placement, never GOOD.
* Change: do two commits' runs (fresh seeds) come from different distributions? A two-sample
  universal-inference test, valid whatever the reference says.
* Likeness: commits run on the same seeds, compared seed for seed (the coupling inequality).
* Skips: do more than half of a commit's runs fail?
* Control-sample mode: the reference is itself a finite sample (m runs on disjoint seeds);
  a KT confidence set for p costs δ once (errors ≤ α + δ).

Everything here is pure: numbers in, numbers out. No I/O, no printing, no global state other
than small caches of subset masks. Vectorised helpers (``*_many``) take count arrays of shape
(..., K) so the simulations in bench/ and tests/ run the *same* formulas as the pipeline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from itertools import product
from typing import Mapping, Sequence

import numpy as np
from scipy.special import gammaln, xlogy

from bisectbot.core.outcome import Verdict

OTHER = "<other>"  # outcome not in the reference support
MISSED = "<missed>"  # run did not meet the condition (only a category when condition_prob is given)

# Priors of the Dirichlet mixture, equal weights 1/J. ("flat", a) is a·1 on every category
# with p_k > 0: small a puts mass near the simplex's faces, so a collapse onto one token is
# caught in ~14 runs. ("ref", c) is c·p, centred on the reference: subtle shifts pay less
# for it. Tuned on the #29975 reference (bench/bench_stats.py); any choice is valid.
DEFAULT_PRIORS: tuple[tuple[str, float], ...] = (("flat", 0.2), ("ref", 20.0), ("ref", 100.0))
# The BAD test's mixture: two flat priors (a collapse onto one token, ~14–16 runs) and two
# centred on the reference (subtle shifts); with an indifference zone one more component, flat
# over every category including OTHER, carries OTHER_PRIOR_WEIGHT (stray outcomes must be
# predictable for the mixture to stay a likelihood). Tuned with bench/bench_stats.py.
DEPART_PRIORS: tuple[tuple[str, float], ...] = (("flat", 0.05), ("flat", 0.2), ("ref", 20.0), ("ref", 100.0))
OTHER_PRIOR_WEIGHT = 0.1
# Concentrations of the BAD mixture's components centred on an expected departure (`toward`).
TOWARD_STRENGTHS = (30.0, 300.0)
# The sticky search learns the good side from Dirichlet(A·p̃), A = this (see sticky_bisect),
# and stops at this posterior: it only steers (the re-tests against the reference decide), and a
# wrong stop costs one more re-test pair; measured in bench/bench_stats.py.
STICKY_GOOD_STRENGTH = 100.0
STICKY_STOP = 0.99
# A visit that has not settled after this many runs (nor run.max_runs) ends the search at that
# commit: it fits neither side, and the pipeline tests it against the reference.
STICKY_VISIT_RUNS = 4000
# Weight of the reference's own likelihood in the GOOD numerator (the rest on the mixture,
# which keeps it robust to q near but not at p). Any fixed weight is valid.
GOOD_NUMERATOR_WEIGHT = 0.9
SUM_TOLERANCE = 1e-3  # reference probabilities must sum to 1 within this, then are renormalised


# ---------------------------------------------------------------------------------------------
# Reference
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reference:
    """The reference distribution over categories: support names, then OTHER, then MISSED.

    ``probs[OTHER]`` is 0 for a probability reference, so any unknown outcome proves BAD.
    With ``condition_prob`` c the support probabilities are scaled by c and MISSED gets 1 − c:
    the ~18% of runs that miss the condition then count as evidence instead of being discarded.
    A reference built from a control sample also keeps the sample (``control``) and the
    confidence-set price ``delta``; see :func:`test_against_control`.
    """

    names: tuple[str, ...]
    probs: tuple[float, ...]
    condition_prob: float | None = None
    control: tuple[int, ...] | None = None
    delta: float = 0.0

    @classmethod
    def from_probs(cls, probs: Mapping[str, float], condition_prob: float | None = None) -> "Reference":
        """Validate and build; probabilities must be ≥ 0 and sum to 1 within 1e-3 (renormalised)."""
        names = _check_names(probs)
        values = np.array([float(v) for v in probs.values()])
        bad = [n for n, v in zip(names, values) if not math.isfinite(v) or v < 0]
        if bad:
            raise ValueError(f"reference probability of {bad[0]!r} must be a finite number ≥ 0, got {probs[bad[0]]!r}")
        total = float(values.sum())
        if abs(total - 1.0) > SUM_TOLERANCE:
            raise ValueError(
                f"reference probabilities sum to {total:.6g}, not 1 (tolerance "
                f"{SUM_TOLERANCE:g}); give the full distribution of the outcome"
            )
        values = values / total
        out_names = list(names) + [OTHER]
        out = list(values) + [0.0]
        if condition_prob is not None:
            c = float(condition_prob)
            if not (math.isfinite(c) and 0.0 < c <= 1.0):
                raise ValueError(f"condition_prob must be in (0, 1], got {condition_prob!r}")
            out = [v * c for v in out] + [1.0 - c]
            out_names.append(MISSED)
        return cls(
            tuple(out_names), tuple(float(v) for v in out), None if condition_prob is None else float(condition_prob)
        )

    @classmethod
    def from_control(cls, counts_by_name: Mapping[str, int], delta: float = 1e-3) -> "Reference":
        """A reference known only through a control sample (runs of the good build, seeds
        disjoint from every tested commit). ``probs`` is the sample's MLE m/M; keys OTHER and
        MISSED may appear and become categories (MISSED is then an ordinary category)."""
        if not (0.0 < delta < 1.0):
            raise ValueError(f"delta must be in (0, 1), got {delta!r}")
        extra = {k: counts_by_name[k] for k in (OTHER, MISSED) if k in counts_by_name}
        support = {k: v for k, v in counts_by_name.items() if k not in extra}
        support_names = _check_names(support)
        counts = [support[n] for n in support_names] + [extra.get(OTHER, 0)]
        names = [*support_names, OTHER]
        if MISSED in extra:
            names.append(MISSED)
            counts.append(extra[MISSED])
        for n, c in zip(names, counts):
            if int(c) != c or c < 0:
                raise ValueError(f"control count of {n!r} must be an integer ≥ 0, got {c!r}")
        total = sum(counts)
        if total <= 0:
            raise ValueError("control sample is empty: run the good build on some seeds first")
        return cls(tuple(names), tuple(c / total for c in counts), None, tuple(int(c) for c in counts), float(delta))

    def index(self, outcome: str | None, met_condition: bool = True) -> int | None:
        """Category of one run. Unknown outcomes (and None: the run produced no outcome token)
        go to OTHER; a run that missed the condition goes to MISSED, or is discarded (None)
        when the reference has no condition probability."""
        if not met_condition:
            return len(self.names) - 1 if self.names[-1] == MISSED else None
        try:
            i = self.names.index(outcome) if outcome is not None else -1
        except ValueError:
            i = -1
        if i < 0 or self.names[i] in (OTHER, MISSED):
            return self.names.index(OTHER)
        return i

    @property
    def p(self) -> np.ndarray:
        return np.asarray(self.probs, dtype=float)

    @property
    def estimate(self) -> tuple[float, ...]:
        """The reference as one distribution to plug in: the exact probabilities, or for a
        control sample its KT estimate (a category the sample never saw is not impossible)."""
        return self.probs if self.control is None else kt_smooth(self.control)

    def tolerant(self, eta: float) -> tuple[float, ...]:
        """The reference with a glitch allowance: OTHER gets η/2 of the runs that meet the
        condition (the support shrinks in proportion). Where a distribution must be plugged in
        for "good" (two-point steps, the sticky search, mixture priors), a stray outcome at a
        good commit then costs log(2/η) instead of proving BAD. η = 0: the reference itself."""
        if eta <= 0:
            return self.estimate
        g = eta / 2
        est = np.asarray(self.estimate, dtype=float)
        met = est[:-1].sum() if self.names[-1] == MISSED else est.sum()
        out = est.copy()
        met_part = [i for i, nm in enumerate(self.names) if nm != MISSED]  # support and OTHER
        out[met_part] *= 1 - g
        out[self.names.index(OTHER)] += g * met
        return tuple(float(x) for x in out / out.sum())

    def as_point(self) -> "Reference":
        """This reference with `estimate` as its probabilities (what point tests compare to)."""
        return self if self.control is None else Reference(self.names, self.estimate)

    @property
    def has_condition(self) -> bool:
        """True when MISSED is a category whose tolerance is judged separately (from_probs)."""
        return self.condition_prob is not None


def _check_names(mapping: Mapping[str, object]) -> tuple[str, ...]:
    names = tuple(mapping.keys())
    if not names:
        raise ValueError("reference support is empty: give at least one outcome")
    for n in names:
        if not isinstance(n, str) or not n:
            raise ValueError(f"outcome names must be non-empty strings, got {n!r}")
        if n in (OTHER, MISSED):
            raise ValueError(f"outcome name {n!r} is reserved")
    return names


# ---------------------------------------------------------------------------------------------
# Evidence and the building blocks (vectorised over leading axes of `counts`)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Evidence:
    decision: Verdict | None  # GOOD, BAD, UNLIKE or INCONCLUSIVE; None = undecided, keep sampling
    n: int  # runs counted (all categories)
    log_e_bad: float  # log e-value against H0 "q = reference"
    log_e_good: float  # log e-value against H0 "TV(q, reference) ≥ tolerance" (or vs bad endpoint)
    reason: str  # one line, human readable


@lru_cache(maxsize=64)
def prior_matrix(p: tuple[float, ...], priors: tuple[tuple[str, float], ...] = DEFAULT_PRIORS) -> np.ndarray:
    """Dirichlet parameters a_j (J, K) on the categories with p_k > 0 (others get 0 and are
    never used: a zero-probability category that occurs decides BAD by itself)."""
    pa = np.asarray(p, dtype=float)
    pos = pa > 0
    rows = []
    for kind, c in priors:
        if kind not in ("flat", "ref") or not c > 0:
            raise ValueError(f"bad prior {(kind, c)!r}: use ('flat', a) or ('ref', c) with a, c > 0")
        rows.append(np.where(pos, c, 0.0) if kind == "flat" else c * pa)
    return np.array(rows)


def log_mixture_many(counts: np.ndarray, a: np.ndarray, weights: Sequence[float] | None = None) -> np.ndarray:
    """log M_n = log Σ_j w_j B(a_j + n) / B(a_j), B(a) = Π Γ(a_k) / Γ(Σ a_k) (w_j = 1/J by default).

    The Dirichlet-multinomial marginal likelihood of the *sequence* (not the counts), i.e. a
    predictable mixture: each run is predicted from the runs before it, so M_n / L_q(n) is a
    nonnegative martingale under any fixed q. A component with a_jk = 0 gives category k
    probability 0; categories where every a_jk = 0 are ignored (the caller guarantees they have
    count 0).
    """
    n = np.asarray(counts, dtype=float)
    keep = a.max(axis=0) > 0
    n, a = n[..., keep], a[:, keep]
    nj = n[..., None, :]  # (..., 1, K)
    with np.errstate(invalid="ignore"):
        cat = np.where(a > 0, gammaln(a + nj) - gammaln(np.where(a > 0, a, 1.0)), np.where(nj > 0, -np.inf, 0.0))
    per = cat.sum(-1) - (gammaln(a.sum(-1) + nj.sum(-1)) - gammaln(a.sum(-1)))
    w = np.full(a.shape[0], 1.0 / a.shape[0]) if weights is None else np.asarray(weights, dtype=float)
    return logsumexp_last(per + np.log(w))


def logsumexp_last(x: np.ndarray) -> np.ndarray:
    """log Σ exp over the last axis (scipy's logsumexp costs ~100 µs a call; this runs per run)."""
    top = x.max(-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return np.log(np.exp(x - top).sum(-1)) + top[..., 0]


def log_lik_many(counts: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Σ_k n_k log p_k (−inf when a category with p_k = 0 occurs)."""
    with np.errstate(divide="ignore"):
        return xlogy(np.asarray(counts, dtype=float), p).sum(-1)


def log_e_bad_many(counts: np.ndarray, p: np.ndarray, a: np.ndarray) -> np.ndarray:
    """log E_n = log M_n − Σ n_k log p_k; +inf when a zero-probability category occurred."""
    ll = log_lik_many(counts, p)
    with np.errstate(invalid="ignore"):
        return np.where(np.isneginf(ll), np.inf, log_mixture_many(counts, a) - ll)


@lru_cache(maxsize=32)
def subset_masks(k: int) -> np.ndarray:
    """All nonempty proper subsets S of k categories as a (2^k − 2, k) 0/1 matrix (cached)."""
    rows = [r for r in product((0.0, 1.0), repeat=k) if 0 < sum(r) < k]
    return np.array(rows)


def _mle_within(n: np.ndarray) -> np.ndarray:
    """Σ n_k log n_k: with n_S log n_S terms subtracted this gives Σ n_k log(n_k / n_S)."""
    return xlogy(n, n).sum(-1)


def log_sup_tv_null_many(counts: np.ndarray, p: np.ndarray, eps: float) -> np.ndarray:
    """max_{q: TV(q,p) ≥ ε} Σ n_k log q_k.

    TV(q, p) = max_S q(S) − p(S), so the null is the union over S of {q(S) ≥ p(S) + ε}. On one
    such set the likelihood splits into a binomial part, maximised at t = max(p(S) + ε, n_S/n),
    and within-S / within-S̄ parts maximised at q_k ∝ n_k. Subsets with p(S) + ε > 1 are empty.
    """
    n = np.asarray(counts, dtype=float)
    masks = subset_masks(n.shape[-1])
    ps = masks @ p
    ns = n @ masks.T  # (..., S)
    tot = n.sum(-1, keepdims=True)
    nc = tot - ns
    with np.errstate(invalid="ignore", divide="ignore"):
        frac = np.where(tot > 0, ns / np.where(tot > 0, tot, 1.0), 0.0)
        t = np.minimum(np.maximum(ps + eps, frac), 1.0)  # p(S)+ε may round to 1+1e-16
        ll = xlogy(ns, t) + xlogy(nc, 1.0 - t) + _mle_within(n)[..., None] - xlogy(ns, ns) - xlogy(nc, nc)
    ll = np.where(ps + eps <= 1.0 + 1e-12, ll, -np.inf)
    return ll.max(-1)


def log_sup_tv_ball_many(counts: np.ndarray, p: np.ndarray, eta: float) -> np.ndarray:
    """max_{r: TV(r,p) ≤ η} Σ n_k log r_k: the best a distribution within η of p can explain
    the counts (the denominator of the BAD test with an indifference zone).

    When the empirical n/N lies in the ball it is the maximiser. Otherwise (KKT) the maximiser
    raises some categories to r_k = c_up·n_k, lowers others to r_k = c_down·n_k, keeps the rest
    at p_k, i.e. r_k = clip(p_k, c_up·n_k, c_down·n_k), with η moved each way:
    Σ (c_up·n_k − p_k)⁺ = η and Σ (p_k − c_down·n_k)⁺ = η (c_down = ∞ when the categories never
    seen already hold η). Both sums are piecewise linear and monotone in c with breakpoints
    p_k/n_k, so each c is found exactly: the segment holding η, then one linear equation.
    """
    n = np.asarray(counts, dtype=float)
    tot = n.sum(-1, keepdims=True)
    safe = np.where(tot > 0, tot, 1.0)
    emp = n / safe
    inside = 0.5 * np.abs(emp - p).sum(-1) <= eta
    mle = (xlogy(n, emp)).sum(-1)
    seen = n > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        b = np.where(seen, p / np.where(seen, n, 1.0), np.inf)  # breakpoints (..., K)
        bn = b[..., :, None] * n[..., None, :]  # (..., i, k): b_i·n_k
        up_at = np.maximum(bn - p, 0).sum(-1)  # Σ (b_i n_k − p_k)⁺
        down_at = np.maximum(p - bn, 0).sum(-1)  # Σ (p_k − b_i n_k)⁺
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
    """
    n = np.asarray(counts, dtype=float)
    alt = np.asarray(ref.tolerant(eta)) if eta > 0 else None
    if not ref.has_condition:
        return log_e_good_tv_many(n, ref.p, eps, prior_matrix(ref.tolerant(eta), priors), p_alt=alt)
    assert ref.condition_prob is not None
    c = float(ref.condition_prob)
    p_cond = tuple(float(x) for x in ref.p[:-1] / c)
    met = n[..., :-1]
    alt_cond = None if alt is None else alt[:-1] / alt[:-1].sum()
    a_cond = prior_matrix(p_cond if alt_cond is None else tuple(alt_cond), priors)
    g_a = log_e_good_tv_many(met, np.asarray(p_cond), eps, a_cond, p_alt=alt_cond)
    bern = np.stack([met.sum(-1), n[..., -1]], axis=-1)
    p_c = (c, 1.0 - c)
    g_b = log_e_good_tv_many(bern, np.asarray(p_c), eps, prior_matrix(p_c, priors))
    return np.minimum(g_a, g_b)


# ---------------------------------------------------------------------------------------------
# The tests the pipeline calls
# ---------------------------------------------------------------------------------------------


def _as_counts(counts: Sequence[int], ref: Reference) -> np.ndarray:
    n = np.asarray(counts, dtype=float)
    if n.shape != (len(ref.names),):
        raise ValueError(f"expected {len(ref.names)} counts ({', '.join(ref.names)}), got {n.shape}")
    if (n < 0).any():
        raise ValueError("counts must be ≥ 0")
    return n


def _check_levels(alpha: float, beta: float) -> None:
    for name, v in (("alpha", alpha), ("beta", beta)):
        if not (0.0 < v < 1.0):
            raise ValueError(f"{name} must be in (0, 1), got {v!r}")


def _zero_prob_hit(n: np.ndarray, p: np.ndarray, names: Sequence[str]) -> str | None:
    hit = np.flatnonzero((n > 0) & (p <= 0))
    return names[hit[0]] if hit.size else None


def _fmt_e(log_e: float) -> str:
    if log_e == math.inf:
        return "inf"
    return f"{math.exp(log_e):.3g}" if log_e < 700 else f"e^{log_e:.0f}"


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
    _check_levels(alpha, beta)
    if not (0.0 < tolerance < 1.0):
        raise ValueError(f"tolerance must be in (0, 1), got {tolerance!r}")
    if not (0.0 <= eta < tolerance):
        raise ValueError(f"eta (indifference) must be in [0, tolerance), got {eta!r}")
    n = _as_counts(counts, ref)
    total = int(n.sum())
    hit = _zero_prob_hit(n, ref.p, ref.names) if eta <= 0 else None
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
    return _decide(
        total,
        log_bad,
        log_good,
        alpha,
        beta,
        max_runs,
        good_what=f"TV < {tolerance:g}",
        bad_what=f"TV > {eta:g}" if eta > 0 else "",
    )


def _decide(
    total: int,
    log_bad: float,
    log_good: float,
    alpha: float,
    beta: float,
    max_runs: int,
    good_what: str,
    bad_what: str = "",
    *,
    good: Verdict = Verdict.GOOD,
    good_name: str = "E_good",
) -> Evidence:
    """BAD when log_bad reaches log(1/α), else `good` when log_good reaches log(1/β) (BAD wins a
    tie), else INCONCLUSIVE at the budget, else undecided; with the reason in one line."""
    lb, lg = math.log(1 / alpha), math.log(1 / beta)
    if log_bad >= lb:
        return Evidence(
            Verdict.BAD,
            total,
            log_bad,
            log_good,
            f"E_bad = {_fmt_e(log_bad)} ≥ 1/alpha = {1 / alpha:.3g} after {total} runs"
            + (f" ({bad_what})" if bad_what else ""),
        )
    if log_good >= lg:
        return Evidence(
            good,
            total,
            log_bad,
            log_good,
            f"{good_name} = {_fmt_e(log_good)} ≥ 1/beta = {1 / beta:.3g} after {total} runs ({good_what})",
        )
    if total >= max_runs:
        return Evidence(
            Verdict.INCONCLUSIVE,
            total,
            log_bad,
            log_good,
            f"undecided after {total} runs (budget {max_runs}): E_bad = {_fmt_e(log_bad)}, "
            f"{good_name} = {_fmt_e(log_good)}",
        )
    return Evidence(
        None,
        total,
        log_bad,
        log_good,
        f"undecided after {total} runs: E_bad = {_fmt_e(log_bad)}, {good_name} = {_fmt_e(log_good)}",
    )


# ---------------------------------------------------------------------------------------------
# The broken end's distribution, for quick steps and the sticky search
# ---------------------------------------------------------------------------------------------

UNLIKE_WEIGHT = 0.1  # share of the "unlike the broken end" e-value bet on any other distribution


def kt_smooth(counts: Sequence[float]) -> tuple[float, ...]:
    """(c_k + ½) / (Σc + K/2): the Krichevsky–Trofimov estimate, never 0.

    Used wherever observed counts stand in for a distribution: the bad endpoint's q̂ (so one
    surprising run at a bad commit cannot make the two-point log-likelihood ratio −∞) and a
    control sample (whose zero counts are not impossibilities)."""
    b = np.asarray(counts, dtype=float)
    if b.ndim != 1 or b.size == 0 or (b < 0).any():
        raise ValueError("counts must be a non-empty sequence of counts ≥ 0")
    return tuple(float(x) for x in (b + 0.5) / (b.sum() + b.size / 2))


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
    if _zero_prob_hit(b, p, ref.names) is not None:
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
              named (pipeline.bisect).
    INCONCLUSIVE at max_runs. Which of the two fires first decides; BAD wins a tie. `bad`: the
    reference test's evidence on these counts when it is not the exact one (a control sample's
    test, :func:`test_against_control`), whose BAD statistic is then used instead."""
    _check_levels(alpha, beta)
    n = _as_counts(counts, ref)
    q = np.asarray(q_bad, dtype=float)
    if q.shape != n.shape or (q <= 0).any() or abs(q.sum() - 1) > SUM_TOLERANCE:
        raise ValueError(
            "q_bad must be a strictly positive distribution over the reference's "
            "categories (use kt_smooth on the broken end's counts)"
        )
    q = q / q.sum()
    total = int(n.sum())
    hit = _zero_prob_hit(n, ref.p, ref.names) if eta <= 0 and bad is None else None
    if hit is not None:
        return Evidence(Verdict.BAD, total, math.inf, -math.inf, f"outcome {hit!r} has reference probability 0")
    log_bad = bad.log_e_bad if bad is not None else float(log_e_depart_many(n, ref, eta, toward=q))
    p_good = np.asarray(ref.tolerant(eta) if eta > 0 else ref.estimate, dtype=float)
    log_unlike = float(log_e_unlike_many(n, p_good, q))
    return _decide(
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


# ---------------------------------------------------------------------------------------------
# Like a tested commit, seed for seed (every commit's tests run on the common seeds)
# ---------------------------------------------------------------------------------------------

ALIKE_DELTA = 0.05  # "like an end": TV from it below this (half the default tolerance)
STEER_LEVEL = 0.01  # a placement only steers: P(placing a commit that differs by ≥ delta) ≤ this


def log_e_alike(agree: int, differ: int, delta: float = ALIKE_DELTA) -> float:
    """log E against H0 "TV(q_X, q_E) ≥ delta", from runs of commit X and of an end E on the
    same seeds (`agree` seeds gave both the same observation, `differ` not).

    A deterministic program's output is a function of its seed, so two commits run on one
    random seed are a coupling of their distributions, and P(outputs differ) ≥ TV (the coupling
    inequality). Under H0 each seed differs with probability d ≥ delta; the likelihood ratio of
    d₁ = delta/4 against delta, ((1−d₁)/(1−delta))^agree (d₁/delta)^differ, has mean ≤ 1 per
    seed for every d ≥ delta: a test supermartingale (Ville). All alike: 1/0.01 after 119
    seeds; each seed that differs costs log 4. Commits whose outputs merely differ (other
    numerics, a reordered random stream) never get there; they are tested as usual."""
    d1 = delta / 4
    return agree * math.log((1 - d1) / (1 - delta)) + differ * math.log(d1 / delta)


# ---------------------------------------------------------------------------------------------
# Did the distribution change between two commits? (the named commit against its parent)
# ---------------------------------------------------------------------------------------------

CHANGE_FLAT = 0.2  # a flat Dirichlet component over every category
CHANGE_STRENGTHS = (20.0, 200.0)  # components centred on each expected distribution
CHANGE_POINT_WEIGHT = 0.5  # the share of each side's mixture on the expected distributions themselves


def change_priors(k: int, centres: Sequence[Sequence[float]]) -> np.ndarray:
    """Dirichlet parameters for one side of the change test: flat over all k categories (any
    outcome, stray ones included, keeps a positive probability), plus components centred on
    each expected distribution (the reference, the broken end's q̂, the commit's own search
    runs: all measured on other seeds, so fixed before the test's runs)."""
    rows = [np.full(k, CHANGE_FLAT)]
    for centre in centres:
        c = np.asarray(centre, dtype=float)
        if c.shape != (k,) or (c < 0).any() or not c.sum() > 0:
            raise ValueError(f"a centre must be a distribution over the {k} categories")
        c = c / c.sum()
        rows += [s * c for s in CHANGE_STRENGTHS]
    return np.array(rows)


def log_change_side(counts: np.ndarray, centres: Sequence[Sequence[float]]) -> np.ndarray:
    """log of one side's predictable mixture: half on the Dirichlet components of
    `change_priors`, half on the centres themselves (KT-smoothed, so never 0): when a commit
    really is what its centre says, the test pays almost nothing for having guessed."""
    k = np.asarray(counts).shape[-1]
    dirichlet = log_mixture_many(counts, change_priors(k, centres))
    if not centres:
        return dirichlet
    out = math.log1p(-CHANGE_POINT_WEIGHT) + dirichlet
    w = math.log(CHANGE_POINT_WEIGHT / len(centres))
    for centre in centres:
        smooth = np.asarray(kt_smooth([float(x) * 1e4 for x in centre]), dtype=float)
        out = np.logaddexp(out, w + log_lik_many(counts, smooth))
    return out


def log_e_change_many(
    x: np.ndarray, y: np.ndarray, centres_x: Sequence[Sequence[float]], centres_y: Sequence[Sequence[float]]
) -> np.ndarray:
    """log E against H0 "x and y are runs of one and the same distribution":

        log E_n = log M_x(x) + log M_y(y) − max_q log L_q(x + y)

    (universal inference: Wasserman, Ramdas, Balakrishnan, PNAS 2020), M the mixture of
    `log_change_side`. For the true common q the maximum is at least log L_q(x) + log L_q(y);
    M_x(x)/L_q(x) and M_y(y)/L_q(y) are test martingales on two independent run sequences, and
    fed in a fixed alternation their product is one too, so P(E ever ≥ 1/α) ≤ α at any
    stopping time."""
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n = xa + ya
    tot = n.sum(-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        pooled = xlogy(n, n / np.where(tot > 0, tot, 1.0)).sum(-1)
    return log_change_side(xa, centres_x) + log_change_side(ya, centres_y) - pooled


def test_change(
    x: Sequence[int],
    y: Sequence[int],
    ref: Reference,
    *,
    alpha: float,
    max_runs: int,
    centres_x: Sequence[Sequence[float]] = (),
    centres_y: Sequence[Sequence[float]] = (),
) -> Evidence:
    """Do the runs `x` (the named commit's, fresh seeds) and `y` (its parent's) come from
    different distributions? CHANGED when the change e-value reaches 1/α; INCONCLUSIVE once
    both have `max_runs` counted runs without it. Neither the reference nor any assumption
    about the history enters the guarantee: at a commit where nothing changed, CHANGED has
    probability ≤ α. The reference and the centres only steer the mixtures (speed, never
    validity)."""
    if not (0.0 < alpha < 1.0):
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    xa, ya = _as_counts(x, ref), _as_counts(y, ref)
    log_e = float(log_e_change_many(xa, ya, [ref.estimate, *centres_x], [ref.estimate, *centres_y]))
    nx, ny = int(xa.sum()), int(ya.sum())
    if log_e >= math.log(1 / alpha):
        return Evidence(
            Verdict.CHANGED,
            nx + ny,
            log_e,
            0.0,
            f"E_change = {_fmt_e(log_e)} ≥ 1/alpha = {1 / alpha:.3g} after {nx} + {ny} runs",
        )
    if min(nx, ny) >= max_runs:
        return Evidence(
            Verdict.INCONCLUSIVE,
            nx + ny,
            log_e,
            0.0,
            f"no change shown after {nx} + {ny} runs (budget {max_runs} each): E_change = {_fmt_e(log_e)}",
        )
    return Evidence(None, nx + ny, log_e, 0.0, f"undecided after {nx} + {ny} runs")


# ---------------------------------------------------------------------------------------------
# Runs that mostly fail: when to skip a commit
# ---------------------------------------------------------------------------------------------

SKIP_LEVEL = 0.02  # P(skipping a commit whose runs fail at most half the time) ≤ this
# alternatives (failure rate f, weight) of the mixture; most weight on "nearly every run fails"
SKIP_ALTERNATIVES: tuple[tuple[float, float], ...] = ((0.6, 0.1), (0.8, 0.2), (0.95, 0.7))


def log_e_mostly_failing(failed: int, ok: int) -> float:
    """log E against H0 "at most half of this commit's runs fail".

    A mixture over alternatives f > ½ of the likelihood ratios (f/½)^failed ((1−f)/½)^ok;
    under any failure rate ≤ ½ each ratio has mean ≤ 1 per run (2(f_H f + (1−f_H)(1−f)) ≤ 1),
    so the mixture is a test supermartingale (Ville). When every run fails it reaches 1/0.02
    after 7 runs; a commit where 10% of runs fail essentially never gets there."""
    terms = [math.log(w) + failed * math.log(2 * f) + ok * math.log(2 * (1 - f)) for f, w in SKIP_ALTERNATIVES]
    top = max(terms)
    return top + math.log(sum(math.exp(t - top) for t in terms))


def mostly_failing(failed: int, ok: int, level: float = SKIP_LEVEL) -> bool:
    """Evidence, at `level`, that more than half of the commit's runs fail: skip it."""
    return log_e_mostly_failing(failed, ok) >= math.log(1 / level)


# ---------------------------------------------------------------------------------------------
# Error budget of a whole bisect, and Wald's lower bounds
# ---------------------------------------------------------------------------------------------


def step_level(n_commits: int, confidence: float = 0.99) -> float:
    """Per-verdict α (= β) so that a bisect over n_commits is right with prob ≥ confidence.

    What a bisect reports rests on its tests against the reference (every GOOD or BAD it
    reached: the ends, the search's reference steps, fresh re-tests) and on the change test at
    the named commit: if none of them is wrong, the answer is right (within the assumptions
    the report lists). Plain bisection over positions 0..n−1 (0 good, n−1 bad) makes at most
    ⌈log2(n − 1)⌉ steps; with the two ends, the change test and one fresh re-test of the
    parent that is +4, and by the union bound the whole is wrong with probability ≤
    (⌈log2(n−1)⌉ + 4)·α. The pipeline stops before its tests' levels would sum past
    1 − confidence (skips and walk-backs can add tests).
    """
    if n_commits < 2:
        raise ValueError("a bisect needs at least two commits")
    if not (0.0 < confidence < 1.0):
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    steps = math.ceil(math.log2(n_commits - 1)) if n_commits > 2 else 0
    return (1.0 - confidence) / (steps + 4)


def kl(q: Sequence[float] | np.ndarray, p: Sequence[float] | np.ndarray) -> float:
    """KL(q‖p) = Σ q_k log(q_k/p_k) in nats (inf when q puts mass where p has none)."""
    qa, pa = np.asarray(q, dtype=float), np.asarray(p, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(qa > 0, qa * (np.log(qa) - np.log(pa)), 0.0)
    return float(terms.sum())


def binary_kl(a: float, b: float) -> float:
    return kl((a, 1 - a), (b, 1 - b))


def wald_bound(q: Sequence[float], p: Sequence[float], alpha: float, beta: float) -> float:
    """Lower bound on E_q[N] for ANY sequential test that decides "not p" with probability
    ≥ 1 − β under q and ≤ α under p (Wald 1945; Hoeffding 1960): d(1−β ‖ α) / KL(q‖p),
    d the binary KL. ≈ log(1/α)/KL(q‖p) for small α, β."""
    d = kl(q, p)
    return binary_kl(1 - beta, alpha) / d if d > 0 else math.inf


def good_wald_bound(ref: Reference, tolerance: float, alpha: float, beta: float) -> float:
    """Wald bound for certifying GOOD under q = p against every q with TV ≥ tolerance:
    d(1−α ‖ β) / min_{q ∈ H0} KL(p‖q), the minimum over the same null as the GOOD test
    (binary reductions per subset S). With a condition probability c the conditional part
    learns only from the fraction c of runs that meet it, and both parts must be certified."""
    d = binary_kl(1 - alpha, beta)
    if not ref.has_condition:
        return d / _min_binary_kl(ref.p, tolerance)
    assert ref.condition_prob is not None
    c = float(ref.condition_prob)
    part_a = d / (c * _min_binary_kl(ref.p[:-1] / c, tolerance))
    part_b = d / _min_binary_kl(np.array([c, 1 - c]), tolerance)
    return max(part_a, part_b)


def _min_binary_kl(p: np.ndarray, eps: float) -> float:
    masks = subset_masks(p.size)
    vals = [binary_kl(float(ps), float(ps) + eps) for ps in masks @ p if ps + eps <= 1 + 1e-12]
    return min(vals)


def hardest_tv_shift(p: Sequence[float], tv: float) -> tuple[float, ...]:
    """The q with TV(q, p) = tv that is hardest to tell from p (min KL(q‖p)): for the best
    subset S, q(S) = p(S) + tv with q ∝ p inside S and inside S̄ (chain rule of KL)."""
    pa = np.asarray(p, dtype=float)
    best, arg = math.inf, None
    for m in subset_masks(pa.size):
        ps = float(m @ pa)
        if ps + tv > 1 or ps <= 0:
            continue
        d = binary_kl(ps + tv, ps)
        if d < best:
            best, arg = d, m
    assert arg is not None
    ps = float(arg @ pa)
    q = np.where(arg > 0, pa * (ps + tv) / ps, pa * (1 - ps - tv) / (1 - ps))
    return tuple(float(x) for x in q)


# ---------------------------------------------------------------------------------------------
# The reference as a control sample
# ---------------------------------------------------------------------------------------------


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
    _check_levels(alpha, beta)
    if control.control is None:
        raise ValueError("test_against_control needs a Reference built with Reference.from_control")
    n = _as_counts(counts, control)
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
    return _decide(total, log_bad, log_good, alpha, beta, max_runs, good_what=what)
