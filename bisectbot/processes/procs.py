"""The one place that starts child processes (cmake, the program under test, llama-server).

Three promises live here so no caller can forget them: children never see credentials (the
environment is filtered), a timeout kills the whole process group (cmake's compilers, a
hanging binary's threads), not only the direct child, and every group is recorded in the open
state directory while it runs, so a bot killed with `kill -9` has it killed by the next start
(state.children).

Untrusted code (a pull request's head) is started through a `Sandbox` (processes.sandbox:
bubblewrap over a throwaway box). Here it gets two more guards: what is read back of its output
is capped, and the box's size is watched while it runs; either stops the process.
"""

from __future__ import annotations

import atexit
import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from bisectbot.processes import localhttp
from bisectbot.processes.rundriver import DRIVER
from bisectbot.processes.sandbox import SAFE_PATH, Sandbox
from bisectbot.state import children

# Variables never passed to builds or runs: tokens, keys, secrets, GitHub's own settings.
_SECRET = re.compile(r"(TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|PRIVATE_KEY|API_KEY)", re.I)
_SECRET_PREFIXES = ("GITHUB_", "GH_", "BISECTBOT_GITHUB")


def clean_env(extra: Mapping[str, str] | None = None, drop: Iterable[str] = ()) -> dict[str, str]:
    """The current environment without anything that looks like a credential, plus `extra`.

    `drop` names more variables to withhold whatever their names look like: the secrets a
    config names (`Config.secret_env_names`: github.token_env, webhook_secret_env)."""
    drop = set(drop)
    env = {
        k: v
        for k, v in os.environ.items()
        if not _SECRET.search(k) and not k.startswith(_SECRET_PREFIXES) and k not in drop
    }
    env.update(extra or {})
    return env


def _without_secrets(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if not _SECRET.search(k) and not k.startswith(_SECRET_PREFIXES)}


TOO_LARGE = "stopped: its output passed"  # how the drivers and _supervised say it


@dataclass(frozen=True)
class ProcResult:
    argv: tuple[str, ...]
    returncode: int | None  # None when killed for the timeout
    stdout: str
    stderr: str
    seconds: float
    stopped: str = ""  # why the sandbox stopped it (its output or its disk passed the cap)

    @property
    def timed_out(self) -> bool:
        return self.returncode is None and not self.stopped

    @property
    def too_large(self) -> bool:
        """Stopped because its stdout or stderr passed the cap (never parsed)."""
        return self.stopped.startswith(TOO_LARGE)


