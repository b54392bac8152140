"""The state database as a file: made whole, checked to be ours and sound, moved aside.

Why it is apart from `storage.Store`: whether a file may be opened at all is decided before any
connection is kept, and only from the file itself. What it does:

* **Refused when it is not ours or damaged.** Empty, not SQLite, another program's tables, a
  newer schema or failing `PRAGMA quick_check` is :class:`Unusable`, naming the file and why;
  `Store` turns it into a StateError, or with `--reset-state` moves the file aside as
  `state.sqlite3.bak-<time>` (:func:`move_aside`, never deleted) and starts afresh.
* **Never an empty file of ours.** :func:`create` makes a new database under a temporary name
  and links it into place, so a crash or a full disk cannot leave an empty file behind.
"""

from __future__ import annotations

import errno
import os
import secrets
import sqlite3
import stat
import time
from pathlib import Path

from bisectbot.errors import StateError
from bisectbot.state.migrations import CORE_TABLES, SCHEMA_VERSION


class Unusable(Exception):
    """Why a database file cannot be used as it is: refused, or moved aside with --reset-state."""

    def __init__(self, text: str, hint: str = "pass --reset-state to start it afresh"):
        super().__init__(f"{text}; {hint}")


def create(path: Path) -> None:
    """A new, empty database, made under a temporary name and linked into place: a file at
    `path` is never one a crash or a full disk left empty (an empty file is refused)."""
    tmp: Path | None = None
    try:
        tmp = path.with_name(f".{path.name}.new-{os.getpid()}-{secrets.token_hex(4)}")
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666))  # umask applies
        con = sqlite3.connect(tmp, isolation_level=None)
        try:
            con.execute("PRAGMA journal_mode=WAL")  # written into the header: the file is not empty
        finally:
            con.close()
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process made it meanwhile: that one is used
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EOPNOTSUPP, errno.EXDEV):
                raise
            if not os.path.lexists(path):  # a file system without hard links
                os.rename(tmp, path)
    except (OSError, sqlite3.Error) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise StateError(f"cannot create the state database {path}: {why}") from None
    finally:
        if tmp is not None:
            for left in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
                try:
                    left.unlink(missing_ok=True)
                except OSError:
                    pass


def check(path: Path) -> None:
    """Unusable for a file that is not a bisectbot database, is damaged (`PRAGMA
    quick_check`) or is of a newer schema; StateError when it cannot be opened at all."""
    try:
        info = os.stat(path)
    except OSError as exc:
        raise StateError(f"cannot open the state database {path}: {exc.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file"
        raise Unusable(f"{path} is not a bisectbot database (it is {kind})")
    wal = Path(f"{path}-wal")
    if info.st_size == 0 and not (wal.is_file() and wal.stat().st_size > 0):
        raise Unusable(f"{path} is not a bisectbot database (it is empty: 0 bytes)")
    con: sqlite3.Connection | None = None
    try:
        con = sqlite3.connect(path, isolation_level=None, timeout=30)
        version = con.execute("PRAGMA user_version").fetchone()[0]
        tables = sorted(r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'"))
        if version > SCHEMA_VERSION:
            raise Unusable(
                f"{path}: written by a newer bisectbot (schema {version}; this one knows up to {SCHEMA_VERSION})",
                "use that bisectbot, or pass --reset-state to start it afresh",
            )
        if (tables or version) and not CORE_TABLES <= set(tables):
            shown = ", ".join(tables[:6]) + (", …" if len(tables) > 6 else "")
            what = f"its tables are {shown}" if tables else f"no tables, schema version {version}"
            raise Unusable(f"{path} is not a bisectbot database ({what})")
        problems = [str(r[0]) for r in con.execute("PRAGMA quick_check(3)")]
        if problems != ["ok"]:
            first = (problems[0].splitlines() or ["no answer"])[-1].strip() if problems else "no answer"
            raise Unusable(f"state database {path} is damaged (quick_check: {first})")
    except sqlite3.Error as exc:
        name = str(getattr(exc, "sqlite_errorname", ""))
        if name == "SQLITE_NOTADB":
            raise Unusable(f"{path} is not a bisectbot database (not an SQLite file: {exc})") from None
        if name.startswith("SQLITE_CORRUPT"):
            raise Unusable(f"state database {path} is damaged ({exc})") from None
        raise StateError(f"cannot open the state database {path}: {exc}") from None
    except UnicodeDecodeError as exc:
        raise Unusable(f"state database {path} is damaged (its schema does not decode: {exc})") from None
    finally:
        if con is not None:
            con.close()


def move_aside(path: Path) -> Path:
    """Rename the database (and its -wal and -shm) to `<name>.bak-<time>`; never deleted."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    aside = path.with_name(f"{path.name}.bak-{stamp}")
    n = 1
    while os.path.lexists(aside):
        aside, n = path.with_name(f"{path.name}.bak-{stamp}-{n}"), n + 1
    try:
        os.rename(path, aside)
        for suffix in ("-wal", "-shm"):
            if os.path.lexists(f"{path}{suffix}"):
                os.rename(f"{path}{suffix}", f"{aside}{suffix}")
    except OSError as exc:
        raise StateError(f"cannot move the state database {path} aside to {aside}: {exc.strerror}") from None
    return aside
