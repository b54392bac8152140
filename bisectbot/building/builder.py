"""Build stage: cmake configure + build of the targets a commit's tree has, incremental across
commits; or the project's own build command (build.kind command: `building.command`); or no
build, the commit's kept tree being what runs (build.kind none: `building.trees`).

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
* **One build at a time per directory.** A build holds its directory's lock (state.dirlock),
  and so do its children, so a build a killed bot left running never has another beside it.
* **A moved state directory is no failure.** cmake refuses a build directory whose
  CMakeCache.txt was written elsewhere; such a directory is started afresh before configuring.
* **Keys that cannot go stale.** A stored build is reused only if the commit, the cmake
  arguments and variants, the contents of files they name and the toolchain are the same.
* **Untrusted code apart.** A pull request's head is built in the sandbox (processes.sandbox:
  bubblewrap over a throwaway box), under build keys of its own, without ccache; the state
  directory it builds into is the box's, deleted after the check. Its failure reasons are
  shown with anything that looks like a credential replaced (`procs.redact`).
* **Nothing reused that a trusted build did not leave.** A kept binary is reused only if its
  sha256 is the one recorded when it was built (else it is rebuilt); a build directory is
  reused only if no file in it is newer than the end of the last trusted build there (else it
  is wiped first); a binary or kept file that is a link out of the build directory is not kept.

The pieces: `build.buildkeys` (keys, the toolchain), `build.cmake` (what cmake says),
`build.keep` (binaries kept and checked, build directories trusted), `build.linkgraph`
(the files the targets were compiled from), `build.steps` (a step within the timeout, into the
log), `build.command` (a build command's attempt), `build.trees` (a commit's own tree, kept for
the runs that name `{source}`, and build.kind none's "build").

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
from pathlib import Path
from typing import Callable, Iterable, Mapping

from bisectbot.building.buildkeys import Placeholders, build_dir_key, build_key, toolchain_identity
from bisectbot.building.cmake import (
    ccache_args,
    configured_elsewhere,
    target_listing,
    target_names,
    unused_defines,
)
from bisectbot.building.command import attempt_command, command_argv, missing_needs
from bisectbot.building.keep import intact, keep_binaries, touch, written_since
from bisectbot.building.linkgraph import scanned_inputs, target_inputs
from bisectbot.building.steps import Attempt, Budget, note, step
from bisectbot.building.trees import KeptTree, keep_tree, kept_tree
from bisectbot.building.workspace import Export, Workspace
from bisectbot.config.sections import BuildConfig, BuildVariant
from bisectbot.doctor import generator_args
from bisectbot.errors import GitError
from bisectbot.events import Building, BuildPhase, Built, Events, Scanned
from bisectbot.processes.boxfs import Box, BoxRefused
from bisectbot.processes.procs import clean_env, redact, run
from bisectbot.processes.sandbox import BoxState, Sandbox
from bisectbot.records.commits import BuildRecord
from bisectbot.records.keys import json_key
from bisectbot.state import dirlock
from bisectbot.state.statedir import StateDir

# How long a build waits for its directory's lock (held by an orphaned build no record named).
BUILD_DIR_WAIT = 60.0
# What a commit's kept tree is stored as: the "build" of build.kind none.
NO_BUILD = BuildConfig(kind="none")


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
        # the box untrusted code writes to, touched by the bot without following links
        self._box = state.fs if sandbox is not None and isinstance(state, BoxState) else None
        self.built: list[str] = []
        # called before a commit is built (nothing stored to reuse): --max-builds / --deadline
        # raise there (bisecting.budget), between steps, before anything of the build is done
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
        if rec is None or not rec.ok or not intact(rec, self._box):
            return None
        return rec

    def ensure(self, sha: str, cfg: BuildConfig, *, inputs: bool = True) -> BuildRecord:
        """The commit's build record for `cfg`, building it only if no usable build is stored.
        `inputs`: record the files its targets were compiled from (`linkgraph.target_inputs`, a
        quarter second on llama.cpp), which only the narrowing reads, at the ends; a build made
        without them has `inputs` None, and the narrowing scans such an end instead."""
        if cfg.kind == "none":  # nothing to build: the commit's kept tree is what runs
            return self._tree(sha)[0]
        key = self.key(cfg)
        store = self.state.store
        rec = store.build(key, sha)
        retry_timeout = rec is not None and rec.status == "timeout" and cfg.timeout > rec.seconds + 1
        if rec is not None and not retry_timeout and (not rec.ok or intact(rec, self._box)):
            if rec.ok and self._box is None:  # used: `bisectbot gc` removes the least recently used first
                touch(self.state.kept_dir(key, sha))
            return rec
        if self.guard is not None:
            self.guard()
        if rec is not None:
            store.forget_build(key, sha)
        what = cfg.choices[0].targets or [f"with {' '.join(command_argv(cfg, 0, Path('{source}'), self.expand))}"]
        self.events.emit(Building(sha, tuple(what)))
        log = self.state.log_path(f"build-{key}-{sha}.log")
        # a build command's outputs stay in the clone for the next build only when asked
        pristine = cfg.kind == "cmake" or not cfg.incremental
        try:
            source = self.workspace.checkout(sha, clean=pristine)
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
            inputs=inputs,
            fresh=None if pristine or self.sandbox is not None else lambda: self.workspace.checkout(sha),
        )
        store.put_build(key, rec)
        self.built.append(sha)
        touch(self.build_dir(cfg, rec.variant))  # used (gc: least recently used first)
        self._said_built(sha, rec)
        return rec

    def _said_built(self, sha: str, rec: BuildRecord) -> None:
        """The build's end, to observers (a failure with the command that prints its whole log)."""
        failed = not rec.ok and bool(rec.log)
        log_command = self.log_command(sha) if failed else ""
        self.events.emit(
            Built(sha, rec.status, rec.seconds, rec.reason, rec.variant, rec.notes, log_command=log_command)
        )

    def tree(self, sha: str) -> KeptTree:
        """The commit's own tree for its runs (`{source}`), kept (building.trees): exported now
        when it is not kept, or no longer as exported. GitError when it cannot be exported."""
        rec, found = self._tree(sha)
        if found is None:
            raise GitError(rec.reason)
        return found

    def _tree(self, sha: str) -> tuple[BuildRecord, KeptTree | None]:
        """The kept tree of `sha` and its record (stored under the key of build.kind none: it is
        that kind's build), exporting it when needed; a record `checkout-failed` when it cannot
        be exported (not stored: the next run may well export it)."""
        key = self.key(NO_BUILD)
        kept = self.state.kept_dir(key, sha)
        store = self.state.store
        rec = store.build(key, sha)
        if rec is not None and rec.ok:
            found = kept_tree(kept, self._box)
            if found is not None and rec.hashes.get(str(found.manifest)) == found.digest:
                if self._box is None:
                    touch(kept)  # used: `bisectbot gc` removes the least recently used first
                return rec, found
            store.forget_build(key, sha)
        started = time.monotonic()
        try:
            found = keep_tree(self.workspace.export, sha, kept, self._box)
        except (GitError, BoxRefused) as exc:
            return BuildRecord(sha, "checkout-failed", {}, "", 0.0, f"cannot export its tree: {exc}"), None
        seconds = time.monotonic() - started
        rec = BuildRecord(sha, "ok", {}, "", seconds, host=platform.node(), hashes={str(found.manifest): found.digest})
        store.put_build(key, rec)
        return rec, found

    def scan_inputs(self, sha: str, cfg: BuildConfig) -> list[str] | None:
        """The files the commit's targets would be compiled from, without building it: its stored
        build's inputs when there is one, else configured and preprocessed only
        (`linkgraph.scanned_inputs`, a few per cent of a build). Nothing is stored: a scan makes
        no binary. None when unknown (untrusted code, another generator, any failure): the
        caller builds instead."""
        if self.sandbox is not None:  # its dependency files are not read (they could name any file)
            return None
        if cfg.kind != "cmake":  # no dependency files: cmake's alone are read
            return None
        rec = self.stored(sha, cfg)
        if rec is not None and rec.inputs is not None:
            return list(rec.inputs)
        if self.guard is not None:
            self.guard()
        self.events.emit(BuildPhase(sha, "scan"))
        try:
            source = self.workspace.checkout(sha)
        except GitError:
            return None
        log = self.state.log_path(f"scan-{self.key(cfg)}-{sha}.log")
        rec = build_commit(
            cfg, sha, source, self.state, self.key(cfg), log, expand=self.expand, secrets=self.secrets, scan=True
        )
        inputs = list(rec.inputs) if rec.status == "scanned" and rec.inputs is not None else None
        self.events.emit(Scanned(sha, len(inputs) if inputs is not None else None, rec.seconds))
        return inputs

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
        """The build directory a variant of `cfg` is built in (a build command: the tree it runs
        in, the clone or untrusted code's export)."""
        if cfg.kind != "cmake":
            return self.workspace.root
        args = [self.expand(a) for a in (*cfg.cmake_args, *cfg.choices[variant].cmake_args)]
        return self.state.build_dir(build_dir_key(_with_generator(cfg, args), untrusted=self.sandbox is not None))


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
    scan: bool = False,
    inputs: bool = True,
    fresh: Callable[[], Path] | None = None,
) -> BuildRecord:
    """Build `source` (already checked out at `sha`) with the first variant its tree supports;
    with `sandbox`, every cmake step (and so every compiler) runs in it. With `scan`, configure
    only and preprocess (status `scanned` with the inputs, or `unscanned`; nothing kept). A
    build command runs in `source` itself; `fresh` makes it pristine again (build.incremental:
    the build on earlier outputs failed, `building.command`).

    With `sandbox` the state is a box untrusted code writes to: every step the bot takes there
    itself (removing or making a build directory, reading its CMakeCache.txt, keeping the
    binaries) follows no link (processes.boxfs); a directory replaced by a link fails the build,
    saying so."""
    box = state.fs if sandbox is not None and isinstance(state, BoxState) else None
    try:
        return _build_commit(
            cfg, sha, source, state, key, log, expand, progress, secrets, sandbox, scan, inputs, box, fresh
        )
    except BoxRefused as exc:
        note(log, f"# {exc}")
        return BuildRecord(sha, "failed", {}, str(log), 0.0, str(exc), host=platform.node())


