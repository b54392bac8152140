"""The state directory: one process's claim on it (a lock), its layout and its database.

Why it is apart from `storage`: the directory is about files and processes — who may work
in it (one bisectbot process at a time; a second one is refused with a clear message), where
the clone, build directories, kept binaries, logs and the program's working directory go, and
which child process groups a killed bot left running (recorded in `procs/`, state.children).
What is remembered across runs is the database's business (`storage.Store`), opened here once
the lock is held.
"""

from __future__ import annotations

import errno
import fcntl
import os
import tempfile
from pathlib import Path

from bisectbot.errors import StateError
from bisectbot.state import children
from bisectbot.state.storage import Store, database_path


def _check_writable(root: Path) -> None:
    """StateError unless a file can be made in `root` (read-only mounts, another owner's directory)."""
    try:
        fd, name = tempfile.mkstemp(dir=root, prefix=".write-test-")
        os.close(fd)
        os.unlink(name)
    except OSError as exc:
        raise StateError(f"state directory {root} is not writable: {exc.strerror}") from None


class StateDir:
    """The state directory: its lock, its layout (clone, build dirs, kept binaries, logs) and
    its database. One process at a time: a second one is refused with a clear message.

    Taking the lock first kills the child process groups a killed bot left running (recorded
    in `procs/`, state.children); the children this process starts are recorded there."""

    def __init__(self, root: Path, *, reset: bool = False):
        """Take the directory (made if missing) and open its database; `reset`: see Store.

        Every way the directory cannot be used (a file in its place, not writable, its lock
        path a directory, a database that is not ours) is one StateError naming the path."""
        self.root = Path(root).resolve()  # relative paths would break cmake, which runs elsewhere
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise StateError(f"state directory {self.root} is a file, not a directory") from None
        except OSError as exc:
            raise StateError(f"cannot create state directory {self.root}: {exc.strerror}") from None
        lock = self.root / "lock"
        try:
            self._lock_file = open(lock, "a")
        except IsADirectoryError:
            raise StateError(f"state directory {self.root}: its lock file {lock} is a directory (remove it)") from None
        except OSError as exc:
            if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise StateError(
                    f"state directory {self.root} is not writable: {exc.strerror} (opening its lock file {lock})"
                ) from None
            raise StateError(f"state directory {self.root}: cannot open its lock file {lock}: {exc.strerror}") from None
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_file.close()
            raise StateError(f"state directory {self.root} is in use by another bisectbot process") from None
        except OSError as exc:
            self._lock_file.close()
            raise StateError(f"state directory {self.root}: cannot lock {lock}: {exc.strerror}") from None
        tracking = False
        try:
            _check_writable(self.root)
            try:
                children.kill_left_behind(self.procs_dir)
                children.track_in(self.procs_dir)
                tracking = True
            except OSError as exc:
                raise StateError(f"state directory {self.root}: cannot use {self.procs_dir}: {exc.strerror}") from None
            self.store = Store(database_path(self.root), reset=reset)
        except BaseException:
            if tracking:
                children.stop_tracking(self.procs_dir)
            self._lock_file.close()
            raise

    @property
    def procs_dir(self) -> Path:
        """One record per running child process group (state.children)."""
        return self.root / "procs"

    @property
    def clone_dir(self) -> Path:
        return self.root / "src"

    @property
    def run_dir(self) -> Path:
        """Where the program under test runs (its working directory)."""
        path = self.root / "run"
        path.mkdir(exist_ok=True)
        return path

    def build_dir(self, key: str) -> Path:
        return self.root / f"build-{key}"

    def kept_dir(self, build_key: str, sha: str) -> Path:
        return self.root / "kept" / build_key / sha

    def log_path(self, name: str) -> Path:
        (self.root / "logs").mkdir(exist_ok=True)
        return self.root / "logs" / name

    def close(self) -> None:
        children.stop_tracking(self.procs_dir)
        self.store.close()
        self._lock_file.close()

    def __enter__(self) -> "StateDir":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
