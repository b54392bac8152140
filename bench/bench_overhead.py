"""Per-run overhead: a run through bisectbot against a bare loop of the same command with the
same parallelism (issue 26; target ≤ 10% over the bare loop).

    python bench/bench_overhead.py [--reps 3]      # about a minute on 2 cores
    python bench/bench_overhead.py --llama         # #29975's command: a few minutes (one build)

On a generated demo history (a ~1 ms program: the bot's share at its largest), or with `--llama`
on the 0.3.36 llama.cpp tree with #29975's fix (the shipped config, its command, arms off), the
good commit is built once; then, interleaved `--reps` times:

* `bisectbot test` on a fresh copy of that state directory (the build stored, no run), timed
  from the outside; and the same command again on that state (every run replayed), whose wall
  is the fixed cost (start-up, imports, the reference, the report). The difference, divided by
  the runs the test used, is bisectbot's time per run: spawn through the run jail, parse,
  sequential test, storage writes;
* a bare loop: the same argv for the same seeds, the same number at once (a thread pool of
  `run.jobs` or the core count), `subprocess.run` with output captured, nothing else.

Printed: per run, bisectbot and bare, and the ratio (the medians of the reps).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_jail import clear_runs  # noqa: E402  (bench/ is on the path: the script's directory)

sys.path.insert(0, str(ROOT / "scripts"))

import llama_e2e  # noqa: E402

from bisectbot.config import load_config  # noqa: E402
from bisectbot.demo import generate_demo  # noqa: E402


def cli(*args: str) -> tuple[float, dict]:
    argv = [sys.executable, "-m", "bisectbot.cli", *args, "--json", "-"]
    start = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "CI": "1"})
    wall = time.monotonic() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"bisectbot {args[0]} failed (exit {proc.returncode}): {proc.stderr.strip()[-600:]}")
    return wall, json.loads(proc.stdout)


def bare(argv_for_seed: list[list[str]], jobs: int) -> float:
    start = time.monotonic()
    with ThreadPoolExecutor(jobs) as pool:
        list(pool.map(lambda argv: subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL), argv_for_seed))
    return time.monotonic() - start


def demo(work: Path) -> tuple[Path, str, list[str]]:
    """The demo's config (its repository named in it) and good commit."""
    history = generate_demo(work / "demo", n_commits=8, culprit_index=5, break_index=2, seed=4)
    data = yaml.safe_load(history.config.read_text())
    data["repo"]["path"] = str(history.repo)
    config = work / "demo.yaml"
    config.write_text(yaml.safe_dump(data))
    return config, history.good, []


def llama(work: Path) -> tuple[Path, str, list[str]]:
    """The shipped config, the 0.3.36 tree with the fix (GOOD: a whole test's runs), arms off."""
    repo = work / "llama.cpp"
    llama_e2e.prepare_tree(repo)
    history = llama_e2e.build_history(repo, 3, n_commits=6)
    return ROOT / "configs" / "llama-cpp-29975.yaml", history["good"], ["--repo", str(repo), "--no-arms"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--llama", action="store_true", help="#29975's command on a real llama.cpp tree")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as tmp:
        work = Path(tmp)
        config, good, extra = llama(work) if args.llama else demo(work)
        cfg = load_config(config)
        seeded = work / "seeded"
        cli("test", str(config), "--commit", good, "--state", str(seeded), *extra)
        clear_runs(seeded / "state.sqlite3")
        jobs = cfg.run.jobs or os.cpu_count() or 1
        ours, theirs, runs = [], [], 0
        for _ in range(args.reps):
            state = work / "state"
            shutil.rmtree(state, ignore_errors=True)
            shutil.copytree(seeded, state)
            fresh, result = cli("test", str(config), "--commit", good, "--state", str(state), *extra)
            replay, again = cli("test", str(config), "--commit", good, "--state", str(state), *extra)
            assert again["runs"] == result["runs"]
            runs = result["runs"]
            binary = result["detail"]["binaries"]["binary"]
            values = {"binary": binary, "fixtures": str(cfg.fixtures_dir or ""), "config_dir": str(cfg.config_dir)}
            template = cfg.run.templates[result["detail"].get("variant") or 0].argv
            argvs = [
                [a.format_map({**values, "seed": str(s)}) for a in template]
                for s in cfg.run.commit_seeds(good, 0, runs)
            ]
            ours.append((fresh - replay) / runs)
            theirs.append(bare(argvs, jobs) / runs)
            print(
                f"bisectbot: {fresh:5.2f} s fresh, {replay:5.2f} s replayed, {runs} runs: "
                f"{ours[-1] * 1000:5.2f} ms per run; bare loop ({jobs} at once): {theirs[-1] * 1000:5.2f} ms per run",
                flush=True,
            )
        a, b = statistics.median(ours), statistics.median(theirs)
        print(f"\nper run (medians of {args.reps}): bisectbot {a * 1000:.2f} ms, bare {b * 1000:.2f} ms: {a / b:.2f}x")


if __name__ == "__main__":
    main()
