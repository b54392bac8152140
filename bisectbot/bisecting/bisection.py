"""A bisect in progress: its ledger (the verdicts so far, pure: core.ledger), the tester that
makes new ones, the events it tells, and the budget it keeps.

Every stage (bisecting.endpoints, bisecting.bisect's search and confirmation, bisecting.sticky,
bisecting.crosscheck, bisecting.summary) works on one `Bisection`: it asks the ledger what is
known and the tester for what is not, and every verdict it gets is recorded in the ledger. What
needs the commits' stored runs (whether two commits print alike, whether the share of runs
meeting the condition changed) is asked here too, for the ledger holds verdicts only.
"""

from __future__ import annotations

from bisectbot.bisecting.budget import Budget
from bisectbot.core.ledger import Ledger, placed
from bisectbot.core.plan import BisectPlan
from bisectbot.core.search import SkipBlock
from bisectbot.core.walkback import CONDITION_CHANGED
from bisectbot.events import BlockOfSkips, Events
from bisectbot.judge.verdict import CommitTester
from bisectbot.records.commits import Ask, CommitVerdict
from bisectbot.statistics import stats
from bisectbot.statistics.condition import ConditionShift, condition_shift, share_change_between
from bisectbot.statistics.outcome import Verdict
from bisectbot.statistics.two_sample import SeedForSeed


