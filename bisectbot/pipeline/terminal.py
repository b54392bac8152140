"""The terminal observer: pipeline events on stderr, live on a terminal, plain in CI.

On a terminal, transient events (seeds run vs budget, configure/build) rewrite one status line
that fits the terminal's width; elsewhere (pipes, CI) only the lines worth keeping are printed
and transient events are dropped. `quiet` drops everything (tests, JSON-only use).
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from typing import TextIO

from bisectbot.pipeline.events import Event


class Terminal:
    def __init__(self, stream: TextIO | None = None, *, quiet: bool = False):
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.live = (not quiet and self.stream.isatty() and not os.environ.get("CI")
                     and os.environ.get("TERM") != "dumb")
        self._last = 0.0
        self._shown = 0  # width of the status line on screen

    def __call__(self, event: Event) -> None:
        if event.transient:
            self.status(event.text())
        else:
            self.line(event.text())

    def line(self, message: str) -> None:
        """A line worth keeping: a bisect step, a verdict, a build result."""
        if self.quiet:
            return
        self._clear()
        print(message, file=self.stream, flush=True)

    def status(self, message: str) -> None:
        """A transient update: shown (at most ~10 per second) on a terminal only."""
        if not self.live:
            return
        now = time.monotonic()
        if now - self._last < 0.1:
            return
        self._last = now
        width = max(20, shutil.get_terminal_size().columns - 1)  # never wrap: a wrapped line stays
        text = message[:width]
        self.stream.write("\r" + text.ljust(self._shown))
        self.stream.flush()
        self._shown = len(text)

    def _clear(self) -> None:
        if self._shown:
            self.stream.write("\r" + " " * self._shown + "\r")
            self._shown = 0
