"""Events from the pipeline to its observers, the cancel token back, and the terminal observer."""

from __future__ import annotations

import io

import pytest

from bisectbot.cli.terminal import Terminal
from bisectbot.events import Built, Cancelled, CancelToken, Event, Events, RunsProgress, StepStarted

SHA = "60488cfca65a3397efe863d5a17de27690693113"


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_observers_see_every_event_and_a_job_s_observer_only_while_it_runs() -> None:
    everyone: list[Event] = []
    events = Events(everyone.append)
    during: list[Event] = []
    with pytest.raises(RuntimeError):
        with events.observing(during.append):
            events.emit(StepStarted(1, 4, SHA, 5, 11))
            raise RuntimeError("the job failed")
    events.emit(Built(SHA, "ok", 1.0, ""))
    assert [type(e) for e in everyone] == [StepStarted, Built] and [type(e) for e in during] == [StepStarted]


def test_the_first_cancel_wins_and_stops_at_the_next_check() -> None:
    token = CancelToken()
    token.check()  # nothing asked yet
    token.cancel("maintainer")
    token.cancel("someone else")
    with pytest.raises(Cancelled) as stop:
        Events(cancel=token).check()
    assert stop.value.who == "maintainer" and "maintainer" in str(stop.value)


def test_a_terminal_status_line_fits_the_width_and_is_erased_when_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    out = Tty()
    term = Terminal(out)
    assert term.live
    term(RunsProgress(SHA, 12, 6000, " ".join(f"{c}={i}" for i, c in enumerate("abcdefghijklmnopqrstuvw"))))
    term(StepStarted(2, 4, SHA, 8, 11))
    term.close()
    shown = out.getvalue()
    status = shown.split("\x1b[?25l", 1)[1].split("\r", 1)[0]  # the first frame of rich's Live
    assert status.startswith(f"  {SHA[:12]} 12 of at most 6000 runs") and status.endswith("…")
    assert 0 < len(status) <= 80  # cut to the width: never wraps on an 80-column terminal
    assert "\x1b[2K[step 2/~4] 60488cfca65a (position 8 of 11)\n" in shown  # the status was erased first
    assert shown.endswith("\x1b[2K")  # and erased when closed


def test_in_ci_only_lines_worth_keeping_are_printed_and_quiet_prints_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CI", "1")
    monkeypatch.setenv("NO_COLOR", "1")
    out = Tty()
    term = Terminal(out)
    term(RunsProgress(SHA, 12, 6000, "a=3"))
    term(Built(SHA, "failed", 2.0, "cmake build failed"))
    assert out.getvalue() == "  build failed: cmake build failed\n"
    quiet = io.StringIO()
    Terminal(quiet, quiet=True)(Built(SHA, "ok", 1.0, ""))
    assert quiet.getvalue() == ""
