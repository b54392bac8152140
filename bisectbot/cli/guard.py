"""How a command ends: its exit code (the table in bisectbot/cli/__init__.py), and every error
as one line on stderr — a BisectbotError, a refused file, Ctrl-C, a usage error — never a traceback.

`guard` runs a command body; `OneLineGroup` is the command group whose usage errors are one line."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from typing import Any, Callable

import click

from bisectbot.cli.options import OUTPUT_PARAMS
from bisectbot.cli.terminal import Terminal
from bisectbot.errors import BisectbotError, one_line
from bisectbot.inert import visible
from bisectbot.records.reports import BisectStatus
from bisectbot.state.outfiles import output_problem
from bisectbot.statistics.outcome import Verdict

EXIT_OK, EXIT_BAD, EXIT_INPUT, EXIT_UNDECIDED, EXIT_ENDPOINT, EXIT_GITHUB = 0, 1, 2, 3, 4, 5
TEST_EXIT = {
    Verdict.GOOD: EXIT_OK,
    Verdict.BAD: EXIT_BAD,
    Verdict.INCONCLUSIVE: EXIT_UNDECIDED,
    Verdict.SKIP: EXIT_ENDPOINT,
}
BISECT_EXIT = {
    BisectStatus.FOUND: EXIT_OK,
    BisectStatus.AMBIGUOUS: EXIT_UNDECIDED,
    BisectStatus.UNCONFIRMED: EXIT_UNDECIDED,
    BisectStatus.STOPPED: EXIT_UNDECIDED,
    BisectStatus.CLEAN: EXIT_BAD,  # --scan found no departure: 1, as grep finding nothing
}


class Stopped(KeyboardInterrupt):
    """SIGTERM or SIGHUP: the same way out as Ctrl-C (a build and what it started killed, runs in
    flight finished and stored, writes in flight finished), with the exit code 128 + signal."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _stop(signum: int, _frame: object) -> None:
    raise Stopped(signum)


def _stop_like_ctrl_c() -> None:
    """SIGTERM and SIGHUP raise `Stopped` in the main thread, as SIGINT raises KeyboardInterrupt
    (their default kills the process at once: no message, a build left running)."""
    if threading.current_thread() is threading.main_thread():
        for signum in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, _stop)


class _VisibleFormatter(logging.Formatter):
    """Log lines as Python's last-resort handler writes them (the message alone), with every
    control character shown as an escape: a warning may quote a comment, a ref or what a
    build printed, and none of their escape sequences may reach the terminal or a CI log."""

    def format(self, record: logging.LogRecord) -> str:
        return visible(super().format(record), keep="\n\t")


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever `sys.stderr` is at the time, as the last-resort handler does."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def _visible_logs() -> None:
    """Warnings and errors of the bot's loggers on stderr through `_VisibleFormatter`, once."""
    root = logging.getLogger()
    if not any(isinstance(h.formatter, _VisibleFormatter) for h in root.handlers):
        handler = _StderrHandler()
        handler.setFormatter(_VisibleFormatter("%(message)s"))
        handler.setLevel(logging.WARNING)
        root.addHandler(handler)


def guard(fn: Callable[[], int]) -> None:
    """Run a command body: BisectbotError → one line on stderr and its exit code."""
    try:
        _visible_logs()
        _stop_like_ctrl_c()
        _check_outputs()
        code = _closing(fn)
    except BisectbotError as exc:
        click.echo(f"bisectbot: error: {one_line(str(exc))}", err=True)
        sys.exit(exc.exit_code)
    except OSError as exc:  # the file system refused something no stage foresaw: still one line
        where = f"{exc.filename}: " if exc.filename else ""
        click.echo(f"bisectbot: error: {where}{exc.strerror or exc}", err=True)
        sys.exit(EXIT_INPUT)
    except Stopped as exc:
        name = signal.Signals(exc.signum).name
        click.echo(f"bisectbot: stopping ({name}); rerun the same command to resume", err=True)
        sys.exit(128 + exc.signum)
    except KeyboardInterrupt:
        click.echo("bisectbot: interrupted; rerun the same command to resume", err=True)
        sys.exit(130)
    sys.exit(code)


def _check_outputs() -> None:
    """Before a command body runs: every output file it was given (OUTPUT_PARAMS) can be
    written, so a bad path is one line and exit 2 before anything is built, not a traceback
    (exit 1, "test: BAD") after the whole run."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return
    for param in ctx.command.params:
        value = ctx.params.get(param.name or "")
        if param.name in OUTPUT_PARAMS and isinstance(value, str) and (problem := output_problem(value)):
            raise BisectbotError(f"{param.opts[0] if param.opts else param.name} {value}: {problem}")


def _closing(fn: Callable[[], int]) -> int:
    """Run a command body; however it ends, the live status line is erased first, so that an
    error (or the summary) starts on a clean line and the cursor is shown again."""
    try:
        return fn()
    finally:
        Terminal.close_all()


class _OneLineUsage(click.ClickException):
    """A usage error as the one line (and exit 2) every bad input gets, instead of click's
    Usage/Try/Error block: `bisectbot: error: <what> (see bisectbot <command> --help)`."""

    exit_code = EXIT_INPUT

    def __init__(self, exc: click.UsageError):
        names = []
        ctx: click.Context | None = exc.ctx
        while ctx is not None:
            names.append(ctx.info_name or "")
            ctx = ctx.parent
        where = " ".join(["bisectbot", *reversed(names[:-1])])  # the root's name as typed may be a path
        super().__init__(f"{one_line(exc.format_message())} (see {where} --help)")
        # click 8.5 declares exit_code a ClassVar; click reads it from the instance all the same
        self.exit_code = exc.exit_code  # type: ignore[misc]  # 2, or 128 under --git-bisect

    def show(self, file: Any = None) -> None:
        click.echo(f"bisectbot: error: {self.format_message()}", file=file, err=True)  # stderr unless given one


class OneLineGroup(click.Group):
    """The command group: every usage error (unknown option, bad value, missing argument) is
    one line with click's exit code; a group called bare still shows its help."""

    group_class = type  # subgroups made with .group() are OneLineGroups too

    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None, **extra: Any
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as exc:
            raise _OneLineUsage(exc) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as exc:
            raise _OneLineUsage(exc) from None
