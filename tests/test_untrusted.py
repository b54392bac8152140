"""Pull requests are untrusted code: `check --ref pull/<N>/head` and `/check ref=pull/<N>/head`
build and run them in the sandbox (processes.procs.Sandbox). Real git repositories, real cmake
builds, real processes, a real TCP server on the host's 127.0.0.1 that counts who reaches it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest

from bisectbot.bot.serve import watch
from bisectbot.building.builder import Builder
from bisectbot.building.workspace import Workspace
from bisectbot.config import load_config
from bisectbot.demo import DemoHistory, generate_demo
from bisectbot.events import Events
from bisectbot.processes import sandbox as sandboxes
from bisectbot.processes.procs import run, stop_drivers
from bisectbot.processes.sandbox import Limits, Sandbox, SandboxError, Scratch, sandbox
from bisectbot.state.statedir import StateDir

from conftest import TOOLCHAIN, needs, require
from ghserver import BOT_LOGIN, BOT_TOKEN, FULL_NAME, ISSUE, GitHubStandIn, gh_server  # noqa: F401
from test_bot import TOKEN_ENV, bot_comments, cli, commit_link, db_rows, open_bot, write_config

LIMITS = Limits(cpu_seconds=600, memory_mb=4096, file_size_mb=64)
REFUSED = 111  # ECONNREFUSED: the sandbox's network namespace has only its own loopback, where nobody listens
SYS_PY = "/usr/bin/python3"  # the system's Python: the sandbox mounts /usr and nothing else of ours


@contextmanager
def boxed(limits: Limits = LIMITS) -> Iterator[Sandbox]:
    """A sandbox over a throwaway box, as a pull request's check gets one (in the system's
    temporary directory, as by default: pytest's own is closed to the sandbox's uid), stopped
    with everything in it at the end, as a check's is."""
    with Scratch() as scratch:
        made = sandbox(limits, scratch.box)
        scratch.hand_over(made)
        try:
            yield made
        finally:
            stop_drivers(made)


@pytest.fixture
def box() -> Iterator[Sandbox]:
    with boxed() as made:
        yield made


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


def connect_argv(port: int, python: str = sys.executable) -> list[str]:
    return [
        python,
        "-c",
        f"import socket; socket.create_connection(('127.0.0.1', {port}), 5).close(); print('connected')",
    ]


# -- the sandbox itself ------------------------------------------------------------------------------
@needs("bwrap", "prlimit")
def test_sandboxed_child_cannot_reach_the_hosts_loopback(listener: Listener, box: Sandbox) -> None:
    before = listener.accepted
    jailed = run(connect_argv(listener.port, SYS_PY), timeout=60, sandbox=box)
    assert jailed.returncode != 0 and "connected" not in jailed.stdout
    assert f"[Errno {REFUSED}]" in jailed.stderr, jailed.stderr
    assert listener.accepted == before
    # the same command as trusted code connects: the listener can tell
    free = run(connect_argv(listener.port, SYS_PY), timeout=60)
    assert free.returncode == 0 and "connected" in free.stdout, free.stderr
    assert listener.wait_for(before + 1) == before + 1


@needs("bwrap", "prlimit")
def test_sandbox_limits_file_size_memory_and_cpu() -> None:
    with boxed(Limits(cpu_seconds=1, memory_mb=256, file_size_mb=1)) as tight:
        big = tight.box / "tmp" / "big"
        write = ["sh", "-c", f"head -c {3 << 20} /dev/zero > {big}"]
        res = run(write, timeout=60, sandbox=tight)
        assert res.returncode != 0 and big.stat().st_size == 1 << 20
        assert run(write, timeout=60).returncode == 0 and big.stat().st_size == 3 << 20

        grab = [SYS_PY, "-c", "x = bytearray(1 << 30); print(len(x))"]
        res = run(grab, timeout=60, sandbox=tight)
        assert res.returncode != 0 and "MemoryError" in res.stderr, res.stderr
        assert run(grab, timeout=60).returncode == 0

        spin = [SYS_PY, "-c", "while True: pass"]
        res = run(spin, timeout=300, sandbox=tight)
        assert not res.timed_out and res.returncode is not None and res.returncode != 0  # SIGXCPU / SIGKILL