def run(
    argv: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float,
    log: Path | None = None,
    pass_fds: Sequence[int] = (),
    sandbox: Sandbox | None = None,
    cap: int | None = None,
) -> ProcResult:
    """Run argv (never through a shell) with a timeout that kills its whole process group.

    With `cap` (bytes), argv is a run of the program under test: it starts in this thread's run
    driver (processes.rundriver), its jail: the deadline covers its output whoever holds the pipe,
    what it leaves running is killed when it exits, and each of stdout and stderr is read up
    to `cap` (past it the run is stopped: `ProcResult.too_large`).

    With `log`, stdout and stderr both go to that file (builds); otherwise both are captured.
    `pass_fds` are inherited by the child and its children (a build holds its directory's lock
    for as long as any of them runs, even orphaned). With `sandbox`, argv is untrusted code:
    started without network, under the sandbox's limits, and with no credential in `env`.
    """
    start = time.monotonic()
    child_env = dict(env) if env is not None else clean_env()
    command, where = list(argv), cwd
    if sandbox is not None and log is None and not pass_fds and sandbox.python is not None:
        limit = sandbox.limits.output_mb << 20
        limit = min(limit, cap) if cap is not None else limit
        return _driver(sandbox).run(argv, sandbox.environment(_without_secrets(child_env)), cwd, timeout, limit)
    if sandbox is None and cap is not None and log is None and not pass_fds:
        return _driver(None).run(argv, child_env, cwd, timeout, cap)
    if sandbox is not None:
        if cwd is not None:
            sandbox.hand_over(cwd)
        command = sandbox.wrap(argv, _without_secrets(child_env), cwd)
        child_env, where = {"PATH": SAFE_PATH}, sandbox.box
    out_target = open(log, "ab") if log else subprocess.PIPE
    try:
        proc = subprocess.Popen(
            command,
            cwd=where,
            env=child_env,
            stdin=subprocess.DEVNULL,
            stdout=out_target,
            stderr=subprocess.STDOUT if log else subprocess.PIPE,
            start_new_session=True,
            pass_fds=tuple(pass_fds),
        )
    except OSError as exc:
        if log:
            out_target.close()  # type: ignore[union-attr]
        return ProcResult(tuple(argv), 127, "", f"cannot start {argv[0]}: {exc.strerror or exc}", 0.0)
    recorded = children.record(proc.pid, argv)
    if sandbox is not None:  # (a build step: its own sandbox; runs went to a driver above)
        try:
            return _supervised(proc, argv, sandbox, timeout, start)
        finally:
            children.forget(recorded)
            if log:
                out_target.close()  # type: ignore[union-attr]
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
        code: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        stdout, stderr = proc.communicate()
        code = None
    except BaseException:
        _kill_group(proc)  # Ctrl-C: leave no orphaned build or run behind
        proc.wait()
        raise
    finally:
        children.forget(recorded)
        if log:
            out_target.close()  # type: ignore[union-attr]
    return ProcResult(
        tuple(argv),
        code,
        (stdout or b"").decode("utf-8", "replace"),
        (stderr or b"").decode("utf-8", "replace"),
        time.monotonic() - start,
    )


def _supervised(
    proc: subprocess.Popen, argv: Sequence[str], sandbox: Sandbox, timeout: float, start: float
) -> ProcResult:
    """Wait for a sandboxed child: its output read back up to the cap, its box's size checked
    four times a second; either cap passed, or the timeout, stops it (the whole sandbox: its
    PID namespace dies with bubblewrap)."""
    cap = sandbox.limits.output_mb << 20
    disk = sandbox.limits.disk_mb << 20
    stopped: list[str] = []
    chunks: dict[str, list[bytes]] = {"out": [], "err": []}

    def stop(why: str) -> None:
        if not stopped:
            stopped.append(why)
        _kill_group(proc)

    def drain(name: str, stream: Any) -> None:
        size = 0
        for block in iter(lambda: stream.read(1 << 16), b""):
            if size < cap:
                chunks[name].append(block[: cap - size])
            size += len(block)
            if size > cap:
                stop(f"stopped: its output passed {sandbox.limits.output_mb} MB")
        stream.close()

    readers = [
        threading.Thread(target=drain, args=(name, stream), daemon=True)
        for name, stream in (("out", proc.stdout), ("err", proc.stderr))
        if stream is not None
    ]
    for reader in readers:
        reader.start()
    deadline = start + timeout
    code: int | None = None
    try:
        while True:
            try:
                code = proc.wait(timeout=0.25)
                break
            except subprocess.TimeoutExpired:
                pass
            if sandbox.disk_used() > disk:
                stop(f"stopped: its files passed {sandbox.limits.disk_mb} MB on disk")
            elif time.monotonic() > deadline:
                _kill_group(proc)
                proc.wait()
                code = None
                break
    except BaseException:
        _kill_group(proc)
        proc.wait()
        raise
    for reader in readers:
        reader.join(timeout=10)
    if stopped:
        code = None
    return ProcResult(
        tuple(argv),
        code,
        b"".join(chunks["out"]).decode("utf-8", "replace"),
        b"".join(chunks["err"]).decode("utf-8", "replace"),
        time.monotonic() - start,
        stopped[0] if stopped else "",
    )


