"""The one place that starts child processes (cmake, the program under test, llama-server).

Three promises live here so no caller can forget them: children never see credentials (the
environment is filtered), a timeout kills the whole process group (cmake's compilers, a
hanging binary's threads), not only the direct child, and every group is recorded in the open
state directory while it runs, so a bot killed with `kill -9` has it killed by the next start
(edges.children).

Untrusted code (a pull request's head) is started through a `Sandbox`: in a new network
namespace (`unshare`; only a loopback that is down, so nothing, not even 127.0.0.1 of the host,
can be reached), under CPU, address-space and file-size limits (`prlimit`), with the clean
environment. Where no network namespace can be made, `sandbox()` raises `SandboxError`: untrusted
code is refused, never run with the network.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from bisectbot.edges import children, localhttp
from bisectbot.errors import BisectbotError

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


# -- the sandbox for untrusted code -----------------------------------------------------------------
class SandboxError(BisectbotError):
    """Untrusted code cannot be confined here (no network namespace can be made): refused."""

    exit_code = 4


@dataclass(frozen=True)
class Limits:
    """Per-process limits of every untrusted child (and each of its children)."""

    cpu_seconds: int
    memory_mb: int     # address space (RLIMIT_AS)
    file_size_mb: int  # largest file it may write (RLIMIT_FSIZE)

    def text(self) -> str:
        return (f"CPU {self.cpu_seconds} s, memory {self.memory_mb} MB, files {self.file_size_mb} MB "
                "per process")


# The ways to start a child in a new network namespace, strongest first. With a user namespace
# of its own the child holds no capability in the host's namespaces, so it cannot enter the
# host's network namespace again (`setns`); the second way (root only) cannot stop root code
# from doing that, but still starts it without a network.
NAMESPACES: tuple[tuple[str, ...], ...] = (
    ("unshare", "--user", "--map-root-user", "--net", "--"),
    ("unshare", "--net", "--"),
)
_probed: dict[tuple[str, ...], tuple[str, ...] | None] = {}
_probe_lock = threading.Lock()
# Sets the limits and executes the rest of argv, where there is no `prlimit`.
_SETRLIMIT = ("import os, resource, sys\n"
              "for name, value in zip(('RLIMIT_CPU', 'RLIMIT_AS', 'RLIMIT_FSIZE'), sys.argv[1:4]):\n"
              "    resource.setrlimit(getattr(resource, name), (int(value), int(value)))\n"
              "os.execvp(sys.argv[4], sys.argv[4:])\n")


def _probe(way: tuple[str, ...]) -> tuple[str, ...] | None:
    """`way` with its program's absolute path, if a child started that way sees no network
    interface but a loopback (read from its own /proc/net/dev), else None."""
    program = shutil.which(way[0])
    if program is None or ("--user" not in way and os.geteuid() != 0):
        return None
    prefix = (program, *way[1:])
    cat = shutil.which("cat") or "/bin/cat"
    res = run([*prefix, cat, "/proc/net/dev"], timeout=30)
    if res.returncode != 0:
        return None
    interfaces = {ln.split(":", 1)[0].strip() for ln in res.stdout.splitlines()[2:] if ":" in ln}
    return prefix if interfaces <= {"lo"} else None


def network_namespace(ways: Sequence[tuple[str, ...]] | None = None) -> tuple[str, ...] | None:
    """The argv prefix that starts a child in a new network namespace here (each way of
    `ways`, default NAMESPACES, is tried once per process), or None when none works."""
    with _probe_lock:
        for way in NAMESPACES if ways is None else ways:
            if way not in _probed:
                _probed[way] = _probe(way)
            if _probed[way] is not None:
                return _probed[way]
    return None


@dataclass(frozen=True)
class Sandbox:
    """How `run` starts untrusted code: `namespace` (an argv prefix that makes a new network
    namespace) and the limits, set before the program is executed."""

    namespace: tuple[str, ...]
    limits: Limits

    def wrap(self, argv: Sequence[str]) -> list[str]:
        lim = self.limits
        cpu, mem, size = lim.cpu_seconds, lim.memory_mb << 20, lim.file_size_mb << 20
        prlimit = _prlimit()
        if prlimit is not None:
            limit = [prlimit, f"--cpu={cpu}", f"--as={mem}", f"--fsize={size}", "--"]
        else:
            limit = [sys.executable, "-c", _SETRLIMIT, str(cpu), str(mem), str(size)]
        return [*self.namespace, *limit, *argv]

    def text(self) -> str:
        return f"no network (a network namespace of its own), {self.limits.text()}, no credentials"

    def key(self) -> dict[str, Any]:
        """What the sandbox adds to a stored run's identity (limits can make runs fail)."""
        return {"network": False, "cpu_seconds": self.limits.cpu_seconds,
                "memory_mb": self.limits.memory_mb, "file_size_mb": self.limits.file_size_mb}