def _build_commit(
    cfg: BuildConfig,
    sha: str,
    source: Path,
    state: StateDir,
    key: str,
    log: Path,
    expand: Callable[[str], str],
    progress: Callable[[str], None],
    secrets: Iterable[str],
    sandbox: Sandbox | None,
    scan: bool,
    inputs: bool,
    box: Box | None,
    fresh: Callable[[], Path] | None,
) -> BuildRecord:
    log.write_text("")
    budget = Budget(cfg.timeout)
    not_fitting: list[str] = []
    stale = [c for v in cfg.choices for cands in v.binaries.values() for c in cands]
    kept = state.kept_dir(key, sha)
    for index, variant in enumerate(cfg.choices):
        if missing := missing_needs(variant, source):
            not_fitting.append(f"variant {index}: the tree has no {', '.join(missing)}")
            continue
        if cfg.kind == "command":
            attempt, notes = attempt_command(
                cfg, index, source, kept, log, budget, stale, expand, secrets, sandbox, box, fresh
            )
        else:
            attempt, notes = _attempt_variant(
                cfg,
                variant,
                source,
                state,
                kept,
                log,
                budget,
                stale,
                expand,
                progress,
                secrets,
                sandbox,
                scan,
                inputs,
                box,
            )
        if attempt.status == "unsupported":
            not_fitting.append(f"variant {index}: {attempt.reason}")
            continue
        return _record(sha, attempt, index, notes, log, budget.used, sandbox)
    return BuildRecord(
        sha,
        "unsupported",
        {},
        str(log),
        budget.used,
        "no build variant fits this tree: " + "; ".join(not_fitting),
        variant=len(cfg.choices) - 1,
    )


