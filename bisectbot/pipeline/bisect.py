"""Bisect stage: from a planned range to a named culprit (the search itself is `core.search`).

The stages, in order, each verdict stored by the job as it is reached:
1. endpoints: the broken endpoint (bad, or the old one with find=fixed) must test BAD with the
   generic test and the working one GOOD (EndpointError otherwise); cross-check arms get their
   own verdicts at both endpoints, reported beside the main ones (they do not steer the search);
2. model: the broken endpoint is measured further (same seeds onwards) until its smoothed
   distribution q̂ is precise relative to the size of the bug; `auto` picks the strategy here;
3. search: plain binary search with the two-point test, or the sticky Bayesian bisection;
4. confirm: the culprit and its parent re-tested on fresh seeds against the reference (the
   generic test): the culprit must depart from it and the parent must not;
5. summary: the report, whose confidence is a union bound over the verdicts it rests on.
Per-step error levels come from the whole-bisect confidence (`BisectPlan.level`). Everything is
replayed from the state database on a rerun: a killed bisect resumes where it was.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from bisectbot.core import stats
from bisectbot.core.outcome import Find, Verdict
from bisectbot.core.records import Ask, CommitVerdict, distinct_runs
from bisectbot.core.reports import BisectReport, BisectStatus, ConfigSummary, Environment, ReferenceSummary
from bisectbot.core.search import SearchResult, SkipBlock, bisect_search, presumed, skip_blocks
from bisectbot.errors import EndpointError
from bisectbot.pipeline.events import (ArmStarted, BisectStarted, BlockOfSkips, Confirming, EndpointStarted, Events,
                                       StepStarted, StickySkip, StickyVisit, StrategyChosen)
from bisectbot.pipeline.verdict import StickyFeed, Tester, Untestable


@dataclass(frozen=True)
class BisectPlan:
    """A bisect decided before it runs: which commits, which job, at which error level."""

    job: str
    line: tuple[str, ...]          # the first-parent line good..bad, oldest first
    good_ref: str                  # the refs as the user gave them
    bad_ref: str
    find: Find
    strategy: str                  # auto | plain | sticky, as asked
    level: float                   # per-verdict alpha = beta
    config_path: str

    @property
    def n(self) -> int:
        return len(self.line)

    @property
    def good(self) -> str:
        return self.line[0]

    @property
    def bad(self) -> str:
        return self.line[-1]

    @property
    def broken_pos(self) -> int:
        return self.n - 1 if self.find is Find.BAD else 0

    @property
    def working_pos(self) -> int:
        return 0 if self.find is Find.BAD else self.n - 1

    def ref(self, name: str) -> str:
        return self.good_ref if name == "good" else self.bad_ref

    def ask(self, role: str, **kw: object) -> Ask:
        """A question at this bisect's per-step error level."""
        return Ask(role=role, alpha=self.level, beta=self.level, **kw)  # type: ignore[arg-type]


@dataclass(frozen=True)
class ReportContext:
    """What a report carries besides the verdicts: the reference, the config, the machine."""

    reference: ReferenceSummary
    config: ConfigSummary
    environment: Environment


@dataclass(frozen=True)
class Found:
    """What the search concluded: the boundary, and for sticky its posterior probability."""

    result: SearchResult
    strategy: str
    posterior: float | None = None


def steps_estimate(n: int) -> int:
    """How many search steps plain bisection needs over n commits (both ends known)."""
    return max(1, math.ceil(math.log2(max(n - 1, 2))))


