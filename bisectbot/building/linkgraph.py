"""The repository files a build's targets were compiled from, read from what cmake's generator
left: with Makefiles each target's link command, followed through the libraries it names to the
dependency files of its objects; with Ninja its log of every object's dependencies.

Why: a build records its inputs so that commits which cannot change the binary are known
(`building.inputs` narrows the line with them). What cannot be followed is unknown, never guessed.
"""

from __future__ import annotations

import functools
import os
import shlex
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal, Mapping, Sequence

from bisectbot.building.inputs import parse_depfile
from bisectbot.processes.procs import clean_env, run


def target_inputs(
    build_dir: Path, targets: Sequence[str], source: Path, env: Mapping[str, str] | None = None
) -> list[str] | None:
    """The repository files the targets were compiled from, as paths relative to `source`, read
    from Ninja's log of dependencies when the directory was generated for Ninja, else from the
    Makefiles. None when that cannot be followed: then the inputs are unknown and no commit is
    skipped (building.inputs). `env` is the build's (no credentials); by default the current one
    without them."""
    if (build_dir / "build.ninja").is_file():
        return _ninja_inputs(build_dir, targets, source, clean_env() if env is None else env)
    return _makefile_inputs(build_dir, targets, source)


def _ninja_inputs(build_dir: Path, targets: Sequence[str], source: Path, env: Mapping[str, str]) -> list[str] | None:
    """The union of `ninja_object_inputs`, or None when it is unknown or holds nothing."""
    per_object = ninja_object_inputs(build_dir, targets, source, env)
    if per_object is None:
        return None
    return sorted(set().union(*per_object.values())) or None


def ninja_object_inputs(
    build_dir: Path, targets: Sequence[str], source: Path, env: Mapping[str, str]
) -> dict[str, set[str]] | None:
    """Per object a Ninja build of the targets compiles, the repository files it was compiled
    from. Ninja keeps no dependency files (it reads each compiler's and deletes it): the objects
    are the outputs of the compile commands `ninja -t commands` lists for the targets (every step
    that builds them, through their libraries), and `ninja -t deps` prints what each was compiled
    from (paths relative to the build directory). None when an object has no VALID record (`deps
    not found`, or STALE: older than the object) or ninja cannot say."""
    if shutil.which("ninja") is None:
        return None
    listed = run(["ninja", "-C", str(build_dir), "-t", "commands", *targets], cwd=build_dir, env=env, timeout=120)
    if listed.returncode != 0:
        return None
    objects = []
    for line in listed.stdout.splitlines():
        words = _shell_words(line)
        if "-c" in words:
            objects += [
                words[i + 1] for i, w in enumerate(words[:-1]) if w == "-o" and words[i + 1].endswith((".o", ".obj"))
            ]
    if not objects:
        return None
    deps = run(["ninja", "-C", str(build_dir), "-t", "deps", *objects], cwd=build_dir, env=env, timeout=120)
    if deps.returncode != 0:
        return None
    out: dict[str, set[str]] = {}
    current: set[str] = set()
    relative = _repository_paths(source)
    for line in deps.stdout.splitlines():
        if not line.strip():
            continue
        if not line.startswith((" ", "\t")):  # "<object>: #deps N, deps mtime … (VALID)"
            if "#deps" not in line or "(VALID)" not in line:
                return None
            current = out.setdefault(line.split(":", 1)[0], set())
            continue
        if (rel := relative(str(build_dir), line.strip())) is not None:
            current.add(rel)
    if len(out) != len(set(objects)):
        return None
    return out


def _repository_paths(source: Path) -> Callable[[str, str], str | None]:
    """(directory, name as a dependency list gives it) → the file's path relative to the
    repository at `source`, None for a system header or a file generated in the build
    directory; each name resolved once (every object of a llama.cpp build names the same few
    thousand headers: 270,000 resolutions took ~3 s a build)."""
    root = os.path.realpath(source)

    @functools.cache
    def relative(base: str, name: str) -> str | None:
        path = os.path.realpath(os.path.join(base, name))
        return os.path.relpath(path, root) if path.startswith(root + os.sep) else None

    return relative


