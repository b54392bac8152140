"""Keys for stored things (builds, runs, references, jobs): a cut sha256 of their JSON, the one
way. A key's length is part of it: keys already stored keep theirs (12, 16 or 24 hex digits)."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def json_key(value: Any, length: int, *, sort_keys: bool = True, compact: bool = False) -> str:
    """The first `length` hex digits of the sha256 of `value` as JSON. `sort_keys=False` and
    `compact=True` (no spaces after separators) only where keys were stored that way already
    (changing either would orphan them: config digests are compact)."""
    separators = (",", ":") if compact else None
    return hashlib.sha256(json.dumps(value, sort_keys=sort_keys, separators=separators).encode()).hexdigest()[:length]