class Bisection:
    """One bisect run; each method is one stage, `verdicts` collects what they reached."""

    def __init__(self, plan: BisectPlan, tester: Tester, events: Events):
        self.plan, self.tester, self.events = plan, tester, events
        self.verdicts: list[CommitVerdict] = []

    def test(self, pos: int, ask: Ask) -> CommitVerdict:
        v = self.tester.verdict(self.plan.line[pos], ask)
        self.verdicts.append(v)
        return v

    # -- 1. endpoints --------------------------------------------------------------------------
    def endpoints(self) -> None:
        plan = self.plan
        broken, working = plan.find.broken_ref_name, plan.find.working_ref_name
        for name, pos, want in ((broken, plan.broken_pos, Verdict.BAD), (working, plan.working_pos, Verdict.GOOD)):
            self.events.emit(EndpointStarted(name, plan.ref(name), plan.line[pos]))
            v = self.test(pos, plan.ask(f"{name}-endpoint"))
            if v.verdict is not want:
                raise EndpointError(_endpoint_message(name, plan.ref(name), v, want))
        for arm in self.tester.cfg.arms:
            for name, pos in ((broken, plan.broken_pos), (working, plan.working_pos)):
                self.events.emit(ArmStarted(arm, plan.line[pos]))
                self.test(pos, Ask(role=f"{name}-endpoint", alpha=self.tester.cfg.test.alpha,
                                   beta=self.tester.cfg.test.beta, arm=arm))

    # -- 2. the bad model ----------------------------------------------------------------------
    def bad_model(self) -> CommitVerdict:
        """Keep measuring the broken endpoint until q̂ is precise relative to the bug."""
        plan = self.plan
        name = plan.find.broken_ref_name
        model = self.test(plan.broken_pos, plan.ask(f"{name}-model", mode="bad-model"))
        if model.verdict is not Verdict.BAD:
            raise EndpointError(_endpoint_message(name, plan.ref(name), model, Verdict.BAD))
        return model

    def choose_strategy(self, model: CommitVerdict) -> str:
        """`auto`: plain for gross bugs (builds dominate), sticky for subtle ones (runs do)."""
        if self.plan.strategy != "auto":
            return self.plan.strategy
        strategy = "sticky" if stats.prefer_sticky(list(model.counts.values())) else "plain"
        self.events.emit(StrategyChosen(strategy, sum(model.counts.values())))
        return strategy

    # -- 3. search -----------------------------------------------------------------------------
    def search(self, strategy: str, model: CommitVerdict) -> Found:
        if strategy == "sticky":
            return self._sticky(model)
        plan = self.plan
        q_bad = self._q_bad(model)
        steps = steps_estimate(plan.n)
        asked: list[int] = []
        answers: list[Verdict] = []
        signatures: dict[int, str] = {}

        def oracle(pos: int) -> tuple[Verdict, str]:
            self.events.emit(StepStarted(len(asked) + 1, steps, plan.line[pos], pos, plan.n - 1))
            v = self.test(pos, plan.ask("step", mode="two-point", q_bad=q_bad))
            answer = plan.find.search_verdict(v.verdict)
            asked.append(pos)
            answers.append(answer)
            if not answer.informative:
                signatures[pos] = v.signature
                self._announce_block(pos, skip_blocks(asked, answers, signatures))
            return answer, v.signature

        return Found(bisect_search(plan.n, oracle), "plain")

    def _announce_block(self, pos: int, blocks: tuple[SkipBlock, ...]) -> None:
        block = next((b for b in blocks if b.first <= pos <= b.last), None)
        if block is not None and block.commits > 1 and block.signature:
            line = self.plan.line
            self.events.emit(BlockOfSkips(line[block.first], line[block.last], block.commits, block.signature))

    def _q_bad(self, model: CommitVerdict) -> tuple[float, ...]:
        return stats.kt_smooth([model.counts[name] for name in self.tester.reference.names])

    def _sticky(self, model: CommitVerdict) -> Found:
        """Probabilistic bisection (stats.sticky_bisect) over the commits that can be tested.

        A commit that cannot be built or run is dropped and the search restarted on the rest
        from scratch; its stored runs replay, so a restart costs nothing. Commits between two
        dropped ones that failed alike (none of them run between) are dropped as presumed alike.
        Each tested commit is then recorded as a verdict on the side the final posterior puts it."""
        plan, ref = self.plan, self.tester.reference
        bad_counts = [model.counts[name] for name in ref.names]
        positions = list(range(plan.n))  # the testable positions of the line
        dropped: dict[int, str] = {}
        ran: set[int] = set()  # positions that gave at least one counted run
        while True:
            # sticky_bisect wants the working end first: with find=fixed walk the line backwards
            order = positions if plan.find is Find.BAD else positions[::-1]
            feeds: dict[int, StickyFeed] = {}
            current: list[int] = []

            def run(i: int) -> int:
                pos = order[i]
                current[:] = [pos]
                if pos not in feeds:
                    self.events.emit(StickyVisit(plan.line[pos], pos, plan.n - 1))
                    feeds[pos] = self.tester.sticky_feed(plan.line[pos])
                category = feeds[pos].next()
                ran.add(pos)
                return category

            try:
                res = stats.sticky_bisect(len(order), run, ref.estimate, bad_counts,
                                          confidence=1 - plan.level,
                                          max_runs=self.tester.cfg.run.max_runs * plan.n)
                break
            except Untestable as exc:
                pos = current[0]
                self.events.emit(StickySkip(plan.line[pos], str(exc)))
                self.verdicts.append(feeds[pos].verdict(Verdict.SKIP, str(exc), exc.signature))
                dropped[pos] = exc.signature
                alike = presumed(dropped, sorted(ran))
                for p in [pos, *(p for p, sig in alike.items() if sig == exc.signature)]:
                    if p in positions and p not in (0, plan.n - 1):
                        positions.remove(p)
                self._announce_block(pos, skip_blocks(sorted(dropped), [Verdict.SKIP] * len(dropped), dropped))
            finally:
                for feed in feeds.values():
                    feed.close()
        # In `order`, res.culprit is the first broken position and the one before it the last
        # working one; in line order that is (last good, first bad), or with find=fixed
        # (last broken, first fixed): the search result's (last_good, first_bad) either way.
        broken, working = order[res.culprit], order[res.culprit - 1]
        boundary = (working, broken) if plan.find is Find.BAD else (broken, working)
        why = (f"sticky bisection: P({plan.find.what} = {plan.line[boundary[1]][:12]}) "
               f"= {res.posterior:.4f} after {res.runs} runs, {res.visits} visits")
        for pos, feed in sorted(feeds.items()):
            on_broken_side = pos >= broken if plan.find is Find.BAD else pos <= broken
            self.verdicts.append(feed.verdict(Verdict.BAD if on_broken_side else Verdict.GOOD, why))
        blocks = skip_blocks(sorted(dropped), [Verdict.SKIP] * len(dropped), dropped)
        return Found(SearchResult(*boundary, blocks=blocks), "sticky", res.posterior)

    # -- 4. confirm ----------------------------------------------------------------------------
    def confirm(self, found: Found, model: CommitVerdict) -> tuple[BisectStatus, str]:
        plan, result = self.plan, found.result
        culprit = result.first_bad  # the first bad one, or with find=fixed the first fixed one
        if found.posterior is not None and found.posterior < 1 - plan.level:
            return BisectStatus.UNCONFIRMED, (f"sticky bisection ran out of runs with "
                                              f"P({plan.find.what} = {plan.line[culprit][:12]}) "
                                              f"= {found.posterior:.4f} only")
        if not result.exact:
            inside = [b for b in result.blocks if b.last >= result.last_good + 1 and b.first <= result.first_bad - 1]
            why = "; ".join(self._block_text(b) for b in inside if b.signature) or "the commits between could not be decided"
            return BisectStatus.AMBIGUOUS, (
                f"{len(result.candidates)} candidates between {plan.line[result.last_good][:12]} and "
                f"{plan.line[result.first_bad][:12]}: {why}")
        self.events.emit(Confirming(plan.line[culprit]))
        # Against the reference itself, not "closer to which endpoint": a history with more than
        # one change (a mild bug that a later commit made gross, as real histories have) puts a
        # third distribution between the endpoints, which the two-point steps can place on
        # either side. Confirmed only when the culprit departs from the reference and its parent
        # does not.
        again = self.test(culprit, plan.ask("retest-culprit", block=1))
        parent = self.test(culprit - 1, plan.ask("retest-parent", block=1))
        if again.verdict is plan.find.culprit_verdict and parent.verdict is plan.find.parent_verdict:
            return BisectStatus.FOUND, f"{plan.find.what} commit is {plan.line[culprit]}"
        if parent.verdict is plan.find.culprit_verdict:
            return BisectStatus.UNCONFIRMED, (
                f"the candidate's parent {plan.line[culprit - 1][:12]} tests {parent.verdict.value.upper()} "
                f"against the reference too: the first change lies before it (bisect from "
                f"{plan.line[0][:12]} to {plan.line[culprit - 1][:12]})")
        return BisectStatus.UNCONFIRMED, (f"re-test on fresh seeds against the reference disagrees: candidate "
                                          f"{again.verdict.value.upper()}, parent {parent.verdict.value.upper()}")

    def _block_text(self, block: SkipBlock) -> str:
        """'12 commits 2024-06-01 … 2024-10-21 (3 tried): runs crash: …'."""
        first, last = (self.tester.runner.workspace.info(self.plan.line[p]).date[:10] for p in (block.first, block.last))
        span = f"{block.commits} commits {first} … {last}" if block.commits > 1 else f"1 commit {first}"
        return f"{span} ({len(block.tested)} tried): {block.signature}"

    def skip_block_summaries(self, blocks: tuple[SkipBlock, ...]) -> list[dict[str, Any]]:
        line = self.plan.line
        return [{"first": line[b.first], "last": line[b.last], "commits": b.commits, "tried": len(b.tested),
                 "signature": b.signature, "text": self._block_text(b)} for b in blocks]

    # -- 5. summary ----------------------------------------------------------------------------
    def summary(self, found: Found, status: BisectStatus, message: str, context: ReportContext) -> BisectReport:
        plan, verdicts = self.plan, self.verdicts
        culprit = plan.line[found.result.first_bad] if status is BisectStatus.FOUND else None
        informative = [v for v in verdicts if v.verdict.informative and v.arm == "main"
                       and v.mode in ("reference", "two-point")]
        # Union bound: wrong only if a verdict on the way is wrong (or, sticky, the posterior is).
        doubt = (sum(max(v.alpha, v.beta) for v in informative)
                 + (1 - found.posterior if found.posterior else 0))
        return BisectReport(
            job=plan.job, status=status, find=plan.find, first_bad=culprit,
            first_bad_subject=self.tester.subject(culprit) if culprit else None,
            last_good=plan.line[found.result.last_good],
            candidates=[plan.line[p] for p in found.result.candidates],
            good=plan.good, bad=plan.bad, good_ref=plan.good_ref, bad_ref=plan.bad_ref,
            commits=plan.n, builds=len({v.sha for v in verdicts if v.arm == "main"}),
            builds_bound=math.ceil(math.log2(plan.n)) + 3, runs=distinct_runs(verdicts),
            runs_executed=sum(v.executed for v in verdicts), retried=sum(v.retried for v in verdicts),
            confidence=max(0.0, 1.0 - doubt), step_alpha=plan.level, message=message,
            verdicts=list(verdicts), reference=context.reference, config=context.config,
            environment=context.environment, strategy=found.strategy,
            extra={"strategy_requested": plan.strategy},
            skip_blocks=self.skip_block_summaries(found.result.blocks),
            reproduce=reproduce_line(plan, found.strategy),
        )


