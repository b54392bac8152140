"""Bisect stage: from a planned range to the first commit that departs from the reference.

The stages, in order, each verdict stored by the job as it is reached:
1. endpoints: the broken endpoint (bad, or the old one with find=fixed) must test BAD with the
   generic test and the working one GOOD (EndpointError otherwise); cross-check arms get their
   own verdicts at both endpoints, reported beside the main ones (they do not steer the search);
2. model: the broken endpoint is measured further (same seeds onwards, budget test.model_runs)
   until its smoothed distribution q̂ is precise relative to the size of the bug; `auto` picks
   the strategy here;
3. search: plain binary search with two-point steps, or the sticky Bayesian bisection — both
   accelerators only; a commit they cannot place (a step UNLIKE either end, a sticky visit that
   never settles) is probed against the reference on fresh seeds, and the search goes on on its
   side;
4. confirm: the candidate and its parent re-tested on fresh seeds against the reference (the
   generic test). A parent that departs too means a change point was crossed: the search goes on
   below it, with its distribution as the new broken end; a candidate that does not depart
   means a step erred: the search goes on above it (`Bisection.first_departure`);
5. summary: the report, whose confidence is a union bound over the tests against the
   reference it rests on (re-tests and probes) and the control sample's delta, with the change
   points crossed and the assumptions the bound needs.
Per-verdict error levels come from the whole-bisect confidence (`BisectPlan.level`). Everything
is replayed from the state database on a rerun: a killed bisect resumes where it was.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from typing import Any

from bisectbot.core import stats
from bisectbot.core.inputs import Narrowed
from bisectbot.core.outcome import Find, Verdict
from bisectbot.core.records import Ask, CommitVerdict, distinct_runs
from bisectbot.core.reports import BisectReport, BisectStatus, ConfigSummary, Environment, ReferenceSummary
from bisectbot.core.search import SearchResult, SkipBlock, bisect_search, kary_search, presumed, skip_blocks
from bisectbot.errors import EndpointError
from bisectbot.pipeline.budget import Budget, BudgetSpent
from bisectbot.pipeline.events import (ArmStarted, BisectStarted, BlockOfSkips, BudgetReached, Confirming,
                                       EndpointStarted, Events, RoundStarted, StepStarted, StickySkip, StickyVisit,
                                       StrategyChosen)
from bisectbot.pipeline.outputs import side_by_side
from bisectbot.pipeline.verdict import StickyFeed, Tester, Untestable


@dataclass(frozen=True)
class Narrowing:
    """How a bisect's line is narrowed: `paths` restricts (as `git bisect start -- <paths>`),
    `also` adds paths that always count as inputs, `enabled` False keeps every commit."""

    enabled: bool = True
    paths: tuple[str, ...] = ()
    also: tuple[str, ...] = ()

    def job_parts(self) -> tuple[str, ...]:
        """What the job id must include (nothing for the default, so existing ids stay)."""
        parts = [] if self.enabled else ["all-commits"]
        parts += [f"paths={p}" for p in self.paths] + [f"also={p}" for p in self.also]
        return tuple(parts)


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
    narrowing: Narrowing = Narrowing()  # how the line is to be narrowed (pipeline.narrow)
    narrowed: Narrowed | None = None  # once it is: the full line and what its skipped commits stand for
    user_skipped: tuple[str, ...] = ()  # commits the user skipped (--skip, --exclude): never built nor tested

    @property
    def total(self) -> int:
        """Commits in the whole range (`n` counts those the search runs over)."""
        return len(self.narrowed.full) if self.narrowed is not None else self.n

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

    def skipped_in(self, lo: int, hi: int) -> list[int]:
        """Positions strictly between lo and hi that the user skipped, relative to lo."""
        skip = set(self.user_skipped)
        return [p - lo for p in range(lo + 1, hi) if self.line[p] in skip]

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
    """What one search concluded: the boundary, for sticky its posterior probability, and why
    it stopped short when it did (a sticky search out of budget, or at a commit it could not
    place on either side)."""

    result: SearchResult
    strategy: str
    posterior: float | None = None
    unfinished: str | None = None
    stuck: int | None = None   # a position the search could not place (fits neither side)


@dataclass(frozen=True)
class ChangePoint:
    """A boundary the search found that was not the first departure: its parent departs from
    the reference too. `culprit` is its position; the verdicts are the two re-tests."""

    position: int
    parent: CommitVerdict
    culprit: CommitVerdict


@dataclass(frozen=True)
class Departure:
    """The outcome of searching for the first departure: status and message, the last search,
    the change points crossed on the way (latest first), the strategies used."""

    status: BisectStatus
    message: str
    found: Found
    crossed: list[ChangePoint]
    strategies: list[str]
    stop: BudgetSpent | None = None  # status stopped: which limit, and why


def _shifted(res: SearchResult, by: int) -> SearchResult:
    """A search result over positions 0..m of a sub-line, in the whole line's positions."""
    return SearchResult(res.last_good + by, res.first_bad + by, tuple(p + by for p in res.asked), res.answers,
                        tuple(SkipBlock(b.first + by, b.last + by, b.signature, tuple(t + by for t in b.tested))
                              for b in res.blocks))


