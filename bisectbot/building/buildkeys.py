"""What identifies a build: its keys, and the toolchain that compiles it.

Why keys that cannot go stale: a stored build is reused only if the commit, the cmake arguments
and variants, the contents of files they name and the toolchain are the same. Builds with the same
cmake arguments share one build directory (keyed apart for untrusted code). The toolchain is also
what reports state the builds were made with.
"""

from __future__ import annotations

import functools
import os
import platform
import shutil
from pathlib import Path
from typing import Iterable, Mapping

from bisectbot import __version__
from bisectbot.config.sections import BuildConfig
from bisectbot.processes.procs import run
from bisectbot.records.keys import json_key
from bisectbot.records.reports import Environment
from bisectbot.state.files import file_sha256

# Added to the build directory key of sandboxed builds (never a cmake argument).
UNTRUSTED_DIR = "#untrusted"


def build_key(cfg: BuildConfig, values: Mapping[str, str] | None = None) -> str:
    """Identifies builds that are interchangeable: the cmake arguments and variants (a build
    command and its variants), the contents of the files they name, the kept globs, and the
    toolchain that compiles them. With build.kind none, the kept tree of a commit: one key."""
    if cfg.kind == "none":
        return json_key({"kind": "none"}, 12)
    args = [*cfg.cmake_args, *(a for v in cfg.choices for a in v.cmake_args), *(a for c in cfg.commands for a in c)]
    data: dict[str, object] = {
        "args": cfg.cmake_args,
        "variants": [v.key() for v in cfg.choices],
        "keep": cfg.keep,
        "files": named_files(args, values or {}),
        "toolchain": toolchain_identity(),
    }
    if cfg.kind != "cmake":  # only then: cmake's keys stay as they were stored
        data.update(kind=cfg.kind, command=cfg.command)
    if cfg.hide_git:  # only when set: keys stored before it existed stay the same
        data["hide_git"] = True
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


def named_paths(args: Iterable[str], values: Mapping[str, str]) -> dict[str, Path]:
    """The absolute path each argument names (`-DX=<path>` or a path), existing or not, keyed by
    the argument as written."""
    out: dict[str, Path] = {}
    known = Placeholders(values)
    for arg in args:
        text = arg.format_map(known) if "{" in arg else arg
        value = text.split("=", 1)[1] if text.startswith("-D") and "=" in text else text
        if Path(value).is_absolute():
            out[arg] = Path(value)
    return out


def named_files(args: Iterable[str], values: Mapping[str, str]) -> dict[str, str]:
    """sha256 of every existing file an argument names (`-DX=<path>` or a path), keyed by the
    argument as written: editing such a file changes what a stored build or run stood for."""
    return {arg: file_sha256(path) for arg, path in named_paths(args, values).items() if path.is_file()}


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
        build=build_text(cfg),
    )


def build_text(cfg: BuildConfig) -> str:
    """What builds a commit, for reports, when it is not cmake ("" for cmake: its own line)."""
    if cfg.kind == "command":
        return "command: " + " | ".join(" ".join(c) for c in dict.fromkeys(tuple(c) for c in cfg.commands))
    if cfg.kind == "none":
        return "none: each commit's own tree is run (build.kind none)"
    return ""
