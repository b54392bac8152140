"""Generated histories whose commits belong to different *eras* of a project, like llama.cpp's:
targets and cmake options renamed, the output format changed, a flag that crashes at run time,
a build directory left by a newer tree that breaks an older one. Real git, real cmake builds.

The sampler is the demo's (its exact reference holds in every era); only `main.cpp` (flags,
output format, a crash) and `CMakeLists.txt` (target, option, cache) change per era.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import yaml

from bisectbot import demo
from bisectbot.demo import (
    _BROKEN_HELPER,
    CONDITION_TOKEN,
    N_PREDICT,
    PROMPT,
    _git,
    _git_env,
    _render,
    _State,
    _templates,
    condition_prob,
    reference_probs,
)


@dataclass(frozen=True)
class Era:
    target: str = "prog"  # the cmake target; its binary is bin/<target>
    option: str = "NEW_FAST"  # the one cmake option the tree declares
    output: str = "new"  # new: "\n\nab<tokens>\n\n\n\n" on stdout; old: prompt on stderr, tokens alone
    draft_flag: str = "--draft-max"
    crash_on_cache_f32: bool = False  # `--cache f32` fails at run time (after an error line, SIGSEGV)
    crash: bool = False  # every run fails that way
    defect: bool = False  # the draft takes its top candidate (the distribution is wrong)
    mild_defect: bool = False  # ... at every other draft only (a milder change of the distribution)
    glitch: bool = False  # 2% of seeds print a stray token ('z') where the statistic reads
    broken: bool = False  # does not compile
    writes_cache: bool = False  # sets a cache variable naming a source only this tree has
    reads_cache: bool = False  # uses that variable when a reused build directory has it


@dataclass(frozen=True)
class EraHistory:
    repo: Path
    commits: tuple[str, ...]
    eras: tuple[Era, ...]

    def first(self, **want: Any) -> str:
        """The first commit whose era has all these attributes."""
        return next(
            sha for sha, era in zip(self.commits, self.eras) if all(getattr(era, k) == v for k, v in want.items())
        )


MAIN = r"""#include "sampling.h"
#include "speculative.h"
#include "util.h"
#include "version.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>

static void usage(const char * argv0) {
    std::fprintf(stderr, "usage: %s --seed N --prompt STR -n N [@@DRAFT@@ N] [--cache TYPE]\n", argv0);
}

