"""Output files a command was asked to write (`--json FILE`, `--markdown FILE`), checked before
the command starts: a run of many minutes must not end in a traceback because the file it
reports to cannot be written. `-` is stdout and always fine."""

from __future__ import annotations

import os
from pathlib import Path


def output_problem(path: str) -> str | None:
    """Why `path` cannot be written as an output file, or None. Nothing is created: a failed run
    leaves no empty report behind. The parent must be an existing, writable directory; the path
    itself, if it exists, a writable non-directory (a FIFO or /dev/stdout are fine)."""
    if path == "-":
        return None
    if not path:
        return "an empty path (give a file name, or '-' for stdout)"
    target = Path(path)
    if target.is_dir() or path.endswith(os.sep):
        return "is a directory (give a file name in it)"
    parent = target.parent
    if not parent.exists():
        return f"directory {parent} does not exist"
    if not parent.is_dir():
        return f"{parent} is not a directory"
    if target.exists():
        return None if os.access(target, os.W_OK) else "exists and is not writable"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"directory {parent} is not writable"
    return None