class Bisection:
    """One bisect: a ledger of its verdicts and a tester that makes them (see the module)."""

    def __init__(self, plan: BisectPlan, tester: CommitTester, events: Events, budget: Budget | None = None):
        self.plan, self.tester, self.events = plan, tester, events
        self.ledger = Ledger(plan)
        self.budget = budget  # --max-builds / --deadline: checked before each verdict (and build)
        # the working end's first seeds run a second time (bisecting.endpoints.rerun_working_end):
        # None until then, and on a cluster (whose runs live on the workers)
        self.reran: SeedForSeed | None = None
        self.reran_executed = 0  # of those second runs, how many this invocation executed (not replayed)

    @property
    def deterministic(self) -> bool:
        """Whether the program prints the same for a seed every time it runs it, as far as the
        working end's reruns show (true until they are made): commits are then placed beside
        one another by printing the same outcomes seed for seed; otherwise never. A timing
        (statistic.kind time) never is: a time is never the same twice."""
        if self.tester.cfg.statistic.kind == "time":
            return False
        return self.reran is None or self.reran.agree == self.reran.shared

    @property
    def control_at_working_end(self) -> bool:
        """The reference is the working end's own runs (`reference: good`, a control sample; for a
        number, the control its runs are paired with)."""
        control, numbers = self.tester.control, self.tester.numbers
        sha = control.sha if control is not None else numbers.sha if numbers is not None else None
        return sha is not None and sha == self.plan.line[self.plan.working_pos]

    @property
    def width(self) -> int:
        """Commits tested at once: the cluster's workers (cluster), else 1."""
        return int(getattr(self.tester, "width", 1))

    # -- new verdicts, each recorded in the ledger -----------------------------------------------
    def test_many(self, items: list[tuple[str, Ask]]) -> list[CommitVerdict]:
        """Several verdicts: at once on a cluster, one after the other otherwise."""
        if self.width > 1 and len(items) > 1:
            self.within_budget()
            out = list(self.tester.verdicts(items))  # type: ignore[attr-defined]
            self.ledger.verdicts.extend(out)
            return out
        return [self.test_sha(sha, ask) for sha, ask in items]

    def test(self, pos: int, ask: Ask) -> CommitVerdict:
        return self.test_sha(self.plan.line[pos], ask)

    def test_sha(self, sha: str, ask: Ask) -> CommitVerdict:
        self.within_budget()
        v = self.tester.verdict(sha, ask)
        self.ledger.verdicts.append(v)
        return v

    def within_budget(self) -> None:
        if self.budget is not None:
            self.budget.before_step()

    # -- what the ledger knows, with what only the tester can add ----------------------------------
    def passed_as(self, sha: str, wanted: Verdict) -> CommitVerdict | None:
        """Ledger.passed_as, the program of `sha` identified by the tester (it may build it)."""
        return self.ledger.passed_as(sha, wanted, self.tester.program)

    def q_bad(self, model: CommitVerdict | None = None) -> tuple[float, ...] | None:
        """Ledger.q_bad over the reference's categories (None for a numeric statistic: its
        tests take no distribution to lean toward)."""
        if self.tester.numbers is not None:
            return None
        return self.ledger.q_bad(tuple(self.tester.reference.names), model)

    def alike_table(self) -> tuple[tuple[str, str, tuple[tuple[int, int], ...]], ...]:
        """The commits this search has tested against the reference (Ledger.sides), with their
        observations on the common seeds (block 0, every commit's): a commit run on them that
        prints what one of them prints, seed for seed, is placed on its side after a few dozen
        runs (GOOD-SIDE or BAD-SIDE, two_sample.log_e_alike) instead of a whole test. Commits whose
        distributions are alike usually print the same outputs for the same seed; when they do
        not (other numerics), the step is tested against the reference as usual. None at all for a
        program that is not deterministic per seed (`deterministic`)."""
        if not self.deterministic:
            return ()
        return tuple((side.value, sha, self.tester.observations(sha)) for sha, side in self.ledger.sides().items())

    def step_budget(self, factor: int = 0) -> int:
        """Ledger.step_budget within run.max_runs (longer for a program not deterministic per seed)."""
        return self.ledger.step_budget(self.tester.cfg.run.max_runs, factor, noisy=not self.deterministic)

    def announce_block(self, pos: int, blocks: tuple[SkipBlock, ...]) -> None:
        """Tell the observers about a block of commits that failed alike, once it spans more than one."""
        block = next((b for b in blocks if b.first <= pos <= b.last), None)
        if block is not None and block.commits > 1 and block.signature:
            line = self.plan.line
            self.events.emit(BlockOfSkips(line[block.first], line[block.last], block.commits, block.signature))

    # -- a change the tests cannot see ----------------------------------------------------------
    def condition_shift_text(self, pos: int) -> str | None:
        """When the config has a condition but its reference no P(condition) (the tests judge
        only the outcome among the runs that meet it), did the share of runs meeting it change
        between the working end and the commit at `pos` (or, failing that, a commit on the
        broken side)? Said from their runs on the seeds both ran (diagnose.condition_shift, at
        the bisect's level), with where the tested commits put the change, whether the outcome
        among them departed, and what to give the reference; None when it did not change."""
        plan, tester, find = self.plan, self.tester, self.plan.find
        ref = tester.reference
        if tester.cfg.statistic.condition is None or stats.MISSED in ref.names:
            return None
        working = self.ledger.end_verdict(find.working_ref_name)
        if working is None:
            return None
        mine = dict(tester.observations(working.sha))
        where = {sha: i for i, sha in enumerate(plan.line)}
        tested = [v for v in self.ledger.verdicts if v.arm == "main" and v.block == 0 and v.sha in where and v.runs]
        broken = [where[v.sha] for v in tested if find.search_verdict(placed(v.verdict)).side is Verdict.BAD]
        for other in dict.fromkeys([pos, plan.broken_pos, *reversed(broken)]):
            sha = plan.line[other]
            if sha == working.sha or not (theirs := dict(tester.observations(sha))):
                continue
            early, late = (mine, theirs) if plan.working_pos < other else (theirs, mine)
            shift = condition_shift(early, late, plan.level, ref.failed)
            if shift is not None:
                return self._condition_text(shift, working.sha, sha, tested, where)
        return None

    def _condition_text(
        self, shift: ConditionShift, working: str, other: str, tested: list[CommitVerdict], where: dict[str, int]
    ) -> str:
        plan, tester = self.plan, self.tester
        early, late = (working, other) if where[working] < where[other] else (other, working)
        shares = []
        for sha in dict.fromkeys(v.sha for v in tested):
            obs = [c for _, c in tester.observations(sha) if c != tester.reference.failed]
            if len(obs) >= 30:
                shares.append((where[sha], sum(c != -1 for c in obs) / len(obs)))
        after_a, by_b = share_change_between(sorted(shares), shift.before, shift.after)
        span = (
            f"; as far as the tested commits show, it changed after {plan.line[after_a][:12]} and by "
            f"{plan.line[by_b][:12]}"
            if after_a is not None and by_b is not None
            else ""
        )
        low = other  # the commit the shift was shown at, not the working end
        judged = next((v for v in reversed(tested) if v.sha == low and v.mode == "reference"), None)
        good = next(
            (
                v
                for v in tested
                if v.verdict is Verdict.GOOD
                and (shares_at := dict(shares).get(where[v.sha])) is not None
                and abs(shares_at - (shift.after if low == late else shift.before))
                < abs(shares_at - (shift.before if low == late else shift.after))
            ),
            None,
        )
        if good is not None:
            outcome = f"the outcome among them did not depart from the reference ({good.sha[:12]}, which meets it as often as {low[:12]}, tests GOOD)"
        elif judged is not None:
            outcome = (
                f"the outcome among them was not shown to depart from the reference ({low[:12]}: "
                f"{judged.verdict.value.upper()} after {judged.runs} runs, {sum(judged.counts.values())} of them counted)"
            )
        else:
            outcome = "the outcome among them was not shown to depart from the reference"
        cond = tester.cfg.statistic.condition
        assert cond is not None
        return (
            f"{CONDITION_CHANGED}: {shift.before:.2f} → {shift.after:.2f} (token {cond.position} = {cond.token!r} in "
            f"{shift.before_met} of {shift.before_runs} runs at {early[:12]}, {shift.after_met} of {shift.after_runs} "
            f"at {late[:12]}; on the seeds both ran it went away {shift.down} times and came {shift.up} times, "
            f"E = {stats.fmt_e(shift.log_e)} ≥ 1/alpha = {1 / plan.level:.3g}){span}; {outcome}. The reference has "
            f"no condition_prob, so its tests judge only the outcome among the runs that meet the condition and "
            f"cannot name this change; to bisect it, give "
            f"reference.condition_prob ({shift.before if early == working else shift.after:.2f}, what the "
            f"{plan.find.working_ref_name} end shows, if that is right)"
        )
