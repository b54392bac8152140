"""Children die with the bot: real bot-like processes killed with `kill -9` mid-run, and the
next start on the same state directory (edges.children)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import pytest

from bisectbot.edges import children
from bisectbot.edges.storage import StateDir

from conftest import subprocess_env

# A bot in miniature: it opens the state directory and starts one child group through procs.
SLEEPER = """
import sys
from pathlib import Path
from bisectbot.edges.procs import run
from bisectbot.edges.storage import StateDir
with StateDir(Path(sys.argv[1])):
    run(["sh", "-c", "sleep 300 & sleep 300 & wait"], timeout=600)
"""

def wait_for(cond: Callable[[], bool], what: str, tries: int = 1200) -> None:
    """Poll until `cond` holds (a bounded number of tries): counts, never times, are asserted."""
    for _ in range(tries):
        if cond():
            return
        time.sleep(0.05)
    pytest.fail(f"never happened: {what}")


def start(script: Path, *args: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(script), *map(str, args)], env=subprocess_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def recorded_groups(state: Path) -> list[int]:
    return [json.loads(p.read_text())["pgid"] for p in (state / "procs").glob("*.json")]


def kill_9(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def test_the_group_a_killed_bot_left_running_is_killed_by_the_next_start(tmp_path: Path) -> None:
    script = tmp_path / "sleeper.py"
    script.write_text(SLEEPER)
    state = tmp_path / "st"
    bot = start(script, state)
    wait_for(lambda: len(recorded_groups(state)) == 1, "the child group recorded")
    [pgid] = recorded_groups(state)
    wait_for(lambda: len(children.live_members(pgid)) == 3, "sh and its two sleeps running")
    kill_9(bot)
    assert len(children.live_members(pgid)) == 3  # what a kill -9 leaves: the whole group

    with StateDir(state):  # the next start
        assert children.live_members(pgid) == []
        assert recorded_groups(state) == []


def test_a_record_whose_pid_was_recycled_kills_nothing(tmp_path: Path) -> None:
    stranger = subprocess.Popen(["sleep", "300"], start_new_session=True)
    try:
        now = children.stat(stranger.pid)
        assert now is not None
        (tmp_path / "procs").mkdir()
        # the record of an earlier process that had the same pid: another start time
        (tmp_path / "procs" / f"{stranger.pid}.json").write_text(json.dumps(
            {"pid": stranger.pid, "pgid": stranger.pid, "start": now.start - 1, "argv": ["cmake"]}))
        with StateDir(tmp_path):
            assert stranger.poll() is None and len(children.live_members(stranger.pid)) == 1
            assert recorded_groups(tmp_path) == []
    finally:
        stranger.kill()
        stranger.wait()


def test_children_are_recorded_only_while_they_run(tmp_path: Path) -> None:
    from bisectbot.edges.procs import run

    seen: list[list[str]] = []
    with StateDir(tmp_path) as state:
        res = run([sys.executable, "-c", f"import os; print(len(os.listdir({str(state.procs_dir)!r})))"],
                  timeout=60)
        seen.append(os.listdir(state.procs_dir))
    assert res.stdout.strip() == "1" and seen == [[]]
    # no StateDir open: nothing recorded anywhere
    outside = run([sys.executable, "-c", "pass"], timeout=60)
    assert outside.returncode == 0 and os.listdir(tmp_path / "procs") == []
