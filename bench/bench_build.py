"""Where a llama.cpp build's time goes, on real trees of several eras (issue 24: measure first).

    python bench/bench_build.py                         # six trees (about half an hour on 2 cores)
    python bench/bench_build.py --versions 0.2.85 0.3.36

Each tree is the `vendor/llama.cpp` of a llama-cpp-python sdist (fetched once, like
scripts/llama_eras.py). Per tree, the target the shipped #29975 config builds there
(`speculative` or `llama-speculative`, with that era's options), three builds from a fresh build
directory, back to back:

  today    Unix Makefiles (cmake's default, what bisectbot uses now), ccache with an empty cache;
  ninja    the Ninja generator, ccache with an empty cache;
  warm     Ninja again, fresh build directory, with the ccache the previous tree's `ninja` build
           filled (the neighbour tree of the list: its distance in days and upstream commits is
           printed): what a bisect's next build gets from the cache at that distance.

Printed per build: configure and build seconds, for Ninja the compile and link seconds summed
over its log (`.ninja_log`: one line per output; objects are compiles, the rest links and
archives), the objects compiled, ccache hits, the peak memory of the build's largest process.
Then the mean cold build (configure + build) of each generator over the trees, side by side.
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
COMMON = ["-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF", "-DLLAMA_BUILD_TESTS=OFF"]
COMMON += ["-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF"]


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
    kind: str  # today | ninja | warm
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
    launcher = ["-DCMAKE_C_COMPILER_LAUNCHER=ccache", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
    log = work / f"{version}-{kind}.log"
    configure = ["cmake", "-S", str(tree), "-B", str(build_dir), *generator, *COMMON, *options, *launcher]
    conf_s, conf_mb, ok = timed(configure, env, log)
    build_s, build_mb, built = (0.0, 0.0, False)
    if ok:
        build_s, build_mb, built = timed(
            ["cmake", "--build", str(build_dir), "--target", target, "-j", str(jobs)], env, log
        )
    split = ninja_split(build_dir) if kind != "today" and built else (None, None, None)
    hits, misses = ccache_counts(cache)
    return Build(version, kind, target, conf_s, build_s, *split, hits, misses, max(conf_mb, build_mb), ok and built)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--versions", nargs="+", default=list(VERSIONS), help="sdist versions, oldest first")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--json", type=Path, help="also write every build's numbers here")
    parser.add_argument("--keep", type=Path, help="build here and keep the logs (default: a temporary directory)")
    args = parser.parse_args()
    if shutil.which("ccache") is None or shutil.which("ninja") is None:
        raise SystemExit("bench_build needs ccache and ninja (apt-get install ccache ninja-build)")
    e2e, eras = _scripts("llama_e2e"), _scripts("llama_eras")
    rows: list[Build] = []
    with tempfile.TemporaryDirectory(prefix="bench-build-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        previous: tuple[str, Path, int] | None = None  # (version, its ninja cache, its commit time)
        for version in args.versions:
            tree = extract(version, work / f"src-{version}", e2e.fetch_sdist)
            sha, when = eras.upstream_commit(version)
            fresh_today, fresh_ninja = work / f"cache-{version}-today", work / f"cache-{version}-ninja"
            for kind, cache in (("today", fresh_today), ("ninja", fresh_ninja)):
                rows.append(build(version, kind, tree, work, cache, args.jobs))
                print(_line(rows[-1]), flush=True)
            if previous is not None:
                prev_version, prev_cache, prev_when = previous
                warm_cache = work / f"cache-{version}-warm"
                shutil.copytree(prev_cache, warm_cache)
                rows.append(build(version, "warm", tree, work, warm_cache, args.jobs))
                print(f"{_line(rows[-1])}  (cache of {prev_version}, {(when - prev_when) / 86400:.0f} days before)")
            previous = (version, fresh_ninja, when)
            shutil.rmtree(tree.parents[2], ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1))
    cold = {k: [r.configure_s + r.build_s for r in rows if r.kind == k and r.ok] for k in ("today", "ninja")}
    if cold["today"] and cold["ninja"]:
        today, ninja = sum(cold["today"]) / len(cold["today"]), sum(cold["ninja"]) / len(cold["ninja"])
        print(
            f"\nmean cold build over {len(cold['today'])} trees: today {today:.0f} s, ninja {ninja:.0f} s: {ninja / today:.2f}x"
        )


def _line(r: Build) -> str:
    split = f"compile {r.compile_s:6.0f} s link {r.link_s:5.1f} s objects {r.objects:3d}" if r.objects else " " * 38
    return (
        f"{r.version:>7} {r.kind:>5} {r.target:>17}  configure {r.configure_s:5.1f} s  build {r.build_s:6.1f} s  "
        f"{split}  ccache {r.ccache_hits}/{r.ccache_hits + r.ccache_misses}  peak {r.peak_mb:5.0f} MB"
        + ("" if r.ok else "  FAILED")
    )


if __name__ == "__main__":
    main()
