"""The terminal observer: pipeline events on stderr, live on a terminal, plain in CI.

On a terminal, transient events (seeds run vs budget, configure/build) update one status line,
drawn by rich's `Live` and cut to the terminal's width (an ellipsis, never a wrap: a wrapped
status line stays on screen); the lines worth keeping are wrapped to the width by rich, so the
terminal itself never wraps anything. Elsewhere (pipes, `CI` set, `TERM=dumb`) only the lines
worth keeping are printed, whole, and transient events are dropped. `quiet` drops everything.

Colour (the verdict words) only on a terminal, never with `NO_COLOR` (any non-empty value,
https://no-color.org) or `TERM=dumb`; `--color always|never` overrides the guess.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import sys
import threading
import time
import weakref
from typing import Mapping, TextIO

from rich.console import Console
from rich.live import Live
from rich.text import Text

from bisectbot.events import Event
from bisectbot.inert import visible

COLOR_MODES = ("auto", "always", "never")
# verdict words as the events and summaries spell them, and their colours
VERDICT_STYLES = {
    "GOOD-SIDE": "cyan",
    "BAD-SIDE": "magenta",
    "GOOD": "green",
    "BAD": "red",
    "SKIP": "yellow",
    "INCONCLUSIVE": "yellow",
    # the change test's word: the named commit and its parent differ (on a parent's row: it differs
    # from its child), which confirms an answer; no defect's red
    "CHANGED": "blue",
}
# the longer words first, and never a GOOD inside GOOD-SIDE
_VERDICT_WORD = re.compile(r"(?<![\w-])(" + "|".join(VERDICT_STYLES) + r")(?![\w-])")
STATUS_INTERVAL = 0.1  # at most ~10 status updates a second


def wants_color(mode: str, tty: bool, environ: Mapping[str, str]) -> bool:
    """Whether to colour: `always`/`never` as said; `auto` on a terminal unless NO_COLOR is set
    (non-empty) or TERM is dumb."""
    if mode == "always":
        return True
    if mode == "never":
        return False
    return tty and not environ.get("NO_COLOR") and environ.get("TERM") != "dumb"


def is_live(tty: bool, environ: Mapping[str, str]) -> bool:
    """A live status line only on a terminal that can redraw one, and never in CI logs."""
    return tty and not environ.get("CI") and environ.get("TERM") != "dumb"


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or odd stream: not a terminal
        return False


def coloured(message: str) -> Text:
    """The message with its verdict words styled (a no-op where colour is off). Every control
    character of it is shown as an escape first (`inert.visible`): a line may quote a commit
    subject or what a build or a run printed, and no ESC of theirs may reach the terminal."""
    message = visible(message, keep="\n\t")
    text = Text(message)
    for m in _VERDICT_WORD.finditer(message):
        text.stylize(VERDICT_STYLES[m.group(1)], m.start(), m.end())
    return text


class Terminal:
    """Observer of pipeline events; also prints the CLI's own kept lines (`line`)."""

    _open: "weakref.WeakSet[Terminal]" = weakref.WeakSet()

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        quiet: bool = False,
        color: str = "auto",
        environ: Mapping[str, str] | None = None,
    ):
        env = os.environ if environ is None else environ
        self.stream = stream or sys.stderr
        self.quiet = quiet
        self.tty = _isatty(self.stream)
        self.live = not quiet and is_live(self.tty, env)
        self.color = wants_color(color, self.tty, env)
        width = env.get("COLUMNS", "")
        self.console = Console(
            file=self.stream,
            force_terminal=self.tty or self.color,
            no_color=not self.color,
            color_system="auto" if self.color else None,
            highlight=False,
            markup=False,
            emoji=False,
            # wrapped to the width on a terminal; whole lines in pipes (a log keeps them as written)
            soft_wrap=not self.tty,
            width=int(width) if width.isdigit() and int(width) > 0 else None,
            force_jupyter=False,
            force_interactive=self.live,
            legacy_windows=False,
        )
        self._live: Live | None = None
        self._last = 0.0
        self._lock = threading.Lock()

    @property
    def width(self) -> int:
        return self.console.width

    def __call__(self, event: Event) -> None:
        if event.transient:
            self.status(event.text())
        else:
            self.line(event.text())

    def line(self, message: str) -> None:
        """A line worth keeping: a bisect step, a verdict, a build result."""
        if self.quiet:
            return
        with self._lock:
            self.console.print(coloured(message))  # above the live status line, when there is one

    def status(self, message: str) -> None:
        """A transient update: shown (at most ~10 per second) on a terminal only, cut to its width."""
        if not self.live:
            return
        now = time.monotonic()
        with self._lock:
            if now - self._last < STATUS_INTERVAL:
                return
            self._last = now
            text = coloured(message)
            text.no_wrap, text.overflow = True, "ellipsis"
            if self._live is None:
                self._live = Live(
                    text,
                    console=self.console,
                    auto_refresh=False,
                    transient=True,
                    redirect_stdout=False,
                    redirect_stderr=False,
                )
                self._live.start(refresh=True)
                Terminal._open.add(self)
            else:
                self._live.update(text, refresh=True)

    def close(self) -> None:
        """Erase the status line (before the summary goes to stdout, or an error to stderr)."""
        with self._lock:
            if self._live is not None:
                self._live.stop()
                self._live = None
                Terminal._open.discard(self)

    def __enter__(self) -> "Terminal":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @classmethod
    def close_all(cls) -> None:
        """Erase every status line still on screen (an error or Ctrl-C ends a command early)."""
        for term in list(cls._open):
            term.close()


atexit.register(Terminal.close_all)  # never leave the cursor hidden behind a status line


NO_CUT = 100_000  # the summary's width when stdout is a file or a pipe: nothing is cut


def summary_width() -> int:
    """Columns for the summary on stdout: COLUMNS, else the terminal's; written to a file or a
    pipe, no width at all (a subject or a host line cut at 80 columns helps nobody there)."""
    if os.environ.get("COLUMNS", "").isdigit() or _isatty(sys.stdout):
        return shutil.get_terminal_size((80, 24)).columns
    return NO_CUT


def print_summary(text: str, color: str = "auto", stream: TextIO | None = None) -> None:
    """The summary on stdout as rendered (never re-wrapped), its verdict words coloured where
    `color` allows it."""
    out = stream or sys.stdout
    if not wants_color(color, _isatty(out), os.environ):
        out.write(visible(text, keep="\n\t"))
        out.flush()
        return
    Console(file=out, force_terminal=True, soft_wrap=True, highlight=False, markup=False, emoji=False).print(
        coloured(text), end=""
    )
    out.flush()
