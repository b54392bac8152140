"""Benchmark of bisectbot's statistics: single verdicts and whole bisects, against the targets.

    python bench/bench_stats.py                  # the acceptance sizes (about an hour on 2 cores)
    python bench/bench_stats.py --quick          # a tenth of the repetitions (minutes)
    python bench/bench_stats.py --baseline REV   # also run every case through bisectbot at REV
    python bench/bench_stats.py --quick --no-verdicts --costs llama --only re-introduced --only "crash rate" \
        --only "condition rate"                  # issue 45's shapes alone, their wording checked
    python bench/bench_stats.py --scale          # K = 8 … 4,096 outcomes: cost, false alarms, power

Verdicts: the sequential tests of bisectbot.statistics.stats, vectorised over many simulated run
sequences (bench/simulate.py: the same formulas, evaluated after every run).
Bisects: bisectbot.bisecting.bisect.run_bisect, the function the CLI calls (endpoint tests, model
stage, search, confirmation, summary), over simulated histories (bench/simbisect.py: only git,
the build and the program are simulated; a run's outcome is fixed by the commit's distribution and
the seed). Repetitions are spread over a Dask `distributed` cluster (`--workers`, default: the
cores) or an existing one (`--scheduler ADDRESS`).

Histories are narrowed as on llama.cpp (55% of commits cannot change the binary: skipped as
equivalent, a culprit's parent among them included) and priced in seconds at two settings
(`simbisect.COSTS`: llama.cpp's measured build and run times, and the demo's); the strategy is
chosen under each. A wrong answer is the issue's: a commit where nothing changed, one after the
first change beyond the tolerance, or one whose own distribution is within eta of the reference.

Every rate is printed with its repetitions and a one-sided 95% Clopper–Pearson bound (upper for
error rates, lower for success rates). The reference is #29975's (e 0.3455, g 0.4517, h 0.2028;
82% of runs meet the condition).

Issue 45's shapes (`statcases.shape_cases`: a defect fixed and re-introduced, a crash rate rising
0 → 30% with failed runs counted as an outcome, a change in how often the condition is met with
no condition_prob) are judged on what their reports say as well (`statcases.shape_checks`); they
stay out of the rates pooled over the other histories, and a shape whose report says the wrong
thing prints a FAIL line and makes the bench exit 1.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
# --baseline runs this file again with BISECTBOT_TREE naming an older checkout: its bisectbot
# must come before ours (the bench modules still come from here)
TREE = os.environ.get("BISECTBOT_TREE")
sys.path[:0] = [p for p in (TREE, str(ROOT)) if p]
from bench import simbisect as sb  # noqa: E402
from bench.statcases import (  # noqa: E402
    ALPHA,
    EQUIVALENT,
    ETA,
    GROSS,
    P_COND,
    TOL,
    bisect_cases,
    bisect_table,
    bisect_task,
    pct,
    rate_down,
    rate_up,
    shape_summary,
    summarise,
    table,
    verdict_task,
)


# -- running ----------------------------------------------------------------------------------
def client_for(args: argparse.Namespace) -> Any:
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [TREE, str(ROOT), os.environ.get("PYTHONPATH")]))
    from distributed import Client, LocalCluster

    if args.scheduler:
        return Client(args.scheduler)
    cluster = LocalCluster(
        n_workers=args.workers, threads_per_worker=1, processes=True, dashboard_address=None, silence_logs=40
    )
    return Client(cluster)


def code_id() -> str:
    """What the bisects ran: a hash of the imported bisectbot's sources (results kept in a
    --results file are reused only by the same code)."""
    import hashlib

    import bisectbot

    h = hashlib.sha256()
    pkg = Path(bisectbot.__file__).parent
    for path in sorted(pkg.rglob("*.py")):
        h.update(path.relative_to(pkg).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _kept(path: Path | None, code: str) -> dict[tuple[str, str, str, int], dict[str, Any]]:
    """Bisects a --results file already holds for this code, by (case, costs, strategy, rep)."""
    out: dict[tuple[str, str, str, int], dict[str, Any]] = {}
    if path is None or not path.exists():
        return out
    for line in path.read_text().splitlines():
        try:
            r = json.loads(line)
        except ValueError:  # a line cut short by a killed run
            continue
        if r.get("code_id") == code:
            out[(r["label"], r["costs"], r["strategy_asked"], r["rep"])] = r
    return out


def run_bisects(
    client: Any,
    cases: list[dict[str, Any]],
    max_runs: int | None,
    costs: str = "llama",
    strategy: str = "auto",
    chunk: int = 10,
    results: Path | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Every case's bisects on the cluster. With `results`, each finished chunk is appended to
    that JSON-lines file as it ends, and bisects it already holds for this code are not run
    again: a run of hours stopped half-way resumes where it stopped."""
    from distributed import as_completed

    code = code_id()
    kept = _kept(results, code)
    out: dict[str, list[dict[str, Any]]] = {c["label"]: [] for c in cases}
    futures = {}
    for case in cases:
        todo = []
        for rep in range(case["reps"]):
            if (r := kept.get((case["label"], costs, strategy, rep))) is not None:
                out[case["label"]].append(r)
            else:
                todo.append(rep)
        for start in range(0, len(todo), chunk):
            fut = client.submit(bisect_task, case, todo[start : start + chunk], max_runs, costs, strategy, pure=False)
            futures[fut] = case["label"]
    if kept and results is not None:
        print(f"({sum(len(v) for v in out.values())} bisects read from {results})", flush=True)
    for fut in as_completed(list(futures)):
        label = futures[fut]
        got = [{**r, "label": label, "strategy_asked": strategy, "code_id": code} for r in fut.result()]
        out[label].extend(got)
        if results is not None:
            with results.open("a") as f:
                f.writelines(json.dumps(r) + "\n" for r in got)
    for rows in out.values():
        rows.sort(key=lambda r: r["rep"])
    return out