class _Driver:
    """One run driver (processes.rundriver: the jail of every run), in a sandbox of its own for
    untrusted code: requests in, answers out, one run at a time. A driver that dies (a run
    killed everything in its sandbox) or does not answer in time is stopped; the next run
    starts a new one."""

    def __init__(self, sandbox: Sandbox | None):
        self.sandbox = sandbox
        self.proc: subprocess.Popen | None = None
        self.recorded: Path | None = None
        self.last_disk_check = 0.0

    def _start(self) -> subprocess.Popen:
        sb = self.sandbox
        if sb is not None:
            assert sb.python is not None
            argv = [sb.python, "-I", "-S", "-c", DRIVER]
            command, where = sb.wrap(argv, {}, sb.box), sb.box
        else:
            argv = [sys.executable, "-I", "-S", "-c", DRIVER]
            command, where = argv, None
        self.proc = subprocess.Popen(
            command,
            cwd=where,
            env={"PATH": SAFE_PATH},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        # a sandbox's driver is recorded in the state directory (a restart kills what a killed
        # bot left); a trusted driver outlives state directories and needs no record: it ends
        # with the thread that started it (PR_SET_PDEATHSIG), even after a kill -9
        self.recorded = children.record(self.proc.pid, argv[:1]) if sb is not None else None
        return self.proc

    def run(
        self, argv: Sequence[str], env: Mapping[str, str], cwd: Path | None, timeout: float, cap: int
    ) -> ProcResult:
        """Run argv through the driver with exactly `env` (for a sandbox: already its allow-list)."""
        sb = self.sandbox
        start = time.monotonic()
        proc = self.proc if self.proc is not None and self.proc.poll() is None else self._start()
        if sb is not None:
            inside = cwd if cwd is not None and Path(cwd).is_relative_to(sb.box) else sb.box
            if cwd is not None:
                sb.hand_over(cwd)
        else:
            inside = Path(cwd) if cwd is not None else Path.cwd()
        request = {"argv": list(argv), "cwd": str(inside), "env": dict(env), "timeout": timeout, "cap": cap}
        assert proc.stdin is not None and proc.stdout is not None
        stopped, answer = "", None
        try:
            proc.stdin.write((json.dumps(request) + "\n").encode())
            proc.stdin.flush()
            answer, stopped = self._answer(proc.stdout.fileno(), start + timeout + 30, cap)
        except OSError:
            answer = None
        if answer is None:
            self.stop()
            return ProcResult(
                tuple(argv),
                None,
                "",
                "" if stopped else "the run driver stopped answering",
                time.monotonic() - start,
                stopped
                or (
                    "stopped: the sandbox it ran in was killed"
                    if sb is not None
                    else "stopped: its run driver was killed"
                ),
            )
        head, out, err = answer
        return ProcResult(
            tuple(argv),
            head["rc"],
            out.decode("utf-8", "replace"),
            err.decode("utf-8", "replace"),
            time.monotonic() - start,
            head["stopped"],
        )

    def _answer(self, fd: int, deadline: float, cap: int) -> tuple[tuple[dict, bytes, bytes] | None, str]:
        """Read one answer: its header line, then exactly the bytes it announces. Raw reads with
        a deadline: a half line (anything in a sandbox may write to this pipe) never blocks us,
        and an answer no driver gives (too long, malformed, more than announced) is None."""
        sb = self.sandbox
        buf, head, want = b"", None, 0
        while True:
            if head is None and b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                head = _header(line, cap)
                if head is None:
                    return None, ""
                want = head["out"] + head["err"]
            if head is not None and len(buf) >= want:
                if len(buf) > want:
                    return None, ""  # more than it announced: not our driver's doing
                return (head, buf[: head["out"]], buf[head["out"] :]), ""
            if head is None and len(buf) > 65536:
                return None, ""
            ready, _, _ = select.select([fd], [], [], 0.25)
            if ready:
                chunk = os.read(fd, max(1 << 16, want - len(buf)))
                if not chunk:
                    return None, ""  # the driver died
                buf += chunk
                continue
            now = time.monotonic()
            if sb is not None and now - self.last_disk_check > 1.0:
                self.last_disk_check = now
                if sb.disk_used() > sb.limits.disk_mb << 20:
                    return None, f"stopped: its files passed {sb.limits.disk_mb} MB on disk"
            if now > deadline:
                return None, ""

    def stop(self) -> None:
        """Stop the driver: it kills its run's whole tree on SIGTERM; SIGKILL after 2 s. Safe
        from another thread (the bot stopping while a run is in flight)."""
        proc, recorded, self.proc = self.proc, self.recorded, None
        if proc is None:
            return
        try:
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(timeout=2)
        except (ProcessLookupError, PermissionError, subprocess.TimeoutExpired):
            pass
        _kill_group(proc)
        proc.wait()
        children.forget(recorded)


def _header(line: bytes, cap: int) -> dict[str, Any] | None:
    """A driver's answer header, checked (it is untrusted code's neighbour): None when malformed."""
    try:
        got = json.loads(line)
    except ValueError:
        return None
    if not (
        isinstance(got, dict)
        and (got.get("rc") is None or type(got.get("rc")) is int)
        and isinstance(got.get("stopped"), str)
        and all(type(got.get(k)) is int and 0 <= got[k] <= cap for k in ("out", "err"))
    ):
        return None
    return got


_drivers_lock = threading.Lock()
_trusted: dict[int, _Driver] = {}  # the drivers of trusted runs, one per thread


def _driver(sandbox: Sandbox | None) -> _Driver:
    """This thread's run driver in `sandbox` or, for trusted runs, on the host (started on its
    first run; it ends with the thread that started it)."""
    with _drivers_lock:
        key = threading.get_ident()
        drivers = sandbox.drivers if sandbox is not None else _trusted
        if key not in drivers:
            drivers[key] = _Driver(sandbox)
        return drivers[key]


def stop_drivers(sandbox: Sandbox | None = None) -> None:
    """Stop every run driver of `sandbox` (its check is over), or every trusted one (the bot
    stops: each kills what its run left running)."""
    with _drivers_lock:
        registry = sandbox.drivers if sandbox is not None else _trusted
        drivers = list(registry.values())
        registry.clear()
    for driver in drivers:
        driver.stop()


atexit.register(stop_drivers)


def _kill_group(proc: subprocess.Popen) -> None:
    """Kill the child's process group and everything else in the session it leads (a build's
    compilers, each in a group of its own under Ninja)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    children.kill_session(proc.pid)


class Server:
    """A long-running child (llama-server) on 127.0.0.1, started once per commit and arm.

    Used as a context manager: waits until `health` answers 200, and always stops the whole
    process group on exit. Its output goes to `log`, a file, so it can never block on a pipe.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        port: int,
        health: str,
        startup_timeout: float,
        env: Mapping[str, str],
        log: Path,
        cwd: Path | None = None,
    ):
        self.argv, self.port, self.health = list(argv), port, health
        self.startup_timeout, self.env, self.log, self.cwd = startup_timeout, env, log, cwd
        self.proc: subprocess.Popen | None = None
        self._recorded: Path | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> "Server":
        """Start the server and wait until `health` answers 200 (ServerError otherwise)."""
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                self.argv,
                cwd=self.cwd,
                env=dict(self.env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._recorded = children.record(self.proc.pid, self.argv)
        deadline = time.monotonic() + self.startup_timeout
        while True:
            if self.proc.poll() is not None:
                self.stop()
                raise ServerError(
                    f"{Path(self.argv[0]).name} ended ({how_it_ended(self.proc.returncode)}) "
                    f"before {self.health} answered: {_tail_of(self.log)}"
                )
            try:
                if localhttp.request(self.base_url + self.health, timeout=2).status == 200:
                    return self
            except localhttp.HttpFailure:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise ServerError(
                    f"{Path(self.argv[0]).name} not healthy at {self.base_url}"
                    f"{self.health} after {self.startup_timeout:g} s: {_tail_of(self.log)}"
                )
            time.sleep(0.1)

    def exited(self) -> str | None:
        """None while the server runs; once it has ended, how (its exit status or signal and the
        last line of its log)."""
        if self.proc is None or self.proc.poll() is None:
            return None
        return f"the server ended ({how_it_ended(self.proc.returncode)}): {_tail_of(self.log)}"

    def stop(self) -> None:
        """Stop the whole process group (SIGTERM, then SIGKILL after 10 s)."""
        if self.proc is None or self.proc.poll() is not None:
            children.forget(self._recorded)
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=10)
        except (ProcessLookupError, PermissionError):
            pass
        except subprocess.TimeoutExpired:
            _kill_group(self.proc)
            self.proc.wait()
        children.forget(self._recorded)


