"""Bisect stage: from a planned range to the first commit that departs from the reference.

GOOD and BAD mean one thing everywhere: a test against the reference said so (GOOD = within
tolerance of it, BAD = departs by more than eta). The stages, in order, each verdict stored by
the job as it is reached:
1. endpoints: the broken endpoint (bad, or the old one with find=fixed) must test BAD and the
   working one GOOD (EndpointError otherwise); cross-check arms get their own verdicts at both
   endpoints, reported beside the main ones (they do not steer the search);
2. strategy: with `auto`, the one of least expected wall time from the costs this state
   directory measured (core.policy): reference steps (every step a test against the
   reference) or quick steps (`plain`: BAD, or GOOD-SIDE once a commit is shown unlike the
   broken end; they need a model of the broken end, measured first); `sticky` when asked;
3. search: binary search with those steps (K at a time on a cluster) or the sticky Bayesian
   bisection; what a test against the reference settled is never tested again;
4. confirm (pipeline.confirm): the commit and its parent on fresh seeds: the parent must pass
   the reference test and the commit depart from it (unless a step already showed it), and
   their runs must differ (the change test). A parent that departs means a quick step was
   misplaced: the search walks back between the last commit that passed the reference test
   and the parent, built commits first (`Bisection.first_departure`); two commits that cannot
   be told apart make the answer ambiguous, saying why;
5. summary: the report, whose confidence is a union bound over every claim the answer rests on
   (each GOOD/BAD against the reference, each change found) and the control sample's delta,
   with the forecast the strategy was chosen by beside what the bisect took.
Per-verdict error levels come from the whole-bisect confidence (`BisectPlan.level`). Everything
is replayed from the state database on a rerun: a killed bisect resumes where it was.
"""

from __future__ import annotations

import math
import shlex
from dataclasses import dataclass
from typing import Any

import numpy as np

