"""Issue 48's acceptance: a maintainer of any project goes from `init` to the culprit.

Three generated 40-commit projects of one shape (bench/pickprojects.py: a program printing
`pick: red` from a seeded draw; one commit moves red .40 → .52 and blue .20 → .08, TV 0.12; a
compiled commit whose build fails) — a cmake project, a plain Makefile and a Python script with
no build — each go, through the real CLI, from `init` given only the good commit and the command
line to `bisect` naming the planted commit (exit 0). No config is edited by hand.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bench.pickprojects import PickHistory, write_pick_history

from conftest import TOOLCHAIN, bisectbot_argv, needs, subprocess_env


def cli(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        bisectbot_argv(*args), capture_output=True, text=True, timeout=timeout, env=subprocess_env(CI="1")
    )


def init_then_bisect(hist: PickHistory, work: Path) -> tuple[subprocess.CompletedProcess[str], dict]:
    """`bisectbot init REPO --good v1.0 -- COMMAND`, then `bisectbot bisect` with what it wrote."""
    config = work / "pick.yaml"
    made = cli("init", str(hist.repo), "--good", "v1.0", "--name", "pick", "-o", str(config), "--", *hist.command)
    assert made.returncode == 0, made.stderr
    done = cli("bisect", str(config), "--good", "v1.0", "--bad", "main", "--json", str(work / "report.json"))
    report = json.loads((work / "report.json").read_text()) if (work / "report.json").exists() else {}
    return done, report


@pytest.mark.longest  # the longest tier: by hand, not in CI (README: Tests)
@needs(*TOOLCHAIN, "make")
@pytest.mark.parametrize("kind", ["cmake", "make", "python"])
def test_init_then_bisect_names_the_planted_commit(kind: str, tmp_path: Path) -> None:
    hist = write_pick_history(tmp_path / kind, kind)
    done, report = init_then_bisect(hist, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert report["status"] == "found" and report["first_bad"] == hist.culprit, report.get("message")
    config = (tmp_path / "pick.yaml").read_text()
    assert "split: whitespace" in config and "pick: " in config  # the word, not its letters
    if hist.broken is not None:  # the commit whose build fails was met as one, if tested at all
        tested = {v["commit"]: v["verdict"] for v in report["verdicts"]}
        assert tested.get(hist.broken, "skip") == "skip"
