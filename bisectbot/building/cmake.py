"""What cmake says, read: which -D options and targets a tree has, why a step failed, and whether
a build directory's cache belongs to another place; and the ccache launcher flags (and, for a
build command, ccache's compiler links).

Why apart from the builder: these are the ways a llama.cpp tree of one era differs from another
(options and targets get renamed, retired) and the ways cmake reports it, each read from its
output or its files. The builder decides what to do with them (`build.builder`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from bisectbot.processes.boxfs import Box

UNUSED_HEADER = "Manually-specified variables were not used by the project:"


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


# Where distributions install ccache's compiler links (`cc` → ccache …): Debian and Ubuntu,
# Fedora, a source install, Homebrew.
CCACHE_LINKS = ("/usr/lib/ccache", "/usr/lib64/ccache", "/usr/local/lib/ccache", "/opt/homebrew/opt/ccache/libexec")


def ccache_path() -> str | None:
    """The directory of ccache's compiler links, put first on a build command's PATH so that
    whatever compiler it calls by name goes through ccache (None: ccache or its links missing)."""
    if shutil.which("ccache") is None:
        return None
    return next((d for d in CCACHE_LINKS if os.path.isfile(os.path.join(d, "cc"))), None)


def configured_elsewhere(build_dir: Path, source: Path, box: Box | None = None) -> str | None:
    """Why `build_dir`'s CMakeCache.txt belongs to another place (the state directory was moved
    or copied), or None. cmake refuses to configure such a directory, which is no fault of the
    commit being built. In a box untrusted code wrote to, the file is read following no link,
    and only its first megabyte (it could be made any size)."""
    try:
        if box is not None:
            text = box.read_head(build_dir / "CMakeCache.txt", 1 << 20) or ""
        else:
            text = (build_dir / "CMakeCache.txt").read_text(errors="replace")
    except OSError:
        return None
    cache = dict(ln.split("=", 1) for ln in text.splitlines() if "=" in ln and not ln.startswith(("#", "//")))
    for name, here in (("CMAKE_CACHEFILE_DIR", build_dir), ("CMAKE_HOME_DIRECTORY", source)):
        there = cache.get(f"{name}:INTERNAL")
        if there is not None and Path(there).resolve() != here.resolve():
            return f"its CMakeCache.txt was written for {name} {there}, not {here} (a moved or copied state directory)"
    return None


def unused_defines(log: Path, start: int) -> set[str]:
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


def target_listing(build_dir: Path) -> list[str]:
    """The command that lists a configured directory's targets: `cmake --build … --target help`
    for Makefiles; for Ninja its every output (`ninja -t targets all`), because Ninja's help
    names only phony targets, not an executable built under its own name at the top."""
    if (build_dir / "build.ninja").is_file():
        return ["ninja", "-C", str(build_dir), "-t", "targets", "all"]
    return ["cmake", "--build", str(build_dir), "--target", "help"]


def target_names(help_text: str) -> set[str]:
    """Targets in `target_listing`'s output (Makefiles: '... name'; Ninja: 'name: rule')."""
    names = set()
    for line in help_text.splitlines():
        line = line.strip()
        if line.startswith("... "):
            names.add(line[4:].split()[0])
        elif ":" in line and not line.startswith("The following"):
            names.add(line.split(":", 1)[0].strip())
    return names


def _read_from(log: Path, start: int) -> str:
    try:
        with open(log, "rb") as fh:
            fh.seek(start)
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def first_error(log: Path, start: int = 0) -> str:
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
