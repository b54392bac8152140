"""Confirm stage: is the commit a search ended at really where the distribution departs?

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
from typing import Sequence

from bisectbot.config.seeds import SEED_BLOCK
from bisectbot.judge.verdict import CommitTester, Feed, Untestable, judge
from bisectbot.records.commits import Ask, CommitVerdict, Tally
from bisectbot.statistics import stats, two_sample
from bisectbot.statistics.outcome import Find, Verdict

FOUND = "found"
PARENT_DEPARTS = "parent-departs"  # the parent tests like the culprit should: the boundary is lower
CULPRIT_HOLDS = "culprit-holds"  # the culprit tests like the parent should: the boundary is higher
NO_CHANGE = "no-change"  # the two could not be told apart within the budget
UNDECIDED = "undecided"  # a test against the reference ran out of budget
UNTESTABLE = "untestable"  # one of them cannot be built or run


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


@dataclass(frozen=True)
class Confirmation:
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


def confirm(
    tester: CommitTester, pair: Pair, find: Find, *, level: float, q_bad: Sequence[float] | None
) -> Confirmation:
    """Run the pair's fresh seeds until the questions are answered (see the module)."""
    cfg, ref = tester.cfg, tester.reference
    budget = cfg.run.max_runs
    budgets = {
        "culprit": min(pair.culprit_budget or budget, SEED_BLOCK - pair.start_culprit),
        "parent": min(pair.parent_budget or budget, SEED_BLOCK - pair.start_parent),
    }
    eta, tol = cfg.test.indifference, cfg.test.tolerance
    asks = {
        "culprit": Ask(role="retest-culprit", alpha=level, beta=level, block=1, q_bad=_tuple(q_bad)),
        "parent": Ask(role="retest-parent", alpha=level, beta=level, block=1, q_bad=_tuple(q_bad)),
    }
    wanted = {"culprit": find.culprit_verdict, "parent": find.parent_verdict}
    needed = {name for name, on in (("culprit", pair.test_culprit), ("parent", pair.test_parent)) if on}
    feeds = {
        "culprit": tester.feed(pair.culprit, 1, pair.start_culprit, _tuple(q_bad)),
        "parent": tester.feed(pair.parent, 1, pair.start_parent, _tuple(q_bad)),
    }
    decided: dict[str, tuple[stats.Evidence, Tally]] = {}
    change: tuple[stats.Evidence, Tally, Tally] | None = None
    counted: set[str] = set()  # each feed's executed runs go to its first verdict only

    def executed(name: str) -> int:
        first = name not in counted
        counted.add(name)
        stream = feeds[name].stream
        return stream.executed if first and stream is not None else 0

    outcome, why, skipped = FOUND, "", None
    try:
        while True:
            try:
                for name, feed in feeds.items():
                    if change is not None and (name not in needed or name in decided):
                        feed.close()  # nothing asked of it any more: no more of its runs
                        continue
                    current = name
                    feed.next()
            except Untestable as exc:
                skipped = feeds[current].verdict(
                    Verdict.SKIP,
                    str(exc),
                    exc.signature,
                    ask=Ask(role=asks[current].role, alpha=level, beta=level, block=1),
                    executed=executed(current),
                )
                outcome, why = UNTESTABLE, f"{current} {feeds[current].sha[:12]} cannot be run on fresh seeds: {exc}"
                break
            for name in sorted(needed - decided.keys()):
                ev = judge(
                    feeds[name].tally.counts,
                    asks[name],
                    ref,
                    tolerance=tol,
                    budget=budgets[name],
                    eta=eta,
                    paired=feeds[name].paired_evidence(asks[name], budgets[name]),
                )
                if ev.decision is None:
                    continue
                decided[name] = (ev, copy.deepcopy(feeds[name].tally))
                if ev.decision is not wanted[name]:
                    outcome = (
                        (PARENT_DEPARTS if name == "parent" else CULPRIT_HOLDS)
                        if ev.decision is wanted[name].flipped()
                        else UNDECIDED
                    )
                    why = f"{name} {feeds[name].sha[:12]} on fresh seeds: {ev.decision.value.upper()} — {ev.reason}"
                    if outcome == UNDECIDED:
                        knob = pair.parent_knob if name == "parent" else pair.culprit_knob
                        why += f" (its budget: {budgets[name]:,} runs, set by {knob}: raise it to let the test decide)"
            if outcome != FOUND:
                break
            if change is None:
                c, p = feeds["culprit"].tally, feeds["parent"].tally
                ev = two_sample.test_change(
                    c.counts,
                    p.counts,
                    ref,
                    alpha=level,
                    max_runs=budget,
                    centres_x=pair.centres_culprit,
                    centres_y=pair.centres_parent,
                )
                if ev.decision is not None:
                    change = (ev, copy.deepcopy(c), copy.deepcopy(p))
                    if ev.decision is Verdict.INCONCLUSIVE:
                        outcome, why = NO_CHANGE, ev.reason
                        break
            if change is not None and needed <= decided.keys():
                break
    finally:
        for feed in feeds.values():
            feed.close()
    made: dict[str, CommitVerdict] = {}
    for name in ("parent", "culprit"):
        if name in decided:
            ev, tally = decided[name]
            made[name] = feeds[name].verdict(
                ev.decision or Verdict.INCONCLUSIVE,
                ev.reason,
                ask=asks[name],
                tally=tally,
                evidence=(ev.log_e_bad, ev.log_e_good),
                executed=executed(name),
            )
    pair_verdicts = None
    if change is not None:
        ev, c_tally, p_tally = change
        verdict = ev.decision or Verdict.INCONCLUSIVE
        reason = (
            f"{'differs from' if verdict is Verdict.CHANGED else 'not shown to differ from'} "
            f"{{other}} on fresh seeds: {ev.reason}"
        )
        pair_verdicts = (
            feeds["culprit"].verdict(
                verdict,
                reason.format(other=f"its parent {pair.parent[:12]}"),
                ask=Ask(role="confirm-culprit", alpha=level, beta=level, mode="change", block=1),
                tally=c_tally,
                evidence=(ev.log_e_bad, 0.0),
                executed=executed("culprit"),
            ),
            feeds["parent"].verdict(
                verdict,
                reason.format(other=f"the commit {pair.culprit[:12]}"),
                ask=Ask(role="confirm-parent", alpha=level, beta=level, mode="change", block=1),
                tally=p_tally,
                evidence=(ev.log_e_bad, 0.0),
                executed=executed("parent"),
            ),
        )
    used = (feeds["culprit"].tally.consumed, feeds["parent"].tally.consumed)
    return Confirmation(outcome, made.get("parent"), made.get("culprit"), pair_verdicts, skipped, used, why)


def _tuple(q: Sequence[float] | None) -> tuple[float, ...] | None:
    return None if q is None else tuple(float(x) for x in q)


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
