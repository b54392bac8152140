"""The terminal display: a live status line that fits, colour only where wanted, plain lines in
pipes and CI, the state line, and a plain-text summary that fits the width.

The acceptance test runs `bisectbot demo` in an 80-column tmux pane and reads back both what
the screen kept (scrollback) and the raw bytes written to the pane: the status updates were
drawn, yet none is left on screen, and nothing was wrapped by the terminal.
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from bisectbot.cli.terminal import Terminal, print_summary, wants_color
from bisectbot.demo import DemoHistory
from bisectbot.events import BuildPhase, Built, RunsProgress, StepStarted, VerdictReached
from bisectbot.report.text import bisect_text, commit_text, replayed_line, shell_lines, state_line
from bisectbot.statistics.outcome import Verdict
from bisectbot.statistics.stats import MISSED, OTHER
from coherence import no_red_changed
from sample_reports import BAD_COUNTS, CULPRIT, PARENT, a_test_report, bisect_report, coherent_report, verdict

from conftest import bisectbot_argv, needs

SHA = "60488cfca65a3397efe863d5a17de27690693113"
SGR = re.compile(r"\x1b\[[0-9;]*m")  # colour and style escapes
ESC = re.compile(r"\x1b")
LONG_COUNTS = " ".join(f"{c}={i}" for i, c in enumerate("abcdefghijklmnopqrstuvw"))


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def a_verdict_event(v: Verdict = Verdict.BAD) -> VerdictReached:
    return VerdictReached(verdict(SHA, "retest-culprit", v, BAD_COUNTS))


# -- the live line and kept lines --------------------------------------------------------------
def test_the_live_status_line_is_cut_to_columns_and_erased_before_the_summary() -> None:
    out = Tty()
    term = Terminal(out, environ={"COLUMNS": "60", "TERM": "xterm"})
    assert term.live and term.width == 60
    term(RunsProgress(SHA, 12, 6000, LONG_COUNTS))
    term(StepStarted(2, 4, SHA, 8, 11))
    term.close()
    shown = out.getvalue()
    drawn = [SGR.sub("", p) for p in re.split(r"\r|\n|\x1b\[2K|\x1b\[1A|\x1b\[\?25[lh]", shown)]
    status = [p for p in drawn if "12 of at most 6000 runs" in p]
    assert status and all(len(p) <= 60 for p in status) and status[0].endswith("…")
    assert "[step 2/~4] 60488cfca65a (position 8 of 11)\n" in SGR.sub("", shown)
    assert shown.endswith("\x1b[2K")  # closing erased the status line (rich's transient Live)
    assert "\x1b[?25h" in shown  # and showed the cursor again


def test_kept_lines_are_wrapped_to_the_width_on_a_terminal_and_whole_in_a_pipe() -> None:
    event = a_verdict_event()
    long = event.text() + " because " + "reason " * 20
    tty = Tty()
    Terminal(tty, environ={"COLUMNS": "60", "TERM": "xterm", "NO_COLOR": "1"}).line(long)
    lines = tty.getvalue().splitlines()
    assert len(lines) > 1 and all(len(ln) <= 60 for ln in lines)
    assert " ".join(ln.strip() for ln in lines).split() == long.split()  # nothing lost, only wrapped
    pipe = io.StringIO()
    Terminal(pipe, environ={"COLUMNS": "60"}).line(long)
    assert pipe.getvalue() == long + "\n"


def test_no_color_and_dumb_terminals_get_no_colour_codes_a_terminal_does() -> None:
    env = {"COLUMNS": "80", "TERM": "xterm"}
    coloured = Tty()
    Terminal(coloured, environ=env)(a_verdict_event())
    assert "\x1b[31mBAD" in coloured.getvalue()  # red on a terminal
    for extra in ({"NO_COLOR": "1"}, {"TERM": "dumb"}):
        out = Tty()
        term = Terminal(out, environ={**env, **extra})
        term(a_verdict_event())
        term(Built(SHA, "ok", 1.0, ""))
        assert not ESC.search(out.getvalue()), (extra, out.getvalue())
    # NO_COLOR (any non-empty value) still allows the live line, just no colour in it
    live = Tty()
    term = Terminal(live, environ={**env, "NO_COLOR": "yes"})
    term(RunsProgress(SHA, 1, 10, "a=1 BAD"))
    term(a_verdict_event(Verdict.GOOD))
    term.close()
    assert term.live and "1 of at most 10 runs" in live.getvalue() and not SGR.search(live.getvalue())
    assert wants_color("auto", True, {"NO_COLOR": ""})  # empty means unset (no-color.org)
    assert wants_color("always", False, {"NO_COLOR": "1"}) and not wants_color("never", True, {})


def test_changed_is_never_coloured_as_a_defect() -> None:
    """Issue 48: the good parent's `confirm-parent … CHANGED` was red, a defect's colour. CHANGED
    says the change test found the named commit and its parent differ (on the parent's row: it
    differs from its child), which confirms the answer: neither the progress line nor the summary
    paints it red; BAD stays red."""
    report = coherent_report()
    summary = io.StringIO()
    print_summary(bisect_text(report, 80), "always", summary)
    progress = Tty()
    term = Terminal(progress, environ={"COLUMNS": "80", "TERM": "xterm", "CI": "1"})
    for v in report.verdicts:
        term(VerdictReached(v))
    term.close()
    no_red_changed(summary.getvalue(), progress.getvalue())
    assert "\x1b[31mBAD" in summary.getvalue() and "\x1b[31mBAD" in progress.getvalue()
    said = " ".join(SGR.sub("", progress.getvalue()).split())  # wrapped to 80 columns: read as one
    assert f"confirm-parent {PARENT[:12]}: CHANGED after 13 runs — differs from its child {CULPRIT[:12]}" in said


def test_a_step_past_the_estimate_says_why() -> None:
    """Issue 48: `[step 4, past the ~3 estimated]` said nothing of why; a step at a commit that
    could not be built or run placed nothing, so it halved nothing."""
    assert StepStarted(3, 3, SHA, 5, 6).text() == "[step 3/~3] 60488cfca65a (position 5 of 6)"
    assert StepStarted(4, 3, SHA, 5, 6, 1).text() == (
        "[step 4, past the ~3 estimated: 1 step at a commit that could not be built or run halved nothing] "
        "60488cfca65a (position 5 of 6)"
    )
    assert StepStarted(4, 3, SHA, 5, 6).text() == "[step 4, past the ~3 estimated] 60488cfca65a (position 5 of 6)"


def test_in_ci_and_in_pipes_no_transient_line_is_written() -> None:
    for stream, env in ((Tty(), {"CI": "1", "TERM": "xterm"}), (io.StringIO(), {"TERM": "xterm"})):
        term = Terminal(stream, environ=env)
        assert not term.live
        term(RunsProgress(SHA, 12, 6000, "a=3"))
        term(BuildPhase(SHA, "configure"))
        term(Built(SHA, "failed", 2.0, "cmake build failed"))
        term.close()
        assert SGR.sub("", stream.getvalue()) == "  build failed: cmake build failed\n", env
    quiet = Tty()
    term = Terminal(quiet, quiet=True, environ={"TERM": "xterm"})
    term(RunsProgress(SHA, 12, 6000, "a=3"))
    term(Built(SHA, "ok", 1.0, ""))
    assert quiet.getvalue() == ""


def test_the_summary_on_stdout_is_coloured_only_where_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    text = commit_text(a_test_report(Verdict.BAD))
    plain = io.StringIO()
    print_summary(text, "auto", plain)  # a pipe
    assert plain.getvalue() == text
    forced = io.StringIO()
    print_summary(text, "always", forced)
    assert "\x1b[31mBAD" in forced.getvalue() and SGR.sub("", forced.getvalue()) == text
    monkeypatch.setenv("NO_COLOR", "1")
    tty = Tty()
    print_summary(text, "auto", tty)
    assert tty.getvalue() == text


# -- the plain-text summary --------------------------------------------------------------------
@pytest.mark.parametrize("width", [80, 50])
def test_the_culprits_runs_and_the_one_seed_command_are_on_the_terminal_too(width: int) -> None:
    import dataclasses

    report = bisect_report()
    cmd = "cd /tmp/state/run && env OMP_NUM_THREADS=1 /tmp/state/kept/abc/bin/llama-speculative --seed 17 -p bcdbc"
    outputs = {
        "culprit": report.first_bad,
        "parent": report.last_good,
        "culprit_label": "first bad",
        "rows": [
            {
                "run": 1,
                "parent_seed": 17,
                "parent": "f g",
                "parent_outcome": "g",
                "culprit_seed": 18,
                "culprit": "f e",
                "culprit_outcome": "e",
            },
            {
                "run": 2,
                "parent_seed": 19,
                "parent": "b",
                "parent_outcome": MISSED,
                "culprit_seed": 20,
                "culprit": "f",
                "culprit_outcome": OTHER,
            },
        ],
        "rerun": {"seed": 18, "command": cmd},
    }
    text = bisect_text(dataclasses.replace(report, outputs=outputs), width)
    assert max(len(ln) for ln in text.splitlines()) <= width
    assert "seed 17: f g → g" in text and "seed 18: f e → e" in text and "rerun seed 18 of" in text
    assert "seed 19: b → missed" in text and "seed 20: f → other" in text  # named as in the Markdown
    assert "rerun seed" not in bisect_text(report, width)  # no outputs, no block


def test_a_stopped_bisect_says_so_on_the_terminal_as_in_the_markdown() -> None:
    import dataclasses

    from bisectbot.records.reports import BisectStatus
    from bisectbot.report.markdown import bisect_markdown

    report = dataclasses.replace(bisect_report(), status=BisectStatus.STOPPED)
    head = bisect_text(report, 80).splitlines()[0]
    assert head.startswith("bisectbot: stopped early") and "so far" in head
    assert bisect_markdown(report).splitlines()[0] == "## " + head


@pytest.mark.parametrize("width", [80, 60, 50])
def test_the_text_summary_fits_the_width_and_names_what_a_person_needs(width: int) -> None:
    report = bisect_report(n_extra=2)
    text = bisect_text(report, width)
    lines = text.splitlines()
    assert max(len(ln) for ln in lines) <= width
    assert report.first_bad and report.first_bad in text and (report.last_good or "-") in text
    prose = " ".join(text.split())  # wrapped prose, read as one line
    assert "FOUND" in prose and "6 builds (bound 7)" in prose and "1,460 runs" in prose
    rows = [ln for ln in lines if ln.startswith(report.first_bad[:12])]
    assert rows and "retest-culprit" in rows[0] and "BAD" in rows[0]
    assert "observed/reference: b .67/.20" in text  # the largest departure first
    assert "|" not in text.replace("pipes | in", "")  # no Markdown table
    # the reproduce command still pastes as one command
    reproduce = text.split("reproduce:\n", 1)[1].split("\n\n", 1)[0]
    assert pasted(reproduce) == report.reproduce.split()


def test_the_test_summary_fits_and_a_long_shell_command_breaks_between_arguments() -> None:
    text = commit_text(a_test_report(Verdict.INCONCLUSIVE), 60)
    assert max(len(ln) for ln in text.splitlines()) <= 60 and "INCONCLUSIVE" in text
    words = [
        "bisectbot",
        "bisect",
        "/tmp/pytest-of-root/pytest-24/test_demo_in_an_80_column_tmux0/demo/specdemo.yaml",
        "--good",
        "a" * 40,
        "--bad",
        "b" * 40,
    ]
    for width in (50, 80):
        lines = shell_lines(" ".join(words), width)
        assert len(lines) > 2 and all(len(ln) <= width for ln in lines)
        assert pasted("\n".join(lines)) == words  # a word too long for a line is split, and joined by sh


def pasted(command: str) -> list[str]:
    """The words sh reads from `command` as pasted (its line continuations joined)."""
    out = subprocess.run(
        ["sh", "-c", "printf '%s\\n' " + command.split(" ", 1)[1], "sh"], capture_output=True, text=True, check=True
    ).stdout
    return [command.split(" ", 1)[0], *out.splitlines()]


def test_the_state_and_replay_lines_say_what_is_counted() -> None:
    assert state_line("/s", 0, 0, commits=12) == "state: /s (new)"
    assert (
        state_line("/s", 1571, 9, 361, 6, 12)
        == "state: /s (resuming: 361 runs and 6 builds stored at these 12 commits; 1,571 runs and 9 builds in all)"
    )
    assert state_line("/s", 1571, 9, 0, 0, 1) == "state: /s (holds 1,571 runs and 9 builds, none at this commit)"
    assert state_line("/s", 5, 1) == "state: /s (holds 5 runs and 1 builds)"
    assert (
        replayed_line(1571, 1210, 9, 6) == "from state: 361 of 1,571 runs and 6 of 9 builds (replayed, not run again)"
    )
    assert replayed_line(40, 40, 3, 0) is None


# -- the CLI: state line, resume, text on stdout, Markdown on request ----------------------------
@pytest.mark.heavy  # whole bisects or long simulations, 4 s or more: after the default suite (README: Tests)
def test_test_prints_the_state_line_then_what_it_replayed(small_demo: DemoHistory, tmp_path: Path) -> None:
    state = tmp_path / "st"
    # the culprit tests BAD (exit 1) within a few dozen runs: cheap to run twice
    argv = bisectbot_argv("test", str(small_demo.config), "--commit", small_demo.culprit, "--state", str(state))
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "COLUMNS", "BISECTBOT_GITHUB_TOKEN")}
    first = subprocess.run(
        [*argv, "--json", str(tmp_path / "first.json")],
        capture_output=True,
        text=True,
        env={**env, "CI": "1"},
        timeout=120,
    )
    assert first.returncode == 1, first.stderr
    runs = json.loads((tmp_path / "first.json").read_text())["runs"]
    assert f"state: {state} (new)" in first.stderr.splitlines()
    assert "from state:" not in first.stderr
    # stdout: the plain-text summary; in a pipe nothing is cut to a width
    assert first.stdout.startswith(f"bisectbot: {small_demo.culprit[:12]} is BAD after")
    assert "| commit |" not in first.stdout and "…" not in first.stdout
    again = subprocess.run(
        [*argv, "--markdown", "-"], capture_output=True, text=True, env={**env, "CI": "1", "COLUMNS": "60"}, timeout=120
    )
    assert again.returncode == 1, again.stderr
    stored = [ln for ln in again.stderr.splitlines() if ln.startswith("state:")]
    held = re.fullmatch(
        rf"state: {re.escape(str(state))} \(resuming: ([\d,]+) runs and 1 builds stored at "
        r"this commit; \1 runs and 1 builds in all\)",
        stored[0] if len(stored) == 1 else "",
    )
    # every run stored is at this commit; the verdict used `runs` of them (a parallel sweep may store a few more)
    assert held and int(held.group(1).replace(",", "")) >= runs, stored
    assert (
        f"from state: {runs:,} of {runs:,} runs and 1 of 1 builds (replayed, not run again)"
        in again.stderr.splitlines()
    ), again.stderr
    assert again.stdout.startswith("## bisectbot:") and "| commit |" in again.stdout  # --markdown -
    both = subprocess.run(
        [*argv, "--markdown", "-", "--json", "-"], capture_output=True, text=True, env={**env, "CI": "1"}, timeout=60
    )
    assert both.returncode == 2 and "both want stdout" in both.stderr


# -- acceptance: an 80-column tmux session ------------------------------------------------------
TMUX = shutil.which("tmux")


@pytest.mark.heavy  # about a minute: after the default suite (README)
@needs("tmux")
def test_demo_in_an_80_column_tmux_pane_wraps_nothing_and_leaves_no_status_behind(tmp_path: Path) -> None:
    assert TMUX is not None
    sock = f"bisectbot-test-{tmp_path.name}"
    raw, done, report = tmp_path / "raw.log", tmp_path / "exit", tmp_path / "report.json"
    go = tmp_path / "go"
    demo = shlex.join(
        [*bisectbot_argv("demo", "--commits", "12", "--dir", str(tmp_path / "demo"), "--json", str(report))]
    )
    script = tmp_path / "run.sh"
    script.write_text(
        f"unset CI NO_COLOR COLUMNS LINES\nwhile [ ! -e {shlex.quote(str(go))} ]; do sleep 0.05; done\n"
        f"{demo}\necho $? > {shlex.quote(str(done))}\nsleep 600\n"
    )
    tmux = [TMUX, "-L", sock, "-f", "/dev/null"]
    subprocess.run(
        [*tmux, "new-session", "-d", "-s", "demo", "-x", "80", "-y", "50", "sh", str(script)], check=True, timeout=10
    )
    try:
        subprocess.run([*tmux, "set-option", "-t", "demo", "history-limit", "10000"], check=True, timeout=10)
        subprocess.run(
            [*tmux, "pipe-pane", "-t", "demo", "-o", f"cat > {shlex.quote(str(raw))}"], check=True, timeout=10
        )
        go.touch()
        deadline = time.monotonic() + 240
        while not done.exists() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert done.exists(), "the demo did not end within 4 minutes"
        time.sleep(0.3)  # let the pane take the last bytes
        capture = [TMUX, "-L", sock, "capture-pane", "-p", "-t", "demo", "-S", "-", "-E", "-"]
        screen = subprocess.run(capture, capture_output=True, text=True, check=True, timeout=10).stdout
        joined = subprocess.run([*capture, "-J"], capture_output=True, text=True, check=True, timeout=10).stdout
    finally:
        subprocess.run([*tmux, "kill-server"], timeout=10)
    assert done.read_text().strip() == "0", screen
    (tmp_path / "screen.txt").write_text(screen)
    (tmp_path / "joined.txt").write_text(joined)
    lines = [ln.rstrip() for ln in screen.rstrip().splitlines()]
    # the terminal wrapped nothing: joining wrapped lines (-J) changes nothing, no line overflows
    assert [ln.rstrip() for ln in joined.rstrip().splitlines()] == lines
    assert max(len(ln) for ln in lines) <= 80
    # the status line was drawn (seeds vs budget) yet none is left on screen
    assert re.search(r"\d+ of at most \d+ runs", raw.read_text(errors="replace"))
    assert not [
        ln
        for ln in lines
        if re.search(r"\d+ of at most \d+ runs", ln) or re.fullmatch(r"  (configure|build) \w{12}", ln)
    ]
    # every kept line is there once: one verdict line per verdict of the report, in its order
    data = json.loads(report.read_text())
    verdict_lines = [
        ln
        for ln in lines
        if re.match(
            r"  (\S+) ([0-9a-f]{12}): (GOOD-SIDE|BAD-SIDE|GOOD|BAD|SKIP|INCONCLUSIVE|CHANGED) "
            r"after",
            ln,
        )
    ]
    assert [ln.split()[1].rstrip(":") for ln in verdict_lines] == [v["sha"][:12] for v in data["verdicts"]]
    assert sum(ln.startswith("state: ") for ln in lines) == 1
    # the summary: plain text, after the progress, fitting the width
    assert any(ln.startswith(f"bisectbot: first bad commit is {data['first_bad'][:12]}") for ln in lines)
    assert not any(ln.startswith("| ") for ln in lines)
    assert any(ln.startswith(f"planted culprit {data['first_bad'][:12]}: found") for ln in lines[-6:])
    # then the command that shows every commit it tested, broken to the width as a shell command
    assert "specdemo.yaml" in "".join(ln.rstrip("\\").strip() for ln in lines[-4:])
