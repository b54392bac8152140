"""statistics.tvnull: the GOOD test's relaxed null maximum against the maximum over every subset
(brute force, small K): never below it (the e-value stays valid), equal to it when at most
HEAVY outcomes are possible, close to it elsewhere; its one-run bound for the JudgeGate; the
Python-float path and the array path give one answer."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import xlogy

from bisectbot.statistics import tvnull


def brute_sup(n: np.ndarray, p: np.ndarray, eps: float) -> float:
    """max_{q: TV(q,p) ≥ ε} Σ n_k log q_k over every nonempty proper subset S (TV = max_S q(S) − p(S))."""
    tot, k = float(n.sum()), n.size
    if tot == 0:
        return 0.0
    mle = float(xlogy(n, n / tot).sum())
    best = -math.inf
    for bits in itertools.product((0.0, 1.0), repeat=k):
        m = np.array(bits)
        if not 0 < m.sum() < k or m @ p + eps > 1 + 1e-12:
            continue
        ns = float(n @ m)
        t = min(max(float(m @ p) + eps, ns / tot), 1.0)
        ll = xlogy(ns, t) + xlogy(tot - ns, 1 - t) + mle - xlogy(ns, ns / tot) - xlogy(tot - ns, (tot - ns) / tot)
        best = max(best, float(ll))
    return best


@st.composite
def instances(draw: st.DrawFn, max_k: int = 8) -> tuple[np.ndarray, np.ndarray, float]:
    k = draw(st.integers(2, max_k))
    weights = draw(st.lists(st.integers(0, 20), min_size=k, max_size=k).filter(lambda w: sum(w) > 0))
    p = np.asarray(weights, float) / sum(weights)
    counts = np.asarray(draw(st.lists(st.integers(0, 400), min_size=k, max_size=k)), float)
    eps = draw(st.sampled_from([0.03, 0.1, 0.25]))
    return counts, p, eps


@settings(max_examples=300, deadline=None)
@given(instances())
def test_the_relaxed_null_maximum_is_never_below_the_maximum_over_subsets(case) -> None:
    n, p, eps = case
    assert float(tvnull.log_sup_tv_null_many(n, p, eps)) >= brute_sup(n, p, eps) - 1e-9 * max(1.0, n.sum())


@settings(max_examples=150, deadline=None)
@given(instances(max_k=6))
def test_with_at_most_heavy_possible_outcomes_it_is_the_maximum_itself(case) -> None:
    """Kept whole, HEAVY outcomes are enumerated in and out: the relaxation is exact for them
    (outcomes of probability 0, e.g. OTHER, ride along: the chain takes them whole)."""
    n, p, eps = case
    p = p.copy()
    p[np.argsort(-p)[tvnull.HEAVY :]] = 0.0
    p /= p.sum()
    got, want = float(tvnull.log_sup_tv_null_many(n, p, eps)), brute_sup(n, p, eps)
    assert got == pytest.approx(want, abs=1e-7 * max(1.0, n.sum())) or (want == -math.inf and got == -math.inf)


def test_the_gap_is_small_where_commits_are_like_the_reference() -> None:
    """q = p at N = 1000, random references of 5 to 8 outcomes: the relaxed maximum exceeds the
    true one by little (measured: 0.013 nats on average, 0.3 at most over 200), i.e. the GOOD
    test pays well under a run's worth of evidence for it; without kept-whole outcomes it paid
    ~2 nats on the same instances."""
    rng = np.random.default_rng(1)
    gaps = []
    for _ in range(200):
        k = int(rng.integers(5, 9))
        p = rng.dirichlet(np.full(k, 0.7))
        n = rng.multinomial(1000, p).astype(float)
        gaps.append(float(tvnull.log_sup_tv_null_many(n, p, 0.1)) - brute_sup(n, p, 0.1))
    assert min(gaps) >= -1e-8
    assert np.mean(gaps) < 0.05 and max(gaps) < 1.0, (np.mean(gaps), max(gaps))


@settings(max_examples=200, deadline=None)
@given(instances(max_k=12))
def test_the_python_path_and_the_array_path_agree(case) -> None:
    n, p, eps = case
    one = float(tvnull.log_sup_tv_null_many(n, p, eps))
    rows = tvnull.log_sup_tv_null_many(np.stack([n, n]), p, eps)  # two rows: the array path
    assert rows[0] == pytest.approx(one, rel=1e-9, abs=1e-9) and rows[1] == pytest.approx(one, rel=1e-9, abs=1e-9)


@settings(max_examples=200, deadline=None)
@given(instances(max_k=10))
def test_the_one_run_bound_is_tight_at_the_counts_and_holds_one_run_later(case) -> None:
    """Σ n_x log r̃(x) is the relaxed maximum itself (the linear function touches it at n), r̃
    is a sub-probability (weighted AM–GM), and one more run of any x lowers the maximum by no
    more than −log r̃(x)."""
    n, p, eps = case
    if n.sum() == 0:
        return
    rises = tvnull.null_rises(n, p, eps)
    sup = float(tvnull.log_sup_tv_null_many(n, p, eps))
    seen = n > 0
    assert -(n[seen] * rises[seen]).sum() == pytest.approx(sup, rel=1e-9, abs=1e-8)
    assert np.exp(-rises).sum() <= 1 + 1e-9
    for x in range(n.size):
        more = n.copy()
        more[x] += 1
        assert float(tvnull.log_sup_tv_null_many(more, p, eps)) >= sup - rises[x] - 1e-8


def test_large_references_cost_a_sort_not_a_power_set() -> None:
    """4,096 outcomes (a next-token distribution): one evaluation, finite, and no smaller than the
    best of a few thousand single-outcome and head sets (each a lower bound on the maximum)."""
    rng = np.random.default_rng(3)
    p = 1.0 / np.arange(1, 4097) ** 1.3
    p /= p.sum()
    n = rng.multinomial(3000, p).astype(float)
    sup = float(tvnull.log_sup_tv_null_many(n, p, 0.1))
    assert math.isfinite(sup)
    tot = n.sum()
    mle = float(xlogy(n, n / tot).sum())
    for size in range(1, 4096, 7):  # heads of the distribution: S = the `size` most probable
        ps, ns = float(p[:size].sum()), float(n[:size].sum())
        if ps + 0.1 > 1:
            break
        t = max(ps + 0.1, ns / tot)
        ll = xlogy(ns, t) + xlogy(tot - ns, 1 - t) + mle - xlogy(ns, ns / tot) - xlogy(tot - ns, (tot - ns) / tot)
        assert sup >= float(ll) - 1e-6
