"""Untrusted code runs in the sandbox (edges.procs.Sandbox): no network, limits, no credentials.
Real processes, a real TCP server on the host's 127.0.0.1 that counts who reaches it."""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
from pathlib import Path
from typing import Iterator

import pytest

from bisectbot.edges import procs
from bisectbot.edges.procs import Limits, SandboxError, run, sandbox

LIMITS = Limits(cpu_seconds=600, memory_mb=4096, file_size_mb=64)
UNREACHABLE = 101  # ENETUNREACH: a new network namespace has only a loopback, and it is down


class Listener:
    """A TCP server on 127.0.0.1 that accepts and counts connections (and closes them)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.seen = threading.Condition()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.close()
            with self.seen:
                self.accepted += 1
                self.seen.notify_all()

    def wait_for(self, count: int, timeout: float = 30) -> int:
        """The count once it reached `count` (or the timeout passed): accepting runs on a thread."""
        with self.seen:
            self.seen.wait_for(lambda: self.accepted >= count, timeout=timeout)
            return self.accepted

    def close(self) -> None:
        self.sock.close()


@pytest.fixture(scope="module")
def listener() -> Iterator[Listener]:
    server = Listener()
    try:
        yield server
    finally:
        server.close()


def connect_argv(port: int) -> list[str]:
    return [sys.executable, "-c", f"import socket; socket.create_connection(('127.0.0.1', {port}), 5).close(); "
                                  "print('connected')"]


# -- the sandbox itself ------------------------------------------------------------------------------
def test_sandboxed_child_cannot_reach_the_hosts_loopback(listener: Listener) -> None:
    before = listener.accepted
    jailed = run(connect_argv(listener.port), timeout=60, sandbox=sandbox(LIMITS))
    assert jailed.returncode != 0 and "connected" not in jailed.stdout
    assert f"[Errno {UNREACHABLE}]" in jailed.stderr, jailed.stderr
    # the same command as trusted code connects: the listener can tell
    free = run(connect_argv(listener.port), timeout=60)
    assert free.returncode == 0 and "connected" in free.stdout, free.stderr
    assert listener.wait_for(before + 1) == before + 1


def test_sandbox_limits_file_size_memory_and_cpu(tmp_path: Path) -> None:
    tight = sandbox(Limits(cpu_seconds=1, memory_mb=256, file_size_mb=1))
    write = ["sh", "-c", f"head -c {3 << 20} /dev/zero > {tmp_path / 'big'}"]
    res = run(write, timeout=60, sandbox=tight)
    assert res.returncode != 0 and (tmp_path / "big").stat().st_size == 1 << 20
    assert run(write, timeout=60).returncode == 0 and (tmp_path / "big").stat().st_size == 3 << 20

    grab = [sys.executable, "-c", "x = bytearray(1 << 30); print(len(x))"]
    res = run(grab, timeout=60, sandbox=tight)
    assert res.returncode != 0 and "MemoryError" in res.stderr, res.stderr
    assert run(grab, timeout=60).returncode == 0

    spin = [sys.executable, "-c", "while True: pass"]
    res = run(spin, timeout=300, sandbox=tight)
    assert not res.timed_out and res.returncode is not None and res.returncode < 0  # SIGXCPU / SIGKILL


def test_limits_hold_without_prlimit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(procs, "_prlimit", lambda: None)  # the Python fallback sets them instead
    tight = sandbox(Limits(cpu_seconds=60, memory_mb=1024, file_size_mb=1))
    assert "prlimit" not in " ".join(tight.wrap(["true"]))
    res = run(["sh", "-c", f"head -c {3 << 20} /dev/zero > {tmp_path / 'big'}"], timeout=60, sandbox=tight)
    assert res.returncode != 0 and (tmp_path / "big").stat().st_size == 1 << 20


def test_sandboxed_child_sees_no_credentials() -> None:
    env = {"PATH": os.environ["PATH"], "GITHUB_TOKEN": "ghp_secret", "MY_API_KEY": "k", "KEEP": "1"}
    res = run([sys.executable, "-c", "import json, os; print(json.dumps(dict(os.environ)))"], env=env, timeout=60,
              sandbox=sandbox(LIMITS))
    seen = json.loads(res.stdout)
    assert seen.get("KEEP") == "1" and "GITHUB_TOKEN" not in seen and "MY_API_KEY" not in seen


def test_without_a_network_namespace_untrusted_code_is_refused() -> None:
    with pytest.raises(SandboxError, match="refusing to build or run untrusted code"):
        sandbox(LIMITS, ways=[("bisectbot-no-such-unshare", "--net", "--")])