def baseline(rev: str, cases: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """The same cases (the same histories: repetitions 0 … reps − 1) through bisectbot at `rev`
    (a git worktree), in a child process that puts that tree first on its path and its
    workers' (and checks that they used it)."""
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), rev], check=True, capture_output=True
        )
        # its bisectbot comes first on the path, but the bench modules must be ours (the same
        # histories): the worktree's own bench/ would shadow them
        shutil.rmtree(tree / "bench", ignore_errors=True)
        try:
            env = {**os.environ, "BISECTBOT_TREE": str(tree)}
            cmd = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--child-cases",
                repr(cases),
                "--workers",
                str(args.workers),
            ]
            if args.scheduler:
                cmd += ["--scheduler", args.scheduler]
            if args.baseline_minutes:
                cmd += ["--baseline-minutes", str(args.baseline_minutes)]
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if proc.returncode != 0:
                raise SystemExit(f"baseline at {rev} failed: {proc.stderr.strip().splitlines()[-3:]}")
            return eval(proc.stdout.strip().splitlines()[-1])  # our own repr, from our own child
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], capture_output=True)


def cached_baseline(rev: str, cases: list[dict[str, Any]], args: argparse.Namespace) -> dict[str, Any]:
    """The baseline's results, from `--baseline-cache FILE` when it holds this revision's run of
    these very cases (the baseline is a fixed old commit: its results do not change), else run
    and stored there."""
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", rev], capture_output=True, text=True).stdout.strip()
    key = repr((sha, cases))
    path = Path(args.baseline_cache) if args.baseline_cache else None
    if path is not None and path.is_file():
        stored = eval(path.read_text())  # our own repr, written below
        if stored.get("key") == key:
            print(f"(baseline results of {sha[:12]} read from {path})", flush=True)
            return stored["results"]  # type: ignore[no-any-return]
    results = baseline(rev, cases, args)
    if path is not None:
        path.write_text(repr({"key": key, "results": results}))
    return results


