"""Histories of a small C program that prints one seeded choice: any project's shape, not llama's.

Why: a maintainer of another C/C++ project meets bisectbot with a program whose output is a draw
from a distribution, a history where one commit moves it a little and another does not compile.
This writes such histories, built for real with cmake, from a list of steps: each commit sets the
probability table (a stray outcome's share, a share of seeds that crash, a share of runs that mix
in the clock so a seed prints differently run to run), changes a compiled file without changing
behaviour, changes docs only, or breaks the build (the next step fixes it). Tests and benchmarks
(bench/bench_control.py) use it; shas depend only on the steps (fixed identity and dates).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from bisectbot.demo import _git, _git_env

LETTERS = "abcdefgh"

MAIN = r"""#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "table.h"
#include "util.h"

int main(int argc, char ** argv) {
    if (argc < 2 || strcmp(argv[1], "--help") == 0) { puts("usage: prog SEED"); return argc < 2; }
    const unsigned long long seed = strtoull(argv[1], NULL, 10);
    double u = uniform01(seed, STREAM);
    const double v = uniform01(seed, 2);
    if (CRASH > 0 && uniform01(seed, 3) < CRASH) abort();  /* a crash on this seed */
    if (NOISE > 0) {  /* the clock mixed in: a share of runs differ from run to run on one seed */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        const unsigned long long now = (unsigned long long)ts.tv_sec * 1000000000ULL + (unsigned long long)ts.tv_nsec;
        if (uniform01(now, 4) < NOISE) u = uniform01(seed ^ now, STREAM);
    }
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
project(choice VERSION 0.1 LANGUAGES C)
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
add_executable(prog src/main.c src/util.c)
"""


@dataclass(frozen=True)
class Step:
    """One commit: `kind` is a subject word (first, src, docs, change, break, …); `probs` the
    table from this commit on (None: unchanged); `broken` a syntax error in util.c (the next
    step without it fixes it); src-kind steps change a compiled comment, docs-kind the README."""

    kind: str
    probs: tuple[float, ...] | None = None
    stray: float | None = None
    broken: bool = False
    stream: int | None = None  # the draw's random stream from this commit on (None: unchanged; 1 first)
    crash: float | None = None  # the share of seeds whose run aborts, from this commit on (0 first)
    noise: float | None = None  # the share of runs whose draw mixes in the clock (0 first: deterministic)


@dataclass(frozen=True)
class ChoiceHistory:
    repo: Path
    commits: tuple[str, ...]
    kinds: tuple[str, ...]

    def first(self, kind: str) -> str:
        return self.commits[self.kinds.index(kind)]


def _table(probs: tuple[float, ...], stray: float, stream: int, crash: float = 0.0, noise: float = 0.0) -> str:
    values = ", ".join(repr(float(p)) for p in probs)
    return (
        f"#pragma once\n#define N_OUTCOMES {len(probs)}\nstatic const double PROBS[N_OUTCOMES] = {{{values}}};\n"
        f'static const char LETTERS[] = "{LETTERS[: len(probs)]}";\nstatic const double STRAY = {stray!r};\n'
        f"#define STREAM {stream}\nstatic const double CRASH = {crash!r};\nstatic const double NOISE = {noise!r};\n"
    )


def write_choice_history(dest: Path, steps: Sequence[Step], *, name: str = "choice") -> ChoiceHistory:
    """The history of `steps` in dest/repo (the first step must give `probs`)."""
    if not steps or steps[0].probs is None:
        raise ValueError("the first step sets the probability table")
    repo = dest / "repo"
    repo.mkdir(parents=True)
    env = _git_env()
    _git(repo, "init", "-q", "--template=", "-b", "main", env=env)
    probs: tuple[float, ...] = steps[0].probs
    stray, stream, crash, noise, rev, notes, shas = 0.0, 1, 0.0, 0.0, 0, 0, []
    for i, step in enumerate(steps):
        probs = step.probs if step.probs is not None else probs
        stray = step.stray if step.stray is not None else stray
        stream = step.stream if step.stream is not None else stream
        crash = step.crash if step.crash is not None else crash
        noise = step.noise if step.noise is not None else noise
        rev += step.kind == "src"
        notes += step.kind == "docs"
        util = UTIL_C.replace("@@REV@@", str(rev)) + ("int broken(void) { return }\n" if step.broken else "")
        files = {
            "CMakeLists.txt": CMAKE.replace("project(choice", f"project({name}"),
            "src/main.c": MAIN,
            "src/util.h": UTIL_H,
            "src/util.c": util,
            "src/table.h": _table(probs, stray, stream, crash, noise),
            "README.md": f"# {name}\n" + "".join(f"- note {k}\n" for k in range(notes)),
        }
        for rel, text in files.items():
            out = repo / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text, encoding="utf-8", newline="\n")
        date = f"{1709283600 + i * 3600} +0000"
        who = {"GIT_AUTHOR_NAME": "Choice", "GIT_AUTHOR_EMAIL": "choice@example.com", "GIT_AUTHOR_DATE": date}
        cenv = {**env, **who, **{k.replace("AUTHOR", "COMMITTER"): v for k, v in who.items()}}
        _git(repo, "add", "--all", ".", env=cenv)
        _git(repo, "commit", "-q", "--allow-empty", "--no-verify", "-m", f"{step.kind} ({i})", env=cenv)
        shas.append(_git(repo, "rev-parse", "HEAD", env=cenv))
    return ChoiceHistory(repo, tuple(shas), tuple(s.kind for s in steps))
