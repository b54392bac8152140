"""The sticky search: probabilistic (Bayesian) bisection over a range, for `--strategy sticky`.

Unlike the binary search (bisecting.bisect), it does not test commits to a verdict: it visits
commits a few runs at a time, each on its own seeds, and keeps a posterior over where the
boundary is (core.search.sticky_bisect), stopping when one commit is likely enough or its run
budget is spent. Commits that cannot be built or run are dropped and the search restarted on
the rest (stored runs replay, so a restart costs nothing). Its placements only steer: the
confirmation (bisecting.confirm) decides what is named.
"""

from __future__ import annotations

from bisectbot.bisecting.bisection import Bisection
from bisectbot.core import broken_end, search
from bisectbot.core.plan import Found
from bisectbot.core.search import SearchResult, SkipBlock, presumed, skip_blocks
from bisectbot.events import StickySkip, StickyVisit
from bisectbot.judge.verdict import Feed, Untestable
from bisectbot.records.commits import CommitVerdict
from bisectbot.statistics.outcome import Find, Verdict


def sticky_search(b: Bisection, model: CommitVerdict | None, lo: int, hi: int) -> Found:
    """Probabilistic bisection (search.sticky_bisect) over the commits lo..hi that can be tested.

    A commit that cannot be built or run is dropped and the search restarted on the rest
    from scratch; its stored runs replay, so a restart costs nothing. Commits between two
    dropped ones that failed alike (none of them run between) are dropped as presumed alike.
    Each tested commit is then recorded on the side the final posterior puts it (GOOD-SIDE
    or BAD-SIDE: a placement, not a test). The good side is learned around the
    glitch-tolerant reference; every commit runs its own seeds (block 1: the common block
    would hand the model the same runs at commits that behave alike), so no run is counted
    twice; the search stops at test.search_runs (then: ambiguous)."""
    plan = b.plan
    assert model is not None
    user = {lo + i for i in plan.skipped_in(lo, hi)}
    visits = _Visits(b, [p for p in range(lo, hi + 1) if p not in user], lo, hi)  # the testable positions
    while True:
        # sticky_bisect wants the working end first: with find=fixed walk the line backwards
        order = visits.positions if plan.find is Find.BAD else visits.positions[::-1]
        visits.restart(order)
        try:
            res = _bisect(b, model, visits)
            break
        except Untestable as exc:
            visits.drop(exc)
        finally:
            visits.close()
    for feed in visits.feeds.values():  # those seeds are read: the confirmation starts after them
        b.ledger.fresh[feed.sha] = feed.start + feed.tally.consumed
    b.ledger.rounds += res.visits
    return _found(b, res, order, visits)


class _Visits:
    """The commits a sticky search visits: each one's feed of fresh runs, the ones dropped
    (cannot be built or run) and the ones that gave at least one counted run."""

    def __init__(self, b: Bisection, positions: list[int], lo: int, hi: int):
        self.b, self.positions, self.lo, self.hi = b, positions, lo, hi
        self.order: list[int] = []
        self.feeds: dict[int, Feed] = {}
        self.current = -1
        self.dropped: dict[int, str] = {}
        self.ran: set[int] = set()  # positions that gave at least one counted run

    def restart(self, order: list[int]) -> None:
        self.order, self.feeds = order, {}

    def run(self, i: int) -> int:
        """The next counted run's category at the i-th commit of the order."""
        pos = self.order[i]
        self.current = pos
        if pos not in self.feeds:  # its own seeds: the sticky model multiplies evidence across commits
            sha = self.b.plan.line[pos]
            self.b.events.emit(StickyVisit(sha, pos, self.b.plan.n - 1))
            self.feeds[pos] = self.b.tester.feed(sha, 1, self.b.ledger.fresh.get(sha, 0))
        category = self.feeds[pos].next()
        self.ran.add(pos)
        return category

    def drop(self, exc: Untestable) -> None:
        """The current commit cannot be run: record its SKIP, and drop it and the commits
        presumed to fail alike with it (never the range's ends)."""
        pos = self.current
        self.b.events.emit(StickySkip(self.b.plan.line[pos], str(exc)))
        self.b.ledger.verdicts.append(self.feeds[pos].verdict(Verdict.SKIP, str(exc), exc.signature))
        self.dropped[pos] = exc.signature
        alike = presumed(self.dropped, sorted(self.ran))
        for p in [pos, *(p for p, sig in alike.items() if sig == exc.signature)]:
            if p in self.positions and p not in (self.lo, self.hi):
                self.positions.remove(p)
        self.b.announce_block(pos, self.blocks())

    def blocks(self) -> tuple[SkipBlock, ...]:
        return skip_blocks(sorted(self.dropped), [Verdict.SKIP] * len(self.dropped), self.dropped)

    def close(self) -> None:
        for feed in self.feeds.values():
            feed.close()


def _bisect(b: Bisection, model: CommitVerdict, visits: _Visits) -> search.StickyResult:
    """One sticky bisection over the visits' order, its good side learned around the
    glitch-tolerant reference and its bad side from the model."""
    ref, cfg = b.tester.reference, b.tester.cfg
    return search.sticky_bisect(
        len(visits.order),
        visits.run,
        ref.tolerant(cfg.test.indifference),
        [model.counts[name] for name in ref.names],
        confidence=broken_end.STICKY_STOP,  # it only steers: the confirmation decides
        max_runs=cfg.test.search_runs,
        good_strength=broken_end.STICKY_GOOD_STRENGTH,
        visit_runs=min(broken_end.STICKY_VISIT_RUNS, cfg.run.max_runs),
    )


def _found(b: Bisection, res: search.StickyResult, order: list[int], visits: _Visits) -> Found:
    """The search's boundary in line order, each visited commit placed on its side."""
    plan, stop = b.plan, broken_end.STICKY_STOP
    # In `order`, res.culprit is the first broken position and the one before it the last
    # working one; in line order that is (last good, first bad), or with find=fixed
    # (last broken, first fixed): the search result's (last_good, first_bad) either way.
    confident = res.posterior >= stop
    first, last = (res.culprit, res.culprit) if confident else res.credible
    broken, working = order[first], order[first - 1]
    if not confident:  # the budget ran out: the credible range, as candidates
        broken = order[last]
    boundary = (working, broken) if plan.find is Find.BAD else (broken, working)
    why = (
        f"sticky bisection: P({plan.find.what} = {plan.line[order[res.culprit]][:12]}) "
        f"= {res.posterior:.4f} after {res.runs} runs, {res.visits} visits"
    )
    split = order[res.culprit]
    for pos, feed in sorted(visits.feeds.items()):
        on_broken_side = pos >= split if plan.find is Find.BAD else pos <= split
        side = Verdict.BAD_SIDE if on_broken_side else Verdict.GOOD_SIDE
        b.ledger.verdicts.append(feed.verdict(side, why))
    result = SearchResult(*boundary, blocks=visits.blocks())
    if res.stuck is not None:
        return Found(result, "sticky", res.posterior, stuck=order[res.stuck])
    unfinished = (
        None if confident else f"the sticky search used its budget of {b.tester.cfg.test.search_runs} runs: {why}"
    )
    return Found(result, "sticky", res.posterior, unfinished)