DECISIVE_ROLES = ("retest-culprit", "retest-parent", "probe")


def steps_estimate(n: int) -> int:
    """How many search steps plain bisection needs over n commits (both ends known)."""
    return max(1, math.ceil(math.log2(max(n - 1, 2))))


class Bisection:
    """One bisect run; each method is one stage, `verdicts` collects what they reached."""

    def __init__(self, plan: BisectPlan, tester: Tester, events: Events, budget: Budget | None = None):
        self.plan, self.tester, self.events = plan, tester, events
        self.budget = budget  # --max-builds / --deadline: checked before each verdict (and build)
        self.verdicts: list[CommitVerdict] = []
        self.rounds = 0  # search rounds (a step, or K commits at once on a cluster)

    @property
    def width(self) -> int:
        """Commits tested at once: the cluster's workers (pipeline.cluster), else 1."""
        return int(getattr(self.tester, "width", 1))

    def test_many(self, items: list[tuple[str, Ask]]) -> list[CommitVerdict]:
        """Several verdicts: at once on a cluster, one after the other otherwise."""
        if self.width > 1 and len(items) > 1:
            self._within_budget()
            out = list(self.tester.verdicts(items))  # type: ignore[attr-defined]
            self.verdicts.extend(out)
            return out
        return [self.test_sha(sha, ask) for sha, ask in items]

    def test(self, pos: int, ask: Ask) -> CommitVerdict:
        return self.test_sha(self.plan.line[pos], ask)

    def test_sha(self, sha: str, ask: Ask) -> CommitVerdict:
        self._within_budget()
        v = self.tester.verdict(sha, ask)
        self.verdicts.append(v)
        return v

    def _within_budget(self) -> None:
        if self.budget is not None:
            self.budget.before_step()

    def parent_of(self, pos: int) -> str:
        """The commit before line[pos] on the whole first-parent line: line[pos − 1], or the
        last commit skipped after it as unable to change the binary."""
        plan = self.plan
        skipped = plan.narrowed.stands_for.get(plan.line[pos - 1], ()) if plan.narrowed else ()
        return skipped[-1] if skipped else plan.line[pos - 1]

    # -- 1. endpoints --------------------------------------------------------------------------
    def _log_command(self, v: CommitVerdict) -> str:
        """For an endpoint whose build failed: the command that prints the whole build log."""
        if v.verdict is not Verdict.SKIP or v.build in ("ok", "") or not v.build_log:
            return ""
        return str(self.tester.runner.builder.log_command(v.sha))

    def endpoints(self) -> None:
        plan = self.plan
        broken, working = plan.find.broken_ref_name, plan.find.working_ref_name
        ends = ((broken, plan.broken_pos, Verdict.BAD), (working, plan.working_pos, Verdict.GOOD))
        if self.width > 1:  # both at once
            for name, pos, _ in ends:
                self.events.emit(EndpointStarted(name, plan.ref(name), plan.line[pos]))
            got = self.test_many([(plan.line[pos], plan.ask(f"{name}-endpoint")) for name, pos, _ in ends])
            for (name, _, want), v in zip(ends, got):
                if v.verdict is not want:
                    self._refuse_swapped(name, v, want)
                    raise EndpointError(_endpoint_message(name, plan.ref(name), v, want, self._log_command(v)))
        for name, pos, want in ends if self.width == 1 else ():
            self.events.emit(EndpointStarted(name, plan.ref(name), plan.line[pos]))
            v = self.test(pos, plan.ask(f"{name}-endpoint"))
            if v.verdict is not want:
                self._refuse_swapped(name, v, want)
                raise EndpointError(_endpoint_message(name, plan.ref(name), v, want, self._log_command(v)))
        for arm in self.tester.cfg.arms:
            for name, pos in ((broken, plan.broken_pos), (working, plan.working_pos)):
                self.events.emit(ArmStarted(arm, plan.line[pos]))
                self.test(pos, Ask(role=f"{name}-endpoint", alpha=self.tester.cfg.test.alpha,
                                   beta=self.tester.cfg.test.beta, arm=arm))

    def _refuse_swapped(self, name: str, v: CommitVerdict, want: Verdict) -> None:
        """An end that tests the opposite of what it should: when the other end does too, the
        ends are the other way round for this --find (a fix, not a breakage, or the reverse):
        EndpointError that says which --find to rerun with. Otherwise return (the caller's
        error says what is wrong)."""
        plan = self.plan
        if v.verdict is not want.flipped():
            return
        other = plan.find.working_ref_name if name == plan.find.broken_ref_name else plan.find.broken_ref_name
        pos = plan.working_pos if other == plan.find.working_ref_name else plan.broken_pos
        other_want = Verdict.GOOD if other == plan.find.working_ref_name else Verdict.BAD
        seen = next((x for x in self.verdicts if x.arm == "main" and x.role == f"{other}-endpoint"), None)
        if seen is None:  # the other end is not tested yet (serially, the broken end comes first)
            self.events.emit(EndpointStarted(other, plan.ref(other), plan.line[pos]))
            seen = self.test(pos, plan.ask(f"{other}-endpoint"))
        if seen.verdict is not other_want.flipped():
            return
        good_v, bad_v = (v, seen) if name == "good" else (seen, v)
        if plan.find is Find.BAD:
            hint = ("the bug went away between them: to find the commit that fixed it, rerun with --find fixed "
                    "(or swap --good and --bad if they were mixed up)")
        else:
            hint = ("the bug came in between them: to find the commit that broke it, rerun without --find fixed "
                    "(--find bad)")
        raise EndpointError(
            f"the ends are the other way round for --find {plan.find.value}: --good {plan.good_ref} "
            f"({plan.good[:12]}) tests {good_v.verdict.value.upper()} and --bad {plan.bad_ref} ({plan.bad[:12]}) "
            f"tests {bad_v.verdict.value.upper()} (BAD = departs from the reference, GOOD = like it); {hint}")

    # -- 2. the bad model ----------------------------------------------------------------------
    def bad_model(self, pos: int | None = None) -> CommitVerdict:
        """Keep measuring a broken-side commit (the broken endpoint, or later a commit found to
        depart already) until q̂ is precise relative to the bug; its own budget (test.model_runs).
        Out of budget, q̂ is used as it is: the search only steers (a noisy q̂ costs runs, the
        re-tests against the reference decide); only a broken endpoint that cannot run stops."""
        plan = self.plan
        pos = plan.broken_pos if pos is None else pos
        name = plan.find.broken_ref_name
        model = self.test(pos, plan.ask(f"{name}-model", mode="bad-model"))
        if model.verdict is Verdict.SKIP and pos == plan.broken_pos:
            raise EndpointError(_endpoint_message(name, plan.ref(name), model, Verdict.BAD,
                                                   self._log_command(model)))
        return model

    def choose_strategy(self, model: CommitVerdict) -> str:
        """`auto`: plain for gross bugs (builds dominate), sticky for subtle ones (runs do)."""
        if hasattr(self.tester, "verdicts"):  # on a cluster (even of one worker): plain search,
            return "plain"                     # the sticky feed runs here, not on the workers
        if self.plan.strategy != "auto":
            return self.plan.strategy
        strategy = "sticky" if stats.prefer_sticky(list(model.counts.values())) else "plain"
        self.events.emit(StrategyChosen(strategy, sum(model.counts.values())))
        return strategy

    # -- 3. search -----------------------------------------------------------------------------
    def search(self, strategy: str, model: CommitVerdict, lo: int, hi: int) -> Found:
        """The boundary between lo (known on the working side) and hi (known broken), searched
        with two-point steps against q̂ (plain) or the sticky Bayesian bisection."""
        if strategy == "sticky":
            return self._sticky(model, lo, hi)
        plan = self.plan
        q_bad = self._q_bad(model)
        steps = steps_estimate(hi - lo + 1)
        asked: list[int] = []
        answers: list[Verdict] = []
        signatures: dict[int, str] = {}

        def oracle(i: int) -> tuple[Verdict, str]:
            pos = lo + i
            self.events.emit(StepStarted(len(asked) + 1, steps, plan.line[pos], pos, plan.n - 1))
            v = self.test(pos, plan.ask("step", mode="two-point", q_bad=q_bad))
            if v.verdict in (Verdict.UNLIKE, Verdict.INCONCLUSIVE):
                # like neither end (a third distribution, e.g. a milder form of the bug): the
                # reference decides which side it is on, on fresh seeds
                v = self.probe(pos, model)
            answer = plan.find.search_verdict(v.verdict)
            asked.append(pos)
            answers.append(answer)
            if not answer.informative:
                signatures[pos] = v.signature
                self._announce_block(pos, skip_blocks(asked, answers, signatures))
            return answer, v.signature

        skip = plan.skipped_in(lo, hi)
        if self.width > 1:
            res, _ = kary_search(hi - lo + 1, self.width, lambda ps: self._round(ps, lo, model, q_bad), skip)
            return Found(_shifted(res, lo), "plain")
        res = bisect_search(hi - lo + 1, oracle, skip)
        self.rounds += len(res.asked)
        return Found(_shifted(res, lo), "plain")

    def _round(self, offsets: list[int], lo: int, model: CommitVerdict, q_bad: tuple[float, ...]
               ) -> list[tuple[Verdict, str]]:
        """One round on a cluster: the commits at lo + offsets, each with a two-point step; a
        commit like neither end is then probed against the reference."""
        plan = self.plan
        positions = [lo + i for i in offsets]
        self.rounds += 1
        self.events.emit(RoundStarted(self.rounds, tuple(plan.line[p] for p in positions)))
        got = self.test_many([(plan.line[p], plan.ask("step", mode="two-point", q_bad=q_bad)) for p in positions])
        out = []
        for pos, v in zip(positions, got):
            if v.verdict in (Verdict.UNLIKE, Verdict.INCONCLUSIVE):
                v = self.probe(pos, model)
            out.append((plan.find.search_verdict(v.verdict), v.signature))
        return out

    def probe(self, pos: int, model: CommitVerdict) -> CommitVerdict:
        """A commit the search could not place, tested against the reference on fresh seeds."""
        return self.test(pos, self.plan.ask("probe", block=1, q_bad=self._q_bad(model)))

    def _announce_block(self, pos: int, blocks: tuple[SkipBlock, ...]) -> None:
        block = next((b for b in blocks if b.first <= pos <= b.last), None)
        if block is not None and block.commits > 1 and block.signature:
            line = self.plan.line
            self.events.emit(BlockOfSkips(line[block.first], line[block.last], block.commits, block.signature))

    def _q_bad(self, model: CommitVerdict) -> tuple[float, ...]:
        return stats.kt_smooth([model.counts[name] for name in self.tester.reference.names])

    def _sticky(self, model: CommitVerdict, lo: int, hi: int) -> Found:
        """Probabilistic bisection (stats.sticky_bisect) over the commits lo..hi that can be tested.

        A commit that cannot be built or run is dropped and the search restarted on the rest
        from scratch; its stored runs replay, so a restart costs nothing. Commits between two
        dropped ones that failed alike (none of them run between) are dropped as presumed alike.
        Each tested commit is then recorded as a verdict on the side the final posterior puts it.
        The good side is learned around the glitch-tolerant reference; every commit runs its own
        seeds, so no run is counted twice; the search stops at test.search_runs (then: ambiguous)."""
        plan, ref = self.plan, self.tester.reference
        bad_counts = [model.counts[name] for name in ref.names]
        good = self.tester.reference.tolerant(self.tester.cfg.test.indifference)
        user = {lo + i for i in plan.skipped_in(lo, hi)}
        positions = [p for p in range(lo, hi + 1) if p not in user]  # the testable positions
        stop = stats.STICKY_STOP  # it only steers: the re-tests against the reference decide
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
                res = stats.sticky_bisect(len(order), run, good, bad_counts, confidence=stop,
                                          max_runs=self.tester.cfg.test.search_runs,
                                          good_strength=stats.STICKY_GOOD_STRENGTH,
                                          visit_runs=min(stats.STICKY_VISIT_RUNS, self.tester.cfg.run.max_runs))
                break
            except Untestable as exc:
                pos = current[0]
                self.events.emit(StickySkip(plan.line[pos], str(exc)))
                self.verdicts.append(feeds[pos].verdict(Verdict.SKIP, str(exc), exc.signature))
                dropped[pos] = exc.signature
                alike = presumed(dropped, sorted(ran))
                for p in [pos, *(p for p, sig in alike.items() if sig == exc.signature)]:
                    if p in positions and p not in (lo, hi):
                        positions.remove(p)
                self._announce_block(pos, skip_blocks(sorted(dropped), [Verdict.SKIP] * len(dropped), dropped))
            finally:
                for feed in feeds.values():
                    feed.close()
        self.rounds += res.visits
        # In `order`, res.culprit is the first broken position and the one before it the last
        # working one; in line order that is (last good, first bad), or with find=fixed
        # (last broken, first fixed): the search result's (last_good, first_bad) either way.
        confident = res.posterior >= stop
        first, last = (res.culprit, res.culprit) if confident else res.credible
        broken, working = order[first], order[first - 1]
        if not confident:  # the budget ran out: the credible range, as candidates
            broken = order[last]
        boundary = (working, broken) if plan.find is Find.BAD else (broken, working)
        why = (f"sticky bisection: P({plan.find.what} = {plan.line[order[res.culprit]][:12]}) "
               f"= {res.posterior:.4f} after {res.runs} runs, {res.visits} visits")
        split = order[res.culprit]
        for pos, feed in sorted(feeds.items()):
            on_broken_side = pos >= split if plan.find is Find.BAD else pos <= split
            self.verdicts.append(feed.verdict(Verdict.BAD if on_broken_side else Verdict.GOOD, why))
        blocks = skip_blocks(sorted(dropped), [Verdict.SKIP] * len(dropped), dropped)
        if res.stuck is not None:
            return Found(SearchResult(*boundary, blocks=blocks), "sticky", res.posterior, stuck=order[res.stuck])
        return Found(SearchResult(*boundary, blocks=blocks), "sticky", res.posterior,
                     None if confident else f"the sticky search used its budget of "
                                            f"{self.tester.cfg.test.search_runs} runs: {why}")

    # -- 4. confirm, and search on below a boundary that is not the first departure -----------
    def first_departure(self, model: CommitVerdict) -> Departure:
        """Search, then confirm the boundary against the reference itself; until it holds.

        The search's steps only accelerate: a two-point step asks "closer to the good end or to
        the bad end's q̂?" and a sticky search assumes one bad distribution. A history that
        changed twice (a mild bug that a later commit made gross) puts a third distribution in
        between, which either can place on the wrong side. So the candidate and its parent are
        re-tested on fresh seeds with the generic test, and:
          candidate departs, parent does not  → found (the boundary is GOOD | BAD against the reference);
          the parent departs too              → a change point crossed: search on below it, its
                                                distribution as the new broken end;
          the candidate does not depart       → the step was wrong: search on above it;
          anything else (in the indifference zone, undecided, skipped) → unconfirmed, with why.
        A commit the search could not place (a two-point step UNLIKE either end, a sticky visit
        that never settles) is probed the same way, and the search goes on on its side.
        Only these tests decide what is reported, so the stated confidence is a union bound
        over them (steps cost runs, never correctness); the loop stops before that bound would
        fall below the configured confidence.
        """
        plan, find = self.plan, self.plan.find
        lo, hi = 0, plan.n - 1
        crossed: list[ChangePoint] = []
        strategies: list[str] = []
        allowed = 1 - self.tester.cfg.test.confidence + 1e-12
        found = Found(SearchResult(lo, hi), "plain")
        rounds = 0
        while True:
            strategy = self.choose_strategy(model)
            strategies.append(strategy)
            found = self.search(strategy, model, lo, hi)
            result = found.result
            rounds += 1
            needed = 1 if found.stuck is not None else 2
            if rounds > 1 and self._doubt() + needed * plan.level > allowed:
                return Departure(BisectStatus.UNCONFIRMED, (
                    f"no boundary confirmed within the error budget (confidence "
                    f"{self.tester.cfg.test.confidence:g}): {len(self._decisive())} tests against the reference "
                    f"at {plan.level:.1e} each, {len(crossed)} change point(s) crossed"), found, crossed, strategies)
            if found.stuck is not None:  # a commit like neither side: the reference places it
                side = self.probe(found.stuck, model).verdict
                if side is find.culprit_verdict and found.stuck > lo:
                    hi = found.stuck
                    if find is Find.BAD:
                        model = self.bad_model(hi)
                    continue
                if side is find.parent_verdict and found.stuck < hi:
                    lo = found.stuck
                    if find is Find.FIXED:
                        model = self.bad_model(lo)
                    continue
                return Departure(BisectStatus.UNCONFIRMED, (
                    f"commit {plan.line[found.stuck][:12]} fits neither side and its test against the "
                    f"reference is {side.value.upper()} (a distribution between eta and tolerance from "
                    f"the reference may be named either way)"), found, crossed, strategies)
            if found.unfinished is not None:
                return Departure(BisectStatus.AMBIGUOUS, found.unfinished, found, crossed, strategies)
            if not result.exact:
                inside = [b for b in result.blocks
                          if b.last >= result.last_good + 1 and b.first <= result.first_bad - 1]
                parts = [self._block_text(b) for b in inside if b.signature]
                if user := [plan.line[p][:12] for p in result.candidates if plan.line[p] in plan.user_skipped]:
                    parts.append(f"skipped by the user (--skip/--exclude): {', '.join(user)}")
                why = "; ".join(parts) or "the commits between could not be decided"
                return Departure(BisectStatus.AMBIGUOUS, (
                    f"{len(result.candidates)} candidates between {plan.line[result.last_good][:12]} and "
                    f"{plan.line[result.first_bad][:12]}: {why}"), found, crossed, strategies)
            culprit = result.first_bad
            self.events.emit(Confirming(plan.line[culprit]))
            q_bad = self._q_bad(model)  # the BAD test bets half on it: see stats.log_e_depart_many
            # the culprit and its own parent, even when the search skipped it as equivalent: the
            # answer does not rest on the input rule
            parent_sha = self.parent_of(culprit)
            again, parent = self.test_many([(plan.line[culprit], plan.ask("retest-culprit", block=1, q_bad=q_bad)),
                                            (parent_sha, plan.ask("retest-parent", block=1, q_bad=q_bad))])
            if again.verdict is find.culprit_verdict and parent.verdict is find.parent_verdict:
                return Departure(BisectStatus.FOUND, f"{find.what} commit is {plan.line[culprit]}", found,
                                 crossed, strategies)
            if parent_sha != plan.line[culprit - 1] and parent.verdict is not find.parent_verdict:
                return Departure(BisectStatus.UNCONFIRMED, (
                    f"the parent {parent_sha[:12]} of candidate {plan.line[culprit][:12]} tests "
                    f"{parent.verdict.value.upper()} on fresh seeds, but it was skipped as unable to change "
                    f"the binary (no input changed since {plan.line[culprit - 1][:12]}): the input rule "
                    f"missed something; rerun with --all-commits"), found, crossed, strategies)
            if parent.verdict is find.culprit_verdict and culprit - 1 > lo:
                crossed.append(ChangePoint(culprit, parent, again))
                hi = culprit - 1
                if find is Find.BAD:  # the broken end moved: learn its distribution
                    model = self.bad_model(hi)
                continue
            if again.verdict is find.parent_verdict and culprit < hi:
                lo = culprit
                if find is Find.FIXED:
                    model = self.bad_model(lo)
                continue
            why = (f"re-test on fresh seeds against the reference: candidate {plan.line[culprit][:12]} "
                   f"{again.verdict.value.upper()}, parent {plan.line[culprit - 1][:12]} {parent.verdict.value.upper()}")
            if Verdict.INCONCLUSIVE in (again.verdict, parent.verdict):
                why += (" (undecided: a distribution between eta and tolerance from the reference "
                        "may be named either way)")
            return Departure(BisectStatus.UNCONFIRMED, why, found, crossed, strategies)

    def stopped(self, stop: BudgetSpent) -> Departure:
        """A bisect ended by --max-builds or --deadline: the range the verdicts reached so far
        leave (the ends as given until they are tested), as status `stopped`. Everything
        finished is stored, so the same command resumes from here."""
        plan = self.plan
        self.events.emit(BudgetReached(str(stop)))
        where = {sha: i for i, sha in enumerate(plan.line)}
        working, broken = [0], [plan.n - 1]  # the ends as given, until tested
        for v in self.verdicts:
            if v.arm == "main" and v.sha in where:
                side = plan.find.search_verdict(v.verdict)
                if side is Verdict.GOOD:
                    working.append(where[v.sha])
                elif side is Verdict.BAD:
                    broken.append(where[v.sha])
        hi = min(broken)
        lo = max((p for p in working if p < hi), default=0)
        result = SearchResult(lo, hi)
        left = len(self._candidates(result))
        message = (f"stopped early: {stop}; the {plan.find.what} commit is one of the {left} commit(s) after "
                   f"{plan.line[lo][:12]} up to {plan.line[hi][:12]}; run the same command again to go on: it "
                   f"resumes from the state directory")
        return Departure(BisectStatus.STOPPED, message, Found(result, plan.strategy), [], [], stop)

    def _candidates(self, result: SearchResult) -> list[str]:
        """The possible culprits of a search result, with the commits skipped as equivalent among them."""
        plan = self.plan
        candidates = [plan.line[p] for p in result.candidates]
        if plan.narrowed is not None and len(candidates) > 1:
            candidates = plan.narrowed.expand(candidates[0], candidates[-2]) + [candidates[-1]]
        return candidates

    def _decisive(self) -> list[CommitVerdict]:
        """The tests against the reference on fresh seeds that decide what is reported (the
        re-tests, and probes of commits the search could not place)."""
        return [v for v in self.verdicts if v.arm == "main" and v.role in DECISIVE_ROLES]

    def _delta(self) -> float:
        """The control sample's price (0 for an exact reference)."""
        ref = self.tester.reference
        return ref.delta if ref.control is not None else 0.0

    def _doubt(self) -> float:
        """The union bound on a wrong answer so far: their error levels, plus a control sample's delta."""
        return sum(max(v.alpha, v.beta) for v in self._decisive()) + self._delta()

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
    def summary(self, dep: Departure, context: ReportContext) -> BisectReport:
        plan, verdicts, found = self.plan, self.verdicts, dep.found
        test = self.tester.cfg.test
        culprit = plan.line[found.result.first_bad] if dep.status is BisectStatus.FOUND else None
        narrowed = plan.narrowed
        candidates = self._candidates(found.result)
        gap = list(narrowed.stands_for.get(plan.line[found.result.last_good], ())) if narrowed else []
        # What is reported rests on the re-tests alone (the steps only steer): a wrong answer
        # needs one of them to be wrong, so the bound is their summed error levels, plus the
        # control sample's delta when the reference is one.
        retests = self._decisive()
        delta = self._delta()
        doubt = self._doubt()
        return BisectReport(
            job=plan.job, status=dep.status, find=plan.find, first_bad=culprit,
            first_bad_subject=self.tester.subject(culprit) if culprit else None,
            last_good=self.parent_of(found.result.first_bad) if culprit else plan.line[found.result.last_good],
            candidates=candidates,
            good=plan.good, bad=plan.bad, good_ref=plan.good_ref, bad_ref=plan.bad_ref,
            commits=plan.total, builds=len({v.sha for v in verdicts if v.arm == "main"}),
            builds_bound=math.ceil(math.log2(plan.n)) + 3, runs=distinct_runs(verdicts),
            runs_executed=sum(v.executed for v in verdicts), retried=sum(v.retried for v in verdicts),
            confidence=max(0.0, 1.0 - doubt) if dep.status is BisectStatus.FOUND else 0.0,
            step_alpha=plan.level, message=dep.message,
            verdicts=list(verdicts), reference=context.reference, config=context.config,
            environment=context.environment, strategy=dep.strategies[0] if dep.strategies else found.strategy,
            extra={"strategy_requested": plan.strategy, "strategies": dep.strategies},
            skip_blocks=self.skip_block_summaries(found.result.blocks),
            reproduce=reproduce_line(plan, dep.strategies[0] if dep.strategies else found.strategy),
            change_points=self._change_points(dep, culprit),
            assumptions=self._assumptions(dep, retests, delta),
            posterior=found.posterior, eta=test.indifference, tolerance=test.tolerance,
            searched=plan.n, skipped_equivalent=plan.total - plan.n, boundary_skipped=gap,
            rounds=self.rounds, workers=self.width,
            input_rule=narrowed.rule if narrowed is not None else "",
            stopped=None if dep.stop is None else {
                "by": dep.stop.by, "reason": str(dep.stop), "last_good": plan.line[found.result.last_good],
                "first_bad": plan.line[found.result.first_bad], "commits_left": len(candidates),
                "resume": "run the same command again (it resumes from the state directory)"},
            # the culprit's and its parent's first runs (here, not on a cluster: it would build locally)
            outputs=side_by_side(self.tester, plan.find, verdicts)
            if dep.status is BisectStatus.FOUND and self.width == 1 else None,
            user_skipped=[sha for sha in (narrowed.full if narrowed else plan.line) if sha in plan.user_skipped],
        )

    def _change_points(self, dep: Departure, culprit: str | None) -> list[dict[str, Any]]:
        """The first departure (when found), then every boundary the bisect stopped at on the
        way whose parent already departed, in line order; `before`/`after` are the re-tests'
        counts (fresh seeds) at the parent and at the commit."""
        line = self.plan.line
        out = []
        for cp in sorted(dep.crossed, key=lambda c: c.position):
            out.append({"commit": line[cp.position], "subject": self.tester.subject(line[cp.position]),
                        "first": False, "before": dict(cp.parent.counts), "after": dict(cp.culprit.counts),
                        "text": f"{line[cp.position][:12]}: a boundary the search stopped at, but its parent "
                                f"{cp.parent.sha[:12]} already departs from the reference "
                                f"({cp.parent.verdict.value.upper()} after {cp.parent.runs} runs), so the search "
                                f"went on below it"})
        if culprit is not None:
            last = {v.role: v for v in self.verdicts if v.arm == "main"}
            parent, again = last.get("retest-parent"), last.get("retest-culprit")
            out.insert(0, {"commit": culprit, "subject": self.tester.subject(culprit), "first": True,
                           "before": dict(parent.counts) if parent else {},
                           "after": dict(again.counts) if again else {},
                           "text": f"{culprit[:12]}: the first departure from the reference"})
        return out

    def _assumptions(self, dep: Departure, retests: list[CommitVerdict], delta: float) -> list[str]:
        """What the stated confidence rests on, from what this bisect saw."""
        test, ref = self.tester.cfg.test, self.tester.reference
        out = [f"the bound counts the {len(retests)} tests on fresh seeds against the reference that decided "
               f"(re-tests and probes, each at error ≤ {self.plan.level:.1e}); the search steps only steer",
               "once a commit departs from the reference, every later commit on the line departs too "
               "(no commit in between returns to it)",
               f"commits whose distribution is between eta {test.indifference:g} and tolerance "
               f"{test.tolerance:g} (total variation) from the reference may be named either way"]
        if dep.crossed:
            out.append(f"{len(dep.crossed)} later change point(s) crossed on the way: listed in change_points")
        if ref.control is not None:
            out.append(f"the reference is a control sample of {sum(ref.control)} runs; its delta "
                       f"{delta:g} is included")
        if dep.found.posterior is not None:
            out.append(f"the sticky search's posterior ({dep.found.posterior:.4f}) is a Bayesian probability "
                       f"under its model, reported apart (posterior), not part of the bound")
        stray = sum(v.counts.get(stats.OTHER, 0) for v in self.verdicts if v.arm == "main"
                    and v.verdict is Verdict.GOOD)
        if stray:
            out.append(f"{stray} stray outcome(s) seen at commits judged GOOD: within the indifference zone")
        return out


