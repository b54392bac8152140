"""bisectbot against the naive script a maintainer could write instead (issue 26), side by side
on a history of real llama.cpp code, warm caches.

    python bench/bench_naive.py [--commits 64] [--seed 3] [--pairs 2]    # about 25 minutes

The history: the llama-cpp-python 0.3.36 tree with #29975's fix as its first commit, then
`--commits` commits (scripts/llama_e2e.build_history): ordinary code and docs commits, one build
break and its repair, and one commit that brings back the draft-top defect.

The naive side: `git bisect run python bench/naive_step.py` (one build directory, ccache, seeds
1..1000 two at a time, a chi-square test at p = 0.001, exit 125 when the build fails). The
bisectbot side: `bisectbot bisect configs/llama-cpp-29975.yaml --good … --bad …` with everything
on by default (the cross-check arm too). Each side has its own ccache directory, warmed by one
untimed run of that side; every timed run starts from a fresh build directory (naive) or state
directory (bisectbot). Pairs alternate which side goes first. Printed per run: wall, the time
to the first printed answer (bisectbot's `[answer]` line; the naive script answers at its end),
the commit named and whether it is right; then the medians and the ratios (targets: wall ≤ 0.6×,
first answer ≤ 0.45×).
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
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT))

import llama_e2e  # noqa: E402

CONFIG = ROOT / "configs" / "llama-cpp-29975.yaml"


def naive(repo: Path, hist: dict, work: Path, ccache: Path, reference: dict) -> tuple[float, float, str]:
    build = work / "naive-build"
    shutil.rmtree(build, ignore_errors=True)
    cfg = yaml.safe_load(CONFIG.read_text())
    args = cfg["build"]["cmake_args"] + [a for a in cfg["build"]["variants"][0]["cmake_args"] if "CCACHE" not in a]
    env = {
        **os.environ,
        "CCACHE_DIR": str(ccache),
        "NAIVE_BUILD": str(build),
        "NAIVE_FIXTURES": str(ROOT / "fixtures"),
        "NAIVE_REFERENCE": json.dumps(reference),
        "NAIVE_CMAKE_ARGS": json.dumps(args),
    }
    git = ["git", "-C", str(repo)]
    subprocess.run([*git, "bisect", "reset"], capture_output=True)
    start = time.monotonic()
    subprocess.run([*git, "bisect", "start", hist["head"], hist["good"]], check=True, capture_output=True)
    proc = subprocess.run(
        [*git, "bisect", "run", sys.executable, str(ROOT / "bench" / "naive_step.py")],
        capture_output=True,
        text=True,
        env=env,
    )
    wall = time.monotonic() - start
    named = ""
    for line in proc.stdout.splitlines():
        if line.endswith("is the first bad commit"):
            named = line.split()[0]
    subprocess.run([*git, "bisect", "reset"], capture_output=True)
    return wall, wall, named


def bisectbot(repo: Path, hist: dict, work: Path, ccache: Path) -> tuple[float, float, str]:
    state, out = work / "bb-state", work / "bb.json"
    shutil.rmtree(state, ignore_errors=True)
    argv = [sys.executable, "-m", "bisectbot.cli", "bisect", str(CONFIG), "--good", hist["good"]]
    argv += ["--bad", hist["head"], "--repo", str(repo), "--state", str(state), "--json", str(out)]
    env = {**os.environ, "CCACHE_DIR": str(ccache), "BISECTBOT_PROGRESS": "plain"}
    start, answer = time.monotonic(), None
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    for line in proc.stdout:
        if answer is None and "[answer]" in line:
            answer = time.monotonic() - start
    proc.wait()
    wall = time.monotonic() - start
    report = json.loads(out.read_text()) if out.exists() and out.stat().st_size else {}
    return wall, answer if answer is not None else wall, str(report.get("first_bad") or "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--commits", type=int, default=64)
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument("--work", type=Path, help="work directory (default: a temporary one)")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from bisectbot.llama.forward import next_token_probs

    reference = {
        k: v for k, v in next_token_probs(ROOT / "fixtures" / "target.gguf", [1, 2, 3, 1, 2, 5]).items() if v > 0
    }
    with tempfile.TemporaryDirectory(prefix="bench-naive-") as tmp:
        work = (args.work or Path(tmp)).resolve()
        work.mkdir(parents=True, exist_ok=True)
        repo = work / "llama.cpp"
        shutil.rmtree(repo, ignore_errors=True)
        llama_e2e.prepare_tree(repo)
        hist = llama_e2e.build_history(repo, args.seed, n_commits=args.commits)
        print(f"history: {args.commits + 1} commits; first bad {hist['bad'][:12]}", flush=True)
        sides = {"naive": naive, "bisectbot": bisectbot}
        caches = {name: work / f"ccache-{name}" for name in sides}
        for name, fn in sides.items():  # warm each side's compiler cache, untimed
            extra = (reference,) if name == "naive" else ()
            wall, _, named = fn(repo, hist, work, caches[name], *extra)  # type: ignore[operator]
            print(f"warm-up {name}: {wall:.0f} s, named {named[:12]}", flush=True)
        walls: dict[str, list[float]] = {n: [] for n in sides}
        answers: dict[str, list[float]] = {n: [] for n in sides}
        for pair in range(args.pairs):
            order = list(sides) if pair % 2 else list(sides)[::-1]
            for name in order:
                extra = (reference,) if name == "naive" else ()
                wall, answer, named = sides[name](repo, hist, work, caches[name], *extra)  # type: ignore[operator]
                walls[name].append(wall)
                answers[name].append(answer)
                right = "right" if named == hist["bad"] else "WRONG"
                print(
                    f"pair {pair + 1} {name:>9}: {wall:6.1f} s wall, first answer at {answer:6.1f} s, "
                    f"named {named[:12]} ({right})",
                    flush=True,
                )
        bb, nv = statistics.median(walls["bisectbot"]), statistics.median(walls["naive"])
        ba, na = statistics.median(answers["bisectbot"]), statistics.median(answers["naive"])
        print(f"\nmedian wall: bisectbot {bb:.1f} s, naive {nv:.1f} s: {bb / nv:.2f}x (target ≤ 0.6x)")
        print(f"median first answer: bisectbot {ba:.1f} s, naive {na:.1f} s: {ba / na:.2f}x (target ≤ 0.45x)")


if __name__ == "__main__":
    main()
