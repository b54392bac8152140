"""Generated histories with two staged defects, built for real with cmake: a small C program
draws one outcome per seed from a probability table; a first defect moves the table by total
variation 0.15 (the hardest direction), a later one makes it gross; optionally 2% of seeds print a
stray outcome on every commit. Between them: commits that change a compiled file (a comment in
`src/util.c`) and docs-only commits, which the compile-input rule skips as equivalent — the
first defect's parent is one of them in about half of the histories.

The issue this answers (#20): a quick step calls the first defect's commit "unlike the broken
end", the search ends at the gross commit, and only a test against the reference on fresh seeds
can send it back. `write_staged(dest, seed)` makes one history; `config` its bisectbot config.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bisectbot.core.stats import hardest_tv_shift
from bisectbot.demo import _git, _git_env

LETTERS = "abc"
REFERENCE = (0.35, 0.45, 0.20)
MILD = tuple(round(x, 6) for x in hardest_tv_shift(REFERENCE, 0.15))
GROSS = (1.0, 0.0, 0.0)
STRAY = 0.02

MAIN = r"""#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "table.h"
#include "util.h"

int main(int argc, char ** argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0) { puts("usage: prog SEED"); return argc < 2; }
    const unsigned long long seed = strtoull(argv[1], NULL, 10);
    const double u = uniform01(seed, 1), v = uniform01(seed, 2);
    if (v < STRAY) { puts("z"); return 0; }  /* a stray outcome */
    double acc = 0.0;
    for (int i = 0; i < N_OUTCOMES; ++i) {
        acc += PROBS[i];
        if (u < acc) { printf("%c\n", LETTERS[i]); return 0; }
    }
    printf("%c\n", LETTERS[N_OUTCOMES - 1]);
    return 0;
}
"""

UTIL_H = """#pragma once
double uniform01(unsigned long long seed, unsigned long long stream);
"""

UTIL_C = """#include "util.h"
/* splitmix64: a uniform in [0, 1) fixed by (seed, stream) */
double uniform01(unsigned long long seed, unsigned long long stream) {
    unsigned long long z = seed * 0x9E3779B97F4A7C15ULL + stream * 0xBF58476D1CE4E5B9ULL + 0x94D049BB133111EBULL;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0;
}
/* revision @@REV@@ */
"""

CMAKE = """cmake_minimum_required(VERSION 3.16)
project(staged VERSION 0.1 LANGUAGES C)
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
add_executable(prog src/main.c src/util.c)
"""


def _table(probs: tuple[float, ...], stray: float) -> str:
    values = ", ".join(repr(float(p)) for p in probs)
    return (
        f"#pragma once\n#define N_OUTCOMES {len(probs)}\nstatic const double PROBS[N_OUTCOMES] = {{{values}}};\n"
        f'static const char LETTERS[] = "{LETTERS}";\nstatic const double STRAY = {stray!r};\n'
    )


@dataclass(frozen=True)
class Staged:
    repo: Path
    commits: tuple[str, ...]
    kinds: tuple[str, ...]  # first | src | docs | mild | gross, one per commit

    @property
    def mild(self) -> str:
        """The first departure from the reference: the commit of the TV 0.15 defect."""
        return self.commits[self.kinds.index("mild")]

    @property
    def gross(self) -> str:
        return self.commits[self.kinds.index("gross")]

    @property
    def parent_skipped(self) -> bool:
        """The first defect's parent is a docs-only commit (skipped as equivalent)."""
        return self.kinds[self.kinds.index("mild") - 1] == "docs"


def plan(seed: int, n: int = 24) -> list[str]:
    """The kinds of the n commits of history `seed`: the two defects at random places, each
    other commit docs-only with probability 0.55 (llama.cpp's share)."""
    rnd = random.Random(seed)
    mild = rnd.randrange(2, n - 6)
    gross = rnd.randrange(mild + 2, n - 1)
    kinds = ["first"]
    for i in range(1, n):
        kinds.append("mild" if i == mild else "gross" if i == gross else "docs" if rnd.random() < 0.55 else "src")
    return kinds


def write_staged(dest: Path, seed: int, *, stray: bool = False, n: int = 24) -> Staged:
    """History `seed` in dest/repo (fixed dates: shas are stable)."""
    repo = dest / "repo"
    repo.mkdir(parents=True)
    env = _git_env()
    _git(repo, "init", "-q", "--template=", "-b", "main", env=env)
    kinds = plan(seed, n)
    probs, rev, notes, shas = REFERENCE, 0, 0, []
    for i, kind in enumerate(kinds):
        if kind == "mild":
            probs = MILD
        elif kind == "gross":
            probs = GROSS
        elif kind == "src":
            rev += 1
        elif kind == "docs":
            notes += 1
        files = {
            "CMakeLists.txt": CMAKE,
            "src/main.c": MAIN,
            "src/util.h": UTIL_H,
            "src/util.c": UTIL_C.replace("@@REV@@", str(rev)),
            "src/table.h": _table(probs, STRAY if stray else 0.0),
            "README.md": "# staged\n" + "".join(f"- note {k}\n" for k in range(notes)),
        }
        for rel, text in files.items():
            out = repo / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text, encoding="utf-8", newline="\n")
        date = f"{1709283600 + i * 3600} +0000"
        cenv = dict(
            env,
            GIT_AUTHOR_NAME="Staged",
            GIT_AUTHOR_EMAIL="staged@example.com",
            GIT_AUTHOR_DATE=date,
            GIT_COMMITTER_NAME="Staged",
            GIT_COMMITTER_EMAIL="staged@example.com",
            GIT_COMMITTER_DATE=date,
        )
        _git(repo, "add", "--all", ".", env=cenv)
        _git(repo, "commit", "-q", "--allow-empty", "--no-verify", "-m", f"{kind} ({i})", env=cenv)
        shas.append(_git(repo, "rev-parse", "HEAD", env=cenv))
    return Staged(repo, tuple(shas), tuple(kinds))


def config(history: Staged, dest: Path, **test: Any) -> Path:
    """Its bisectbot config: the exact reference, the default test levels (or `test`)."""
    data = {
        "name": "staged",
        "repo": {"path": str(history.repo)},
        "build": {
            "cmake_args": ["-DCMAKE_BUILD_TYPE=Release"],
            "targets": ["prog"],
            "binaries": {"binary": ["bin/prog"]},
            "timeout": 300,
        },
        "run": {"argv": ["{binary}", "{seed}"], "max_runs": 4000, "timeout": 10, "jobs": 0},
        "parse": {"split": "chars", "expect_tokens": 1},
        "statistic": {"outcome": {"position": 0}},
        "reference": {"probs": dict(zip(LETTERS, REFERENCE))},
        **({"test": test} if test else {}),
    }
    path = dest / "staged.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


__all__ = ["Staged", "write_staged", "config", "plan", "REFERENCE", "MILD", "GROSS"]
