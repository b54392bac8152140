"""Shared fixtures: generated demo histories (real git repos, real cmake builds)."""

from __future__ import annotations

import os
import sys

import pytest

from bisectbot import doctor
from bisectbot.demo import DemoHistory, generate_demo

# -- programs the tests need -----------------------------------------------------------------------
# A test that needs a program skips, naming it and the package that provides it, when it is not
# on PATH. CI installs every one of them: with BISECTBOT_REQUIRE_TOOLS=1 (set by .ci/run) such a
# skip, or one for a Python dependency that cannot be imported, fails the session instead.
MISSING_TOOL = "missing tool:"
TOOLS: dict[str, doctor.Tool] = {
    "git": doctor.GIT,
    "cmake": doctor.CMAKE,
    "make": doctor.MAKE,
    "ninja": doctor.NINJA,
    "c++": doctor.CXX,
    "cc": doctor.CC,
    "ccache": doctor.CCACHE,
    "bwrap": doctor.BWRAP,
    "prlimit": doctor.PRLIMIT,
    "setpriv": doctor.Tool("setpriv", ("setpriv",), "util-linux", False, "runs a child as another user"),
    "tmux": doctor.Tool("tmux", ("tmux",), "tmux", False, "an 80-column terminal for the demo"),
    "ps": doctor.Tool("ps", ("ps",), "procps", False, "lists the processes a test's sandbox may have left"),
    "chromium": doctor.Tool("chromium", ("chromium",), "chromium", False, "a real browser for the report pages"),
}
TOOLCHAIN = ("git", "cmake", "make", "c++")  # what building the demo takes


def missing_tools(*names: str) -> str | None:
    """The skip reason for the programs of `names` that are not on PATH, or None."""
    missing = [TOOLS[n] for n in names if doctor.find(TOOLS[n]) is None]
    if not missing:
        return None
    return f"{MISSING_TOOL} " + ", ".join(f"{t.name} ({t.install})" for t in missing)


def needs(*names: str) -> pytest.MarkDecorator:
    """Mark a test (or a module, as pytestmark) that runs these programs."""
    why = missing_tools(*names)
    return pytest.mark.skipif(why is not None, reason=why or "")


def require(*names: str) -> None:
    """In a fixture or test body: skip when one of these programs is missing."""
    why = missing_tools(*names)
    if why is not None:
        pytest.skip(why)


needs_toolchain = needs(*TOOLCHAIN)
_tool_skips: list[str] = []


# Words in a test's source, or in the source of a fixture it uses, that mean it builds something.
_BUILDS = ("generate_demo", "Builder(", "cmake", '"demo"', '"bisect"', '"test"', '"check"', "run_bisect", "run_test")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that build (by their own source or a fixture's) skip naming the missing program,
    even where nobody wrote `needs`/`require`: a test added later is covered too."""
    why = missing_tools(*TOOLCHAIN)
    if why is None:
        return
    for item in items:
        if any(_builds(source) for source in _sources(item)):
            item.add_marker(pytest.mark.skip(reason=why))


def _sources(item: pytest.Item) -> list[str]:
    import inspect

    funcs = [getattr(item, "function", None)]
    info = getattr(item, "_fixtureinfo", None)
    for defs in info.name2fixturedefs.values() if info is not None else ():
        funcs += [d.func for d in defs]
    out = []
    for fn in funcs:
        try:
            out.append(inspect.getsource(fn))  # type: ignore[arg-type]
        except (TypeError, OSError):
            pass
    return out


def _builds(source: str) -> bool:
    return any(word in source for word in _BUILDS)


def _is_missing_dependency(reason: str) -> bool:
    return MISSING_TOOL in reason or "could not import" in reason


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and isinstance(report.longrepr, tuple):
        reason = str(report.longrepr[2]).removeprefix("Skipped: ")
        if _is_missing_dependency(reason):
            _tool_skips.append(f"{report.nodeid}: {reason}")


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _tool_skips and os.environ.get("BISECTBOT_REQUIRE_TOOLS") == "1":
        terminalreporter.section("skipped for a missing tool (BISECTBOT_REQUIRE_TOOLS=1: a failure)")
        for line in _tool_skips:
            terminalreporter.line(line)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _tool_skips and os.environ.get("BISECTBOT_REQUIRE_TOOLS") == "1" and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# A small history keeps the pipeline tests to a few seconds of builds each.
SMALL = dict(n_commits=16, culprit_index=11, break_index=4, seed=1)


@pytest.fixture(autouse=True)
def _no_user_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Default state directories go to a temporary cache, never the developer's ~/.cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "xdg-cache"))


@pytest.fixture(scope="session")
def small_demo(tmp_path_factory: pytest.TempPathFactory) -> DemoHistory:
    require(*TOOLCHAIN)
    return generate_demo(tmp_path_factory.mktemp("demo"), **SMALL)


@pytest.fixture(scope="session")
def crash_demo(tmp_path_factory: pytest.TempPathFactory) -> DemoHistory:
    """A history whose binary aborts from commit 6 on."""
    require(*TOOLCHAIN)
    return generate_demo(
        tmp_path_factory.mktemp("crash"), n_commits=10, culprit_index=3, break_index=1, crash_index=6, seed=2
    )


@pytest.fixture(scope="session")
def hang_demo(tmp_path_factory: pytest.TempPathFactory) -> DemoHistory:
    """A history whose binary sleeps forever from commit 6 on."""
    require(*TOOLCHAIN)
    return generate_demo(
        tmp_path_factory.mktemp("hang"), n_commits=10, culprit_index=3, break_index=1, hang_index=6, seed=2
    )


def bisectbot_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "bisectbot.cli", *args]


def subprocess_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("BISECTBOT_GITHUB_TOKEN", None)
    env.update(extra)
    return env