def run_bisect(plan: BisectPlan, tester: Tester, events: Events, context: ReportContext,
               budget: Budget | None = None) -> BisectReport:
    """All five stages; raises EndpointError when an endpoint does not test as given. With a
    `budget` that runs out, the report (status `stopped`) gives the range reached so far."""
    events.emit(BisectStarted(plan.n, plan.good, plan.bad, plan.find.value, plan.level, steps_estimate(plan.n)))
    bisection = Bisection(plan, tester, events, budget)
    try:
        bisection.endpoints()
        model = bisection.bad_model()
        departure = bisection.first_departure(model)
    except BudgetSpent as stop:
        departure = bisection.stopped(stop)
    return bisection.summary(departure, context)


def stopped_report(plan: BisectPlan, tester: Tester, events: Events, context: ReportContext,
                   stop: BudgetSpent) -> BisectReport:
    """The report of a bisect stopped before its stages began (while its ends were built to
    narrow the line): the whole range, as given."""
    bisection = Bisection(plan, tester, events)
    return bisection.summary(bisection.stopped(stop), context)


def reproduce_line(plan: BisectPlan, strategy: str) -> str:
    how = plan.narrowing
    extra = " --find fixed" if plan.find is Find.FIXED else ""
    extra += "".join(f" --paths {shlex.quote(p)}" for p in how.paths)
    extra += "".join(f" --also {shlex.quote(p)}" for p in how.also)
    extra += "" if how.enabled else " --all-commits"
    extra += "".join(f" --skip {sha[:12]}" for sha in plan.user_skipped)
    return (f"bisectbot bisect {plan.config_path} --good {plan.good} --bad {plan.bad}{extra} "
            f"--strategy {strategy}")


def _endpoint_message(name: str, ref: str, v: CommitVerdict, want: Verdict, log_command: str = "") -> str:
    what = {Verdict.SKIP: "cannot be tested", Verdict.INCONCLUSIVE: "is inconclusive"}.get(
        v.verdict, f"tests {v.verdict.value.upper()}")
    log = f"; the whole build log: {log_command}" if log_command else ""
    return (f"{name} ref {ref} ({v.sha[:12]}) {what}, expected {want.value.upper()}: "
            f"{v.reason} (after {v.runs} runs){log}")
