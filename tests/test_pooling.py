"""statistics.pooling and the references that use it: very many outcomes pooled into a few tail
buckets, fixed before any tested run; BAD on the pooled categories is BAD, GOOD leaves room for
what a bucket hides (the bound checked on random distributions, and by simulation at the worst
q the buckets allow); a control sample's bound on the pooled share covers it; a config whose
pooling would leave GOOD no room is refused naming the knob; the reports say it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench import simulate as sim
from bisectbot.statistics import pooling
from bisectbot.statistics import stats as S


def zipf(k: int, s: float = 2.0) -> dict[str, float]:
    w = 1.0 / np.arange(1, k + 1) ** s
    return {f"t{i}": float(x) for i, x in enumerate(w / w.sum())}


def test_few_outcomes_are_never_pooled_and_many_keep_the_head() -> None:
    assert pooling.pool_probs(zipf(32), 32) is None and pooling.pool_probs(zipf(300), None) is None
    pool = pooling.pool_probs(zipf(300), 32)
    assert pool is not None and pool.kept == tuple(f"t{i}" for i in range(28))
    assert len(pool.buckets) == pooling.TAIL_BUCKETS and sum(map(len, pool.buckets)) == 272
    masses = [sum(zipf(300)[o] for o in b) for b in pool.buckets]
    assert max(masses) < 2.5 * min(masses)  # similar mass, the most probable of the tail first
    assert pool.hidden == pytest.approx(sum(masses)) and pool.level == 0.0


def test_a_pooled_reference_maps_each_outcome_to_its_bucket() -> None:
    ref = S.Reference.from_probs(zipf(300), 0.8, max_categories=32)
    assert ref.names[28:] == ("<tail 1>", "<tail 2>", "<tail 3>", "<tail 4>", S.OTHER, S.MISSED)
    assert sum(ref.probs) == pytest.approx(1.0) and ref.hidden > 0
    assert ref.index("t0") == 0 and ref.index("t299") == 31 and ref.index("t28") == 28
    assert (
        ref.index("never listed") == ref.index("<tail 1>") == ref.names.index(S.OTHER)
    )  # a bucket's name is no outcome
    assert ref.index("t5", met_condition=False) == ref.names.index(S.MISSED)
    with pytest.raises(ValueError, match="reserved"):
        S.Reference.from_probs({"<tail 1>": 0.5, "b": 0.5})


@settings(max_examples=200, deadline=None)
@given(st.integers(8, 60), st.integers(2, 7), st.integers(0, 2**31 - 1))
def test_pooling_hides_no_more_than_the_buckets_mass(k: int, max_categories: int, seed: int) -> None:
    """TV(q, p) ≤ TV of the pooled categories + hidden, whatever q (and the pooled TV ≤ TV)."""
    rng = np.random.default_rng(seed)
    probs = dict(zip((f"o{i}" for i in range(k)), rng.dirichlet(np.full(k, 0.5))))
    ref = S.Reference.from_probs(probs, max_categories=max_categories)
    p = np.array(list(probs.values()))
    for q in (rng.dirichlet(np.full(k, 0.5)), p[rng.permutation(k)]):
        pooled_q = np.zeros(len(ref.names))
        for name, v in zip(probs, q):
            pooled_q[ref.index(name)] += v
        pooled = 0.5 * float(np.abs(pooled_q - ref.p).sum())
        tv = 0.5 * float(np.abs(q - p).sum())
        assert pooled <= tv + 1e-12 and tv <= pooled + ref.hidden + 1e-12


@pytest.mark.heavy  # about 40 s: after the default suite (README: Tests)
def test_good_at_the_worst_q_the_buckets_allow_stays_rare() -> None:
    """q at TV exactly the tolerance, as much of it inside the buckets as they allow (each one's
    mass on its most probable outcome) and the rest moved in the head: the pooled test sees
    only part of it, yet GOOD (at tolerance − hidden) stays under beta 0.05 (300 paths: at most
    27, past the 99.9% binomial quantile; measured 0)."""
    probs = zipf(400, 2.0)  # hidden 0.047, of which 0.040 can move inside the buckets
    ref = S.Reference.from_probs(probs, max_categories=16)
    pool = ref.pooling
    assert pool is not None
    inside = sum(sum(probs[o] for o in b) - max(probs[o] for o in b) for b in pool.buckets)
    assert 0.03 < inside < ref.hidden < 0.07
    q = dict(probs)
    for b in pool.buckets:  # each bucket's mass on its first member: moves `inside` unseen
        q[b[0]] = sum(probs[o] for o in b)
        q.update(dict.fromkeys(b[1:], 0.0))
    q["t0"] += 0.1 - inside  # the rest of the tolerance in plain sight
    q["t1"] -= 0.1 - inside
    tv = 0.5 * sum(abs(q[o] - probs[o]) for o in probs)
    assert tv == pytest.approx(0.1)
    pooled = np.zeros(len(ref.names))
    for name, v in q.items():
        pooled[ref.index(name)] += v
    out = sim.simulate_generic(
        np.random.default_rng(71), ref, pooled, alpha=0.05, beta=0.05, tolerance=0.1, max_runs=1500, paths=300, eta=0.03
    )
    assert (out.decision == sim.GOOD).sum() <= 27, out.rate(sim.GOOD)


def test_a_control_samples_bound_on_the_pooled_share_covers_it() -> None:
    """The second half of the first sample bounds the share of everything the first half did
    not keep (Clopper–Pearson at 1 − level): at level 0.05 it falls short in ≤ ~5% of samples."""
    probs = zipf(500, 1.3)
    names, p = list(probs), np.array(list(probs.values()))
    rng = np.random.default_rng(72)
    short = 0
    for _ in range(400):
        outcomes = [names[i] for i in rng.choice(len(names), size=600, p=p)]
        pool = pooling.pool_control(outcomes, 32, 0.05, (S.FAILED, S.MISSED), S.OTHER)
        assert pool is not None and pool.level == 0.05 and "Clopper–Pearson" in pool.how
        kept = set(pool.kept)
        short += pool.hidden < sum(v for o, v in probs.items() if o not in kept)
    assert short <= 0.05 * 400 + 3 * math.sqrt(0.05 * 0.95 * 400), short


def test_a_pooled_control_reference_keeps_its_categories_as_it_grows() -> None:
    outcomes = [f"t{i % 40}" for i in range(200)] + [S.MISSED] * 10
    pool = pooling.pool_control(outcomes, 12, 1e-3, (S.FAILED, S.MISSED), S.OTHER)
    assert pool is not None and len(pool.kept) == 8
    first = S.Reference.from_control({o: outcomes.count(o) for o in set(outcomes)}, pooling=pool)
    assert first.names[-2:] == (S.OTHER, S.MISSED) and len(first.names) == 14
    again = S.Reference.from_control(dict(zip(first.names, (c + 1 for c in first.control or ()))), pooling=pool)
    assert again.names == first.names and sum(again.control or ()) == sum(first.control or ()) + len(first.names)
    assert again.index("t39") == first.index("t39") != first.index(S.OTHER)


def test_pooling_that_leaves_good_no_room_is_refused_naming_the_knob(tmp_path) -> None:
    from bench import simbisect as sb
    from bisectbot.errors import BisectbotError
    from bisectbot.judge.reference import resolve_reference

    many = zipf(2000, 1.05)  # a long tail: pooled, it hides far more than the tolerance
    with pytest.raises(BisectbotError, match=r"statistic\.max_categories: .* pooled into 4 tail buckets.*raise"):
        resolve_reference(sb.sim_config(probs=many))
    resolved = resolve_reference(sb.sim_config(probs=zipf(300)))
    summary = resolved.summary(sb.sim_config(probs=zipf(300)))
    assert summary.pooling is not None and summary.pooling["kept"] == 28
    assert summary.pooling["good_tolerance"] == pytest.approx(0.1 - summary.pooling["hidden"])


def test_the_reports_say_what_pooling_hides() -> None:
    from bench import simbisect as sb
    from bisectbot.judge.reference import resolve_reference
    from bisectbot.records.reports import ReferenceSummary
    from bisectbot.report.markdown import reference_line

    cfg = sb.sim_config(probs=zipf(300))
    summary = resolve_reference(cfg).summary(cfg)
    line = reference_line(summary, markdown=False)
    assert "272 of 300 outcomes pooled into 4 tail buckets" in line and "GOOD tested at tolerance 0.0" in line
    assert "t299" not in line  # the categories the tests count, not 300 numbers
    again = ReferenceSummary.from_json({**summary.__dict__})
    assert again.pooling == summary.pooling
    plain = resolve_reference(sb.sim_config())
    assert plain.summary(sb.sim_config()).pooling is None
