"""The sticky search: probabilistic (Bayesian) bisection over a range, for `--strategy sticky`.

Unlike the binary search (bisecting.bisect), it does not test commits to a verdict: it visits
commits a few runs at a time, each on its own seeds, and keeps a posterior over where the
boundary is (core.search.sticky_bisect), stopping when one commit is likely enough or its run
budget is spent. Commits that cannot be built or run are dropped and the search restarted on
the rest (stored runs replay, so a restart costs nothing). Its placements only steer: the
confirmation (bisecting.confirm) decides what is named.
"""

from __future__ import annotations

from bisectbot.bisecting.ledger import Ledger
from bisectbot.bisecting.plan import Found
from bisectbot.core import broken_end, search
from bisectbot.core.search import SearchResult, presumed, skip_blocks
from bisectbot.events import StickySkip, StickyVisit
from bisectbot.judge.verdict import Feed, Untestable
from bisectbot.records.commits import CommitVerdict
from bisectbot.statistics.outcome import Find, Verdict


def sticky_search(ledger: Ledger, model: CommitVerdict | None, lo: int, hi: int) -> Found:
    """Probabilistic bisection (search.sticky_bisect) over the commits lo..hi that can be tested.

    A commit that cannot be built or run is dropped and the search restarted on the rest
    from scratch; its stored runs replay, so a restart costs nothing. Commits between two
    dropped ones that failed alike (none of them run between) are dropped as presumed alike.
    Each tested commit is then recorded on the side the final posterior puts it (GOOD-SIDE
    or BAD-SIDE: a placement, not a test). The good side is learned around the
    glitch-tolerant reference; every commit runs its own seeds (block 1: the common block
    would hand the model the same runs at commits that behave alike), so no run is counted
    twice; the search stops at test.search_runs (then: ambiguous)."""
    plan, ref = ledger.plan, ledger.tester.reference
    assert model is not None
    bad_counts = [model.counts[name] for name in ref.names]
    good = ledger.tester.reference.tolerant(ledger.tester.cfg.test.indifference)
    user = {lo + i for i in plan.skipped_in(lo, hi)}
    positions = [p for p in range(lo, hi + 1) if p not in user]  # the testable positions
    stop = broken_end.STICKY_STOP  # it only steers: the confirmation decides
    dropped: dict[int, str] = {}
    ran: set[int] = set()  # positions that gave at least one counted run
    while True:
        # sticky_bisect wants the working end first: with find=fixed walk the line backwards
        order = positions if plan.find is Find.BAD else positions[::-1]
        feeds: dict[int, Feed] = {}
        current: list[int] = []

        def run(i: int) -> int:
            pos = order[i]
            current[:] = [pos]
            if pos not in feeds:  # its own seeds: the sticky model multiplies evidence across commits
                ledger.events.emit(StickyVisit(plan.line[pos], pos, plan.n - 1))
                feeds[pos] = ledger.tester.feed(plan.line[pos], 1, ledger.fresh.get(plan.line[pos], 0))
            category = feeds[pos].next()
            ran.add(pos)
            return category

        try:
            res = search.sticky_bisect(
                len(order),
                run,
                good,
                bad_counts,
                confidence=stop,
                max_runs=ledger.tester.cfg.test.search_runs,
                good_strength=broken_end.STICKY_GOOD_STRENGTH,
                visit_runs=min(broken_end.STICKY_VISIT_RUNS, ledger.tester.cfg.run.max_runs),
            )
            break
        except Untestable as exc:
            pos = current[0]
            ledger.events.emit(StickySkip(plan.line[pos], str(exc)))
            ledger.verdicts.append(feeds[pos].verdict(Verdict.SKIP, str(exc), exc.signature))
            dropped[pos] = exc.signature
            alike = presumed(dropped, sorted(ran))
            for p in [pos, *(p for p, sig in alike.items() if sig == exc.signature)]:
                if p in positions and p not in (lo, hi):
                    positions.remove(p)
            ledger.announce_block(pos, skip_blocks(sorted(dropped), [Verdict.SKIP] * len(dropped), dropped))
        finally:
            for feed in feeds.values():
                feed.close()
    for feed in feeds.values():  # those seeds are read: the confirmation starts after them
        ledger.fresh[feed.sha] = feed.start + feed.tally.consumed
    ledger.rounds += res.visits
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
    for pos, feed in sorted(feeds.items()):
        on_broken_side = pos >= split if plan.find is Find.BAD else pos <= split
        side = Verdict.BAD_SIDE if on_broken_side else Verdict.GOOD_SIDE
        ledger.verdicts.append(feed.verdict(side, why))
    blocks = skip_blocks(sorted(dropped), [Verdict.SKIP] * len(dropped), dropped)
    if res.stuck is not None:
        return Found(SearchResult(*boundary, blocks=blocks), "sticky", res.posterior, stuck=order[res.stuck])
    return Found(
        SearchResult(*boundary, blocks=blocks),
        "sticky",
        res.posterior,
        None if confident else f"the sticky search used its budget of {ledger.tester.cfg.test.search_runs} runs: {why}",
    )
