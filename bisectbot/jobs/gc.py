"""gc: keep the state directory within its size caps (`bisectbot gc`, and after every bisect).

What can go: kept binaries (`kept/<build key>/<sha>/`), build directories (`build-<key>/`) and
logs (`logs/`), least recently used first (core.retention). What never goes: the database (its
builds, runs and verdicts are the results), the clone, and anything in use. The caller holds
the state directory's lock (StateDir), so no other bisectbot process works in it; a build
directory whose lock (state.dirlock) is still held, by a build a killed bot left running, is
skipped. A removed kept binary leaves its build record behind: `Builder.ensure` finds the binary
missing and builds the commit again, never runs a stale one. When a build directory goes, the
next build there starts with a fresh cmake configure.

"Last used" is a directory's mtime: the builder touches a kept binary's directory whenever a
stored build is reused and a build directory whenever it builds.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from bisectbot.config import Config
from bisectbot.errors import StateError
from bisectbot.jobs.retention import BINARIES, BUILD_DIR, LOG, Caps, Item, format_size, to_remove
from bisectbot.state import dirlock
from bisectbot.state.statedir import StateDir


def storage_caps(cfg: Config, *, keep_binaries: int | None = None, max_bytes: int | None = None) -> Caps:
    """The config's `storage:` caps, with command-line overrides."""
    s = cfg.storage
    mb = 1 << 20
    return Caps(
        max_binaries=keep_binaries if keep_binaries is not None else s.max_binaries,
        max_build_dirs=s.max_build_dirs,
        max_log_bytes=int(s.max_log_mb * mb) if s.max_log_mb is not None else None,
        max_bytes=max_bytes
        if max_bytes is not None
        else (int(s.max_size_mb * mb) if s.max_size_mb is not None else None),
    )


def _size(path: Path) -> int:
    """Bytes of a file or a whole tree (links not followed; what vanished meanwhile counts 0)."""
    try:
        if not path.is_dir() or path.is_symlink():
            return path.lstat().st_size
    except OSError:
        return 0
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _held(build_dir: Path) -> bool:
    """Whether a process holds the build directory's lock (a build still running)."""
    lock = dirlock.lock_path(build_dir)
    if not lock.exists():
        return False
    try:
        fd = os.open(lock, os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return True  # cannot tell: leave it
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def inventory(state: StateDir) -> list[Item]:
    """Everything gc may remove, with its size and when it was last used."""
    root = state.root
    items: list[Item] = []
    kept = root / "kept"
    if kept.is_dir():
        for key_dir in sorted(p for p in kept.iterdir() if p.is_dir()):
            for sha_dir in sorted(p for p in key_dir.iterdir() if p.is_dir()):
                items.append(Item(BINARIES, str(sha_dir.relative_to(root)), _size(sha_dir), _mtime(sha_dir)))
    for build_dir in sorted(root.glob("build-*")):
        if build_dir.is_dir() and not build_dir.name.endswith(".lock"):
            items.append(Item(BUILD_DIR, build_dir.name, _size(build_dir), _mtime(build_dir), _held(build_dir)))
    logs = root / "logs"
    if logs.is_dir():
        for log in sorted(p for p in logs.iterdir() if p.is_file()):
            items.append(Item(LOG, str(log.relative_to(root)), _size(log), _mtime(log)))
    return items


@dataclass(frozen=True)
class GcResult:
    """What gc removed (or, in a dry run, would remove), and the sizes before and after."""

    removed: tuple[Item, ...]
    before: int  # bytes of everything gc manages
    items: int  # how many there were
    dry_run: bool = False

    @property
    def freed(self) -> int:
        return sum(i.size for i in self.removed)

    def summary(self) -> str:
        """'removed 3 kept binaries, 1 build directory: freed 120.4 MB (212.0 MB → 91.6 MB)'."""
        verb = "would remove" if self.dry_run else "removed"
        if not self.removed:
            return (
                f"nothing to remove: {self.items} items (kept binaries, build directories, logs) take "
                f"{format_size(self.before)}, within the caps"
            )
        counts = []
        for kind, plural in ((BINARIES, "kept binaries"), (BUILD_DIR, "build directories"), (LOG, "logs")):
            n = sum(1 for i in self.removed if i.kind == kind)
            if n:
                counts.append(f"{n} {plural if n > 1 else kind}")
        freed = "would free" if self.dry_run else "freed"
        return (
            f"{verb} {', '.join(counts)}: {freed} {format_size(self.freed)} "
            f"({format_size(self.before)} → {format_size(self.before - self.freed)})"
        )


def collect(state: StateDir, caps: Caps, *, dry_run: bool = False) -> GcResult:
    """Remove what is over `caps`, least recently used first; with `dry_run`, only say what."""
    items = inventory(state)
    chosen = to_remove(items, caps)
    removed = chosen if dry_run else [i for i in chosen if _remove(state.root, i)]
    return GcResult(tuple(removed), sum(i.size for i in items), len(items), dry_run)


def _remove(root: Path, item: Item) -> bool:
    """Remove one item; False when it turned out to be in use (a build directory locked now)."""
    path = root / item.path
    try:
        if item.kind == BUILD_DIR:
            with _unless_held(path) as free:
                if not free:
                    return False
                shutil.rmtree(path)
        elif item.kind == BINARIES:
            shutil.rmtree(path)
            try:
                path.parent.rmdir()  # the build key's directory, once empty
            except OSError:
                pass
        else:
            path.unlink()
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise StateError(f"state directory {root}: cannot remove {path}: {exc.strerror or exc}") from None
    return True


@contextmanager
def _unless_held(build_dir: Path) -> Iterator[bool]:
    """Hold the build directory's lock while it is removed (False: someone else holds it)."""
    path = dirlock.lock_path(build_dir)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True
    finally:
        os.close(fd)


def describe(item: Item) -> str:
    """'kept binaries kept/5bd1…/7a8a… (1.2 MB, last used 2024-06-01 12:00)' for the gc listing."""
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(item.used)) if item.used else "never"
    return f"{item.kind} {item.path} ({format_size(item.size)}, last used {when})"
