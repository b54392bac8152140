"""The broken end tested last (`test.broken_end`): when builds are slow its build is saved, its
compile inputs are scanned instead, and it is tested only when the answer rests on it. Real git,
real cmake + Ninja builds, the real CLI."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bisectbot.building.linkgraph import _preprocess_only, scanned_inputs, target_inputs
from bisectbot.core import policy
from bisectbot.processes.procs import clean_env
from eras import Era, command, config, write_history

from conftest import TOOLCHAIN, bisectbot_argv, needs, subprocess_env

NEW = Era()
BUILD = {"targets": ["prog"], "binaries": {"binary": ["bin/prog"]}, "generator": "ninja"}


def cli(*args: str) -> tuple[int, dict, str]:
    proc = subprocess.run(
        bisectbot_argv(*args, "--json", "-"), capture_output=True, text=True, timeout=600, env=subprocess_env(CI="1")
    )
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        data = {}
    return proc.returncode, data, proc.stderr


def bisect(tmp_path: Path, eras: list[Era], when: str = "last") -> tuple[int, dict, str, tuple[str, ...]]:
    hist = write_history(tmp_path, eras)
    cfg = config(
        hist,
        tmp_path,
        build=BUILD,
        run={"argv": command()},
        test={"alpha": 0.0005, "beta": 0.0005, "tolerance": 0.3, "broken_end": when},
    )
    code, report, err = cli(
        "bisect", str(cfg), "--good", hist.commits[0], "--bad", "main", "--state", str(tmp_path / "st")
    )
    return code, report, err, hist.commits


def roles(report: dict, sha: str) -> set[str]:
    return {v["role"] for v in report["verdicts"] if v["sha"] == sha and v.get("arm", "main") == "main"}


# -- the scan ------------------------------------------------------------------------------------
PROJECT = {
    "CMakeLists.txt": """cmake_minimum_required(VERSION 3.16)
project(scan C CXX)
add_custom_command(OUTPUT ${CMAKE_BINARY_DIR}/made.c
  COMMAND ${CMAKE_COMMAND} -E copy ${CMAKE_SOURCE_DIR}/made.c.in ${CMAKE_BINARY_DIR}/made.c
  DEPENDS ${CMAKE_SOURCE_DIR}/made.c.in)
