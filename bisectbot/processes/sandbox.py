"""The sandbox for untrusted code (a pull request's head): bubblewrap over a throwaway copy.

What a pull request's configure, build and runs can reach, and why each rule:

* **Only a throwaway box is writable.** The tree is exported without `.git` (`git archive`) into
  a fresh scratch directory outside the state directory; its build directory, kept binaries,
  working directory, `HOME` and `TMPDIR` live there too, and the box is deleted after the check.
  The box is bind-mounted at its own path, so paths mean the same inside and out.
* **Nothing of the bot is mounted.** The system (`/usr` and the `/lib*`, `/bin` links) and a
  short list of `/etc` files are mounted read-only; the state directory, the bot's clone, kept
  binaries, trusted build directories, ccache, the config and any key file are not there at all.
  `/tmp` is a small tmpfs of its own, `/proc` the sandbox's own (its PID namespace: no bot
  process can be seen or signalled), `/dev` a minimal one.
* **New namespaces for everything** (user, mount, PID, IPC, UTS, network, cgroup), an
  unprivileged uid (65534) inside, no nested user namespaces, `--die-with-parent` and
  `--new-session` (no terminal to inject into). When the bot runs as root, bubblewrap itself is
  started as uid 65534 (`setpriv`), so even the host sees no root process.
* **An allow-listed environment**: PATH, locale, HOME/TMPDIR inside the box, and what the
  config sets for builds and runs. Nothing else of the bot's environment passes.
* **Limits**: per process CPU time, address space and file size, and processes per uid
  (`prlimit`); the box's total size is watched while a step runs (`procs.run` stops the step
  once it passes `disk_mb`); output read back is capped (`output_mb`).

There is no weaker fallback: where bubblewrap (or user namespaces) is missing, `sandbox()`
raises SandboxError naming what is missing, and untrusted code is refused.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from bisectbot.errors import BisectbotError
from bisectbot.processes.boxfs import Box, remove_tree_unfollowed
from bisectbot.state import children
from bisectbot.state.statedir import StateDir

# The uid and gid untrusted code has, inside and (when the bot is root) outside: "nobody".
SANDBOX_ID = 65534
# The system, read-only; the /etc files a compiler, cmake and a dynamic loader need.
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC = (
    "/etc/alternatives",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/localtime",
)
# The only variables of the caller's environment that reach untrusted code (besides what the
# config sets: the build's and the run's own variables, always passed explicitly).
ALLOWED_ENV = ("LANG", "LC_ALL", "LC_CTYPE", "TZ", "SOURCE_DATE_EPOCH")
SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
# Variables the bot itself sets for builds and runs, passed when the caller's `env` has them.
EXPLICIT = frozenset({"CCACHE_DISABLE", "LD_LIBRARY_PATH", "OMP_NUM_THREADS"})
TMP_MB = 256  # the sandbox's /tmp (a tmpfs): builds and runs use TMPDIR in the box instead


class SandboxError(BisectbotError):
    """Untrusted code cannot be confined here (no bubblewrap, no user namespaces): refused."""

    exit_code = 4


@dataclass(frozen=True)
class Limits:
    """What untrusted code may use: per process (CPU, memory, file size), per uid (processes),
    in all (the box's disk, the output read back from one process)."""

    cpu_seconds: int
    memory_mb: int  # address space (RLIMIT_AS)
    file_size_mb: int  # largest file it may write (RLIMIT_FSIZE)
    processes: int = 1024  # processes and threads of its uid (RLIMIT_NPROC): a fork bomb stops there
    disk_mb: int = 8192  # the whole box: source, build directory, kept binaries, run files
    output_mb: int = 16  # what is read back of one process's stdout and stderr

    def text(self) -> str:
        return (
            f"CPU {self.cpu_seconds} s, memory {self.memory_mb} MB, files {self.file_size_mb} MB per process; "
            f"{self.processes} processes; disk {self.disk_mb} MB; output {self.output_mb} MB"
        )


@dataclass(frozen=True)
class Sandbox:
    """How `procs.run` starts untrusted code: bubblewrap with `box` the only writable path."""

    bwrap: str
    prlimit: str
    box: Path
    limits: Limits
    setpriv: str | None = None  # set when the bot is root: bubblewrap starts as SANDBOX_ID
    explicit: frozenset[str] = EXPLICIT  # variables of `env` passed besides ALLOWED_ENV
    python: str | None = None  # a system Python for the run driver (None: one sandbox per run)
    # the run drivers started in this sandbox, one per thread (procs.run starts and stops them)
    drivers: dict[int, Any] = field(default_factory=dict, compare=False, repr=False)

    def wrap(self, argv: Sequence[str], env: Mapping[str, str], cwd: Path | None) -> list[str]:
        """The argv that runs `argv` in the sandbox with exactly `env` as `environment` filters it."""
        lim = self.limits
        prefix: list[str] = []
        if self.setpriv is not None:
            prefix = [
                self.setpriv,
                f"--reuid={SANDBOX_ID}",
                f"--regid={SANDBOX_ID}",
                "--clear-groups",
                "--inh-caps=-all",
                "--bounding-set=-all",
                "--",
            ]
        prefix += [
            self.prlimit,
            f"--cpu={lim.cpu_seconds}",
            f"--as={lim.memory_mb << 20}",
            f"--fsize={lim.file_size_mb << 20}",
            f"--nproc={lim.processes}",
            "--",
        ]
        box = str(self.box)
        args = [
            self.bwrap,
            "--unshare-all",
            "--unshare-user",
            "--disable-userns",
            "--uid",
            str(SANDBOX_ID),
            "--gid",
            str(SANDBOX_ID),
            "--hostname",
            "sandbox",
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
        ]
        args += system_mounts()
        args += ["--proc", "/proc", "--dev", "/dev", "--size", str(TMP_MB << 20), "--tmpfs", "/tmp", "--bind", box, box]
        inside = cwd is not None and Path(cwd).is_relative_to(self.box)
        args += ["--chdir", str(cwd if inside else self.box), "--clearenv"]
        for key, value in sorted(self.environment(env).items()):
            args += ["--setenv", key, value]
        return [*prefix, *args, "--", *argv]

    def environment(self, env: Mapping[str, str]) -> dict[str, str]:
        """What untrusted code is given of `env`: the allow-list, PATH fixed, HOME and TMPDIR in
        the box; `env`'s entries the caller set on purpose (`explicit`) are passed too."""
        out = {k: env[k] for k in ALLOWED_ENV if k in env}
        out.update({k: v for k, v in env.items() if k in self.explicit})
        out.update(PATH=SAFE_PATH, HOME=str(self.box / "home"), TMPDIR=str(self.box / "tmp"))
        return out

    def hand_over(self, path: Path) -> None:
        """Make `path` (made by the bot inside the box) writable by the sandbox's uid: when the
        bot is root, the sandbox runs as SANDBOX_ID and needs to own what it writes into."""
        if self.setpriv is not None and Path(path).is_relative_to(self.box):
            os.lchown(path, SANDBOX_ID, SANDBOX_ID)

    def hand_over_tree(self, path: Path) -> None:
        """hand_over for `path` and everything under it (links not followed): the exported tree,
        which a build may write into as it may when the bot is not root."""
        if self.setpriv is None or not Path(path).is_relative_to(self.box):
            return
        for top, dirs, files in os.walk(path):
            for name in (top, *(os.path.join(top, n) for n in (*dirs, *files))):
                os.lchown(name, SANDBOX_ID, SANDBOX_ID)

    def disk_used(self) -> int:
        """Bytes the box takes on disk (symlinks not followed)."""
        return tree_bytes(self.box)

    def text(self) -> str:
        return (
            "bubblewrap: no network, a throwaway copy of the tree, nothing of the bot mounted, "
            f"uid {SANDBOX_ID}, {self.limits.text()}, no credentials"
        )

    def key(self) -> dict[str, Any]:
        """What the sandbox adds to a stored run's identity (limits can make runs fail)."""
        lim = self.limits
        return {
            "network": False,
            "cpu_seconds": lim.cpu_seconds,
            "memory_mb": lim.memory_mb,
            "file_size_mb": lim.file_size_mb,
            "processes": lim.processes,
        }


def with_explicit(sandbox: Sandbox, names: Iterable[str]) -> Sandbox:
    """The same sandbox, also passing `names` (the config's own run variables) through."""
    return replace(sandbox, explicit=sandbox.explicit | frozenset(names))


def system_mounts() -> list[str]:
    """Read-only binds of the system (merged-/usr links kept as links) and the /etc allow-list."""
    out: list[str] = []
    for path in SYSTEM:
        if os.path.islink(path):
            out += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            out += ["--ro-bind", path, path]
    for path in ETC:
        out += ["--ro-bind-try", path, path]
    return out


def tree_bytes(root: Path) -> int:
    """Disk blocks under `root`, in bytes; symlinks are counted, never followed."""
    total = 0
    stack = [str(root)]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += st.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        except OSError:
            continue
    return total


@functools.cache
def _probe(bwrap: str, prlimit: str, setpriv: str | None) -> str | None:
    """None if a trivial command runs in the sandbox here, else what went wrong (one line)."""
    box = Path(tempfile.mkdtemp(prefix="bisectbot-probe-"))
    try:
        sb = Sandbox(bwrap, prlimit, box, Limits(60, 1024, 16), setpriv)
        if setpriv is not None:
            os.chown(box, SANDBOX_ID, SANDBOX_ID)
        res = subprocess.run(
            sb.wrap(["true"], {}, box),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=60,
            env={"PATH": SAFE_PATH},
        )
        if res.returncode != 0:
            text = (res.stderr or res.stdout).decode("utf-8", "replace").strip().splitlines()
            return text[-1] if text else f"exit status {res.returncode}"
        return None
    except (OSError, subprocess.SubprocessError) as exc:
        return str(exc)
    finally:
        shutil.rmtree(box, ignore_errors=True)


def missing() -> str | None:
    """Why no sandbox can be made here (one line), or None when one can."""
    bwrap, prlimit = shutil.which("bwrap"), shutil.which("prlimit")
    if bwrap is None:
        return "bubblewrap (bwrap) is not installed (Debian: apt-get install bubblewrap)"
    if prlimit is None:
        return "prlimit is not installed (Debian: apt-get install util-linux)"
    setpriv = None
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            return "the bot runs as root and setpriv is missing to drop to an unprivileged uid (util-linux)"
    why = _probe(bwrap, prlimit, setpriv)
    if why is not None:
        return f"bubblewrap cannot make its namespaces here ({why}); allow unprivileged user namespaces"
    return None


def sandbox(limits: Limits, box: Path) -> Sandbox:
    """The sandbox for untrusted code writing only into `box`; SandboxError when none can be made."""
    why = missing()
    if why is not None:
        raise SandboxError(f"refusing to build or run untrusted code: no sandbox can be made here: {why}")
    bwrap, prlimit = shutil.which("bwrap"), shutil.which("prlimit")
    assert bwrap is not None and prlimit is not None
    if os.geteuid() == 0 and (closed := _closed_to_others(box)) is not None:
        raise SandboxError(
            f"refusing to build or run untrusted code: its box {box} is under {closed}, which uid "
            f"{SANDBOX_ID} cannot enter (set untrusted.scratch to a directory it can, e.g. /tmp)"
        )
    return Sandbox(
        bwrap,
        prlimit,
        box,
        limits,
        shutil.which("setpriv") if os.geteuid() == 0 else None,
        python=shutil.which("python3", path=SAFE_PATH),
    )


def _closed_to_others(path: Path) -> Path | None:
    """The first directory above `path` that others cannot enter (no o+x), or None."""
    for parent in reversed(path.parents):
        try:
            if not os.stat(parent).st_mode & 0o001:
                return parent
        except OSError:
            return parent
    return None


# -- the throwaway box ------------------------------------------------------------------------------
class Scratch:
    """A throwaway directory for one untrusted check: `bot` (the check's own database and logs,
    never mounted) and `box` (everything untrusted code may write). Removed on close."""

    def __init__(self, parent: Path | None = None):
        self.root = Path(tempfile.mkdtemp(prefix="bisectbot-untrusted-", dir=parent)).resolve()
        os.chmod(self.root, 0o711)  # the sandbox's uid passes through to the box, sees nothing else
        self.bot = self.root / "bot"
        self.box = self.root / "box"
        self.bot.mkdir(mode=0o700)
        self.box.mkdir(mode=0o755)
        for sub in ("home", "tmp", "run"):
            (self.box / sub).mkdir()

    def hand_over(self, sandbox: Sandbox) -> None:
        """The box and its first directories belong to the sandbox's uid (when the bot is root)."""
        for path in (self.box, self.box / "home", self.box / "tmp", self.box / "run"):
            sandbox.hand_over(path)

    def copy_in(self, name: str, root: Path | None, files: Iterable[Path] | None = None) -> Path:
        """Copies in the box's `inputs/<name>` of the regular files under `root` (all of them,
        or only `files`; links are never followed), for untrusted runs to read: the originals
        are the bot's and are not mounted."""
        dest = self.box / "inputs" / name
        dest.mkdir(parents=True, exist_ok=True)
        if root is None or not root.is_dir():
            return dest
        if files is None:
            files = [Path(top) / f for top, _dirs, names in os.walk(root) for f in names]
        for path in files:
            rel = path.relative_to(root) if path.is_relative_to(root) else None
            if rel is None or path.is_symlink() or not path.is_file():
                continue
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, dest / rel)
        return dest

    def close(self) -> None:
        # following no link the box holds, and unlocking the mode-000 directories it left
        remove_tree_unfollowed(self.root)

    def close_later(self) -> threading.Thread:
        """Remove the scratch in a thread of its own: a box of many files takes a while to
        delete, and the check's answer need not wait for it. Not a daemon: a process that
        ends waits for it, so no box outlives the bot's run."""
        thread = threading.Thread(target=self.close, name=f"remove {self.root.name}")
        thread.start()
        return thread

    def __enter__(self) -> "Scratch":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class BoxState(StateDir):
    """The state directory of one untrusted check: its database, logs and process records in
    the scratch's `bot` (never mounted), its clone (an export), build directories, kept binaries
    and run directory in the box. It records no child processes (the trusted state directory
    does: a sandbox dies with the bot anyway)."""

    def __init__(self, scratch: Scratch):
        super().__init__(scratch.bot)
        children.stop_tracking(self.procs_dir)
        self.box = scratch.box

    @property
    def fs(self) -> Box:
        """The box's paths, for the bot to touch without following links (processes.boxfs)."""
        return Box(self.box)

    @property
    def clone_dir(self) -> Path:
        return self.box / "src"

    @property
    def run_dir(self) -> Path:
        return self.box / "run"

    def build_dir(self, key: str) -> Path:
        return self.box / f"build-{key}"

    def kept_dir(self, build_key: str, sha: str) -> Path:
        return self.box / "kept" / build_key / sha
