"""Benchmark of bisectbot's statistics: single verdicts and whole bisects, against the targets.

    python bench/bench_stats.py                  # the acceptance sizes (about an hour on 2 cores)
    python bench/bench_stats.py --quick          # a tenth of the repetitions (minutes)
    python bench/bench_stats.py --baseline REV   # also run the TV 0.1 case through bisectbot at REV

Verdicts: the sequential tests of bisectbot.core.stats, vectorised over many simulated run
sequences (bench/simulate.py: the same formulas, evaluated after every run).
Bisects: bisectbot.pipeline.bisect.run_bisect, the function the CLI calls (endpoint tests, model
stage, search, confirmation, summary), over simulated histories (bench/simbisect.py: only git,
the build and the program are simulated; a run's outcome is fixed by the commit's distribution and
the seed). Repetitions are spread over a Dask `distributed` cluster (`--workers`, default: the
cores) or an existing one (`--scheduler ADDRESS`).

Every rate is printed with its repetitions and a one-sided 95% Clopper–Pearson bound (upper for
error rates, lower for success rates). The reference is #29975's (e 0.3455, g 0.4517, h 0.2028;
82% of runs meet the condition); a build costs 100 runs.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from scipy.stats import beta as beta_dist

ROOT = Path(__file__).resolve().parents[1]
# --baseline runs this file again with BISECTBOT_TREE naming an older checkout: its bisectbot
# must come before ours (the bench modules still come from here)
TREE = os.environ.get("BISECTBOT_TREE")
sys.path[:0] = [p for p in (TREE, str(ROOT)) if p]
from bench import simbisect as sb  # noqa: E402
from bench import simulate as sim  # noqa: E402
from bisectbot.core import stats as S  # noqa: E402

ALPHA = 5e-4
TOL = 0.1
P_COND = list(sb.P_29975.values())


# -- distributions ----------------------------------------------------------------------------
def shifted(tv: float, along: float | None = None) -> np.ndarray:
    """The conditional distribution at TV `tv` from the reference in the hardest direction (the
    direction of the TV `along` shift when given, so two defects push the same way)."""
    p = np.asarray(P_COND)
    if along is None:
        return np.asarray(S.hardest_tv_shift(P_COND, tv))
    step = np.asarray(S.hardest_tv_shift(P_COND, along)) - p
    return p + step * (tv / along)


GROSS = np.array([1.0, 0.0, 0.0])  # #29975: after `f`, always `e`


# -- bounds -----------------------------------------------------------------------------------
def upper95(k: int, n: int) -> float:
    return 1.0 if k >= n else float(beta_dist.ppf(0.95, k + 1, n - k))


def lower95(k: int, n: int) -> float:
    return 0.0 if k <= 0 else float(beta_dist.ppf(0.05, k, n - k + 1))


def pct(x: float) -> str:
    return f"{100 * x:.2f}%"


def rate_up(k: int, n: int) -> str:
    return f"{pct(k / n)} ({k}/{n}; ≤ {pct(upper95(k, n))})"


def rate_down(k: int, n: int) -> str:
    return f"{pct(k / n)} ({k}/{n}; ≥ {pct(lower95(k, n))})"


# -- tasks (run on the Dask workers) -----------------------------------------------------------
def verdict_task(name: str, cond: list[float], other: float, eta: float, paths: int, budget: int,
                 seed: int) -> dict[str, Any]:
    """`paths` sequential verdicts at one commit (the generic test, as an endpoint or re-test)."""
    ref = sim.ref_29975()
    q = sim.joint(cond, other=other)
    o = sim.simulate_generic(np.random.default_rng(seed), ref, q, alpha=ALPHA, beta=ALPHA, tolerance=TOL,
                             max_runs=budget, paths=paths, eta=eta)
    bad = o.runs[o.decision == sim.BAD]
    return {"name": name, "paths": paths, "bad": int((o.decision == sim.BAD).sum()),
            "good": int((o.decision == sim.GOOD).sum()), "bad_runs": bad.tolist()}


def history(case: dict[str, Any], rep: int) -> tuple[sb.History, list[int]]:
    """The case's history for one repetition: change points at random positions (fixed by the
    repetition's number), and the positions where something changed."""
    rng = np.random.default_rng([case["seed"], rep])
    n, shifts = case["n"], case["shifts"]
    if len(shifts) == 1:
        where = [int(rng.integers(1, n))]
    else:
        a = int(rng.integers(1, n - 2))
        where = [a, int(rng.integers(a + 1, n))]
    changes = {0: sb.joint(P_COND, case["other"])}
    for pos, cond in zip(where, shifts):
        changes[pos] = sb.joint(cond, case["other"])
    return sb.History(n, changes, salt=case["seed"] * 1_000_003 + rep), where