class ServerError(RuntimeError):
    """The server did not start or did not become healthy (the message says why)."""


def free_port() -> int:
    import socket

    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


ERROR_WORDS = ("error", "failed", "fatal", "abort", "assert", "exception", "terminate")


def how_it_ended(code: int) -> str:
    """'exit status 1', 'killed by SIGSEGV': a return code for people."""
    if code >= 0:
        return f"exit status {code}"
    try:
        return f"killed by {signal.Signals(-code).name}"
    except ValueError:
        return f"killed by signal {-code}"


def exit_reason(result: ProcResult, limit: int = 200) -> str:
    """How a child ended badly, for people: its signal or exit status, and the first line of its
    stderr that names an error (the first is the cause; later lines are usually consequences)."""
    code = result.returncode
    if result.stopped:
        how = result.stopped
    elif code is None:
        how = "timed out"
    else:
        how = how_it_ended(code)
    lines = [ln.strip() for ln in result.stderr.splitlines() if ln.strip()]
    first = next((ln for ln in lines if any(w in ln.lower() for w in ERROR_WORDS)), lines[-1] if lines else "")
    if not first:
        return how
    text = f"{how}: {first}"
    if lines and lines[-1] != first:  # and where it ended, when that is another line
        text = f"{text[: limit * 2 // 3]} … last stderr line: {lines[-1]}"
    return text[:limit]


