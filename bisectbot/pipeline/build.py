"""Build stage: cmake configure + build of the named targets, incremental across commits.

One persistent build directory is reused for every commit (so a commit that differs in one file
rebuilds in seconds), with ccache when it is installed. After a successful build the binaries
(and any `keep` globs, e.g. shared libraries) are copied to a per-commit directory: a retest
never rebuilds, and a binary never runs against another commit's libraries.

A failed or timed-out build, or one that leaves no binary, is a *skip* for the bisect (like
`git bisect skip`), with its log kept.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
from pathlib import Path
from typing import Callable, Iterable

from bisectbot import __version__
from bisectbot.config import BuildConfig
from bisectbot.core.records import BuildRecord
from bisectbot.core.reports import Environment
from bisectbot.edges.procs import clean_env, run
from bisectbot.edges.storage import StateDir
from bisectbot.edges.workspace import Workspace
from bisectbot.pipeline.events import Building, BuildPhase, Built, Events


class Builder:
    """Builds commits of one project into one state directory, each build stored for good.

    A stored build is final, unless its binaries were deleted by hand or it timed out and the
    timeout has since been raised. `built` lists what this process built (not replayed)."""

    def __init__(self, state: StateDir, workspace: Workspace, events: Events, secrets: Iterable[str] = ()):
        self.state, self.workspace, self.events = state, workspace, events
        self.secrets = tuple(secrets)
        self.built: list[str] = []

    def ensure(self, sha: str, cfg: BuildConfig) -> BuildRecord:
        """The commit's build record for `cfg`, building it only if no usable build is stored."""
        key = build_key(cfg)
        store = self.state.store
        rec = store.build(key, sha)
        retry_timeout = rec is not None and rec.status == "timeout" and cfg.timeout > rec.seconds + 1
        if rec is not None and not retry_timeout and (
                not rec.ok or all(Path(p).is_file() for p in rec.binaries.values())):
            return rec
        if rec is not None:
            store.forget_build(key, sha)
        self.events.emit(Building(sha, tuple(cfg.targets)))
        source = self.workspace.checkout(sha)
        rec = build_commit(
            cfg, sha, source,
            self.state.build_dir(build_dir_key(cfg)),
            self.state.kept_dir(key, sha),
            self.state.log_path(f"build-{key}-{sha}.log"),
            progress=lambda phase: self.events.emit(BuildPhase(sha, phase)),
            secrets=self.secrets,
        )
        store.put_build(key, rec)
        self.built.append(sha)
        self.events.emit(Built(sha, rec.status, rec.seconds, rec.reason))
        return rec


def build_key(cfg: BuildConfig) -> str:
    """Identifies builds that are interchangeable: same cmake arguments, targets, binaries."""
    data = {"args": cfg.cmake_args, "targets": cfg.targets, "binaries": cfg.binaries, "keep": cfg.keep}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:12]


def build_dir_key(cfg: BuildConfig) -> str:
    """Builds with the same cmake arguments share one build directory, whatever their targets:
    building llama-server after llama-speculative at a commit reuses every common object."""
    return hashlib.sha256(json.dumps(cfg.cmake_args).encode()).hexdigest()[:12]