def bisect_task(case: dict[str, Any], reps: list[int], max_runs: int | None) -> list[dict[str, Any]]:
    """Bisects of the case's histories through run_bisect; what each named."""
    import bisectbot

    cfg = sb.sim_config(max_runs)
    out = []
    for rep in reps:
        hist, where = history(case, rep)
        t0 = time.perf_counter()
        o = sb.run_one(cfg, hist)
        out.append({**asdict(o), "rep": rep, "where": where, "seconds": time.perf_counter() - t0,
                    "code": str(Path(bisectbot.__file__).parent)})
    return out


# -- cases ------------------------------------------------------------------------------------
def bisect_cases(scale: float) -> list[dict[str, Any]]:
    def reps(n: int) -> int:
        return max(10, int(n * scale))

    tv15, tv30 = shifted(0.15), shifted(0.30, along=0.15)
    two = [("two defects: TV 0.15 then gross", [tv15, GROSS]), ("two defects: TV 0.15 then TV 0.30 (same way)", [tv15, tv30])]
    cases = []
    for i, (label, shifts) in enumerate(two):
        for n in (64, 1024):
            cases.append({"label": f"{label}, N = {n}", "n": n, "shifts": [s.tolist() for s in shifts], "other": 0.0,
                          "reps": reps(1000), "seed": 100 + 10 * i + (n > 64), "kind": "two"})
    for j, (label, shift) in enumerate((("gross", GROSS), ("TV 0.15", tv15))):
        cases.append({"label": f"2% stray outcome on every commit, one {label} defect, N = 1024", "n": 1024,
                      "shifts": [shift.tolist()], "other": 0.02, "reps": reps(400), "seed": 200 + j, "kind": "one"})
    cases.append({"label": "one TV 0.1 defect (hardest direction), N = 4096", "n": 4096,
                  "shifts": [shifted(0.1).tolist()], "other": 0.0, "reps": reps(300), "seed": 300, "kind": "one"})
    return cases


def summarise(case: dict[str, Any], results: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(results)
    first = sum(r["named"] == r["where"][0] for r in results)
    later = sum(r["named"] is not None and r["named"] in r["where"][1:] for r in results)
    nothing = sum(r["named"] is not None and r["named"] not in r["where"] for r in results)
    unnamed = sum(r["named"] is None for r in results)
    named = [r for r in results if r["named"] is not None]
    wrong = later + nothing
    conf = min((r["confidence"] for r in named), default=1.0)
    costs = np.array([r["runs"] + sb.BUILD_COST * r["builds"] for r in results])
    statuses: dict[str, int] = {}
    for r in results:
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    return {"label": case["label"], "n": n, "first": first, "later": later, "nothing": nothing,
            "unnamed": unnamed, "wrong": wrong, "min_conf": conf,
            "mean_conf": float(np.mean([r["confidence"] for r in named])) if named else 0.0,
            "runs": float(np.mean([r["runs"] for r in results])),
            "builds": float(np.mean([r["builds"] for r in results])), "cost": float(costs.mean()),
            "seconds": float(np.mean([r["seconds"] for r in results])), "statuses": statuses,
            "strategies": sorted({r["strategy"] for r in results})}


def table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "| " + " | ".join(str(c).ljust(w) for c, w in zip(r, widths)) + " |"  # noqa: E731
    return "\n".join([line(header), "|" + "|".join("-" * (w + 2) for w in widths) + "|", *map(line, rows)])


# -- running ----------------------------------------------------------------------------------
def client_for(args: argparse.Namespace) -> Any:
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [TREE, str(ROOT), os.environ.get("PYTHONPATH")]))
    from distributed import Client, LocalCluster

    if args.scheduler:
        return Client(args.scheduler)
    cluster = LocalCluster(n_workers=args.workers, threads_per_worker=1, processes=True,
                           dashboard_address=None, silence_logs=40)
    return Client(cluster)