def _record(
    sha: str, attempt: Attempt, variant: int, notes: str, log: Path, seconds: float, sandbox: Sandbox | None
) -> BuildRecord:
    """The build record of the attempt at the variant that fit, `seconds` into the build (untrusted
    code's reason redacted)."""
    return BuildRecord(
        sha,
        attempt.status,
        attempt.binaries,
        str(log),
        seconds,
        redact(attempt.reason) if sandbox is not None else attempt.reason,
        variant=variant,
        notes=notes,
        inputs=attempt.inputs,
        host=platform.node(),
        compiler=toolchain_identity(),
        hashes=attempt.hashes,
    )


def _attempt_variant(
    cfg: BuildConfig,
    variant: BuildVariant,
    source: Path,
    state: StateDir,
    kept: Path,
    log: Path,
    budget: "Budget",
    stale: list[str],
    expand: Callable[[str], str],
    progress: Callable[[str], None],
    secrets: Iterable[str],
    sandbox: Sandbox | None,
    scan: bool,
    inputs: bool,
    box: Box | None,
) -> tuple["Attempt", str]:
    """One build variant in its build directory (held exclusively), started afresh when another
    tree or writer left it, and again in a clean one when the reused directory fails. Returns
    the attempt and a note on how it was built."""
    args = _with_generator(cfg, [expand(a) for a in (*cfg.cmake_args, *variant.cmake_args)])
    build_dir = state.build_dir(build_dir_key(args, untrusted=sandbox is not None))
    with dirlock.exclusive(build_dir, wait=BUILD_DIR_WAIT) as hold:
        why = configured_elsewhere(build_dir, source, box)
        if why is None and sandbox is None:
            why = written_since(build_dir, state.store.build_dir_written(build_dir))
        if why:
            note(log, f"# starting {build_dir} afresh: {why}")
            _remove(build_dir, box)
        reused = build_dir.exists()
        attempt_here = functools.partial(
            _build_variant,
            cfg,
            variant,
            args,
            source,
            build_dir,
            kept,
            log,
            budget,
            stale,
            progress,
            secrets,
            hold,
            sandbox,
            inputs=inputs,
            box=box,
        )
        attempt = attempt_here(scan=scan)
        notes = ""
        if attempt.status == "failed" and reused and not scan:
            note(log, f"# the reused build directory failed ({attempt.reason}); trying a clean one")
            _remove(build_dir, box)
            first = attempt.reason
            attempt = attempt_here()
            notes = (
                f"built in a clean directory after the reused one failed: {first}"
                if attempt.status == "ok"
                else f"also failed in a clean directory (the reused one: {first})"
            )
        if sandbox is None and build_dir.exists():
            state.store.put_build_dir_written(build_dir, time.time())
    return attempt, notes


