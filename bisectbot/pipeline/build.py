"""Build stage: cmake configure + build of the targets a commit's tree has, incremental across commits.

One build directory per cmake arguments is reused across commits (a commit that differs in one
file rebuilds in seconds), with ccache when it is installed. After a successful build the
binaries (and any `keep` globs, e.g. shared libraries) are copied to a per-commit directory: a
retest never rebuilds, and a binary never runs against another commit's libraries.

Why each step:

* **Build variants.** Targets and options get renamed over a project's life. Per commit the
  first variant the tree supports is built: cmake must use every `-D` option of the variant (a
  misspelt or retired option is otherwise ignored in silence: cmake's "Manually-specified
  variables were not used" warning is forced on every configure by `-U` first) and
  `cmake --build … --target help` must list its targets. The variant built is recorded.
* **Binary provenance.** Every candidate path of every variant's binaries is deleted before
  building, so the binary kept is one this build made, never a stale file of another commit.
* **A clean directory before giving up.** A reused build directory can keep rules of another
  tree; a configure or build failure there is retried once in a fresh directory, and the record
  says so when that succeeded.
* **One build at a time per directory.** A build holds its directory's lock (edges.dirlock),
  and so do its children, so a build a killed bot left running never has another beside it.
* **A moved state directory is no failure.** cmake refuses a build directory whose
  CMakeCache.txt was written elsewhere; such a directory is started afresh before configuring.
* **Keys that cannot go stale.** A stored build is reused only if the commit, the cmake
  arguments and variants, the contents of files they name and the toolchain are the same.
* **Untrusted code apart.** A pull request's head is built in the sandbox (edges.sandbox:
  bubblewrap over a throwaway box), under build keys of its own, without ccache; the state
  directory it builds into is the box's, deleted after the check. Its failure reasons are
  shown with anything that looks like a credential replaced (`procs.redact`).
* **Nothing reused that a trusted build did not leave.** A kept binary is reused only if its
  sha256 is the one recorded when it was built (else it is rebuilt); a build directory is
  reused only if no file in it is newer than the end of the last trusted build there (else it
  is wiped first); a binary or kept file that is a link out of the build directory is not kept.

A failed or timed-out build, one that leaves no binary, a tree no variant fits, or a commit
that cannot be checked out is a *skip* for the bisect (like `git bisect skip`), with its reason.
"""

from __future__ import annotations

import functools
import os
import platform
import shlex
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

from bisectbot import __version__
from bisectbot.config import BuildConfig, BuildVariant
from bisectbot.core.inputs import parse_depfile
from bisectbot.core.keys import json_key
from bisectbot.core.records import BuildRecord
from bisectbot.core.reports import Environment
from bisectbot.edges import dirlock
from bisectbot.edges.files import file_sha256
from bisectbot.edges.procs import clean_env, redact, run
from bisectbot.edges.sandbox import Sandbox
from bisectbot.edges.storage import StateDir
from bisectbot.edges.workspace import Export, Workspace
from bisectbot.errors import GitError, StateError
from bisectbot.pipeline.events import Building, BuildPhase, Built, Events

UNUSED_HEADER = "Manually-specified variables were not used by the project:"
# How long a build waits for its directory's lock (held by an orphaned build no record named).
BUILD_DIR_WAIT = 60.0
# Added to the build directory key of sandboxed builds (never a cmake argument).
UNTRUSTED_DIR = "#untrusted"