int main(int argc, char ** argv) {
    unsigned long long seed = 0, n_predict = 4, draft_max = 3;
    std::string prompt, cache = "f16";
    for (int i = 1; i < argc; ++i) {
        const std::string arg = argv[i];
        if (arg == "-h" || arg == "--help") { usage(argv[0]); return 0; }
        if (i + 1 >= argc) { std::fprintf(stderr, "error: missing value for %s\n", arg.c_str()); return 2; }
        const std::string value = argv[++i];
        bool ok = true;
        if (arg == "--seed") { ok = parse_uint(value, seed); }
        else if (arg == "-n") { ok = parse_uint(value, n_predict); }
        else if (arg == "@@DRAFT@@") { ok = parse_uint(value, draft_max); }
        else if (arg == "--prompt") { prompt = value; }
        else if (arg == "--cache") { cache = value; }
        else { std::fprintf(stderr, "error: unknown argument %s\n", arg.c_str()); return 2; }
        if (!ok) { std::fprintf(stderr, "error: bad value for %s\n", arg.c_str()); return 2; }
    }
    if (@@CRASH@@) {
        std::fprintf(stderr, "loading model\n");
        std::fprintf(stderr, "error: V cache quantization requires flash_attn\n");
        std::fprintf(stderr, "backtrace follows\n");
        std::raise(SIGSEGV);
    }
    std::mt19937_64 rng(seed);
    const std::vector<int> tokens = speculative_generate(
        token_of(prompt.back()), static_cast<int>(n_predict), static_cast<int>(draft_max), rng);
    std::string generated;
    for (const int id : tokens) { generated += letter_of(id); }
    if (@@GLITCH@@ && seed % 50 == 7 && generated.size() > 1) { generated[1] = 'z'; }  // a stray token
@@OUTPUT@@
    return 0;
}
"""

NEW_OUTPUT = '    std::printf("\\n\\n%s%s\\n\\n\\n\\n", prompt.c_str(), generated.c_str());'
OLD_OUTPUT = '    std::fprintf(stderr, "%s", prompt.c_str());\n    std::printf("%s", generated.c_str());'

CMAKE = """cmake_minimum_required(VERSION 3.16)
project(specdemo VERSION 0.1 LANGUAGES CXX)
set(CMAKE_CXX_STANDARD 17)
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
option(@@OPTION@@ "an option of this era" OFF)
add_executable(@@TARGET@@ src/main.cpp src/speculative.cpp src/sampling.cpp src/util.cpp)
@@CACHE@@
"""
WRITES = (
    'set(PROG_EXTRA ${CMAKE_SOURCE_DIR}/src/extra.cpp CACHE FILEPATH "a source only this tree has")\n'
    "target_sources(@@TARGET@@ PRIVATE ${PROG_EXTRA})"
)
READS = "if(PROG_EXTRA)\n    target_sources(@@TARGET@@ PRIVATE ${PROG_EXTRA})\nendif()"


def _files(era: Era, serial: int) -> dict[str, str]:
    state = _State(version=serial, defect=era.defect, helpers=[_BROKEN_HELPER] if era.broken else [])
    files = _render(_templates(), state)
    if era.mild_defect and not era.defect:
        files["src/speculative.cpp"] = files["src/speculative.cpp"].replace(
            demo._DRAFT_PICK_OK,
            "            const int id = rng() % 2 ? argmax(q, N_VOCAB) : sample_categorical(q, N_VOCAB, rng);",
        )
    crash = "true" if era.crash else ('cache == "f32"' if era.crash_on_cache_f32 else "false")
    files["src/main.cpp"] = (
        MAIN.replace("@@DRAFT@@", era.draft_flag)
        .replace("@@CRASH@@", crash)
        .replace("@@GLITCH@@", "true" if era.glitch else "false")
        .replace("@@OUTPUT@@", NEW_OUTPUT if era.output == "new" else OLD_OUTPUT)
    )
    cache = WRITES if era.writes_cache else READS if era.reads_cache else ""
    files["CMakeLists.txt"] = (
        CMAKE.replace("@@CACHE@@", cache).replace("@@TARGET@@", era.target).replace("@@OPTION@@", era.option)
    )
    if era.writes_cache:
        files["src/extra.cpp"] = "// a translation unit only this era has\nint extra_unit() { return 1; }\n"
    return files


def write_history(
    dest: Path,
    eras: list[Era],
    *,
    subjects: list[str] | None = None,
    files: Callable[[int, Era], dict[str, str]] | None = None,
) -> EraHistory:
    """One commit per entry of `eras`, oldest first, in `dest/repo` (fixed dates: shas are stable).
    `files(i, era)` gives commit i's tree (default: the era's files, version i)."""
    repo = dest / "repo"
    repo.mkdir(parents=True)
    env = _git_env()
    _git(repo, "init", "-q", "--template=", "-b", "main", env=env)
    shas = []
    for i, era in enumerate(eras):
        for path in list(repo.rglob("*")):
            if path.is_file() and ".git" not in path.parts:
                path.unlink()
        for rel, text in (files(i, era) if files else _files(era, i)).items():
            out = repo / rel
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text, encoding="utf-8", newline="\n")
        date = f"{1709283600 + i * 86400} +0000"
        cenv = dict(
            env,
            GIT_AUTHOR_NAME="Era",
            GIT_AUTHOR_EMAIL="era@example.com",
            GIT_AUTHOR_DATE=date,
            GIT_COMMITTER_NAME="Era",
            GIT_COMMITTER_EMAIL="era@example.com",
            GIT_COMMITTER_DATE=date,
        )
        _git(repo, "add", "--all", ".", env=cenv)
        subject = subjects[i] if subjects else f"commit {i} ({era.target}, {era.option}, {era.output} output)"
        _git(repo, "commit", "-q", "--allow-empty", "--no-verify", "-m", subject, env=cenv)
        shas.append(_git(repo, "rev-parse", "HEAD", env=cenv))
    return EraHistory(repo, tuple(shas), tuple(eras))


NEW_PARSE = {"prefix": PROMPT, "split": "chars", "expect_tokens": N_PREDICT, "complete_suffix": "\n\n\n\n"}
OLD_PARSE = {"prefix": "", "split": "chars", "expect_tokens": N_PREDICT}


def command(draft_flag: str = "--draft-max", *extra: str) -> list[str]:
    return ["{binary}", "--seed", "{seed}", "--prompt", PROMPT, "-n", str(N_PREDICT), draft_flag, "3", *extra]


def config(
    history: EraHistory,
    dest: Path,
    *,
    build: dict[str, Any],
    run: dict[str, Any],
    parse: dict[str, Any] | None = None,
    name: str = "eras.yaml",
    **more: Any,
) -> Path:
    """A bisectbot config for an era history (the demo's statistic and exact reference)."""
    data = {
        "name": "eras",
        "repo": {"path": str(history.repo)},
        "build": {"cmake_args": ["-DCMAKE_BUILD_TYPE=Release"], "timeout": 300, **build},
        "run": {"first_seed": 1, "max_runs": 3000, "timeout": 10, "jobs": 0, "retries": 1, **run},
        "parse": parse or NEW_PARSE,
        "statistic": {"condition": {"position": 0, "token": CONDITION_TOKEN}, "outcome": {"position": 1}},
        "reference": {"probs": reference_probs(CONDITION_TOKEN), "condition_prob": condition_prob(CONDITION_TOKEN)},
        "test": {"alpha": 0.0005, "beta": 0.0005, "tolerance": 0.3},
        **more,
    }
    path = dest / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def both_targets(new_option: str = "NEW_FAST", old_option: str = "OLD_FAST") -> dict[str, Any]:
    """Build variants for the renamed target and option: the new spelling first."""
    return {
        "variants": [
            {"targets": ["prog"], "binaries": {"binary": ["bin/prog"]}, "cmake_args": [f"-D{new_option}=ON"]},
            {"targets": ["oldprog"], "binaries": {"binary": ["bin/oldprog"]}, "cmake_args": [f"-D{old_option}=ON"]},
        ]
    }


__all__ = [
    "Era",
    "EraHistory",
    "write_history",
    "config",
    "command",
    "both_targets",
    "NEW_PARSE",
    "OLD_PARSE",
    "replace",
    "field",
    "demo",
]
