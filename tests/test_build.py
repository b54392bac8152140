"""The build stage on a real generated history: real cmake and g++, real kept binaries."""

from __future__ import annotations

from pathlib import Path

import pytest

from bisectbot.building.builder import Builder
from bisectbot.building.buildkeys import build_dir_key, build_key, toolchain
from bisectbot.building.workspace import Workspace
from bisectbot.config import load_config
from bisectbot.demo import DemoHistory
from bisectbot.events import Building, Built, Event, Events
from bisectbot.state.statedir import StateDir


def builder(history: DemoHistory, state: StateDir, seen: list[Event]) -> Builder:
    cfg = load_config(history.config)
    return Builder(state, Workspace(cfg.repo_source, state.clone_dir), Events(seen.append))


def test_a_commit_is_built_once_and_kept(small_demo: DemoHistory, tmp_path: Path) -> None:
    cfg = load_config(small_demo.config)
    seen: list[Event] = []
    with StateDir(tmp_path / "st") as state:
        b = builder(small_demo, state, seen)
        rec = b.ensure(small_demo.good, cfg.build)
        assert rec.ok and rec.sha == small_demo.good and b.built == [small_demo.good]
        binary = Path(rec.binaries["binary"])
        assert binary.is_file() and state.kept_dir(build_key(cfg.build), small_demo.good) in binary.parents
        assert [type(e) for e in seen if not e.transient] == [Building, Built]
        # asked again: the stored build, nothing built
        assert b.ensure(small_demo.good, cfg.build) == rec and b.built == [small_demo.good]
        # its kept binary deleted by hand: built again
        binary.unlink()
        again = b.ensure(small_demo.good, cfg.build)
        assert again.ok and Path(again.binaries["binary"]).is_file() and len(b.built) == 2


def test_a_failed_build_is_stored_with_the_compiler_s_error(small_demo: DemoHistory, tmp_path: Path) -> None:
    cfg = load_config(small_demo.config)
    with StateDir(tmp_path / "st") as state:
        b = builder(small_demo, state, [])
        rec = b.ensure(small_demo.build_break, cfg.build)
        assert rec.status == "failed" and rec.binaries == {}
        assert "error" in rec.reason and "util.cpp" in rec.reason
        assert "error" in Path(rec.log).read_text()
        assert b.ensure(small_demo.build_break, cfg.build) == rec and len(b.built) == 1  # not retried


def test_a_timed_out_build_is_retried_once_the_timeout_is_raised(small_demo: DemoHistory, tmp_path: Path) -> None:
    cfg = load_config(small_demo.config)
    short = cfg.build.model_copy(update={"timeout": 0.01})
    with StateDir(tmp_path / "st") as state:
        b = builder(small_demo, state, [])
        rec = b.ensure(small_demo.good, short)
        assert rec.status == "timeout" and "0.01" in rec.reason
        assert b.ensure(small_demo.good, short).status == "timeout" and len(b.built) == 1
        assert b.ensure(small_demo.good, cfg.build).ok and len(b.built) == 2


def test_build_keys() -> None:
    from bisectbot.config.sections import BuildConfig

    a = BuildConfig(cmake_args=["-DX=1"], targets=["t"], binaries={"binary": ["t"]})
    other_args = a.model_copy(update={"cmake_args": ["-DX=2"]})
    other_target = a.model_copy(update={"targets": ["u"], "binaries": {"server": ["u"]}})
    assert build_key(a) != build_key(other_args) and build_key(a) != build_key(other_target)
    assert build_key(a.model_copy(update={"timeout": 5})) == build_key(a)  # not an input of the build
    # one build directory per cmake arguments, shared by every target built with them
    assert build_dir_key(a.cmake_args) == build_dir_key(other_target.cmake_args) != build_dir_key(other_args.cmake_args)


def test_toolchain_names_the_compiler_and_cmake(small_demo: DemoHistory) -> None:
    env = toolchain(load_config(small_demo.config).build)
    assert env.compiler != "unknown" and env.cmake.startswith("cmake version")
    assert env.cmake_args == ["-DCMAKE_BUILD_TYPE=Release"]


def test_a_copied_state_directory_builds_afresh_instead_of_failing(small_demo: DemoHistory, tmp_path: Path) -> None:
    import shutil

    cfg = load_config(small_demo.config)
    with StateDir(tmp_path / "st") as state:
        assert builder(small_demo, state, []).ensure(small_demo.good, cfg.build).ok
    shutil.copytree(tmp_path / "st", tmp_path / "copy")
    with StateDir(tmp_path / "copy") as state:
        b = builder(small_demo, state, [])
        rec = b.ensure(small_demo.bad, cfg.build)
        log = Path(rec.log).read_text()
        assert rec.ok and rec.notes == "" and b.built == [small_demo.bad]
        # the stale cache was seen before configuring: one configure, none refused by cmake
        assert log.count("afresh: its CMakeCache.txt was written for") == 1
        assert log.count("$ cmake -S") == 1 and "CMake Error" not in log


def test_the_generator_is_ninja_where_installed_unless_the_config_says_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from bisectbot.doctor import generator_args

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", str(bin_dir))
    monkeypatch.delenv("CMAKE_GENERATOR", raising=False)
    assert generator_args("auto", []) == []  # no ninja: cmake's default (Makefiles)
    assert generator_args("ninja", []) == ["-G", "Ninja"]  # asked for: cmake says if it is missing
    (bin_dir / "ninja").write_text("#!/bin/sh\n")
    (bin_dir / "ninja").chmod(0o755)
    assert generator_args("auto", ["-DX=1"]) == ["-G", "Ninja"]
    assert generator_args("make", []) == []
    assert generator_args("auto", ["-G", "Unix Makefiles"]) == generator_args("ninja", ["-GNinja"]) == []
    monkeypatch.setenv("CMAKE_GENERATOR", "Unix Makefiles")  # the user's choice for every cmake
    assert generator_args("auto", []) == []