class Builder:
    """Builds commits of one project into one state directory, each build stored for good.

    A stored build is final, unless its binaries were deleted by hand or it timed out and the
    timeout has since been raised. `built` lists what this process built (not replayed).
    `values` fills `{config_dir}` and `{fixtures}` in cmake arguments. With `sandbox` every
    commit is untrusted code: built in the sandbox, under keys of its own."""

    def __init__(
        self,
        state: StateDir,
        workspace: Workspace | Export,
        events: Events,
        secrets: Iterable[str] = (),
        values: Mapping[str, str] | None = None,
        sandbox: Sandbox | None = None,
    ):
        self.state, self.workspace, self.events = state, workspace, events
        self.secrets = tuple(secrets)
        self.values = dict(values or {})
        self.sandbox = sandbox
        self.built: list[str] = []
        # called before a commit is built (nothing stored to reuse): --max-builds / --deadline
        # raise there (pipeline.budget), between steps, before anything of the build is done
        self.guard: Callable[[], None] | None = None
        # the config as the user named it, for the `bisectbot build-log` command a failed build
        # points to (None: no command is named, e.g. for the bot, whose users have no shell here)
        self.config_path: str | None = None

    def key(self, cfg: BuildConfig) -> str:
        key = build_key(cfg, self.values)
        if self.sandbox is None:
            return key
        return json_key([key, self.sandbox.key()], 12, sort_keys=False)

    def stored(self, sha: str, cfg: BuildConfig) -> BuildRecord | None:
        """The commit's usable stored build for `cfg` (its binaries still kept), without building."""
        rec = self.state.store.build(self.key(cfg), sha)
        if rec is None or not rec.ok or not intact(rec):
            return None
        return rec

    def ensure(self, sha: str, cfg: BuildConfig) -> BuildRecord:
        """The commit's build record for `cfg`, building it only if no usable build is stored."""
        key = self.key(cfg)
        store = self.state.store
        rec = store.build(key, sha)
        retry_timeout = rec is not None and rec.status == "timeout" and cfg.timeout > rec.seconds + 1
        if rec is not None and not retry_timeout and (not rec.ok or intact(rec)):
            if rec.ok:  # used: `bisectbot gc` removes the least recently used kept binaries first
                _touch(self.state.kept_dir(key, sha))
            return rec
        if self.guard is not None:
            self.guard()
        if rec is not None:
            store.forget_build(key, sha)
        self.events.emit(Building(sha, tuple(cfg.choices[0].targets)))
        log = self.state.log_path(f"build-{key}-{sha}.log")
        try:
            source = self.workspace.checkout(sha)
        except GitError as exc:  # not stored: the next run may well check it out
            rec = BuildRecord(sha, "checkout-failed", {}, "", 0.0, str(exc))
            self.events.emit(Built(sha, rec.status, 0.0, rec.reason))
            return rec
        rec = build_commit(
            cfg,
            sha,
            source,
            self.state,
            key,
            log,
            expand=self.expand,
            progress=lambda phase: self.events.emit(BuildPhase(sha, phase)),
            secrets=self.secrets,
            sandbox=self.sandbox,
        )
        store.put_build(key, rec)
        self.built.append(sha)
        _touch(self.build_dir(cfg, rec.variant))  # used (gc: least recently used first)
        failed = not rec.ok and bool(rec.log)
        self.events.emit(
            Built(
                sha,
                rec.status,
                rec.seconds,
                rec.reason,
                rec.variant,
                rec.notes,
                log_command=self.log_command(sha) if failed else "",
            )
        )
        return rec

    def log_command(self, sha: str) -> str:
        """The command that prints a commit's whole build log (a failure's reason keeps only its
        first error), or "" when no config path is known. --state is always given, so the
        command is right wherever the state directory is."""
        if self.config_path is None:
            return ""
        return (
            f"bisectbot build-log {shlex.quote(self.config_path)} --commit {sha} "
            f"--state {shlex.quote(str(self.state.root))}"
        )

    def expand(self, arg: str) -> str:
        return arg.format_map(Placeholders(self.values)) if "{" in arg else arg

    def build_dir(self, cfg: BuildConfig, variant: int) -> Path:
        """The build directory a variant of `cfg` is built in."""
        args = [self.expand(a) for a in (*cfg.cmake_args, *cfg.choices[variant].cmake_args)]
        return self.state.build_dir(build_dir_key(args, untrusted=self.sandbox is not None))


def intact(rec: BuildRecord) -> bool:
    """Whether every kept file of a build is there with the sha256 recorded when it was built
    (a build recorded without them, by an older bisectbot, is built again)."""
    if not rec.hashes or not set(rec.binaries.values()) <= set(rec.hashes):
        return False
    try:
        return all(file_sha256(Path(path)) == digest for path, digest in rec.hashes.items())
    except OSError:
        return False


def _touch(path: Path) -> None:
    """Mark a kept directory or build directory as just used (its mtime; gc reads it)."""
    try:
        os.utime(path)
    except OSError:
        pass  # gone, or not ours to touch: it only orders what gc removes first


