"""The GOOD test's null maximum (pure): the best log-likelihood any q with TV(q, p) ≥ ε gives the
counts, bounded from above in O(K log K) instead of a maximum over the 2^K subsets S.

On {q(S) ≥ p(S) + ε} the best is MLE − N·kl⁺(r(S) ‖ p(S) + ε) (r = n/N, kl⁺ the binary KL, 0 once
r(S) reaches p(S) + ε). Relaxing S to weights w ∈ [0, 1]^K makes kl⁺(r·w ‖ p·w + ε) jointly convex;
its minimum lies on the chain of prefix sums in the order r_k/p_k, along which it is convex: the
best vertex, then Newton on its edges. The HEAVY most probable outcomes stay whole (2^HEAVY chains,
exact when K ≤ HEAVY). An upper bound on the true maximum, so the GOOD e-value only gets smaller;
`null_rises` is its one-run bound for the JudgeGate. docs/how-it-decides.md derives both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from itertools import product
from typing import Sequence

import numpy as np
from scipy.special import xlogy

# Outcomes (the most probable under p) kept whole, in or out, in every relaxation: 2^HEAVY chains.
# Measured at N = 1000, q = p: the gap to the exact maximum is 0.67 nats on #29975 with none, 0.07
# with two, 0 with three; on random references of K = 5…8 outcomes ≤ 0.01 on average with three.
HEAVY = 3
NEWTON_STEPS = 60  # at most; a convex smooth edge converges in ~5
BLOCK = 400_000  # array elements per pass, so bench/simulate.py's arrays stay within tens of MB
FEW = 4  # edges refined in Python floats rather than as arrays (a test after one run: 1 or 2)
SMALL = 16  # one row of at most this many outcomes: all in Python floats (~10× fewer µs than arrays)


def _kl(a: np.ndarray, c: np.ndarray) -> np.ndarray:
    """kl⁺(a ‖ c): the binary KL, 0 where a ≥ c, inf where c is 1 and a is not."""
    c = np.minimum(c, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = xlogy(a, a / c) + xlogy(1 - a, (1 - a) / (1 - c))
    return np.where(a >= c, 0.0, out)


def _slope(a: np.ndarray, c: np.ndarray, da: np.ndarray, dc: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First and second derivative of kl(a ‖ c) along (da, dc), where 0 ≤ a < c ≤ 1."""
    with np.errstate(divide="ignore", invalid="ignore"):
        ga = np.log(a * (1 - c)) - np.log(c * (1 - a))
        gc = (c - a) / (c * (1 - c))
        first = np.where(da != 0, da * ga, 0.0) + dc * gc
        second = (
            np.where(da != 0, da * da * (1 / a + 1 / (1 - a)), 0.0)
            - 2 * da * dc * (1 / c + 1 / (1 - c))
            + dc * dc * (a / (c * c) + (1 - a) / ((1 - c) * (1 - c)))
        )
    return first, second


