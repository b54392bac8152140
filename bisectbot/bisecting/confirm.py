"""Confirm stage: is the commit a search ended at really where the distribution departs?

The rules of when the questions below are answered are pure (core.confirming.settle); here the
two commits' fresh runs are made, judged and recorded as verdicts.

The commit and its parent (its own first parent, even when the search skipped it as unable to
change the binary: the answer does not rest on the input rule) run on fresh seeds — block 1,
from the first seed no earlier test of this bisect has looked at — one counted run of each at a
time, and three questions are answered on those runs:

* does the parent pass the reference test (GOOD: within tolerance)? Asked when the parent has
  no GOOD against the reference yet (a quick step only showed it unlike the broken end; a
  skipped parent was never tested);
* does the commit depart from the reference (BAD: beyond eta)? Asked when it has no BAD yet
  (the sticky search places commits without a test);
* do the two differ at all (the change test, `two_sample.test_change`)? Always: a commit where
  nothing changed is never named, whatever the history looks like.

It stops as soon as an answer rules the pair out (the parent departs, the commit does not) or
all are in; a side whose questions are all answered runs no more (once the change test has
decided, the commit runs on only while its own test against the reference is open, and so does
the parent: each test sees the same sequence of runs either way). With `--find fixed` the roles
of GOOD and BAD swap, as everywhere.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable, Sequence

from bisectbot.config.seeds import SEED_BLOCK
from bisectbot.core import confirming
from bisectbot.core.confirming import (
    CULPRIT_HOLDS,
    FOUND,
    NO_CHANGE,
    PARENT_DEPARTS,
    UNDECIDED,
    UNTESTABLE,
    Confirmation,
)
from bisectbot.judge.verdict import CommitTester, Feed, judge, judged_of
from bisectbot.records.commits import Ask, CommitVerdict, Tally
from bisectbot.statistics import means, stats, two_sample
from bisectbot.statistics.outcome import Find, Verdict

Snapshot = tuple["stats.Evidence | None", Tally]  # a side's last evidence and a copy of its tally


@dataclass(frozen=True)
class Pair:
    """What to confirm: the commit, its parent, where each one's fresh seeds start, and what
    each still needs shown against the reference."""

    culprit: str
    parent: str
    start_culprit: int = 0
    start_parent: int = 0
    test_culprit: bool = False
    test_parent: bool = False
    centres_culprit: tuple[tuple[float, ...], ...] = ()  # what the change test's mixtures lean toward
    centres_parent: tuple[tuple[float, ...], ...] = ()
    parent_budget: int | None = None  # runs of the parent's test against the reference (default run.max_runs)
    culprit_budget: int | None = None  # and of the culprit's
    # what sets each budget, for an undecided test's hint (the knob that changes it)
    parent_knob: str = "run.max_runs"
    culprit_knob: str = "run.max_runs"

    def start(self, name: str) -> int:
        return self.start_culprit if name == "culprit" else self.start_parent

    def budget(self, name: str) -> int | None:
        return self.culprit_budget if name == "culprit" else self.parent_budget

    def knob(self, name: str) -> str:
        return self.culprit_knob if name == "culprit" else self.parent_knob


class _Side:
    """One commit of the pair for core.confirming.settle: its feed of fresh runs, judged against
    the reference with its own ask and budget."""

    def __init__(self, tester: CommitTester, feed: Feed, ask: Ask, budget: int):
        self.tester, self.feed, self.ask, self.budget = tester, feed, ask, budget
        self.evidence: stats.Evidence | None = None

    def advance(self) -> None:
        self.feed.next()

    def close(self) -> None:
        self.feed.close()

    def decide(self) -> Verdict | None:
        cfg = self.tester.cfg
        self.evidence = judge(
            self.feed.tally.counts,
            self.ask,
            self.tester.reference,
            tolerance=cfg.test.tolerance,
            budget=self.budget,
            eta=cfg.test.indifference,
            paired=self.feed.paired_evidence(self.ask, self.budget),
        )
        return self.evidence.decision

    def snapshot(self) -> Snapshot:
        return self.evidence, copy.deepcopy(self.feed.tally)


def confirm(
    tester: CommitTester, pair: Pair, find: Find, *, level: float, q_bad: Sequence[float] | None
) -> Confirmation:
    """Run the pair's fresh seeds until the questions are answered (see the module)."""
    toward = None if q_bad is None else tuple(float(x) for x in q_bad)
    max_runs = tester.cfg.run.max_runs
    roles = {"culprit": "retest-culprit", "parent": "retest-parent"}
    sides = {
        name: _Side(
            tester,
            tester.feed(getattr(pair, name), 1, pair.start(name), toward),
            Ask(role=roles[name], alpha=level, beta=level, block=1, q_bad=toward),
            min(pair.budget(name) or max_runs, SEED_BLOCK - pair.start(name)),
        )
        for name in confirming.SIDES
    }
    change_evidence: list[stats.Evidence] = []

    def change() -> Verdict | None:
        culprit, parent = sides["culprit"].feed, sides["parent"].feed
        if tester.numbers is not None:  # did the mean change? (statistics.means.change_test)
            spec = tester.numbers.spec
            ev = means.change_test(
                culprit.numbers_so_far(),
                parent.numbers_so_far(),
                spec.scale,
                spec.floor,
                alpha=level,
                max_runs=max_runs,
            )
        else:
            ev = two_sample.test_change(
                culprit.tally.counts,
                parent.tally.counts,
                tester.reference,
                alpha=level,
                max_runs=max_runs,
                centres_x=pair.centres_culprit,
                centres_y=pair.centres_parent,
            )
        change_evidence[:] = [ev]
        return ev.decision

    needed = {name for name, on in (("culprit", pair.test_culprit), ("parent", pair.test_parent)) if on}
    wanted = {"culprit": find.culprit_verdict, "parent": find.parent_verdict}
    try:
        settled = confirming.settle(sides, needed, wanted, change)
    finally:
        for side in sides.values():
            side.close()
    return _recorded(settled, sides, pair, level, change_evidence)


