"""What a build leaves that can be trusted: binaries kept per commit with their sha256, checked
before reuse, and build directories no untrusted hand wrote in since the last trusted build.

Why: a retest never rebuilds and a binary never runs against another commit's libraries, yet
nothing is reused that a trusted build did not leave. A kept binary is reused only if its sha256
is the one recorded when it was built (else it is rebuilt); a build directory is reused only if
no file in it is newer than the end of the last trusted build there (else it is wiped first); a
binary or kept file that is a link out of the build directory is not kept.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from bisectbot.config.sections import BuildConfig, BuildVariant
from bisectbot.errors import StateError
from bisectbot.processes.boxfs import Box, BoxRefused
from bisectbot.records.commits import BuildRecord
from bisectbot.state.files import file_sha256


def intact(rec: BuildRecord, box: Box | None = None) -> bool:
    """Whether every kept file of a build is there with the sha256 recorded when it was built
    (a build recorded without them, by an older bisectbot, is built again). In a `box`, each is
    read following no link."""
    if not rec.hashes or not set(rec.binaries.values()) <= set(rec.hashes):
        return False
    try:
        if box is not None:
            return all(box.sha256(Path(path)) == digest for path, digest in rec.hashes.items())
        return all(file_sha256(Path(path)) == digest for path, digest in rec.hashes.items())
    except (OSError, BoxRefused):
        return False


def touch(path: Path) -> None:
    """Mark a kept directory or build directory as just used (its mtime; gc reads it)."""
    try:
        os.utime(path)
    except OSError:
        pass  # gone, or not ours to touch: it only orders what gc removes first


def keep_binaries(
    cfg: BuildConfig, variant: BuildVariant, build_dir: Path, kept_dir: Path, box: Box | None = None
) -> tuple[dict[str, str], dict[str, str], str | None]:
    """Copy the binaries and keep-globs into `kept_dir`; return placeholder → kept path, kept
    path → sha256, and the name of a binary not found. Only regular files that are, or links
    that resolve to, files inside `build_dir` are kept: a build cannot make the bot copy (and
    later hand to a run) a file from elsewhere.

    A copy the state directory cannot take (a full disk, a read-only one) is no fault of the
    commit: StateError naming the file and the reason, the half-kept directory removed, nothing
    recorded (the build is not stored, so the next run builds it again).

    With `box` (untrusted code built there), nothing is followed at all: every path is walked
    from the box's root without following a link (processes.boxfs), a binary that is a link is not
    kept, and a directory on the way replaced by a link is BoxRefused."""
    if box is not None:
        return _keep_in_box(cfg, variant, build_dir, kept_dir, box)
    src: Path | None = None
    try:
        if kept_dir.exists():
            shutil.rmtree(kept_dir)
        kept_dir.mkdir(parents=True)
        found: dict[str, str] = {}
        hashes: dict[str, str] = {}
        root = build_dir.resolve()
        for name, candidates in variant.binaries.items():
            src = next((build_dir / c for c in candidates if _within(build_dir / c, root)), None)
            if src is None:
                return {}, {}, name
            dst = kept_dir / src.name
            shutil.copy2(src, dst)
            found[name] = str(dst)
            hashes[str(dst)] = file_sha256(dst)
        for pattern in cfg.keep:
            for src in build_dir.glob(pattern):
                if _within(src, root):
                    shutil.copy2(src, kept_dir / src.name)
                    hashes[str(kept_dir / src.name)] = file_sha256(kept_dir / src.name)
    except OSError as exc:
        shutil.rmtree(kept_dir, ignore_errors=True)
        what = f"the built {src.name}" if src is not None else "the built binaries"
        raise StateError(f"cannot keep {what} in {kept_dir}: {exc.strerror or exc}") from None
    return found, hashes, None


def _keep_in_box(
    cfg: BuildConfig, variant: BuildVariant, build_dir: Path, kept_dir: Path, box: Box
) -> tuple[dict[str, str], dict[str, str], str | None]:
    """keep_binaries for a build of untrusted code: in the box, following no link."""
    box.remove(kept_dir)
    found: dict[str, str] = {}
    hashes: dict[str, str] = {}
    try:
        for name, candidates in variant.binaries.items():
            for candidate in candidates:
                src = build_dir / candidate
                digest = box.copy(src, kept_dir)
                if digest is not None:
                    found[name] = str(kept_dir / src.name)
                    hashes[found[name]] = digest
                    break
            else:
                return {}, {}, name
        for pattern in cfg.keep:
            for src in box.glob(build_dir, pattern):
                if (digest := box.copy(src, kept_dir)) is not None:
                    hashes[str(kept_dir / src.name)] = digest
    except OSError as exc:
        box.remove(kept_dir)
        raise StateError(f"cannot keep the built binaries in {kept_dir}: {exc.strerror or exc}") from None
    return found, hashes, None


def _within(path: Path, root: Path) -> bool:
    """A regular file whose real path (links followed) is inside `root`."""
    real = path.resolve()
    return real.is_file() and real.is_relative_to(root)


def written_since(build_dir: Path, written: float | None) -> str | None:
    """Why `build_dir` may hold what no trusted build wrote: it was never recorded as written by
    one, or a file in it is newer than the end of the last one (None: reuse it)."""
    if not build_dir.exists():
        return None
    if written is None:
        return "no trusted build is recorded as its last writer"
    for top, _dirs, files in os.walk(build_dir):
        for name in files:
            try:
                mtime = os.lstat(os.path.join(top, name)).st_mtime
            except OSError:
                continue
            if mtime > written + 2:
                rel = os.path.relpath(os.path.join(top, name), build_dir)
                return f"{rel} is newer than the last trusted build there"
    return None
