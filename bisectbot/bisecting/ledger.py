"""What one bisect has reached so far: its verdicts, and what every stage reads from them.

The stages (bisecting.endpoints, the search and the confirmation loop in bisecting.bisect) and the
report (bisecting.summary) all ask the same questions of the verdicts gathered so far: which
commits a test against the reference settled, which need no new test, which are built, what the
broken end looks like, how many runs a step may take, and how much doubt the answer's claims
carry (the union bound). `Ledger` holds the verdicts and answers those questions; it tests a
commit only when a stage asks it to, within the bisect's budget, and records the verdict.
"""

from __future__ import annotations

from bisectbot.bisecting.budget import Budget
from bisectbot.bisecting.plan import BisectPlan
from bisectbot.core import policy
from bisectbot.core.diagnose import ConditionShift, condition_shift, share_change_between
from bisectbot.core.search import SkipBlock
from bisectbot.events import BlockOfSkips, Events
from bisectbot.judge.verdict import CommitTester
from bisectbot.records.commits import Ask, CommitVerdict
from bisectbot.statistics import stats
from bisectbot.statistics.outcome import Verdict

# A search step's budget, relative to the runs the working end's GOOD took (see Ledger.step_budget)
STEP_BUDGET_FACTOR = 2
PARENT_BUDGET_FACTOR = 3
CULPRIT_BUDGET_FACTOR = 2  # × run.max_runs: a commit at the tolerance's edge can need it (not one in the zone)
STEP_BUDGET_MIN = 200
CONDITION_CHANGED = "the share of runs meeting the condition changed"  # how condition_shift_text begins


