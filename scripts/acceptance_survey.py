#!/usr/bin/env python3
"""llama-speculative's draft acceptance rate on the tiny fixtures, per llama.cpp tree.

    python scripts/acceptance_survey.py VERSION... [--seeds 200] [--work DIR] [--raw FILE]

For each llama-cpp-python sdist VERSION (its ``vendor/llama.cpp`` tree): fetch the sdist (cached
under ``${BISECTBOT_CACHE:-~/.cache/bisectbot}/sdist``, as ``llama_e2e.fetch_sdist`` does), make
it a one-commit git repository, build ``llama-speculative`` (or ``speculative``) with the
``configs/llama/llama-speculative.yaml`` preset's build section through bisectbot's own builder
(its build variants per era, ccache when installed), choose the preset's command variant the way
bisectbot does (the first whose flags ``--help`` shows and whose runs do not fail), run it on N
seeds (the preset's hashed seeds: ``run.seed(1..N)``) and read the statistics the program prints
on stderr at exit::

    n_draft   = 3
    n_predict = 5
    n_drafted = 3
    n_accept  = 2
    accept    = 66.667%

Prints a table of the acceptance rate (``accept``, per cent) per tree: N (the seeds whose line
holds a number), mean, sd, min and max over them, the pooled rate (all accepted / all drafted
tokens, per cent), the mean ``n_drafted`` and ``n_accept`` a run, and the shift of the mean from
the row above with Welch's z; then the command each tree ran. A seed whose stderr lacks the line
(the logger of trees since September 2024 can lose its tail at exit) is rerun with the same seed,
up to ``--retries`` times. ``accept    = -nan%`` (nothing drafted: ``n_drafted = 0``) is counted
apart (column ``nan``) and left out of the mean; rerunning that seed prints the same.

Exit 0 when every tree built and gave N readings. Nothing is written into this repository: trees,
builds and state go under ``--work`` (default ``<cache>/acceptance``); ``--raw`` writes every
seed's numbers as JSON lines. Run it under ``nice``: each cold build takes minutes on 2 cores.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import math
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from llama_e2e import FIXTURES, REPO_ROOT, cache_dir  # noqa: E402
from llama_eras import build_history, upstream_commit  # noqa: E402

PRESET = REPO_ROOT / "configs" / "llama" / "llama-speculative.yaml"
# the statistics lines on stderr (LOG_TEE before the logging rewrite, LOG_INF after), from 0.3.25's
# tree on behind a time stamp and a level ("0.00.058.752 I accept    = 16.667%"): not anchored at
# the line's start, only after a blank (so `accept` does not match inside `n_accept`)
STAT_LINES = {
    name: re.compile(rf"(?:^|\s){name}\s*=\s*(\S+?)%?\s*$", re.MULTILINE)
    for name in ("n_draft", "n_predict", "n_drafted", "n_accept", "accept")
}
ACCEPT_LINE = STAT_LINES["accept"]
PROBE_SEEDS = 5  # runs that decide whether a command variant works on a binary


@dataclass
class Reading:
    seed: int
    values: dict[str, float]  # n_draft, n_predict, n_drafted, n_accept, accept (per cent)
    runs: int  # 1 + reruns of output that lacked the statistics
    line: str  # the raw `accept` line
    stdout: str  # what the run printed on stdout (the generated text, the prompt too since 2024-09)


@dataclass
class TreeResult:
    version: str
    upstream: str = ""
    build_variant: int | None = None
    run_variant: int | None = None
    argv: list[str] = field(default_factory=list)
    readings: list[Reading] = field(default_factory=list)
    missing: list[int] = field(default_factory=list)  # seeds never read
    error: str = ""


def _argv(template: list[str], binary: str, seed: int | str) -> list[str]:
    """The command of one run: the preset's placeholders filled in."""
    values = {"binary": binary, "fixtures": str(FIXTURES), "seed": str(seed)}
    return [re.sub(r"\{(\w+)\}", lambda m: values.get(m.group(1), m.group(0)), a) for a in template]


def read_stats(stderr: str) -> dict[str, float] | None:
    """The statistics lines of one run's stderr, or None when the `accept` line is missing."""
    out = {}
    for name, pattern in STAT_LINES.items():
        found = pattern.findall(stderr)
        if found:
            try:
                out[name] = float(found[-1])  # "nan", "-nan", "inf" read as such
            except ValueError:
                out[name] = math.nan
    return out if "accept" in out else None


