"""Two commits compared with each other, not with the reference (pure).

* Change: do two commits' runs (fresh seeds) come from different distributions? A two-sample
  universal-inference test (Wasserman, Ramdas, Balakrishnan, PNAS 2020), valid whatever the
  reference says: it is what names a commit (the named commit against its parent).
* Likeness: commits run on the same seeds, compared seed for seed (the coupling inequality):
  enough to place a commit beside one tested before, a placement that only steers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
from scipy.special import xlogy

from bisectbot.statistics.outcome import Verdict
from bisectbot.statistics.stats import Evidence, Reference, as_counts, fmt_e, kt_smooth, log_lik_many, log_mixture_many

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


@dataclass(frozen=True)
class SeedForSeed:
    """Two commits' runs on the seeds both ran: how many seeds gave the same observation."""

    agree: int
    shared: int

    @property
    def differ(self) -> int:
        return self.shared - self.agree

    def alike(self, level: float = STEER_LEVEL) -> bool:
        """Shown alike at `level` (log_e_alike): TV below ALIKE_DELTA between them."""
        return self.shared > 0 and log_e_alike(self.agree, self.differ) >= math.log(1 / level)


def seed_for_seed(mine: Mapping[int, int], theirs: Mapping[int, int]) -> SeedForSeed:
    """Compare two commits' observations (seed → category) on the seeds both ran."""
    shared = [seed for seed in mine if seed in theirs]
    return SeedForSeed(sum(mine[seed] == theirs[seed] for seed in shared), len(shared))


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
    xa, ya = as_counts(x, ref), as_counts(y, ref)
    log_e = float(log_e_change_many(xa, ya, [ref.estimate, *centres_x], [ref.estimate, *centres_y]))
    nx, ny = int(xa.sum()), int(ya.sum())
    if log_e >= math.log(1 / alpha):
        return Evidence(
            Verdict.CHANGED,
            nx + ny,
            log_e,
            0.0,
            f"E_change = {fmt_e(log_e)} ≥ 1/alpha = {1 / alpha:.3g} after {nx} + {ny} runs",
        )
    if min(nx, ny) >= max_runs:
        return Evidence(
            Verdict.INCONCLUSIVE,
            nx + ny,
            log_e,
            0.0,
            f"no change shown after {nx} + {ny} runs (budget {max_runs} each): E_change = {fmt_e(log_e)}",
        )
    return Evidence(None, nx + ny, log_e, 0.0, f"undecided after {nx} + {ny} runs")
