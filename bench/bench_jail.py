"""A program that leaves a child holding its stdout on every run, against the same program
without it: the same demo bisect side by side (issue 25), plus the jail's cost per run.

    python bench/bench_jail.py            # about two minutes on 2 cores

The leaky variant runs `sh -c 'setsid sleep 1000 & exec "$@"'` around the demo's command: the
sleep inherits the program's stdout and leaves its session. Before the run jail, the bot waited
for that pipe to close (no run finished within 180 s); now the driver kills what a run leaves
behind when the program exits. The plain variant runs `sh -c 'exec "$@"'` (the same shell
start, no child). Each bisect gets a fresh state directory and shares the build (it is made
once, before the timings, in a state directory the timed bisects copy). Printed: both walls,
their ratio (target ≤ 2×), the culprit, and the processes of the leaky program left afterwards.

Then the cost of the jail itself: `true` run 300 times through the run driver and 300 times by
a bare `subprocess.run` (what the bot did before), one thread, interleaved in blocks of 50.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bisectbot.demo import generate_demo  # noqa: E402
from bisectbot.processes.procs import run  # noqa: E402


def leftovers(marker: str) -> int:
    count = 0
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if marker in Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode():
                    count += 1
            except OSError:
                pass
    return count


def bisect(cfg: Path, good: str, state: Path, seeded: Path) -> tuple[float, dict]:
    shutil.rmtree(state, ignore_errors=True)
    shutil.copytree(seeded, state)
    out = state.parent / f"{state.name}.json"
    argv = [sys.executable, "-m", "bisectbot.cli", "bisect", str(cfg), "--good", good, "--bad", "main"]
    argv += ["--state", str(state), "--json", str(out), "--no-arms", "-q"]
    start = time.monotonic()
    proc = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "CI": "1"})
    wall = time.monotonic() - start
    if proc.returncode != 0:
        raise SystemExit(f"bisect failed (exit {proc.returncode}): {proc.stderr.strip()[-600:]}")
    return wall, json.loads(out.read_text())


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-jail-") as tmp:
        work = Path(tmp)
        demo = generate_demo(work / "demo", n_commits=16, culprit_index=9, break_index=4, seed=3)
        base = yaml.safe_load(demo.config.read_text())
        base["repo"]["path"] = str(demo.repo)
        configs = {}
        for name, shell in (("plain", 'exec "$@"'), ("leaky", 'setsid sleep 1000.125 & exec "$@"')):
            data = json.loads(json.dumps(base))
            data["run"]["argv"] = ["sh", "-c", shell, "sh", *base["run"]["argv"]]
            data["run"]["timeout"] = 60  # a run that waited for the pipe would take all of it
            configs[name] = work / f"{name}.yaml"
            configs[name].write_text(yaml.safe_dump(data))
        seeded = work / "seeded"  # every build made once, outside the timings
        argv = [sys.executable, "-m", "bisectbot.cli", "bisect", str(configs["plain"]), "--good", demo.good]
        argv += ["--bad", "main", "--state", str(seeded), "--no-arms", "-q", "--json", str(work / "seed.json")]
        subprocess.run(argv, check=True, capture_output=True, env={**os.environ, "CI": "1"})
        clear_runs(seeded / "state.sqlite3")
        walls: dict[str, list[float]] = {"plain": [], "leaky": []}
        for round_ in range(2):
            for name in ("plain", "leaky") if round_ == 0 else ("leaky", "plain"):
                wall, report = bisect(configs[name], demo.good, work / f"st-{name}", seeded)
                right = report["first_bad"] == demo.culprit
                walls[name].append(wall)
                print(f"{name:>6}: {wall:5.1f} s, {report['runs']} runs, culprit right: {right}", flush=True)
        plain, leaky = min(walls["plain"]), min(walls["leaky"])
        print(f"\nleaky / plain wall (best of 2 each): {leaky / plain:.2f}x (target ≤ 2x)")
        print(f"processes of the leaky program left: {leftovers('sleep 1000.125')}")

    jail, bare = [], []
    for _ in range(6):
        start = time.monotonic()
        for _ in range(50):
            run(["true"], timeout=10, cap=1 << 20)
        jail.append(time.monotonic() - start)
        start = time.monotonic()
        for _ in range(50):
            subprocess.run(["true"], capture_output=True, start_new_session=True, timeout=10)
        bare.append(time.monotonic() - start)
    per_jail, per_bare = sum(jail) / 300 * 1000, sum(bare) / 300 * 1000
    print(f"per run of `true`: jail {per_jail:.2f} ms, bare {per_bare:.2f} ms ({per_jail / per_bare:.2f}x)")


def clear_runs(db: Path) -> None:
    """Delete the seeded state's runs, verdicts and jobs (keep its builds): the timed bisects
    run every seed."""
    import sqlite3

    con = sqlite3.connect(db)
    try:
        for table in ("runs", "verdicts", "jobs"):
            con.execute(f"DELETE FROM {table}")
        con.commit()
    finally:
        con.close()


if __name__ == "__main__":
    main()
