"""MkDocs hook: the site is not built from a command reference (commands.md) that differs from
--help. The page is committed and written by cog (docs/cog_commands.py), never by the build;
here it is only checked, as tests/test_docs.py checks it."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

from cogapp import Cog
from mkdocs.exceptions import PluginError


def on_pre_build(config: Any) -> None:
    page = Path(config["docs_dir"]) / "commands.md"
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(out):
        code = Cog().main(["cog", "--check", "--diff", str(page)])
    if code != 0:
        raise PluginError(f"{page} differs from --help: run `cog -r docs/commands.md`\n{out.getvalue()}")
