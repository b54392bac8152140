"""sha256 of files, the one way: what a build's binaries, named fixtures and models are
identified by (stored builds and runs, reference caches, kept-binary checks)."""

from __future__ import annotations

import hashlib
import os
from functools import lru_cache
from pathlib import Path


def file_sha256(path: Path | str) -> str:
    """sha256 of a file's content, read in 1 MB pieces (binaries and models can be large)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


@lru_cache(maxsize=256)
def _remembered(path: str, _size: int, _mtime_ns: int) -> str:
    return file_sha256(path)  # size and mtime only key the cache


def content_hash(path: Path | str) -> str:
    """file_sha256, remembered while the file's size and mtime are unchanged (for keys asked
    often; a check that must not trust the file, e.g. a kept binary before reuse, reads it)."""
    st = os.stat(path)
    return _remembered(str(path), st.st_size, st.st_mtime_ns)


MAX_FIXTURE_FILES = 50


def fixture_hashes(directory: Path | None) -> dict[str, str]:
    """sha256 of each file under the fixtures directory (sorted; capped so huge trees stay cheap)."""
    if directory is None or not Path(directory).is_dir():
        return {}
    out: dict[str, str] = {}
    for path in sorted(p for p in Path(directory).rglob("*") if p.is_file())[:MAX_FIXTURE_FILES]:
        out[str(path.relative_to(directory))] = file_sha256(path)
    return out
