"""A measured reference against an exact one, side by side, on a project that is not llama.cpp.

    python bench/bench_control.py              # 3 histories (a few minutes on 2 cores)
    python bench/bench_control.py --histories 6
    python bench/bench_control.py --histories 6 --reshuffle
    python bench/bench_control.py --workers 2    # also the measured bisect on a 2-worker Dask cluster

The shape of issue 23: a 44-commit history of a small C program that prints one seeded choice
(bench/choice.py), one commit moving one outcome 0.30 → 0.38 (TV 0.08), one commit that
does not compile (the next fixes it), the rest compiled-file or docs-only changes. The control
is paired with each tested run on its seed; a seed prints the same where the change does not
reach (the change moves a threshold). `--reshuffle`: the change also draws from another random
stream, so from it on every seed prints independently of the control: the worst case for
pairing by seed. Each history
is bisected twice with the configs `bisectbot init` writes (default test settings), each in a
state directory of its own: with the exact reference (`init --probs`), and with a measured one
(`init` without --probs: `reference.control` at the good endpoint, a two-sample test against
its runs, which are counted in the report's `control_runs`).
Printed: per history and in all, whether each found the change, its builds, its runs, the
control's runs and the ratio of all runs (control included) measured / exact. The target
(issue 23) is a ratio ≤ 2.5. With `--workers N` the measured config is bisected a third time on
a local Dask cluster of N workers (the coordinator pairs each run with the control's, issue 45),
which must name the same commit; exit 1 when it does not.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository root: `bench` is a package there
from bench.choice import ChoiceHistory, Step, write_choice_history  # noqa: E402

N = 44
BEFORE = (0.30, 0.45, 0.25)
AFTER = (0.38, round(0.45 - 0.08 * 0.45 / 0.70, 6), round(0.25 - 0.08 * 0.25 / 0.70, 6))


def history(dest: Path, seed: int, reshuffle: bool = False) -> ChoiceHistory:
    """One history of the shape: the change and the break at random places (`reshuffle`: the
    change also draws from another random stream, so no seed prints what it printed before)."""
    rnd = random.Random(seed)
    change = rnd.randrange(4, N - 4)
    broken = rnd.choice([i for i in range(2, N - 2) if abs(i - change) > 1])
    steps = [Step("first", BEFORE)]
    for i in range(1, N):
        if i == change:
            steps.append(Step("change", AFTER, stream=101 if reshuffle else None))
        elif i == broken:
            steps.append(Step("break", broken=True))
        else:
            steps.append(Step("src" if rnd.random() < 0.45 else "docs"))
    return write_choice_history(dest, steps, name="choice")


def init_config(h: ChoiceHistory, work: Path, label: str, probs: dict[str, float] | None, max_runs: int) -> Path:
    """The config `bisectbot init` writes for the history (exact reference with `probs`)."""
    path = work / f"{label}.yaml"
    argv = [sys.executable, "-m", "bisectbot.cli", "init", str(h.repo), "--good", h.commits[0], "-o", str(path)]
    argv += ["--name", label, "-q"]
    if probs:
        argv += ["--probs", ",".join(f"{k}={v}" for k, v in probs.items())]
    proc = subprocess.run([*argv, "--", "{binary}", "{seed}"], capture_output=True, text=True, cwd=work)
    if proc.returncode != 0:
        raise SystemExit(f"bisectbot init failed for {label}: {proc.stderr.strip()[-300:]}")
    if max_runs:
        config = yaml.safe_load(path.read_text())
        config["run"]["max_runs"] = max_runs
        path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def bisect(h: ChoiceHistory, path: Path, work: Path, label: str, workers: int = 0) -> dict:
    out = work / f"{label}.json"
    argv = [sys.executable, "-m", "bisectbot.cli", "bisect", str(path), "--good", h.commits[0], "--bad", "main"]
    argv += ["--state", str(work / f"state-{label}"), "--json", str(out), "-q"]
    argv += ["--workers", str(workers)] if workers else []
    start = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True)
    seconds = time.monotonic() - start
    if not out.exists():
        return {"found": False, "error": proc.stderr.strip()[-300:], "seconds": seconds}
    report = json.loads(out.read_text())
    named = report["first_bad"]
    return {
        "first_bad": named,
        "found": named == h.first("change"),
        "named": f"{report['status']} {h.commits.index(named) if named in h.commits else '-'}/{h.kinds.index('change')}",
        "status": report["status"],
        "builds": report["builds"],
        "runs": report["runs"],
        "control": report.get("control_runs") or 0,
        "seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--histories", type=int, default=3)
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--max-runs", type=int, default=0, help="run.max_runs of both configs (default: init's)")
    parser.add_argument(
        "--reshuffle",
        action="store_true",
        help="the change also reshuffles every seed's draw: the worst case for pairing by seed",
    )
    parser.add_argument("--workers", type=int, default=0, help="also bisect the measured config on N Dask workers")
    args = parser.parse_args()
    differ = 0
    probs = dict(zip("abc", BEFORE))
    totals = {"exact": 0, "measured": 0}
    print(f"{'history':>7}  {'exact: found builds runs':>26}  {'measured: found builds runs + control':>38}  ratio")
    for seed in range(args.first_seed, args.first_seed + args.histories):
        with tempfile.TemporaryDirectory(prefix="bench-control-") as tmp:
            work = Path(tmp)
            h = history(work, seed, args.reshuffle)
            exact = bisect(h, init_config(h, work, "exact", probs, args.max_runs), work, "exact")
            config = init_config(h, work, "measured", None, args.max_runs)
            measured = bisect(h, config, work, "measured")
            cluster = bisect(h, config, work, "cluster", args.workers) if args.workers else None
        if "error" in exact or "error" in measured:
            print(f"{seed:>7}  exact: {exact.get('error', 'ok')} | measured: {measured.get('error', 'ok')}")
            continue
        totals["exact"] += exact["runs"]
        totals["measured"] += measured["runs"] + measured["control"]
        ratio = (measured["runs"] + measured["control"]) / exact["runs"]
        print(
            f"{seed:>7}  {str(exact['found']):>6} {exact['builds']:>6} {exact['runs']:>12,}  "
            f"{str(measured['found']):>6} {measured['builds']:>6} {measured['runs']:>12,} + {measured['control']:>8,}"
            f"  {ratio:.2f}  (named/change: exact {exact['named']}, measured {measured['named']})"
        )
        if cluster is not None:
            same = cluster.get("first_bad") == measured.get("first_bad")
            differ += not same
            print(
                f"{'':>7}  measured on {args.workers} workers: {cluster.get('named', cluster.get('error'))}, "
                f"{cluster.get('runs', 0):,} runs + {cluster.get('control', 0):,} control, "
                f"{cluster.get('seconds', 0):.0f} s: {'the same commit' if same else 'ANOTHER COMMIT'}"
            )
    if totals["exact"]:
        print(
            f"\nall runs, measured / exact: {totals['measured']:,} / {totals['exact']:,} = "
            f"{totals['measured'] / totals['exact']:.2f} (target ≤ 2.5)"
        )
    if args.workers:
        print(f"on {args.workers} workers: {'the same commit every time' if not differ else f'{differ} differ'}")
    if differ:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
