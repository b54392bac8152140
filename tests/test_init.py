"""`bisectbot init`: a config from a repository, a target and a command line, validated by
testing the good commit GOOD with it (real cmake builds of bench/choice.py histories)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from bench.choice import Step, write_choice_history
from bisectbot.cli.newconfig import programs, propose
from bisectbot.config import load_config
from bisectbot.errors import ConfigError

from conftest import TOOLCHAIN, bisectbot_argv, require, subprocess_env


def test_outputs_propose_how_they_are_read() -> None:
    chars = propose(["a\n", "b\n", "a\n"])
    assert chars.parse == {"split": "chars", "expect_tokens": 1} and chars.outcomes == {"a": 2, "b": 1}
    echoed = propose(["bcdbc f e g\n", "bcdbc f g h\n", "bcdbc e h\n"], position=1)
    assert echoed.parse == {"prefix": "bcdbc ", "split": "whitespace", "expect_tokens": 2}
    assert echoed.statistic == {"outcome": {"position": 1}} and echoed.outcomes == {"e": 1, "g": 1, "h": 1}
    with pytest.raises(ConfigError, match="--position 3, but some output has only 2 token"):
        propose(["x y\n", "w y z\n"], position=3)
    with pytest.raises(ConfigError, match="printed nothing"):
        propose(["\n", ""])


def test_cmake_lists_programs_not_its_own_targets() -> None:
    help_text = "The following are some of the valid targets for this Makefile:\n... all (the default)\n"
    help_text += "... clean\n... depend\n... edit_cache\n... rebuild_cache\n... prog\n... tool\n... src/main.o\n"
    assert programs(help_text) == ["prog", "tool"]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    require(*TOOLCHAIN)
    dest = tmp_path_factory.mktemp("init")
    steps = [Step("first", (0.3, 0.45, 0.25)), Step("src"), Step("change", (0.38, 0.4, 0.22)), Step("docs")]
    h = write_choice_history(dest, steps)
    return h.repo, h.commits[0]


def init(where: Path, repo: Path, good: str, *args: str) -> subprocess.CompletedProcess[str]:
    argv = bisectbot_argv("init", str(repo), "--good", good, "-q", *args, "--", "{binary}", "{seed}")
    return subprocess.run(argv, capture_output=True, text=True, cwd=where, timeout=600, env=subprocess_env(CI="1"))


def test_init_writes_a_config_that_tests_the_good_commit_good(project: tuple[Path, str], tmp_path: Path) -> None:
    repo, good = project
    proc = init(tmp_path, repo, good, "--name", "choice")  # one program: no --target needed
    assert proc.returncode == 0, proc.stderr
    assert f"wrote choice.yaml: {good} tests GOOD with it" in proc.stdout
    cfg = load_config(tmp_path / "choice.yaml")
    assert cfg.build.targets == ["prog"] and cfg.reference.control is not None
    assert cfg.reference.control.commit == good and cfg.parse.split == "chars" and cfg.parse.expect_tokens == 1
    head = (tmp_path / "choice.yaml").read_text().splitlines()[:3]
    assert "20 sample runs; outcome at token 0:" in head[1]  # what it saw, written down
    assert (tmp_path / "choice-state" / "state.sqlite3").is_file()  # where the bisect will find it


@pytest.mark.heavy  # more cmake builds (README: Tests)
def test_init_takes_an_exact_reference_and_refuses_one_that_is_wrong(project: tuple[Path, str], tmp_path: Path) -> None:
    repo, good = project
    proc = init(tmp_path, repo, good, "--probs", "a=0.3,b=0.45,c=0.25", "-o", "exact.yaml")
    assert proc.returncode == 0, proc.stderr
    assert yaml.safe_load((tmp_path / "exact.yaml").read_text())["reference"] == {
        "probs": {"a": 0.3, "b": 0.45, "c": 0.25}
    }
    wrong = init(tmp_path, repo, good, "--probs", "a=0.6,b=0.2,c=0.2", "-o", "wrong.yaml")
    assert wrong.returncode == 2 and "tests BAD with it" in wrong.stderr, wrong.stderr


@pytest.mark.heavy  # more cmake builds (README: Tests)
def test_init_names_the_programs_when_the_target_is_wrong(project: tuple[Path, str], tmp_path: Path) -> None:
    repo, good = project
    proc = init(tmp_path, repo, good, "--target", "nope")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"bisectbot: error: init: no target 'nope' at {good[:12]}: the programs cmake lists are prog"
    )
    assert not list(tmp_path.iterdir())  # nothing written
