"""Generated histories with two staged defects, built for real with cmake: a small C program
draws one outcome per seed from a probability table; a first defect moves the table by total
variation 0.15 (the hardest direction), a later one makes it gross; optionally 2% of seeds print a
stray outcome on every commit. Between them: commits that change a compiled file (a comment in
`src/util.c`) and docs-only commits, which the compile-input rule skips as equivalent — the
first defect's parent is one of them in about half of the histories.

The issue this answers (#20): a quick step calls the first defect's commit "unlike the broken
end", the search ends at the gross commit, and only a test against the reference on fresh seeds
can send it back. `write_staged(dest, seed)` makes one history; `config` its bisectbot config.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from bench.choice import Step, write_choice_history
from bench.simulate import hardest_tv_shift

LETTERS = "abc"
REFERENCE = (0.35, 0.45, 0.20)
MILD = tuple(round(x, 6) for x in hardest_tv_shift(REFERENCE, 0.15))
GROSS = (1.0, 0.0, 0.0)
STRAY = 0.02


@dataclass(frozen=True)
class Staged:
    repo: Path
    commits: tuple[str, ...]
    kinds: tuple[str, ...]  # first | src | docs | mild | gross, one per commit

    @property
    def mild(self) -> str:
        """The first departure from the reference: the commit of the TV 0.15 defect."""
        return self.commits[self.kinds.index("mild")]

    @property
    def gross(self) -> str:
        return self.commits[self.kinds.index("gross")]

    @property
    def parent_skipped(self) -> bool:
        """The first defect's parent is a docs-only commit (skipped as equivalent)."""
        return self.kinds[self.kinds.index("mild") - 1] == "docs"


def plan(seed: int, n: int = 24) -> list[str]:
    """The kinds of the n commits of history `seed`: the two defects at random places, each
    other commit docs-only with probability 0.55 (llama.cpp's share)."""
    rnd = random.Random(seed)
    mild = rnd.randrange(2, n - 6)
    gross = rnd.randrange(mild + 2, n - 1)
    kinds = ["first"]
    for i in range(1, n):
        kinds.append("mild" if i == mild else "gross" if i == gross else "docs" if rnd.random() < 0.55 else "src")
    return kinds


def write_staged(dest: Path, seed: int, *, stray: bool = False, n: int = 24) -> Staged:
    """History `seed` in dest/repo (fixed dates: shas are stable)."""
    table = {"mild": MILD, "gross": GROSS}
    steps = [
        Step(kind, table.get(kind, REFERENCE if i == 0 else None), (STRAY if stray else 0.0) if i == 0 else None)
        for i, kind in enumerate(plan(seed, n))
    ]
    h = write_choice_history(dest, steps, name="staged")
    return Staged(h.repo, h.commits, h.kinds)


def config(history: Staged, dest: Path, **test: Any) -> Path:
    """Its bisectbot config: the exact reference, the default test levels (or `test`)."""
    data = {
        "name": "staged",
        "repo": {"path": str(history.repo)},
        "build": {
            "cmake_args": ["-DCMAKE_BUILD_TYPE=Release"],
            "targets": ["prog"],
            "binaries": {"binary": ["bin/prog"]},
            "timeout": 300,
        },
        "run": {"argv": ["{binary}", "{seed}"], "max_runs": 4000, "timeout": 10, "jobs": 0},
        "parse": {"split": "chars", "expect_tokens": 1},
        "statistic": {"outcome": {"position": 0}},
        "reference": {"probs": dict(zip(LETTERS, REFERENCE))},
    }
    if test:
        data["test"] = test
    path = dest / "staged.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


__all__ = ["Staged", "write_staged", "config", "plan", "REFERENCE", "MILD", "GROSS"]
