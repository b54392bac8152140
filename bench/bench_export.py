"""What a pull request's tree can cost the bot before its code runs (issue 46): a plain pull
request's check against one whose tree holds 150,000 files and one holding a 3 GiB file, side by
side in one run.

    python bench/bench_export.py [--pairs 3] [--files 150000] [--gib 3]

Each check is the real `bisectbot check --ref pull/<N>/head` in a fresh state directory, the
three in turn, pair by pair (the machine's drift cancels within a pair). It prints each one's
median wall time, the bot's peak RSS (GNU time's %M: the bot's process, not its children), and
the per-pair ratio of the large trees' checks to the plain one's. The target: refused (or done)
within max(30 s, 4× the plain check), and at most 300 MB of the bot's memory.
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from bisectbot.demo import generate_demo

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from test_box_edges import _big_file_pull, _many_files_pull  # noqa: E402

BISECTBOT = [sys.executable, "-m", "bisectbot.cli"]


def _check(config: Path, number: int, state: Path) -> tuple[float, float, str]:
    """(seconds, the bot's peak RSS in MB, its verdict line) of one check in a fresh state."""
    shutil.rmtree(state, ignore_errors=True)
    start = time.monotonic()
    proc = subprocess.run(
        ["/usr/bin/time", "-f", "maxrss_kb=%M", *BISECTBOT, "check", str(config), "--ref", f"pull/{number}/head"]
        + ["--state", str(state)],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/local/bin:/usr/bin:/bin", "CI": "1", "HOME": str(state.parent)},
    )
    seconds = time.monotonic() - start
    rss = int(re.findall(r"maxrss_kb=(\d+)", proc.stderr)[-1]) / 1024
    lines = proc.stdout.splitlines()
    refused = [ln for ln in lines if "refused" in ln]
    verdict = re.search(r"\b(GOOD|BAD|SKIP|INCONCLUSIVE)\b", proc.stdout)
    said = refused[0].strip() if refused else (verdict.group(1) if verdict else f"exit {proc.returncode}")
    return seconds, rss, said[:110]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--files", type=int, default=150_000)
    ap.add_argument("--gib", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        demo = generate_demo(root / "demo", n_commits=6, culprit_index=3, break_index=1, seed=1)
        subprocess.run(["git", "-C", str(demo.repo), "update-ref", "refs/pull/30/head", demo.good], check=True)
        _many_files_pull(demo, 31, args.files)
        _big_file_pull(demo, 32, args.gib << 30)
        data = yaml.safe_load(demo.config.read_text())
        data["repo"]["path"] = str(demo.repo)
        config = root / "pr.yaml"
        config.write_text(yaml.safe_dump(data))
        arms = {"plain": 30, f"{args.files:,} files": 31, f"{args.gib} GiB file": 32}
        seen: dict[str, list[tuple[float, float, str]]] = {name: [] for name in arms}
        for pair in range(args.pairs):
            for name, number in arms.items():
                seen[name].append(_check(config, number, root / "st"))
            print(f"pair {pair + 1}: " + ", ".join(f"{n} {s[-1][0]:.1f} s" for n, s in seen.items()), flush=True)
        plain = [s for s, _, _ in seen["plain"]]
        print(f"\n{'check':>16}  {'median s':>9}  {'peak RSS MB':>11}  ratio to plain (median of pairs)  what it said")
        for name, results in seen.items():
            secs = [s for s, _, _ in results]
            ratio = statistics.median(s / p for s, p in zip(secs, plain))
            print(
                f"{name:>16}  {statistics.median(secs):9.1f}  {max(r for _, r, _ in results):11.0f}  "
                f"{ratio:32.2f}  {results[-1][2]}"
            )
        limit = max(30.0, 4 * statistics.median(plain))
        print(f"\ntarget: each within max(30 s, 4 x plain) = {limit:.1f} s, peak RSS <= 300 MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
