"""build.hide_git on a project that does what llama.cpp's cmake does: stamp `git rev-parse HEAD`
into the binary at configure time (and make the configure depend on `.git/index`). Hidden, a
docs-only commit builds the same bytes as its parent; shown (the default), every commit builds a
program of its own. Real git, real cmake builds; plus the checks that decide when identical
binaries identify a program."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

from bisectbot.building.builder import Builder
from bisectbot.building.workspace import Workspace
from bisectbot.config import load_config
from bisectbot.demo import _git, _git_env
from bisectbot.events import Events
from bisectbot.judge.runner import CommitRunner
from bisectbot.processes.elf import self_contained
from bisectbot.state.statedir import StateDir
from eras import EraHistory, config

from conftest import TOOLCHAIN, needs

CMAKE = """cmake_minimum_required(VERSION 3.18)
project(stamped C)
set(CMAKE_RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bin)
find_package(Git)
if(EXISTS "${PROJECT_SOURCE_DIR}/.git/index")
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/.git/index")
endif()
execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse HEAD WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                OUTPUT_VARIABLE COMMIT OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE rc ERROR_QUIET)
if(NOT rc EQUAL 0)
  set(COMMIT unknown)
endif()
message(STATUS "stamping ${COMMIT}")
file(CONFIGURE OUTPUT ${CMAKE_BINARY_DIR}/stamp.h CONTENT "#define COMMIT \\"${COMMIT}\\"\\n")
add_executable(prog main.c)
target_include_directories(prog PRIVATE ${CMAKE_BINARY_DIR})
"""
MAIN = '#include <stdio.h>\n#include "stamp.h"\nint main(void) { fprintf(stderr, "%s\\n", COMMIT); puts("a b"); return 0; }\n'


def stamped_history(dest: Path, *, copy_readme: bool = False) -> EraHistory:
    """Three commits: the program, a README, another README line (no code changes after the
    first). With `copy_readme` the configure copies the README into the build directory."""
    repo = dest / "repo"
    repo.mkdir(parents=True)
    env = dict(_git_env(), GIT_AUTHOR_NAME="T", GIT_AUTHOR_EMAIL="t@example.com")
    env.update(GIT_COMMITTER_NAME="T", GIT_COMMITTER_EMAIL="t@example.com")
    _git(repo, "init", "-q", "--template=", "-b", "main", env=env)
    copy = "configure_file(README ${CMAKE_BINARY_DIR}/README.txt COPYONLY)\n" if copy_readme else ""
    (repo / "CMakeLists.txt").write_text(CMAKE + copy)
    (repo / "main.c").write_text(MAIN)
    shas = []
    for i, readme in enumerate(["", "docs\n", "docs\nmore docs\n"]):
        (repo / "README").write_text(readme)
        _git(repo, "add", "--all", ".", env=env)
        _git(repo, "commit", "-q", "--no-verify", "-m", f"commit {i}", env=env)
        shas.append(_git(repo, "rev-parse", "HEAD", env=env))
    return EraHistory(repo, tuple(shas), ())


def build_all(tmp_path: Path, hide: bool) -> tuple[list[str], list[str], list[str]]:
    """Each commit built in turn in one state directory: the binaries' sha256, what each build
    stamped at configure (from its log), what each binary says on stderr."""
    hist = stamped_history(tmp_path)
    path = config(
        hist,
        tmp_path,
        build={"targets": ["prog"], "binaries": {"binary": ["bin/prog"]}, "hide_git": hide},
        run={"argv": ["{binary}"]},
    )
    cfg = load_config(path)
    digests, stamped, said = [], [], []
    with StateDir(tmp_path / "st") as state:
        builder = Builder(state, Workspace(cfg.repo_source, state.clone_dir), Events())
        for sha in hist.commits:
            rec = builder.ensure(sha, cfg.build)
            assert rec.ok, rec.reason
            binary = Path(rec.binaries["binary"])
            digests.append(hashlib.sha256(binary.read_bytes()).hexdigest())
            log = Path(rec.log).read_text()
            stamped.append(" ".join(line.split("stamping ")[1] for line in log.splitlines() if "stamping " in line))
            said.append(subprocess.run([str(binary)], capture_output=True, text=True, check=True).stderr.strip())
        assert (state.clone_dir / "README").read_text() == "docs\nmore docs\n"  # the checkout is right
    return digests, stamped, said


@needs(*TOOLCHAIN, "git")
def test_hidden_git_gives_a_docs_commit_its_parent_s_bytes(tmp_path: Path) -> None:
    digests, stamped, said = build_all(tmp_path, hide=True)
    assert len(set(digests)) == 1 and said == ["unknown"] * 3 and stamped == ["unknown"] * 3


@needs(*TOOLCHAIN, "git")
def test_shown_git_stamps_every_commit(tmp_path: Path) -> None:
    # the other side of the claim above: without hide_git the same project gives three programs
    digests, stamped, said = build_all(tmp_path, hide=False)
    assert len(set(digests)) == 3 and len(set(said)) == 3 and "unknown" not in said
    assert all(stamped) and stamped == said


def _cc(tmp_path: Path, name: str, *flags: str) -> Path:
    src = tmp_path / "p.c"
    src.write_text("int main(void) { return 0; }\n")
    out = tmp_path / name
    subprocess.run(["cc", str(src), "-o", str(out), *flags], check=True)
    return out


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_only_a_binary_without_a_runpath_is_the_whole_program(tmp_path: Path) -> None:
    assert self_contained(_cc(tmp_path, "plain"))
    assert not self_contained(_cc(tmp_path, "rpath", f"-Wl,-rpath,{tmp_path}", "-Wl,--enable-new-dtags"))
    assert not self_contained(_cc(tmp_path, "old-rpath", f"-Wl,-rpath,{tmp_path}", "-Wl,--disable-new-dtags"))
    script = tmp_path / "wrapper.sh"
    script.write_text('#!/bin/sh\nexec ./real "$@"\n')
    assert not self_contained(script) and not self_contained(tmp_path / "missing")


@needs(*TOOLCHAIN, "git")
def test_identical_binaries_are_one_program_only_when_nothing_else_decides(tmp_path: Path) -> None:
    hist = stamped_history(tmp_path, copy_readme=True)
    base = {"targets": ["prog"], "binaries": {"binary": ["bin/prog"]}, "hide_git": True}

    def programs(name: str, run: dict, build: dict | None = None) -> list[str]:
        cfg = load_config(config(hist, tmp_path, build={**base, **(build or {})}, run=run, name=name))
        with StateDir(tmp_path / f"st-{name}") as state:
            runner = CommitRunner(cfg, state, Workspace(cfg.repo_source, state.clone_dir), Events())
            return [runner.prepare(sha).program for sha in hist.commits]

    same = programs("plain.yaml", {"argv": ["{binary}"]})
    assert same[0] and len(set(same)) == 1
    # the loader told where to look, or the command reading from the checkout: not by bytes alone
    assert programs("ld.yaml", {"argv": ["{binary}"], "env": {"LD_PRELOAD": "/x.so"}}) == [""] * 3
    assert programs("src.yaml", {"argv": ["{binary}", "{source}/README"]}) == [""] * 3
    # a file kept beside the binary is part of the program (here the README, different per commit)
    kept = programs("keep.yaml", {"argv": ["{binary}"]}, {"keep": ["README.txt"]})
    assert all(kept) and len(set(kept)) == 3