# -- keys -----------------------------------------------------------------------------------------
def build_key(cfg: BuildConfig, values: Mapping[str, str] | None = None) -> str:
    """Identifies builds that are interchangeable: the cmake arguments and variants, the contents
    of the files they name, the kept globs, and the toolchain that compiles them."""
    args = [*cfg.cmake_args, *(a for v in cfg.choices for a in v.cmake_args)]
    data = {
        "args": cfg.cmake_args,
        "variants": [v.model_dump(mode="json") for v in cfg.choices],
        "keep": cfg.keep,
        "files": named_files(args, values or {}),
        "toolchain": toolchain_identity(),
    }
    return json_key(data, 12)


def build_dir_key(args: list[str], *, untrusted: bool = False) -> str:
    """Builds with the same cmake arguments share one build directory, whatever their targets:
    building llama-server after llama-speculative at a commit reuses every common object.
    Untrusted builds share only with each other."""
    return json_key([*args, UNTRUSTED_DIR] if untrusted else args, 12, sort_keys=False)


class Placeholders(dict):  # type: ignore[type-arg]
    """Values for `{placeholders}` that leave unknown ones ({seed}, {port}) as written."""

    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def named_files(args: Iterable[str], values: Mapping[str, str]) -> dict[str, str]:
    """sha256 of every existing file an argument names (`-DX=<path>` or a path), keyed by the
    argument as written: editing such a file changes what a stored build or run stood for."""
    out: dict[str, str] = {}
    known = Placeholders(values)
    for arg in args:
        text = arg.format_map(known) if "{" in arg else arg
        value = text.split("=", 1)[1] if text.startswith("-D") and "=" in text else text
        path = Path(value)
        if path.is_absolute() and path.is_file():
            out[arg] = file_sha256(path)
    return out


# -- one commit -----------------------------------------------------------------------------------
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


@dataclass(frozen=True)
class _Attempt:
    status: str  # ok | unsupported | failed | timeout | no-binary
    reason: str
    seconds: float
    binaries: dict[str, str]
    inputs: tuple[str, ...] | None = None
    hashes: dict[str, str] = field(default_factory=dict)


class _Budget:
    """What is left of the build timeout, across variants and retries."""

    def __init__(self, total: float):
        self.total, self.used = total, 0.0

    @property
    def left(self) -> float:
        return self.total - self.used


def build_commit(
    cfg: BuildConfig,
    sha: str,
    source: Path,
    state: StateDir,
    key: str,
    log: Path,
    *,
    expand: Callable[[str], str] = lambda a: a,
    progress: Callable[[str], None] = lambda _: None,
    secrets: Iterable[str] = (),
    sandbox: Sandbox | None = None,
) -> BuildRecord:
    """Build `source` (already checked out at `sha`) with the first variant its tree supports;
    with `sandbox`, every cmake step (and so every compiler) runs in it."""
    log.write_text("")
    budget = _Budget(cfg.timeout)
    not_fitting: list[str] = []
    stale = [c for v in cfg.choices for cands in v.binaries.values() for c in cands]
    kept = state.kept_dir(key, sha)
    for index, variant in enumerate(cfg.choices):
        args = [expand(a) for a in (*cfg.cmake_args, *variant.cmake_args)]
        build_dir = state.build_dir(build_dir_key(args, untrusted=sandbox is not None))
        with dirlock.exclusive(build_dir, wait=BUILD_DIR_WAIT) as hold:
            why = configured_elsewhere(build_dir, source)
            if why is None and sandbox is None:
                why = written_since(build_dir, state.store.build_dir_written(build_dir))
            if why:
                _note(log, f"# starting {build_dir} afresh: {why}")
                shutil.rmtree(build_dir, ignore_errors=True)
            reused = build_dir.exists()
            attempt = _build_variant(
                cfg, variant, args, source, build_dir, kept, log, budget, stale, progress, secrets, hold, sandbox
            )
            notes = ""
            if attempt.status == "failed" and reused:
                _note(log, f"# the reused build directory failed ({attempt.reason}); trying a clean one")
                shutil.rmtree(build_dir, ignore_errors=True)
                first = attempt.reason
                attempt = _build_variant(
                    cfg, variant, args, source, build_dir, kept, log, budget, stale, progress, secrets, hold, sandbox
                )
                notes = (
                    f"built in a clean directory after the reused one failed: {first}"
                    if attempt.status == "ok"
                    else f"also failed in a clean directory (the reused one: {first})"
                )
            if sandbox is None and build_dir.exists():
                state.store.put_build_dir_written(build_dir, time.time())
        if attempt.status == "unsupported":
            not_fitting.append(f"variant {index}: {attempt.reason}")
            continue
        reason = redact(attempt.reason) if sandbox is not None else attempt.reason
        return BuildRecord(
            sha,
            attempt.status,
            attempt.binaries,
            str(log),
            budget.used,
            reason,
            variant=index,
            notes=notes,
            inputs=attempt.inputs,
            host=platform.node(),
            compiler=toolchain_identity(),
            hashes=attempt.hashes,
        )
    return BuildRecord(
        sha,
        "unsupported",
        {},
        str(log),
        budget.used,
        "no build variant fits this tree: " + "; ".join(not_fitting),
        variant=len(cfg.choices) - 1,
    )


