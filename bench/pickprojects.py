"""Histories of a small program that prints one seeded word — `pick: red` — built three ways.

Why (issue 48): a maintainer of another project meets bisectbot with a program of their own, whose
output is a word, not a token stream, and a build that is a cmake project, a plain Makefile, or no
build at all (a Python script). This writes such a history, the same one for each kind: a first
commit tagged `v1.0`, commits that change a compiled (or imported) file without changing
behaviour, commits that change docs only, one commit at `culprit` that moves the choice (red .40
→ .52, blue .20 → .08: total variation 0.12) and, for the compiled kinds, one commit whose build
fails (the next one fixes it). Shas depend only on the arguments (fixed identity and dates).

The program draws u = splitmix64(seed) in [0, 1) and prints `pick: WORD` by the cumulative table;
the C and the Python version draw the same u, so every kind prints the same word for a seed.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from bisectbot.demo import _git, _git_env

KINDS = ("cmake", "make", "python")
WORDS = ("red", "green", "blue", "yellow")
BEFORE = (0.40, 0.25, 0.20, 0.15)
AFTER = (0.52, 0.25, 0.08, 0.15)  # TV 0.12 from BEFORE

C_MAIN = r"""#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "table.h"
#include "draw.h"

int main(int argc, char ** argv) {
    unsigned long long seed = 0;
    for (int i = 1; i + 1 < argc; ++i)
        if (strcmp(argv[i], "--seed") == 0) seed = strtoull(argv[i + 1], NULL, 10);
    const double u = uniform01(seed);
    double acc = 0.0;
    for (int i = 0; i < N_WORDS; ++i) {
        acc += PROBS[i];
        if (u < acc) { printf("pick: %s\n", WORDS[i]); return 0; }
    }
    printf("pick: %s\n", WORDS[N_WORDS - 1]);
    return 0;
}
"""

C_DRAW_H = """#pragma once
double uniform01(unsigned long long seed);
"""

C_DRAW = """#include "draw.h"
/* splitmix64: a uniform in [0, 1) fixed by the seed */
double uniform01(unsigned long long seed) {
    unsigned long long z = seed * 0x9E3779B97F4A7C15ULL + 0x94D049BB133111EBULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0;
}
/* revision @@REV@@ */
"""

CMAKE = """cmake_minimum_required(VERSION 3.16)
project(pick LANGUAGES C)
add_executable(pick src/main.c src/draw.c)
"""

MAKEFILE = """CC ?= cc
CFLAGS ?= -O2

pick: src/main.c src/draw.c src/draw.h src/table.h
\t$(CC) $(CFLAGS) -o pick src/main.c src/draw.c