def _makefile_inputs(build_dir: Path, targets: Sequence[str], source: Path) -> list[str] | None:
    """The repository files the targets were compiled from, as paths relative to `source`: the
    dependency files (`<object>.d`) of every object linked into them, found by following each
    target's link command (`CMakeFiles/<target>.dir/link.txt`) through the libraries it names.
    None when that cannot be followed (another generator, no dependency file for an object):
    then the inputs are unknown and no commit is skipped (building.inputs)."""
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
    relative = _repository_paths(source)
    found: set[str] = set()
    for obj in objects:
        depfile = obj.with_name(obj.name + ".d")
        if not depfile.is_file():
            return None
        cwd = _compile_dir(obj)
        for dep in parse_depfile(depfile.read_text(errors="replace")):
            if (rel := relative(str(cwd), dep)) is not None:  # relative names: to where it was compiled
                found.add(rel)
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


def scanned_inputs(
    build_dir: Path, targets: Sequence[str], source: Path, env: Mapping[str, str], jobs: int, timeout: float
) -> list[str] | None:
    """The repository files the targets would be compiled from, found without compiling: every
    compile command Ninja would run for them (`ninja -t commands`) run as the preprocessor alone
    (`-E`, output discarded), with the same flags, writing its dependency file somewhere else.
    The same files a build's `target_inputs` reads, at a few per cent of a build's time (a
    llama.cpp tree: ~7 s against ~180 s cold). Sources generated in the build directory are
    generated first (Ninja builds just them). None when anything cannot be followed (not Ninja,
    a command not understood, a failure): the caller then builds."""
    if shutil.which("ninja") is None or not (build_dir / "build.ninja").is_file():
        return None
    listed = run(["ninja", "-C", str(build_dir), "-t", "commands", *targets], cwd=build_dir, env=env, timeout=120)
    if listed.returncode != 0:
        return None
    scratch = Path(tempfile.mkdtemp(prefix="scan-", dir=build_dir))
    try:
        lines = listed.stdout.splitlines()
        parsed = [c for i, line in enumerate(lines) if (c := _preprocess_only(line, scratch / f"{i}.d")) is not None]
        commands = [c for c in parsed if isinstance(c, _Preprocess)]
        if not commands or len(commands) != len(parsed):
            return None
        generated = [c.source for c in commands if not (build_dir / c.source).exists()]
        if generated:  # e.g. llama.cpp's build-info.cpp: made by a custom command, cheap
            made = run(["ninja", "-C", str(build_dir), *generated], cwd=build_dir, env=env, timeout=timeout)
            if made.returncode != 0:
                return None
        with ThreadPoolExecutor(max(1, jobs)) as pool:
            done = list(pool.map(lambda c: run(c.argv, cwd=build_dir, env=env, timeout=timeout), commands))
        if any(r.returncode != 0 for r in done):
            return None
        relative = _repository_paths(source)
        found = {
            rel
            for c in commands
            for dep in parse_depfile(c.depfile.read_text(errors="replace"))
            if (rel := relative(str(build_dir), dep)) is not None
        }
        return sorted(found) or None
    except OSError:
        return None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


@dataclass(frozen=True)
class _Preprocess:
    argv: list[str]
    source: str  # as the command names it
    depfile: Path


def _preprocess_only(line: str, depfile: Path) -> _Preprocess | None | Literal[""]:
    """A compile command of `ninja -t commands` turned into a preprocessor-only run; None for a
    line that compiles nothing (a link, an archive, a custom command); "" for a compile command
    this does not understand (a shell construct, a response file, no single source or output)."""
    words = _shell_words(line)
    if any(w.startswith("@") for w in words):  # a response file may hide a compile: not understood
        return ""
    if "-c" not in words:
        return None
    if any(w in ("&&", "||", ";", "|", ">", "<") for w in words) or words.count("-o") != 1 or words.count("-c") != 1:
        return ""
    if Path(words[0]).name in ("ccache", "sccache"):  # the launcher: nothing to cache here
        words = words[1:]
    out = words.index("-o")
    source_at = words.index("-c") + 1
    if out + 1 >= len(words) or source_at >= len(words) or words[source_at].startswith("-"):
        return ""
    depfile.touch()
    argv = list(words)
    argv[out + 1] = os.devnull
    argv[source_at - 1] = "-E"
    if "-MF" in argv and argv.index("-MF") + 1 < len(argv):
        argv[argv.index("-MF") + 1] = str(depfile)
    else:
        argv += ["-MD", "-MF", str(depfile)]
    return _Preprocess(argv, words[source_at], depfile)
