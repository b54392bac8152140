"""Benchmark of bisectbot's scale-out: fewer candidates, more commits per round, more runs at once.

    python bench/bench_scale.py                 # all three parts
    python bench/bench_scale.py --part rounds   # builds and rounds for K = 1, 2, 4, 8 (seconds)
    python bench/bench_scale.py --part rule     # the input rule on a history over a real llama.cpp tree
    python bench/bench_scale.py --part runs     # runs per second of the llama config, serial vs parallel

rounds: simulated first-parent histories of N = 2,413 commits (llama.cpp 2024-03 … 2025-02) where
  a commit touches the CPU build of llama-speculative with probability 0.45 (the measured mix:
  ~55% touch no C/C++ source, header or CMake file of it). The line is narrowed by the rule
  (building.inputs.narrow, with each commit's changed path drawn from that mix), then searched by
  core.search.kary_search with K probes per round and decisive answers (the statistics of each
  verdict are benchmarked by bench_stats.py). Builds = distinct commits probed + the two ends +
  the culprit's own parent when the search skipped it.
rule: a generated git history over a real llama.cpp tree (the one scripts/llama_e2e.sh builds,
  ~/.cache/bisectbot/e2e), each commit appending a line to one real file drawn from the mix
  (server, other ggml backends, .github, .devops, docs, gguf-py, scripts, multimodal tools, and
  the files the CPU build compiles); the inputs come from that tree's real build (its
  dependency files). Prints the fraction the rule finds irrelevant, per category.
runs: llama-speculative of 0.3.36's tree (a kept binary of that state) with the llama config's
  command, through the sweep (judge.sweep.RunStream) at 1, 2 and 4 at once and with the
  adaptive throttle, alternating, on this machine: complete runs per second, and the share of
  attempts whose output was cut (rerun with the same seed, never counted).
"""

from __future__ import annotations

import argparse
import math
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_stats import table  # noqa: E402
from bisectbot.building.inputs import Change, InputRule, narrow  # noqa: E402
from bisectbot.config import Config, load_config  # noqa: E402
from bisectbot.core.search import kary_search  # noqa: E402
from bisectbot.judge.parallel import Throttle  # noqa: E402
from bisectbot.judge.sweep import ProgramExecutor, RunStream  # noqa: E402
from bisectbot.processes.procs import clean_env  # noqa: E402
from bisectbot.statistics.outcome import Verdict  # noqa: E402

E2E = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "bisectbot" / "e2e"

# (category, share of commits, whether the CPU build of llama-speculative compiles it)
MIX = [
    ("cpu build sources, headers, cmake", 0.45, True),
    ("server", 0.15, False),
    ("other ggml backends", 0.12, False),
    (".github", 0.05, False),
    (".devops", 0.035, False),
    ("docs, README", 0.05, False),
    ("gguf-py", 0.03, False),
    ("scripts", 0.03, False),
    ("multimodal tools", 0.035, False),
    ("tests", 0.05, False),
]


# -- rounds -----------------------------------------------------------------------------------------
def rounds_part(reps: int) -> None:
    n = 2413
    shares = [s for _, s, _ in MIX]
    rows = []
    results: dict[int, list[tuple[int, int, int]]] = {k: [] for k in (1, 2, 4, 8)}
    for rep in range(reps):
        rng = random.Random(1000 + rep)
        line = [f"{i:040x}" for i in range(n)]
        changes = {}
        for sha in line[1:]:
            cat = rng.choices(range(len(MIX)), weights=shares)[0]
            changes[sha] = [Change("src/llama.cpp" if MIX[cat][2] else "docs/x.md", "M")]
        rule = InputRule(frozenset({"src/llama.cpp"}))
        narrowed = narrow(line, changes, rule)
        kept = narrowed.line
        culprit = rng.randrange(1, len(kept))
        for k in results:
            res, rounds = kary_search(
                len(kept), k, lambda ps: [Verdict.BAD if p >= culprit else Verdict.GOOD for p in ps]
            )
            assert res.first_bad == culprit
            probed = set(res.asked) | {0, len(kept) - 1}
            parent_skipped = bool(narrowed.stands_for.get(kept[culprit - 1]))
            builds = len(probed) + (1 if parent_skipped else 0) + (0 if culprit - 1 in probed else 1)
            results[k].append((len(kept), rounds, builds))
    for k, got in results.items():
        nprime = sum(g[0] for g in got) / len(got)
        bound = max(math.ceil(math.log(g[0], k + 1)) + 2 for g in got)
        rows.append(
            (
                str(k),
                f"{n:,}",
                f"{nprime:,.0f}",
                f"{sum(g[1] for g in got) / len(got):.2f}",
                str(max(g[1] for g in got)),
                str(bound),
                f"{sum(g[2] for g in got) / len(got):.1f}",
                str(max(g[2] for g in got)),
                str(math.ceil(math.log2(max(g[0] for g in got))) + 3),
            )
        )
    print(f"# rounds and builds, {reps} simulated histories (mix: {', '.join(f'{c} {s:.0%}' for c, s, _ in MIX)})\n")
    print(
        table(
            (
                "K",
                "N",
                "N' (mean)",
                "rounds (mean)",
                "rounds (max)",
                "⌈log_(K+1) N'⌉ + 2 (max)",
                "builds (mean)",
                "builds (max)",
                "serial bound ⌈log2 N'⌉ + 3",
            ),
            rows,
        ),
        flush=True,
    )