clean:
\trm -f pick
"""

PY_MAIN = '''"""pick: one seeded word."""
import sys

from draw import uniform01
from table import PROBS, WORDS


def main(argv):
    seed = int(argv[argv.index("--seed") + 1]) if "--seed" in argv else 0
    u, acc = uniform01(seed), 0.0
    for word, p in zip(WORDS, PROBS):
        acc += p
        if u < acc:
            print(f"pick: {word}")
            return 0
    print(f"pick: {WORDS[-1]}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
'''

PY_DRAW = '''"""splitmix64: a uniform in [0, 1) fixed by the seed (as the C version draws it)."""
M = (1 << 64) - 1


def uniform01(seed):
    z = (seed * 0x9E3779B97F4A7C15 + 0x94D049BB133111EB) & M
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    z ^= z >> 31
    return (z >> 11) / 9007199254740992.0
# revision @@REV@@
'''


@dataclass(frozen=True)
class PickHistory:
    """A generated history: the repository, its commits oldest first, the culprit and the break."""

    repo: Path
    kind: str
    commits: tuple[str, ...]
    culprit: str
    broken: str | None  # a commit whose build fails (compiled kinds), fixed by the next

    @property
    def good(self) -> str:
        return self.commits[0]

    @property
    def command(self) -> list[str]:
        """The command line a maintainer gives `bisectbot init` after `--`."""
        if self.kind == "python":
            return ["python3", "{source}/pick.py", "--seed", "{seed}"]
        return ["{binary}", "--seed", "{seed}"]


def _files(kind: str, probs: tuple[float, ...], rev: int, notes: int, broken: bool) -> dict[str, str]:
    readme = "# pick\n\nPrints one seeded word.\n" + "".join(f"- note {k}\n" for k in range(notes))
    if kind == "python":
        table = f"WORDS = {list(WORDS)!r}\nPROBS = {list(probs)!r}\n"
        return {
            "pick.py": PY_MAIN,
            "draw.py": PY_DRAW.replace("@@REV@@", str(rev)),
            "table.py": table,
            "README.md": readme,
        }
    values = ", ".join(repr(float(p)) for p in probs)
    words = ", ".join(f'"{w}"' for w in WORDS)
    table = (
        f"#pragma once\n#define N_WORDS {len(WORDS)}\nstatic const double PROBS[N_WORDS] = {{{values}}};\n"
        f"static const char * const WORDS[N_WORDS] = {{{words}}};\n"
    )
    draw = C_DRAW.replace("@@REV@@", str(rev)) + ("int broken(void) { return }\n" if broken else "")
    files = {
        "src/main.c": C_MAIN,
        "src/draw.h": C_DRAW_H,
        "src/draw.c": draw,
        "src/table.h": table,
        "README.md": readme,
    }
    files["CMakeLists.txt" if kind == "cmake" else "Makefile"] = CMAKE if kind == "cmake" else MAKEFILE
    return files


def write_pick_history(
    dest: Path, kind: str, n_commits: int = 40, culprit: int = 27, broken: int | None = 9, seed: int = 0
) -> PickHistory:
    """The history in dest/repo: commit 0 tagged v1.0, the change at `culprit`, a broken build at
    `broken` (compiled kinds only; fixed by the next commit), the other commits a random mix of
    behaviour-neutral source changes and docs-only changes (seeded by `seed`)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {', '.join(KINDS)}")
    if not 0 < culprit < n_commits or (broken is not None and not 0 < broken < n_commits - 1):
        raise ValueError("the culprit and the broken build lie strictly inside the history")
    broken = broken if kind != "python" and broken != culprit else None
    repo = dest / "repo"
    repo.mkdir(parents=True)
    env = _git_env()
    _git(repo, "init", "-q", "--template=", "-b", "main", env=env)
    rng = random.Random(seed)
    rev = notes = 0
    shas: list[str] = []
    for i in range(n_commits):
        what = "first" if i == 0 else "change" if i == culprit else "break" if i == broken else ""
        if not what:
            what = rng.choice(("src", "docs"))
        rev += what == "src"
        notes += what == "docs"
        probs = AFTER if i >= culprit else BEFORE
        for rel, text in _files(kind, probs, rev, notes, broken=i == broken).items():
            out = repo / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text, encoding="utf-8", newline="\n")
        date = f"{1735693200 + i * 3600} +0000"
        who = {"GIT_AUTHOR_NAME": "Pick", "GIT_AUTHOR_EMAIL": "pick@example.com", "GIT_AUTHOR_DATE": date}
        cenv = {**env, **who, **{k.replace("AUTHOR", "COMMITTER"): v for k, v in who.items()}}
        _git(repo, "add", "--all", ".", env=cenv)
        _git(repo, "commit", "-q", "--allow-empty", "--no-verify", "-m", f"{what} ({i})", env=cenv)
        shas.append(_git(repo, "rev-parse", "HEAD", env=cenv))
        if i == 0:
            _git(repo, "tag", "v1.0", env=cenv)
    return PickHistory(repo, kind, tuple(shas), shas[culprit], shas[broken] if broken is not None else None)