def _build_variant(
    cfg: BuildConfig,
    variant: BuildVariant,
    args: list[str],
    source: Path,
    build_dir: Path,
    kept: Path,
    log: Path,
    budget: _Budget,
    stale: list[str],
    progress: Callable[[str], None],
    secrets: Iterable[str],
    hold: int,
    sandbox: Sandbox | None = None,
) -> _Attempt:
    """One variant in `build_dir`; `hold` is the directory's lock, which every child inherits.
    Untrusted code gets no ccache (it must not fill the cache trusted builds read)."""
    build_dir.mkdir(parents=True, exist_ok=True)
    launcher, cc_env = ccache_args(source, build_dir) if sandbox is None else ([], {"CCACHE_DISABLE": "1"})
    env = clean_env(cc_env, drop=secrets)
    forget = [f"-U{name}" for name in variant.defines]  # so cmake reports them if unused
    configure = ["cmake", "-S", str(source), "-B", str(build_dir), *launcher, *forget, *args]
    start = log.stat().st_size
    progress("configure")
    if sandbox is not None:
        _note(log, f"# untrusted code, in the sandbox: {sandbox.text()}")
    res = _step(configure, build_dir, env, log, budget, hold, sandbox)
    if res is not None:
        return _Attempt(res[0], f"cmake configure {res[1]}", budget.used, {})
    unused = _unused_defines(log, start)
    if rejected := [n for n in variant.defines if n in unused]:
        return _Attempt("unsupported", "cmake does not use " + ", ".join(f"-D{n}" for n in rejected), budget.used, {})
    listed = run(
        ["cmake", "--build", str(build_dir), "--target", "help"],
        cwd=build_dir,
        env=env,
        timeout=120,
        pass_fds=(hold,),
        sandbox=sandbox,
    )
    if missing := [t for t in variant.targets if t not in _target_names(listed.stdout)]:
        return _Attempt("unsupported", "the tree has no target " + ", ".join(missing), budget.used, {})
    for rel in stale:  # provenance: only what this build makes can be kept
        (build_dir / rel).unlink(missing_ok=True)
    progress("build")
    jobs = str(cfg.jobs or os.cpu_count() or 1)
    res = _step(
        ["cmake", "--build", str(build_dir), "--target", *variant.targets, "-j", jobs],
        build_dir,
        env,
        log,
        budget,
        hold,
        sandbox,
    )
    if res is not None:
        return _Attempt(res[0], f"cmake build {res[1]}", budget.used, {})
    binaries, hashes, missing_name = _keep(cfg, variant, build_dir, kept)
    if missing_name:
        return _Attempt(
            "no-binary",
            f"build left no binary for {{{missing_name}}} "
            f"(looked for {', '.join(variant.binaries[missing_name])}; a link out of the "
            "build directory is not kept)",
            budget.used,
            {},
        )
    # untrusted: its dependency files are not read (they could name any file of the bot's)
    inputs = target_inputs(build_dir, variant.targets, source) if sandbox is None else None
    return _Attempt("ok", "", budget.used, binaries, tuple(inputs) if inputs is not None else None, hashes)


