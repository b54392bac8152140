"""The record of running child process groups, so a restart kills what a killed bot left behind.

`kill -9` of the bot leaves its build (cmake, make, the compilers) or run running, and the next
bot would build beside it. So while a child group runs, a small file in the state directory's
`procs/` names it (its process group, and its leader's pid and start time); the file goes when
the child ends. A StateDir that takes its lock first kills the groups still recorded there.

The leader's start time (from /proc/<pid>/stat) is what makes this safe: pids are recycled, and
a group is killed only while its leader is still the very process that was recorded. A group
that outlived its leader is not killed (nothing proves it is ours); the build-directory lock
(state.dirlock) still keeps it from running beside a new build.

Where records go is set per process by the StateDir that is open (the last one, when several
are): `procs.run` and `procs.Server` need no argument for it.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

log = logging.getLogger(__name__)

_dirs: list[Path] = []  # the open state directories' procs/ dirs; records go to the last one
_dirs_lock = threading.Lock()


# -- /proc ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ProcStat:
    pid: int
    name: str
    state: str  # R, S, D, Z (zombie: ended, not yet reaped), …
    pgid: int
    start: int  # clock ticks after boot: with the pid, names one process for good
    session: int = 0


def stat(pid: int) -> ProcStat | None:
    """The process's /proc/<pid>/stat, or None when there is no such process."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    name, rest = text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()
    # rest starts at field 3 (state); field 5 is the process group, 6 the session, 22 the start time
    return ProcStat(pid, name, rest[0], int(rest[2]), int(rest[19]), int(rest[3]))


def processes() -> list[ProcStat]:
    """Every process /proc shows."""
    found = (stat(int(p)) for p in os.listdir("/proc") if p.isdigit())
    return [s for s in found if s is not None]


def live_members(pgid: int) -> list[ProcStat]:
    """The processes of a group, or of the session it leads, that still run (zombies have
    ended). The session counts: Ninja starts each compiler in a process group of its own, in
    the session of the build we started."""
    return [s for s in processes() if (s.pgid == pgid or s.session == pgid) and s.state != "Z"]


def kill_session(leader: int, sig: int = signal.SIGKILL, rounds: int = 20) -> None:
    """Signal every process of the group and the session `leader` started (builds and runs
    start in a session of their own), again until none is left: a process forking as it dies
    leaves children in the session."""
    for _ in range(rounds):
        members = live_members(leader)
        if not members:
            return
        for member in members:
            try:
                os.kill(member.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.005)


def holders(path: Path) -> list[str]:
    """The processes (other than this one) with `path` open, as 'pid N (name)'."""
    try:
        target = os.stat(path)
    except OSError:
        return []
    found = []
    for s in processes():
        if s.pid == os.getpid():
            continue
        try:
            fds = os.listdir(f"/proc/{s.pid}/fd")
        except OSError:
            continue  # gone, or another user's
        for fd in fds:
            try:
                st = os.stat(f"/proc/{s.pid}/fd/{fd}")
            except OSError:
                continue
            if (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino):
                found.append(f"pid {s.pid} ({s.name})")
                break
    return found


# -- the record ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Record:
    pid: int  # the group leader, the child procs started
    pgid: int
    start: int  # the leader's start time
    argv: list[str]

    @property
    def command(self) -> str:
        return " ".join(self.argv)[:120]


def track_in(directory: Path) -> None:
    """Record the children this process starts in `directory` (a StateDir opened)."""
    directory.mkdir(exist_ok=True)
    with _dirs_lock:
        _dirs.append(directory)


def stop_tracking(directory: Path) -> None:
    """The StateDir that owns `directory` closed: record there no more."""
    with _dirs_lock:
        if directory in _dirs:  # the flock keeps a directory from being open twice
            _dirs.remove(directory)


def record(pid: int, argv: Sequence[str]) -> Path | None:
    """Note a child that leads its own process group; None when no StateDir is open (or it
    already ended). Give the path to `forget` once the child has ended."""
    with _dirs_lock:
        directory = _dirs[-1] if _dirs else None
    me = stat(pid)
    if directory is None or me is None:
        return None
    path = directory / f"{pid}.json"
    try:
        path.write_text(json.dumps(asdict(Record(pid, me.pgid, me.start, list(argv)))))
    except OSError as exc:
        log.warning("cannot record child %s in %s (a kill -9 would leave it running): %s", pid, directory, exc)
        return None
    return path


def forget(path: Path | None) -> None:
    if path is not None:
        path.unlink(missing_ok=True)


def kill_left_behind(directory: Path, grace: float = 5.0) -> list[Record]:
    """Kill the groups recorded in `directory` that still run (SIGTERM, then SIGKILL after
    `grace` seconds) and remove every record: what a killed bot left. Returns those killed."""
    killed = []
    for path in sorted(directory.glob("*.json")):
        rec = _read(path)
        if rec is not None and _still_ours(rec) and _kill_group(rec.pgid, grace):
            killed.append(rec)
        path.unlink(missing_ok=True)
    if killed:
        log.warning(
            "killed %d process group(s) a previous bisectbot left running in %s: %s",
            len(killed),
            directory.parent,
            "; ".join(f"pgid {r.pgid} ({r.command})" for r in killed),
        )
    return killed


def _read(path: Path) -> Record | None:
    try:
        data = json.loads(path.read_text())
        return Record(int(data["pid"]), int(data["pgid"]), int(data["start"]), [str(a) for a in data["argv"]])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # cut short by the kill: the child was started moments before, if at all


def _still_ours(rec: Record) -> bool:
    """The leader is still the recorded process (not a recycled pid) and still leads its group."""
    now = stat(rec.pid)
    return now is not None and now.start == rec.start and now.pgid == rec.pgid


def _kill_group(pgid: int, grace: float) -> bool:
    """SIGTERM the group, SIGKILL what is left after `grace`; True when this killed anything."""
    if not live_members(pgid):
        return False  # only its unreaped leader is left
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            pass
        except PermissionError:
            log.warning("cannot kill process group %s: not ours to signal", pgid)
            return False
        kill_session(pgid, sig, rounds=1)
        deadline = time.monotonic() + grace
        while live_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if not live_members(pgid):
            return True
    return True
