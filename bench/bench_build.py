"""Where a llama.cpp build's time goes, on real trees of several eras, and the build bisectbot
chooses against today's (issue 24).

    python bench/bench_build.py                         # six trees (about 25 minutes on 2 cores)
    python bench/bench_build.py --versions 0.2.85 0.3.36 --kinds today chosen

Each tree is the `vendor/llama.cpp` of a llama-cpp-python sdist (fetched once, like
scripts/llama_eras.py). Per tree, the target the shipped #29975 config builds there
(`speculative` or `llama-speculative`, with that era's options), builds from a fresh build
directory with an empty ccache, back to back:

  today    Unix Makefiles, cmake's Release flags (-O3): what bisectbot built before issue 24;
  ninja    the Ninja generator (build.generator: auto, where ninja is installed), -O3;
  chosen   Ninja and the shipped config's cmake arguments (-O1: the same outputs per seed,
           `scripts/llama_e2e.py same-outputs`);
  warm     (only when asked) Ninja again, fresh build directory, with the ccache the previous
           tree's `ninja` build filled: what a bisect's next build gets at that distance.

With --distance, for each pair of neighbouring trees: the share of the older build's objects
ccache would still hit after 1, 10, 100 or 1,000 of the files that differ between the trees have
changed (a random sample; an object hits when none of the files it was compiled from changed,
per Ninja's dependency log): commits of a real history in between are that many files apart.

Printed per build: configure and build seconds, for Ninja the compile and link seconds summed
over its log (`.ninja_log`: one line per output; objects are compiles, the rest links and
archives), the objects compiled, ccache hits, the peak memory of the build's largest process.
Then the mean cold build (configure + build) of each kind over the trees, and its ratio to today's.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
VERSIONS = ("0.2.55", "0.2.70", "0.2.85", "0.3.2", "0.3.16", "0.3.36")
KINDS = ("today", "ninja", "chosen", "warm")
# Before issue 24 the shipped config built with cmake's Release flags (-O3); `chosen` takes the
# shipped config's arguments as they are now.
TODAY = ["-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_BUILD_TESTS=OFF"]
TODAY += ["-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF"]


def shipped_args() -> list[str]:
    """The shipped #29975 config's cmake arguments common to every variant."""
    import yaml

    data = yaml.safe_load((REPO_ROOT / "configs" / "llama-cpp-29975.yaml").read_text())
    return list(data["build"]["cmake_args"])


