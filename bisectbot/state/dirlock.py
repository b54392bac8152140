"""An exclusive lock on a directory that its child processes keep holding.

Two builds in one build directory at once corrupt each other (one configures while the other
compiles). The lock is an flock on a file beside the directory, not in it: a build directory is
deleted and made afresh (a clean retry, a moved state directory), and a lock on a deleted file
would lock nothing. Its descriptor is handed to the build's children (`procs.run(pass_fds=…)`),
so a build orphaned by a killed bot still holds the lock while any of its processes runs.
"""

from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from bisectbot.errors import StateError
from bisectbot.state import children


def lock_path(directory: Path) -> Path:
    return directory.with_name(directory.name + ".lock")


@contextmanager
def exclusive(directory: Path, *, wait: float) -> Iterator[int]:
    """Hold `directory`'s lock, waiting up to `wait` seconds for its holder; yields the lock's
    descriptor for the children that must hold it too. StateError (naming the directory and the
    processes holding it) when it stays held."""
    path = lock_path(directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:  # never a link (a box's lock file may have been replaced by one)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
    except OSError as exc:
        raise StateError(f"cannot lock {directory}: {path}: {exc.strerror or exc} (refused: a link)") from None
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    held_by = ", ".join(children.holders(path)) or "a process this user cannot see"
                    raise StateError(
                        f"{directory} is in use by {held_by} (still locked after waiting {wait:g} s)"
                    ) from None
                time.sleep(0.05)
        yield fd
    finally:
        os.close(fd)
