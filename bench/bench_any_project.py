"""Minutes from clone to culprit for a maintainer of any project (issue 48): a cmake project, a
plain Makefile and a Python script with no build, each a generated 40-commit history whose
output is a word (bench/pickprojects.py: one commit moves `pick: red` .40 → .52, TV 0.12).

    python bench/bench_any_project.py [--kinds cmake make python] [--seeds 0 1] [--install]

Each row is real and cold: the project is cloned afresh, bisectbot's cache and ccache start
empty, `bisectbot init REPO --good v1.0 -- COMMAND` writes the config (nothing edited by hand)
and `bisectbot bisect` runs it through the CLI. `--install` also times what a new user does
first — a fresh venv and `pip install .` of this checkout — which every row would add once.
Seeds move the planted commit and the broken build; the kinds of one seed share them.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.pickprojects import KINDS, write_pick_history  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Row:
    kind: str
    seed: int
    found: bool
    clone: float
    init: float
    bisect: float
    builds: int
    bound: int
    runs: int

    @property
    def total(self) -> float:
        return self.clone + self.init + self.bisect


def _timed(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> float:
    start = time.monotonic()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise SystemExit(f"bench: {argv[3] if len(argv) > 3 else argv[0]} exited {done.returncode}: {tail[0]}")
    return time.monotonic() - start


def one(kind: str, seed: int, tmp: Path) -> Row:
    """Generate, clone, init, bisect: one cold run of a kind."""
    rng = random.Random(seed)
    culprit = rng.randrange(5, 36)
    broken = rng.choice([b for b in range(2, 38) if b not in (culprit, culprit - 1)])
    hist = write_pick_history(tmp / "upstream", kind, culprit=culprit, broken=broken, seed=seed)
    env = {k: v for k, v in os.environ.items() if k != "BISECTBOT_GITHUB_TOKEN"}
    env.update(XDG_CACHE_HOME=str(tmp / "cache"), CCACHE_DIR=str(tmp / "ccache"), CI="1")
    bisectbot = [sys.executable, "-m", "bisectbot.cli"]
    clone = _timed(["git", "clone", "-q", str(hist.repo), str(tmp / "project")], env)
    config, report = tmp / "pick.yaml", tmp / "report.json"
    init = _timed(
        [
            *bisectbot,
            "init",
            str(tmp / "project"),
            "--good",
            "v1.0",
            "--name",
            "pick",
            "-o",
            str(config),
            "--",
            *hist.command,
        ],
        env,
    )
    bisect = _timed([*bisectbot, "bisect", str(config), "--good", "v1.0", "--bad", "main", "--json", str(report)], env)
    r = json.loads(report.read_text())
    return Row(
        kind, seed, r["first_bad"] == hist.culprit, clone, init, bisect, r["builds"], r["builds_bound"], r["runs"]
    )


def install_seconds(tmp: Path) -> float:
    """A fresh venv and `pip install .` of this checkout (pip's own download cache kept)."""
    start = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(tmp / "venv")], check=True)
    pip = [str(tmp / "venv" / "bin" / "pip"), "install", "-q", str(ROOT)]
    subprocess.run(pip, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--install", action="store_true", help="also time a fresh venv + pip install")
    args = parser.parse_args()

    if args.install:
        with tempfile.TemporaryDirectory(prefix="bench-install-") as tmp:
            print(f"install (fresh venv, pip install .): {install_seconds(Path(tmp)):.0f} s")
    print(
        f"{'kind':<7} {'seed':>4} {'found':>5} {'clone s':>7} {'init s':>6} {'bisect s':>8} "
        f"{'builds':>6} {'bound':>5} {'runs':>6} {'minutes':>7}"
    )
    rows: list[Row] = []
    for seed in args.seeds:
        for kind in args.kinds:
            with tempfile.TemporaryDirectory(prefix=f"bench-any-{kind}-") as tmp:
                row = one(kind, seed, Path(tmp))
            rows.append(row)
            print(
                f"{row.kind:<7} {row.seed:>4} {str(row.found):>5} {row.clone:>7.1f} {row.init:>6.1f} "
                f"{row.bisect:>8.1f} {row.builds:>6} {row.bound:>5} {row.runs:>6} {row.total / 60:>7.2f}",
                flush=True,
            )
    print()
    for kind in args.kinds:
        mine = [r for r in rows if r.kind == kind]
        print(
            f"{kind:<7} found {sum(r.found for r in mine)}/{len(mine)}, "
            f"mean {sum(r.total for r in mine) / len(mine) / 60:.2f} min from clone to culprit"
        )


if __name__ == "__main__":
    main()