def run_bisects(client: Any, cases: list[dict[str, Any]], max_runs: int | None,
                chunk: int = 10) -> dict[str, list[dict[str, Any]]]:
    futures = []
    for case in cases:
        for start in range(0, case["reps"], chunk):
            reps = list(range(start, min(case["reps"], start + chunk)))
            futures.append((case["label"], client.submit(bisect_task, case, reps, max_runs, pure=False)))
    out: dict[str, list[dict[str, Any]]] = {c["label"]: [] for c in cases}
    for label, fut in futures:
        out[label].extend(fut.result())
    return out


def baseline(rev: str, case: dict[str, Any], args: argparse.Namespace) -> dict[str, Any]:
    """The same case through bisectbot at `rev` (a git worktree), in a child process that puts
    that tree first on its path and its workers' (and checks that they used it); its bad-model
    stage is capped by run.max_runs, so it gets 4,000 (the new default budget) to finish."""
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev], check=True,
                       capture_output=True)
        try:
            env = {**os.environ, "BISECTBOT_TREE": str(tree)}
            cmd = [sys.executable, str(Path(__file__).resolve()), "--child-case", repr(case),
                   "--workers", str(args.workers)]
            if args.baseline_minutes:
                cmd += ["--baseline-minutes", str(args.baseline_minutes)]
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                raise SystemExit(f"baseline at {rev} failed: {proc.stderr.strip().splitlines()[-1:]}")
            return eval(proc.stdout.strip().splitlines()[-1])  # our own repr, from our own child
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True)