from bisectbot.core import policy, search, stats
from bisectbot.core.inputs import Narrowed
from bisectbot.core.outcome import Find, Verdict
from bisectbot.core.records import Ask, CommitVerdict, distinct_runs
from bisectbot.core.reports import BisectReport, BisectStatus, ConfigSummary, Environment, ReferenceSummary
from bisectbot.core.search import SearchResult, SkipBlock, bisect_search, kary_search, presumed, skip_blocks
from bisectbot.errors import EndpointError
from bisectbot.pipeline import confirm
from bisectbot.pipeline.budget import Budget, BudgetSpent
from bisectbot.pipeline.events import (
    ArmStarted,
    BisectStarted,
    BlockOfSkips,
    BudgetReached,
    Confirming,
    EndpointStarted,
    Events,
    RoundStarted,
    StepStarted,
    StickySkip,
    StickyVisit,
    StrategyChosen,
    WalkingBack,
)
from bisectbot.pipeline.outputs import side_by_side
from bisectbot.pipeline.verdict import Feed, Tester, Untestable


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
    line: tuple[str, ...]  # the first-parent line good..bad, oldest first
    good_ref: str  # the refs as the user gave them
    bad_ref: str
    find: Find
    strategy: str  # auto | plain | sticky, as asked
    level: float  # per-verdict alpha = beta
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
    stuck: int | None = None  # a position the search could not place (fits neither side)


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
    return SearchResult(
        res.last_good + by,
        res.first_bad + by,
        tuple(p + by for p in res.asked),
        res.answers,
        tuple(SkipBlock(b.first + by, b.last + by, b.signature, tuple(t + by for t in b.tested)) for b in res.blocks),
    )


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
        self.choices: list[policy.Choice] = []  # the strategy chosen before each search, with its forecast
        self.fresh: dict[str, int] = {}  # per commit: the first block-1 seed no test of this bisect has read

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

    # -- what is known so far ------------------------------------------------------------------
    def tested(self, sha: str) -> Verdict | None:
        """The latest GOOD or BAD a test against the reference gave this commit in this bisect."""
        for v in reversed(self.verdicts):
            if v.sha == sha and _claims(v) and v.verdict.tested:
                return v.verdict
        return None

    def known(self, lo: int, hi: int) -> dict[int, tuple[Verdict, str]]:
        """Positions strictly between lo and hi that need no new test: tested against the
        reference (as the search reads them), or skipped (cannot be built or run)."""
        out: dict[int, tuple[Verdict, str]] = {}
        where = {sha: i for i, sha in enumerate(self.plan.line)}
        for v in self.verdicts:
            pos = where.get(v.sha)
            if v.arm != "main" or pos is None or not lo < pos < hi:
                continue
            if _claims(v) and v.verdict.tested:
                out[pos] = (self.plan.find.search_verdict(v.verdict), "")
            elif v.mode == "reference" and v.verdict is Verdict.INCONCLUSIVE and pos not in out:
                out[pos] = (self.plan.find.search_verdict(_placed(v.verdict)), "")
            elif v.verdict is Verdict.SKIP and v.block == 0 and pos not in out:
                out[pos] = (Verdict.SKIP, v.signature)
        return out

    def built(self) -> set[int]:
        """Positions whose commit this bisect has built (a test there costs runs, not a build)."""
        where = {sha: i for i, sha in enumerate(self.plan.line)}
        return {where[v.sha] for v in self.verdicts if v.sha in where and v.build == "ok"}

    def end_verdict(self, name: str) -> CommitVerdict:
        """The endpoint test of the end the user named `name` (good or bad)."""
        return next(v for v in self.verdicts if v.arm == "main" and v.role == f"{name}-endpoint")

    def _q_bad(self, model: CommitVerdict | None = None) -> tuple[float, ...]:
        """The broken end's smoothed distribution: its model when measured, else its endpoint test."""
        source = model or self.end_verdict(self.plan.find.broken_ref_name)
        return stats.kt_smooth([source.counts[name] for name in self.tester.reference.names])

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
                self.test(
                    pos,
                    Ask(
                        role=f"{name}-endpoint",
                        alpha=self.tester.cfg.test.alpha,
                        beta=self.tester.cfg.test.beta,
                        arm=arm,
                    ),
                )

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
            hint = (
                "the bug went away between them: to find the commit that fixed it, rerun with --find fixed "
                "(or swap --good and --bad if they were mixed up)"
            )
        else:
            hint = (
                "the bug came in between them: to find the commit that broke it, rerun without --find fixed "
                "(--find bad)"
            )
        raise EndpointError(
            f"the ends are the other way round for --find {plan.find.value}: --good {plan.good_ref} "
            f"({plan.good[:12]}) tests {good_v.verdict.value.upper()} and --bad {plan.bad_ref} ({plan.bad[:12]}) "
            f"tests {bad_v.verdict.value.upper()} (BAD = departs from the reference, GOOD = like it); {hint}"
        )

    # -- 2. the strategy, from measured costs --------------------------------------------------
    def choose_strategy(self, lo: int, hi: int, third: bool) -> str:
        """`auto`: the strategy of least expected wall time (core.policy) for the range lo..hi,
        from the costs this state directory measured and what the ends' tests took; `third`:
        a confirmation already found a distribution quick steps misplace. Sticky only when
        asked, and never on a cluster (its feed runs here, not on the workers)."""
        plan, cfg = self.plan, self.tester.cfg
        asked = plan.strategy
        if asked == "sticky" and self.tester.where == "cluster":
            asked = "plain"
        costs = _unit_costs(self.tester.runner)
        ref = self.tester.reference
        working = self.end_verdict(plan.find.working_ref_name)
        broken = self.end_verdict(plan.find.broken_ref_name)
        here = policy.situation(
            hi - lo + 1,
            ref,
            eta=cfg.test.indifference,
            good_runs=working.runs,
            bad_counts=[broken.counts[n] for n in ref.names],
            level=plan.level,
            max_runs=cfg.run.max_runs,
            model_budget=cfg.test.model_runs,
            third=1.0 if third else policy.THIRD,
        )
        allowed = ("reference", "plain") if asked == "auto" else ((asked,) if asked != "sticky" else ("plain",))
        choice = policy.choose(here, costs, allowed)
        if asked == "sticky":
            choice = policy.Choice("sticky", choice.forecasts, costs, here, "as asked")
        self.choices.append(choice)
        self.events.emit(StrategyChosen(choice.strategy, choice.text() if asked == "auto" else "as asked"))
        return choice.strategy

    def bad_model(self, pos: int | None = None) -> CommitVerdict:
        """Keep measuring a broken-side commit (the broken end, or later a commit found to
        depart already) until q̂ is precise relative to the bug; its own budget
        (test.model_runs). Only quick steps and the sticky search need it: they compare commits
        with q̂. Out of budget, q̂ is used as it is (it only steers)."""
        plan = self.plan
        pos = plan.broken_pos if pos is None else pos
        name = plan.find.broken_ref_name
        model = self.test(pos, plan.ask(f"{name}-model", mode="bad-model"))
        if model.verdict is Verdict.SKIP and pos == plan.broken_pos:
            raise EndpointError(_endpoint_message(name, plan.ref(name), model, Verdict.BAD, self._log_command(model)))
        return model

    # -- 3. search -----------------------------------------------------------------------------
    def search(self, strategy: str, model: CommitVerdict | None, lo: int, hi: int, walk_back: bool) -> Found:
        """The boundary between lo (working side) and hi (broken side), searched with reference
        steps, quick steps against q̂ (plain), or the sticky Bayesian bisection. Positions already
        tested against the reference are not tested again; after a walk-back, commits already
        built are tried first."""
        if strategy == "sticky":
            return self._sticky(model, lo, hi)
        plan = self.plan
        q_bad = self._q_bad(model)
        mode = "reference" if strategy == "reference" else "quick"
        budget = self.step_budget()
        steps = steps_estimate(hi - lo + 1)
        asked: list[int] = []
        answers: list[Verdict] = []
        signatures: dict[int, str] = {}

        def oracle(i: int) -> tuple[Verdict, str]:
            pos = lo + i
            self.events.emit(StepStarted(len(asked) + 1, steps, plan.line[pos], pos, plan.n - 1))
            v = self.test(pos, plan.ask("step", mode=mode, q_bad=q_bad, budget=budget, alike=self.alike_table()))
            if v.verdict is Verdict.INCONCLUSIVE and mode == "quick":
                v = self.probe(pos, model)  # neither side within the budget: the reference places it
            answer = plan.find.search_verdict(_placed(v.verdict))
            asked.append(pos)
            answers.append(answer)
            if not answer.informative:
                signatures[pos] = v.signature
                self._announce_block(pos, skip_blocks(asked, answers, signatures))
            return answer, v.signature

        skip = plan.skipped_in(lo, hi)
        known = {p - lo: a for p, a in self.known(lo, hi).items()}
        prefer = {p - lo for p in self.built() if lo < p < hi} if walk_back else set()
        if self.width > 1:
            res, _ = kary_search(
                hi - lo + 1, self.width, lambda ps: self._round(ps, lo, model, mode, q_bad, budget), skip, known, prefer
            )
            return Found(_shifted(res, lo), strategy)
        res = bisect_search(hi - lo + 1, oracle, skip, known, prefer)
        self.rounds += len(res.asked)
        return Found(_shifted(res, lo), strategy)

    def _round(
        self, offsets: list[int], lo: int, model: CommitVerdict | None, mode: str, q_bad: tuple[float, ...], budget: int
    ) -> list[tuple[Verdict, str]]:
        """One round on a cluster: the commits at lo + offsets, each with a step; a quick step
        that cannot place its commit is then probed against the reference."""
        plan = self.plan
        positions = [lo + i for i in offsets]
        self.rounds += 1
        self.events.emit(RoundStarted(self.rounds, tuple(plan.line[p] for p in positions)))
        ends = self.alike_table()
        got = self.test_many(
            [(plan.line[p], plan.ask("step", mode=mode, q_bad=q_bad, budget=budget, alike=ends)) for p in positions]
        )
        out = []
        for pos, v in zip(positions, got):
            if v.verdict is Verdict.INCONCLUSIVE and mode == "quick":
                v = self.probe(pos, model)
            out.append((plan.find.search_verdict(_placed(v.verdict)), v.signature))
        return out

    def probe(self, pos: int, model: CommitVerdict | None) -> CommitVerdict:
        """A commit the search could not place, tested against the reference (its own runs,
        block 0: the test is one more claim in the bound, whatever block it reads)."""
        return self.test(pos, self.plan.ask("probe", q_bad=self._q_bad(model), budget=self.step_budget()))

    def alike_table(self) -> tuple[tuple[str, str, tuple[tuple[int, int], ...]], ...]:
        """The commits this search has tested against the reference (the ends, steps that
        reached GOOD or BAD, or ran out of budget between eta and tolerance), with their
        observations on the common seeds (block 0, every commit's): a commit run on them that
        prints what one of them prints, seed for seed, is placed on its side after a few dozen
        runs (GOOD-SIDE or BAD-SIDE, stats.log_e_alike) instead of a whole test. Commits whose
        distributions are alike usually print the same outputs for the same seed; when they do
        not (other numerics), the step is tested against the reference as usual. Placements are
        never models for others: a wrong one cannot spread."""
        sides: dict[str, Verdict] = {}
        for v in self.verdicts:  # tested commits only: a placement is never the model of another
            if v.arm == "main" and v.block == 0 and v.mode in ("reference", "quick"):
                tested = v.verdict.tested or (v.mode == "reference" and v.verdict is Verdict.INCONCLUSIVE)
                if tested and (side := _placed(v.verdict).side) is not None:
                    sides[v.sha] = side
        return tuple((side.value, sha, self.tester.observations(sha)) for sha, side in sides.items())

    def step_budget(self, factor: int = 0) -> int:
        """Runs a search step may take: STEP_BUDGET_FACTOR × what the working end's GOOD took
        (at least STEP_BUDGET_MIN), at most run.max_runs. A commit that has not shown GOOD by
        then (nor BAD) most likely sits between eta and tolerance: the search places it on the
        bad side (`_placed`), and the confirmation decides whether anything is named. The
        parent's test there gets PARENT_BUDGET_FACTOR × (the same test as the working end's,
        whose run counts have a long tail)."""
        working = self.end_verdict(self.plan.find.working_ref_name)
        times = factor or STEP_BUDGET_FACTOR
        return min(self.tester.cfg.run.max_runs, max(STEP_BUDGET_MIN, times * working.runs))

    def _announce_block(self, pos: int, blocks: tuple[SkipBlock, ...]) -> None:
        block = next((b for b in blocks if b.first <= pos <= b.last), None)
        if block is not None and block.commits > 1 and block.signature:
            line = self.plan.line
            self.events.emit(BlockOfSkips(line[block.first], line[block.last], block.commits, block.signature))

    def _sticky(self, model: CommitVerdict | None, lo: int, hi: int) -> Found:
        """Probabilistic bisection (search.sticky_bisect) over the commits lo..hi that can be tested.

        A commit that cannot be built or run is dropped and the search restarted on the rest
        from scratch; its stored runs replay, so a restart costs nothing. Commits between two
        dropped ones that failed alike (none of them run between) are dropped as presumed alike.
        Each tested commit is then recorded on the side the final posterior puts it (GOOD-SIDE
        or BAD-SIDE: a placement, not a test). The good side is learned around the
        glitch-tolerant reference; every commit runs its own seeds (block 1: the common block
        would hand the model the same runs at commits that behave alike), so no run is counted
        twice; the search stops at test.search_runs (then: ambiguous)."""
        plan, ref = self.plan, self.tester.reference
        assert model is not None
        bad_counts = [model.counts[name] for name in ref.names]
        good = self.tester.reference.tolerant(self.tester.cfg.test.indifference)
        user = {lo + i for i in plan.skipped_in(lo, hi)}
        positions = [p for p in range(lo, hi + 1) if p not in user]  # the testable positions
        stop = stats.STICKY_STOP  # it only steers: the confirmation decides
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
                    self.events.emit(StickyVisit(plan.line[pos], pos, plan.n - 1))
                    feeds[pos] = self.tester.feed(plan.line[pos], 1, self.fresh.get(plan.line[pos], 0))
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
                    max_runs=self.tester.cfg.test.search_runs,
                    good_strength=stats.STICKY_GOOD_STRENGTH,
                    visit_runs=min(stats.STICKY_VISIT_RUNS, self.tester.cfg.run.max_runs),
                )
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
        for feed in feeds.values():  # those seeds are read: the confirmation starts after them
            self.fresh[feed.sha] = feed.start + feed.tally.consumed
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
        why = (
            f"sticky bisection: P({plan.find.what} = {plan.line[order[res.culprit]][:12]}) "
            f"= {res.posterior:.4f} after {res.runs} runs, {res.visits} visits"
        )
        split = order[res.culprit]
        for pos, feed in sorted(feeds.items()):
            on_broken_side = pos >= split if plan.find is Find.BAD else pos <= split
            side = Verdict.BAD_SIDE if on_broken_side else Verdict.GOOD_SIDE
            self.verdicts.append(feed.verdict(side, why))
        blocks = skip_blocks(sorted(dropped), [Verdict.SKIP] * len(dropped), dropped)
        if res.stuck is not None:
            return Found(SearchResult(*boundary, blocks=blocks), "sticky", res.posterior, stuck=order[res.stuck])
        return Found(
            SearchResult(*boundary, blocks=blocks),
            "sticky",
            res.posterior,
            None
            if confident
            else f"the sticky search used its budget of {self.tester.cfg.test.search_runs} runs: {why}",
        )

    # -- 4. confirm, and walk back when a boundary is not the first departure ------------------
    def first_departure(self) -> Departure:
        """Search, then confirm the boundary on fresh seeds (pipeline.confirm); until it holds.

        Confirmation outcomes:
          found            → the parent is GOOD and the commit BAD against the reference, and its
                             runs differ from the parent's: named;
          parent departs   → a step was misplaced (a quick step showed a commit unlike the broken
                             end, yet it departs): the search walks back between the last commit
                             that passed the reference test and the parent, built commits first,
                             never testing again what a test against the reference settled;
          commit holds     → (sticky) the search goes on above it;
          no change shown  → ambiguous, with both commits and their counts (and whether the
                             working end itself sits between eta and tolerance);
          anything else    → unconfirmed, with why.
        Every claim the answer rests on is counted in the stated confidence; the loop stops
        before their error levels would sum past 1 − confidence."""
        plan, find = self.plan, self.plan.find
        lo, hi = 0, plan.n - 1
        crossed: list[ChangePoint] = []
        strategies: list[str] = []
        allowed = 1 - self.tester.cfg.test.confidence + 1e-12
        found = Found(SearchResult(lo, hi), "plain")
        third, model = False, None
        while True:
            strategy = self.choose_strategy(lo, hi, third)
            strategies.append(strategy)
            broken = hi if find is Find.BAD else lo  # quick steps and sticky compare with its distribution
            if strategy in ("plain", "sticky") and (model is None or model.sha != plan.line[broken]):
                model = self.bad_model(broken)
            found = self.search(strategy, model, lo, hi, walk_back=third)
            result = found.result
            if found.stuck is not None:  # a commit like neither side: the reference places it
                side = self.probe(found.stuck, model).verdict
                if side is find.culprit_verdict and found.stuck > lo:
                    hi = found.stuck
                    continue
                if side is find.parent_verdict and found.stuck < hi:
                    lo = found.stuck
                    continue
                return Departure(
                    BisectStatus.UNCONFIRMED,
                    (
                        f"commit {plan.line[found.stuck][:12]} fits neither side and its test against the "
                        f"reference is {side.value.upper()} (a distribution between eta and tolerance from "
                        f"the reference may be named either way)"
                    ),
                    found,
                    crossed,
                    strategies,
                )
            if found.unfinished is not None:
                return Departure(BisectStatus.AMBIGUOUS, found.unfinished, found, crossed, strategies)
            if not result.exact:
                return Departure(BisectStatus.AMBIGUOUS, self._range_text(result), found, crossed, strategies)
            culprit = result.first_bad
            parent_sha = self.parent_of(culprit)
            need_parent = self.tested(parent_sha) is not find.parent_verdict
            need_culprit = self.tested(plan.line[culprit]) is not find.culprit_verdict
            needed = 1 + need_parent + need_culprit
            if self._doubt() + needed * plan.level > allowed:
                return Departure(
                    BisectStatus.UNCONFIRMED,
                    (
                        f"no boundary confirmed within the error budget (confidence "
                        f"{self.tester.cfg.test.confidence:g}): {len(self._decisive())} claims at {plan.level:.1e} each "
                        f"so far, {len(crossed)} boundary(ies) ruled out"
                    ),
                    found,
                    crossed,
                    strategies,
                )
            conf = self.confirm_boundary(culprit, parent_sha, need_parent, need_culprit, model)
            if conf.outcome == confirm.FOUND:
                return Departure(
                    BisectStatus.FOUND, f"{find.what} commit is {plan.line[culprit]}", found, crossed, strategies
                )
            if conf.outcome == confirm.PARENT_DEPARTS:
                assert conf.parent is not None
                if parent_sha != plan.line[culprit - 1]:  # a parent skipped as equivalent departs
                    if (missed := self._input_rule_missed(culprit, parent_sha, conf.parent)) is not None:
                        return Departure(BisectStatus.UNCONFIRMED, missed, found, crossed, strategies)
                crossed.append(ChangePoint(culprit, conf.parent, self._culprit_claim(culprit)))
                third, hi = True, culprit - 1  # the boundary is at or before the parent, in line order
                lo = self._last_passed(hi)
                self.events.emit(WalkingBack(conf.why, plan.line[lo], plan.line[hi], hi - lo + 1))
                if hi - lo < 1:
                    return Departure(BisectStatus.UNCONFIRMED, conf.why, found, crossed, strategies)
                continue
            if conf.outcome == confirm.CULPRIT_HOLDS and culprit < hi:
                lo = culprit
                continue
            if conf.outcome == confirm.NO_CHANGE:
                return Departure(
                    BisectStatus.AMBIGUOUS, self._no_change_text(culprit, parent_sha, conf), found, crossed, strategies
                )
            why = conf.why or f"the confirmation of {plan.line[culprit][:12]} ended {conf.outcome}"
            if conf.outcome == confirm.UNDECIDED:
                changed = conf.change is not None and conf.change[0].verdict is Verdict.CHANGED
                why = (
                    (
                        f"the distribution changed at {plan.line[culprit][:12]} (its runs differ from its parent "
                        f"{parent_sha[:12]}'s on fresh seeds), but "
                        if changed
                        else ""
                    )
                    + why
                    + " (undecided: a commit between eta and tolerance from the reference may be named either way, "
                    "or not at all; a larger run.max_runs may decide it)"
                )
            return Departure(BisectStatus.UNCONFIRMED, why, found, crossed, strategies)

    def confirm_boundary(
        self, culprit: int, parent_sha: str, need_parent: bool, need_culprit: bool, model: CommitVerdict | None
    ) -> confirm.Confirmation:
        """The confirmation of the boundary at `culprit` (pipeline.confirm), on the seeds of
        block 1 that no earlier test of this bisect has read."""
        plan, find = self.plan, self.plan.find
        sha = plan.line[culprit]
        self.events.emit(Confirming(sha, parent_sha))
        if (alike := self._alike(sha, parent_sha)) is not None:
            return confirm.Confirmation(confirm.NO_CHANGE, why=alike)
        self._within_budget()
        q_bad = self._q_bad(model)
        own = {s: self._own_estimate(s) for s in (sha, parent_sha)}
        toward_culprit = (q_bad,) if find is Find.BAD else ()
        pair = confirm.Pair(
            sha,
            parent_sha,
            self.fresh.get(sha, 0),
            self.fresh.get(parent_sha, 0),
            need_culprit,
            need_parent,
            toward_culprit + own[sha],
            ((q_bad,) if find is Find.FIXED else ()) + own[parent_sha],
            self.step_budget(PARENT_BUDGET_FACTOR),
            self.tester.cfg.run.max_runs * (1 if self._zone_placed(sha) else CULPRIT_BUDGET_FACTOR),
        )
        conf = confirm.confirm(self.tester, pair, find, level=plan.level, q_bad=q_bad)
        self.fresh[sha] = pair.start_culprit + conf.used[0]
        self.fresh[parent_sha] = pair.start_parent + conf.used[1]
        self.verdicts.extend(conf.verdicts)
        return conf

    def _alike(self, sha: str, parent_sha: str) -> str | None:
        """Why no change test is worth running: the commit and its parent printed the same
        outputs on the search's seeds both ran, often enough to show them alike (stats.log_e_alike):
        whatever their verdicts, nothing changed between them that the test could find. None
        when they differ somewhere, or did not both run there."""
        mine = dict(self.tester.observations(sha))
        theirs = dict(self.tester.observations(parent_sha))
        shared = [seed for seed in mine if seed in theirs]
        differ = sum(mine[seed] != theirs[seed] for seed in shared)
        if not shared or stats.log_e_alike(len(shared) - differ, differ) < math.log(1 / stats.STEER_LEVEL):
            return None
        return (
            f"they printed the same outcome on {len(shared) - differ} of {len(shared)} seeds both ran in the "
            f"search (total variation below {stats.ALIKE_DELTA:g} between them)"
        )

    def _zone_placed(self, sha: str) -> bool:
        """The commit was put on the bad side only because a test could not show it GOOD (its
        own, or that of the commit it prints the same outputs as): likely between eta and
        tolerance, where a longer test seldom decides, so its re-test gets the usual budget."""
        own = next((v for v in reversed(self.verdicts) if v.sha == sha and v.arm == "main" and v.block == 0), None)
        if own is None or own.verdict is Verdict.INCONCLUSIVE:
            return own is not None
        if own.verdict is not Verdict.BAD_SIDE:
            return False
        mine = dict(self.tester.observations(sha))
        for side, other, table in self.alike_table():
            if side == Verdict.BAD.value and other != sha and self.tested(other) is None:  # an untested (zone) target
                shared = [(seed, cat) for seed, cat in table if seed in mine]
                differ = sum(mine[seed] != cat for seed, cat in shared)
                if shared and stats.log_e_alike(len(shared) - differ, differ) >= math.log(1 / stats.STEER_LEVEL):
                    return True
        return False

    def _own_estimate(self, sha: str) -> tuple[tuple[float, ...], ...]:
        """The commit's own search runs (block 0, other seeds than the confirmation's), smoothed:
        what the change test's mixture leans toward for it."""
        for v in reversed(self.verdicts):
            if v.sha == sha and v.arm == "main" and v.block == 0 and any(v.counts.values()):
                return (stats.kt_smooth([v.counts.get(n, 0) for n in self.tester.reference.names]),)
        return ()

    def _culprit_claim(self, culprit: int) -> CommitVerdict:
        sha = self.plan.line[culprit]
        return next(v for v in reversed(self.verdicts) if v.sha == sha and v.arm == "main")

    def _last_passed(self, hi: int) -> int:
        """The highest position below hi whose commit passed the reference test (as the search
        reads it: the working side), or the working end."""
        good = [p for p, (a, _) in self.known(0, hi).items() if a is Verdict.GOOD]
        return max(good, default=0)

    def _input_rule_missed(self, culprit: int, parent_sha: str, parent: CommitVerdict) -> str | None:
        """The parent of the candidate was skipped as building the same binary as line[c − 1],
        and departs on fresh seeds. When line[c − 1] passes the reference test on fresh seeds
        too, two commits with the same compile inputs disagree: the input rule missed something
        (both named). Otherwise (it departs as well) None: the search walks back."""
        plan, find = self.plan, self.plan.find
        same = plan.line[culprit - 1]
        self._within_budget()
        start = self.fresh.get(same, 0)
        v = self.test_sha(same, plan.ask("retest-equivalent", block=1, start=start, q_bad=self._q_bad()))
        self.fresh[same] = start + v.runs
        if v.verdict is not find.parent_verdict:
            return None
        return (
            f"the input rule missed something: {parent_sha[:12]} was skipped as building the same binary as "
            f"{same[:12]} (none of its build's inputs changed), yet on fresh seeds {same[:12]} tests "
            f"{v.verdict.value.upper()} and {parent_sha[:12]} {parent.verdict.value.upper()}; rerun with "
            f"--all-commits"
        )

    def _range_text(self, result: SearchResult) -> str:
        plan = self.plan
        inside = [b for b in result.blocks if b.last >= result.last_good + 1 and b.first <= result.first_bad - 1]
        parts = [self._block_text(b) for b in inside if b.signature]
        if user := [plan.line[p][:12] for p in result.candidates if plan.line[p] in plan.user_skipped]:
            parts.append(f"skipped by the user (--skip/--exclude): {', '.join(user)}")
        why = "; ".join(parts) or "the commits between could not be decided"
        return (
            f"{len(result.candidates)} candidates between {plan.line[result.last_good][:12]} and "
            f"{plan.line[result.first_bad][:12]}: {why}"
        )

    def _no_change_text(self, culprit: int, parent_sha: str, conf: confirm.Confirmation) -> str:
        """Why a boundary between a GOOD and a BAD is not named: the two commits look alike (on
        the search's shared seeds, or on fresh seeds after the change test's budget). When the
        working end itself departs from the reference by more than eta, that is the likely
        cause: say so (bisectbot refuses rather than re-centres)."""
        plan = self.plan
        sha = plan.line[culprit]
        if conf.change is not None:
            c, p = conf.change
            seen = f"on fresh seeds their runs could not be told apart ({_short(c.counts)} against {_short(p.counts)})"
        else:
            seen = conf.why
        text = (
            f"{sha[:12]} and its parent {parent_sha[:12]} are on either side of the search's boundary, but "
            f"{seen}: both may sit between eta {self.tester.cfg.test.indifference:g} and tolerance "
            f"{self.tester.cfg.test.tolerance:g} from the reference, where either verdict is allowed"
        )
        zone = self.zone_check()
        if zone is not None and zone.verdict is Verdict.BAD:
            text += (
                f"; the {plan.find.working_ref_name} end {zone.sha[:12]} itself departs from the reference by "
                f"more than eta ({zone.reason}): the reference does not describe it, so bisectbot does not "
                f"name a commit; to look for the first change from that end, make it the reference "
                f"(reference.control with its commit), or raise test.eta"
            )
        return text

    def zone_check(self) -> CommitVerdict | None:
        """Does the working end depart from the reference by more than eta? Its runs (block 0)
        continued with the BAD test alone, up to run.max_runs: asked only when an answer hinges
        on it (no builds, only runs)."""
        plan = self.plan
        try:
            return self.test(plan.working_pos, plan.ask("zone-check", mode="depart", q_bad=self._q_bad()))
        except BudgetSpent:
            return None

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
                side = plan.find.search_verdict(v.verdict).side
                if side is Verdict.GOOD:
                    working.append(where[v.sha])
                elif side is Verdict.BAD:
                    broken.append(where[v.sha])
        hi = min(broken)
        lo = max((p for p in working if p < hi), default=0)
        result = SearchResult(lo, hi)
        left = len(self._candidates(result))
        message = (
            f"stopped early: {stop}; the {plan.find.what} commit is one of the {left} commit(s) after "
            f"{plan.line[lo][:12]} up to {plan.line[hi][:12]}; run the same command again to go on: it "
            f"resumes from the state directory"
        )
        return Departure(BisectStatus.STOPPED, message, Found(result, plan.strategy), [], [], stop)

    def _candidates(self, result: SearchResult) -> list[str]:
        """The possible culprits of a search result, with the commits skipped as equivalent among them."""
        plan = self.plan
        candidates = [plan.line[p] for p in result.candidates]
        if plan.narrowed is not None and len(candidates) > 1:
            candidates = plan.narrowed.expand(candidates[0], candidates[-2]) + [candidates[-1]]
        return candidates

    def _decisive(self) -> list[CommitVerdict]:
        """Every claim an answer can rest on: each GOOD or BAD a test against the reference gave
        (the ends, reference steps, the BAD of quick steps, probes, re-tests on fresh seeds), and
        each change test that found a change."""
        return [
            v
            for v in self.verdicts
            if _claims(v) and (v.verdict.tested or (v.role == "confirm-culprit" and v.verdict is Verdict.CHANGED))
        ]

    def _delta(self) -> float:
        """The control sample's price (0 for an exact reference)."""
        ref = self.tester.reference
        return ref.delta if ref.control is not None else 0.0

    def _doubt(self) -> float:
        """The union bound on a wrong answer so far: the claims' error levels, plus a control sample's delta."""
        return sum(max(v.alpha, v.beta) for v in self._decisive()) + self._delta()

    def _block_text(self, block: SkipBlock) -> str:
        """'12 commits 2024-06-01 … 2024-10-21 (3 tried): runs crash: …'."""
        first, last = (
            self.tester.runner.workspace.info(self.plan.line[p]).date[:10] for p in (block.first, block.last)
        )
        span = f"{block.commits} commits {first} … {last}" if block.commits > 1 else f"1 commit {first}"
        return f"{span} ({len(block.tested)} tried): {block.signature}"

    def skip_block_summaries(self, blocks: tuple[SkipBlock, ...]) -> list[dict[str, Any]]:
        line = self.plan.line
        return [
            {
                "first": line[b.first],
                "last": line[b.last],
                "commits": b.commits,
                "tried": len(b.tested),
                "signature": b.signature,
                "text": self._block_text(b),
            }
            for b in blocks
        ]

    # -- 5. summary ----------------------------------------------------------------------------
    def summary(self, dep: Departure, context: ReportContext) -> BisectReport:
        plan, verdicts, found = self.plan, self.verdicts, dep.found
        test = self.tester.cfg.test
        culprit = plan.line[found.result.first_bad] if dep.status is BisectStatus.FOUND else None
        narrowed = plan.narrowed
        candidates = self._candidates(found.result)
        gap = list(narrowed.stands_for.get(plan.line[found.result.last_good], ())) if narrowed else []
        # What is reported rests on its claims (tests against the reference, the change test):
        # a wrong answer needs one of them to be wrong, so the bound is their summed error
        # levels, plus the control sample's delta when the reference is one.
        claims = self._decisive()
        delta = self._delta()
        doubt = self._doubt()
        return BisectReport(
            job=plan.job,
            status=dep.status,
            find=plan.find,
            first_bad=culprit,
            first_bad_subject=self.tester.subject(culprit) if culprit else None,
            last_good=self.parent_of(found.result.first_bad) if culprit else plan.line[found.result.last_good],
            candidates=candidates,
            good=plan.good,
            bad=plan.bad,
            good_ref=plan.good_ref,
            bad_ref=plan.bad_ref,
            commits=plan.total,
            builds=len({v.sha for v in verdicts if v.arm == "main"}),
            builds_bound=math.ceil(math.log2(plan.n)) + 3,
            runs=distinct_runs(verdicts),
            runs_executed=sum(v.executed for v in verdicts),
            retried=sum(v.retried for v in verdicts),
            confidence=max(0.0, 1.0 - doubt) if dep.status is BisectStatus.FOUND else 0.0,
            step_alpha=plan.level,
            message=dep.message,
            verdicts=list(verdicts),
            reference=context.reference,
            config=context.config,
            environment=context.environment,
            strategy=dep.strategies[0] if dep.strategies else found.strategy,
            extra={"strategy_requested": plan.strategy, "strategies": dep.strategies},
            skip_blocks=self.skip_block_summaries(found.result.blocks),
            reproduce=reproduce_line(plan, dep.strategies[0] if dep.strategies else found.strategy),
            change_points=self._change_points(dep, culprit),
            assumptions=self._assumptions(dep, claims, delta),
            posterior=found.posterior,
            eta=test.indifference,
            tolerance=test.tolerance,
            searched=plan.n,
            skipped_equivalent=plan.total - plan.n,
            boundary_skipped=gap,
            rounds=self.rounds,
            workers=self.width,
            input_rule=narrowed.rule if narrowed is not None else "",
            stopped=None
            if dep.stop is None
            else {
                "by": dep.stop.by,
                "reason": str(dep.stop),
                "last_good": plan.line[found.result.last_good],
                "first_bad": plan.line[found.result.first_bad],
                "commits_left": len(candidates),
                "resume": "run the same command again (it resumes from the state directory)",
            },
            # the culprit's and its parent's first runs (here, not on a cluster: it would build locally)
            outputs=side_by_side(self.tester, plan.find, verdicts)
            if dep.status is BisectStatus.FOUND and self.width == 1
            else None,
            user_skipped=[sha for sha in (narrowed.full if narrowed else plan.line) if sha in plan.user_skipped],
            cost=self._cost(),
        )

    def _cost(self) -> dict[str, Any] | None:
        """The forecast the strategy was chosen by, and what the bisect took, in the same units
        (builds, runs, seconds at the measured unit costs)."""
        if not self.choices:
            return None
        first = self.choices[0]
        units = first.costs
        ends = [v for v in self.verdicts if v.arm == "main" and v.role.endswith("-endpoint")]
        end_builds, end_runs = len({v.sha for v in ends}), distinct_runs(ends)
        builds = len({v.sha for v in self.verdicts if v.arm == "main"})
        runs = distinct_runs([v for v in self.verdicts if v.arm == "main"])
        built = {v.sha: v.build_seconds for v in self.verdicts if v.arm == "main" and v.build == "ok"}

        def whole(f: policy.Forecast) -> dict[str, Any]:  # the forecast with the ends' builds and runs
            return {
                "strategy": f.strategy,
                "builds": round(f.builds + end_builds, 1),
                "runs": round(f.runs + end_runs),
                "seconds": round(units.seconds(f.builds + end_builds, f.runs + end_runs), 1),
            }

        chosen = first.forecast()
        return {
            "unit": {
                "build_seconds": units.build,
                "run_seconds": units.run,
                "measured_builds": units.builds,
                "measured_runs": units.runs,
            },
            "estimate": whole(chosen) if chosen is not None else None,
            "alternatives": [whole(f) for f in first.forecasts if f.strategy != first.strategy],
            "actual": {
                "builds": builds,
                "runs": runs,
                "seconds": round(units.seconds(builds, runs), 1),
                "build_seconds": round(sum(built.values()), 1),
            },
            "text": first.text(),
        }

    def _change_points(self, dep: Departure, culprit: str | None) -> list[dict[str, Any]]:
        """The first departure (when found), then every boundary the bisect stopped at on the
        way whose parent already departed, in line order; `before`/`after` are the counts on
        fresh seeds at the parent and at the commit."""
        line = self.plan.line
        out = []
        for cp in sorted(dep.crossed, key=lambda c: c.position):
            out.append(
                {
                    "commit": line[cp.position],
                    "subject": self.tester.subject(line[cp.position]),
                    "first": False,
                    "before": dict(cp.parent.counts),
                    "after": dict(cp.culprit.counts),
                    "text": f"{line[cp.position][:12]}: a boundary the search stopped at, but its parent "
                    f"{cp.parent.sha[:12]} already departs from the reference "
                    f"({cp.parent.verdict.value.upper()} after {cp.parent.runs} runs on fresh seeds), so "
                    f"the search walked back below it",
                }
            )
        if culprit is not None:
            last = {v.role: v for v in self.verdicts if v.arm == "main"}
            parent, again = last.get("confirm-parent"), last.get("confirm-culprit")
            out.insert(
                0,
                {
                    "commit": culprit,
                    "subject": self.tester.subject(culprit),
                    "first": True,
                    "before": dict(parent.counts) if parent else {},
                    "after": dict(again.counts) if again else {},
                    "text": f"{culprit[:12]}: the first departure from the reference",
                },
            )
        return out

    def _assumptions(self, dep: Departure, claims: list[CommitVerdict], delta: float) -> list[str]:
        """What the stated confidence rests on, from what this bisect saw."""
        test, ref = self.tester.cfg.test, self.tester.reference
        changes = sum(1 for v in claims if v.role == "confirm-culprit")
        out = [
            f"the bound counts the {len(claims) - changes} GOOD/BAD verdicts of tests against the reference "
            f"and the {changes} change test(s) this bisect made, each at error ≤ {self.plan.level:.1e}; "
            f"placements without such a test (GOOD-SIDE, BAD-SIDE) only steer",
            "the named commit's runs differ from its parent's on fresh seeds (the change test): this holds "
            "whatever the history looks like",
            "once a commit departs from the reference, every later commit on the line departs too "
            "(no commit in between returns to it)",
            f"commits whose distribution is between eta {test.indifference:g} and tolerance "
            f"{test.tolerance:g} (total variation) from the reference may be named either way",
        ]
        if dep.crossed:
            out.append(
                f"{len(dep.crossed)} boundary(ies) ruled out on the way (their parent departs): listed in change_points"
            )
        if ref.control is not None:
            out.append(f"the reference is a control sample of {sum(ref.control)} runs; its delta {delta:g} is included")
        if dep.found.posterior is not None:
            out.append(
                f"the sticky search's posterior ({dep.found.posterior:.4f}) is a Bayesian probability "
                f"under its model, reported apart (posterior), not part of the bound"
            )
        stray = sum(
            v.counts.get(stats.OTHER, 0) for v in self.verdicts if v.arm == "main" and v.verdict is Verdict.GOOD
        )
        if stray:
            out.append(f"{stray} stray outcome(s) seen at commits judged GOOD: within the indifference zone")
        working = next(
            (v for v in self.verdicts if v.arm == "main" and v.role == f"{self.plan.find.working_ref_name}-endpoint"),
            None,
        )
        if working is not None and (tv := _observed_tv(working, ref, test.indifference)) is not None:
            out.append(
                f"the {self.plan.find.working_ref_name} end's runs sit {tv:.3f} (total variation, "
                f"observed) from the reference, above eta {test.indifference:g}: it may itself be in the "
                f"indifference zone, where commits can test either way"
            )
        return out