def run_seed(template: list[str], binary: str, seed: int, retries: int, timeout: float = 60) -> Reading | None:
    """One seed's statistics, rerunning the same seed while they are missing (a cut output)."""
    for attempt in range(1, retries + 1):
        try:
            res = subprocess.run(_argv(template, binary, seed), capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            continue
        err = res.stderr.decode(errors="replace")
        stats = read_stats(err) if res.returncode == 0 else None
        if stats is not None:
            line = ACCEPT_LINE.search(err)
            text = line.group(0).strip() if line else ""
            return Reading(seed, stats, attempt, text, res.stdout.decode(errors="replace"))
    return None


def parses(reading: Reading | None, parse_cfg) -> bool:
    """Whether the run's stdout has the variant's output format (a cut output does)."""
    from bisectbot.judge.parse import Incomplete, Unparsable, parse_output

    if reading is None:
        return False
    try:
        parse_output(reading.stdout, "", parse_cfg)
    except Incomplete:
        return True
    except Unparsable:
        return False
    return True


def pick_command(cfg, binary: str) -> tuple[int | None, str]:
    """bisectbot's choice of command variant: the first whose flags `--help` shows and whose probe
    runs mostly succeed (exit 0, print the statistics, and stdout has the variant's `parse` format),
    as judge.runner.pick_variant with run-time failures. Returns (variant index, why the others
    did not fit)."""
    from bisectbot.judge.runner import pick_variant

    res = subprocess.run([binary, "--help"], capture_output=True, timeout=60)
    help_text = (res.stdout + res.stderr).decode(errors="replace")
    failed: dict[int, str] = {}
    while True:
        i, why = pick_variant(help_text, cfg.run.templates, failed)
        if i is None:
            return None, why
        probes = [run_seed(cfg.run.templates[i].argv, binary, cfg.run.seed(s), 1) for s in range(1, PROBE_SEEDS + 1)]
        good = sum(parses(p, cfg.parse_for(i)) for p in probes)
        if good * 2 > PROBE_SEEDS:
            return i, "; ".join(f"variant {k}: {v}" for k, v in failed.items())
        failed[i] = f"{PROBE_SEEDS - good} of {PROBE_SEEDS} probe runs failed or did not parse"


def survey_tree(version: str, work: Path, seeds: int, retries: int, jobs: int) -> TreeResult:
    from bisectbot.building.builder import Builder
    from bisectbot.building.workspace import Workspace
    from bisectbot.config import load_config
    from bisectbot.events import Events
    from bisectbot.state.statedir import StateDir

    out = TreeResult(version)
    cfg = load_config(PRESET)
    tree, state_dir = work / version / "llama.cpp", work / version / "state"
    if not (tree / ".git").is_dir():
        shutil.rmtree(tree, ignore_errors=True)
        # one commit of the sdist's tree, added with --force (older .gitignore files match
        # tracked files such as common/cmake/build-info-gen-cpp.cmake)
        build_history(tree, [(version, "", [])])
    sha = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    up, when = upstream_commit(version)
    out.upstream = f"{up} {time.strftime('%Y-%m-%d', time.gmtime(when))}"
    start = time.monotonic()
    with StateDir(state_dir) as state:
        rec = Builder(state, Workspace(str(tree), state.clone_dir), Events()).ensure(sha, cfg.build)
    if not rec.ok:
        out.error = f"build failed: {rec.reason}"
        return out
    out.build_variant = rec.variant
    binary = rec.binaries["binary"]
    print(f"acceptance: {version} built (variant {rec.variant}) in {time.monotonic() - start:.0f} s", flush=True)
    variant, why = pick_command(cfg, binary)
    if variant is None:
        out.error = f"no command variant: {why}"
        return out
    out.run_variant = variant
    template = cfg.run.templates[variant].argv
    out.argv = _argv(template, binary, "{seed}")
    print(f"acceptance: {version}: command variant {variant}" + (f" ({why})" if why else ""), flush=True)
    seed_list = [cfg.run.seed(i) for i in range(1, seeds + 1)]
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        results = list(pool.map(lambda s: run_seed(template, binary, s, retries), seed_list))
    out.readings = [r for r in results if r is not None]
    out.missing = [s for s, r in zip(seed_list, results) if r is None]
    return out


def summary(values: list[float]) -> str:
    if not values:
        return "n/a"
    sd = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):8.3f} {sd:7.3f} {min(values):7.3f} {max(values):7.3f}"