# -- the rule on a real tree -----------------------------------------------------------------------
def category_files(tree: Path, inputs: set[str]) -> dict[str, list[str]]:
    files = subprocess.run(
        ["git", "-C", str(tree), "ls-files"], capture_output=True, text=True, check=True
    ).stdout.split()
    cats: dict[str, list[str]] = {c: [] for c, _, _ in MIX}
    for f in files:
        if f in inputs or (
            f.endswith(("CMakeLists.txt", ".cmake")) and not f.startswith(("tools/server", "examples/server"))
        ):
            cats["cpu build sources, headers, cmake"].append(f)
        elif f.startswith(("tools/server/", "examples/server/")):
            cats["server"].append(f)
        elif (
            f.startswith("ggml/src/ggml-")
            and not f.startswith(("ggml/src/ggml-cpu/", "ggml/src/ggml-base"))
            and f not in inputs
        ):
            cats["other ggml backends"].append(f)
        elif f.startswith(".github/"):
            cats[".github"].append(f)
        elif f.startswith(".devops/"):
            cats[".devops"].append(f)
        elif f.startswith("docs/") or f.endswith(".md"):
            cats["docs, README"].append(f)
        elif f.startswith("gguf-py/"):
            cats["gguf-py"].append(f)
        elif f.startswith("scripts/"):
            cats["scripts"].append(f)
        elif f.startswith(("tools/mtmd/", "examples/llava/")):
            cats["multimodal tools"].append(f)
        elif f.startswith("tests/"):
            cats["tests"].append(f)
    return cats


