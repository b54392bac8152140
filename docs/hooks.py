"""MkDocs hook: the command reference (commands.md) is written from every command's --help at
build time, so it cannot drift from the code."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
from click.testing import CliRunner

from bisectbot.cli import main


def _commands(group: click.Group) -> list[str]:
    return sorted(group.list_commands(click.Context(group)))


def on_pre_build(config: Any) -> None:
    runner = CliRunner()
    parts = [
        "# Command reference",
        "",
        "Every command's `--help`, as this version prints it (written when the site is built).",
        "",
    ]
    top = runner.invoke(main, ["--help"], terminal_width=100)
    parts += ["## bisectbot", "", "```text", top.output.rstrip(), "```", ""]
    for name in _commands(main):
        out = runner.invoke(main, [name, "--help"], terminal_width=100)
        parts += [f"## bisectbot {name}", "", "```text", out.output.rstrip(), "```", ""]
    target = Path(config["docs_dir"]) / "commands.md"
    text = "\n".join(parts)
    if not target.exists() or target.read_text() != text:
        target.write_text(text)
