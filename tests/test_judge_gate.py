"""Skipping the test on runs that cannot decide it (statistics.sequential.JudgeGate): the answer must be
exactly the one computed after every run — the same decision at the same run with the same
e-values — on sequences from the reference, from commits that depart from it, and with stray
outcomes; and the bound it rests on must hold run by run."""

from __future__ import annotations

import math

import numpy as np
import pytest

from bisectbot.statistics import sequential, tvnull
from bisectbot.statistics.stats import Reference

LEVELS = dict(alpha=5e-4, beta=5e-4, tolerance=0.1)
COND = Reference.from_probs({"d": 0.3680765053, "e": 0.2450280946, "g": 0.3868954001}, condition_prob=0.7074244529)
PLAIN = Reference.from_probs({"a": 0.5, "b": 0.3, "c": 0.2})


def sources(ref: Reference) -> list[np.ndarray]:
    """The reference itself, a subtle and a gross departure, and a commit with stray outcomes."""
    p = ref.p.copy()
    k = len(p)
    other = ref.names.index("<other>")
    subtle = p.copy()
    subtle[0] += 0.06
    subtle[1] -= 0.06
    gross = np.zeros(k)
    gross[0] = 1.0
    stray = p * 0.97
    stray[other] += 0.03
    return [p / p.sum(), subtle / subtle.sum(), gross, stray / stray.sum()]


def every_run(seq: np.ndarray, ref: Reference, eta: float, budget: int, toward=None) -> tuple[int, object]:
    counts = np.zeros(len(ref.p), int)
    ev = None
    for i, x in enumerate(seq, 1):
        counts[x] += 1
        ev = sequential.test_against_reference(counts, ref, max_runs=budget, eta=eta, toward=toward, **LEVELS)
        if ev.decision is not None:
            return i, ev
    return len(seq), ev


def gated(seq: np.ndarray, ref: Reference, eta: float, budget: int, toward=None) -> tuple[int, object, int]:
    gate = sequential.JudgeGate(ref, eta=eta, budget=budget, **LEVELS)
    counts = np.zeros(len(ref.p), int)
    ev, computed = None, 0
    for i, x in enumerate(seq, 1):
        counts[x] += 1
        if not gate.needed(int(x), int(counts.sum())):
            continue
        ev = sequential.test_against_reference(counts, ref, max_runs=budget, eta=eta, toward=toward, **LEVELS)
        computed += 1
        gate.judged(counts, ev)
        if ev.decision is not None:
            return i, ev, computed
    if gate.skipped:
        ev = sequential.test_against_reference(counts, ref, max_runs=budget, eta=eta, toward=toward, **LEVELS)
        computed += 1
    return len(seq), ev, computed


@pytest.mark.parametrize("ref", [COND, PLAIN], ids=["condition", "plain"])
@pytest.mark.parametrize("eta", [0.0, 0.03])
def test_the_gated_test_answers_exactly_as_the_test_after_every_run(ref: Reference, eta: float) -> None:
    rng = np.random.default_rng(11)
    saved = []
    for q in sources(ref):
        for rep in range(3):
            budget = 1500
            seq = rng.choice(len(q), size=budget, p=q)
            toward = q.tolist() if rep == 2 and eta > 0 and q[0] < 1 else None  # a broken end's q̂
            i, full = every_run(seq, ref, eta, budget, toward)
            j, fast, computed = gated(seq, ref, eta, budget, toward)
            assert (i, full) == (j, fast), (q, rep)
            saved.append(1 - computed / i)
    # it is worth having: on a commit like the reference most runs are not computed
    assert max(saved) > 0.5, saved


def test_the_bounds_hold_run_by_run() -> None:
    """From any counts, k more runs raise log E_bad and log E_good by no more than the summed
    headroom of those runs (the GOOD parts' minimum by no more than the largest part's sum)."""
    rng = np.random.default_rng(5)
    for ref, eta in ((COND, 0.03), (COND, 0.0), (PLAIN, 0.03), (PLAIN, 0.0)):
        for q in sources(ref):
            seq = rng.choice(len(q), size=600, p=q)
            counts = np.bincount(seq[:300], minlength=len(q))
            first = sequential.test_against_reference(counts, ref, max_runs=10**6, eta=eta, **LEVELS)
            if not math.isfinite(first.log_e_bad):
                continue
            room = sequential.headroom(counts, ref, tolerance=0.1, eta=eta)
            bad, good = 0.0, [0.0] * len(room.good)
            for x in seq[300:]:
                counts[x] += 1
                bad += room.bad[x]
                good = [g + r[x] for g, r in zip(good, room.good)]
                now = sequential.test_against_reference(counts, ref, max_runs=10**6, eta=eta, **LEVELS)
                assert now.log_e_bad <= first.log_e_bad + bad + 1e-9
                assert now.log_e_good <= first.log_e_good + max(good) + 1e-9


def test_where_the_relaxation_is_exact_its_bound_is_the_null_maximiser() -> None:
    """Three possible outcomes (all kept whole, tvnull.HEAVY) and OTHER: the one-run bound r̃ is
    then a distribution of the null (TV ≥ 0.1) whose likelihood is the null maximum: the q* the
    bound used before the relaxation."""
    rng = np.random.default_rng(2)
    p = np.array([0.5, 0.3, 0.2, 0.0])
    for _ in range(200):
        n = rng.integers(0, 30, size=4).astype(float)
        n[rng.integers(0, 4)] = 0  # some category unseen
        if n.sum() == 0:
            continue
        q = np.exp(-tvnull.null_rises(n, p, 0.1))
        assert q.min() >= 0 and q.sum() == pytest.approx(1.0)
        assert 0.5 * np.abs(q - p).sum() >= 0.1 - 1e-12
        with np.errstate(divide="ignore"):
            ll = float(np.sum(np.where(n > 0, n * np.log(np.where(q > 0, q, 1.0)), 0.0)))
        assert ll == pytest.approx(float(sequential.log_sup_tv_null_many(n, p, 0.1)), abs=1e-9)
