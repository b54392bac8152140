"""Builds and runs of bisects whose program is not deterministic per seed (issue 53, part 3).

    python bench/bench_noisy.py [--histories 10] [--noise 0 0.05 0.5] [--costs llama]
    BISECTBOT_TREE=DIR python bench/bench_noisy.py …   # the same histories through an older tree

Simulated histories (bench/simbisect.py: only git, builds and the program are simulated) of 64
commits with one TV 0.15 change at a random place; a share `noise` of runs draw afresh (threads,
the clock). Each is bisected with the exact reference and with the good end's own runs as the
reference (`reference: good`); printed per case: named right, builds (mean, max, over the bound + 2)
and runs. An older tree (`git archive REV | tar -x -C DIR`) shows what the same histories cost before.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TREE = os.environ.get("BISECTBOT_TREE")  # an older checkout's bisectbot comes first; the bench stays ours
sys.path[:0] = [p for p in (TREE, str(ROOT)) if p]
from bench import simbisect as sb  # noqa: E402
from bench.simulate import hardest_tv_shift  # noqa: E402

N = 64
TV = 0.15


def history(seed: int, noise: float) -> tuple[sb.History, int]:
    """History `seed`: the change at a random position (the same for every noise level)."""
    rng = np.random.default_rng(seed)
    at = int(rng.integers(2, N - 2))
    ref = tuple(sb.P_29975.values())
    changes = {0: sb.joint(ref), at: sb.joint(hardest_tv_shift(ref, TV))}
    return sb.History(N, changes, salt=1000 + seed, noise=noise), at


def case(noise: float, control: bool, histories: int, costs: str) -> str:
    """One row: the histories of one noise level and reference, bisected one after the other."""
    right, builds, over, runs, start = 0, [], 0, [], time.monotonic()
    for seed in range(histories):
        h, at = history(seed, noise)
        cfg = sb.sim_config(control=h.shas[0]) if control else sb.sim_config()
        report = sb.run_report(cfg, h, "auto", costs)
        right += bool(report.first_bad) and h.shas.index(report.first_bad) == at
        builds.append(report.builds)
        over += report.builds > report.builds_bound + 2
        runs.append(report.runs)
    reference = "good end's runs" if control else "exact"
    return (
        f"| {noise:g} | {reference} | {right}/{histories} | {np.mean(builds):.1f} | {max(builds)} | {over} "
        f"| {np.mean(runs):,.0f} | {time.monotonic() - start:.0f} s |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--histories", type=int, default=10)
    parser.add_argument("--noise", type=float, nargs="+", default=[0.0, 0.05, 0.5])
    parser.add_argument("--costs", choices=sorted(sb.COSTS), default="llama")
    args = parser.parse_args()
    import bisectbot

    print(f"bisectbot from {Path(bisectbot.__file__).parent}; {N} commits (builds bound 9), costs {args.costs}")
    print("| noise | reference | named right | mean builds | max builds | over bound + 2 | mean runs | time |")
    print("|---|---|---|---|---|---|---|---|")
    for noise in args.noise:
        for control in (False, True):
            print(case(noise, control, args.histories, args.costs), flush=True)


if __name__ == "__main__":
    main()