def _recorded(
    settled: confirming.Settled[Snapshot],
    sides: dict[str, _Side],
    pair: Pair,
    level: float,
    change_evidence: list[stats.Evidence],
) -> Confirmation:
    """The verdicts of a settled confirmation, each feed's executed runs counted once (with the
    first verdict made of it), and why it ended where it did."""
    counted: set[str] = set()

    def executed(name: str) -> int:
        first = name not in counted
        counted.add(name)
        stream = sides[name].feed.stream
        return stream.executed if first and stream is not None else 0

    skipped, why = None, ""
    if settled.untestable is not None:
        name, exc = settled.untestable
        feed = sides[name].feed
        skipped = feed.verdict(
            Verdict.SKIP,
            str(exc),
            getattr(exc, "signature", ""),
            ask=Ask(role=sides[name].ask.role, alpha=level, beta=level, block=1),
            executed=executed(name),
        )
        why = f"{name} {feed.sha[:12]} cannot be run on fresh seeds: {exc}"
    made: dict[str, CommitVerdict] = {}
    for name in ("parent", "culprit"):
        if name in settled.decided:
            _, (ev, tally) = settled.decided[name]
            assert ev is not None
            made[name] = sides[name].feed.verdict(
                ev.decision or Verdict.INCONCLUSIVE,
                ev.reason,
                ask=sides[name].ask,
                tally=tally,
                evidence=(ev.log_e_bad, ev.log_e_good),
                executed=executed(name),
                judged=judged_of(ev),
            )
    why = _why(settled, sides, pair, change_evidence) or why
    pair_verdicts = _change_verdicts(settled, sides, pair, level, change_evidence, executed)
    used = (sides["culprit"].feed.tally.consumed, sides["parent"].feed.tally.consumed)
    return Confirmation(settled.outcome, made.get("parent"), made.get("culprit"), pair_verdicts, skipped, used, why)


def _why(
    settled: confirming.Settled[Snapshot], sides: dict[str, _Side], pair: Pair, change_evidence: list[stats.Evidence]
) -> str:
    """Why the pair was ruled out: the side whose test said otherwise (with the knob that sets an
    undecided test's budget), or the change test that found no change; "" otherwise."""
    if settled.why_side is not None and settled.outcome in (PARENT_DEPARTS, CULPRIT_HOLDS, UNDECIDED):
        name = settled.why_side
        decision, (ev, _) = settled.decided[name]
        assert ev is not None
        why = f"{name} {sides[name].feed.sha[:12]} on fresh seeds: {decision.value.upper()} — {ev.reason}"
        if settled.outcome == UNDECIDED:
            why += (
                f" (its budget: {sides[name].budget:,} runs, set by {pair.knob(name)}: raise it to let the test decide)"
            )
        return why
    if settled.outcome == NO_CHANGE:
        return change_evidence[0].reason
    return ""


def _change_verdicts(
    settled: confirming.Settled[Snapshot],
    sides: dict[str, _Side],
    pair: Pair,
    level: float,
    change_evidence: list[stats.Evidence],
    executed: Callable[[str], int],
) -> tuple[CommitVerdict, CommitVerdict] | None:
    """The change test's verdicts of the culprit and of its parent, on the runs it decided on."""
    if settled.change is None:
        return None
    verdict, (_, c_tally), (_, p_tally) = settled.change
    ev = change_evidence[0]
    reason = (
        f"{'differs from' if verdict is Verdict.CHANGED else 'not shown to differ from'} "
        f"{{other}} on fresh seeds: {ev.reason}"
    )
    return (
        sides["culprit"].feed.verdict(
            verdict,
            reason.format(other=f"its parent {pair.parent[:12]}"),
            ask=Ask(role="confirm-culprit", alpha=level, beta=level, mode="change", block=1),
            tally=c_tally,
            evidence=(ev.log_e_bad, 0.0),
            executed=executed("culprit"),
        ),
        sides["parent"].feed.verdict(
            verdict,
            reason.format(other=f"its child {pair.culprit[:12]}"),
            ask=Ask(role="confirm-parent", alpha=level, beta=level, mode="change", block=1),
            tally=p_tally,
            evidence=(ev.log_e_bad, 0.0),
            executed=executed("parent"),
        ),
    )


__all__ = [
    "Confirmation",
    "Feed",
    "Pair",
    "confirm",
    "FOUND",
    "PARENT_DEPARTS",
    "CULPRIT_HOLDS",
    "NO_CHANGE",
    "UNDECIDED",
    "UNTESTABLE",
]
