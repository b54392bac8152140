"""The confirmation's rules (pure): when a commit and its parent, run side by side on fresh
seeds, have answered what the search's boundary rests on.

Three questions are asked of the two commits' runs (bisecting.confirm runs them and asks):

* does the parent pass the reference test (the working side's verdict)? Asked when it has none yet;
* does the commit depart from the reference (the broken side's verdict)? Asked when it has none yet;
* do the two differ at all (the change test)? Always: a commit where nothing changed is never
  named, whatever the history looks like.

`settle` runs one counted run of each side at a time and stops as soon as an answer rules the
pair out (the parent departs, the commit does not, a test runs out of budget, the change test
finds no change) or all are in; a side with nothing left to answer runs no more. What the
answers mean is `Outcome`; how the runs are made, judged and recorded is the caller's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Generic, Mapping, Protocol, TypeVar

from bisectbot.records.commits import CommitVerdict
from bisectbot.statistics.outcome import Verdict

FOUND = "found"
PARENT_DEPARTS = "parent-departs"  # the parent tests like the culprit should: the boundary is lower
CULPRIT_HOLDS = "culprit-holds"  # the culprit tests like the parent should: the boundary is higher
NO_CHANGE = "no-change"  # the two could not be told apart within the budget
UNDECIDED = "undecided"  # a test against the reference ran out of budget
UNTESTABLE = "untestable"  # one of them cannot be built or run
SIDES = ("culprit", "parent")  # the order runs are made in, one of each at a time

T = TypeVar("T")  # what a side's state is remembered as when its test decides (a copy of its tally)
T_co = TypeVar("T_co", covariant=True)


class Untestable(Exception):
    """A side's next run cannot be made: its commit cannot be built or run (the message says why)."""


class Side(Protocol[T_co]):
    """One commit of the pair, run on its fresh seeds."""

    def advance(self) -> None:
        """One more counted run (raises `Untestable` when it cannot be made)."""

    def close(self) -> None:
        """No more runs are wanted of it."""

    def decide(self) -> Verdict | None:
        """Its test against the reference on the runs so far: GOOD, BAD, INCONCLUSIVE (out of
        budget) or None (go on)."""

    def snapshot(self) -> T_co:
        """What the caller keeps of it when its test decides."""


@dataclass
class Settled(Generic[T]):
    """What `settle` found: the outcome, which side it turned on (`why_side`), each decided
    side's verdict and snapshot, the change test's verdict and snapshots, an untestable side."""

    outcome: str = FOUND
    why_side: str | None = None
    decided: dict[str, tuple[Verdict, T]] = field(default_factory=dict)
    change: tuple[Verdict, T, T] | None = None
    untestable: tuple[str, Untestable] | None = None


def outcome_of(side: str, decision: Verdict, wanted: Verdict) -> str:
    """What a side's decided test means for the pair: FOUND when it is what the boundary needs,
    else the parent departs (the boundary is lower), the culprit holds (higher), or undecided."""
    if decision is wanted:
        return FOUND
    if decision is wanted.flipped():
        return PARENT_DEPARTS if side == "parent" else CULPRIT_HOLDS
    return UNDECIDED


def settle(
    sides: Mapping[str, Side[T]],
    needed: set[str],
    wanted: dict[str, Verdict],
    change: Callable[[], Verdict | None],
) -> Settled[T]:
    """Run the pair until the questions are answered (see the module). `needed`: the sides whose
    test against the reference is asked; `wanted`: the verdict each must reach; `change()`: the
    change test on the runs so far (CHANGED, INCONCLUSIVE for no change, or None). Once the
    change test has decided, a side runs on only while its own test is asked and open; every
    test sees the same sequence of runs either way."""
    out: Settled[T] = Settled()
    while True:
        current = SIDES[0]
        try:
            for name in SIDES:
                if out.change is not None and (name not in needed or name in out.decided):
                    sides[name].close()  # nothing asked of it any more: no more of its runs
                    continue
                current = name
                sides[name].advance()
        except Untestable as exc:
            out.outcome, out.why_side, out.untestable = UNTESTABLE, current, (current, exc)
            return out
        for name in sorted(needed - out.decided.keys()):
            decision = sides[name].decide()
            if decision is None:
                continue
            out.decided[name] = (decision, sides[name].snapshot())
            if (meaning := outcome_of(name, decision, wanted[name])) != FOUND:
                out.outcome, out.why_side = meaning, name
        if out.outcome != FOUND:
            return out
        if out.change is None and (said := change()) is not None:
            out.change = (said, sides["culprit"].snapshot(), sides["parent"].snapshot())
            if said is Verdict.INCONCLUSIVE:
                out.outcome = NO_CHANGE
                return out
        if out.change is not None and needed <= out.decided.keys():
            return out


@dataclass(frozen=True)
class Confirmation:
    """A confirmation's outcome with the verdicts it made: the re-tests against the reference
    (when asked), the change test's pair, a side that could not be run, the fresh seeds used."""

    outcome: str
    parent: CommitVerdict | None = None  # retest-parent, when asked
    culprit: CommitVerdict | None = None  # retest-culprit, when asked
    change: tuple[CommitVerdict, CommitVerdict] | None = None  # confirm-culprit, confirm-parent
    skipped: CommitVerdict | None = None  # the one that could not be run
    used: tuple[int, int] = (0, 0)  # fresh seeds consumed at the culprit and the parent
    why: str = ""

    @property
    def verdicts(self) -> list[CommitVerdict]:
        out = [v for v in (self.parent, self.culprit, self.skipped) if v is not None]
        return out + list(self.change or ())
