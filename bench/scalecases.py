"""The `bench_stats.py --scale` cases: references of K = 8 … 4,096 outcomes (issue 53), whole
bisects through run_bisect (bench/simbisect.py) with what they cost the statistics, and single
verdicts at high error levels where errors are frequent enough to count.

The reference is next-token-like: Zipf(1.3) over ranks, its HEAD most probable tokens holding
HEAD_MASS of it (a peaked distribution after temperature), the rest Zipf(1.3) over the tail.
A defect moves TV 0.15 in the GOOD test's hardest direction (bench/simulate.hardest_tv_shift).
Kept apart from the runner so the Dask workers import only this and the simulators.
"""

from __future__ import annotations

import time
import tracemalloc
from typing import Any

import numpy as np

from bench import simbisect as sb
from bench import simulate as sim
from bench.statcases import EQUIVALENT

KS = (8, 40, 256, 4096)
HEAD, HEAD_MASS = 16, 0.97
LINE = 64  # commits a history has
DEFECT_TV = 0.15
CONTROL_RUNS = 2000  # the control's first sample: its second half bounds what pooling hides


def lm_like(k: int) -> dict[str, float]:
    """The reference of k outcomes (named t0, t1, … most probable first)."""
    w = 1.0 / np.arange(1, k + 1) ** 1.3
    head = min(HEAD, k)
    p = np.concatenate([w[:head] / w[:head].sum() * (HEAD_MASS if k > head else 1.0), w[head:]])
    if k > head:
        p[head:] *= (1 - HEAD_MASS) / w[head:].sum()
    return {f"t{i}": float(x) for i, x in enumerate(p)}


def scale_history(k: int, rep: int, seed: int = 5300) -> tuple[sb.History, list[int]]:
    """One history of LINE commits: the reference, then the defect from a random commit that can
    change the binary on (EQUIVALENT of them cannot, as on llama.cpp)."""
    rng = np.random.default_rng([seed, k, rep])
    p = list(lm_like(k).values())
    inner = np.arange(1, LINE - 1)
    equivalent = frozenset(int(i) for i in inner[rng.random(inner.size) < EQUIVALENT])
    where = int(rng.choice([i for i in range(1, LINE) if i not in equivalent]))
    changes = {0: sb.joint(p), where: sb.joint(sim.hardest_tv_shift(p, DEFECT_TV))}
    names = list(lm_like(k))
    return (
        sb.History(
            LINE, changes, salt=seed * 1_000_003 + 7919 * k + rep, equivalent=equivalent, tokens=sb.tokens_for(names)
        ),
        [where],
    )


MAX_RUNS = 10_000  # GOOD at tolerance − hidden takes more than the default 4,000 past K = 40


def config(k: int, mode: str) -> Any:
    """The config of K outcomes: the exact reference, or a control sample at the good end."""
    if mode == "exact":
        return sb.sim_config(MAX_RUNS, probs=lm_like(k))
    return sb.sim_config(MAX_RUNS, probs=lm_like(k), control=CONTROL_RUNS)


def scale_task(k: int, mode: str, reps: list[int], memory: bool) -> list[dict[str, Any]]:
    """Bisects of the K-outcome histories: what each named, its runs and builds, the CPU seconds
    of the whole simulated bisect (the statistics and the bisect's own logic: nothing is built
    or run), and with `memory` the peak of what it allocated (tracemalloc, a second pass)."""
    cfg = config(k, mode)
    out = []
    for rep in reps:
        hist, where = scale_history(k, rep)
        t0 = time.process_time()
        report = sb.run_report(cfg, hist, "auto", "llama")
        cpu = time.process_time() - t0
        row = {
            "k": k,
            "mode": mode,
            "rep": rep,
            "where": where,
            "named": hist.shas.index(report.first_bad) if report.first_bad else None,
            "status": report.status.value,
            "confidence": report.confidence,
            "runs": report.runs,
            "control_runs": report.control_runs or 0,
            "builds": report.builds,
            "cpu": cpu,
            "false_bad": false_bad(report, hist, where),
        }
        if memory:
            tracemalloc.start()
            sb.run_report(cfg, hist, "auto", "llama")
            row["peak_mb"] = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
        out.append(row)
    return out


def false_bad(report: Any, hist: sb.History, where: list[int]) -> tuple[int, int]:
    """(BAD verdicts, GOOD or BAD verdicts) of tests against the reference at commits whose
    distribution is the reference's (before the defect): the bisect's false alarms."""
    tested = [
        v
        for v in report.verdicts
        if v.arm == "main" and v.verdict.value in ("good", "bad") and hist.shas.index(v.sha) < where[0]
    ]
    return sum(v.verdict.value == "bad" for v in tested), len(tested)


def pooled(ref: Any, q: dict[str, float], condition: float | None) -> np.ndarray:
    """An outcome distribution as the reference's categories see it (with P(condition))."""
    out = np.zeros(len(ref.names))
    for name, v in q.items():
        out[ref.index(name)] += v
    if condition is not None:
        out *= condition
        out[-1] = 1 - condition
    return out


def worst_inside(probs: dict[str, float], ref: Any, tv: float) -> dict[str, float]:
    """A q at total variation `tv` from the reference that hides as much of it inside the tail
    buckets as they allow (each bucket's mass on its most probable outcome), the rest moved
    between the two most probable outcomes, in plain sight: GOOD's hardest case under pooling."""
    q = dict(probs)
    inside = 0.0
    for bucket in ref.pooling.buckets if ref.pooling is not None else ():
        mass = sum(probs[o] for o in bucket)
        inside += mass - probs[bucket[0]]
        q.update(dict.fromkeys(bucket, 0.0))
        q[bucket[0]] = mass
    names = list(probs)
    q[names[0]] += tv - inside
    q[names[1]] -= tv - inside
    return q