def _remove(build_dir: Path, box: Box | None) -> None:
    """Remove a build directory (in a box: following no link)."""
    if box is not None:
        box.remove(build_dir)
    else:
        shutil.rmtree(build_dir, ignore_errors=True)


def _configure(
    variant: BuildVariant,
    args: list[str],
    source: Path,
    build_dir: Path,
    env: dict[str, str],
    launcher: list[str],
    log: Path,
    budget: Budget,
    hold: int,
    sandbox: Sandbox | None,
) -> Attempt | None:
    """cmake configure of one variant, then whether the tree fits it: cmake uses every -D it
    names and lists every target it builds. None when it fits; else why not (failed or
    unsupported)."""
    forget = [f"-U{name}" for name in variant.defines]  # so cmake reports them if unused
    configure = ["cmake", "-S", str(source), "-B", str(build_dir), *launcher, *forget, *args]
    start = log.stat().st_size
    if sandbox is not None:
        note(log, f"# untrusted code, in the sandbox: {sandbox.text()}")
    res = step(configure, build_dir, env, log, budget, hold, sandbox)
    if res is not None:
        return Attempt(res[0], f"cmake configure {res[1]}", budget.used, {})
    unused = unused_defines(log, start)
    if rejected := [n for n in variant.defines if n in unused]:
        return Attempt("unsupported", "cmake does not use " + ", ".join(f"-D{n}" for n in rejected), budget.used, {})
    listed = run(target_listing(build_dir), cwd=build_dir, env=env, timeout=120, pass_fds=(hold,), sandbox=sandbox)
    if missing := [t for t in variant.targets or () if t not in target_names(listed.stdout)]:
        return Attempt("unsupported", "the tree has no target " + ", ".join(missing), budget.used, {})
    return None