def run_bisect(plan: BisectPlan, tester: Tester, events: Events, context: ReportContext) -> BisectReport:
    """All five stages; raises EndpointError when an endpoint does not test as given."""
    events.emit(BisectStarted(plan.n, plan.good, plan.bad, plan.find.value, plan.level, steps_estimate(plan.n)))
    bisection = Bisection(plan, tester, events)
    bisection.endpoints()
    model = bisection.bad_model()
    found = bisection.search(bisection.choose_strategy(model), model)
    status, message = bisection.confirm(found, model)
    return bisection.summary(found, status, message, context)


def reproduce_line(plan: BisectPlan, strategy: str) -> str:
    extra = " --find fixed" if plan.find is Find.FIXED else ""
    return (f"bisectbot bisect {plan.config_path} --good {plan.good} --bad {plan.bad}{extra} "
            f"--strategy {strategy}")


def _endpoint_message(name: str, ref: str, v: CommitVerdict, want: Verdict) -> str:
    what = {Verdict.SKIP: "cannot be tested", Verdict.INCONCLUSIVE: "is inconclusive"}.get(
        v.verdict, f"tests {v.verdict.value.upper()}")
    return (f"{name} ref {ref} ({v.sha[:12]}) {what}, expected {want.value.upper()}: "
            f"{v.reason} (after {v.runs} runs)")