@needs("bwrap", "prlimit")
def test_sandboxed_child_sees_an_allow_listed_environment(box: Sandbox) -> None:
    """Row 11: only the allow-list and what the bot sets on purpose pass; HOME is in the box."""
    env = {
        "PATH": os.environ["PATH"],
        "GITHUB_TOKEN": "ghp_secret",
        "MY_API_KEY": "k",
        "AWS_ACCESS_KEY_ID": "AKIA",
        "DATABASE_URL": "postgres://u:p@db/x",
        "HF_HOME": "/hf",
        "SSH_AUTH_SOCK": "/run/agent",
        "HOME": "/root",
        "LANG": "C.UTF-8",
        "LD_LIBRARY_PATH": "/kept",
    }
    res = run([SYS_PY, "-c", "import json, os; print(json.dumps(dict(os.environ)))"], env=env, timeout=60, sandbox=box)
    seen = json.loads(res.stdout)
    assert set(seen) <= {"PATH", "HOME", "TMPDIR", "LANG", "LD_LIBRARY_PATH", "PWD", "LC_CTYPE"}, seen
    assert seen["LANG"] == "C.UTF-8" and seen["LD_LIBRARY_PATH"] == "/kept"
    assert seen["HOME"].startswith(str(box.box)) and seen["PATH"] == sandboxes.SAFE_PATH


@needs("bwrap", "prlimit")
def test_sandbox_sees_none_of_the_bots_files_and_runs_unprivileged(box: Sandbox, tmp_path: Path) -> None:
    """Nothing but the system (read-only) and the box is mounted; the uid is 65534 inside and,
    when the bot is root, outside too; the bot's processes cannot be seen."""
    secret = tmp_path / "key.pem"
    secret.write_text("-----BEGIN PRIVATE KEY-----\nsecret\n")
    secret.chmod(0o600)
    probe = (
        f"cat {secret}; ls {tmp_path}; ls {Path.home()}; touch /usr/x; "
        f"cat /proc/{os.getpid()}/environ; id -u; touch {box.box}/home/mine"
    )
    res = run(["sh", "-c", probe], timeout=60, sandbox=box)
    assert "secret" not in res.stdout and res.stdout.split() == ["65534"], res.stdout
    for what in (str(secret), str(tmp_path), "/usr/x", f"/proc/{os.getpid()}/environ"):
        assert what in res.stderr, (what, res.stderr)
    assert (box.box / "home" / "mine").stat().st_uid == (65534 if os.geteuid() == 0 else os.geteuid())


def test_without_bubblewrap_untrusted_code_is_refused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap, no prlimit: refused, never a weaker sandbox
    with pytest.raises(
        SandboxError,
        match="refusing to build or run untrusted code: no sandbox can be made here: "
        r"bubblewrap \(bwrap\) is not installed",
    ):
        sandbox(LIMITS, tmp_path)


# -- pull request heads: a demo history with two pull requests whose cmake configure phones home ----
@dataclass(frozen=True)
class PullDemo:
    demo: DemoHistory
    fixed: str  # pull/7/head: the good commit plus the probe (restores the reference)
    broken: str  # pull/8/head: main (the defect) plus the probe


def _git(repo: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CONFIG_NOSYSTEM="1",
        GIT_AUTHOR_NAME="Pat Contributor",
        GIT_AUTHOR_EMAIL="pat@example.com",
        GIT_COMMITTER_NAME="Pat Contributor",
        GIT_COMMITTER_EMAIL="pat@example.com",
    )
    return subprocess.run(
        ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env
    ).stdout.strip()


PROBE = """
# a pull request's build that tries to reach the network (a test's server on the host)
execute_process(COMMAND "{python}" -c "import socket; socket.create_connection(('127.0.0.1', {port}), 5).close(); print('connected')"
                RESULT_VARIABLE NET_RESULT OUTPUT_VARIABLE NET_OUT ERROR_VARIABLE NET_ERR)
message(STATUS "network probe: result=${{NET_RESULT}} ${{NET_OUT}} ${{NET_ERR}}")
# and writes into its own source tree, as some builds do (the export is the sandbox's to write)
file(WRITE "${{CMAKE_SOURCE_DIR}}/configured.txt" "ok")
"""