def _remove_stale(build_dir: Path, stale: list[str], box: Box | None) -> None:
    """Provenance: only what this build makes can be kept, so binaries an earlier build left go first."""
    for rel in stale:
        if box is not None:
            box.remove(build_dir / rel)
        else:
            (build_dir / rel).unlink(missing_ok=True)


def _build_variant(
    cfg: BuildConfig,
    variant: BuildVariant,
    args: list[str],
    source: Path,
    build_dir: Path,
    kept: Path,
    log: Path,
    budget: Budget,
    stale: list[str],
    progress: Callable[[str], None],
    secrets: Iterable[str],
    hold: int,
    sandbox: Sandbox | None = None,
    scan: bool = False,
    *,
    inputs: bool = True,
    box: Box | None = None,
) -> Attempt:
    """One variant in `build_dir`; `hold` is the directory's lock, which every child inherits.
    Untrusted code gets no ccache (it must not fill the cache trusted builds read). With `scan`
    (trusted only), the inputs without a build: `linkgraph.scanned_inputs`."""
    if box is not None:
        os.close(box.open_dir(build_dir, create=True))
    else:
        build_dir.mkdir(parents=True, exist_ok=True)
    launcher, cc_env = ccache_args(source, build_dir) if sandbox is None else ([], {"CCACHE_DISABLE": "1"})
    env = clean_env(cc_env, drop=secrets)
    if cfg.hide_git:  # `git rev-parse` in the build finds no repository: the commit stamp reads "unknown"
        env["GIT_DIR"] = os.devnull
    progress("configure")
    if (refused := _configure(variant, args, source, build_dir, env, launcher, log, budget, hold, sandbox)) is not None:
        return refused
    targets = variant.targets or []  # build.kind cmake: always some (config.sections)
    if scan:
        started = time.monotonic()
        scanned = scanned_inputs(build_dir, targets, source, env, cfg.jobs or os.cpu_count() or 1, budget.left)
        budget.used += time.monotonic() - started
        if scanned is None:
            return Attempt("unscanned", "the inputs could not be scanned", budget.used, {})
        return Attempt("scanned", "", budget.used, {}, tuple(scanned))
    _remove_stale(build_dir, stale, box)
    progress("build")
    jobs = str(cfg.jobs or os.cpu_count() or 1)
    res = step(
        ["cmake", "--build", str(build_dir), "--target", *targets, "-j", jobs],
        build_dir,
        env,
        log,
        budget,
        hold,
        sandbox,
    )
    if res is not None:
        return Attempt(res[0], f"cmake build {res[1]}", budget.used, {})
    binaries, hashes, missing_name = keep_binaries(cfg, variant, build_dir, kept, box)
    if missing_name:
        return Attempt(
            "no-binary",
            f"build left no binary for {{{missing_name}}} "
            f"(looked for {', '.join(variant.binaries[missing_name])}; a link out of the "
            "build directory is not kept)",
            budget.used,
            {},
        )
    # untrusted: its dependency files are not read (they could name any file of the bot's)
    found = target_inputs(build_dir, targets, source, env) if sandbox is None and inputs else None
    return Attempt("ok", "", budget.used, binaries, tuple(found) if found is not None else None, hashes)


def _with_generator(cfg: BuildConfig, args: list[str]) -> list[str]:
    """The cmake arguments with build.generator's `-G` first (no -G: cmake's default)."""
    return [*generator_args(cfg.generator, args), *args]
