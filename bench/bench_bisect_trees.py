"""A bisect across nine real llama.cpp trees from cold caches: bisectbot at a baseline revision
(today's) against this checkout, side by side (issue 24).

    python bench/bench_bisect_trees.py --baseline 23c1121        # about an hour on 2 cores
    python bench/bench_bisect_trees.py --baseline 23c1121 --new-first

The history (scripts/llama_eras.build_history): the trees of nine llama-cpp-python sdists,
2024-02 … 2026-10, each import followed by ordinary commits (a comment in examples/speculative),
docs-only commits or a broken build and its repair. The three oldest trees draw the draft greedily
(GOOD against the #29975 reference); from the 0.2.60 tree on the draft is stochastic with
#29975's defects (BAD): the first BAD commit is the 0.2.60 import.

Per side: a fresh state directory and an empty compiler cache (CCACHE_DIR of its own), then
`bisectbot bisect <its configs/llama-cpp-29975.yaml> --good <oldest import> --bad <head>` with
everything on by default (the cross-check arm too), timed from the outside. The baseline runs
from a git worktree at REV (first on PYTHONPATH), with that revision's config. Printed per side:
wall time, status and culprit, builds and their seconds (from the report), runs; then the ratio.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ERAS = [
    ("0.2.44", "good", ["code", "docs"]),
    ("0.2.50", "good", ["code", "docs"]),
    ("0.2.55", "good", ["code", "break", "repair"]),
    ("0.2.60", "bad", ["code", "docs"]),
    ("0.2.70", "bad", ["code"]),
    ("0.2.85", "bad", ["docs", "code"]),
    ("0.3.2", "bad", ["code"]),
    ("0.3.16", "bad", ["code", "docs"]),
    ("0.3.36", "bad", ["code"]),
]


def _eras():  # noqa: ANN202 - scripts/ is not a package
    spec = importlib.util.spec_from_file_location("llama_eras", ROOT / "scripts" / "llama_eras.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def bisect(tree: Path, repo: Path, hist: dict, work: Path, name: str) -> dict:
    """One cold bisect with the bisectbot of `tree` (this checkout or a worktree): its report
    with the wall time measured around it."""
    state, cache, out = work / f"state-{name}", work / f"ccache-{name}", work / f"{name}.json"
    for path in (state, cache):
        shutil.rmtree(path, ignore_errors=True)
    env = {**os.environ, "CCACHE_DIR": str(cache), "PYTHONPATH": os.pathsep.join([str(tree), str(ROOT)])}
    argv = [sys.executable, "-m", "bisectbot.cli", "bisect", str(tree / "configs" / "llama-cpp-29975.yaml")]
    argv += ["--good", hist["good"], "--bad", hist["head"], "--repo", str(repo), "--state", str(state)]
    argv += ["--json", str(out), "-q"]
    start = time.monotonic()
    proc = subprocess.run(argv, env=env, cwd=work, capture_output=True, text=True)
    wall = time.monotonic() - start
    report = json.loads(out.read_text()) if out.is_file() and out.stat().st_size else {}
    if not report:
        raise SystemExit(f"the {name} bisect gave no report (exit {proc.returncode}): {proc.stderr.strip()[-800:]}")
    report["wall"] = wall
    return report


def line(name: str, rep: dict, first_bad: str) -> str:
    actual = (rep.get("cost") or {}).get("actual") or {}
    right = "right" if rep.get("first_bad") == first_bad else "WRONG"
    arms = [v for v in rep.get("verdicts", []) if v.get("arm", "main") != "main"]
    return (
        f"{name:>8}: {rep['wall']:6.0f} s wall, {rep.get('status')} {str(rep.get('first_bad'))[:12]} ({right}), "
        f"{rep.get('builds')} builds ({actual.get('build_seconds', 0):.0f} s building the main target), "
        f"{rep.get('runs')} runs; arm verdicts: " + (", ".join(f"{v['role']} {v['verdict']}" for v in arms) or "none")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", required=True, help="the revision of bisectbot to compare with")
    parser.add_argument("--new-first", action="store_true", help="run this checkout's bisect first")
    parser.add_argument("--work", type=Path, help="work directory (default: a temporary one)")
    parser.add_argument("--json", type=Path, help="also write both reports' figures here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-trees-") as tmp:
        work = (args.work or Path(tmp)).resolve()
        work.mkdir(parents=True, exist_ok=True)
        repo = work / "llama.cpp"
        shutil.rmtree(repo, ignore_errors=True)
        hist = _eras().build_history(repo, ERAS)
        print(
            f"history: {len(hist['commits'])} commits over {len(ERAS)} trees ({ERAS[0][0]} … {ERAS[-1][0]}); "
            f"first bad {hist['first_bad'][:12]} (the 0.2.60 import)",
            flush=True,
        )
        worktree = work / "baseline"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(worktree)], capture_output=True)
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(worktree), args.baseline], check=True
        )
        try:
            sides = [("new", ROOT), ("baseline", worktree)]
            reports = {}
            for name, tree in sides if args.new_first else sides[::-1]:
                reports[name] = bisect(tree, repo, hist, work, name)
                print(line(name, reports[name], hist["first_bad"]), flush=True)
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(worktree)], capture_output=True
            )
    ratio = reports["new"]["wall"] / reports["baseline"]["wall"]
    same = reports["new"].get("first_bad") == reports["baseline"].get("first_bad") == hist["first_bad"]
    print(f"\nwall time new / baseline ({args.baseline}): {ratio:.2f}x; same culprit, the right one: {same}")
    if args.json:
        keep = ("wall", "status", "first_bad", "builds", "runs", "cost")
        args.json.write_text(json.dumps({k: {f: r.get(f) for f in keep} for k, r in reports.items()}, indent=1))


if __name__ == "__main__":
    main()