def ccache_args(source: Path, build_dir: Path) -> tuple[list[str], dict[str, str]]:
    """cmake launcher flags and environment for ccache, or nothing when it is not installed.

    CCACHE_BASEDIR is the common parent of source and build directory, so both the sources and
    the generated headers are hashed by relative path: another state directory (or worktree) of
    the same layout hits the same cache. CCACHE_NOHASHDIR keeps the build path out of the hash.
    """
    if shutil.which("ccache") is None:
        return [], {}
    base = os.path.commonpath([str(source.resolve()), str(build_dir.resolve())])
    return (
        ["-DCMAKE_C_COMPILER_LAUNCHER=ccache", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"],
        {"CCACHE_BASEDIR": base, "CCACHE_NOHASHDIR": "1"},
    )


def cmake_configure_argv(cfg: BuildConfig, source: Path, build_dir: Path) -> list[str]:
    launcher, _ = ccache_args(source, build_dir)
    return ["cmake", "-S", str(source), "-B", str(build_dir), *launcher, *cfg.cmake_args]


def build_commit(
    cfg: BuildConfig,
    sha: str,
    source: Path,
    build_dir: Path,
    kept_dir: Path,
    log: Path,
    progress: Callable[[str], None] = lambda _: None,
    secrets: Iterable[str] = (),
) -> BuildRecord:
    """Configure (when needed) and build `source` (already checked out at `sha`)."""
    build_dir.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    _, cc_env = ccache_args(source, build_dir)
    env = clean_env(cc_env, drop=secrets)
    jobs = str(cfg.jobs or os.cpu_count() or 1)
    configure = cmake_configure_argv(cfg, source, build_dir)
    compile_ = ["cmake", "--build", str(build_dir), "--target", *cfg.targets, "-j", jobs]
    seconds = 0.0
    for step, argv in (("configure", configure), ("build", compile_)):
        progress(step)
        with open(log, "a") as fh:
            fh.write(f"$ {' '.join(argv)}\n")
        remaining = cfg.timeout - seconds
        result = run(argv, cwd=build_dir, env=env, timeout=remaining, log=log) if remaining > 0 else None
        seconds += result.seconds if result else 0.0
        if result is None or result.timed_out:
            return BuildRecord(sha, "timeout", {}, str(log), seconds,
                               f"{step} exceeded the build timeout of {cfg.timeout:g} s")
        if result.returncode != 0:
            return BuildRecord(sha, "failed", {}, str(log), seconds,
                               f"cmake {step} failed (exit {result.returncode}): {_last_error(log)}")
    binaries, missing = _keep(cfg, build_dir, kept_dir)
    if missing:
        return BuildRecord(sha, "no-binary", {}, str(log), seconds,
                           f"build left no binary for {{{missing}}} (looked for {', '.join(cfg.binaries[missing])})")
    return BuildRecord(sha, "ok", binaries, str(log), seconds, "")


def _keep(cfg: BuildConfig, build_dir: Path, kept_dir: Path) -> tuple[dict[str, str], str | None]:
    """Copy the binaries and keep-globs into `kept_dir`; return placeholder → kept path."""
    if kept_dir.exists():
        shutil.rmtree(kept_dir)
    kept_dir.mkdir(parents=True)
    found: dict[str, str] = {}
    for name, candidates in cfg.binaries.items():
        src = next((build_dir / c for c in candidates if (build_dir / c).is_file()), None)
        if src is None:
            return {}, name
        dst = kept_dir / src.name
        shutil.copy2(src, dst)
        found[name] = str(dst)
    for pattern in cfg.keep:
        for src in build_dir.glob(pattern):
            if src.is_file():
                shutil.copy2(src, kept_dir / src.name)
    return found, None


def _last_error(log: Path) -> str:
    """The most telling line of a build log: the first 'error' line, else the last line."""
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    for ln in lines:
        if "error" in ln.lower() and not ln.startswith("$"):
            return ln[:200]
    return lines[-1][:200] if lines else "no output"


# -- the toolchain, for reports -------------------------------------------------------------------
def compiler_version() -> str:
    """First line of the C++ compiler's --version."""
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or "c++"
    res = run([cxx, "--version"], timeout=10)
    return res.stdout.splitlines()[0] if res.returncode == 0 and res.stdout else "unknown"


def cmake_version() -> str:
    res = run(["cmake", "--version"], timeout=10)
    return res.stdout.splitlines()[0] if res.returncode == 0 and res.stdout else "unknown"


def toolchain(cfg: BuildConfig) -> Environment:
    """What the builds were made with and where, as reports state it."""
    return Environment(
        compiler=compiler_version(), cmake=cmake_version(), cmake_args=list(cfg.cmake_args),
        host=platform.node(), platform=platform.platform(), python=platform.python_version(),
        bisectbot=__version__,
    )