class Ledger:
    """One bisect's verdicts and the questions the stages ask of them; `verdicts` collects what they reached."""

    def __init__(self, plan: BisectPlan, tester: CommitTester, events: Events, budget: Budget | None = None):
        self.plan, self.tester, self.events = plan, tester, events
        self.budget = budget  # --max-builds / --deadline: checked before each verdict (and build)
        self.verdicts: list[CommitVerdict] = []
        self.rounds = 0  # search rounds (a step, or K commits at once on a cluster)
        self.choices: list[policy.Choice] = []  # the strategy chosen before each search, with its forecast
        self.fresh: dict[str, int] = {}  # per commit: the first block-1 seed no test of this bisect has read
        # per commit: the verdict of another commit running the same program that stands for its own (passed_as)
        self.stand_ins: dict[str, CommitVerdict] = {}

    @property
    def width(self) -> int:
        """Commits tested at once: the cluster's workers (judge.cluster), else 1."""
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

    def passed_as(self, sha: str, wanted: Verdict) -> CommitVerdict | None:
        """A test against the reference that gave `wanted` to another commit running the very
        same program as `sha` (byte-identical, self-contained binaries, the same command and
        input files: CommitTester.program). Its runs are the runs `sha` would make on those
        seeds, so its verdict stands for `sha`'s; nothing is inferred from source or compile
        inputs. None when there is none, when the same program was tested both ways, or when
        `sha` cannot be run or identified."""
        candidates = [
            v for v in self.verdicts if v.program and v.mode == "reference" and _claims(v) and v.verdict.tested
        ]
        if not any(v.verdict is wanted for v in candidates):
            return None  # no build needed to know
        key = self.tester.program(sha)
        if not key:
            return None
        same = [v for v in candidates if v.program == key and v.sha != sha]
        if any(v.verdict is not wanted for v in same):
            return None  # the same program tested both ways: no stand-in
        return same[-1] if same else None

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
                out[pos] = (self.plan.find.search_verdict(placed(v.verdict)), "")
            elif v.verdict is Verdict.SKIP and v.block == 0 and pos not in out:
                out[pos] = (Verdict.SKIP, v.signature)
        return out

    def built(self) -> set[int]:
        """Positions whose commit this bisect has built (a test there costs runs, not a build)."""
        where = {sha: i for i, sha in enumerate(self.plan.line)}
        return {where[v.sha] for v in self.verdicts if v.sha in where and v.build == "ok"}

    def end_verdict(self, name: str) -> CommitVerdict | None:
        """The endpoint test of the end the user named `name` (good or bad); None while a broken
        end tested last (`plan.broken_last`) is not."""
        return next((v for v in self.verdicts if v.arm == "main" and v.role == f"{name}-endpoint"), None)

    def broken_side(self) -> CommitVerdict | None:
        """What is known of the broken side's distribution: the broken end's test, else (tested
        last) the latest commit a test against the reference found BAD, else None."""
        end = self.end_verdict(self.plan.find.broken_ref_name)
        if end is not None:
            return end
        return next(
            (
                v
                for v in reversed(self.verdicts)
                if v.arm == "main" and v.verdict is Verdict.BAD and v.mode == "reference" and v.block == 0
            ),
            None,
        )

    def _q_bad(self, model: CommitVerdict | None = None) -> tuple[float, ...] | None:
        """The broken side's smoothed distribution (what BAD tests lean toward): its model when
        measured, else `broken_side`; None when nothing on that side is tested yet."""
        source = model or self.broken_side()
        if source is None:
            return None
        return stats.kt_smooth([source.counts[name] for name in self.tester.reference.names])

    def alike_table(self) -> tuple[tuple[str, str, tuple[tuple[int, int], ...]], ...]:
        """The commits this search has tested against the reference (the ends, steps that
        reached GOOD or BAD, or ran out of budget between eta and tolerance), with their
        observations on the common seeds (block 0, every commit's): a commit run on them that
        prints what one of them prints, seed for seed, is placed on its side after a few dozen
        runs (GOOD-SIDE or BAD-SIDE, two_sample.log_e_alike) instead of a whole test. Commits whose
        distributions are alike usually print the same outputs for the same seed; when they do
        not (other numerics), the step is tested against the reference as usual. Placements are
        never models for others: a wrong one cannot spread."""
        sides: dict[str, Verdict] = {}
        for v in self.verdicts:  # tested commits only: a placement is never the model of another
            if v.arm == "main" and v.block == 0 and v.mode in ("reference", "quick"):
                tested = v.verdict.tested or (v.mode == "reference" and v.verdict is Verdict.INCONCLUSIVE)
                if tested and (side := placed(v.verdict).side) is not None:
                    sides[v.sha] = side
        return tuple((side.value, sha, self.tester.observations(sha)) for sha, side in sides.items())

    def step_budget(self, factor: int = 0) -> int:
        """Runs a search step may take: STEP_BUDGET_FACTOR × what the working end's GOOD took
        (at least STEP_BUDGET_MIN), at most run.max_runs. A commit that has not shown GOOD by
        then (nor BAD) most likely sits between eta and tolerance: the search places it on the
        bad side (`placed`), and the confirmation decides whether anything is named. The
        parent's test there gets PARENT_BUDGET_FACTOR × (the same test as the working end's,
        whose run counts have a long tail)."""
        working = self.end_verdict(self.plan.find.working_ref_name)
        assert working is not None, "the working end is always tested first"
        times = factor or STEP_BUDGET_FACTOR
        return min(self.tester.cfg.run.max_runs, max(STEP_BUDGET_MIN, times * working.runs))

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
        working = self.end_verdict(find.working_ref_name)
        if working is None:
            return None
        mine = dict(tester.observations(working.sha))
        where = {sha: i for i, sha in enumerate(plan.line)}
        tested = [v for v in self.verdicts if v.arm == "main" and v.block == 0 and v.sha in where and v.runs]
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

    # -- the bound on a wrong answer -----------------------------------------------------------
    def decisive(self) -> list[CommitVerdict]:
        """Every claim an answer can rest on: each GOOD or BAD a test against the reference gave
        (the ends, reference steps, the BAD of quick steps, probes, re-tests on fresh seeds), and
        each change test that found a change."""
        return [
            v
            for v in self.verdicts
            if _claims(v) and (v.verdict.tested or (v.role == "confirm-culprit" and v.verdict is Verdict.CHANGED))
        ]

    def doubt(self) -> float:
        """The union bound on a wrong answer so far: the claims' error levels."""
        return sum(max(v.alpha, v.beta) for v in self.decisive())


def placed(verdict: Verdict) -> Verdict:
    """How a search reads a step's verdict: a test against the reference that could not show
    GOOD within its budget is not GOOD, so it goes on the side of the commits that are not
    (BAD-SIDE, a placement); a skip or anything else stays as it is."""
    return Verdict.BAD_SIDE if verdict is Verdict.INCONCLUSIVE else verdict


def _claims(v: CommitVerdict) -> bool:
    """A main-arm verdict made by a test (not a model's "enough", a sticky placement or the
    zone check, which only ever refuses)."""
    return v.arm == "main" and v.mode in ("reference", "quick", "change")