@functools.cache
def _prlimit() -> str | None:
    return shutil.which("prlimit")


def sandbox(limits: Limits, ways: Sequence[tuple[str, ...]] | None = None) -> Sandbox:
    """The sandbox for untrusted code; SandboxError when no network namespace can be made."""
    ways = NAMESPACES if ways is None else ways
    namespace = network_namespace(ways)
    if namespace is None:
        tried = "; ".join(" ".join(w[:-1]) for w in ways)
        raise SandboxError("refusing to build or run untrusted code: no network namespace can be made "
                           f"here (tried: {tried}), and it is never run with the network. Install "
                           "util-linux's unshare and allow user namespaces "
                           "(sysctl kernel.unprivileged_userns_clone=1), or run the bot as root")
    return Sandbox(namespace, limits)


@dataclass(frozen=True)
class ProcResult:
    argv: tuple[str, ...]
    returncode: int | None  # None when killed for the timeout
    stdout: str
    stderr: str
    seconds: float

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


def run(
    argv: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float,
    log: Path | None = None,
    pass_fds: Sequence[int] = (),
    sandbox: Sandbox | None = None,
) -> ProcResult:
    """Run argv (never through a shell) with a timeout that kills its whole process group.

    With `log`, stdout and stderr both go to that file (builds); otherwise both are captured.
    `pass_fds` are inherited by the child and its children (a build holds its directory's lock
    for as long as any of them runs, even orphaned). With `sandbox`, argv is untrusted code:
    started without network, under the sandbox's limits, and with no credential in `env`.
    """
    start = time.monotonic()
    child_env = dict(env) if env is not None else clean_env()
    command = list(argv)
    if sandbox is not None:
        child_env, command = _without_secrets(child_env), sandbox.wrap(argv)
    out_target = open(log, "ab") if log else subprocess.PIPE
    try:
        proc = subprocess.Popen(
            command,
            cwd=cwd,
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


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class Server:
    """A long-running child (llama-server) on 127.0.0.1, started once per commit and arm.

    Used as a context manager: waits until `health` answers 200, and always stops the whole
    process group on exit. Its output goes to `log`, a file, so it can never block on a pipe.
    """

    def __init__(self, argv: Sequence[str], *, port: int, health: str, startup_timeout: float,
                 env: Mapping[str, str], log: Path, cwd: Path | None = None):
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
            self.proc = subprocess.Popen(self.argv, cwd=self.cwd, env=dict(self.env),
                                         stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        self._recorded = children.record(self.proc.pid, self.argv)
        deadline = time.monotonic() + self.startup_timeout
        while True:
            if self.proc.poll() is not None:
                self.stop()
                raise ServerError(f"{Path(self.argv[0]).name} exited with {self.proc.returncode} "
                                  f"before {self.health} answered: {_tail_of(self.log)}")
            try:
                if localhttp.request(self.base_url + self.health, timeout=2).status == 200:
                    return self
            except localhttp.HttpFailure:
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise ServerError(f"{Path(self.argv[0]).name} not healthy at {self.base_url}"
                                  f"{self.health} after {self.startup_timeout:g} s: {_tail_of(self.log)}")
            time.sleep(0.1)

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


def exit_reason(result: ProcResult, limit: int = 200) -> str:
    """How a child ended badly, for people: its signal or exit status, and the first line of its
    stderr that names an error (the first is the cause; later lines are usually consequences)."""
    code = result.returncode
    if code is None:
        how = "timed out"
    elif code < 0:
        try:
            how = f"killed by {signal.Signals(-code).name}"
        except ValueError:
            how = f"killed by signal {-code}"
    else:
        how = f"exit status {code}"
    lines = [ln.strip() for ln in result.stderr.splitlines() if ln.strip()]
    first = next((ln for ln in lines if any(w in ln.lower() for w in ERROR_WORDS)), lines[-1] if lines else "")
    return f"{how}: {first}"[:limit] if first else how


def last_line(text: str, limit: int = 160) -> str:
    """The last non-blank line of a child's output, cut to `limit`: what an error message quotes."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return (lines[-1] if lines else "")[:limit]


def _tail_of(log: Path, limit: int = 200) -> str:
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return "no log"
    return last_line(text, limit) or "no output"
