"""build.kind command: the project's own build command (make, meson + ninja, cargo, a script)
run in the commit's tree, and the binaries it leaves there kept like cmake's.

Why each step:

* **The commit's tree is where it runs.** Trusted code builds in the bot's clone, checked out at
  the commit; untrusted code in a fresh export in its box, with the command in the sandbox. The
  binaries are paths under that tree, copied per commit with their sha256 (building.keep).
* **A pristine tree unless asked.** By default every file git does not track is removed before
  the build (`git clean`), so nothing of another commit's build is reused: a Makefile that lists
  no headers cannot link a stale object. ccache's compiler links go first on PATH where they
  are installed, so the C and C++ compiles of unchanged files are cache hits. With
  `build.incremental` the outputs stay for the next commit (only the files that changed are
  rewritten, so the build system's own rules decide what to rebuild); a build that fails, or
  leaves no binary, on top of them is tried once more in a pristine tree, as cmake's is in a
  clean directory.
* **Provenance.** Every candidate path of every variant's binaries is deleted before building:
  the binary kept is one this build made.
* **Variants fit by files.** A variant whose `needs` the tree lacks does not fit and the next
  is tried; a variant that fits and fails to build is a failed build (a skip), as for cmake.
* **What it read is unknown.** A build command leaves no dependency files bisectbot can trust,
  so its builds record no inputs and the narrowing keeps every commit that changes a file
  (bisecting.narrow).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterable

from bisectbot.building.buildkeys import Placeholders
from bisectbot.building.cmake import ccache_path
from bisectbot.building.keep import keep_binaries
from bisectbot.building.steps import Attempt, Budget, note, step
from bisectbot.config.sections import BuildConfig, BuildVariant
from bisectbot.processes.boxfs import Box
from bisectbot.processes.procs import clean_env
from bisectbot.processes.sandbox import Sandbox
from bisectbot.state import dirlock

# How long a build waits for its tree's lock (held by an orphaned build no record named).
TREE_WAIT = 60.0


def missing_needs(variant: BuildVariant, source: Path) -> list[str]:
    """The paths a variant needs that the tree lacks (links are not followed to decide)."""
    return [p for p in variant.needs if not os.path.lexists(source / p)]


def command_argv(cfg: BuildConfig, index: int, source: Path, expand: Callable[[str], str]) -> list[str]:
    """Variant `index`'s build command with its placeholders filled in."""
    values = {"source": str(source), "jobs": str(cfg.jobs or os.cpu_count() or 1)}
    return [expand(a).format_map(Placeholders(values)) if "{" in a else a for a in cfg.commands[index]]


def attempt_command(
    cfg: BuildConfig,
    index: int,
    source: Path,
    kept: Path,
    log: Path,
    budget: Budget,
    stale: list[str],
    expand: Callable[[str], str],
    secrets: Iterable[str],
    sandbox: Sandbox | None,
    box: Box | None,
    fresh: Callable[[], Path] | None,
) -> tuple[Attempt, str]:
    """Build variant `index` (one that fits: `missing_needs`) with its command in `source`
    (held exclusively); with `fresh` (the
    outputs of earlier builds were left in the tree), a failure, or a build that left no binary
    (an output in the way can make a build system think it has nothing to do), is retried once
    in the pristine tree `fresh` makes. Returns the attempt and a note on how it was built."""
    with dirlock.exclusive(source, wait=TREE_WAIT) as hold:
        attempt = _build(cfg, index, source, kept, log, budget, stale, expand, secrets, sandbox, box, hold)
        if attempt.status not in ("failed", "no-binary") or fresh is None:
            return attempt, ""
        note(log, f"# the build on the outputs of earlier builds failed ({attempt.reason}); trying a pristine tree")
        first = attempt.reason
        source = fresh()
        attempt = _build(cfg, index, source, kept, log, budget, stale, expand, secrets, sandbox, box, hold)
    notes = (
        f"built in a pristine tree after the build on earlier outputs failed: {first}"
        if attempt.status == "ok"
        else f"also failed in a pristine tree (on earlier outputs: {first})"
    )
    return attempt, notes


def _build(
    cfg: BuildConfig,
    index: int,
    source: Path,
    kept: Path,
    log: Path,
    budget: Budget,
    stale: list[str],
    expand: Callable[[str], str],
    secrets: Iterable[str],
    sandbox: Sandbox | None,
    box: Box | None,
    hold: int,
) -> Attempt:
    """One run of the build command in `source`, then its binaries kept."""
    for rel in stale:  # provenance: only what this build makes can be kept
        if box is not None:
            box.remove(source / rel)
        elif not (source / rel).is_dir():
            (source / rel).unlink(missing_ok=True)
    env = clean_env(_ccache_env(source) if sandbox is None else {"CCACHE_DISABLE": "1"}, drop=secrets)
    if cfg.hide_git:  # `git` in the build finds no repository: a commit stamp reads "unknown"
        env["GIT_DIR"] = os.devnull
    if sandbox is not None:
        note(log, f"# untrusted code, in the sandbox: {sandbox.text()}")
    argv = command_argv(cfg, index, source, expand)
    res = step(argv, source, env, log, budget, hold, sandbox, what=f"`{argv[0]}`")
    if res is not None:
        return Attempt(res[0], f"build command {res[1]}", budget.used, {})
    variant = cfg.choices[index]
    binaries, hashes, missing_name = keep_binaries(cfg, variant, source, kept, box)
    if missing_name:
        return Attempt(
            "no-binary",
            f"the build command left no binary for {{{missing_name}}} "
            f"(looked for {', '.join(variant.binaries[missing_name])} in the tree; a link out of it is not kept)",
            budget.used,
            {},
        )
    return Attempt("ok", "", budget.used, binaries, None, hashes)


def _ccache_env(source: Path) -> dict[str, str]:
    """ccache's compiler links first on PATH (`cc`, `gcc`, `c++` … resolve to ccache), paths
    hashed relative to the tree, where ccache and its links are installed; else nothing."""
    links = ccache_path()
    if links is None:
        return {}
    return {
        "PATH": f"{links}{os.pathsep}{os.environ.get('PATH', '')}",
        "CCACHE_BASEDIR": str(source.resolve()),
        "CCACHE_NOHASHDIR": "1",
    }
