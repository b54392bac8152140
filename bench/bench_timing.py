"""Timings bisected on this machine, other work beside it or not: a planted 10% slowdown, and none.

    python bench/bench_timing.py                 # 10 tries of each history (about 1 h on 2 busy cores)
    python bench/bench_timing.py --tries 3       # fewer
    python bench/bench_timing.py --wall          # the run's wall time, not the speed it prints

Two generated cmake histories of bench/numberhist.py's program (14 commits; each run spins through
`work` million steps and prints `speed = S tokens/s`): in one, a commit makes every run do 10%
more work (a 10% slowdown, tokens/s × 1/1.1); in the other nothing changes. Each try bisects one
of them through the real CLI with a fresh state directory (`statistic.kind: time`, `reference:
good`, tolerance 0.05), timing every run beside a run of the good end. Acceptance (issue 53):
the slowdown is named in at least 9 of 10 tries, and the null history names nothing in 10 of 10
(its bad end tests GOOD: exit 4, no commit named). Prints each try and the counts with their
one-sided 95% Clopper–Pearson bounds, and the machine's load beside each.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.bench_means import clopper_lower, clopper_upper  # noqa: E402
from bench.numberhist import Step, write_number_history  # noqa: E402

WORK = 8  # million steps a run: ~10–30 ms of arithmetic on a 2025 core
CONFIG = """\
name: speed
repo: {{path: {repo}}}
build: {{targets: [prog], binaries: {{prog: [bin/prog]}}}}
run:
  argv: ["{{prog}}", "{{seed}}"]
  max_runs: 3000
parse: {{extract: 'speed = ([0-9.]+)', split: whitespace}}
statistic:
  kind: time
{outcome}reference: good
test:
  tolerance: 0.05
"""


def steps(slowdown: bool) -> list[Step]:
    out = [Step("first", work=WORK)] + [Step("src") for _ in range(6)]
    out += [Step("change", work=round(WORK * 1.1)) if slowdown else Step("src")]
    return out + [Step("src") for _ in range(5)] + [Step("docs")]


def one_try(work: Path, slowdown: bool, wall: bool) -> dict:
    hist = write_number_history(work, steps(slowdown), name="speed")
    config = work / "speed.yaml"
    config.write_text(CONFIG.format(repo=hist.repo, outcome="" if wall else "  outcome: {position: 0}\n"))
    report = work / "report.json"
    load = os.getloadavg()[0]
    start = time.monotonic()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "bisectbot.cli",
            "bisect",
            str(config),
            "--good",
            hist.commits[0],
            "--bad",
            hist.commits[-1],
            "--json",
            str(report),
            "--state",
            str(work / "state"),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "CI": "1"},
    )
    data = json.loads(report.read_text()) if report.exists() else {}
    planted = hist.first("change") if slowdown else None
    named = data.get("first_bad") if data.get("status") == "found" else None
    return {
        "slowdown": slowdown,
        "exit": done.returncode,
        "named": named,
        "right": named == planted,
        "runs": data.get("runs"),
        "builds": data.get("builds"),
        "seconds": time.monotonic() - start,
        "load": load,
        "why": "" if named == planted else (data.get("message") or done.stderr.strip().splitlines()[-1:] or [""])[-1],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tries", type=int, default=10)
    parser.add_argument("--wall", action="store_true", help="judge the run's wall time, not its printed speed")
    args = parser.parse_args(argv)
    print(
        f"{'history':<10} {'try':>3} {'right':>5} {'exit':>4} {'runs':>6} {'builds':>6} {'wall':>7} {'load':>5}  named"
    )
    rows = []
    for slowdown in (True, False):
        for k in range(args.tries):
            with tempfile.TemporaryDirectory(prefix="bisectbot-timing-") as tmp:
                row = one_try(Path(tmp), slowdown, args.wall)
            rows.append(row)
            label = "slowdown" if slowdown else "none"
            print(
                f"{label:<10} {k + 1:>3} {'yes' if row['right'] else 'NO':>5} {row['exit']:>4} {row['runs'] or 0:>6} "
                f"{row['builds'] or 0:>6} {row['seconds']:>6.0f}s {row['load']:>5.1f}  {(row['named'] or '-')[:12]}"
                + (f"  ({row['why'][:120]})" if not row["right"] else ""),
                flush=True,
            )
    ok = True
    for slowdown, need, what in ((True, 9, "the slowdown named"), (False, 10, "nothing named")):
        mine = [r for r in rows if r["slowdown"] == slowdown]
        right = sum(r["right"] for r in mine)
        n = len(mine)
        print(
            f"{what}: {right} of {n} ({right / n:.0%}; 95% bounds {clopper_lower(right, n):.0%}–"
            f"{clopper_upper(right, n):.0%}); wall {sum(r['seconds'] for r in mine) / n:.0f} s a try"
        )
        ok &= right * 10 >= need * n  # 9 and 10 of 10, scaled to the tries asked for
    print("acceptance:", "held" if ok else "NOT held")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