def _scripts(name: str):  # noqa: ANN202 - a module of scripts/, which is not a package
    spec = importlib.util.spec_from_file_location(name, REPO_ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    sys.path.insert(0, str(REPO_ROOT / "scripts"))  # llama_eras imports llama_e2e by name
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@dataclass
class Build:
    version: str
    kind: str  # today | ninja | chosen | warm
    target: str
    configure_s: float
    build_s: float
    compile_s: float | None  # summed over objects (Ninja's log), not wall time
    link_s: float | None
    objects: int | None
    ccache_hits: int
    ccache_misses: int
    peak_mb: float
    ok: bool


def era_options(tree: Path) -> tuple[str, list[str]]:
    """The target and options the shipped config's variant for this tree would use."""
    if (tree / "ggml" / "CMakeLists.txt").is_file():
        return "llama-speculative", ["-DGGML_NATIVE=OFF", "-DGGML_CCACHE=OFF", "-DGGML_CUDA=OFF", "-DGGML_METAL=OFF"]
    spec = (tree / "examples" / "speculative" / "CMakeLists.txt").read_text()
    target = "llama-speculative" if "llama-speculative" in spec else "speculative"
    return target, ["-DLLAMA_NATIVE=OFF", "-DLLAMA_CCACHE=OFF"]


def extract(version: str, dest: Path, fetch) -> Path:  # noqa: ANN001
    prefix = f"llama_cpp_python-{version}/vendor/llama.cpp/"
    with tarfile.open(fetch(version)) as tar:
        tar.extractall(dest, members=[m for m in tar.getmembers() if m.name.startswith(prefix)], filter="data")
    for pointer in (dest / prefix).rglob(".git"):  # submodule pointers into the sdist's .git/modules
        if pointer.is_file():
            pointer.unlink()
    return dest / prefix


def timed(argv: list[str], env: dict[str, str], log: Path) -> tuple[float, float, bool]:
    """(seconds, peak MB of the largest process, ok): run in a helper whose children's
    rusage holds the maximum resident set of any process it waited for."""
    helper = (
        "import resource, subprocess, sys, json\n"
        "r = subprocess.run(sys.argv[1:], stdout=open(" + repr(str(log)) + ", 'ab'), stderr=subprocess.STDOUT)\n"
        "print(json.dumps([r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss]))\n"
    )
    start = time.monotonic()
    res = subprocess.run([sys.executable, "-c", helper, *argv], env=env, capture_output=True, text=True)
    seconds = time.monotonic() - start
    code, kb = json.loads(res.stdout.strip().splitlines()[-1])
    return seconds, kb / 1024, code == 0


def ninja_split(build_dir: Path) -> tuple[float, float, int]:
    """(compile seconds, link/archive seconds, objects) from .ninja_log (v5: start end mtime out hash)."""
    compile_ms = link_ms = 0
    objects = 0
    for line in (build_dir / ".ninja_log").read_text().splitlines()[1:]:
        start, end, _, out, *_ = line.split("\t")
        ms = int(end) - int(start)
        if out.endswith(".o"):
            compile_ms, objects = compile_ms + ms, objects + 1
        else:
            link_ms += ms
    return compile_ms / 1000, link_ms / 1000, objects


def ccache_counts(cache: Path) -> tuple[int, int]:
    env = {**os.environ, "CCACHE_DIR": str(cache)}
    out = subprocess.run(["ccache", "--print-stats"], env=env, capture_output=True, text=True).stdout
    stats = dict(line.split("\t", 1) for line in out.splitlines() if "\t" in line)
    hits = int(stats.get("direct_cache_hit", 0)) + int(stats.get("preprocessed_cache_hit", 0))
    return hits, int(stats.get("cache_miss", 0))


def build(version: str, kind: str, tree: Path, work: Path, cache: Path, jobs: int) -> Build:
    target, options = era_options(tree)
    build_dir = work / f"build-{version}-{kind}"
    shutil.rmtree(build_dir, ignore_errors=True)
    env = {**os.environ, "CCACHE_DIR": str(cache)}
    subprocess.run(["ccache", "--zero-stats"], env=env, capture_output=True)
    generator = ["-G", "Ninja"] if kind != "today" else []
    common = shipped_args() if kind == "chosen" else TODAY
    launcher = ["-DCMAKE_C_COMPILER_LAUNCHER=ccache", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
    log = work / f"{version}-{kind}.log"
    configure = ["cmake", "-S", str(tree), "-B", str(build_dir), *generator, *common, *options, *launcher]
    conf_s, conf_mb, ok = timed(configure, env, log)
    build_s, build_mb, built = (0.0, 0.0, False)
    if ok:
        build_s, build_mb, built = timed(
            ["cmake", "--build", str(build_dir), "--target", target, "-j", str(jobs)], env, log
        )
    split = ninja_split(build_dir) if kind != "today" and built else (None, None, None)
    hits, misses = ccache_counts(cache)
    return Build(version, kind, target, conf_s, build_s, *split, hits, misses, max(conf_mb, build_mb), ok and built)


def object_inputs(build_dir: Path, target: str, source: Path) -> dict[str, set[str]]:
    """Per object the target's Ninja build compiled, the repository files it was compiled from
    (bisectbot's own reader of Ninja's dependency log)."""
    from bisectbot.building.linkgraph import ninja_object_inputs
    from bisectbot.processes.procs import clean_env

    found = ninja_object_inputs(build_dir, [target], source, clean_env())
    if found is None:
        raise SystemExit(f"{build_dir}: Ninja's log does not say what {target}'s objects were compiled from")
    return found


def changed_files(old: Path, new: Path) -> list[str]:
    """The files that differ between two trees (added, removed or edited), relative paths."""

    def files(root: Path) -> dict[str, bytes]:
        return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}

    a, b = files(old), files(new)
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))


def hit_rate(objects: dict[str, set[str]], changed: list[str], distance: int, draws: int = 200, seed: int = 0) -> float:
    """The share of objects ccache would hit after `distance` of the changed files changed (a
    random sample of them, the mean over `draws` samples): an object hits when none of the files
    it was compiled from is among them. The distance is counted in files changed, not commits."""
    import random

    rng = random.Random(seed)
    k = min(distance, len(changed))
    total = 0.0
    for _ in range(draws):
        sample = set(rng.sample(changed, k))
        total += sum(1 for deps in objects.values() if not deps & sample) / len(objects)
    return total / draws