def verdict_task_scale(k: int, mode: str, case: str, paths: int, seed: int) -> dict[str, Any]:
    """Single verdicts at alpha = beta = 0.05 (errors frequent enough to count): `false-bad` at a
    q exactly eta away (in plain sight), `false-good` at a q exactly the tolerance away with as
    much of it hidden in the buckets as they allow. Exact: the vectorised simulation; control:
    the paired test on pairs tied seed for seed, half of them reshuffled."""
    from bisectbot.statistics import control_sample
    from bisectbot.statistics import stats as S

    probs = lm_like(k)
    ref = S.Reference.from_probs(probs, sb.CONDITION_29975 if mode == "exact" else None, max_categories=32)
    cond = ref.condition_prob
    if case == "false-bad":
        p = list(probs.values())
        q = dict(zip(probs, sim.hardest_tv_shift(p, 0.03)))
    else:
        q = worst_inside(probs, ref, 0.1)
    target = pooled(ref, q, cond)
    rng = np.random.default_rng([seed, k])
    budget = 3000
    if mode == "exact":
        o = sim.simulate_generic(
            rng, ref, target, alpha=0.05, beta=0.05, tolerance=0.1, eta=0.03, max_runs=budget, paths=paths, chunk=10
        )
        wrong = int((o.decision == (sim.BAD if case == "false-bad" else sim.GOOD)).sum())
        return {"k": k, "mode": mode, "case": case, "paths": paths, "wrong": wrong}
    p_cat = ref.p
    wrong = 0
    for _ in range(paths):
        u = rng.random(budget)
        fresh = np.where(rng.random(budget) < 0.5, rng.random(budget), u)
        tested = np.minimum(np.searchsorted(np.cumsum(target), fresh, side="right"), target.size - 1)
        control = np.minimum(np.searchsorted(np.cumsum(p_cat), u, side="right"), p_cat.size - 1)
        ev = control_sample.paired_evidence(
            tested.tolist(), control.tolist(), target.size, alpha=0.05, beta=0.05, tolerance=0.1, eta=0.03,
            max_runs=budget, hidden=ref.hidden,
        )  # fmt: skip
        wrong += ev.decision is not None and ev.decision.value == ("bad" if case == "false-bad" else "good")
    return {"k": k, "mode": mode, "case": case, "paths": paths, "wrong": wrong}


def scale_tables(bisects: list[dict[str, Any]], verdicts: list[dict[str, Any]]) -> str:
    """The --scale tables: whole bisects per K and reference (rates with counts and one-sided 95%
    Clopper–Pearson bounds, CPU and peak memory and their ratio to K = 8 side by side), then the
    single verdicts' error rates against their stated level."""
    from bench.statcases import rate_down, rate_up, table

    rows = []
    for mode in ("exact", "control"):
        base: dict[str, float] = {}
        for k in KS:
            rs = [r for r in bisects if r["k"] == k and r["mode"] == mode]
            if not rs:
                continue
            n = len(rs)
            first = sum(r["named"] == r["where"][0] for r in rs)
            wrong = sum(r["named"] is not None and r["named"] != r["where"][0] and r["confidence"] >= 0.99 for r in rs)
            fb, tested = sum(r["false_bad"][0] for r in rs), sum(r["false_bad"][1] for r in rs)
            cpu = float(np.mean([r["cpu"] for r in rs]))
            per_run = float(np.mean([r["cpu"] / max(1, r["runs"] + r["control_runs"]) for r in rs])) * 1e3
            mem = [r["peak_mb"] for r in rs if "peak_mb" in r]
            peak = float(np.mean(mem)) if mem else float("nan")
            base.setdefault("cpu", cpu)
            base.setdefault("run", per_run)
            base.setdefault("mb", peak)
            runs = np.mean([r["runs"] for r in rs])
            control = np.mean([r["control_runs"] for r in rs])
            rows.append(
                (
                    f"{k:,}",
                    mode,
                    rate_down(first, n),
                    rate_up(wrong, n),
                    rate_up(fb, tested) if tested else "-",
                    f"{runs:,.0f}" + (f" + {control:,.0f}" if mode == "control" else ""),
                    f"{cpu:.1f} ({cpu / base['cpu']:.2f}×)",
                    f"{per_run:.2f} ({per_run / base['run']:.2f}×)",
                    f"{peak:.1f} ({peak / base['mb']:.2f}×)",
                )
            )
    out = table(
        (
            "K",
            "reference",
            "first departure named",
            "wrong, confidence ≥ 0.99",
            "false BAD at commits like the reference",
            "mean runs",
            "CPU s a bisect (× K = 8)",
            "CPU ms a run (× K = 8)",
            "peak MB (× K = 8)",
        ),
        rows,
    )
    vrows = [
        (f"{v['k']:,}", v["mode"], v["case"], rate_up(v["wrong"], v["paths"]), "0.05")
        for v in sorted(verdicts, key=lambda v: (v["mode"], v["case"], v["k"]))
    ]
    return out + "\n\n" + table(("K", "reference", "case", "rate (paths; 95% bound)", "stated"), vrows)
