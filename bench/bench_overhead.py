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
* bare loops: the same argv for the same seeds, the same number at once (a thread pool of
  `run.jobs` or the core count), `subprocess.run` with output captured, and nothing else but
  what decides whether a run counts: `once` takes whatever each seed printed (a cut output
  too); `until complete` runs a seed again while its output is cut (parse.cut_output: rerun);
  `as configured` applies the config's own parse rule (the shipped #29975 config reads a cut
  output that shows enough: parse.cut_output: read). The last is the like-for-like loop: the
  same runs counted as bisectbot counts them.

Printed: per counted run, bisectbot and each bare loop, and the ratios (the medians of the
reps); and how many cut outputs the configured loop read, with how many of them give the same
observation as the same seed's complete output (they must all).
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
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_jail import clear_runs  # noqa: E402  (bench/ is on the path: the script's directory)

sys.path.insert(0, str(ROOT / "scripts"))

import llama_e2e  # noqa: E402

from bisectbot.config import load_config  # noqa: E402
from bisectbot.config.sections import ParseConfig  # noqa: E402
from bisectbot.demo import generate_demo  # noqa: E402
from bisectbot.judge.parse import Incomplete, Unparsable, observe, parse_tokens  # noqa: E402


def cli(*args: str) -> tuple[float, dict]:
    argv = [sys.executable, "-m", "bisectbot.cli", *args, "--json", "-"]
    start = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "CI": "1"})
    wall = time.monotonic() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"bisectbot {args[0]} failed (exit {proc.returncode}): {proc.stderr.strip()[-600:]}")
    return wall, json.loads(proc.stdout)


@dataclass
class Bare:
    """One bare loop: its wall time, the programs it started, and per seed the tokens it counted
    (None: never a complete output)."""

    seconds: float
    attempts: int
    tokens: list[tuple[str, ...] | None]


def bare(argv_for_seed: list[list[str]], jobs: int, parse: ParseConfig | None = None, retries: int = 0) -> Bare:
    """The same argv for the same seeds, `jobs` at once. With `parse`: a seed whose output that
    parse calls cut short is run again (up to `retries` times), as a loop that counts only
    complete outputs must; without, each seed runs once and whatever came out is taken."""

    def one(argv: list[str]) -> tuple[int, tuple[str, ...] | None]:
        for attempt in range(1, retries + 2):
            out = subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL).stdout
            if parse is None:
                return attempt, None
            try:
                return attempt, parse_tokens(out.decode("utf-8", "replace"), parse)
            except Incomplete:
                continue
            except Unparsable:
                return attempt, None
        return retries + 1, None

    start = time.monotonic()
    with ThreadPoolExecutor(jobs) as pool:
        done = list(pool.map(one, argv_for_seed))
    return Bare(time.monotonic() - start, sum(a for a, _ in done), [t for _, t in done])


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
    parser.add_argument(
        "--work",
        type=Path,
        help="work directory, kept (its llama.cpp/ and seeded/ are replaced; default: a temporary one)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as tmp:
        work = (args.work or Path(tmp)).resolve()
        work.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(work / "llama.cpp", ignore_errors=True)
        shutil.rmtree(work / "seeded", ignore_errors=True)
        config, good, extra = llama(work) if args.llama else demo(work)
        cfg = load_config(config)
        seeded = work / "seeded"
        cli("test", str(config), "--commit", good, "--state", str(seeded), *extra)
        clear_runs(seeded / "state.sqlite3")
        jobs = cfg.run.jobs or os.cpu_count() or 1
        ours: list[float] = []
        loops: dict[str, list[float]] = {"once": [], "complete": [], "as configured": []}
        read, same = 0, 0
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
            variant = cfg.run.templates[result["detail"].get("variant") or 0]
            parse = variant.parse or cfg.parse
            argvs = [
                [a.format_map({**values, "seed": str(s)}) for a in variant.argv]
                for s in cfg.run.commit_seeds(good, 0, runs)
            ]
            ours.append((fresh - replay) / runs)
            strict = parse.model_copy(update={"cut_output": "rerun"})
            once = bare(argvs, jobs)
            complete = bare(argvs, jobs, strict, cfg.run.retries)
            configured = bare(argvs, jobs, parse, cfg.run.retries)
            for name, loop in (("once", once), ("complete", complete), ("as configured", configured)):
                loops[name].append(loop.seconds / runs)
            # a cut output read (fewer tokens than the same seed's complete one): the same observation?
            for full, got in zip(complete.tokens, configured.tokens):
                if full is not None and got is not None and got != full:
                    read += 1
                    same += observe(got, cfg.statistic) == observe(full, cfg.statistic)
            print(
                f"bisectbot: {fresh:5.2f} s fresh, {replay:5.2f} s replayed, {runs} runs "
                f"(+{result['detail'].get('retried', 0)} reruns): {ours[-1] * 1000:5.2f} ms per run; "
                f"bare loops ({jobs} at once), ms per run: once {once.seconds / runs * 1000:5.2f}, "
                f"until complete {complete.seconds / runs * 1000:5.2f} (+{complete.attempts - runs} reruns), "
                f"as configured {configured.seconds / runs * 1000:5.2f} (+{configured.attempts - runs} reruns)",
                flush=True,
            )
        a = statistics.median(ours)
        print(f"\nper counted run, medians of {args.reps}: bisectbot {a * 1000:.2f} ms; bare loops:")
        for name, times in loops.items():
            b = statistics.median(times)
            print(f"  {name:>13}: {b * 1000:5.2f} ms: bisectbot / bare = {a / b:.2f}x")
        if read:
            print(f"cut outputs read: {read}, the same observation as the seed's complete output: {same}")


if __name__ == "__main__":
    main()
