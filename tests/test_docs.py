"""Docs that cannot drift: the command reference is --help, links resolve, sentences stay short."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

from cogapp import Cog

ROOT = Path(__file__).resolve().parent.parent


def cog_check(path: Path) -> tuple[int, str]:
    """cog --check on one file: its return code and what it printed (a diff when it differs)."""
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(out):
        code = Cog().main(["cog", "--check", "--diff", str(path)])
    return code, out.getvalue()


def test_the_command_reference_is_what_help_prints() -> None:
    code, out = cog_check(ROOT / "docs" / "commands.md")
    assert code == 0, f"docs/commands.md differs from --help; run `cog -r docs/commands.md`\n{out}"


def test_a_stale_command_reference_fails_the_check(tmp_path: Path) -> None:
    stale = tmp_path / "commands.md"
    text = (ROOT / "docs" / "commands.md").read_text()
    stale.write_text(text.replace("Show this message and exit.", "Show this message."))
    (tmp_path / "cog_commands.py").write_text((ROOT / "docs" / "cog_commands.py").read_text())
    code, out = cog_check(stale)
    assert code != 0 and "Show this message." in out