# A search step's budget, relative to the runs the working end's GOOD took (see Bisection.step_budget)
STEP_BUDGET_FACTOR = 2
PARENT_BUDGET_FACTOR = 3
CULPRIT_BUDGET_FACTOR = 2  # × run.max_runs: a commit at the tolerance's edge can need it (not one in the zone)
STEP_BUDGET_MIN = 200


def _placed(verdict: Verdict) -> Verdict:
    """How a search reads a step's verdict: a test against the reference that could not show
    GOOD within its budget is not GOOD, so it goes on the side of the commits that are not
    (BAD-SIDE, a placement); a skip or anything else stays as it is."""
    return Verdict.BAD_SIDE if verdict is Verdict.INCONCLUSIVE else verdict


def _claims(v: CommitVerdict) -> bool:
    """A main-arm verdict made by a test (not a model's "enough", a sticky placement or the
    zone check, which only ever refuses)."""
    return v.arm == "main" and v.mode in ("reference", "quick", "change")


def _short(counts: dict[str, int]) -> str:
    return " ".join(f"{k}={c}" for k, c in counts.items() if c) or "no counted runs"


def _observed_tv(v: CommitVerdict, ref: stats.Reference, eta: float) -> float | None:
    """The total variation between a commit's observed runs and the reference when it is
    clearly above eta (by three standard errors of the runs' sampling noise), else None."""
    n = np.array([v.counts.get(name, 0) for name in ref.names], dtype=float)
    total = n.sum()
    if total < 50:
        return None
    p = np.asarray(ref.estimate, dtype=float)
    tv = 0.5 * float(np.abs(n / total - p).sum())
    noise = 0.5 * float(np.sqrt(p * (1 - p) / total).sum())
    return tv if tv - 3 * noise > eta else None


