"""Benchmark the whole pipeline on the demo history: builds used vs ⌈log2 N⌉, runs per verdict
vs the budget, and the runs a fixed sweep would have spent, measured side by side in one run.

    python bench/bench_demo.py [--commits 100] [--seeds 0 1 2]

Each seed places the planted culprit elsewhere; every bisect is real (git, cmake, processes).
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from pathlib import Path

from bisectbot.config import load_config
from bisectbot.demo import generate_demo
from bisectbot.jobs import lifecycle as jobs
from bisectbot.state.statedir import StateDir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=100)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()

    print(f"demo history of {args.commits} commits; ⌈log2 N⌉ = {math.ceil(math.log2(args.commits))}")
    print(
        f"{'seed':>4} {'found':>5} {'builds':>6} {'bound':>5} {'runs':>6} {'fixed sweep':>11} "
        f"{'ratio':>6} {'seconds':>7}"
    )
    per_role: dict[str, list[tuple[int, int]]] = {}
    for seed in args.seeds:
        with tempfile.TemporaryDirectory(prefix="bench-demo-") as tmp:
            history = generate_demo(Path(tmp), n_commits=args.commits, seed=seed)
            cfg = load_config(history.config)
            start = time.monotonic()
            with StateDir(Path(tmp) / "state") as state:
                session = jobs.Session(cfg, state)
                report = jobs.run_bisect(session, jobs.plan_bisect(session, history.good, history.bad)).to_json()
            seconds = time.monotonic() - start
        found = report["first_bad"] == history.culprit
        # a fixed sweep spends the whole budget on every tested commit
        fixed = cfg.run.max_runs * len(report["verdicts"])
        print(
            f"{seed:>4} {str(found):>5} {report['builds']:>6} {report['builds_bound']:>5} "
            f"{report['runs']:>6} {fixed:>11} {fixed / report['runs']:>5.1f}x {seconds:>7.1f}"
        )
        for v in report["verdicts"]:
            per_role.setdefault(f"{v['role']} {v['verdict']}", []).append((v["runs"], cfg.run.max_runs))
    print()
    print(f"{'verdict':<28} {'n':>3} {'mean runs':>9} {'max runs':>8} {'budget':>6} {'mean/budget':>11}")
    for role, rows in sorted(per_role.items()):
        runs = [r for r, _ in rows]
        budget = rows[0][1]
        print(
            f"{role:<28} {len(rows):>3} {statistics.mean(runs):>9.1f} {max(runs):>8} {budget:>6} "
            f"{statistics.mean(runs) / budget:>11.3f}"
        )


if __name__ == "__main__":
    main()
