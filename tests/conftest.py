"""Shared fixtures: generated demo histories (real git repos, real cmake builds)."""

from __future__ import annotations

import os
import sys

import pytest

from bisectbot.demo import DemoHistory, generate_demo

# A small history keeps the pipeline tests to a few seconds of builds each.
SMALL = dict(n_commits=16, culprit_index=11, break_index=4, seed=1)


@pytest.fixture(autouse=True)
def _no_user_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """Default state directories go to a temporary cache, never the developer's ~/.cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.getbasetemp() / "xdg-cache"))


@pytest.fixture(scope="session")
def small_demo(tmp_path_factory: pytest.TempPathFactory) -> DemoHistory:
    return generate_demo(tmp_path_factory.mktemp("demo"), **SMALL)


@pytest.fixture(scope="session")
def crash_demo(tmp_path_factory: pytest.TempPathFactory) -> DemoHistory:
    """A history whose binary aborts from commit 6 on."""
    return generate_demo(tmp_path_factory.mktemp("crash"), n_commits=10, culprit_index=3,
                         break_index=1, crash_index=6, seed=2)


@pytest.fixture(scope="session")
def hang_demo(tmp_path_factory: pytest.TempPathFactory) -> DemoHistory:
    """A history whose binary sleeps forever from commit 6 on."""
    return generate_demo(tmp_path_factory.mktemp("hang"), n_commits=10, culprit_index=3,
                         break_index=1, hang_index=6, seed=2)


def bisectbot_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "bisectbot.cli", *args]


def subprocess_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("BISECTBOT_GITHUB_TOKEN", None)
    env.update(extra)
    return env