def _unit_costs(runner: Any) -> policy.UnitCosts:
    """What a build and a run cost here: the runner measures them (a simulated runner states them)."""
    costs = getattr(runner, "unit_costs", None)
    return costs() if costs is not None else policy.DEFAULT_COSTS


def run_bisect(
    plan: BisectPlan, tester: Tester, events: Events, context: ReportContext, budget: Budget | None = None
) -> BisectReport:
    """All five stages; raises EndpointError when an endpoint does not test as given. With a
    `budget` that runs out, the report (status `stopped`) gives the range reached so far."""
    events.emit(BisectStarted(plan.n, plan.good, plan.bad, plan.find.value, plan.level, steps_estimate(plan.n)))
    bisection = Bisection(plan, tester, events, budget)
    try:
        bisection.endpoints()
        departure = bisection.first_departure()
    except BudgetSpent as stop:
        departure = bisection.stopped(stop)
    return bisection.summary(departure, context)


def stopped_report(
    plan: BisectPlan, tester: Tester, events: Events, context: ReportContext, stop: BudgetSpent
) -> BisectReport:
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
    return f"bisectbot bisect {plan.config_path} --good {plan.good} --bad {plan.bad}{extra} --strategy {strategy}"


def _endpoint_message(name: str, ref: str, v: CommitVerdict, want: Verdict, log_command: str = "") -> str:
    what = {Verdict.SKIP: "cannot be tested", Verdict.INCONCLUSIVE: "is inconclusive"}.get(
        v.verdict, f"tests {v.verdict.value.upper()}"
    )
    log = f"; the whole build log: {log_command}" if log_command else ""
    hint = ""
    if want is Verdict.GOOD and v.verdict in (Verdict.BAD, Verdict.INCONCLUSIVE):
        hint = (
            "; if the reference describes this end only roughly (say a stray outcome in a few % of runs), "
            "it sits between eta and tolerance, where either verdict is allowed: bisectbot does not guess "
            "there — raise test.eta, or make this commit the reference (reference.control) to find the "
            "first change from it"
        )
    return (
        f"{name} ref {ref} ({v.sha[:12]}) {what}, expected {want.value.upper()}: "
        f"{v.reason} (after {v.runs} runs){log}{hint}"
    )
