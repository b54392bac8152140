"""What the pull-request sandbox costs: an untrusted check of a demo commit (bubblewrap over a
throwaway box, no ccache) against the same check as trusted code, side by side in one run.

    python bench/bench_sandbox.py [--pairs 5] [--commits 6]

The pull request's head is the same commit as the trusted ref, so both checks build the same
tree and run the same seeds. Each check starts from a fresh state directory (the demo's
reference is exact: nothing else is built), so it clones, builds and runs the commit. Three arms
run in turn, pair by pair (the machine's drift cancels within a pair):

* trusted, ccache off (`CCACHE_DISABLE=1`): the like-for-like yardstick, since untrusted builds
  never use ccache;
* trusted, ccache on and warm: what a maintainer's check costs;
* untrusted: `check --ref pull/<N>/head`.

It prints each arm's median wall time and the medians of the per-pair ratios.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bisectbot.demo import generate_demo

BISECTBOT = str(Path(sys.executable).with_name("bisectbot"))


def _check(config: Path, ref: str, state: Path, env: dict[str, str]) -> float:
    """Seconds of one `bisectbot check` in a fresh state directory."""
    shutil.rmtree(state, ignore_errors=True)
    start = time.monotonic()
    proc = subprocess.run(
        [BISECTBOT, "check", str(config), "--ref", ref, "--state", str(state)], capture_output=True, text=True, env=env
    )
    seconds = time.monotonic() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"check --ref {ref} failed (exit {proc.returncode}): {proc.stderr.strip()[-300:]}")
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--commits", type=int, default=6)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-sandbox-") as tmp:
        root = Path(tmp)
        demo = generate_demo(root / "demo", n_commits=args.commits, culprit_index=args.commits // 2, seed=1)
        # the pull request's head is the good commit itself: the same tree as the trusted check's
        subprocess.run(["git", "-C", str(demo.repo), "update-ref", "refs/pull/1/head", demo.good], check=True)
        env = {**os.environ, "CI": "1", "CCACHE_DIR": str(root / "ccache")}
        off = {**env, "CCACHE_DISABLE": "1"}
        # ccache warm for the trusted arm: one trusted check of the commit under test, thrown away
        _check(demo.config, demo.good, root / "s", env)

        arms: dict[str, list[float]] = {"trusted, no ccache": [], "trusted, warm ccache": [], "untrusted": []}
        for i in range(args.pairs):
            arms["trusted, no ccache"].append(_check(demo.config, demo.good, root / "s", off))
            arms["trusted, warm ccache"].append(_check(demo.config, demo.good, root / "s", env))
            arms["untrusted"].append(_check(demo.config, "pull/1/head", root / "s", env))
            print(f"pair {i + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in arms.items()), flush=True)

    print(f"\ndemo check, {args.pairs} pairs, {os.cpu_count()} cores")
    for name, times in arms.items():
        print(f"  {name:<22} median {statistics.median(times):6.2f} s  (min {min(times):.2f}, max {max(times):.2f})")
    base = arms["trusted, no ccache"]
    for name in ("untrusted", "trusted, warm ccache"):
        ratios = [a / b for a, b in zip(arms[name], base)]
        print(
            f"  {name} / trusted, no ccache: median ratio {statistics.median(ratios):.2f} "
            f"(min {min(ratios):.2f}, max {max(ratios):.2f})"
        )
    ratios = [a / b for a, b in zip(arms["untrusted"], arms["trusted, warm ccache"])]
    print(
        f"  untrusted / trusted, warm ccache: median ratio {statistics.median(ratios):.2f} "
        "(builds without ccache: not like for like)"
    )


if __name__ == "__main__":
    main()