def _pull_request(repo: Path, base: str, number: int, port: int) -> str:
    """A commit on `base` whose CMakeLists.txt connects to `port`, published only as refs/pull/<N>/head."""
    _git(repo, "checkout", "-q", "--detach", base)
    cmake = repo / "CMakeLists.txt"
    cmake.write_text(cmake.read_text() + PROBE.format(python=SYS_PY, port=port))
    _git(repo, "commit", "-qam", f"build: fetch the vocabulary at configure time (#{number})")
    sha = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "-q", "main")
    _git(repo, "update-ref", f"refs/pull/{number}/head", sha)
    return sha


@pytest.fixture(scope="module")
def pulls(tmp_path_factory: pytest.TempPathFactory, listener: Listener) -> PullDemo:
    require(*TOOLCHAIN)
    demo = generate_demo(tmp_path_factory.mktemp("pr-demo"), n_commits=6, culprit_index=3, break_index=1, seed=1)
    fixed = _pull_request(demo.repo, demo.good, 7, listener.port)
    broken = _pull_request(demo.repo, demo.bad, 8, listener.port)
    return PullDemo(demo, fixed, broken)


@pytest.mark.heavy  # whole bisects or long simulations, 4 s or more: after the default suite (README: Tests)
@needs("bwrap", "prlimit")
def test_check_pull_request_head_without_network(
    gh_server: GitHubStandIn, pulls: PullDemo, listener: Listener, tmp_path: Path
) -> None:
    config = write_config(tmp_path, pulls.demo, gh_server, token_env="GITHUB_TOKEN")
    before = listener.accepted
    boxes = set(Path(tempfile.gettempdir()).glob("bisectbot-untrusted-*"))
    state = tmp_path / "st"
    secrets = {"GITHUB_TOKEN": BOT_TOKEN, TOKEN_ENV: BOT_TOKEN}
    proc = cli("check", str(config), "--ref", "pull/7/head", "--issue", str(ISSUE), "--state", str(state), env=secrets)
    assert proc.returncode == 0, proc.stdout + proc.stderr  # GOOD: the pull request restores the reference
    assert f"pull/7/head = {pulls.fixed[:12]} (built and run in the sandbox: bubblewrap: no network" in proc.stdout
    # its configure tried to reach the host's server and could not; nothing of it is left behind
    assert listener.accepted == before
    assert not list(state.glob("build-*")) and not list(state.glob("kept/*")) and not list(state.glob("logs/build-*"))
    assert set(Path(tempfile.gettempdir()).glob("bisectbot-untrusted-*")) <= boxes  # its box is gone

    # posted on the issue, in a comment of its own; not the last known good commit, nothing bisected
    bodies = bot_comments(gh_server)
    assert len(bodies) == 1, bodies
    head = bodies[0].splitlines()[1]
    assert f"pull/7/head = [`{pulls.fixed[:12]}`]({commit_link(gh_server, pulls.fixed)})" in head
    assert "restores the reference distribution" in head and "in the sandbox: bubblewrap: no network" in bodies[0]
    assert db_rows(state, "SELECT COUNT(*) FROM last_good")[0][0] == 0
    assert db_rows(state, "SELECT kind, status FROM jobs") == [("test", "done")]

    # the same build as trusted code reaches the server: the test can tell a sandbox from none
    cfg = load_config(config)
    with StateDir(tmp_path / "trusted") as trusted:
        ws = Workspace(cfg.repo_source, trusted.clone_dir)
        ws.fetch_pull(7)
        rec = Builder(trusted, ws, Events()).ensure(pulls.fixed, cfg.build)
    assert rec.ok, rec.reason
    assert listener.wait_for(before + 1) > before


def test_pull_request_heads_are_not_tested_as_trusted_code(pulls: PullDemo, tmp_path: Path) -> None:
    for args in (
        ["test", str(pulls.demo.config), "--commit", "pull/7/head"],
        ["bisect", str(pulls.demo.config), "--good", pulls.demo.good, "--bad", "pull/7/head"],
    ):
        proc = cli(*args, "--state", str(tmp_path / "st"))
        assert proc.returncode == 2 and "--ref pull/7/head" in proc.stderr, proc.stderr
    assert not list((tmp_path / "st").glob("build-*"))


