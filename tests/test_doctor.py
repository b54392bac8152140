"""`bisectbot doctor` and the pre-flight of commands that build: a missing program is one line
naming its apt package (exit 2), never a cmake failure halfway through; and the test suite's own
skips for missing programs, which CI turns into failures."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bisectbot import doctor
from bisectbot.demo import DemoHistory

from conftest import TOOLCHAIN, bisectbot_argv, needs, subprocess_env

ROOT = Path(__file__).resolve().parent.parent


def path_without(where: Path, *programs: str) -> str:
    """A PATH of one directory holding a symlink to every program on the current PATH except
    `programs` (the first of each name wins, as it does on PATH)."""
    where.mkdir(parents=True, exist_ok=True)
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        if not directory or not os.path.isdir(directory):
            continue
        for entry in os.scandir(directory):
            if entry.name in programs or (where / entry.name).exists() or os.path.islink(where / entry.name):
                continue
            if entry.is_file() and os.access(entry.path, os.X_OK):
                (where / entry.name).symlink_to(entry.path)
    for program in programs:
        assert shutil.which(program, path=str(where)) is None
    return str(where)


def cli(*args: str, path: str | None = None, cwd: Path | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    extra = {"PATH": path} if path is not None else {}
    return subprocess.run(
        bisectbot_argv(*args), capture_output=True, text=True, timeout=120, cwd=cwd, env=subprocess_env(**extra, **env)
    )


# -- the checks as data -----------------------------------------------------------------------------
def test_the_generator_decides_between_make_and_ninja() -> None:
    assert doctor.generator_tool([], {}) is doctor.MAKE
    assert doctor.generator_tool(["-DX=1", "-G", "Ninja"], {}) is doctor.NINJA
    assert doctor.generator_tool(["-GNinja Multi-Config"], {}) is doctor.NINJA
    assert doctor.generator_tool([], {"CMAKE_GENERATOR": "Ninja"}) is doctor.NINJA
    assert doctor.generator_tool(["-G", "Unix Makefiles"], {"CMAKE_GENERATOR": "Ninja"}) is doctor.MAKE
    assert [t.name for t in doctor.build_tools(["-G", "Ninja"], {})] == [
        "git",
        "cmake",
        "ninja",
        "C++ compiler",
        "C compiler",
    ]


def test_a_compiler_named_by_cxx_is_the_one_looked_for(tmp_path: Path) -> None:
    """cmake compiles with $CXX when it is set: a wrong one is missing even with g++ installed."""
    (tmp_path / "g++").write_text("#!/bin/sh\n")
    (tmp_path / "g++").chmod(0o755)
    env = {"PATH": str(tmp_path)}
    assert doctor.find(doctor.CXX, env) == str(tmp_path / "g++")
    assert doctor.find(doctor.CXX, {**env, "CXX": "clang++-99 -stdlib=libc++"}) is None
    assert doctor.find(doctor.CXX, {**env, "CXX": "g++ -DNAME='x"}) == str(tmp_path / "g++")  # unbalanced quote
    line = doctor.missing_line([doctor.CXX], {"CXX": "clang++-99"})
    assert line.startswith("C++ compiler ($CXX=clang++-99) not found on PATH: install with `apt-get install g++`")


def test_one_line_names_every_missing_program_and_one_apt_get() -> None:
    line = doctor.missing_line([doctor.CMAKE, doctor.MAKE, doctor.BWRAP, doctor.PRLIMIT], {})
    assert "\n" not in line
    assert line.startswith(
        "cmake, make, bwrap, prlimit not found on PATH: install with `apt-get install cmake make bubblewrap util-linux`"
    )


# -- bisectbot doctor -------------------------------------------------------------------------------
@needs(*TOOLCHAIN, "cc")
def test_doctor_passes_where_everything_is_installed() -> None:
    proc = cli("doctor")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith(f"Linux {os.uname().machine}, Python ") or not sys.platform.startswith("linux")
    by_name = {ln.split(":", 1)[0].split(None, 1)[1]: ln for ln in lines[1:]}
    for name in ("git", "cmake", "make", "C++ compiler", "C compiler", "python package gguf"):
        assert by_name[name].startswith("ok "), by_name[name]
    assert "cmake version" in by_name["cmake"] and proc.stderr == ""


@needs(*TOOLCHAIN, "cc")
def test_doctor_names_a_missing_cmake_and_its_package(tmp_path: Path) -> None:
    proc = cli("doctor", path=path_without(tmp_path / "bin", "cmake"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    missing = [ln for ln in proc.stdout.splitlines() if ln.startswith("MISSING")]
    assert missing == ["MISSING  cmake: not found on PATH; configures and builds every commit: apt-get install cmake"]
    assert any(ln.startswith("ok       make: ") for ln in proc.stdout.splitlines())
    assert proc.stderr == "bisectbot doctor: missing cmake: builds cannot run here\n"


def test_doctor_runs_without_git_and_says_so(tmp_path: Path) -> None:
    """gitpython refuses to be imported without git; the CLI must still start to say what is missing."""
    proc = cli("doctor", path=path_without(tmp_path / "bin", "git"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert (
        "MISSING  git: not found on PATH; clones the project, lists and checks out its commits: "
        "apt-get install git" in proc.stdout
    )
    assert "Traceback" not in proc.stderr


def test_optional_programs_only_warn(tmp_path: Path) -> None:
    proc = cli("doctor", path=path_without(tmp_path / "bin", "ccache", "prlimit", "bwrap"))
    lines = proc.stdout.splitlines()
    assert (
        "warning  ccache: not found on PATH; without it each commit's build compiles everything again: "
        "apt-get install ccache" in lines
    )
    assert (
        "warning  pull-request sandbox: bubblewrap (bwrap) is not installed (Debian: apt-get install "
        "bubblewrap); pull-request checks are refused" in lines
    ), lines
    assert not any(ln.startswith("MISSING") for ln in lines) or proc.returncode == 2


@needs("git")
def test_doctor_checks_the_config_s_generator_and_repository(tmp_path: Path) -> None:
    repo = tmp_path / "project"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    config = tmp_path / "ninja.yaml"
    config.write_text(
        f"name: ninja\nrepo: {{path: {repo}}}\n"
        "build: {cmake_args: [-G, Ninja], targets: [prog], binaries: {prog: [prog]}}\n"
        "run: {argv: ['{prog}', '{seed}']}\nparse: {split: chars, expect_tokens: 1}\n"
        "statistic: {outcome: {position: 0}}\nreference: {probs: {a: 0.5, b: 0.5}}\n"
    )
    proc = cli("doctor", str(config), path=path_without(tmp_path / "bin", "ninja"))
    assert (
        "MISSING  ninja: not found on PATH; cmake's Ninja generator runs it (build.generator): "
        "apt-get install ninja-build" in proc.stdout
    ), proc.stdout + proc.stderr
    assert f"ok       repository {repo}: git can read it" in proc.stdout
    assert proc.returncode == 2
    # build.generator: auto (the default) without ninja falls back to Makefiles: nothing missing
    config.write_text(config.read_text().replace("cmake_args: [-G, Ninja], ", ""))
    proc = cli("doctor", str(config), path=path_without(tmp_path / "bin", "ninja"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert any(line.startswith("ok       make:") for line in proc.stdout.splitlines())
    assert (
        "warning  ninja: not found on PATH; builds use cmake's Makefiles (Ninja's are a little faster): "
        "apt-get install ninja-build" in proc.stdout.splitlines()
    )


@needs("git")
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to chown the repository to another uid")
def test_doctor_gives_the_safe_directory_command_for_a_checkout_of_another_user(tmp_path: Path) -> None:
    repo = tmp_path / "theirs"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    for p in [repo, *repo.rglob("*")]:
        os.lchown(p, 4242, 4242)
    home = tmp_path / "home"
    home.mkdir()  # no global safe.directory of the machine's root
    proc = cli("doctor", "--repo", str(repo), HOME=str(home), GIT_CONFIG_NOSYSTEM="1")
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith(f"MISSING  repository {repo}"))
    assert "dubious ownership" in line
    assert line.endswith(f"if you trust it: git config --global --add safe.directory {repo}")
    assert proc.returncode == 2


# -- the pre-flight of commands that build --------------------------------------------------------
def test_demo_stops_before_generating_anything_without_cmake(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    proc = cli("demo", "--commits", "6", "--dir", str(out), "-q", path=path_without(tmp_path / "bin", "cmake"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr == (
        "bisectbot: error: cmake not found on PATH: install with `apt-get install cmake` "
        "(Debian/Ubuntu; as a user: sudo apt-get …); `bisectbot doctor` checks everything\n"
    )
    assert not out.exists() or not any(out.iterdir())


def test_test_names_a_missing_make_before_any_build(small_demo: DemoHistory, tmp_path: Path) -> None:
    state = tmp_path / "state"
    proc = cli(
        "test",
        str(small_demo.config),
        "--commit",
        small_demo.good,
        "--state",
        str(state),
        "-q",
        path=path_without(tmp_path / "bin", "make", "ninja", "ccache"),  # no ninja: auto takes Makefiles
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith("bisectbot: error: make not found on PATH: install with `apt-get install make`")
    assert proc.stderr.count("\n") == 1 and not state.exists()


# -- CI: a skip for a missing program is a failure there ------------------------------------------
@pytest.mark.heavy  # whole bisects or builds, 3-8 s: after the default suite (README: Tests)
def test_a_skip_for_a_missing_program_fails_the_session_when_ci_requires_the_tools(tmp_path: Path) -> None:
    suite = tmp_path / "suite"
    suite.mkdir()
    shutil.copy(ROOT / "tests" / "conftest.py", suite / "conftest.py")
    (suite / "test_x.py").write_text(
        "from conftest import needs\n\n\n@needs('ccache')\n"
        "def test_uses_ccache() -> None:\n    pass\n\n\n"
        "def test_plain() -> None:\n    pass\n"
    )
    path = path_without(tmp_path / "bin", "ccache")
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(suite)]
    env = subprocess_env(PATH=path)
    env.pop("BISECTBOT_REQUIRE_TOOLS", None)
    env.pop("PYTEST_ADDOPTS", None)  # the README's test block may be run with a selection in it
    relaxed = subprocess.run(argv, capture_output=True, text=True, cwd=suite, env=env, timeout=120)
    assert relaxed.returncode == 0 and "1 passed, 1 skipped" in relaxed.stdout, relaxed.stdout
    strict = subprocess.run(
        argv, capture_output=True, text=True, cwd=suite, timeout=120, env={**env, "BISECTBOT_REQUIRE_TOOLS": "1"}
    )
    assert strict.returncode == 1, strict.stdout
    assert "test_x.py::test_uses_ccache: missing tool: ccache (apt-get install ccache)" in strict.stdout
