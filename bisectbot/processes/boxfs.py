"""The bot's own steps inside a box that untrusted code has written to, made without following
a single link.

After a pull request's configure or build ran, any path under the box may have been replaced by
a symbolic link to a directory of the host (`ln -s /root box/kept`): `mkdir(parents=True)`,
`shutil.copy2`, `unlink` or `chmod` on such a path would act on the host. Every step here walks
from the box's root, a directory the bot made and untrusted code cannot replace (its parent is
the bot's), one component at a time with ``O_NOFOLLOW | O_DIRECTORY``, and acts on the last
component through the directory's descriptor (``dir_fd``), so a link anywhere on the way is
refused, not followed, however the box changes meanwhile. A refusal says what was replaced.
"""

from __future__ import annotations

import errno
import fnmatch
import hashlib
import os
import shutil
import stat
from pathlib import Path, PurePosixPath

from bisectbot.errors import BisectbotError

__all__ = ["BoxRefused", "Box"]

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class BoxRefused(BisectbotError):
    """A path the bot was to use in the box is a link (or a file where a directory belongs)."""


class Box:
    """Paths under `root` (the box), touched without following links."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def rel(self, path: Path) -> PurePosixPath:
        """`path` relative to the box (BoxRefused for a path outside it or with `..`)."""
        try:
            rel = PurePosixPath(Path(os.path.abspath(path)).relative_to(os.path.abspath(self.root)))
        except ValueError:
            raise BoxRefused(f"refused: {path} is not in the box {self.root}") from None
        if ".." in rel.parts:
            raise BoxRefused(f"refused: {path} climbs out of the box")
        return rel

    # -- directories -------------------------------------------------------------------------
    def open_dir(self, path: Path, *, create: bool = False) -> int:
        """A descriptor of the directory `path` (made, with its parents, when `create`); the
        caller closes it. BoxRefused when a component is a link or not a directory; a missing
        one (without `create`) is FileNotFoundError."""
        fd = os.open(self.root, _DIR)
        walked = PurePosixPath()
        try:
            for part in self.rel(path).parts:
                walked /= part
                if create:
                    try:
                        os.mkdir(part, 0o755, dir_fd=fd)
                    except FileExistsError:
                        pass
                try:
                    child = os.open(part, _DIR, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise BoxRefused(self._replaced(fd, part, walked)) from None
                    raise
                os.close(fd)
                fd = child
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _replaced(self, fd: int, name: str, walked: PurePosixPath) -> str:
        try:
            what = "a link" if stat.S_ISLNK(os.lstat(name, dir_fd=fd).st_mode) else "a file"
        except OSError:
            what = "something else"
        return f"refused: the pull request replaced {walked} (in its box) with {what}"

    def remove(self, path: Path) -> None:
        """Remove `path` (a tree, a file or a link; a link itself, never what it names)."""
        rel = self.rel(path)
        if not rel.parts:
            raise BoxRefused("refused: the box itself is not removed this way")
        try:
            parent = self.open_dir(self.root / rel.parent)
        except FileNotFoundError:
            return
        try:
            st = os.lstat(rel.name, dir_fd=parent)
            if stat.S_ISDIR(st.st_mode):
                shutil.rmtree(rel.name, dir_fd=parent)  # descriptor-based: follows no link
            else:
                os.unlink(rel.name, dir_fd=parent)
        except FileNotFoundError:
            pass
        finally:
            os.close(parent)

    # -- files -------------------------------------------------------------------------------
    def open_file(self, path: Path) -> int | None:
        """A read descriptor of the regular file `path`, or None where it is missing, a link,
        or not a regular file (a build's binary that is a link is not kept)."""
        rel = self.rel(path)
        try:
            parent = self.open_dir(self.root / rel.parent)
        except (FileNotFoundError, BoxRefused):
            return None
        try:
            fd = os.open(rel.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=parent)
        except OSError:
            return None
        finally:
            os.close(parent)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            return None
        return fd

    def sha256(self, path: Path) -> str | None:
        """sha256 of the regular file `path` (None: missing, a link, not a regular file)."""
        fd = self.open_file(path)
        if fd is None:
            return None
        h = hashlib.sha256()
        with os.fdopen(fd, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        return h.hexdigest()

    def readlink(self, path: Path) -> str | None:
        """Where the link `path` points (None: missing, not a link, or a link on the way)."""
        rel = self.rel(path)
        try:
            parent = self.open_dir(self.root / rel.parent)
        except (FileNotFoundError, BoxRefused):
            return None
        try:
            return os.readlink(rel.name, dir_fd=parent)
        except OSError:
            return None
        finally:
            os.close(parent)

    def read_head(self, path: Path, limit: int) -> str | None:
        """At most `limit` bytes of the regular file `path`, as text (None: not a regular file)."""
        fd = self.open_file(path)
        if fd is None:
            return None
        with os.fdopen(fd, "rb") as f:
            return f.read(limit).decode(errors="replace")

    def copy(self, src: Path, dest_dir: Path, name: str | None = None) -> str | None:
        """Copy the regular file `src` into the directory `dest_dir` (both in the box, made as
        needed), keeping its mode and times; its sha256, or None where `src` is no regular file."""
        fd = self.open_file(src)
        if fd is None:
            return None
        out_dir = self.open_dir(dest_dir, create=True)
        target = name or Path(src).name
        h = hashlib.sha256()
        try:
            st = os.fstat(fd)
            try:
                os.unlink(target, dir_fd=out_dir)
            except FileNotFoundError:
                pass
            out = os.open(
                target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=out_dir
            )
            try:
                while chunk := os.read(fd, 1 << 20):
                    h.update(chunk)
                    os.write(out, chunk)
                os.fchmod(out, stat.S_IMODE(st.st_mode))
                os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns))
            finally:
                os.close(out)
        finally:
            os.close(fd)
            os.close(out_dir)
        return h.hexdigest()

    def glob(self, base: Path, pattern: str) -> list[Path]:
        """The regular files under `base` matching `pattern`, one directory level per component
        (`*`, `?`, `[…]` within a name; `**` is one level too), entering no link."""
        found: list[Path] = []
        parts = [p for p in PurePosixPath(pattern).parts if p not in ("", ".")]

        def walk(where: Path, rest: list[str]) -> None:
            try:
                fd = self.open_dir(where)
            except (FileNotFoundError, BoxRefused):
                return
            try:
                names = sorted(os.listdir(fd))
                for name in fnmatch.filter(names, rest[0]):
                    try:
                        mode = os.lstat(name, dir_fd=fd).st_mode
                    except OSError:
                        continue
                    if len(rest) == 1 and stat.S_ISREG(mode):
                        found.append(where / name)
                    elif len(rest) > 1 and stat.S_ISDIR(mode):
                        walk(where / name, rest[1:])
            finally:
                os.close(fd)

        if parts:
            walk(Path(base), parts)
        return found


def remove_tree_unfollowed(root: Path) -> None:
    """Remove `root` and all under it without following any link, making room in directories
    untrusted code left unreadable (mode 000): each is opened with ``O_NOFOLLOW`` and its mode
    set through the descriptor's /proc entry, so a link is never chmod-ed or entered. What
    cannot be removed even so is left (each path is retried once)."""
    tried: set[str] = set()

    def unlock(_func: object, path: str, _exc: object) -> None:
        if path in tried:
            return
        tried.add(path)
        for target in (os.path.dirname(path), path):
            try:
                fd = os.open(target, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:
                continue  # a link or a file: nothing to unlock
            try:
                os.chmod(f"/proc/self/fd/{fd}", 0o700)
            except OSError:
                pass
            finally:
                os.close(fd)
        try:
            if stat.S_ISDIR(os.lstat(path).st_mode):
                shutil.rmtree(path, onerror=unlock)
            else:
                os.unlink(path)
        except OSError:
            pass

    shutil.rmtree(root, onerror=unlock)