def test_a_pull_requests_commit_named_by_its_sha_is_refused(pulls: PullDemo, tmp_path: Path) -> None:
    """GitHub serves a pull request's commit to anyone who names its sha: reachable from no
    branch or tag, it is refused as trusted code, with the way to check it in the sandbox."""
    for sha in (pulls.fixed, pulls.fixed[:12]):
        proc = cli("test", str(pulls.demo.config), "--commit", sha, "--state", str(tmp_path / "st"))
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "on no branch or tag" in proc.stderr and "pull/<N>/head" in proc.stderr, proc.stderr
        assert len([ln for ln in proc.stderr.splitlines() if "error" in ln]) == 1, proc.stderr  # one line
    assert not list((tmp_path / "st").rglob("build-*"))
    # the same commit once published on a tag is trusted code like any other
    tagged = tmp_path / "tagged"
    _git(pulls.demo.repo, "clone", "-q", str(pulls.demo.repo), str(tagged))
    _git(tagged, "fetch", "-q", "origin", "refs/pull/7/head:refs/tags/pr7")
    ws = Workspace(str(tagged), tmp_path / "clone")
    assert ws.resolve(pulls.fixed) == pulls.fixed


@needs("bwrap", "prlimit")
def test_bot_check_of_a_pull_request_and_an_outsiders(
    gh_server: GitHubStandIn, pulls: PullDemo, listener: Listener, tmp_path: Path
) -> None:
    config = write_config(tmp_path, pulls.demo, gh_server)
    before = listener.accepted
    outsider = gh_server.add_comment(FULL_NAME, ISSUE, "stranger", "/check ref=pull/7/head")
    member = gh_server.add_comment(FULL_NAME, ISSUE, "maintainer", "/check ref=pull/8/head")
    state = tmp_path / "st"
    with open_bot(config, state) as bot:
        watch(bot, ISSUE, once=True, interval=1)
    bodies = bot_comments(gh_server)
    refusals = [b for b in bodies if f"reply=reply-{outsider}" in b]
    assert len(refusals) == 1 and "only repository owners, members and collaborators" in refusals[0]
    assert not gh_server.comments[outsider].reactions and "eyes" in gh_server.comments[member].reactions
    results = [b for b in bodies if "pull/8/head = " in b]
    assert len(results) == 1 and len(bodies) == 2, bodies
    assert f"pull/8/head = [`{pulls.broken[:12]}`]" in results[0]
    assert "does not restore the reference distribution" in results[0].splitlines()[1]
    assert f"<!-- bisectbot:job=test-{pulls.broken[:12]}-" in results[0] and "-pull8 -->" in results[0]
    assert not any("check-status" in b or "no longer holds" in b for b in bodies)  # no alarm, no bisect
    assert db_rows(state, "SELECT kind FROM jobs") == [("test",)]
    assert sorted(db_rows(state, "SELECT status FROM bot_commands")) == [("done",), ("refused",)]
    assert listener.accepted == before


def test_bot_refuses_a_pull_request_where_no_sandbox_can_be_made(
    gh_server: GitHubStandIn, pulls: PullDemo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sandboxes, "missing", lambda: "bubblewrap (bwrap) is not installed")
    config = write_config(tmp_path, pulls.demo, gh_server)
    gh_server.add_comment(FULL_NAME, ISSUE, "maintainer", "/check ref=pull/7/head")
    state = tmp_path / "st"
    with open_bot(config, state) as bot:
        watch(bot, ISSUE, once=True, interval=1)
    (reply,) = bot_comments(gh_server)
    assert "refusing to build or run untrusted code: no sandbox can be made here: bubblewrap" in reply
    assert len(reply.splitlines()) == 2  # marker + one line
    assert not list(state.glob("build-*")) and not list(state.glob("kept/*"))
    assert db_rows(state, "SELECT status FROM bot_commands") == [("failed",)]
    # and the command line: exit 4 (cannot be built or run), one line, nothing fetched or built
    from click.testing import CliRunner

    from bisectbot.cli import main

    cli_state = tmp_path / "cli-st"
    res = CliRunner().invoke(main, ["check", str(pulls.demo.config), "--ref", "pull/7/head", "--state", str(cli_state)])
    assert res.exit_code == 4, res.output
    assert "refusing to build or run untrusted code" in res.output
    assert not (cli_state / "src").exists() and not list(cli_state.glob("build-*"))


# -- what a pull request's processes cannot exhaust ----------------------------------------------------
def _running_as(uid: int) -> list[str]:
    """Processes of `uid` that still run (a zombie is not: it waits for a reaper, holding nothing)."""
    out = subprocess.run(["ps", "-o", "stat=,pid=,args=", "-u", str(uid)], capture_output=True, text=True).stdout
    return [ln for ln in out.splitlines() if ln.strip() and not ln.strip().startswith("Z")]