def _first(a: np.ndarray, c: np.ndarray, da: np.ndarray, dc: np.ndarray) -> np.ndarray:
    """The slope of kl(a ‖ c) along (da, dc), where 0 ≤ a < c ≤ 1 (−inf at a = 0 going up)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(da != 0, da * (np.log(a * (1 - c)) - np.log(c * (1 - a))), 0.0) + dc * (c - a) / (c * (1 - c))


@lru_cache(maxsize=64)
def _kept_whole(p: bytes) -> tuple[np.ndarray, np.ndarray]:
    """The outcomes kept whole, the HEAVY most probable with p > 0, and their in/out combinations
    (2^h, h). Fixed by p alone, so the relaxed null is one set whatever the counts (the
    JudgeGate's bound needs that)."""
    pa = np.frombuffer(p)
    heavy = np.argsort(-pa, kind="stable")[: min(HEAVY, int((pa > 0).sum()))]
    return heavy, np.array(list(product((0.0, 1.0), repeat=heavy.size))).reshape(-1, heavy.size)


@dataclass(frozen=True)
class _Least:
    """The relaxation's minimum for each row of frequencies: its value, the combination of the
    heavy outcomes it takes, where on that chain (vertex index + fraction of the next edge), and
    the chain's order of the outcomes."""

    value: np.ndarray  # (L,)
    combo: np.ndarray  # (L,) rows of `_kept_whole`'s combinations
    position: np.ndarray  # (L,)
    order: np.ndarray  # (L, K)


def _least(r: np.ndarray, p: np.ndarray, eps: float) -> _Least:
    """min over the relaxed null of kl⁺(r·w ‖ p·w + ε), for rows r (L, K) of frequencies: per
    combination of the heavy outcomes, the chain of the others in the order r_k/p_k (those with
    p_k = 0 first, the kept-whole and empty ones last: zero-length edges only at the end)."""
    big, k = r.shape
    heavy, every = _kept_whole(p.tobytes())
    if big == 1 and k <= SMALL:
        return _least_one(r[0].tolist(), p.tolist(), eps, heavy.tolist(), every.tolist())
    free = np.ones(k, bool)
    free[heavy] = False
    with np.errstate(divide="ignore", invalid="ignore"):
        key = np.where(p > 0, r / np.where(p > 0, p, 1.0), np.where(r > 0, np.inf, -np.inf))
    key = np.where(free, key, -np.inf)
    order = np.argsort(-key, axis=-1, kind="stable")
    edges = int((key > -np.inf).sum(-1).max())  # the rest are zero-length: no vertex of their own
    zero = np.zeros((big, 1))
    ca = np.concatenate([zero, np.cumsum(np.take_along_axis(np.where(free, r, 0.0), order[:, :edges], -1), -1)], -1)
    cb = np.concatenate([zero, np.cumsum(np.where(free, p, 0.0)[order[:, :edges]], -1)], -1)
    keep = np.flatnonzero(every @ p[heavy] + eps <= 1.0)  # q(S) ≥ p(S) + ε > 1: empty
    a0 = r[:, heavy] @ every[keep].T  # (L, C): the heavy outcomes' share in each combination
    value, position = _chains(ca, cb, a0, every[keep] @ p[heavy], eps)
    best = value.argmin(-1)
    rows = np.arange(big)
    return _Least(value[rows, best], keep[best], position[rows, best], order)


def _least_one(r: list[float], p: list[float], eps: float, heavy: list[int], every: list[list[float]]) -> _Least:
    """`_least` for one row of few outcomes, in Python floats: the same chains, vertices and
    edges (tests/test_tvnull.py holds the two to the same answers)."""
    k = len(r)
    whole = set(heavy)
    key = [
        -math.inf if i in whole else (r[i] / p[i] if p[i] > 0 else (math.inf if r[i] > 0 else -math.inf))
        for i in range(k)
    ]
    order = sorted(range(k), key=lambda i: -key[i])
    real = [i for i in order if key[i] > -math.inf]
    lim = 1.0 - eps
    chains = []
    for j, bits in enumerate(every):
        a = sum(r[h] * x for h, x in zip(heavy, bits))
        b = sum(p[h] * x for h, x in zip(heavy, bits))
        if b + eps > 1.0:
            continue
        points = [(a, b, 0.0)]
        for step, i in enumerate(real):
            a_next, b_next = a + r[i], b + p[i]
            if b_next > lim + 1e-15:
                s = (lim - b) / (b_next - b) if b_next > b else 0.0
                points.append((a + s * (a_next - a), lim, step + s))
                break
            a, b = a_next, b_next
            points.append((a, b, step + 1.0))
        values = [_kl_one(x, y + eps) for x, y, _ in points]
        chains.append((j, points, values))
    top = min(min(values) for _, _, values in chains)
    value, combo, position = math.inf, 0, 0.0
    for j, points, values in chains:
        best = values.index(min(values))
        here, at = values[best], points[best][2]
        a, b, _ = points[best]
        if 0 < here < math.inf:
            for nb in (best + 1, best - 1):
                if not 0 <= nb < len(points):
                    continue
                da, dc = points[nb][0] - a, points[nb][1] - b
                g0 = _first_one(a, b + eps, da, dc)
                g1 = _first_one(a + da, b + dc + eps, da, dc)
                f1 = values[nb]
                cross = min(max((here - f1 + g1) / (g1 - g0), 0.0), 1.0) if math.isfinite(g1) and g1 > g0 else 1.0
                if g0 >= 0 or here + cross * g0 >= top:
                    continue
                s = _newton_one(a, b + eps, da, dc)
                edge = _kl_one(a + s * da, b + eps + s * dc)
                if edge < here:
                    here, at = edge, at + s * (points[nb][2] - at)
                break
        if here < value:
            value, combo, position = here, j, at
    return _Least(np.array([value]), np.array([combo]), np.array([position]), np.array([order]))


def _kl_one(a: float, c: float) -> float:
    """`_kl` of two floats."""
    if a >= c:
        return 0.0
    if c >= 1.0:
        return math.inf
    out = (1 - a) * math.log((1 - a) / (1 - c))
    return out + a * math.log(a / c) if a > 0 else out


def _first_one(a: float, c: float, da: float, dc: float) -> float:
    """`_first` of floats (inf past c = 1, −inf going up from a = 0)."""
    if c >= 1.0:
        return math.inf
    if a <= 0.0:
        return -math.inf if da > 0 else dc * (c - a) / (c * (1 - c))
    return (da * (math.log(a * (1 - c)) - math.log(c * (1 - a))) if da else 0.0) + dc * (c - a) / (c * (1 - c))


def _chains(
    ca: np.ndarray, cb: np.ndarray, a0: np.ndarray, b0: np.ndarray, eps: float
) -> tuple[np.ndarray, np.ndarray]:
    """The least kl⁺(a ‖ b + ε) on the chain of each row (vertices (ca, cb), (L, E + 1), from 0)
    offset by each combination's (a0, b0) ((L, C), (C,)), cut at b = 1 − ε, and where on it (a
    fractional vertex index), (L, C) each. Convex along the chain, its vertices' values fall
    then rise: a binary search finds the best in O(log E) of them; then its two edges (`_edges`)."""
    big, nv = ca.shape
    combos = b0.size
    lim = 1.0 - eps
    rows = np.repeat(np.arange(big), combos)
    a_off, b_off = a0.ravel(), np.tile(b0, big)
    valid = np.stack([(cb <= lim - b + 1e-15).sum(-1) for b in b0], -1).ravel()  # vertices within the cut (≥ 1)
    cut = valid < nv  # then the edge into vertex `valid` crosses b = 1 − ε: a last point there
    lo_at, hi_at = np.maximum(valid - 1, 0), np.minimum(valid, nv - 1)
    b_lo, b_hi = cb[rows, lo_at] + b_off, cb[rows, hi_at] + b_off
    with np.errstate(divide="ignore", invalid="ignore"):
        s_cut = np.clip(np.where(cut & (b_hi > b_lo), (lim - b_lo) / (b_hi - b_lo), 0.0), 0.0, 1.0)
    a_cut = ca[rows, lo_at] + s_cut * (ca[rows, hi_at] - ca[rows, lo_at]) + a_off
    last = valid - 1 + cut  # the chain's points: its vertices 0 … valid − 1, then the cut

    flat_a, flat_b, base = ca.ravel(), cb.ravel(), rows * nv

    def point(j: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        j = np.clip(j, 0, last)
        at_cut = cut & (j == valid)
        jj = np.minimum(j, valid - 1)
        a = np.where(at_cut, a_cut, flat_a.take(base + jj) + a_off)
        b = np.where(at_cut, lim, flat_b.take(base + jj) + b_off)
        return a, b, np.where(at_cut, valid - 1 + s_cut, jj)

    lo, hi = np.zeros_like(last), last.copy()
    for _ in range(int(np.ceil(np.log2(nv + 1))) + 1):
        mid = (lo + hi) // 2
        here, nxt = point(mid), point(mid + 1)
        down = (_kl(nxt[0], nxt[1] + eps) < _kl(here[0], here[1] + eps)) & (lo < hi)
        lo, hi = np.where(down, mid + 1, lo), np.where(down | (lo >= hi), hi, mid)
    best = lo
    a, b, pos = point(best)
    ends = [point(best + 1), point(best - 1)]  # toward the next point, and the previous one
    out, pos = _edges(a, b + eps, pos, ends, eps, combos)
    return out.reshape(big, combos), pos.reshape(big, combos)


def _edges(
    a: np.ndarray, c: np.ndarray, pos: np.ndarray, ends: Sequence[tuple[np.ndarray, ...]], eps: float, combos: int
) -> tuple[np.ndarray, np.ndarray]:
    """From each chain's best point (a, c = b + ε, pos), the least on its two edges (to `ends`),
    where the convexity bound says an edge could beat its row's best point (`combos` chains
    a row)."""
    out = _kl(a, c)
    row_best = out.reshape(-1, combos).min(-1).repeat(combos)
    live = (out > 0) & np.isfinite(out)  # a chain reaching {a ≥ c} has its least, 0, already
    da = np.stack([e[0] for e in ends]) - a
    dc = np.stack([e[1] for e in ends]) + eps - c
    target = np.stack([e[2] for e in ends])
    g0 = _first(np.where(live, a, 0.25), np.where(live, c, 0.5), da, dc)
    g1 = _first(np.where(live, a + da, 0.25), np.where(live, c + dc, 0.5), da, dc)
    f1 = _kl(a + da, c + dc)
    # convex: the edge lies above both end tangents; where they cross bounds its least
    with np.errstate(divide="ignore", invalid="ignore"):
        cross = np.clip((out - f1 + g1) / (g1 - g0), 0.0, 1.0)
        bound = np.where(np.isfinite(g1) & (g1 > g0), out + cross * g0, out + g0)
    search = live & ((da != 0) | (dc != 0)) & (g0 < 0) & (bound < row_best)
    fwd, back = search[0], search[1] & ~search[0]
    go = np.flatnonzero(fwd | back)
    if go.size:
        side = np.where(fwd[go], 0, 1)
        da, dc = da[side, go], dc[side, go]
        if go.size <= FEW:
            s = np.array([_newton_one(*args) for args in zip(a[go], c[go], da, dc)])
        else:
            s = _newton(a[go], c[go], da, dc)
        edge = _kl(a[go] + s * da, c[go] + s * dc)
        better = edge < out[go]
        out[go] = np.where(better, edge, out[go])
        pos[go] = np.where(better, pos[go] + s * (target[side, go] - pos[go]), pos[go])
    return out, pos


def _newton(a: np.ndarray, c: np.ndarray, da: np.ndarray, dc: np.ndarray) -> np.ndarray:
    """The s ∈ (0, 1) where kl(a + s·da ‖ c + s·dc) is least, on edges whose slope at 0 is
    negative and whose far end is no lower (convex: the slope's root in (0, 1)): Newton's steps,
    bisection wherever a step would leave the bracket."""
    lo, hi = np.zeros_like(a), np.ones_like(a)
    x = np.full_like(a, 0.5)
    for _ in range(NEWTON_STEPS):
        first, second = _slope(a + x * da, c + x * dc, da, dc)
        first = np.where(np.isnan(first), np.inf, first)  # at c = 1 (the cut): past the least
        lo, hi = np.where(first < 0, x, lo), np.where(first > 0, x, hi)
        with np.errstate(divide="ignore", invalid="ignore"):
            step = x - first / second
        nxt = np.where((step >= lo) & (step <= hi) & np.isfinite(step), step, 0.5 * (lo + hi))
        done = np.abs(nxt - x).max() < 1e-11  # the value is then within ~1e-20 of the least
        x = nxt
        if done:
            break
    return x


def _newton_one(a: float, c: float, da: float, dc: float) -> float:
    """`_newton` for one edge, in Python floats (a test after one run refines one or two)."""
    lo, hi, x = 0.0, 1.0, 0.5
    for _ in range(NEWTON_STEPS):
        u, v = a + x * da, c + x * dc
        if v >= 1.0 or u <= 0.0:
            first, second = (math.inf, 0.0) if v >= 1.0 else (-math.inf, 0.0)
        else:
            first = (da * (math.log(u * (1 - v)) - math.log(v * (1 - u))) if da else 0.0) + dc * (v - u) / (v * (1 - v))
            second = (
                (da * da * (1 / u + 1 / (1 - u)) if da else 0.0)
                - 2 * da * dc * (1 / v + 1 / (1 - v))
                + dc * dc * (u / (v * v) + (1 - u) / ((1 - v) * (1 - v)))
            )
        if first < 0:
            lo = x
        elif first > 0:
            hi = x
        else:
            return x
        step = x - first / second if second > 0 and math.isfinite(first) else math.nan
        nxt = step if lo <= step <= hi else 0.5 * (lo + hi)
        if abs(nxt - x) < 1e-11:
            return nxt
        x = nxt
    return x


def log_sup_tv_null_many(counts: np.ndarray, p: np.ndarray, eps: float) -> np.ndarray:
    """≥ max_{q: TV(q,p) ≥ ε} Σ n_k log q_k, over count arrays (..., K): MLE − N·(the relaxed
    least kl⁺). Equal to it when at most HEAVY outcomes have p_k > 0."""
    n = np.asarray(counts, dtype=float)
    p = np.asarray(p, dtype=float)
    flat = n.reshape(-1, n.shape[-1])
    out = np.empty(flat.shape[0])
    rows = max(1, BLOCK // ((flat.shape[1] + 1) * 2))
    for start in range(0, flat.shape[0], rows):
        part = flat[start : start + rows]
        tot = part.sum(-1)
        safe = np.where(tot > 0, tot, 1.0)[:, None]
        out[start : start + rows] = xlogy(part, part / safe).sum(-1) - tot * _least(part / safe, p, eps).value
    return out.reshape(n.shape[:-1])


def null_weights(counts: np.ndarray, p: np.ndarray, eps: float) -> tuple[np.ndarray, float]:
    """The relaxed null's maximiser for counts (K,): the weights w* (whole where the relaxation
    is exact) and t* = the maximising q's mass on them (≥ p·w* + ε)."""
    n = np.asarray(counts, dtype=float)
    p = np.asarray(p, dtype=float)
    tot = float(n.sum())
    least = _least((n / tot)[None, :], p, eps)
    w = np.zeros(n.size)
    w[least.order[0]] = np.clip(least.position[0] - np.arange(n.size), 0.0, 1.0)
    heavy, every = _kept_whole(p.tobytes())
    w[heavy] = every[int(least.combo[0])]
    return w, min(max(float(n @ w) / tot, float(p @ w) + eps), 1.0)


def null_rises(counts: np.ndarray, p: np.ndarray, eps: float) -> np.ndarray:
    """−log r̃(x) per category x, for counts (K,): one more run of x raises the GOOD e-value
    (whose denominator is `log_sup_tv_null_many`) by at most this (inf: no bound).

    For fixed weights w the relaxed maximum is φ(w, n) = sup over t ≥ p·w + ε and u, v in the
    simplex of Σ_k n_k [w_k log(t u_k) + (1 − w_k) log((1 − t) v_k) + H(w_k)] (H the binary
    entropy): linear in n for fixed (t, u, v). At the maximiser (w*, t*, u*, v*) of these counts,
    log r̃(x) = w_x log(t u_x) + (1 − w_x) log((1 − t) v_x) + H(w_x); for whole w, the old q*(x)."""
    n = np.asarray(counts, dtype=float)
    if n.sum() <= 0:
        return np.full(n.shape, np.inf)
    w, t = null_weights(n, p, eps)
    inside, outside = float(n @ w), float(n @ (1 - w))
    # u ∝ n·w, v ∝ n·(1 − w); on a side without counts any spread is a maximiser: w's (or 1 − w's)
    u = n * w / inside if inside > 0 else w / max(w.sum(), 1e-300)
    v = n * (1 - w) / outside if outside > 0 else (1 - w) / max((1 - w).sum(), 1e-300)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_r = xlogy(w, t * u) + xlogy(1 - w, (1 - t) * v) - xlogy(w, w) - xlogy(1 - w, 1 - w)
    return np.where(np.isfinite(log_r), -log_r, np.inf)
