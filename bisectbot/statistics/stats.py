"""The ground every sequential test stands on (pure): categories, the reference, evidence.

Every run of the program under test is mapped to one *category*: an outcome of the reference's
support, ``OTHER`` (anything else), ``FAILED`` (the run failed, when the config counts failed runs
as an outcome: `statistic.failures`), or ``MISSED`` (the run did not meet the condition, when the
reference gives P(condition)). A commit is then a multinomial source with unknown probabilities
q, and we watch its counts n grow one run at a time. Every decision is an *e-process*
threshold: a nonnegative statistic E_n with E[E_τ] ≤ 1 at any stopping time τ under the null,
so by Ville's inequality P(∃n: E_n ≥ 1/α) ≤ α. That is what makes it safe to call the tests
after every single run and to stop, or to extend the budget later, whenever we like.

The tests live beside this module, one idea each (docs/how-it-decides.md summarises them;
bench/bench_stats.py measures them):

* `sequential`: BAD (H0: q = p, a Dirichlet-mixture Bayes factor) and GOOD (H0: TV(q, p) ≥
  tolerance, universal inference): the generic test of a commit against the reference;
  `tvnull` bounds GOOD's null maximum without the power set of the outcomes.
* `broken_end`: quick search steps: BAD as above, or "unlike the broken end's smoothed
  distribution q̂": a placement, never GOOD; when q̂ has been measured enough.
* `two_sample`: did the distribution change between two commits (fresh seeds, valid whatever
  the reference says)? Is a commit like another, seed for seed (the coupling inequality)?
* `skips`: do more than half of a commit's runs fail?
* `control_sample`: the reference is known only through runs of a known-good commit: each
  tested run paired with the control's run on its seed, a two-sample test by betting.
* `pooling`: a reference of very many outcomes, its tail pooled into buckets (what GOOD must
  then leave for them).

This module holds what they share, so none of them imports another's internals: the
categories and `Reference`; `Evidence` and the one rule that turns two e-values into a
decision; the Dirichlet mixtures and likelihoods; KT smoothing; the error budget of a whole
bisect (`step_level`, `scan_level`).

Everything here is pure: numbers in, numbers out. No I/O, no printing, no global state other
than a small cache of Dirichlet priors. Vectorised helpers (``*_many``) take count arrays of shape
(..., K) so the simulations in bench/ and tests/ run the *same* formulas as the pipeline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Mapping, Sequence

import numpy as np
from scipy.special import gammaln, xlogy

from bisectbot.statistics.outcome import Verdict
from bisectbot.statistics.pooling import Pooling, bucket_name, is_bucket, pool_probs

OTHER = "<other>"  # outcome not in the reference support
FAILED = "<failed>"  # run failed: crash, timeout, nonzero exit, … (only a category with statistic.failures: outcome)
MISSED = "<missed>"  # run did not meet the condition (only a category when condition_prob is given)
VALUE = "<value>"  # a run that gave a number (statistic.kind mean or time: its tests are statistics.means)

# Priors of the Dirichlet mixture, equal weights 1/J. ("flat", a) is a·1 on every category
# with p_k > 0: small a puts mass near the simplex's faces, so a collapse onto one token is
# caught in ~14 runs. ("ref", c) is c·p, centred on the reference: subtle shifts pay less
# for it. Tuned on the #29975 reference (bench/bench_stats.py); any choice is valid.
DEFAULT_PRIORS: tuple[tuple[str, float], ...] = (("flat", 0.2), ("ref", 20.0), ("ref", 100.0))
SUM_TOLERANCE = 1e-3  # reference probabilities must sum to 1 within this, then are renormalised


# ---------------------------------------------------------------------------------------------
# Reference
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Reference:
    """The reference distribution over categories: support names (with `pooling`, the kept
    outcomes, then the tail buckets), then OTHER, then FAILED (when failed runs are an outcome),
    then MISSED.

    ``probs[OTHER]`` is 0 for a probability reference, so any unknown outcome proves BAD (beyond
    eta, with an indifference zone); so is ``probs[FAILED]``: a correct build never fails, and a
    crash rate is a departure like any other. FAILED sits among the categories of runs that
    "met the condition" (a failed run has no outcome to tell): with P(condition) the
    conditional distribution then includes it, at reference probability 0.
    With ``condition_prob`` c the support probabilities are scaled by c and MISSED gets 1 − c:
    the ~18% of runs that miss the condition then count as evidence instead of being discarded.
    A reference built from a control sample also keeps the sample's counts (``control``).
    """

    names: tuple[str, ...]
    probs: tuple[float, ...]
    condition_prob: float | None = None
    control: tuple[int, ...] | None = None
    delta: float = 0.0
    pooling: Pooling | None = None  # the tail pooled into buckets (statistics.pooling)

    @classmethod
    def from_probs(
        cls,
        probs: Mapping[str, float],
        condition_prob: float | None = None,
        failures: bool = False,
        max_categories: int | None = None,
    ) -> "Reference":
        """Validate and build; probabilities must be ≥ 0 and sum to 1 within 1e-3 (renormalised).
        `failures`: failed runs are a category (FAILED, probability 0). More than `max_categories`
        outcomes: the tail pooled (`pooling.pool_probs`)."""
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
        pool = pool_probs(dict(zip(names, values)), max_categories)
        if pool is not None:
            mass = dict(zip(names, values))
            names = (*pool.kept, *(bucket_name(i + 1) for i in range(len(pool.buckets))))
            values = np.array([mass[k] for k in pool.kept] + [sum(mass[o] for o in b) for b in pool.buckets])
        out_names = list(names) + [OTHER] + ([FAILED] if failures else [])
        out = list(values) + [0.0] * (2 if failures else 1)
        if condition_prob is not None:
            c = float(condition_prob)
            if not (math.isfinite(c) and 0.0 < c <= 1.0):
                raise ValueError(f"condition_prob must be in (0, 1], got {condition_prob!r}")
            out = [v * c for v in out] + [1.0 - c]
            out_names.append(MISSED)
        return cls(
            tuple(out_names),
            tuple(float(v) for v in out),
            None if condition_prob is None else float(condition_prob),
            pooling=pool,
        )

    @classmethod
    def from_control(
        cls,
        counts_by_name: Mapping[str, int],
        delta: float = 1e-3,
        failures: bool = False,
        pooling: Pooling | None = None,
    ) -> "Reference":
        """A reference known only through a control sample (runs of the good build on the common
        seeds; `control_sample` tests against the runs themselves). ``probs`` is the sample's MLE m/M; keys OTHER,
        FAILED and MISSED may appear and become categories (MISSED is then an ordinary category);
        with `failures` FAILED is one even when the control never failed. With `pooling` (fixed
        from the control's first runs) its kept outcomes and buckets are the support: counts of
        pooled outcomes, or of the buckets by name, go to their bucket, any other to OTHER."""
        if not (0.0 < delta < 1.0):
            raise ValueError(f"delta must be in (0, 1), got {delta!r}")
        extra = {k: counts_by_name[k] for k in (OTHER, FAILED, MISSED) if k in counts_by_name}
        support = {k: v for k, v in counts_by_name.items() if k not in extra}
        if pooling is not None:
            buckets = [bucket_name(i + 1) for i in range(len(pooling.buckets))]
            where = {o: b for b, members in zip(buckets, pooling.buckets) for o in members}
            where.update({k: k for k in (*pooling.kept, *buckets)})
            pooled = dict.fromkeys((*pooling.kept, *buckets), 0)
            for k, v in support.items():
                if k in where:
                    pooled[where[k]] += v
                else:
                    extra[OTHER] = extra.get(OTHER, 0) + v
            support_names: tuple[str, ...] = tuple(pooled)
            support = pooled
        else:
            support_names = _check_names(support)
        counts = [support[n] for n in support_names] + [extra.get(OTHER, 0)]
        names = [*support_names, OTHER]
        if failures or FAILED in extra:
            names.append(FAILED)
            counts.append(extra.get(FAILED, 0))
        if MISSED in extra:
            names.append(MISSED)
            counts.append(extra[MISSED])
        for n, c in zip(names, counts):
            if int(c) != c or c < 0:
                raise ValueError(f"control count of {n!r} must be an integer ≥ 0, got {c!r}")
        total = sum(counts)
        if total <= 0:
            raise ValueError("control sample is empty: run the good build on some seeds first")
        return cls(
            tuple(names),
            tuple(c / total for c in counts),
            None,
            tuple(int(c) for c in counts),
            float(delta),
            pooling,
        )

    @cached_property
    def _lookup(self) -> dict[str, int]:
        """Outcome → category, O(1) a run: the support's own names and each pooled outcome's
        bucket (reserved names are no outcome: a run that prints one is OTHER)."""
        out = {name: i for i, name in enumerate(self.names) if not _reserved(name)}
        if self.pooling is not None:
            for i, members in enumerate(self.pooling.buckets):
                at = self.names.index(bucket_name(i + 1))
                out.update(dict.fromkeys(members, at))
        return out

    @property
    def hidden(self) -> float:
        """The reference mass GOOD leaves for what pooling hides (0 without pooling)."""
        return self.pooling.hidden if self.pooling is not None else 0.0

    def index(self, outcome: str | None, met_condition: bool = True) -> int | None:
        """Category of one run. Unknown outcomes (and None: the run produced no outcome token)
        go to OTHER, pooled ones to their bucket; a run that missed the condition goes to
        MISSED, or is discarded (None) when the reference has no condition probability."""
        if not met_condition:
            return len(self.names) - 1 if self.names[-1] == MISSED else None
        if outcome == FAILED and FAILED in self.names:  # a control sample's failed run
            return self.names.index(FAILED)
        i = self._lookup.get(outcome) if outcome is not None else None
        return self.names.index(OTHER) if i is None else i

    @property
    def failed(self) -> int | None:
        """The FAILED category's index (failed runs are an outcome), else None (they are not counted)."""
        return self.names.index(FAILED) if FAILED in self.names else None

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
        condition (the support shrinks in proportion), and so does FAILED when it is a category.
        Where a distribution must be plugged in for "good" (two-point steps, the sticky search,
        mixture priors), a stray outcome (or a rare crash) at a good commit then costs log(2/η)
        instead of proving BAD, and every mixture can predict it. η = 0: the reference itself."""
        if eta <= 0:
            return self.estimate
        g = eta / 2
        est = np.asarray(self.estimate, dtype=float)
        met = est[:-1].sum() if self.names[-1] == MISSED else est.sum()
        out = est.copy()
        met_part = [i for i, nm in enumerate(self.names) if nm != MISSED]  # support, OTHER (and FAILED)
        glitches = [self.names.index(OTHER)] + ([self.names.index(FAILED)] if FAILED in self.names else [])
        out[met_part] *= 1 - g * len(glitches)
        for i in glitches:
            out[i] += g * met
        return tuple(float(x) for x in out / out.sum())

    def as_point(self) -> "Reference":
        """This reference with `estimate` as its probabilities (what point tests compare to)."""
        return self if self.control is None else Reference(self.names, self.estimate)

    @property
    def has_condition(self) -> bool:
        """True when MISSED is a category whose tolerance is judged separately (from_probs)."""
        return self.condition_prob is not None


def _reserved(name: str) -> bool:
    """A category name no outcome may have: OTHER, FAILED, MISSED, the tail buckets."""
    return name in (OTHER, FAILED, MISSED) or is_bucket(name)


def _check_names(mapping: Mapping[str, object]) -> tuple[str, ...]:
    names = tuple(mapping.keys())
    if not names:
        raise ValueError("reference support is empty: give at least one outcome")
    for n in names:
        if not isinstance(n, str) or not n:
            raise ValueError(f"outcome names must be non-empty strings, got {n!r}")
        if _reserved(n) or n == VALUE:
            raise ValueError(f"outcome name {n!r} is reserved")
    return names


# ---------------------------------------------------------------------------------------------
# Evidence and the building blocks (vectorised over leading axes of `counts`)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Evidence:
    # GOOD, BAD or INCONCLUSIVE (GOOD-SIDE from quick steps, CHANGED from the change test); None =
    # undecided, keep sampling
    decision: Verdict | None
    n: int  # runs counted (all categories)
    log_e_bad: float  # log e-value against H0 "q = reference"
    log_e_good: float  # log e-value against H0 "TV(q, reference) ≥ tolerance" (or vs bad endpoint)
    reason: str  # one line, human readable
    # numeric statistics (statistics.means): what the runs show of the quantity judged, and the
    # interval of it that they do not rule out at the verdict's level
    interval: tuple[float, float] | None = None
    estimate: float | None = None
    waits: int = 0  # unbounded numbers: runs the normal approximation waits for before it may decide
    noise: float | None = None  # numbers: the spread of one run's contrast (a timing: of its log-ratio)


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


# ---------------------------------------------------------------------------------------------
# From e-values to a decision (shared by every test that returns Evidence)
# ---------------------------------------------------------------------------------------------


def as_counts(counts: Sequence[int], ref: Reference) -> np.ndarray:
    """One commit's counts, checked against the reference's categories (every test's input)."""
    n = np.asarray(counts, dtype=float)
    if n.shape != (len(ref.names),):
        raise ValueError(f"expected {len(ref.names)} counts ({', '.join(ref.names)}), got {n.shape}")
    if (n < 0).any():
        raise ValueError("counts must be ≥ 0")
    return n


def check_levels(alpha: float, beta: float) -> None:
    """Both error levels must be in (0, 1): a level of 0 or 1 makes a test meaningless."""
    for name, v in (("alpha", alpha), ("beta", beta)):
        if not (0.0 < v < 1.0):
            raise ValueError(f"{name} must be in (0, 1), got {v!r}")


def zero_prob_hit(n: np.ndarray, p: np.ndarray, names: Sequence[str]) -> str | None:
    """The first category seen in `n` that `p` calls impossible (it decides BAD by itself), or None."""
    hit = np.flatnonzero((n > 0) & (p <= 0))
    return names[hit[0]] if hit.size else None


def fmt_e(log_e: float) -> str:
    """An e-value for a reason line, from its log (huge ones as e^x rather than overflow)."""
    if log_e == math.inf:
        return "inf"
    return f"{math.exp(log_e):.3g}" if log_e < 700 else f"e^{log_e:.0f}"


def decide(
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
            f"E_bad = {fmt_e(log_bad)} ≥ 1/alpha = {1 / alpha:.3g} after {total} runs"
            + (f" ({bad_what})" if bad_what else ""),
        )
    if log_good >= lg:
        return Evidence(
            good,
            total,
            log_bad,
            log_good,
            f"{good_name} = {fmt_e(log_good)} ≥ 1/beta = {1 / beta:.3g} after {total} runs ({good_what})",
        )
    if total >= max_runs:
        return Evidence(
            Verdict.INCONCLUSIVE,
            total,
            log_bad,
            log_good,
            f"undecided after {total} runs (budget {max_runs}): E_bad = {fmt_e(log_bad)}, "
            f"{good_name} = {fmt_e(log_good)}",
        )
    return Evidence(
        None,
        total,
        log_bad,
        log_good,
        f"undecided after {total} runs: E_bad = {fmt_e(log_bad)}, {good_name} = {fmt_e(log_good)}",
    )


# ---------------------------------------------------------------------------------------------
# Smoothing: observed counts as a distribution
# ---------------------------------------------------------------------------------------------


def kt_smooth(counts: Sequence[float]) -> tuple[float, ...]:
    """(c_k + ½) / (Σc + K/2): the Krichevsky–Trofimov estimate, never 0.

    Used wherever observed counts stand in for a distribution: the bad endpoint's q̂ (so one
    surprising run at a bad commit cannot make the two-point log-likelihood ratio −∞) and a
    control sample (whose zero counts are not impossibilities)."""
    b = np.asarray(counts, dtype=float)
    if b.ndim != 1 or b.size == 0 or (b < 0).any():
        raise ValueError("counts must be a non-empty sequence of counts ≥ 0")
    return tuple(float(x) for x in (b + 0.5) / (b.sum() + b.size / 2))


# ---------------------------------------------------------------------------------------------
# Error budget of a whole bisect; KL divergence
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


def scan_level(n_commits: int, confidence: float = 0.99) -> float:
    """Per-verdict α (= β) for a scan of n_commits (`bisect --scan`): every commit of the line
    may be tested against the reference (the ends included) before one departs, and the bisect
    below it tests none of them again; with the change test and up to three fresh re-tests that
    is at most n + 4 claims, so (1 − confidence) / (n + 4) keeps the union bound."""
    if n_commits < 2:
        raise ValueError("a scan needs at least two commits")
    if not (0.0 < confidence < 1.0):
        raise ValueError(f"confidence must be in (0, 1), got {confidence!r}")
    return (1.0 - confidence) / (n_commits + 4)


def kl(q: Sequence[float] | np.ndarray, p: Sequence[float] | np.ndarray) -> float:
    """KL(q‖p) = Σ q_k log(q_k/p_k) in nats (inf when q puts mass where p has none)."""
    qa, pa = np.asarray(q, dtype=float), np.asarray(p, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(qa > 0, qa * (np.log(qa) - np.log(pa)), 0.0)
    return float(terms.sum())
