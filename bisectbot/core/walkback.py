"""Search, confirm, walk back (pure): the loop that names the first departure, over an oracle.

A search ends at a boundary; the boundary is named only once its commit and parent, on fresh
seeds, show the parent on the working side of the reference, the commit on the other, and their
runs differ (core.confirming). When the confirmation says otherwise, what happens next is
decided here and nowhere else:

  found            → named;
  parent departs   → a step was misplaced (a quick step showed a commit unlike the broken end,
                     yet it departs): the search walks back between the last commit that passed
                     the reference test and the parent, never testing again what a test against
                     the reference settled;
  commit holds     → the search goes on above it (unless what changed is how often the
                     condition is met, which the tests cannot see: then say so);
  no change shown  → ambiguous, with both commits and what they printed;
  anything else    → unconfirmed, with why.

Every claim the answer rests on counts in the stated confidence: the loop stops before the
claims' error levels would sum past 1 − confidence. The oracle (bisecting.bisect's, or a test's
simulated history) makes the searches and tests and says what they found; `first_departure`
knows nothing of git, builds or runs, like `core.search`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Protocol

from bisectbot.core.confirming import CULPRIT_HOLDS, FOUND, NO_CHANGE, PARENT_DEPARTS, UNDECIDED, Confirmation
from bisectbot.core.diagnose import either_way
from bisectbot.core.plan import ChangePoint, Departure, Found
from bisectbot.core.search import SearchResult
from bisectbot.records.commits import CommitVerdict
from bisectbot.records.reports import BisectStatus
from bisectbot.statistics.outcome import Find, Verdict

CONDITION_CHANGED = "the share of runs meeting the condition changed"  # how a condition-shift text begins


class Oracle(Protocol):
    """What the loop asks of a bisect in progress. Positions are on the searched line."""

    find: Find
    level: float  # each claim's error level
    confidence: float  # the answer's, as configured

    def sha(self, pos: int) -> str: ...

    def strategy(self, lo: int, hi: int, third: bool) -> str:
        """The search strategy for lo..hi (`third`: a confirmation already found quick steps misplaced)."""

    def prepare(self, strategy: str, lo: int, hi: int) -> None:
        """Measure what the strategy compares commits with (the broken side's model), if it needs one."""

    def search(self, strategy: str, lo: int, hi: int, walk_back: bool) -> Found:
        """The boundary between lo (working side) and hi (broken side)."""

    def probe(self, pos: int) -> Verdict:
        """A commit the search could not place, tested against the reference."""

    def reached(self, result: SearchResult) -> None:
        """The search ended at `result`: test what the answer now rests on (a broken end tested last)."""

    def parent_of(self, pos: int) -> str: ...

    def needs(self, pos: int, parent: str) -> tuple[bool, bool]:
        """Whether the parent and the commit still need a test against the reference each."""

    def doubt(self) -> float:
        """The union bound of the claims made so far."""

    def claims(self) -> int: ...

    def confirm(self, pos: int, parent: str, need_parent: bool, need_culprit: bool) -> Confirmation: ...

    def input_rule_missed(self, pos: int, parent: str, departs: CommitVerdict) -> str | None:
        """When the parent was skipped as building the same binary as line[pos − 1]: the
        contradiction, if that commit passes on fresh seeds where the parent departs."""

    def culprit_claim(self, pos: int) -> CommitVerdict: ...

    def last_passed(self, hi: int) -> int: ...

    def walking_back(self, why: str, lo: int, hi: int) -> None: ...

    def condition_shift(self, pos: int) -> str | None:
        """What changed when it is how often the condition is met (a change the tests cannot see)."""

    def range_text(self, result: SearchResult) -> str: ...

    def no_change_text(self, pos: int, parent: str, conf: Confirmation) -> str: ...


@dataclass
class _Walk:
    """Where the loop is: the range searched, whether a walk-back happened, what it crossed."""

    lo: int
    hi: int
    third: bool = False
    crossed: list[ChangePoint] = field(default_factory=list)
    strategies: list[str] = field(default_factory=list)

    def end(self, status: BisectStatus, message: str, found: Found) -> Departure:
        return Departure(status, message, found, self.crossed, self.strategies)


def first_departure(o: Oracle, lo: int, hi: int) -> Departure:
    """`walk` between lo (working side) and hi (broken side); when it names nothing and the
    share of runs meeting the condition changed, the message names that change first."""
    dep = walk(o, lo, hi)
    if dep.status in (BisectStatus.AMBIGUOUS, BisectStatus.UNCONFIRMED) and not dep.message.startswith(
        CONDITION_CHANGED
    ):
        if (shift := o.condition_shift(dep.found.result.first_bad)) is not None:
            dep = replace(dep, message=f"{shift}; then: {dep.message}")
    return dep


def walk(o: Oracle, lo: int, hi: int) -> Departure:
    """Search, then confirm the boundary on fresh seeds; until it holds (see the module)."""
    w = _Walk(lo, hi)
    while True:
        strategy = o.strategy(w.lo, w.hi, w.third)
        w.strategies.append(strategy)
        o.prepare(strategy, w.lo, w.hi)
        found = o.search(strategy, w.lo, w.hi, w.third)
        if found.stuck is not None:
            if (unplaced := _stuck(o, w, found)) is not None:
                return unplaced
            continue
        if found.unfinished is not None:
            return w.end(BisectStatus.AMBIGUOUS, found.unfinished, found)
        if not found.result.exact:
            return w.end(BisectStatus.AMBIGUOUS, o.range_text(found.result), found)
        pos = found.result.first_bad
        o.reached(found.result)
        parent = o.parent_of(pos)
        need_parent, need_culprit = o.needs(pos, parent)
        if o.doubt() + (1 + need_parent + need_culprit) * o.level > 1 - o.confidence + 1e-12:
            return w.end(BisectStatus.UNCONFIRMED, _out_of_budget(o, w), found)
        conf = o.confirm(pos, parent, need_parent, need_culprit)
        if (ended := _confirmed(o, w, found, pos, parent, conf)) is not None:
            return ended


def _stuck(o: Oracle, w: _Walk, found: Found) -> Departure | None:
    """A commit the search could not place on either side: the reference places it (the range
    narrows to its side and the search goes on: None), or nothing can be named."""
    assert found.stuck is not None
    side = o.probe(found.stuck)
    if side is o.find.culprit_verdict and found.stuck > w.lo:
        w.hi = found.stuck
        return None
    if side is o.find.parent_verdict and found.stuck < w.hi:
        w.lo = found.stuck
        return None
    return w.end(
        BisectStatus.UNCONFIRMED,
        (
            f"commit {o.sha(found.stuck)[:12]} fits neither side and its test against the reference is "
            f"{side.value.upper()} ({either_way()})"
        ),
        found,
    )


def _out_of_budget(o: Oracle, w: _Walk) -> str:
    return (
        f"no boundary confirmed within the error budget (confidence {o.confidence:g}): {o.claims()} claims at "
        f"{o.level:.1e} each so far, {len(w.crossed)} boundary(ies) ruled out"
    )


def _confirmed(o: Oracle, w: _Walk, found: Found, pos: int, parent: str, conf: Confirmation) -> Departure | None:
    """What a confirmation's outcome means: the answer, or None when the search goes on (walked
    back below a parent that departs, or on above a commit that holds)."""
    if conf.outcome == FOUND:
        return w.end(BisectStatus.FOUND, f"{o.find.what} commit is {o.sha(pos)}", found)
    if conf.outcome == PARENT_DEPARTS:
        return _walk_back(o, w, found, pos, parent, conf)
    if conf.outcome == CULPRIT_HOLDS and pos < w.hi:
        # it tests like its parent, yet the search put it on the broken side: when what changed is
        # how often the condition is met (which the tests cannot see), searching on above it finds
        # only more of it: say so now, not after more builds
        if (shift := o.condition_shift(pos)) is not None:
            return w.end(BisectStatus.UNCONFIRMED, shift, found)
        w.lo = pos
        return None
    shift = o.condition_shift(pos) if conf.outcome in (NO_CHANGE, UNDECIDED) else None
    if conf.outcome == NO_CHANGE:
        return w.end(BisectStatus.AMBIGUOUS, shift or o.no_change_text(pos, parent, conf), found)
    return w.end(BisectStatus.UNCONFIRMED, _unconfirmed_why(o, pos, parent, conf, shift), found)


def _walk_back(o: Oracle, w: _Walk, found: Found, pos: int, parent: str, conf: Confirmation) -> Departure | None:
    """The parent departs too: the boundary is at or before it, in line order. None when the
    search goes on below it; the answer when nothing is left there (or the input rule erred)."""
    assert conf.parent is not None
    if parent != o.sha(pos - 1):  # a parent skipped as equivalent departs
        if (missed := o.input_rule_missed(pos, parent, conf.parent)) is not None:
            return w.end(BisectStatus.UNCONFIRMED, missed, found)
    w.crossed.append(ChangePoint(pos, conf.parent, o.culprit_claim(pos)))
    w.third, w.hi = True, pos - 1
    w.lo = o.last_passed(w.hi)
    o.walking_back(conf.why, w.lo, w.hi)
    if w.hi - w.lo < 1:
        return w.end(BisectStatus.UNCONFIRMED, conf.why, found)
    return None


def _unconfirmed_why(o: Oracle, pos: int, parent: str, conf: Confirmation, shift: str | None) -> str:
    """Why a boundary is not named: the confirmation's reason; a condition-rate change when that
    is what changed; for an undecided test, the indifference zone."""
    why = conf.why or f"the confirmation of {o.sha(pos)[:12]} ended {conf.outcome}"
    if shift is not None:  # not the indifference zone: a change the tests cannot see
        return shift
    if conf.outcome != UNDECIDED:
        return why
    changed = conf.change is not None and conf.change[0].verdict is Verdict.CHANGED
    return (
        (
            f"the distribution changed at {o.sha(pos)[:12]} (its runs differ from its parent {parent[:12]}'s "
            f"on fresh seeds), but "
            if changed
            else ""
        )
        + why
        + f" (undecided: {either_way()})"
    )