def _step(
    argv: list[str],
    cwd: Path,
    env: dict[str, str],
    log: Path,
    budget: _Budget,
    hold: int,
    sandbox: Sandbox | None = None,
) -> tuple[str, str] | None:
    """Run one cmake step into the log; None when it succeeded, else (status, why)."""
    _note(log, f"$ {' '.join(argv)}")
    if budget.left <= 0:
        return "timeout", f"did not start: the build timeout of {budget.total:g} s was used up"
    start = log.stat().st_size
    res = run(argv, cwd=cwd, env=env, timeout=budget.left, log=log, pass_fds=(hold,), sandbox=sandbox)
    budget.used += res.seconds
    if res.timed_out:
        return "timeout", f"exceeded the build timeout of {budget.total:g} s"
    if res.stopped:
        return "failed", f"{res.stopped}: {_first_error(log, start)}"
    if res.returncode != 0:
        return "failed", f"failed (exit {res.returncode}): {_first_error(log, start)}"
    return None


def configured_elsewhere(build_dir: Path, source: Path) -> str | None:
    """Why `build_dir`'s CMakeCache.txt belongs to another place (the state directory was moved
    or copied), or None. cmake refuses to configure such a directory, which is no fault of the
    commit being built."""
    try:
        text = (build_dir / "CMakeCache.txt").read_text(errors="replace")
    except OSError:
        return None
    cache = dict(ln.split("=", 1) for ln in text.splitlines() if "=" in ln and not ln.startswith(("#", "//")))
    for name, here in (("CMAKE_CACHEFILE_DIR", build_dir), ("CMAKE_HOME_DIRECTORY", source)):
        there = cache.get(f"{name}:INTERNAL")
        if there is not None and Path(there).resolve() != here.resolve():
            return f"its CMakeCache.txt was written for {name} {there}, not {here} (a moved or copied state directory)"
    return None


def _note(log: Path, line: str) -> None:
    with open(log, "a") as fh:
        fh.write(line + "\n")


def _unused_defines(log: Path, start: int) -> set[str]:
    """Names cmake listed as "Manually-specified variables were not used" since `start`."""
    lines = _read_from(log, start).splitlines()
    names: set[str] = set()
    for i, line in enumerate(lines):
        if UNUSED_HEADER in line:
            for following in lines[i + 1 :]:
                if following.strip() == "":
                    if names:
                        break
                    continue
                if not following.startswith("    "):
                    break
                names.add(following.strip())
    return names


def _target_names(help_text: str) -> set[str]:
    """Targets listed by `cmake --build … --target help` (Makefiles: '... name'; Ninja: 'name: phony')."""
    names = set()
    for line in help_text.splitlines():
        line = line.strip()
        if line.startswith("... "):
            names.add(line[4:].split()[0])
        elif ":" in line and not line.startswith("The following"):
            names.add(line.split(":", 1)[0].strip())
    return names


def _keep(
    cfg: BuildConfig, variant: BuildVariant, build_dir: Path, kept_dir: Path
) -> tuple[dict[str, str], dict[str, str], str | None]:
    """Copy the binaries and keep-globs into `kept_dir`; return placeholder → kept path, kept
    path → sha256, and the name of a binary not found. Only regular files that are, or links
    that resolve to, files inside `build_dir` are kept: a build cannot make the bot copy (and
    later hand to a run) a file from elsewhere.

    A copy the state directory cannot take (a full disk, a read-only one) is no fault of the
    commit: StateError naming the file and the reason, the half-kept directory removed, nothing
    recorded (the build is not stored, so the next run builds it again)."""
    src: Path | None = None
    try:
        if kept_dir.exists():
            shutil.rmtree(kept_dir)
        kept_dir.mkdir(parents=True)
        found: dict[str, str] = {}
        hashes: dict[str, str] = {}
        root = build_dir.resolve()
        for name, candidates in variant.binaries.items():
            src = next((build_dir / c for c in candidates if _within(build_dir / c, root)), None)
            if src is None:
                return {}, {}, name
            dst = kept_dir / src.name
            shutil.copy2(src, dst)
            found[name] = str(dst)
            hashes[str(dst)] = file_sha256(dst)
        for pattern in cfg.keep:
            for src in build_dir.glob(pattern):
                if _within(src, root):
                    shutil.copy2(src, kept_dir / src.name)
                    hashes[str(kept_dir / src.name)] = file_sha256(kept_dir / src.name)
    except OSError as exc:
        shutil.rmtree(kept_dir, ignore_errors=True)
        what = f"the built {src.name}" if src is not None else "the built binaries"
        raise StateError(f"cannot keep {what} in {kept_dir}: {exc.strerror or exc}") from None
    return found, hashes, None