def distance_table(build_dir: Path, target: str, old: Path, new: Path) -> list[str]:
    """Expected ccache hits between the build of `old` and trees part of the way to `new`."""
    objects = object_inputs(build_dir, target, old)
    changed = changed_files(old, new)
    rows = [f"{len(objects)} objects of {target}; {len(changed)} files differ between the trees"]
    for distance in (1, 10, 100, 1000):
        rows.append(f"  {distance:>5} changed files: {hit_rate(objects, changed, distance):.0%} of objects hit")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--versions", nargs="+", default=list(VERSIONS), help="sdist versions, oldest first")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", type=Path, help="also write every build's numbers here")
    parser.add_argument("--keep", type=Path, help="build here and keep the logs (default: a temporary directory)")
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=["today", "ninja", "chosen"])
    parser.add_argument(
        "--distance", action="store_true", help="also the expected ccache hits part of the way to the next tree"
    )
    args = parser.parse_args()
    if shutil.which("ccache") is None or shutil.which("ninja") is None:
        raise SystemExit("bench_build needs ccache and ninja (apt-get install ccache ninja-build)")
    e2e, eras = _scripts("llama_e2e"), _scripts("llama_eras")
    rows: list[Build] = []
    with tempfile.TemporaryDirectory(prefix="bench-build-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        previous: tuple[str, Path, int] | None = None  # (version, its ninja cache, its commit time)
        previous_tree: tuple[str, Path, str] | None = None  # --distance: (version, tree, target)
        for version in args.versions:
            tree = extract(version, work / f"src-{version}", e2e.fetch_sdist)
            sha, when = eras.upstream_commit(version)
            fresh_ninja = work / f"cache-{version}-ninja"
            for kind in (k for k in args.kinds if k != "warm"):
                rows.append(build(version, kind, tree, work, work / f"cache-{version}-{kind}", args.jobs))
                print(_line(rows[-1]), flush=True)
            if previous is not None and "warm" in args.kinds:
                prev_version, prev_cache, prev_when = previous
                warm_cache = work / f"cache-{version}-warm"
                shutil.copytree(prev_cache, warm_cache)
                rows.append(build(version, "warm", tree, work, warm_cache, args.jobs))
                print(f"{_line(rows[-1])}  (cache of {prev_version}, {(when - prev_when) / 86400:.0f} days before)")
            if args.distance and previous_tree is not None and "ninja" in args.kinds:
                prev_version, prev_tree, prev_target = previous_tree
                print(f"ccache hits from {prev_version}'s build part of the way to {version}'s tree:")
                for row in distance_table(work / f"build-{prev_version}-ninja", prev_target, prev_tree, tree):
                    print("  " + row, flush=True)
                shutil.rmtree(prev_tree.parents[2], ignore_errors=True)
            previous = (version, fresh_ninja, when)
            if args.distance:
                previous_tree = (version, tree, era_options(tree)[0])
            else:
                shutil.rmtree(tree.parents[2], ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1))
    print()
    for line in summary(rows):
        print(line)


def summary(rows: list[Build]) -> list[str]:
    """The mean cold build (configure + build) of each kind over the trees every kind built, and
    its ratio to today's."""
    kinds = [k for k in KINDS if k != "warm" and any(r.kind == k for r in rows)]
    cold = {(r.version, r.kind): r.configure_s + r.build_s for r in rows if r.ok}
    trees = [v for v in dict.fromkeys(r.version for r in rows) if all((v, k) in cold for k in kinds)]
    if "today" not in kinds or not trees:
        return []
    mean = {k: sum(cold[v, k] for v in trees) / len(trees) for k in kinds}
    return [
        f"mean cold build over {len(trees)} trees: {k} {mean[k]:.0f} s ({mean[k] / mean['today']:.2f}x today's)"
        for k in kinds
    ]


def _line(r: Build) -> str:
    split = f"compile {r.compile_s:6.0f} s link {r.link_s:5.1f} s objects {r.objects:3d}" if r.objects else " " * 38
    return (
        f"{r.version:>7} {r.kind:>5} {r.target:>17}  configure {r.configure_s:5.1f} s  build {r.build_s:6.1f} s  "
        f"{split}  ccache {r.ccache_hits}/{r.ccache_hits + r.ccache_misses}  peak {r.peak_mb:5.0f} MB"
        + ("" if r.ok else "  FAILED")
    )


if __name__ == "__main__":
    main()
