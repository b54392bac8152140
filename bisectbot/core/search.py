"""Search (pure): binary search for the first bad commit over an oracle, knowing nothing of git.

Positions 0..n-1 are the commits of the first-parent line, oldest first; position 0 is known
good and n-1 known bad (the caller confirmed both). The oracle answers a `Verdict`: GOOD, BAD, SKIP (cannot
be built or run) or INCONCLUSIVE (the test ran out of budget). SKIP and INCONCLUSIVE are both
"no information": the search tries the nearest untried neighbour of the midpoint instead, and
when only such commits separate the last good from the first bad, it reports the whole range
rather than guess. UNLIKE (a third behaviour) is treated the same way and reported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from bisectbot.core.outcome import Verdict


@dataclass(frozen=True)
class SearchResult:
    """`first_bad` when the boundary is exact; otherwise the candidates between last good and first bad."""

    last_good: int
    first_bad: int
    asked: tuple[int, ...] = field(default=())  # positions the oracle was asked, in order
    answers: tuple[Verdict, ...] = field(default=())

    @property
    def exact(self) -> bool:
        return self.first_bad == self.last_good + 1

    @property
    def candidates(self) -> range:
        """Positions that may be the first bad one (just `first_bad` when exact)."""
        return range(self.last_good + 1, self.first_bad + 1)


def next_probe(lo: int, hi: int, uninformative: set[int]) -> int | None:
    """The position to test between lo (good) and hi (bad): the midpoint, or its nearest
    neighbour that has not already proved uninformative; None when none is left."""
    if hi - lo < 2:
        return None
    mid = (lo + hi) // 2
    for offset in range(hi - lo):
        for pos in (mid - offset, mid + offset) if offset else (mid,):
            if lo < pos < hi and pos not in uninformative:
                return pos
    return None


def bisect_search(n: int, oracle: Callable[[int], Verdict]) -> SearchResult:
    """Binary search over positions 0..n-1 (0 good, n-1 bad); at most one oracle call per position."""
    if n < 2:
        raise ValueError("need at least a good and a bad position")
    lo, hi = 0, n - 1
    uninformative: set[int] = set()
    asked: list[int] = []
    answers: list[Verdict] = []
    while (pos := next_probe(lo, hi, uninformative)) is not None:
        answer = Verdict(oracle(pos))
        asked.append(pos)
        answers.append(answer)
        if answer is Verdict.GOOD:
            lo = pos
        elif answer is Verdict.BAD:
            hi = pos
        else:
            uninformative.add(pos)
    return SearchResult(lo, hi, tuple(asked), tuple(answers))