@needs("bwrap", "prlimit")
def test_a_run_printing_gigabytes_is_stopped_at_the_output_cap() -> None:
    with boxed(Limits(cpu_seconds=60, memory_mb=1024, file_size_mb=16, output_mb=4)) as small:
        res = run(["sh", "-c", "yes 0123456789abcdef"], timeout=120, sandbox=small)  # unbounded, fast
    assert res.stopped == "stopped: its output passed 4 MB" and res.returncode is None
    assert len(res.stdout) == 4 << 20 and res.seconds < 60


@pytest.mark.heavy  # a pull request exhausting its processes: 8 s (README: Tests)
@needs("bwrap", "prlimit", "ps")
def test_a_fork_bomb_hits_the_process_limit_and_dies_with_its_sandbox() -> None:
    with boxed(Limits(cpu_seconds=60, memory_mb=1024, file_size_mb=16, processes=64)) as few:
        # the shell then waits (exec: no fork needed) until the deadline: a run that exits by
        # itself is judged by its own status now (what it leaves running is killed either way)
        bomb = "b() { b | b & }; b; sleep 2; echo still-here; ps -e | wc -l; exec sleep 100"
        res = run(["bash", "-c", bomb], timeout=8, sandbox=few)
        stop_drivers(few)  # the check is over: its sandboxes go, with everything in them
    # the limit stops the forks (bash says so), and the run ends failed; its sandbox went with it
    assert "fork" in res.stderr.lower() or "resource temporarily unavailable" in res.stderr.lower(), res
    assert res.returncode != 0, res
    if os.geteuid() == 0:  # the sandbox's uid is 65534 on the host too: none of its processes is left
        for _ in range(50):
            left = _running_as(65534)
            if not left:
                break
            time.sleep(0.1)
        assert left == [], left


@needs("bwrap", "prlimit")
def test_filling_the_disk_is_stopped_at_the_box_cap() -> None:
    with boxed(Limits(cpu_seconds=60, memory_mb=1024, file_size_mb=32, disk_mb=64)) as tight:
        fill = f"i=0; while true; do head -c 8000000 /dev/zero > {tight.box}/tmp/f$i || true; i=$((i+1)); done"
        res = run(["sh", "-c", fill], timeout=120, sandbox=tight)
        used = tight.disk_used()
    assert res.stopped == "stopped: its files passed 64 MB on disk", res
    # it can overshoot by what it writes in a quarter of a second, no more
    assert used < (64 << 20) + (1 << 30), used
    assert res.seconds < 60


@needs("bwrap", "prlimit")
def test_symlinks_in_the_box_lead_nowhere_outside(tmp_path: Path) -> None:
    """A link the sandbox makes to a file of the bot's resolves to nothing inside it; the box's
    size is counted without following it; and removing the box leaves the target alone."""
    secret = Path(tempfile.gettempdir()) / f"bisectbot-test-secret-{os.getpid()}"
    secret.write_text("secret")
    try:
        with boxed() as made:
            res = run(
                [
                    "sh",
                    "-c",
                    f"ln -s {secret} {made.box}/tmp/s; ln -s / {made.box}/tmp/root; "
                    f"cat {made.box}/tmp/s; ls {made.box}/tmp/root/tmp",
                ],
                timeout=60,
                sandbox=made,
            )
            assert "secret" not in res.stdout and "No such file" in res.stderr, res
            assert made.disk_used() < 1 << 20
        assert secret.read_text() == "secret"
    finally:
        secret.unlink()


@needs("bwrap", "prlimit")
def test_runs_share_a_driver_and_without_a_system_python_each_gets_a_sandbox(box: Sandbox) -> None:
    """Runs go through one driver per thread (a sandbox set up once per check); where no system
    Python is there to drive them, each run gets a bubblewrap of its own, with the same caps."""
    import dataclasses

    argv = ["sh", "-c", "echo $$; id -u; echo oops >&2; exit 3"]
    first, second = (run(argv, timeout=60, sandbox=box) for _ in range(2))
    assert len(box.drivers) == 1
    alone = dataclasses.replace(box, python=None, drivers={})
    third = run(argv, timeout=60, sandbox=alone)
    for res in (first, second, third):
        assert res.returncode == 3 and res.stdout.split()[1] == "65534" and res.stderr == "oops\n", res
    assert not alone.drivers
    big = dataclasses.replace(alone, limits=dataclasses.replace(box.limits, output_mb=1))
    res = run(["sh", "-c", "yes"], timeout=60, sandbox=big)
    assert res.stopped == "stopped: its output passed 1 MB" and len(res.stdout) == 1 << 20


