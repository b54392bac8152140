"""A commit against a reference known only through a control sample: a paired test (pure).

Each counted run x of the tested commit is paired with the control's run y on the same seed; for a
set S of categories z = 1[x ∈ S] − 1[y ∈ S] has mean q(S) − p(S) whatever p is, and is 0 wherever
the two agree (common random numbers). Betting on z (Waudby-Smith & Ramdas, JRSS-B 2023): BAD
(TV ≤ η) bets on the set the pairs point at; GOOD (some S has q(S) − p(S) ≥ tolerance) bets one
size per run for every S, so each S's log-wealth is N·f(0) + B·Σz + C·Σz² (f(z) = log(1 + λ(tol −
z))): a sum over S plus a cut, least over S exactly on few categories, bounded below on many
(docs/how-it-decides.md: valid by Ville's inequality, as the least is never overstated).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from itertools import product
from typing import Sequence

import numpy as np

from bisectbot.statistics.stats import Evidence, check_levels, decide, logsumexp_last

# Bet sizes as fractions of the largest allowed (1/(1+η) for BAD, 1/(1−tolerance) for GOOD):
# a subtle change wants a small bet, a gross one a large one. Any fixed grid is valid.
BAD_GRID = (0.01, 0.02, 0.04, 0.07, 0.11, 0.17, 0.25, 0.4, 0.6, 0.85)
GOOD_GRID = (0.05, 0.1, 0.15, 0.22, 0.3, 0.4, 0.55, 0.75)
# Half of the GOOD wealth bets the size that grows fastest when the commit is the control's own
# distribution, for the set whose wealth is least: λ = tol / (tol² + E z²), E z² estimated from
# the pairs so far (predictable), shrunk toward ½ (independent pairs' 2·p(S)(1 − p(S)) at its
# largest) by PRIOR_PAIRS pseudo-pairs. The other half is the grid (any q).
GOOD_PLUG_IN_WEIGHT = 0.5
PRIOR_PAIRS = 20.0
# The categories in most pairs that disagree, tried in and out of S in every combination (2^8
# sets, a constant): the least over S is exact when no other category is in such a pair; the
# others each go to the side that costs more, with a bound on the cut among them.
WHOLE_NODES = 8
SPECTRAL_NODES = 64  # the cut's eigenvalue bound up to this many categories (a dense eigensolve)
GATE_MARGIN = 1e-6  # a bound this close to the threshold is not trusted to skip (rounding)


def _bet(lam: np.ndarray | float, tol: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """f(0), B, C with log(1 + λ(tol − z)) = f(0) + B z + C z² on z ∈ {−1, 0, 1} (B, C < 0:
    log is increasing and concave)."""
    lam = np.asarray(lam, dtype=float)
    f0, up, down = np.log1p(lam * tol), np.log1p(lam * (tol - 1)), np.log1p(lam * (tol + 1))
    return f0, (up - down) / 2, (up + down) / 2 - f0


@lru_cache(maxsize=WHOLE_NODES + 1)
def _sets(n: int) -> np.ndarray:
    """Every subset of n categories as a (2^n, n) 0/1 matrix, n ≤ WHOLE_NODES."""
    return np.array(list(product((0.0, 1.0), repeat=n)), dtype=float).reshape(2**n, n)


def cut_bound(weights: np.ndarray) -> float:
    """An upper bound on the largest cut of the graph with these nonnegative symmetric weights
    (zero diagonal): its total weight, and (n/4)·λ_max of its Laplacian where n ≤ SPECTRAL_NODES
    (the cut is xᵀLx/4 over x ∈ {±1}^n, |x|² = n)."""
    total = float(np.triu(weights, 1).sum())
    n = weights.shape[0]
    if n < 2 or n > SPECTRAL_NODES:
        return total
    laplacian = np.diag(weights.sum(1)) - weights
    return min(total, n / 4 * float(np.linalg.eigvalsh(laplacian)[-1]))


@dataclass
class PairedTest:
    """One commit's running test against the control: `add(x, y)` per tested run in category x
    paired with the control's run in category y (the same seed). Feeding the same pairs in the
    same order gives the same numbers (a replay from the database does)."""

    k: int
    tolerance: float
    eta: float
    toward: Sequence[float] | None = None  # the expected departure, if any (BAD bets half on it)
    hidden: float = 0.0  # what pooled outcomes can hide (statistics.pooling): GOOD bets at tolerance − it
    level: float | None = None  # GOOD's beta: its least is then computed only when it could reach 1/beta
    n: int = field(init=False, default=0)
    tested: np.ndarray = field(init=False, repr=False)  # counts of the tested runs paired so far
    control: np.ndarray = field(init=False, repr=False)  # counts of their control runs

    def __post_init__(self) -> None:
        self._tol = self.tolerance - self.hidden
        if not (0.0 < self.tolerance < 1.0) or not (0.0 <= self.eta < self._tol):
            raise ValueError(
                f"need 0 ≤ eta < tolerance − hidden < 1, got eta {self.eta!r}, tolerance {self.tolerance!r}, "
                f"hidden {self.hidden!r}"
            )
        self.tested, self.control = np.zeros(self.k), np.zeros(self.k)
        self._toward = None if self.toward is None else np.asarray(self.toward, dtype=float)
        if self._toward is not None and self._toward.shape != (self.k,):
            raise ValueError(f"toward must be a distribution over the {self.k} categories")
        self._bad_l = np.asarray(BAD_GRID) / (1 + self.eta)
        self._bad = np.zeros(len(BAD_GRID))  # log wealth per BAD bet size
        self._bad_plug = 0.0
        self._toward_z = [0.0, 0.0]  # Σ z, Σ z² on the toward set (the BAD plug-in's variance)
        # GOOD: the grid's bets are fixed, so its wealth of S needs only Σz = (tested − control)(S)
        # and Σz² = the cut of S in the graph of disagreeing pairs (`_pairs`, by category pair)
        self._grid = _bet(np.asarray(GOOD_GRID) / (1 - self._tol), self._tol)
        self._edge: dict[tuple[int, int], int] = {}  # a pair of categories → its row below
        self._ends = np.zeros((16, 2), int)
        self._weights = np.zeros((16, 2))  # per pair of categories: pairs that disagree so, plug-in C's
        self._plug0 = 0.0  # the plug-in's Σ f_i(0), and its sum part per category
        self._plug_b = np.zeros(self.k)
        self._worst = 0.0  # Σz² of the least wealthy set, as last computed
        self._good = 0.0  # the least, as last computed, and what it can have risen by since (the gate)
        self._rise = 0.0
        self._top = math.log1p(float(np.max(GOOD_GRID)) / (1 - self._tol) * (self._tol + 1))

    def add(self, x: int, y: int) -> None:
        """One tested run in category `x`, paired with the control's run in category `y`."""
        # BAD: bet on the categories the pairs so far show above the control (predictable)
        q = (self.tested + 0.5) / (self.n + self.k / 2)
        p = (self.control + 0.5) / (self.n + self.k / 2)
        up = q > p
        if 0 < up.sum() < self.k:
            self._bad += np.log1p(self._bad_l * (float(up[x]) - float(up[y]) - self.eta))
        if self._toward is not None:
            self._bet_toward(x, y, p)
        # GOOD: the plug-in's bet for this pair, from the pairs before it
        second = (self._worst + PRIOR_PAIRS * 0.5) / (self.n + PRIOR_PAIRS)
        lam = min(self._tol / (self._tol**2 + second), 0.8 / (1 - self._tol))
        f0, b, c = (float(v) for v in _bet(lam, self._tol))
        self._plug0 += f0
        if x != y:
            row = self._edge.setdefault((min(x, y), max(x, y)), len(self._edge))
            if row == len(self._ends):  # grow by doubling: O(1) a pair on average
                self._ends = np.concatenate([self._ends, np.zeros_like(self._ends)])
                self._weights = np.concatenate([self._weights, np.zeros_like(self._weights)])
            self._ends[row] = (x, y)
            self._weights[row] += (1.0, c)
            self._plug_b[x] += b
            self._plug_b[y] -= b
        self.tested[x] += 1
        self.control[y] += 1
        self.n += 1
        # every S's wealth, a mixture, rises by at most its largest bet's best case: until that
        # can reach 1/level the least stays below it and need not be computed (nor the bet move)
        self._rise += max(self._top, math.log1p(lam * (self._tol + 1)))
        if self.level is None or self._good + self._rise >= math.log(1 / self.level) - GATE_MARGIN:
            self._good, self._worst = self._least_good()
            self._rise = 0.0

    def _bet_toward(self, x: int, y: int, p: np.ndarray) -> None:
        """With `toward`: BAD's bet of the size that grows fastest if the commit looks like it."""
        assert self._toward is not None
        s = self._toward > p
        if not 0 < s.sum() < self.k:
            return
        qs, ps = float(self._toward[s].sum()), float(p[s].sum())
        gap = qs - ps - self.eta
        total, squares = self._toward_z
        mean = total / self.n if self.n else 0.0
        var = (squares - self.n * mean * mean + PRIOR_PAIRS * (qs * (1 - qs) + ps * (1 - ps))) / (self.n + PRIOR_PAIRS)
        lam = min(max(gap / (gap * gap + var), 0.0), 0.8 / (1 + self.eta))
        z = float(s[x]) - float(s[y])
        self._bad_plug += math.log1p(lam * (z - self.eta))
        self._toward_z = [total + z, squares + z * z]

    def _least_good(self) -> tuple[float, float]:
        """min over S of the GOOD wealth's log: every S of the WHOLE_NODES categories in most
        pairs that disagree (exact when no other category is in one), each other category on
        the side that costs more given them, plus a bound on the cut among those others (so
        never above the least); remembers the least wealthy set's Σz² (or a bound on it) for
        the next plug-in bet."""
        used = len(self._edge)
        ends, weights = self._ends[:used], self._weights[:used]
        degree = np.bincount(ends.ravel(), np.repeat(weights[:, 0], 2), minlength=self.k)
        nodes = np.flatnonzero(degree > 0)
        nodes = nodes[np.argsort(-degree[nodes], kind="stable")]
        at = np.zeros(self.k, int)
        at[nodes] = np.arange(nodes.size)
        count, plug = np.zeros((2, nodes.size, nodes.size))
        for w, out in ((weights[:, 0], count), (weights[:, 1], plug)):
            out[at[ends[:, 0]], at[ends[:, 1]]] = w
            out[at[ends[:, 1]], at[ends[:, 0]]] = w
        h = min(nodes.size, WHOLE_NODES)
        sets = _sets(h)
        f0, b, c = self._grid
        # columns: the grid's bet sizes, then the plug-in. Per category the weight of its sum
        # part (Σz = (tested − control)(S)), per pair of categories the cut's (all ≤ 0)
        sums = np.concatenate([np.outer((self.tested - self.control)[nodes], b), self._plug_b[nodes][:, None]], 1)
        heavy_cut = ((sets @ count[:h, :h]) * (1 - sets)).sum(-1)  # Σz² of each S of the heavy ones
        plug_cut = ((sets @ plug[:h, :h]) * (1 - sets)).sum(-1)
        value = np.append(self.n * f0, self._plug0) + sets @ sums[:h]
        value += np.concatenate([np.outer(heavy_cut, c), plug_cut[:, None]], 1)
        squares = heavy_cut
        if nodes.size > h:  # the others: in (its sum part and its cut to the heavy ones left out) or out
            linked, plug_linked = sets @ count[:h, h:], sets @ plug[:h, h:]  # (2^h, others)
            all_linked, all_plug = count[:h, h:].sum(0), plug[:h, h:].sum(0)
            grid_in = sums[h:, :-1].T[None] + c[None, :, None] * (all_linked - linked)[:, None, :]
            value[:, :-1] += np.minimum(grid_in, c[None, :, None] * linked[:, None, :]).sum(-1)
            value[:, -1] += np.minimum(sums[h:, -1][None, :] + all_plug - plug_linked, plug_linked).sum(-1)
            among = cut_bound(count[h:, h:])
            value[:, :-1] += c[None, :] * among
            value[:, -1] -= cut_bound(-plug[h:, h:])
            squares = squares + all_linked.sum() + among
        grid = logsumexp_last(value[:, :-1]) - math.log(len(GOOD_GRID))
        total = np.logaddexp(math.log(GOOD_PLUG_IN_WEIGHT) + value[:, -1], math.log1p(-GOOD_PLUG_IN_WEIGHT) + grid)
        least = int(total.argmin())
        return float(total[least]), float(squares[least])

    @property
    def log_e_bad(self) -> float:
        """log of the BAD wealth (the mixture over bet sizes; with `toward`, half on its bet)."""
        grid = float(np.logaddexp.reduce(self._bad) - math.log(len(self._bad)))
        if self._toward is None:
            return grid
        return float(np.logaddexp(grid, self._bad_plug) - math.log(2))

    @property
    def log_e_good(self) -> float:
        """log of the GOOD wealth: the least over the sets S (each a mixture over bet sizes),
        computed now when the gate skipped it (without moving the plug-in's next bet)."""
        return self._good if self._rise == 0 else self._least_good()[0]

    def evidence(self, *, alpha: float, beta: float, max_runs: int, pairing: str = "") -> Evidence:
        """The verdict so far: BAD at E_bad ≥ 1/α, GOOD at E_good ≥ 1/β, INCONCLUSIVE at the budget."""
        check_levels(alpha, beta)
        bad = self.log_e_bad
        # GOOD cannot have been reached while the gate skips; a decision or the budget reports it
        final = bad >= math.log(1 / alpha) or self.n >= max_runs or self.level != beta
        return decide(
            self.n,
            bad,
            self.log_e_good if final else self._good,
            alpha,
            beta,
            max_runs,
            good_what=f"TV < {self.tolerance:g}, against {self.n} control runs{pairing}",
            bad_what=f"TV > {self.eta:g}, against {self.n} control runs{pairing}"
            if self.eta > 0
            else f"against {self.n} control runs{pairing}",
        )


def paired_evidence(
    tested: Sequence[int],
    control: Sequence[int],
    k: int,
    *,
    alpha: float,
    beta: float,
    tolerance: float,
    eta: float,
    max_runs: int,
    toward: Sequence[float] | None = None,
    hidden: float = 0.0,
) -> Evidence:
    """The test over whole sequences (for tests and benches): run i of `tested` paired with run i
    of `control` (both drawn from one seed: the pipeline's pairing); stops at the first
    decision, like the pipeline (whose GOOD least is computed only when it could reach 1/beta)."""
    test = PairedTest(k, tolerance, eta, toward, hidden, beta)
    ev = test.evidence(alpha=alpha, beta=beta, max_runs=max_runs)
    for x, y in zip(tested, control):
        test.add(x, y)
        ev = test.evidence(alpha=alpha, beta=beta, max_runs=max_runs)
        if ev.decision is not None:
            break
    return ev