add_library(lib STATIC lib/lib.c ${CMAKE_BINARY_DIR}/made.c)
target_include_directories(lib PUBLIC include)
add_executable(prog src/main.cpp)
target_link_libraries(prog lib)
add_executable(other src/other.c)
""",
    "include/lib.h": '#ifdef __cplusplus\nextern "C"\n#endif\nint lib(void);\n',
    "include/only_generated.h": "#define FROM_GENERATED 1\n",
    "lib/lib.c": '#include "lib.h"\nint lib(void) { return 1; }\n',
    "made.c.in": '#include "only_generated.h"\nint made(void) { return FROM_GENERATED; }\n',
    "src/main.cpp": '#include "lib.h"\n#include "../src/local.hpp"\nint main() { return lib() + LOCAL; }\n',
    "src/local.hpp": "#define LOCAL 0\n",
    "src/other.c": '#include "other_only.h"\nint main(void) { return 0; }\n',
    "src/other_only.h": "\n",
}


@needs(*TOOLCHAIN, "ninja")
def test_the_scan_finds_the_files_a_build_compiles_without_building(tmp_path: Path) -> None:
    src = tmp_path / "src"
    for rel, text in PROJECT.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    env = clean_env()
    built, scanned = tmp_path / "built", tmp_path / "scanned"
    for where in (built, scanned):
        subprocess.run(["cmake", "-G", "Ninja", "-S", str(src), "-B", str(where)], check=True, capture_output=True)
    subprocess.run(["cmake", "--build", str(built), "--target", "prog"], check=True, capture_output=True)
    got = scanned_inputs(scanned, ["prog"], src, env, 2, 120)
    assert got == target_inputs(built, ["prog"], src, env)
    # a header reached only through a source generated at build time; not another target's
    assert got is not None and "include/only_generated.h" in got and "src/local.hpp" in got
    assert "src/other_only.h" not in got
    assert not list(scanned.rglob("*.o")) and not (scanned / "bin").exists()  # nothing compiled


def test_a_compile_command_the_scan_does_not_understand_makes_it_give_up(tmp_path: Path) -> None:
    depfile = tmp_path / "x.d"
    assert _preprocess_only("cd /x && c++ -o a.o -c a.cpp", depfile) == ""
    assert _preprocess_only("c++ -o a.o -c", depfile) == ""
    assert _preprocess_only("ar qc lib.a a.o", depfile) is None  # compiles nothing: not its business
    assert _preprocess_only("c++ @CMakeFiles/a.rsp", depfile) == ""  # a response file could hide one
    pre = _preprocess_only("ccache c++ -Iinc -MD -MT a.o -MF a.o.d -o a.o -c /s/a.cpp", depfile)
    assert pre and pre.argv == [
        "c++",
        "-Iinc",
        "-MD",
        "-MT",
        "a.o",
        "-MF",
        str(depfile),
        "-o",
        "/dev/null",
        "-E",
        "/s/a.cpp",
    ]


def test_builds_of_twenty_seconds_or_more_test_the_broken_end_last() -> None:
    assert policy.broken_end_last(75.0) and policy.broken_end_last(20.0)
    assert not policy.broken_end_last(0.4) and not policy.broken_end_last(19.9)


# -- bisects -------------------------------------------------------------------------------------
@pytest.mark.heavy  # whole bisects or long simulations, 4 s or more: after the default suite (README: Tests)
@needs(*TOOLCHAIN, "ninja")
def test_a_bisect_that_tests_the_broken_end_last_never_builds_it(tmp_path: Path) -> None:
    eras = [NEW] * 5 + [Era(defect=True)] * 5
    code, report, err, shas = bisect(tmp_path, eras)
    assert code == 0 and report["first_bad"] == shas[5], err
    assert not roles(report, shas[-1])  # neither built nor tested
    assert "good-endpoint" in roles(report, shas[0])
    assert any("end was not tested" in a for a in report["assumptions"])
    assert "inputs scanned without building" in err, err  # the progress says so


@pytest.mark.heavy  # whole bisects or builds, 3-8 s: after the default suite (README: Tests)
@needs(*TOOLCHAIN, "ninja")
def test_a_culprit_at_the_broken_end_tested_last_is_tested_and_named(tmp_path: Path) -> None:
    code, report, err, shas = bisect(tmp_path, [NEW] * 6 + [Era(defect=True)])
    assert code == 0 and report["first_bad"] == shas[-1], err
    assert "bad-endpoint" in roles(report, shas[-1])
    assert not any("end was not tested" in a for a in report["assumptions"])


@pytest.mark.heavy  # whole bisects or builds, 3-8 s: after the default suite (README: Tests)
@needs(*TOOLCHAIN, "ninja")
def test_a_broken_end_tested_last_that_does_not_reproduce_is_a_clean_range(tmp_path: Path) -> None:
    """Since issue 53: an end that prints what the good end printed, seed for seed, is a clean range
    (exit 1, nothing changed between the ends), tested last or not, never a first bad."""
    code, report, err, shas = bisect(tmp_path, [NEW] * 6)
    assert code == 1, err
    assert report["first_bad"] is None
    assert f"the bad end {shas[-1][:12]} printed what the good end" in err
    assert "nothing changed between the ends" in err
    assert "bad-endpoint" in roles(report, shas[-1])  # it was built and tested after all


@pytest.mark.heavy  # whole bisects or long simulations, 4 s or more: after the default suite (README: Tests)
@needs(*TOOLCHAIN, "ninja")
@pytest.mark.parametrize("when", ["first", "auto"])
def test_first_and_auto_with_fast_builds_test_the_broken_end_before_the_search(tmp_path: Path, when: str) -> None:
    eras = [NEW] * 5 + [Era(defect=True)] * 5
    code, report, err, shas = bisect(tmp_path, eras, when)
    assert code == 0 and report["first_bad"] == shas[5], err
    assert "bad-endpoint" in roles(report, shas[-1])