def _within(path: Path, root: Path) -> bool:
    """A regular file whose real path (links followed) is inside `root`."""
    real = path.resolve()
    return real.is_file() and real.is_relative_to(root)


def written_since(build_dir: Path, written: float | None) -> str | None:
    """Why `build_dir` may hold what no trusted build wrote: it was never recorded as written by
    one, or a file in it is newer than the end of the last one (None: reuse it)."""
    if not build_dir.exists():
        return None
    if written is None:
        return "no trusted build is recorded as its last writer"
    for top, _dirs, files in os.walk(build_dir):
        for name in files:
            try:
                mtime = os.lstat(os.path.join(top, name)).st_mtime
            except OSError:
                continue
            if mtime > written + 2:
                rel = os.path.relpath(os.path.join(top, name), build_dir)
                return f"{rel} is newer than the last trusted build there"
    return None


def _read_from(log: Path, start: int) -> str:
    try:
        with open(log, "rb") as fh:
            fh.seek(start)
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def _first_error(log: Path, start: int = 0) -> str:
    """The most telling line of a failed step: cmake's first error with what it says under it
    (see cmake_error), else the first 'error' line (with the line after a bare header ending
    in ':'), else the last line."""
    text = _read_from(log, start)
    if found := cmake_error(text):
        return found
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for i, ln in enumerate(lines):
        if "error" in ln.lower() and not ln.startswith("$"):
            for following in lines[i + 1 : i + 4]:  # cmake puts what it means on the next lines
                if not ln.endswith(":"):
                    break
                ln = f"{ln} {following}"
            return ln[:ERROR_CHARS]
    return lines[-1][:ERROR_CHARS] if lines else "no output"


# How much of a failure's first error a build reason keeps (the build log has all of it).
ERROR_CHARS = 400


def cmake_error(text: str) -> str | None:
    """cmake's first error in one line: its header ("CMake Error at CMakeLists.txt:2 (project):")
    joined with the indented message under it up to the first paragraph that ends a sentence.
    A header alone says nothing ("No CMAKE_CXX_COMPILER could be found." is the next line), and
    a message may run over paragraphs ("The CMAKE_CXX_COMPILER:" / "/no/c++" / "is not a full
    path to an existing compiler tool."). None when there is no cmake error."""
    lines = text.splitlines()
    head = next((i for i, ln in enumerate(lines) if ln.startswith("CMake Error")), None)
    if head is None:
        return None
    said = [lines[head].strip()]
    if said[0].endswith(":"):
        paragraph: list[str] = []
        for ln in [*lines[head + 1 :], ""]:
            if ln.strip() and ln.startswith(" "):
                paragraph.append(ln.strip())
                continue
            if paragraph:  # a blank line, or an unindented one (the message is indented) ends it
                said.append(" ".join(paragraph))
                paragraph = []
                if said[-1].endswith((".", "!")) or len(said) > 4:
                    break
            if ln.strip():
                break  # past the message: "Call Stack …", "-- Configuring incomplete …"
    joined = " ".join(said)
    return joined if len(joined) <= ERROR_CHARS else joined[: ERROR_CHARS - 1] + "…"