def child(case_text: str, args: argparse.Namespace) -> None:
    """--child-case: run one case's bisects with whatever bisectbot PYTHONPATH gives, one history
    per task; at --baseline-minutes the unfinished ones are cancelled and left out."""
    from distributed import wait

    case = eval(case_text)  # written by baseline() above
    client = client_for(args)
    futures = [client.submit(bisect_task, case, [rep], 4000, pure=False) for rep in range(case["reps"])]
    try:
        wait(futures, timeout=60 * args.baseline_minutes if args.baseline_minutes else None)
    except TimeoutError:
        pass
    results = [r for f in futures if f.status == "finished" for r in f.result()]
    client.cancel(futures)
    if not results:
        raise SystemExit(f"no baseline bisect finished within {args.baseline_minutes} minutes")
    used = {r["code"] for r in results}
    if TREE is None or used != {str(Path(TREE) / "bisectbot")}:
        raise SystemExit(f"the baseline ran bisectbot from {sorted(used)}, not from {TREE}")
    print(repr({**summarise(case, results), "reps": sorted(r["rep"] for r in results), "asked": case["reps"]}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a tenth of the repetitions")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--scheduler", help="address of an existing Dask scheduler")
    ap.add_argument("--baseline", metavar="REV", help="also run the TV 0.1 case through bisectbot at REV")
    ap.add_argument("--baseline-reps", type=int, help="how many of the TV 0.1 histories the baseline bisects "
                    "(default: a third of the case's, at least 10)")
    ap.add_argument("--baseline-minutes", type=float, help="stop the baseline after this long and compare the "
                    "histories it finished (its slow ones are the costly ones, so this favours the baseline)")
    ap.add_argument("--only", help="run only the cases whose label contains this")
    ap.add_argument("--child-case", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_case:
        return child(args.child_case, args)
    scale = 0.1 if args.quick else 1.0
    t0 = time.time()
    from bisectbot.config import TestConfig

    eta = TestConfig().indifference
    client = client_for(args)

    # verdicts: false BAD at good commits (exact, and with a 2% stray outcome), gross BAD speed
    verdicts = [("exact reference", P_COND, 0.0), ("reference + 2% stray outcome", P_COND, 0.02),
                ("gross (1, 0, 0)", GROSS.tolist(), 0.0)]
    total = int(20_000 * scale)
    vfut = []
    for name, cond, other in verdicts:
        paths = total if name != "gross (1, 0, 0)" else max(1000, total // 10)
        budget = 4000 if name != "gross (1, 0, 0)" else 100
        for i, start in enumerate(range(0, paths, 1000)):
            vfut.append(client.submit(verdict_task, name, cond, other, eta, min(1000, paths - start), budget,
                                      7_000 + 31 * len(vfut) + i, pure=False))
    cases = [c for c in bisect_cases(scale) if not args.only or args.only in c["label"]]
    bisects = run_bisects(client, cases, max_runs=None)
    vres: dict[str, dict[str, Any]] = {}
    for fut in vfut:
        r = fut.result()
        acc = vres.setdefault(r["name"], {"paths": 0, "bad": 0, "good": 0, "bad_runs": []})
        for k in ("paths", "bad", "good"):
            acc[k] += r[k]
        acc["bad_runs"] += r["bad_runs"]

    print(f"# bisectbot statistics bench — defaults: eta {eta:g}, tolerance {TOL:g}; "
          f"verdicts at alpha = beta = {ALPHA:g}\n")
    rows = []
    for name, acc in vres.items():
        if name.startswith("gross"):
            runs = np.array(acc["bad_runs"])
            rows.append((name, "BAD", rate_down(acc["bad"], acc["paths"]),
                         f"mean {runs.mean():.1f} runs, p95 {np.percentile(runs, 95):.0f} (target ≤ 16)"))
        else:
            rows.append((name, "false BAD (budget 4,000)", rate_up(acc["bad"], acc["paths"]),
                         f"target ≤ alpha = {ALPHA:g}; GOOD {pct(acc['good'] / acc['paths'])}"))
    print(table(("commit", "verdict", "rate (reps; 95% bound)", "note"), rows), flush=True)

    summaries = [summarise(c, bisects[c["label"]]) for c in cases]
    print(f"\n# bisects through run_bisect (default settings; a build = {sb.BUILD_COST} runs)\n")
    brows = []
    for s in summaries:
        brows.append((s["label"], rate_down(s["first"], s["n"]), rate_up(s["later"], s["n"]),
                      rate_up(s["nothing"], s["n"]), rate_up(s["unnamed"], s["n"]),
                      f"{s['min_conf']:.4f} / {rate_up(s['wrong'], s['n'])}",
                      f"{s['runs']:,.0f} / {s['builds']:.1f} / {s['cost']:,.0f}", ",".join(s["strategies"])))
    print(table(("history", "first departure named", "a later change point named", "a commit where nothing "
                 "changed named", "nothing named", "min stated confidence / wrong", "mean runs / builds / cost",
                 "strategy"), brows))
    for s in summaries:
        print(f"  {s['label']}: statuses {s['statuses']}, {s['seconds']:.1f} s per bisect", flush=True)
    base = None  # last: the old code's searches can be slow, and the tables above are printed by then
    if args.baseline:
        tv = next((c for c in cases if c["label"].startswith("one TV 0.1")), None)
        if tv is not None:
            reps = args.baseline_reps or max(10, int(100 * scale))
            base = baseline(args.baseline, {**tv, "reps": min(reps, tv["reps"])}, args)
    if base is not None:  # side by side on the same histories (repetitions 0 … n−1)
        case = next(c for c in cases if c["label"] == base["label"])
        new = summarise(case, [r for r in bisects[case["label"]] if r["rep"] in base["reps"]])
        part = "" if base["n"] == base["asked"] else f" (the {base['n']} of {base['asked']} it finished in time)"
        print(f"\n# {base['label']}, the same {base['n']} histories{part} at {args.baseline} (run.max_runs 4,000 "
              f"so its model stage can finish) and now:\n#   then: found {rate_down(base['first'], base['n'])}, mean cost "
              f"{base['cost']:,.0f} ({base['runs']:,.0f} runs, {base['builds']:.1f} builds)\n#   now:  found "
              f"{rate_down(new['first'], new['n'])}, mean cost {new['cost']:,.0f} ({new['runs']:,.0f} runs, "
              f"{new['builds']:.1f} builds)\n#   ratio {new['cost'] / base['cost']:.2f} (target ≤ 1.3)")
    print(f"\n(bench took {time.time() - t0:.0f} s on {len(client.scheduler_info()['workers'])} workers)")
    client.close()


if __name__ == "__main__":
    main()
