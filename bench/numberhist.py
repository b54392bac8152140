"""Histories of a small C program that prints one number per run: a rate, or a speed.

Why: the numeric statistics (`statistic.kind mean` and `time`) need real programs and histories
to be bisected through the real CLI, as bench/choice.py gives the categorical ones. Each commit
sets the program's behaviour:

* `mean`: the run prints `accept = R`, R the share of 16 seeded draws below `mean` (an acceptance
  rate: bounded in [0, 1], mean exactly `mean`, fixed by the seed); on a share `nan` of seeds it
  prints `accept = -nan` instead (nothing drafted, as llama-speculative does);
* `work`: the run first spins through `work` million steps of arithmetic and prints
  `speed = S tokens/s` (S = 64 tokens over the measured time): its wall time and S change with
  `work`, as a slowdown does.

Steps are like bench/choice.py's: `src` (a compiled comment changes, behaviour does not), `docs`,
`break` (the build fails; the next step repairs it). Shas depend only on the steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from bisectbot.demo import _git, _git_env

MAIN = r"""#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "params.h"
#include "util.h"

int main(int argc, char ** argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0) { puts("usage: prog SEED"); return argc < 2; }
    const unsigned long long seed = strtoull(argv[1], NULL, 10);
    if (WORK > 0) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        volatile double acc = (double)seed;
        for (long i = 0; i < WORK * 1000000L; ++i) { acc = acc * 1.0000001 + 1e-9; }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        const double secs = (t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9;
        printf("speed = %.3f tokens/s\n", 64.0 / (secs > 1e-9 ? secs : 1e-9));
        return 0;
    }
    if (uniform01(seed, 2) < NAN_SHARE) { puts("accept = -nan"); return 0; }  /* nothing drafted */
    int hits = 0;
    for (int i = 0; i < 16; ++i) hits += uniform01(seed, 3 + i) < MEAN;
    printf("accept = %.4f\n", hits / 16.0);
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
project(numbers VERSION 0.1 LANGUAGES C)
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
add_executable(prog src/main.c src/util.c)
"""


@dataclass(frozen=True)
class Step:
    """One commit: `kind` a subject word (first, src, docs, change, break, …); `mean` the rate's
    mean from this commit on and `work` the millions of steps a run spins through (None:
    unchanged; work 0: the rate is printed, no speed); `broken`: util.c does not compile."""

    kind: str
    mean: float | None = None
    work: int | None = None
    broken: bool = False
    nan: float | None = None  # the share of seeds whose run prints `accept = -nan` (no rate)


@dataclass(frozen=True)
class NumberHistory:
    repo: Path
    commits: tuple[str, ...]
    kinds: tuple[str, ...]

    def first(self, kind: str) -> str:
        return self.commits[self.kinds.index(kind)]


def write_number_history(dest: Path, steps: Sequence[Step], *, name: str = "numbers") -> NumberHistory:
    """The history of `steps` in dest/repo (the first step sets `mean` or `work`)."""
    if not steps or (steps[0].mean is None and steps[0].work is None):
        raise ValueError("the first step sets mean or work")
    repo = dest / "repo"
    repo.mkdir(parents=True)
    env = _git_env()
    _git(repo, "init", "-q", "--template=", "-b", "main", env=env)
    mean, work, nan = steps[0].mean or 0.5, steps[0].work or 0, steps[0].nan or 0.0
    rev, notes, shas = 0, 0, []
    for i, step in enumerate(steps):
        mean = step.mean if step.mean is not None else mean
        work = step.work if step.work is not None else work
        nan = step.nan if step.nan is not None else nan
        rev += step.kind == "src"
        notes += step.kind == "docs"
        util = UTIL_C.replace("@@REV@@", str(rev)) + ("int broken(void) { return }\n" if step.broken else "")
        files = {
            "CMakeLists.txt": CMAKE.replace("project(numbers", f"project({name}"),
            "src/main.c": MAIN,
            "src/util.h": UTIL_H,
            "src/util.c": util,
            "src/params.h": f"#pragma once\n#define MEAN {mean!r}\n#define WORK {int(work)}L\n#define NAN_SHARE {nan!r}\n",
            "README.md": f"# {name}\n" + "".join(f"- note {k}\n" for k in range(notes)),
        }
        for rel, text in files.items():
            out = repo / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text, encoding="utf-8", newline="\n")
        date = f"{1709283600 + i * 3600} +0000"
        who = {"GIT_AUTHOR_NAME": "Numbers", "GIT_AUTHOR_EMAIL": "numbers@example.com", "GIT_AUTHOR_DATE": date}
        cenv = {**env, **who, **{k.replace("AUTHOR", "COMMITTER"): v for k, v in who.items()}}
        _git(repo, "add", "--all", ".", env=cenv)
        _git(repo, "commit", "-q", "--allow-empty", "--no-verify", "-m", f"{step.kind} ({i})", env=cenv)
        shas.append(_git(repo, "rev-parse", "HEAD", env=cenv))
    return NumberHistory(repo, tuple(shas), tuple(s.kind for s in steps))