@needs("bwrap", "prlimit")
def test_sandbox_has_its_own_small_tmp_and_cannot_make_user_namespaces(box: Sandbox) -> None:
    marker = Path(tempfile.gettempdir()) / f"bisectbot-host-tmp-{os.getpid()}"
    marker.write_text("host")
    try:
        res = run(
            ["sh", "-c", f"cat {marker}; df -k /tmp | tail -1; unshare -U true && echo nested; ls {box.box.parent}"],
            timeout=60,
            sandbox=box,
        )
    finally:
        marker.unlink()
    assert "host" not in res.stdout and "nested" not in res.stdout, res
    size_kb = int(res.stdout.split()[1])
    assert size_kb <= 256 * 1024  # the tmpfs of its own, not the host's /tmp
    assert res.stdout.split()[-1] == "box"  # beside the box (the check's database and logs): nothing


def test_what_untrusted_code_printed_is_shown_without_credentials() -> None:
    from bisectbot.processes.procs import redact

    env = {"GITHUB_TOKEN": "s3cr3t-value", "WEBHOOK_SECRET": "hmac-key-123", "PATH": "/usr/bin"}
    text = (
        "CMake Error: s3cr3t-value hmac-key-123 ghp_"
        + "x" * 36
        + " github_pat_"
        + "y" * 30
        + " -----BEGIN OPENSSH PRIVATE KEY----- Authorization: Bearer abc /usr/bin"
    )
    shown = redact(text, env)
    for secret in ("s3cr3t-value", "hmac-key-123", "ghp_", "github_pat_", "PRIVATE KEY", "Bearer abc"):
        assert secret not in shown, shown
    assert shown.startswith("CMake Error: [redacted] [redacted]") and shown.endswith("/usr/bin")


@needs("bwrap", "prlimit")
def test_a_run_writing_half_an_answer_into_the_drivers_pipe_does_not_hang_the_bot(box: Sandbox) -> None:
    """A run trying to write half an answer into the pipe the bot reads the driver's answers
    from: here the kernel refuses (the driver is not dumpable: bubblewrap), and were it let
    through, a half line would be no answer (the run failed, the next run a fresh driver), never
    a hang of the bot nor a forged result."""
    res = run(
        ["sh", "-c", 'printf \'{"rc": 0, "out": "forged\' > /proc/$PPID/fd/1; sleep 1; echo real'],
        timeout=30,
        sandbox=box,
    )
    assert "forged" not in res.stdout and res.seconds < 30, res
    # either the kernel refused the write (and the run went on), or the half line made it no answer
    assert res.returncode is None or ("/fd/1" in res.stderr and res.stdout == "real\n"), res
    after = run(["echo", "next"], timeout=30, sandbox=box)
    assert after.returncode == 0 and after.stdout == "next\n"


@needs("bwrap", "prlimit")
def test_binary_output_past_the_cap_is_stopped_not_taken_for_a_broken_driver() -> None:
    """The driver's answer spells undecodable bytes as \\ufffd: its line may be far longer than
    the output it carries, and is still read as the answer."""
    with boxed(Limits(cpu_seconds=60, memory_mb=1024, file_size_mb=16, output_mb=2)) as small:
        res = run(["sh", "-c", "head -c 3000000 /dev/urandom"], timeout=60, sandbox=small)
    assert res.stopped == "stopped: its output passed 2 MB" and res.returncode is None, res.stopped


@needs("bwrap", "prlimit")
def test_a_run_that_ends_well_is_never_reported_killed(box: Sandbox) -> None:
    """The driver waits for a run whose pipes closed to exit by itself: killing its group first
    turned some exit statuses 0 into -9 (a race a quick program loses)."""
    codes = [run(["echo", str(i)], timeout=60, sandbox=box).returncode for i in range(150)]
    assert codes == [0] * 150, sorted(set(codes))
