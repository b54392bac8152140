"""Simulation helpers shared by bench/bench_stats.py and tests/test_stats.py.

They run the very formulas of bisectbot.statistics.stats, vectorised over many simulated run sequences:
a sequence is drawn once, its cumulative counts (paths, T, K) are fed to the ``*_many``
functions, and the first run at which a threshold is crossed is the stopping time. That is
exactly what calling the scalar test after every run would do, only ~1000× faster.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from bisectbot.core import broken_end, search
from bisectbot.statistics import sequential, tvnull
from bisectbot.statistics import stats as S

P_29975 = {"e": 0.3454894722, "g": 0.4516915679, "h": 0.2028189600}
CONDITION_29975 = 0.82

UNDECIDED, BAD, GOOD = 0, 1, 2


def ref_29975() -> S.Reference:
    return S.Reference.from_probs(P_29975, CONDITION_29975)


def joint(
    cond_probs: Sequence[float], condition_prob: float | None = CONDITION_29975, other: float = 0.0
) -> np.ndarray:
    """Category probabilities (support…, OTHER, MISSED) for a conditional outcome distribution."""
    cp = np.append(np.asarray(cond_probs, dtype=float) * (1 - other), other)
    return cp if condition_prob is None else np.append(cp * condition_prob, 1 - condition_prob)


def binary_kl(a: float, b: float) -> float:
    return S.kl((a, 1 - a), (b, 1 - b))


def hardest_tv_shift(p: Sequence[float], tv: float) -> tuple[float, ...]:
    """A q with TV(q, p) = tv that is hard to tell from p: the GOOD test's nearest point of its
    null for counts ∝ p (statistics.tvnull's maximiser), S = the outcomes it weighs ≥ ½, with
    q(S) = p(S) + tv, q ∝ p inside S and inside S̄ (exact when p has at most tvnull.HEAVY
    possible outcomes, as #29975's does: there it is the nearest point itself). The defects the
    simulations (and tests) plant at a given TV."""
    pa = np.asarray(p, dtype=float)
    w, _ = tvnull.null_weights(pa * 1e6, pa, tv)
    inside = (w >= 0.5) & (pa > 0)
    ps = float(pa[inside].sum())
    q = np.where(inside, pa * (ps + tv) / ps, pa * (1 - ps - tv) / (1 - ps))
    return tuple(float(x) for x in q)


def draw_counts(rng: np.random.Generator, q: np.ndarray, paths: int, runs: int) -> np.ndarray:
    """Cumulative category counts (paths, runs, K) of i.i.d. runs from q."""
    u = rng.random((paths, runs))
    cat = np.searchsorted(np.cumsum(q)[:-1], u, side="right")
    onehot = np.zeros((paths, runs, q.size), dtype=np.int32)
    np.put_along_axis(onehot, cat[..., None], 1, axis=-1)
    return np.cumsum(onehot, axis=1)


def first_true(mask: np.ndarray) -> np.ndarray:
    """Index of the first True along the last axis, or −1."""
    any_ = mask.any(-1)
    return np.where(any_, mask.argmax(-1), -1)


@dataclass(frozen=True)
class Outcomes:
    decision: np.ndarray  # UNDECIDED / BAD / GOOD per path
    runs: np.ndarray  # runs at the decision (the budget when undecided)

    def rate(self, d: int) -> float:
        return float((self.decision == d).mean())

    def mean_runs(self) -> float:
        return float(self.runs.mean())

    def p95(self) -> float:
        return float(np.percentile(self.runs, 95))


def _decide(bad_idx: np.ndarray, good_idx: np.ndarray, budget: int) -> Outcomes:
    inf = np.iinfo(np.int64).max
    b = np.where(bad_idx >= 0, bad_idx, inf)
    g = np.where(good_idx >= 0, good_idx, inf)
    first = np.minimum(b, g)
    dec = np.where(first == inf, UNDECIDED, np.where(b <= g, BAD, GOOD))
    runs = np.where(first == inf, budget, first + 1)
    return Outcomes(dec, runs)


def simulate_generic(
    rng: np.random.Generator,
    ref: S.Reference,
    q: np.ndarray,
    *,
    alpha: float,
    beta: float,
    tolerance: float,
    max_runs: int,
    paths: int,
    eta: float = 0.0,
    chunk: int = 200,
) -> Outcomes:
    """test_against_reference called after every run, for `paths` sequences from q."""
    lb, lg = math.log(1 / alpha), math.log(1 / beta)
    decs, runs = [], []
    for start in range(0, paths, chunk):
        c = draw_counts(rng, q, min(chunk, paths - start), max_runs).astype(float)
        bad = first_true(sequential.log_e_depart_many(c, ref, eta) >= lb)
        good = first_true(sequential.log_e_good_many(c, ref, tolerance, eta=eta) >= lg)
        o = _decide(bad, good, max_runs)
        decs.append(o.decision)
        runs.append(o.runs)
    return Outcomes(np.concatenate(decs), np.concatenate(runs))


# ---------------------------------------------------------------------------------------------
# The sticky search on its own (whole bisects go through run_bisect: bench/simbisect.py)
# ---------------------------------------------------------------------------------------------


class RunSource:
    """Categorical draws from a fixed distribution, buffered (fast per-run oracle)."""

    def __init__(self, rng: np.random.Generator, q: np.ndarray, block: int = 4096):
        self.rng, self.cdf, self.block = rng, np.cumsum(q)[:-1], block
        self.buf: list[int] = []

    def __call__(self) -> int:
        if not self.buf:
            self.buf = np.searchsorted(self.cdf, self.rng.random(self.block), side="right").tolist()
        return self.buf.pop()


def calibrate_bad(
    rng: np.random.Generator, ref: S.Reference, q_bad: np.ndarray, max_runs: int = 100_000, block: int = 50
) -> tuple[np.ndarray, int]:
    """Measure the bad endpoint until broken_end.bad_endpoint_enough. Returns (q̂, runs used)."""
    counts = np.zeros(q_bad.size)
    runs = 0
    while runs < max_runs:
        for row in draw_counts(rng, q_bad, 1, block)[0]:
            runs += 1
            if broken_end.bad_endpoint_enough(counts + row, ref):
                return np.asarray(S.kt_smooth(counts + row)), runs
        counts = counts + row
    return np.asarray(S.kt_smooth(counts)), runs


def bisect_sticky(
    rng: np.random.Generator,
    ref: S.Reference,
    q_bad: np.ndarray,
    n: int,
    culprit: int,
    confidence: float,
    calibrated: tuple[np.ndarray, int] | None = None,
) -> tuple[int, int, int]:
    """One sticky Bayesian bisect; the bad endpoint is measured as for the two-point mode."""
    q_hat, runs = calibrated or calibrate_bad(rng, ref, q_bad)
    bad_counts = np.round(q_hat * (runs + q_hat.size / 2) - 0.5)  # undo kt_smooth
    good, bad = RunSource(rng, ref.p), RunSource(rng, q_bad)
    res = search.sticky_bisect(n, lambda i: bad() if i >= culprit else good(), ref.p, bad_counts, confidence=confidence)
    return res.culprit, runs + res.runs, len(res.tested)
