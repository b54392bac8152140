"""What one bisect has reached so far (pure): its verdicts, and what every stage reads from them.

The stages (the ends, the search, the confirmation loop, the report) all ask the same questions of
the verdicts gathered so far: which commits a test against the reference settled, which need no
new test, which are built, what the broken end looks like, how many runs a step may take, and how
much doubt the answer's claims carry (the union bound). `Ledger` holds the verdicts and answers
those questions from them alone; testing a commit is the business of whoever holds the ledger
(bisecting.bisection), which records each verdict here.
"""

from __future__ import annotations

from typing import Callable, Sequence

from bisectbot.core import policy
from bisectbot.core.plan import BisectPlan
from bisectbot.records.commits import CommitVerdict
from bisectbot.statistics import stats
from bisectbot.statistics.outcome import Verdict

# A search step's budget, relative to the runs the working end's GOOD took (see Ledger.step_budget)
STEP_BUDGET_FACTOR = 2
# A program not deterministic per seed: a step's runs are not the working end's own, so its GOOD
# takes an independent number of runs: P(more than 2 × the working end's) ≈ 3.5% at the reference
# (#29975's, 300 simulated GOOD tests), 0.4% for 3 ×, ≈ 0.002% for 4 ×
NOISY_STEP_BUDGET_FACTOR = 4
PARENT_BUDGET_FACTOR = 3
CULPRIT_BUDGET_FACTOR = 2  # × run.max_runs: a commit at the tolerance's edge can need it (not one in the zone)
STEP_BUDGET_MIN = 200


