"""Retention (pure): which kept binaries, build directories and logs go when the state
directory is over its caps.

The state directory grows by a kept binary per tested commit (llama.cpp's are tens of MB with
their libraries), a build directory per set of cmake arguments (hundreds of MB) and a log per
build. None of it is evidence: results live in the database, and a removed binary is rebuilt
when a later bisect needs it again. So what goes is what was used least recently; what a
running build holds (`held`) is never chosen, but still counts against the caps.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Sequence

BINARIES, BUILD_DIR, LOG = "kept binaries", "build directory", "log"

_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?", re.IGNORECASE)
_FACTOR = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


@dataclass(frozen=True)
class Item:
    """One removable thing in the state directory: its kind, path (relative to the state
    directory), size in bytes, when it was last used (epoch seconds) and whether a running
    build holds it."""

    kind: str
    path: str
    size: int
    used: float
    held: bool = False


@dataclass(frozen=True)
class Caps:
    """Counts and sizes to keep within; None: no cap."""

    max_binaries: int | None = None
    max_build_dirs: int | None = None
    max_log_bytes: int | None = None
    max_bytes: int | None = None

    @property
    def any(self) -> bool:
        return any(v is not None for v in (self.max_binaries, self.max_build_dirs, self.max_log_bytes, self.max_bytes))


def to_remove(items: Sequence[Item], caps: Caps) -> list[Item]:
    """What to remove to get within `caps`, least recently used first (ties: by path).

    Per kind, the newest `max_binaries` kept binaries and `max_build_dirs` build directories
    stay, and the newest logs while they fit in `max_log_bytes`; then, while everything left is
    over `max_bytes`, the least recently used of the rest goes, whatever its kind. Held items
    stay whatever the caps say."""
    newest_first = sorted(items, key=lambda i: (-i.used, i.path))
    gone: set[Item] = set()
    for kind, cap in ((BINARIES, caps.max_binaries), (BUILD_DIR, caps.max_build_dirs)):
        if cap is not None:
            gone |= {i for i in [i for i in newest_first if i.kind == kind][cap:] if not i.held}
    if caps.max_log_bytes is not None:
        total = 0
        for item in (i for i in newest_first if i.kind == LOG):
            total += item.size
            if total > caps.max_log_bytes and not item.held:
                gone.add(item)
                total -= item.size
    if caps.max_bytes is not None:
        left = sum(i.size for i in items if i not in gone)
        for item in reversed(newest_first):
            if left <= caps.max_bytes:
                break
            if item not in gone and not item.held:
                gone.add(item)
                left -= item.size
    return sorted(gone, key=lambda i: (i.used, i.path))


def parse_size(text: str) -> int:
    """Bytes from '500M', '10G', '1.5GB', '2GiB', '800k' or plain bytes ('1048576'); powers of
    1024. ValueError naming the text otherwise."""
    m = _SIZE.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"{text!r} is not a size (e.g. 500M, 10G, 1.5GB or bytes)")
    return int(float(m.group(1)) * _FACTOR[m.group(2).lower()])


def format_size(n: float) -> str:
    """'0 B', '812 KB', '1.4 MB', '12.0 GB' (powers of 1024)."""
    for unit in ("B", "KB", "MB"):
        if abs(n) < 1024:
            return f"{n:.0f} {unit}" if unit != "MB" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"