def child(cases_text: str, args: argparse.Namespace) -> None:
    """--child-cases: run the cases' bisects with whatever bisectbot PYTHONPATH gives, one history
    per task; at --baseline-minutes the unfinished ones are cancelled and left out. Prints the
    results of each case (every history, for side-by-side comparisons)."""
    from distributed import wait

    cases = eval(cases_text)  # written by baseline() above
    client = client_for(args)
    futures = [
        (case["label"], client.submit(bisect_task, case, [rep], 4000, pure=False))
        for case in cases
        for rep in range(case["reps"])
    ]
    try:
        wait([f for _, f in futures], timeout=60 * args.baseline_minutes if args.baseline_minutes else None)
    except TimeoutError:
        pass
    results: dict[str, list[dict[str, Any]]] = {c["label"]: [] for c in cases}
    for label, f in futures:
        if f.status == "finished":
            results[label].extend(f.result())
    client.cancel([f for _, f in futures])
    used = {r["code"] for rs in results.values() for r in rs}
    if not used:
        raise SystemExit(f"no baseline bisect finished within {args.baseline_minutes} minutes")
    if TREE is None or used != {str(Path(TREE) / "bisectbot")}:
        raise SystemExit(f"the baseline ran bisectbot from {sorted(used)}, not from {TREE}")
    print(repr(results))


