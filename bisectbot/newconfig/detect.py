"""`bisectbot init`: which build a project has (build.kind), and for a build command which of
the files it makes is the program.

Why: most projects are not cmake projects. What init can see decides, unless the user says
(`--build-kind`, `--build-command`, `--binary`):

* a command line with no `{binary}` runs nothing that is built: build.kind `none`, and it must
  reach the program through `{source}` (the commit's own tree: `python3 {source}/pick.py`);
* otherwise a `CMakeLists.txt` at the good commit is built with cmake (its targets listed);
* otherwise a Makefile (`GNUmakefile`, `makefile`, `Makefile`, as make looks for them) is built
  with `make -j{jobs}`; `--build-command` names any other build (meson, cargo, a script).

A build command's program is found by building once: the good commit's tree is exported to a
scratch directory, the command is run there, and the one executable it made (new, or written
anew) that is not a library is `{binary}`. None, or several, is an error asking for
`--binary PATH`. Every error is one line naming what and where.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from bisectbot.building.buildkeys import Placeholders
from bisectbot.config.sections import COMMAND_PLACEHOLDERS, check_placeholders
from bisectbot.errors import ConfigError
from bisectbot.processes.procs import clean_env, run

MAKEFILES = ("GNUmakefile", "makefile", "Makefile")  # make's own order
MAKE_COMMAND = ("make", "-j{jobs}")
KINDS = ("cmake", "command", "none")
# Executables a build leaves that are not programs: libraries and objects.
NOT_PROGRAM = re.compile(r"\.(so(\.\d+)*|dylib|dll|a|o|obj|la)$")
BUILD_TIMEOUT = 1800.0  # seconds, as build.timeout's default


@dataclass(frozen=True)
class BuildWish:
    """What the user said about the build: `--build-kind`, `--build-command` (split as a shell
    would, never run through one), `--binary` (a path under the tree the command ran in)."""

    kind: str | None = None
    command: tuple[str, ...] | None = None
    binary: str | None = None

    @classmethod
    def of(cls, kind: str | None, command: str | None, binary: str | None) -> "BuildWish":
        if kind is not None and kind not in KINDS:
            raise ConfigError(f"init: --build-kind {kind!r}: it is one of {', '.join(KINDS)}")
        try:
            words = tuple(shlex.split(command)) if command is not None else None
        except ValueError as exc:
            raise ConfigError(f"init: --build-command {command!r}: {exc}") from None
        if words is not None and not words:
            raise ConfigError("init: --build-command is empty")
        try:
            check_placeholders(words or (), "--build-command", COMMAND_PLACEHOLDERS)
        except ValueError as exc:
            raise ConfigError(f"init: {exc}") from None
        return cls(kind, words, binary)


def choose_kind(tree: Path, argv: Sequence[str], wish: BuildWish, sha: str) -> str:
    """The build kind for this tree and command line (see the module's docstring)."""
    uses_binary = any("{binary}" in a for a in argv)
    kind = wish.kind
    if kind is None:
        if not uses_binary:
            kind = "none"
        elif wish.command is not None:
            kind = "command"
        elif (tree / "CMakeLists.txt").is_file():
            kind = "cmake"
        elif any((tree / name).is_file() for name in MAKEFILES):
            kind = "command"
        else:
            raise ConfigError(
                f"init: {sha[:12]} has no CMakeLists.txt and no Makefile: give --build-command (e.g. "
                "'cargo build --release' with --binary target/release/NAME), or for a program run from "
                "its tree a command line with {source} and no {binary} (python3 {source}/main.py)"
            )
    _check_wish(kind, argv, wish, uses_binary)
    return kind


def _check_wish(kind: str, argv: Sequence[str], wish: BuildWish, uses_binary: bool) -> None:
    if kind == "none":
        if uses_binary or wish.command is not None or wish.binary is not None:
            what = "{binary} in the command" if uses_binary else "--build-command" if wish.command else "--binary"
            raise ConfigError(
                f"init: {what}: with build kind none nothing is built (the program is run from {{source}})"
            )
        if not any("{source}" in a for a in argv):
            raise ConfigError(
                "init: the command names neither {binary} (a program the build makes) nor {source} "
                "(the commit's own tree, for a program run from it: python3 {source}/main.py)"
            )
        return
    if not argv or "{binary}" not in argv[0]:
        raise ConfigError(f"init: the command starts with {{binary}} (the program the {kind} build makes)")
    if kind == "cmake" and (wish.command is not None or wish.binary is not None):
        raise ConfigError("init: --build-command and --binary go with a build command; cmake builds --target")


def build_command(tree: Path, wish: BuildWish, sha: str) -> list[str]:
    """The build command: --build-command, or `make -j{jobs}` for a tree with a Makefile."""
    if wish.command is not None:
        return list(wish.command)
    if any((tree / name).is_file() for name in MAKEFILES):
        return list(MAKE_COMMAND)
    raise ConfigError(f"init: --build-kind command needs --build-command: {sha[:12]} has no Makefile")


def find_binary(tree: Path, command: Sequence[str], binary: str | None, sha: str) -> str:
    """Run the build command once in `tree` (a scratch export of the good commit) and name the
    program it made: `binary` when given (it must be there, executable), else the one
    executable, not a library, that is new or written anew."""
    before = _executables(tree)
    values = {"jobs": str(os.cpu_count() or 1), "source": str(tree)}  # {config_dir}, {fixtures}: as written
    argv = [a.format_map(Placeholders(values)) if "{" in a else a for a in command]
    shown = " ".join(command)
    res = run(argv, cwd=tree, env=clean_env(), timeout=BUILD_TIMEOUT)  # a program not found: exit 127
    if res.timed_out:
        raise ConfigError(f"init: `{shown}` at {sha[:12]} took longer than {BUILD_TIMEOUT:g} s")
    if res.returncode != 0:
        said = [ln.strip() for ln in (res.stderr or res.stdout).splitlines() if ln.strip()]
        raise ConfigError(
            f"init: `{shown}` failed at {sha[:12]} (exit {res.returncode}): {said[-1] if said else 'no output'}"
        )
    if binary is not None:
        path = tree / binary
        if not (path.is_file() and os.access(path, os.X_OK)) or not path.resolve().is_relative_to(tree.resolve()):
            raise ConfigError(f"init: `{shown}` at {sha[:12]} left no executable {binary} in the tree (--binary)")
        return binary
    after = _executables(tree)
    made = sorted(rel for rel, stamp in after.items() if before.get(rel) != stamp)
    if len(made) != 1:
        found = (
            f"{len(made)} executables ({', '.join(made[:5])}{', …' if len(made) > 5 else ''})"
            if made
            else "no executable"
        )
        raise ConfigError(
            f"init: `{shown}` at {sha[:12]} made {found}: give --binary PATH, the program {{binary}} stands for "
            "(relative to the tree)"
        )
    return made[0]


def _executables(tree: Path) -> dict[str, tuple[int, int]]:
    """Each executable regular file under `tree` that is not a library (links not followed),
    with its mtime and size."""
    found: dict[str, tuple[int, int]] = {}
    for top, dirs, names in os.walk(tree):
        dirs[:] = [d for d in dirs if d != ".git"]
        for name in names:
            path = os.path.join(top, name)
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if (
                os.path.isfile(path)
                and not os.path.islink(path)
                and st.st_mode & 0o111
                and not NOT_PROGRAM.search(name)
            ):
                found[os.path.relpath(path, tree)] = (st.st_mtime_ns, st.st_size)
    return found