def finite_accepts(r: TreeResult) -> list[float]:
    return [x.values["accept"] for x in r.readings if math.isfinite(x.values["accept"])]


def shift(before: list[float], after: list[float]) -> str:
    """The change of the mean acceptance rate between two trees, with Welch's z."""
    if len(before) < 2 or len(after) < 2:
        return ""
    d = statistics.fmean(after) - statistics.fmean(before)
    se = math.sqrt(statistics.variance(before) / len(before) + statistics.variance(after) / len(after))
    return f"{d:+.2f} pp (z {d / se:+.1f})" if se > 0 else f"{d:+.2f} pp"


def print_table(results: list[TreeResult]) -> None:
    print()
    print(
        f"{'version':<8} {'upstream':<18} {'b/r':<5} {'N':>5} {'nan':>4} {'reruns':>6} "
        f"{'accept% mean':>12} {'sd':>7} {'min':>7} {'max':>7} {'pooled%':>8} {'drafted':>8} {'accepted':>8}  vs the row above"
    )
    previous: list[float] = []
    for r in results:
        if r.error:
            print(f"{r.version:<8} {r.upstream:<18} {'':<5} ERROR: {r.error}")
            continue
        finite = finite_accepts(r)
        nan = len(r.readings) - len(finite)
        drafted = [x.values.get("n_drafted", math.nan) for x in r.readings]
        accepted = [x.values.get("n_accept", math.nan) for x in r.readings]
        reruns = sum(x.runs - 1 for x in r.readings)
        print(
            f"{r.version:<8} {r.upstream:<18} {r.build_variant}/{r.run_variant:<3} {len(finite):>5} {nan:>4} "
            f"{reruns:>6} {summary(finite)} {100 * sum(accepted) / max(1.0, sum(drafted)):8.3f} "
            f"{statistics.fmean(drafted):8.3f} {statistics.fmean(accepted):8.3f}  {shift(previous, finite)}"
            + (f"   ({len(r.missing)} seeds never read)" if r.missing else "")
        )
        previous = finite
    for r in results:
        if r.argv:
            print(
                f"\n{r.version} (build variant {r.build_variant}, command variant {r.run_variant}):\n  "
                + shlex.join(r.argv)
            )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("versions", nargs="+", help="llama-cpp-python sdist versions")
    ap.add_argument("--seeds", type=int, default=200, help="seeds per tree (run.seed(1..N) of the preset)")
    ap.add_argument("--work", type=Path, default=None, help="work directory (default: <cache>/acceptance)")
    ap.add_argument("--retries", type=int, default=10, help="runs of one seed before giving up on it")
    ap.add_argument("--jobs", type=int, default=1, help="runs at once (default 1: the machine is shared)")
    ap.add_argument("--raw", type=Path, default=None, help="write every seed's numbers here (JSON lines)")
    a = ap.parse_args(argv)
    work = a.work or cache_dir() / "acceptance"
    work.mkdir(parents=True, exist_ok=True)
    results = []
    for version in a.versions:
        start = time.monotonic()
        res = survey_tree(version, work, a.seeds, a.retries, a.jobs)
        results.append(res)
        print(
            f"acceptance: {version}: {len(res.readings)} readings in {time.monotonic() - start:.0f} s"
            + (f"; {res.error}" if res.error else ""),
            flush=True,
        )
        if a.raw:
            with open(a.raw, "a", encoding="utf-8") as fh:
                for x in res.readings:
                    fh.write(
                        json.dumps(
                            {
                                "version": version,
                                "seed": x.seed,
                                "runs": x.runs,
                                "line": x.line,
                                "stdout": x.stdout,
                                **x.values,
                            }
                        )
                        + "\n"
                    )
    print_table(results)
    return 0 if all(not r.error and not r.missing and len(r.readings) == a.seeds for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
