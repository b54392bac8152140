"""Progress for long work (builds, sweeps, bisect steps), on stderr.

On a terminal, transient updates (seeds run vs budget) rewrite one status line; elsewhere
(pipes, CI) only the step lines are printed, as plain lines, and transient updates are dropped.
`quiet` drops everything (tests, JSON-only use).
"""

from __future__ import annotations

import os
import sys
import time
from typing import TextIO


class Progress:
    def __init__(self, stream: TextIO | None = None, *, quiet: bool = False):
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.live = (not quiet and self.stream.isatty() and not os.environ.get("CI")
                     and os.environ.get("TERM") != "dumb")
        self._last = 0.0
        self._dirty = False

    def step(self, message: str) -> None:
        """A line worth keeping: a bisect step, a verdict, a build result."""
        if self.quiet:
            return
        self._clear()
        print(message, file=self.stream, flush=True)

    def status(self, message: str, *, force: bool = False) -> None:
        """A transient update: shown (at most ~10 per second) on a terminal only."""
        if not self.live:
            return
        now = time.monotonic()
        if not force and now - self._last < 0.1:
            return
        self._last = now
        width = 100
        self.stream.write("\r" + message[:width].ljust(width))
        self.stream.flush()
        self._dirty = True

    def _clear(self) -> None:
        if self._dirty:
            self.stream.write("\r" + " " * 100 + "\r")
            self._dirty = False

    def __call__(self, message: str) -> None:
        self.status(message, force=True)
