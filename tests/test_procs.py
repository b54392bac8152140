"""Children die with the bot: real bot-like processes killed with `kill -9` mid-build, and the
next start on the same state directory (state.children, state.dirlock, build.builder)."""

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

from bisectbot.errors import StateError
from bisectbot.state import children, dirlock
from bisectbot.state.statedir import StateDir

from conftest import subprocess_env

# A bot in miniature: it opens the state directory and starts one child group through procs.
SLEEPER = """
import sys
from pathlib import Path
from bisectbot.processes.procs import run
from bisectbot.state.statedir import StateDir
with StateDir(Path(sys.argv[1])):
    run(["sh", "-c", "sleep 300 & sleep 300 & wait"], timeout=600)
"""

# A bot that builds the tiny project below with the real build stage.
BUILDER = """
import sys
from pathlib import Path
from bisectbot.config.sections import BuildConfig
from bisectbot.state.statedir import StateDir
from bisectbot.building.builder import build_commit
cfg = BuildConfig(targets=["slow"], binaries={"binary": ["slow.txt"]}, jobs=2)
with StateDir(Path(sys.argv[1])) as state:
    rec = build_commit(cfg, "0" * 40, Path(sys.argv[2]), state, "k", state.log_path("build.log"))
    print(rec.status, rec.reason)
"""

# The slow build step: notes its start (with how many other steps were running then) and its
# end, and waits for the test's go-ahead in between.
STEP = """
import os, sys, time
from pathlib import Path
markers, release = Path(sys.argv[1]), Path(sys.argv[2])

def running(pid):
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False

lines = markers.read_text().splitlines() if markers.exists() else []
started = {ln.split()[1] for ln in lines if ln.startswith("start")}
ended = {ln.split()[1] for ln in lines if ln.startswith("end")}
others = sum(running(int(pid)) for pid in started - ended)
with open(markers, "a") as f:
    f.write(f"start {os.getpid()} {others}\\n")
while not release.exists():
    time.sleep(0.05)
with open(markers, "a") as f:
    f.write(f"end {os.getpid()}\\n")
"""


def wait_for(cond: Callable[[], bool], what: str, tries: int = 1200) -> None:
    """Poll until `cond` holds (a bounded number of tries): counts, never times, are asserted."""
    for _ in range(tries):
        if cond():
            return
        time.sleep(0.05)
    pytest.fail(f"never happened: {what}")


def start(script: Path, *args: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(script), *map(str, args)],
        env=subprocess_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


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
        (tmp_path / "procs" / f"{stranger.pid}.json").write_text(
            json.dumps({"pid": stranger.pid, "pgid": stranger.pid, "start": now.start - 1, "argv": ["cmake"]})
        )
        with StateDir(tmp_path):
            assert stranger.poll() is None and len(children.live_members(stranger.pid)) == 1
            assert recorded_groups(tmp_path) == []
    finally:
        stranger.kill()
        stranger.wait()


def test_a_build_a_killed_bot_left_running_never_runs_beside_the_next_one(tmp_path: Path) -> None:
    project, state = tmp_path / "project", tmp_path / "st"
    markers, release = tmp_path / "markers", tmp_path / "release"
    project.mkdir()
    (project / "step.py").write_text(STEP)
    (project / "CMakeLists.txt").write_text(f"""
cmake_minimum_required(VERSION 3.10)
project(slow NONE)
add_custom_target(slow ALL
  COMMAND {sys.executable} {project / "step.py"} {markers} {release}
  COMMAND ${{CMAKE_COMMAND}} -E touch slow.txt)
""")
    script = tmp_path / "builder.py"
    script.write_text(BUILDER)

    def starts() -> list[str]:
        return [ln for ln in markers.read_text().splitlines() if ln.startswith("start")] if markers.exists() else []

    first = start(script, state, project)
    wait_for(lambda: len(starts()) == 1, "the first build's slow step started")
    groups = recorded_groups(state)
    assert len(groups) == 1  # cmake --build, with make or ninja (build.generator) and the step under it
    kill_9(first)
    orphaned = children.live_members(groups[0])
    assert len(orphaned) >= 2 and any(p.name == "cmake" for p in orphaned), [p.name for p in orphaned]

    second = start(script, state, project)
    wait_for(lambda: len(starts()) == 2, "the second build's slow step started")
    release.touch()
    out, err = second.communicate(timeout=300)
    assert second.returncode == 0 and out.split()[0] == "ok", err
    assert "killed 1 process group(s)" in err and "cmake --build" in err
    assert children.live_members(groups[0]) == []
    lines = markers.read_text().splitlines()
    # the first step never ended (killed), the second saw no other step running when it started
    assert [ln.split()[0] for ln in lines] == ["start", "start", "end"]
    assert [int(ln.split()[2]) for ln in lines if ln.startswith("start")] == [0, 0]
    assert lines[2].split()[1] == lines[1].split()[1]


def test_a_held_build_directory_is_waited_for_then_one_clear_error(tmp_path: Path) -> None:
    build_dir = tmp_path / "build-x"
    # a process the records do not name holds the lock (it inherited the descriptor)
    with dirlock.exclusive(build_dir, wait=0) as fd:
        holder = subprocess.Popen(["sleep", "300"], pass_fds=(fd,))
    try:
        with pytest.raises(StateError) as err:
            with dirlock.exclusive(build_dir, wait=0.2):
                pass
        message = str(err.value)
        assert "\n" not in message and str(build_dir) in message and f"pid {holder.pid} (sleep)" in message
    finally:
        holder.kill()
        holder.wait()
    with dirlock.exclusive(build_dir, wait=0.2):  # its holder gone, the lock is free again
        pass


def test_a_build_directory_is_taken_once_its_holder_ends_within_the_wait(tmp_path: Path) -> None:
    build_dir = tmp_path / "build-x"
    with dirlock.exclusive(build_dir, wait=0) as fd:
        holder = subprocess.Popen(["sleep", "0.5"], pass_fds=(fd,))
    with dirlock.exclusive(build_dir, wait=120):
        assert holder.poll() is not None  # taken only after the holder ended
    holder.wait()


def test_children_are_recorded_only_while_they_run(tmp_path: Path) -> None:
    from bisectbot.processes.procs import run

    seen: list[list[str]] = []
    with StateDir(tmp_path) as state:
        res = run([sys.executable, "-c", f"import os; print(len(os.listdir({str(state.procs_dir)!r})))"], timeout=60)
        seen.append(os.listdir(state.procs_dir))
    assert res.stdout.strip() == "1" and seen == [[]]
    # no StateDir open: nothing recorded anywhere
    outside = run([sys.executable, "-c", "pass"], timeout=60)
    assert outside.returncode == 0 and os.listdir(tmp_path / "procs") == []