class Ledger:
    """One bisect's verdicts and the questions the stages ask of them; `verdicts` collects what they reached."""

    def __init__(self, plan: BisectPlan):
        self.plan = plan
        self.verdicts: list[CommitVerdict] = []
        self.rounds = 0  # search rounds (a step, or K commits at once on a cluster)
        self.choices: list[policy.Choice] = []  # the strategy chosen before each search, with its forecast
        self.fresh: dict[str, int] = {}  # per commit: the first block-1 seed no test of this bisect has read
        # per commit: the verdict of another commit running the same program that stands for its own (passed_as)
        self.stand_ins: dict[str, CommitVerdict] = {}

    def parent_of(self, pos: int) -> str:
        """The commit before line[pos] on the whole first-parent line: line[pos − 1], or the
        last commit skipped after it as unable to change the binary."""
        plan = self.plan
        skipped = plan.narrowed.stands_for.get(plan.line[pos - 1], ()) if plan.narrowed else ()
        return skipped[-1] if skipped else plan.line[pos - 1]

    def positions(self) -> dict[str, int]:
        """Each commit of the searched line at its position."""
        return {sha: i for i, sha in enumerate(self.plan.line)}

    # -- what is known so far ------------------------------------------------------------------
    def tested(self, sha: str) -> Verdict | None:
        """The latest GOOD or BAD a test against the reference gave this commit in this bisect."""
        for v in reversed(self.verdicts):
            if v.sha == sha and claims(v) and v.verdict.tested:
                return v.verdict
        return None

    def passed_as(self, sha: str, wanted: Verdict, program: Callable[[str], str | None]) -> CommitVerdict | None:
        """A test against the reference that gave `wanted` to another commit running the very
        same program as `sha` (`program(sha)`: byte-identical, self-contained binaries, the same
        command and input files, asked only when some test gave `wanted`). Its runs are the runs
        `sha` would make on those seeds, so its verdict stands for `sha`'s; nothing is inferred
        from source or compile inputs. None when there is none, when the same program was tested
        both ways, or when `sha` cannot be run or identified."""
        candidates = [
            v for v in self.verdicts if v.program and v.mode == "reference" and claims(v) and v.verdict.tested
        ]
        if not any(v.verdict is wanted for v in candidates):
            return None  # no build needed to know
        key = program(sha)
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
        where = self.positions()
        for v in self.verdicts:
            pos = where.get(v.sha)
            if v.arm != "main" or pos is None or not lo < pos < hi:
                continue
            if claims(v) and v.verdict.tested:
                out[pos] = (self.plan.find.search_verdict(v.verdict), "")
            elif v.mode == "reference" and v.verdict is Verdict.INCONCLUSIVE and pos not in out:
                out[pos] = (self.plan.find.search_verdict(placed(v.verdict)), "")
            elif v.verdict is Verdict.SKIP and v.block == 0 and pos not in out:
                out[pos] = (Verdict.SKIP, v.signature)
        return out

    def built(self) -> set[int]:
        """Positions whose commit this bisect has built (a test there costs runs, not a build)."""
        where = self.positions()
        return {where[v.sha] for v in self.verdicts if v.sha in where and v.build == "ok"}

    def last_passed(self, hi: int) -> int:
        """The highest position below hi whose commit passed the reference test (as the search
        reads it: the working side), or the working end."""
        good = [p for p, (a, _) in self.known(0, hi).items() if a is Verdict.GOOD]
        return max(good, default=0)

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

    def q_bad(self, names: tuple[str, ...], model: CommitVerdict | None = None) -> tuple[float, ...] | None:
        """The broken side's smoothed distribution over the reference's `names` (what BAD tests
        lean toward): its model when measured, else `broken_side`; None when nothing on that
        side is tested yet."""
        source = model or self.broken_side()
        if source is None:
            return None
        return stats.kt_smooth([source.counts[name] for name in names])

    def sides(self) -> dict[str, Verdict]:
        """The commits this search has tested against the reference (the ends, steps that
        reached GOOD or BAD, or ran out of budget between eta and tolerance), each with the side
        it is on: a commit that prints what one of them prints, seed for seed, is placed on its
        side (bisecting.bisection's alike table). Placements are never among them: a wrong one
        cannot spread."""
        out: dict[str, Verdict] = {}
        for v in self.verdicts:
            if v.arm == "main" and v.block == 0 and v.mode in ("reference", "quick"):
                tested = v.verdict.tested or (v.mode == "reference" and v.verdict is Verdict.INCONCLUSIVE)
                if tested and (side := placed(v.verdict).side) is not None:
                    out[v.sha] = side
        return out

    def step_budget(self, max_runs: int, factor: int = 0, noisy: bool = False) -> int:
        """Runs a search step may take: STEP_BUDGET_FACTOR × what the working end's GOOD took
        (at least STEP_BUDGET_MIN), at most `max_runs` (run.max_runs). A commit that has not
        shown GOOD by then (nor BAD) most likely sits between eta and tolerance: the search
        places it on the bad side (`placed`), and the confirmation decides whether anything is
        named. The parent's test there gets PARENT_BUDGET_FACTOR × (the same test as the
        working end's, whose run counts have a long tail). For a program not deterministic per
        seed (`noisy`) a step gets NOISY_STEP_BUDGET_FACTOR ×: its runs are not the working end's."""
        working = self.end_verdict(self.plan.find.working_ref_name)
        assert working is not None, "the working end is always tested first"
        times = factor or (NOISY_STEP_BUDGET_FACTOR if noisy else STEP_BUDGET_FACTOR)
        return min(max_runs, max(STEP_BUDGET_MIN, times * working.runs))

    def own_block0(self, sha: str) -> CommitVerdict | None:
        """The commit's latest main verdict on the common seeds (block 0), if any."""
        return next((v for v in reversed(self.verdicts) if v.sha == sha and v.arm == "main" and v.block == 0), None)

    def culprit_claim(self, pos: int) -> CommitVerdict:
        """The latest main verdict of the commit at `pos` (what a boundary crossed rests on)."""
        sha = self.plan.line[pos]
        return next(v for v in reversed(self.verdicts) if v.sha == sha and v.arm == "main")

    def reached(self) -> tuple[int, int]:
        """(lo, hi): the range the verdicts so far leave, the ends as given until they are tested."""
        plan = self.plan
        where = self.positions()
        working, broken = [0], [plan.n - 1]
        for v in self.verdicts:
            if v.arm == "main" and v.sha in where:
                side = plan.find.search_verdict(v.verdict).side
                if side is Verdict.GOOD:
                    working.append(where[v.sha])
                elif side is Verdict.BAD:
                    broken.append(where[v.sha])
        hi = min(broken)
        return max((p for p in working if p < hi), default=0), hi

    # -- the bound on a wrong answer -----------------------------------------------------------
    def decisive(self) -> list[CommitVerdict]:
        """Every claim an answer can rest on: each GOOD or BAD a test against the reference gave
        (the ends, reference steps, the BAD of quick steps, probes, re-tests on fresh seeds), and
        each change test that found a change."""
        return decisive(self.verdicts)

    def doubt(self) -> float:
        """The union bound on a wrong answer so far: the claims' error levels."""
        return sum(max(v.alpha, v.beta) for v in self.decisive())


def placed(verdict: Verdict) -> Verdict:
    """How a search reads a step's verdict: a test against the reference that could not show
    GOOD within its budget is not GOOD, so it goes on the side of the commits that are not
    (BAD-SIDE, a placement); a skip or anything else stays as it is."""
    return Verdict.BAD_SIDE if verdict is Verdict.INCONCLUSIVE else verdict


def decisive(verdicts: Sequence[CommitVerdict]) -> list[CommitVerdict]:
    """Every claim an answer can rest on, of these verdicts (`Ledger.decisive`): what the union
    bound adds up, and what a report says its confidence counted."""
    return [
        v
        for v in verdicts
        if claims(v) and (v.verdict.tested or (v.role == "confirm-culprit" and v.verdict is Verdict.CHANGED))
    ]


def claims(v: CommitVerdict) -> bool:
    """A main-arm verdict made by a test (not a model's "enough", a sticky placement or the
    zone check, which only ever refuses)."""
    return v.arm == "main" and v.mode in ("reference", "quick", "change")