def last_line(text: str, limit: int = 160) -> str:
    """The last non-blank line of a child's output, cut to `limit`: what an error message quotes."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return (lines[-1] if lines else "")[:limit]


def _tail_of(log: Path, limit: int = 200, window: int = 65536) -> str:
    """The last line of a log, read from its last `window` bytes only (a server logs every
    request: its log may be large)."""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - window))
            text = f.read().decode(errors="replace")
    except OSError:
        return "no log"
    return last_line(text, limit) or "no output"


# Credentials by their look: GitHub tokens, private-key blocks, `Authorization:` headers.
_TOKEN_LOOK = re.compile(
    r"(gh[pousr]_[A-Za-z0-9]{16,}|github_pat_\w{16,}|-----BEGIN [A-Z ]*PRIVATE KEY-----"
    r"|(?i:authorization:\s*\S+(\s+\S+)?))"
)


def redact(text: str, env: Mapping[str, str] | None = None) -> str:
    """`text` (what untrusted code printed, to be shown to people) with every value of a
    credential-looking variable of `env` (default: this process's) and anything that looks like
    a token or a private key replaced by [redacted]."""
    env = os.environ if env is None else env
    for key, value in env.items():
        if len(value) >= 6 and (_SECRET.search(key) or key.startswith(_SECRET_PREFIXES)):
            text = text.replace(value, "[redacted]")
    return _TOKEN_LOOK.sub("[redacted]", text)
