"""Which commits can change the binary (pure): the inputs of a build, and the line they leave.

A build records the files it was compiled from (`build.linkgraph.target_inputs`: the compiler's
dependency files of every object linked into the target). A commit whose diff to its first
parent touches none of those inputs builds the same binary as its parent, so it cannot be the
first bad commit: the search runs over the commits that can change the binary (`narrow`), and
each one it names stands for the skipped commits after it (same binary).

The rule is conservative; a changed path counts as an input when it is
  * a file a build at either end of the range was compiled from;
  * a build file anywhere (`CMakeLists.txt`, `*.cmake`, `*.cmake.in`): it can change what is
    compiled, and how;
  * a submodule (gitlink): its content is not seen file by file;
  * a file added or deleted in a directory that holds an input (a glob, or an include path
    searched before another, may pick it up), or a changed file there with an extension some
    input has (a source the target compiles between the two ends, e.g. added after the good
    commit and gone before the bad one);
  * a path named in the config's command (`{source}/…`) or added by the user (`also`).
Files generated in the build directory (e.g. llama.cpp's build-info.cpp, which embeds the
commit hash) are not inputs: they are made from the build files, which are. A build without
dependency files (another generator, an old cmake) leaves the inputs unknown, and then no
commit is skipped.

A build command (build.kind command) leaves no dependency files to read, and a program run from
its tree (build.kind none) may read any file of it (a module it imports, a table it loads):
there every file of the tree is an input (`InputRule.whole_tree`), and only a commit that
changes no file at all (its tree is its parent's) is skipped.
"""

from __future__ import annotations

import fnmatch
import posixpath
from dataclasses import dataclass, field
from typing import Collection, Iterable, Mapping, Sequence

from bisectbot.core.plan import Narrowed

BUILD_FILE_NAMES = ("CMakeLists.txt",)
BUILD_FILE_SUFFIXES = (".cmake", ".cmake.in")


@dataclass(frozen=True)
class Change:
    """One path a commit changed relative to its first parent (renames are a delete and an add)."""

    path: str
    status: str  # A added, D deleted, M modified, T type changed
    gitlink: bool = False


def parse_depfile(text: str) -> list[str]:
    """The prerequisites of a Make-syntax dependency file (`obj.o: a.c b.h \\`), in order.

    Backslash-newline continues a line, `\\ ` is a space inside a name, `$$` a dollar."""
    joined = text.replace("\\\r\n", " ").replace("\\\n", " ")
    out: list[str] = []
    for line in joined.splitlines():
        words = _split_make_words(line)
        if ":" not in line or not words:
            continue
        # the first word(s) up to the one ending in ':' are targets
        for i, w in enumerate(words):
            if w.endswith(":"):
                out.extend(x for x in words[i + 1 :] if x)
                break
            if w == ":":
                out.extend(x for x in words[i + 1 :] if x)
                break
    return [w.replace("$$", "$") for w in out]


def _split_make_words(line: str) -> list[str]:
    words, cur, i = [], [], 0
    while i < len(line):
        c = line[i]
        if c == "\\" and i + 1 < len(line) and line[i + 1] in " #":
            cur.append(line[i + 1])
            i += 2
            continue
        if c in " \t":
            if cur:
                words.append("".join(cur))
                cur = []
        else:
            cur.append(c)
        i += 1
    if cur:
        words.append("".join(cur))
    return words


def is_build_file(path: str) -> bool:
    name = posixpath.basename(path)
    return name in BUILD_FILE_NAMES or name.endswith(BUILD_FILE_SUFFIXES)


def _suffix(path: str) -> str:
    name = posixpath.basename(path)
    return name[name.rfind(".") :] if "." in name else ""


def matches(path: str, specs: Iterable[str]) -> bool:
    """`git bisect start -- <paths>` style: a spec names the path itself, a directory above it,
    or is a glob (`*`, `?`, `[`) matched against the whole path."""
    for spec in specs:
        spec = spec.strip("/") if spec not in ("/", "") else ""
        if not spec or spec == ".":
            return True
        if any(ch in spec for ch in "*?[") and fnmatch.fnmatchcase(path, spec):
            return True
        if path == spec or path.startswith(spec + "/"):
            return True
    return False


@dataclass(frozen=True)
class InputRule:
    """The inputs known at the built ends of a range, and the extra paths that always count."""

    inputs: frozenset[str]
    also: tuple[str, ...] = ()
    # no dependency information (a build command, or no build): every file of the tree counts
    whole_tree: bool = False
    dirs: frozenset[str] = field(init=False)
    suffixes: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "dirs", frozenset(posixpath.dirname(p) for p in self.inputs))
        object.__setattr__(self, "suffixes", frozenset(s for s in map(_suffix, self.inputs) if s))

    def why(self, change: Change) -> str | None:
        """Why this change can change the binary, or None when it cannot."""
        path = change.path
        if self.whole_tree:
            return "a file of the tree (no dependency information)"
        if change.gitlink:
            return "a submodule"
        if path in self.inputs:
            return "an input"
        if is_build_file(path):
            return "a build file"
        if self.also and matches(path, self.also):
            return "a path named in the config or by --also"
        folder = posixpath.dirname(path)
        if folder in self.dirs:
            if change.status in ("A", "D"):
                return "a file added or deleted beside inputs"
            if _suffix(path) in self.suffixes:
                return "a file beside inputs with an input's extension"
        return None


def narrow(
    full: Sequence[str],
    changes: Mapping[str, Sequence[Change]],
    rule: InputRule | None,
    restrict: Sequence[str] = (),
    keep: Collection[str] = (),
) -> Narrowed:
    """Keep the ends and the commits whose changes can change the binary.

    `changes` maps each commit after the first to its changes against its first parent; a
    commit missing from it is kept (nothing is known). With no rule (the inputs are unknown)
    and no restriction, every commit is kept. `restrict` (like `git bisect start -- <paths>`)
    keeps only commits touching those paths, among those the rule keeps. Commits in `keep`
    (those the user skipped) stay on the line whatever they changed: standing for their parent
    they could be built as the parent of a culprit, and a boundary next to them must stay a
    range."""
    kept: list[str] = [full[0]]
    why: dict[str, str] = {}
    stands: dict[str, list[str]] = {}
    for sha in full[1:-1]:
        reason = "skipped by the user" if sha in keep else _keep_reason(changes.get(sha), rule, restrict)
        if reason is not None:
            kept.append(sha)
            why[sha] = reason
        else:
            stands.setdefault(kept[-1], []).append(sha)
    kept.append(full[-1])
    why[full[-1]] = "the bad end" if len(full) > 1 else ""
    return Narrowed(tuple(kept), tuple(full), {k: tuple(v) for k, v in stands.items()}, why)


def _keep_reason(changed: Sequence[Change] | None, rule: InputRule | None, restrict: Sequence[str]) -> str | None:
    if changed is None:
        return "its changes are unknown"
    if restrict:
        changed = [c for c in changed if matches(c.path, restrict)]
        if not changed:
            return None
    if rule is None:
        return "the inputs are unknown" if not restrict else f"touches {changed[0].path} (--paths)"
    for c in changed:
        reason = rule.why(c)
        if reason is not None:
            return f"{c.path}: {reason}"
    return None
