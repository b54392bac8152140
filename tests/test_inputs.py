"""Commits that cannot change the binary: the rule (pure), the inputs a real cmake build records,
and a real bisect over the narrowed line giving the same answer as over every commit."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Literal

import pytest

from bisectbot.building.builder import Builder
from bisectbot.building.inputs import Change, InputRule, matches, narrow, parse_depfile
from bisectbot.building.workspace import Workspace
from bisectbot.config import load_config
from bisectbot.config.sections import BuildConfig
from bisectbot.core.plan import Narrowing
from bisectbot.demo import DemoHistory, generate_demo
from bisectbot.events import Event, Events, LineNarrowed
from bisectbot.jobs import lifecycle as jobs
from bisectbot.records.reports import BisectStatus
from bisectbot.state.statedir import StateDir

from conftest import TOOLCHAIN, require


# -- the rule ---------------------------------------------------------------------------------
def test_depfiles_are_read_as_make_reads_them() -> None:
    text = "CMakeFiles/x.dir/a.cpp.o: ../src/a.cpp /usr/include/stdio.h \\\n ../src/my\\ dir/b.h ../src/c$$.h\n"
    assert parse_depfile(text) == ["../src/a.cpp", "/usr/include/stdio.h", "../src/my dir/b.h", "../src/c$.h"]
    assert parse_depfile("") == [] and parse_depfile("no rule here\n") == []


RULE = InputRule(
    frozenset(
        {
            "ggml/src/ggml.c",
            "ggml/include/ggml.h",
            "src/llama.cpp",
            "src/llama-impl.h",
            "examples/speculative/speculative.cpp",
        }
    ),
    also=("models/ggml-vocab-*.gguf",),
)


@pytest.mark.parametrize(
    "change, counts",
    [
        (Change("ggml/include/ggml.h", "M"), "an input"),
        (Change("src/llama-impl.h", "M"), "an input"),  # a header the target includes
        (Change("ggml/src/ggml-cuda.cu", "M"), None),  # beside inputs, never compiled
        (Change("ggml/src/ggml-cuda/mmq.cuh", "M"), None),  # a backend directory
        (Change("ggml/src/ggml-metal.m", "M"), None),
        (Change("examples/server/server.cpp", "M"), None),  # another target
        (Change("docs/build.md", "M"), None),
        (Change(".github/workflows/build.yml", "M"), None),
        (Change("gguf-py/gguf/constants.py", "M"), None),
        (Change("ggml/src/ggml-vulkan.cpp", "M"), "a file beside inputs with an input's extension"),
        (Change("src/llama-new.cpp", "A"), "a file added or deleted beside inputs"),  # a new file, compiled dir
        (Change("src/notes.txt", "A"), "a file added or deleted beside inputs"),
        (Change("src/old-unused.cpp", "D"), "a file added or deleted beside inputs"),
        (Change("ggml/src/CMakeLists.txt", "M"), "a build file"),
        (Change("cmake/build-info.cmake", "M"), "a build file"),
        (Change("examples/server/CMakeLists.txt", "M"), "a build file"),  # conservative: any build file
        (Change("kompute", "M", gitlink=True), "a submodule"),
        (Change("models/ggml-vocab-llama.gguf", "M"), "a path named in the config or by --also"),
    ],
)
def test_which_changes_can_change_the_binary(change: Change, counts: str | None) -> None:
    assert RULE.why(change) == counts


def test_paths_match_as_git_bisect_paths_do() -> None:
    assert matches("examples/speculative/speculative.cpp", ["examples/speculative"])
    assert matches("examples/speculative/speculative.cpp", ["examples/speculative/"])
    assert not matches("examples/speculative-simple/x.cpp", ["examples/speculative"])
    assert matches("src/llama-sampling.cpp", ["src/*.cpp"]) and not matches("src/x.h", ["src/*.cpp"])


def test_the_line_keeps_its_ends_and_what_can_change_the_binary() -> None:
    full = [f"{i:040x}" for i in range(8)]
    ch = {
        full[1]: [Change("docs/a.md", "M")],
        full[2]: [Change("src/llama.cpp", "M")],
        full[3]: [Change("ggml/src/ggml-cuda.cu", "M")],
        full[4]: [Change("README.md", "M")],
        full[5]: [Change("ggml/src/ggml.c", "M"), Change("docs/b.md", "M")],
        full[6]: [],
        full[7]: [Change("README.md", "M")],
    }
    n = narrow(full, ch, RULE)
    assert n.line == (full[0], full[2], full[5], full[7]) and n.skipped == 4
    assert n.stands_for == {full[0]: (full[1],), full[2]: (full[3], full[4]), full[5]: (full[6],)}
    assert n.why[full[5]] == "ggml/src/ggml.c: an input"
    assert n.expand(full[2], full[5]) == [full[2], full[3], full[4], full[5], full[6]]
    # unknown inputs: nothing skipped; unknown changes of a commit: that commit kept
    assert narrow(full, ch, None).line == tuple(full)
    assert full[1] in narrow(full, {k: v for k, v in ch.items() if k != full[1]}, RULE).line
    # --paths restricts among what the rule keeps (and alone, when the inputs are unknown)
    assert narrow(full, ch, RULE, ["ggml"]).line == (full[0], full[5], full[7])
    assert narrow(full, ch, None, ["docs"]).line == (full[0], full[1], full[5], full[7])


# -- a real cmake build ------------------------------------------------------------------------
FILES = {
    "CMakeLists.txt": "cmake_minimum_required(VERSION 3.14)\nproject(p CXX)\nadd_subdirectory(lib)\n"
    "add_executable(app app/main.cpp)\ntarget_link_libraries(app core)\n"
    "add_executable(tool tools/tool.cpp)\n",
    "lib/CMakeLists.txt": "file(GLOB CORE_SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/*.cpp)\n"
    "add_library(core STATIC ${CORE_SOURCES})\ntarget_include_directories(core PUBLIC include)\n",
    "lib/core.cpp": '#include "core.h"\nint core() { return detail() + 1; }\n',
    "lib/include/core.h": '#pragma once\n#include "detail.h"\nint core();\n',
    "lib/include/detail.h": "#pragma once\ninline int detail() { return 1; }\n",
    "lib/core-gpu.cu": "// a CUDA backend the CPU build never compiles\n",
    "lib/gpu/kernels.cu": "// more CUDA\n",
    "app/main.cpp": '#include "core.h"\nint main() { return core() == 2 ? 0 : 1; }\n',
    "tools/tool.cpp": "int main() { return 0; }\n",
    "docs/README.md": "docs\n",
}

STEPS = [  # (what the commit does, files to write, expected: kept?)
    ("change a .cu file beside the sources", {"lib/core-gpu.cu": "// v2\n"}, False),
    ("change the docs", {"docs/README.md": "docs v2\n"}, False),
    (
        "change a header included transitively",
        {"lib/include/detail.h": "#pragma once\ninline int detail() { return 1; } // v2\n"},
        True,
    ),
    ("change another target's source", {"tools/tool.cpp": "int main() { return 1; }\n"}, False),
    ("change a .cu file in a backend directory", {"lib/gpu/kernels.cu": "// v2\n"}, False),
    (
        "add a new file under a compiled directory (the glob picks it up)",
        {"lib/extra.cpp": "int extra() { return 3; }\n"},
        True,
    ),
    ("change a build file", {"lib/CMakeLists.txt": FILES["lib/CMakeLists.txt"] + "# v2\n"}, True),
    ("add a script", {"scripts/x.py": "print(1)\n"}, False),
]


def _git(repo: Path, *args: str) -> str:
    env = {
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@e",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@e",
        "GIT_AUTHOR_DATE": "1700000000 +0000",
        "GIT_COMMITTER_DATE": "1700000000 +0000",
        "PATH": "/usr/bin:/bin",
        "HOME": str(repo),
    }
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    require(*TOOLCHAIN)
    repo = tmp_path_factory.mktemp("inputs") / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    shas = []
    for subject, files, _ in [("start", FILES, True), *STEPS]:
        for rel, text in files.items():
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / rel).write_text(text)
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", subject)
        shas.append(_git(repo, "rev-parse", "HEAD"))
    # a submodule pointer changed (a gitlink, as llama.cpp's ggml/kompute once was)
    _git(repo, "update-index", "--add", "--cacheinfo", f"160000,{shas[0]},third_party/sub")
    _git(repo, "commit", "-q", "-m", "bump a submodule")
    shas.append(_git(repo, "rev-parse", "HEAD"))
    return repo, shas


@pytest.mark.parametrize("generator", ["make", "ninja"])
def test_a_build_records_what_its_target_was_compiled_from(
    history: tuple[Path, list[str]], tmp_path: Path, generator: Literal["make", "ninja"]
) -> None:
    """Makefiles leave a dependency file per object; Ninja reads and deletes them (its log has them)."""
    require(generator)
    repo, shas = history
    cfg = BuildConfig(
        cmake_args=["-DCMAKE_BUILD_TYPE=Release"], targets=["app"], binaries={"binary": ["app"]}, generator=generator
    )
    with StateDir(tmp_path / "st") as state:
        ws = Workspace(str(repo), state.clone_dir)
        builder = Builder(state, ws, Events())
        first, last = builder.ensure(shas[0], cfg), builder.ensure(shas[-1], cfg)
        build_dir = builder.build_dir(cfg, 0)
        assert (build_dir / "build.ninja").is_file() is (generator == "ninja")
        assert (build_dir / "Makefile").is_file() is (generator == "make")
        assert first.ok and first.inputs == (
            "app/main.cpp",
            "lib/core.cpp",
            "lib/include/core.h",
            "lib/include/detail.h",
        )
        assert last.ok and last.inputs is not None and "lib/extra.cpp" in last.inputs
        assert first.host and first.compiler  # who built it, with what
        assert state.store.build(builder.key(cfg), shas[0]) == first  # stored as it was made
        rule = InputRule(frozenset(first.inputs) | frozenset(last.inputs))
        narrowed = narrow(shas, ws.changes(shas[0], shas[-1]), rule)
    kept = {sha for sha in narrowed.line[1:-1]}
    for sha, (subject, _, expected) in zip(shas[1:], STEPS):
        assert (sha in kept) is expected, subject
    assert narrowed.line[-1] == shas[-1] and narrowed.why[shas[-1]] == "the bad end"
    assert "third_party/sub" in {c.path for c in ws.changes(shas[-2], shas[-1])[shas[-1]] if c.gitlink}


# -- a real bisect -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def mixed_demo(tmp_path_factory: pytest.TempPathFactory) -> DemoHistory:
    """The demo with half its filler commits outside the build (CI, a .cu file, scripts, docs)."""
    require(*TOOLCHAIN)
    return generate_demo(
        tmp_path_factory.mktemp("mixed"), n_commits=16, culprit_index=11, break_index=4, seed=1, outside=0.5
    )


@pytest.mark.heavy  # after the default suite (README: Tests)
def test_a_narrowed_bisect_names_the_same_commit_with_fewer_candidates(mixed_demo: DemoHistory, tmp_path: Path) -> None:
    small_demo = mixed_demo
    cfg = load_config(small_demo.config)
    answers = {}
    for name, how in (("narrowed", Narrowing()), ("all", Narrowing(enabled=False))):
        seen: list[Event] = []
        with StateDir(tmp_path / name) as state:
            session = jobs.Session(cfg, state, Events(seen.append))
            report = jobs.run_bisect(session, jobs.plan_bisect(session, small_demo.good, "main", narrowing=how))
        answers[name] = report
        assert report.status is BisectStatus.FOUND and report.first_bad == small_demo.culprit
    narrowed, everything = answers["narrowed"], answers["all"]
    outside = [sha for sha in small_demo.commits[1:-1] if _outside(small_demo.repo, sha)]
    # adding the .cu file beside the compiled sources counts (a glob could pick a new file up)
    added = [sha for sha in outside if "A\tsrc/" in _git(small_demo.repo, "show", "--format=", "--name-status", sha)]
    docs = len(outside) - len(added)
    assert docs > 2 and len(added) == 1, "the history should have commits outside the build"
    assert narrowed.skipped_equivalent == docs and narrowed.searched == narrowed.commits - docs
    assert everything.skipped_equivalent == 0 and everything.searched == everything.commits
    assert narrowed.builds <= narrowed.builds_bound and narrowed.job != everything.job
    # the culprit's own parent is the last good commit (re-tested even if the search skipped it)
    assert narrowed.last_good == small_demo.commits[small_demo.commits.index(small_demo.culprit) - 1]
    assert "--all-commits" in everything.reproduce and "--all-commits" not in narrowed.reproduce


def _outside(repo: Path, sha: str) -> bool:
    files = _git(repo, "show", "--format=", "--name-only", sha).split()
    return all(f.startswith(("docs/", ".github/", "scripts/")) or f.endswith(".cu") for f in files)


def test_the_narrowing_is_announced(mixed_demo: DemoHistory, tmp_path: Path) -> None:
    small_demo = mixed_demo
    seen: list[Event] = []
    with StateDir(tmp_path / "st") as state:
        session = jobs.Session(load_config(small_demo.config), state, Events(seen.append))
        plan = jobs.plan_bisect(session, small_demo.good, "main")
        from bisectbot.bisecting.narrow import narrow_plan

        narrowed = narrow_plan(plan, session.cfg, session.workspace, session.build_many, session.events)
    said = [e for e in seen if isinstance(e, LineNarrowed)]
    assert len(said) == 1 and said[0].total == plan.n and said[0].kept == narrowed.n < plan.n
    assert narrowed.narrowed is not None and narrowed.narrowed.full == plan.line


def test_a_step_build_records_no_inputs_and_a_later_narrowing_scans_it(mixed_demo: DemoHistory, tmp_path: Path) -> None:
    """Only the narrowing reads a build's inputs, at the ends: a commit built to be tested (a
    search step) does not record them (a quarter second a build on llama.cpp); a later bisect
    in the same state directory with that commit as an end scans it, and still narrows."""
    from bisectbot.bisecting.narrow import narrow_plan

    small_demo = mixed_demo
    middle = small_demo.commits[len(small_demo.commits) // 2]
    seen: list[Event] = []
    with StateDir(tmp_path / "st") as state:
        session = jobs.Session(load_config(small_demo.config), state, Events(seen.append))
        built = session.runner.prepare(middle).build
        assert built.ok and built.inputs is None
        plan = jobs.plan_bisect(session, middle, "main")
        narrowed = narrow_plan(plan, session.cfg, session.workspace, session.build_many, session.events, session.scan())
    assert narrowed.narrowed is not None and narrowed.narrowed.rule is not None
    assert "input files at the two ends" in narrowed.narrowed.rule


def test_link_commands_are_read_as_the_shell_reads_them(tmp_path: Path) -> None:
    """cmake quotes object paths in link.txt (llama.cpp's do); a target whose link command names
    no object we can see leaves the inputs unknown rather than empty."""
    from bisectbot.building.linkgraph import target_inputs

    src, build = tmp_path / "src", tmp_path / "build"
    (src / "ex").mkdir(parents=True)
    (src / "ex" / "main.cpp").write_text("int main() {}\n")
    d = build / "ex" / "CMakeFiles" / "my-app.dir"
    d.mkdir(parents=True)
    (d / "main.cpp.o.d").write_text(f"ex/CMakeFiles/my-app.dir/main.cpp.o: {src}/ex/main.cpp /usr/include/x.h\n")
    (d / "link.txt").write_text('/usr/bin/c++ -O3 "CMakeFiles/my-app.dir/main.cpp.o" -o ../bin/my-app -lm\n')
    assert target_inputs(build, ["my-app"], src) == ["ex/main.cpp"]
    (d / "link.txt").write_text("/usr/bin/c++ -O3 -o ../bin/my-app -lm\n")
    assert target_inputs(build, ["my-app"], src) is None
    (d / "link.txt").write_text('/usr/bin/c++ "CMakeFiles/my-app.dir/gone.cpp.o" -o ../bin/my-app\n')
    assert target_inputs(build, ["my-app"], src) is None  # an object without its dependency file
