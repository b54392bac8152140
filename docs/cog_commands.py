"""The command reference (docs/commands.md) from every command's --help, written by cog.

docs/commands.md holds a cog block that calls `reference()`; `cog -r docs/commands.md` rewrites
the text under it, and tests/test_docs.py fails while that text differs from --help.
"""

from __future__ import annotations

import click
from click.testing import CliRunner

WIDTH = 100  # a fixed width: the text must not depend on the terminal that wrote it


def _help(args: list[str]) -> str:
    from bisectbot.cli import main

    result = CliRunner().invoke(main, [*args, "--help"], prog_name="bisectbot", terminal_width=WIDTH)
    if result.exit_code != 0:
        raise RuntimeError(f"bisectbot {' '.join(args)} --help exited {result.exit_code}: {result.output}")
    return result.output.rstrip()


def _paths(group: click.Group, path: list[str]) -> list[list[str]]:
    """Every command under `group`, groups before their subcommands, in --help's order."""
    out = []
    for name in group.list_commands(click.Context(group)):
        command = group.get_command(click.Context(group), name)
        out.append([*path, name])
        if isinstance(command, click.Group):
            out += _paths(command, [*path, name])
    return out


def reference() -> str:
    """The Markdown under the cog block: a section per command, its --help in a text block."""
    from bisectbot.cli import main

    parts = []
    for args in [[], *_paths(main, [])]:
        parts += [f"## {' '.join(['bisectbot', *args])}", "", "```text", _help(args), "```", ""]
    return "\n".join(parts)