# -- what the target was compiled from ----------------------------------------------------------
def target_inputs(build_dir: Path, targets: Sequence[str], source: Path) -> list[str] | None:
    """The repository files the targets were compiled from, as paths relative to `source`: the
    dependency files (`<object>.d`) of every object linked into them, found by following each
    target's link command (`CMakeFiles/<target>.dir/link.txt`) through the libraries it names.
    None when that cannot be followed (another generator, no dependency file for an object):
    then the inputs are unknown and no commit is skipped (core.inputs)."""
    link_cmds = {p.parent.name.removesuffix(".dir"): p for p in build_dir.rglob("CMakeFiles/*.dir/link.txt")}
    outputs: dict[Path, Path] = {}
    for link in link_cmds.values():
        cwd = link.parents[2]
        for out in _link_outputs(link):
            outputs[(cwd / out).resolve()] = link
    todo = [link_cmds[t] for t in targets if t in link_cmds]
    if len(todo) != len(targets):
        return None
    seen: set[Path] = set()
    objects: set[Path] = set()
    while todo:
        link = todo.pop()
        if link in seen:
            continue
        seen.add(link)
        cwd = link.parents[2]
        own = 0
        for word in _link_words(link):
            path = (cwd / word).resolve()
            if word.endswith((".o", ".obj")):
                objects.add(path)
                own += 1
            elif path in outputs:
                todo.append(outputs[path])
        if own == 0 and link.parent.name.removesuffix(".dir") in targets:
            return None  # a target made of no object we can see: the link command is not understood
    root = source.resolve()
    found: set[str] = set()
    for obj in objects:
        depfile = obj.with_name(obj.name + ".d")
        if not depfile.is_file():
            return None
        cwd = _compile_dir(obj)
        for dep in parse_depfile(depfile.read_text(errors="replace")):
            path = cwd / dep  # relative names are relative to where it was compiled
            try:
                found.add(path.resolve().relative_to(root).as_posix())
            except ValueError:
                continue  # a system header, or a file generated in the build directory
    return sorted(found) or None  # nothing from the repository: not understood, so unknown


def _compile_dir(obj: Path) -> Path:
    """Where cmake's Makefiles compile an object: the directory above its `CMakeFiles`."""
    for parent in obj.parents:
        if parent.name == "CMakeFiles":
            return parent.parent
    return obj.parent


def _link_words(link: Path) -> list[str]:
    """The words of a link command file, response files (`@file`) expanded."""
    words: list[str] = []
    for line in link.read_text(errors="replace").splitlines():
        for word in _shell_words(line):
            if word.startswith("@") and (link.parents[2] / word[1:]).is_file():
                words += _shell_words((link.parents[2] / word[1:]).read_text(errors="replace"))
            else:
                words.append(word)
    return words


def _shell_words(text: str) -> list[str]:
    """Words as the shell reads them (cmake quotes object paths: `"CMakeFiles/x.dir/a.cpp.o"`)."""
    try:
        return shlex.split(text)
    except ValueError:  # unbalanced quotes: take the words as they are
        return [w.strip('"') for w in text.split()]


def _link_outputs(link: Path) -> list[str]:
    """What a link command makes: the word after `-o`, or an archiver's first file (`ar qc lib.a …`)."""
    words = _link_words(link)
    out = [words[i + 1] for i, w in enumerate(words[:-1]) if w == "-o"]
    for i, w in enumerate(words[:-2]):
        if w.endswith(("ar", "llvm-ar", "gcc-ar")) and words[i + 2].endswith(".a"):
            out.append(words[i + 2])
    return out


# -- the toolchain ---------------------------------------------------------------------------------
def compiler_version() -> str:
    """First line of the C++ compiler's --version."""
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or "c++"
    res = run([cxx, "--version"], timeout=10)
    return res.stdout.splitlines()[0] if res.returncode == 0 and res.stdout else "unknown"


def cmake_version() -> str:
    res = run(["cmake", "--version"], timeout=10)
    return res.stdout.splitlines()[0] if res.returncode == 0 and res.stdout else "unknown"


@functools.cache
def toolchain_identity() -> str:
    """The compiler and cmake, as build keys include them (asked once per process)."""
    return f"{compiler_version()} | {cmake_version()}"


def toolchain(cfg: BuildConfig) -> Environment:
    """What the builds were made with and where, as reports state it."""
    return Environment(
        compiler=compiler_version(),
        cmake=cmake_version(),
        cmake_args=list(cfg.cmake_args),
        host=platform.node(),
        platform=platform.platform(),
        python=platform.python_version(),
        bisectbot=__version__,
    )