def rule_part(commits: int) -> None:
    from bisectbot.building.linkgraph import target_inputs
    from bisectbot.building.workspace import Workspace

    source, builds = E2E / "state" / "src", sorted((E2E / "state").glob("build-*"))
    if not source.is_dir() or not builds:
        print(f"\n# rule: skipped, no real tree built in {E2E} (run scripts/llama_e2e.sh first)")
        return
    inputs = next((found for b in builds if (found := target_inputs(b, ["llama-speculative"], source))), None)
    if inputs is None:
        print(f"\n# rule: skipped, no dependency files of llama-speculative under {E2E / 'state'}")
        return
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "clone", "-q", "--shared", str(source), str(tree)], check=True)
        env = {
            **os.environ,
            "GIT_AUTHOR_NAME": "b",
            "GIT_AUTHOR_EMAIL": "b@e",
            "GIT_COMMITTER_NAME": "b",
            "GIT_COMMITTER_EMAIL": "b@e",
        }
        cats = category_files(tree, set(inputs))
        rng = random.Random(7)
        shares = [s for _, s, _ in MIX]
        good = subprocess.run(
            ["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        drawn: dict[str, str] = {}
        for i in range(commits):
            cat = MIX[rng.choices(range(len(MIX)), weights=shares)[0]][0]
            path = rng.choice(cats[cat])
            comment = "#" if path.endswith((".py", ".yml", ".yaml", ".txt", ".cmake", ".sh", "Dockerfile")) else "//"
            with open(tree / path, "a") as fh:
                fh.write(f"\n{comment} bench {i}\n")
            subprocess.run(["git", "-C", str(tree), "commit", "-qam", f"{cat}: {path}"], env=env, check=True)
            drawn[
                subprocess.run(
                    ["git", "-C", str(tree), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
                ).stdout.strip()
            ] = cat
        ws = Workspace(str(tree), tree)
        line = ws.first_parent_line(good, list(drawn)[-1])
        narrowed = narrow(line, ws.changes(good, line[-1]), InputRule(frozenset(inputs)))
    kept = set(narrowed.line[1:-1])
    rows = []
    for cat, _, in_build in MIX:
        shas = [s for s, c in drawn.items() if c == cat and s != line[-1]]
        skipped = sum(s not in kept for s in shas)
        rows.append(
            (cat, "yes" if in_build else "no", str(len(shas)), f"{skipped} ({skipped / max(1, len(shas)):.0%})")
        )
    total = len(line) - 2
    compiled = {c: comp for c, _, comp in MIX}
    intended = sum(1 for s, c in drawn.items() if s != line[-1] and not compiled[c])
    print(
        f"\n# the input rule on {commits} generated commits over a real llama.cpp tree "
        f"({len(inputs)} inputs of llama-speculative from its build's dependency files)\n"
    )
    print(table(("category", "compiled by the CPU build", "commits", "skipped as equivalent"), rows))
    print(
        f"\nskipped {total - len(kept)} of {total} ({(total - len(kept)) / total:.1%}); the mix has "
        f"{intended} ({intended / total:.1%}) outside the CPU build; none compiled skipped: "
        f"{all(s in kept for s, c in drawn.items() if s != line[-1] and compiled[c])}",
        flush=True,
    )


# -- runs per second ---------------------------------------------------------------------------------
def find_executor(cfg: Config, workdir: Path) -> tuple[Path, ProgramExecutor] | None:
    """A kept llama-speculative of the e2e state whose run of seed 1 parses under the config
    (the sweep's own executor: cut output rerun, the config's completeness rule)."""
    for binary in sorted((E2E / "state" / "kept").glob("*/*/llama-speculative"), key=lambda p: -p.stat().st_mtime):
        executor = ProgramExecutor(
            cfg.run.templates[0].argv,
            {"binary": str(binary), "fixtures": str(ROOT / "fixtures")},
            run_cfg=cfg.run,
            parse_cfg=cfg.parse,
            workdir=workdir,
            env=clean_env({}),
        )
        if executor.run(1).ok:
            return binary, executor
    return None


def runs_part(seeds: int, reps: int) -> None:
    cfg = load_config(ROOT / "configs" / "llama-cpp-29975.yaml")
    cores = os.cpu_count() or 1
    modes: list[tuple[str, int | None]] = [
        ("1 at a time", 1),
        ("2 at a time", 2),
        ("4 at a time", 4),
        (f"adaptive (start at {cores})", None),
    ]
    totals = {name: [0, 0, 0, 0.0] for name, _ in modes}  # complete, attempts, cut, seconds
    throttle = Throttle(cores)  # one for the whole bench, as a runner keeps one for all its commits
    with tempfile.TemporaryDirectory() as tmp:
        found = find_executor(cfg, Path(tmp))
        if found is None:
            print(f"\n# runs: skipped, no working llama-speculative kept under {E2E} (run scripts/llama_e2e.sh first)")
            return
        binary, executor = found
        for rep in range(reps):
            for name, jobs in modes:  # alternating, so load changes hit every mode alike
                start = 1 + (rep * len(modes) + modes.index((name, jobs))) * seeds
                recs: list = []
                t0 = time.perf_counter()
                with RunStream(
                    range(start, start + seeds), {}, executor, recs.extend, jobs=jobs if jobs is not None else throttle
                ) as stream:
                    for _ in stream:
                        pass
                acc = totals[name]
                acc[0] += sum(r.ok for r in recs)
                acc[1] += sum(r.attempts for r in recs)
                acc[2] += sum(r.attempts - 1 + (r.status == "incomplete") for r in recs)
                acc[3] += time.perf_counter() - t0
    base = totals["1 at a time"][0] / totals["1 at a time"][3]
    rows = [
        (name, f"{c:,}", f"{c / s:.1f}", f"{(c / s) / base:.2f}", f"{cut / max(1, att):.1%}")
        for name, (c, att, cut, s) in totals.items()
    ]
    print(
        f"\n# runs of the llama config ({binary.parent.name[:12]}'s llama-speculative, {reps} × {seeds} seeds per "
        f"mode, alternating, {cores} cores; cut runs rerun with the same seed and never counted)\n"
    )
    print(table(("runs at once", "complete runs", "per second", "vs 1 at a time", "attempts cut"), rows), flush=True)
    levels = [level for level, *_ in throttle.history]
    print(
        f"\nadaptive: windows at each level {dict(sorted((k, levels.count(k)) for k in set(levels)))}, "
        f"now at {throttle.level}"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=["all", "rounds", "rule", "runs"], default="all")
    ap.add_argument("--reps", type=int, default=400, help="simulated histories (rounds)")
    ap.add_argument("--commits", type=int, default=400, help="generated commits over the real tree (rule)")
    ap.add_argument("--seeds", type=int, default=200, help="seeds per mode and repetition (runs)")
    ap.add_argument("--run-reps", type=int, default=5, help="alternating repetitions (runs)")
    args = ap.parse_args()
    t0 = time.time()
    if args.part in ("all", "rounds"):
        rounds_part(args.reps)
    if args.part in ("all", "rule"):
        rule_part(args.commits)
    if args.part in ("all", "runs"):
        runs_part(args.seeds, args.run_reps)
    print(f"\n(bench took {time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
