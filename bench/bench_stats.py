"""Benchmark of bisectbot.core.stats on the #29975 reference, side by side with the design's targets.

    python bench/bench_stats.py            # 10,000 sequences per row, 1,000 bisects (minutes)
    python bench/bench_stats.py --quick    # 1,000 sequences, 100 bisects (about a minute)

p = (e 0.3455, g 0.4517, h 0.2028), 82% of runs meet the condition; "runs" count every run.
Per-commit rows use α = β = 5e-4; bisects use stats.step_level(4096) per verdict.
"""

from __future__ import annotations

import argparse
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import simulate as sim  # noqa: E402
from bisectbot.core import stats as S  # noqa: E402

ALPHA = 5e-4
TOL = 0.1
N_COMMITS = 4096
BUILD_COST = 100


def bugs() -> dict[str, np.ndarray]:
    p_cond = list(sim.P_29975.values())
    return {"gross (1,0,0)": sim.joint([1.0, 0.0, 0.0]),
            "TV 0.1 hardest": sim.joint(S.hardest_tv_shift(p_cond, TOL))}


def per_commit(paths: int, seed: int) -> list[tuple[str, ...]]:
    rng = np.random.default_rng(seed)
    ref = sim.ref_29975()
    gross, tv = bugs().values()
    rows = []

    def row(truth: str, verdict: str, o: sim.Outcomes, d: int, wald: float | None,
            chi: str, runs: bool = True) -> None:
        rate = o.rate(d)
        mean, p95 = (f"{o.mean_runs():.1f}", f"{o.p95():.0f}") if runs else ("—", "—")
        rows.append((truth, verdict, f"{100 * rate:.2f}%", mean, p95,
                     "—" if wald is None else f"{wald:.1f}",
                     "—" if wald is None else f"{o.mean_runs() / wald:.2f}", chi))

    kw = dict(alpha=ALPHA, beta=ALPHA, tolerance=TOL)
    o = sim.simulate_generic(rng, ref, ref.p, max_runs=1000, paths=paths, **kw)
    chi_fixed = sim.chi2_fixed(rng, ref, ref.p, alpha=ALPHA, runs=1000, paths=paths)
    chi_every = sim.chi2_fixed(rng, ref, ref.p, alpha=ALPHA, runs=1000, paths=min(paths, 2000),
                               every_run=True)
    row("q = p", "false BAD (budget 1000)", o, sim.BAD, None,
        f"false reject {100 * chi_fixed:.2f}% (re-checked each run: {100 * chi_every:.1f}%)",
        runs=False)
    row("q = p", f"GOOD at tol {TOL} (budget 1000)", o, sim.GOOD,
        S.good_wald_bound(ref, TOL, ALPHA, ALPHA), "cannot certify")
    o = sim.simulate_generic(rng, ref, ref.p, max_runs=3000, paths=paths // 4, **kw)
    row("q = p", f"GOOD at tol {TOL} (budget 3000)", o, sim.GOOD,
        S.good_wald_bound(ref, TOL, ALPHA, ALPHA), "")
    o = sim.simulate_generic(rng, ref, gross, max_runs=200, paths=paths, **kw)
    chi = sim.chi2_fixed(rng, ref, gross, alpha=ALPHA, runs=1000, paths=min(paths, 1000))
    row("gross (1,0,0)", "BAD", o, sim.BAD, S.wald_bound(gross, ref.p, ALPHA, ALPHA),
        f"power {100 * chi:.0f}% at 1000 runs")
    o = sim.simulate_generic(rng, ref, tv, max_runs=1000, paths=paths, **kw)
    chi = sim.chi2_fixed(rng, ref, tv, alpha=ALPHA, runs=1000, paths=paths)
    row("TV 0.1 hardest", "BAD (budget 1000)", o, sim.BAD, S.wald_bound(tv, ref.p, ALPHA, ALPHA),
        f"power {100 * chi:.1f}% at 1000 runs")
    o = sim.simulate_generic(rng, ref, tv, max_runs=4000, paths=paths // 4, **kw)
    row("TV 0.1 hardest", "BAD (budget 4000)", o, sim.BAD, S.wald_bound(tv, ref.p, ALPHA, ALPHA), "")
    o = sim.simulate_generic(rng, ref, sim.joint(list(sim.P_29975.values()), other=0.02),
                             max_runs=2000, paths=paths // 4, **kw)
    row("2% unseen token", "BAD", o, sim.BAD, None, "")

    # Bisect mode: the two-point SPRT with q̂ from a bad-endpoint calibration (fresh per block).
    for name, q in (("gross (1,0,0)", gross), ("TV 0.1 hardest", tv)):
        reps = 20
        bad_o, good_o, wald_bad, wald_good, cal = [], [], [], [], []
        for _ in range(reps):
            q_hat, n_cal = sim.calibrate_bad(rng, ref, q)
            cal.append(n_cal)
            bad_o.append(sim.simulate_two_point(rng, ref, q, q_hat, alpha=ALPHA, beta=ALPHA,
                                                max_runs=5000, paths=paths // reps))
            good_o.append(sim.simulate_two_point(rng, ref, ref.p, q_hat, alpha=ALPHA, beta=ALPHA,
                                                 max_runs=5000, paths=paths // reps))
            wald_bad.append(S.wald_bound(q, ref.p, ALPHA, ALPHA))
            wald_good.append(S.wald_bound(ref.p, q_hat, ALPHA, ALPHA))
        cat = lambda os: sim.Outcomes(np.concatenate([x.decision for x in os]),  # noqa: E731
                                      np.concatenate([x.runs for x in os]))
        note = f"q̂ from {np.mean(cal):.0f} bad-endpoint runs"
        row(name, "two-point: BAD at bad commit", cat(bad_o), sim.BAD, float(np.mean(wald_bad)), note)
        row(name, "two-point: GOOD at good commit", cat(good_o), sim.GOOD,
            float(np.mean(wald_good)), "Wald vs q̂")
    return rows


def bisect_job(args: tuple[str, str, int, int]) -> tuple[str, str, sim.BisectStats]:
    bug, strategy, reps, seed = args
    ref = sim.ref_29975()
    res = sim.simulate_bisects(np.random.default_rng(seed), ref, bugs()[bug], n=N_COMMITS,
                               reps=reps, build_cost=BUILD_COST, strategy=strategy,
                               alpha=S.step_level(N_COMMITS), tolerance=TOL)
    return bug, strategy, res


def merge(parts: list[sim.BisectStats]) -> sim.BisectStats:
    return sim.BisectStats(*(float(np.mean([getattr(p, f) for p in parts]))
                             for f in ("right", "mean_cost", "mean_runs", "mean_builds")))


def table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|",
                      *map(line, rows)])


STRATEGIES = {
    "two-point": "plain bisect, two-point SPRT (q̂ plug-in) at step level",
    "sticky": "sticky Bayesian bisection (learns q, band 0.02–0.98, stop at 0.999)",
    "generic": f"plain bisect, generic test (tol {TOL}) at step level",
    "auto": "auto (the CLI default): two-point for gross bugs, sticky for subtle ones",
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small version (about a minute)")
    ap.add_argument("--jobs", type=int, default=2)
    args = ap.parse_args()
    paths, reps = (1000, 100) if args.quick else (10_000, 1000)
    t0 = time.time()
    chunks = 4
    jobs = [(bug, strat, reps // chunks, 1000 * i + 17 * k)
            for k, bug in enumerate(bugs()) for strat in STRATEGIES for i in range(chunks)]
    with ProcessPoolExecutor(args.jobs) as pool:
        bisects = pool.map(bisect_job, jobs)
        rows = per_commit(paths, seed=2026)
        results: dict[tuple[str, str], list[sim.BisectStats]] = {}
        for bug, strat, res in bisects:
            results.setdefault((bug, strat), []).append(res)

    print(f"# bisectbot.core.stats bench — p = (0.3455, 0.4517, 0.2028), 82% meet the condition, "
          f"α = β = {ALPHA:g}, {paths} sequences per row\n")
    print(table(("truth", "verdict", "rate", "mean runs to a verdict", "p95", "Wald bound", "mean/Wald",
                 "fixed 1000-run χ² (same α)"), rows))
    print(f"\n# {reps} simulated bisects of {N_COMMITS} commits, build = {BUILD_COST} runs, "
          f"step level {S.step_level(N_COMMITS):.3g}\n")
    brows = []
    for strat, label in STRATEGIES.items():
        cells = [label]
        for bug in bugs():
            r = merge(results[(bug, strat)])
            cells.append(f"{100 * r.right:.2f}% / {r.mean_cost:,.0f} ({r.mean_builds:.1f} builds)")
        brows.append(tuple(cells))
    print(table(("strategy", *[f"{b}: right / mean cost" for b in bugs()]), brows))
    print(f"\n(bench took {time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