def scale_bench(args: argparse.Namespace) -> None:
    """--scale: every (K, reference) case's bisects and single verdicts on the cluster; the tables."""
    from distributed import as_completed

    from bench import scalecases as sc

    t0 = time.time()
    client = client_for(args)
    futures = [
        client.submit(sc.scale_task, k, mode, [rep], rep < 2, pure=False)
        for k in sc.KS
        for mode in ("exact", "control")
        for rep in range(args.scale_reps)
    ]
    paths = {"exact": 100 if args.quick else 400, "control": 20 if args.quick else 80}
    futures += [
        client.submit(sc.verdict_task_scale, k, mode, case, paths[mode], 5400, pure=False)
        for k in sc.KS
        for mode in ("exact", "control")
        for case in ("false-bad", "false-good")
    ]
    bisects, verdicts = [], []
    for fut in as_completed(futures):
        got = fut.result()
        (bisects if isinstance(got, list) else verdicts).extend(got if isinstance(got, list) else [got])
    print(
        f"# --scale: the next-token-like reference of K outcomes (bench/scalecases.py), {args.scale_reps} histories "
        f"of {sc.LINE} commits per K and reference, one TV {sc.DEFECT_TV} defect each, run.max_runs {sc.MAX_RUNS:,}; "
        f"CPU and peak memory (tracemalloc, histories 0 and 1) of whole simulated bisects in one process each\n"
    )
    print(sc.scale_tables(bisects, verdicts))
    print(f"\n(bench took {time.time() - t0:.0f} s on {len(client.scheduler_info()['workers'])} workers)")
    client.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="a tenth of the repetitions")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--scheduler", help="address of an existing Dask scheduler")
    ap.add_argument(
        "--costs",
        choices=["llama", "demo", "both"],
        default="both",
        help="the cost settings the strategy is chosen under (seconds per build and per run)",
    )
    ap.add_argument(
        "--strategy",
        default="auto",
        choices=["auto", "reference", "plain", "sticky"],
        help="the strategy the bisects are asked for (default auto: chosen by the costs)",
    )
    ap.add_argument(
        "--baseline",
        metavar="REV",
        help="also run every case through bisectbot at REV, on the same "
        "histories, and compare the wall time at llama.cpp's costs",
    )
    ap.add_argument(
        "--baseline-reps", type=int, help="how many histories of each case the baseline bisects (default: all of them)"
    )
    ap.add_argument(
        "--baseline-cache",
        metavar="FILE",
        help="keep the baseline's results here and reuse them when the same revision already ran the same cases",
    )
    ap.add_argument(
        "--baseline-minutes",
        type=float,
        help="stop the baseline after this long and compare the "
        "histories it finished (its slow ones are the costly ones, so this favours the baseline)",
    )
    ap.add_argument(
        "--only",
        action="append",
        metavar="SUBSTRING",
        help="run only the cases whose label contains this (repeatable: any of them)",
    )
    ap.add_argument("--no-verdicts", action="store_true", help="skip the single-verdict rates")
    ap.add_argument(
        "--results",
        type=Path,
        help="append every finished bisect to this JSON-lines file and reuse those it holds for the same "
        "code (a long run stopped half-way resumes)",
    )
    ap.add_argument(
        "--scale",
        action="store_true",
        help="references of 8 to 4,096 outcomes (bench/scalecases.py): whole bisects' CPU and peak memory "
        "side by side, power, false alarms; single verdicts' error rates",
    )
    ap.add_argument("--scale-reps", type=int, default=8, help="histories per K and reference with --scale")
    ap.add_argument("--child-cases", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_cases:
        return child(args.child_cases, args)
    if args.scale:
        return scale_bench(args)
    scale = 0.1 if args.quick else 1.0
    t0 = time.time()
    client = client_for(args)

    vres: dict[str, dict[str, Any]] = {}
    if not args.no_verdicts:
        # verdicts: false BAD at good commits (exact, and with a 2% stray outcome), gross BAD speed
        verdicts = [
            ("exact reference", P_COND, 0.0),
            ("reference + 2% stray outcome", P_COND, 0.02),
            ("gross (1, 0, 0)", GROSS.tolist(), 0.0),
        ]
        total = int(20_000 * scale)
        vfut = []
        for name, cond, other in verdicts:
            paths = total if name != "gross (1, 0, 0)" else max(1000, total // 10)
            budget = 4000 if name != "gross (1, 0, 0)" else 100
            for i, start in enumerate(range(0, paths, 1000)):
                vfut.append(
                    client.submit(
                        verdict_task,
                        name,
                        cond,
                        other,
                        ETA,
                        min(1000, paths - start),
                        budget,
                        7_000 + 31 * len(vfut) + i,
                        pure=False,
                    )
                )
        for fut in vfut:
            r = fut.result()
            acc = vres.setdefault(r["name"], {"paths": 0, "bad": 0, "good": 0, "bad_runs": []})
            for k in ("paths", "bad", "good"):
                acc[k] += r[k]
            acc["bad_runs"] += r["bad_runs"]
        print(
            f"# bisectbot statistics bench — defaults: eta {ETA:g}, tolerance {TOL:g}; "
            f"verdicts at alpha = beta = {ALPHA:g}\n"
        )
        rows = []
        for name, acc in vres.items():
            if name.startswith("gross"):
                runs = np.array(acc["bad_runs"])
                rows.append(
                    (
                        name,
                        "BAD",
                        rate_down(acc["bad"], acc["paths"]),
                        f"mean {runs.mean():.1f} runs, p95 {np.percentile(runs, 95):.0f} (target ≤ 16)",
                    )
                )
            else:
                rows.append(
                    (
                        name,
                        "false BAD (budget 4,000)",
                        rate_up(acc["bad"], acc["paths"]),
                        f"target ≤ alpha = {ALPHA:g}; GOOD {pct(acc['good'] / acc['paths'])}",
                    )
                )
        print(table(("commit", "verdict", "rate (reps; 95% bound)", "note"), rows), flush=True)

    cases = [c for c in bisect_cases(scale) if not args.only or any(part in c["label"] for part in args.only)]
    failed: list[str] = []
    settings = ["llama", "demo"] if args.costs == "both" else [args.costs]
    now: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for setting in settings:
        now[setting] = run_bisects(
            client, cases, max_runs=None, costs=setting, strategy=args.strategy, results=args.results
        )
        build, run = sb.COSTS[setting]
        print(
            f"\n# bisects through run_bisect, {setting} costs (a build {build:g} s, a run {run:g} s); "
            f"{EQUIVALENT:.0%} of commits cannot change the binary; [zone]: something between eta {ETA:g} "
            f"and tolerance {TOL:g}\n"
        )
        summaries = [summarise(c, now[setting][c["label"]]) for c in cases]
        print(bisect_table(summaries, setting))
        for s in summaries:
            print(f"  {s['label']}: statuses {s['statuses']}, {s['seconds']:.2f} s per simulated bisect", flush=True)
        pooled = [s for s, c in zip(summaries, cases) if not c.get("shape")]  # issue 45's shapes apart
        clean = [s for s in pooled if not s["zone"]]
        k, n = sum(s["first"] for s in clean), sum(s["n"] for s in clean)
        kw, nw = sum(s["confident_wrong"] for s in pooled), sum(s["n"] for s in pooled)
        if pooled:
            print(
                f"  every change below eta or beyond tolerance: first departure named {rate_down(k, n)}; "
                f"everywhere: wrong with stated confidence ≥ 0.99 {rate_up(kw, nw)}",
                flush=True,
            )
        for case in cases:
            if case.get("shape"):
                lines, fails = shape_summary(case, now[setting][case["label"]])
                print(f"\n  {case['label']} ({setting} costs):")
                print("\n".join(f"    {line}" for line in lines))
                for why in fails:
                    print(f"    FAIL: {why}")
                failed += [f"{case['label']}: {why}" for why in fails]
    if args.baseline:  # issue 45's shapes need keys an older bisectbot does not know
        picked = [{**c, "reps": min(c["reps"], args.baseline_reps or c["reps"])} for c in cases if not c.get("shape")]
        then = cached_baseline(args.baseline, picked, args)
        print(
            f"\n# side by side on the same histories: bisectbot at {args.baseline} (then) and now, wall seconds "
            f"at llama.cpp's costs (a build {sb.COSTS['llama'][0]:g} s, a run {sb.COSTS['llama'][1]:g} s)\n"
        )
        rows, pooled_then, pooled_now = [], [], []
        for case in picked:
            old = then.get(case["label"], [])
            reps = {r["rep"] for r in old}
            new = [r for r in now.get("llama", now[settings[0]])[case["label"]] if r["rep"] in reps]
            if not old or not new:
                continue
            so, sn = summarise(case, old), summarise(case, new)
            pooled_then += [r["llama_s"] for r in old]
            pooled_now += [r["llama_s"] for r in new]
            rows.append(
                (
                    case["label"],
                    str(len(old)),
                    rate_down(so["first"], so["n"]),
                    rate_down(sn["first"], sn["n"]),
                    rate_up(so["confident_wrong"], so["n"]),
                    rate_up(sn["confident_wrong"], sn["n"]),
                    f"{so['llama_s']:,.0f} s ({so['builds']:.1f} b, {so['runs']:,.0f} r)",
                    f"{sn['llama_s']:,.0f} s ({sn['builds']:.1f} b, {sn['runs']:,.0f} r)",
                    f"{sn['llama_s'] / so['llama_s']:.2f}",
                )
            )
        print(
            table(
                (
                    "history",
                    "histories",
                    "first named then",
                    "first named now",
                    "confident wrong then",
                    "confident wrong now",
                    "mean wall then",
                    "mean wall now",
                    "ratio",
                ),
                rows,
            )
        )
        if pooled_then:
            ratio = float(np.mean(pooled_now) / np.mean(pooled_then))
            print(
                f"\n  all {len(pooled_then)} histories: mean wall {np.mean(pooled_then):,.0f} s then, "
                f"{np.mean(pooled_now):,.0f} s now: ratio {ratio:.2f} (target ≤ 0.8)"
            )
    print(f"\n(bench took {time.time() - t0:.0f} s on {len(client.scheduler_info()['workers'])} workers)")
    client.close()
    if failed:
        print(f"FAIL: {len(failed)} check(s) of what the reports say: " + "; ".join(failed))
        raise SystemExit(1)


if __name__ == "__main__":
    main()
