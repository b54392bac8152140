"""Bisect stages: from a planned range to the first commit that departs from the reference.

GOOD and BAD mean one thing everywhere: a test against the reference said so (GOOD = within
tolerance of it, BAD = departs by more than eta). The stages, in order, each verdict stored by
the job as it is reached (`run_bisect` runs them all):
1. endpoints (bisecting.endpoints): the broken endpoint (bad, or the old one with find=fixed)
   must test BAD and the working one GOOD (EndpointError otherwise); with slow builds the
   broken one is tested last (`plan.broken_last`): when the search ends next to it, or quick
   steps need its model (`endpoints.test_broken_end`);
2. strategy: with `auto`, the one of least expected wall time from the costs this state
   directory measured (core.policy): reference steps (every step a test against the
   reference) or quick steps (`plain`: BAD, or GOOD-SIDE once a commit is shown unlike the
   broken end; they need a model of the broken end, measured first); `sticky` when asked;
3. search: binary search with those steps (K at a time on a cluster) or the sticky Bayesian
   bisection (bisecting.sticky); what a test against the reference settled is never tested again;
4. confirm (bisecting.confirm): the commit and its parent on fresh seeds: the parent must pass
   the reference test and the commit depart from it (unless a step already showed it), and
   their runs must differ (the change test). A parent that departs means a quick step was
   misplaced: the search walks back between the last commit that passed the reference test
   and the parent, built commits first (`first_departure`, core.walkback); two commits that cannot
   be told apart make the answer ambiguous, saying why;
5. cross-check arms (bisecting.crosscheck), after the answer is printed: at the commit named
   and its parent (else at the ends), reported beside the main verdicts (they never steer the
   search and are not among the claims of its confidence);
6. summary (bisecting.summary): the report, whose confidence is a union bound over every claim
   the answer rests on (each GOOD/BAD against the reference, each change found), with the forecast the strategy was chosen by beside what the bisect took.
Stages 2–4 live here, on `Bisection`, a `Ledger` (bisecting.ledger: the verdicts so far and what
is known from them); the plan and the records the stages hand on are in core.plan.
Per-verdict error levels come from the whole-bisect confidence (`BisectPlan.level`). Everything
is replayed from the state database on a rerun: a killed bisect resumes where it was.
"""

from __future__ import annotations

from typing import Any, Callable

from bisectbot.bisecting import confirm, summary
from bisectbot.bisecting.bisection import Bisection
from bisectbot.bisecting.budget import Budget, BudgetSpent
from bisectbot.bisecting.crosscheck import cross_check
from bisectbot.bisecting.endpoints import (
    NothingChanged,
    check_endpoints,
    endpoint_message,
    log_command,
    test_broken_end,
    unusual_working_end,
)
from bisectbot.bisecting.sticky import sticky_search
from bisectbot.core import policy, walkback
from bisectbot.core.confirming import NO_CHANGE, Confirmation
from bisectbot.core.diagnose import band_knobs
from bisectbot.core.ledger import CULPRIT_BUDGET_FACTOR, PARENT_BUDGET_FACTOR, placed
from bisectbot.core.plan import BisectPlan, Departure, Found, ReportContext, Stop, steps_estimate
from bisectbot.core.search import SearchResult, SkipBlock, bisect_search, kary_search, scan_order, skip_blocks
from bisectbot.errors import EndpointError
from bisectbot.events import (
    BisectStarted,
    BudgetReached,
    Confirming,
    Events,
    RoundStarted,
    StepStarted,
    StrategyChosen,
    WalkingBack,
)
from bisectbot.judge.verdict import CommitTester
from bisectbot.records.commits import CommitVerdict
from bisectbot.records.reports import BisectReport, BisectStatus
from bisectbot.statistics import stats, two_sample
from bisectbot.statistics.outcome import Find, Verdict


def _shifted(res: SearchResult, by: int) -> SearchResult:
    """A search result over positions 0..m of a sub-line, in the whole line's positions."""
    return SearchResult(
        res.last_good + by,
        res.first_bad + by,
        tuple(p + by for p in res.asked),
        res.answers,
        tuple(SkipBlock(b.first + by, b.last + by, b.signature, tuple(t + by for t in b.tested)) for b in res.blocks),
    )


# -- 2. the strategy, from measured costs ----------------------------------------------------------
def choose_strategy(b: Bisection, lo: int, hi: int, third: bool) -> str:
    """`auto`: the strategy of least expected wall time (core.policy) for the range lo..hi,
    from the costs this state directory measured and what the ends' tests took; `third`:
    a confirmation already found a distribution quick steps misplace. Sticky only when
    asked, and never on a cluster (its feed runs here, not on the workers)."""
    plan, cfg, ledger = b.plan, b.tester.cfg, b.ledger
    asked = plan.strategy
    if asked == "sticky" and b.tester.where == "cluster":
        asked = "plain"
    costs = _unit_costs(b.tester.runner)
    ref = b.tester.reference
    working = ledger.end_verdict(plan.find.working_ref_name)
    assert working is not None, "the working end is always tested first"
    broken = ledger.broken_side()  # a broken end tested last: a gross defect assumed until one is seen
    if b.tester.numbers is not None:  # numbers: every step a test against the reference
        numeric = policy.numeric_situation(
            hi - lo + 1, good_runs=working.runs, bad_runs=broken.runs if broken else 100, max_runs=cfg.run.max_runs
        )
        choice = policy.choose(numeric, costs, ("reference",), only=True)
        choice = policy.Choice("reference", choice.forecasts, costs, numeric, "a number is tested at every step")
        ledger.choices.append(choice)
        b.events.emit(StrategyChosen(choice.strategy, choice.text()))
        return choice.strategy
    here = policy.situation(
        hi - lo + 1,
        ref,
        eta=cfg.test.indifference,
        good_runs=working.runs,
        bad_counts=[broken.counts[n] for n in ref.names] if broken else policy.gross_guess(ref),
        level=plan.level,
        max_runs=cfg.run.max_runs,
        model_budget=cfg.test.model_runs,
        third=1.0 if third else policy.THIRD,
    )
    allowed = ("reference", "plain") if asked == "auto" else ((asked,) if asked != "sticky" else ("plain",))
    choice = policy.choose(here, costs, allowed)
    if asked == "sticky":
        choice = policy.Choice("sticky", choice.forecasts, costs, here, "as asked")
    ledger.choices.append(choice)
    b.events.emit(StrategyChosen(choice.strategy, choice.text() if asked == "auto" else "as asked"))
    return choice.strategy


def bad_model(b: Bisection, pos: int | None = None) -> CommitVerdict:
    """Keep measuring a broken-side commit (the broken end, or later a commit found to
    depart already) until q̂ is precise relative to the bug; its own budget
    (test.model_runs). Only quick steps and the sticky search need it: they compare commits
    with q̂. Out of budget, q̂ is used as it is (it only steers)."""
    plan = b.plan
    pos = plan.broken_pos if pos is None else pos
    name = plan.find.broken_ref_name
    model = b.test(pos, plan.ask(f"{name}-model", mode="bad-model"))
    if model.verdict is Verdict.SKIP and pos == plan.broken_pos:
        raise EndpointError(endpoint_message(name, plan.ref(name), model, Verdict.BAD, log_command(b, model)))
    return model


# -- 3. search ---------------------------------------------------------------------------------------
def search(b: Bisection, strategy: str, model: CommitVerdict | None, lo: int, hi: int, walk_back: bool) -> Found:
    """The boundary between lo (working side) and hi (broken side), searched with reference
    steps, quick steps against q̂ (plain), or the sticky Bayesian bisection. Positions already
    tested against the reference are not tested again; after a walk-back, commits already
    built are tried first."""
    if strategy == "sticky":
        return sticky_search(b, model, lo, hi)
    plan, ledger = b.plan, b.ledger
    q_bad = b.q_bad(model)
    mode = "reference" if strategy == "reference" else "quick"
    budget = b.step_budget()
    steps = steps_estimate(hi - lo + 1)
    asked: list[int] = []
    answers: list[Verdict] = []
    signatures: dict[int, str] = {}

    def oracle(i: int) -> tuple[Verdict, str]:
        pos = lo + i
        idle = sum(1 for a in answers if not a.informative)
        b.events.emit(StepStarted(len(asked) + 1, steps, plan.line[pos], pos, plan.n - 1, idle))
        # a broken end tested last: BAD tests lean toward the latest commit found BAD
        q_now = q_bad if q_bad is not None else b.q_bad(model)
        v = b.test(pos, plan.ask("step", mode=mode, q_bad=q_now, budget=budget, alike=b.alike_table()))
        if v.verdict is Verdict.INCONCLUSIVE and mode == "quick":
            v = probe(b, pos, model)  # neither side within the budget: the reference places it
        answer = plan.find.search_verdict(placed(v.verdict))
        asked.append(pos)
        answers.append(answer)
        if not answer.informative:
            signatures[pos] = v.signature
            b.announce_block(pos, skip_blocks(asked, answers, signatures))
        return answer, v.signature

    skip = plan.skipped_in(lo, hi)
    known = {p - lo: a for p, a in ledger.known(lo, hi).items()}
    prefer = {p - lo for p in ledger.built() if lo < p < hi} if walk_back else set()
    if b.width > 1:
        res, _ = kary_search(
            hi - lo + 1, b.width, lambda ps: _round(b, ps, lo, model, mode, q_bad, budget), skip, known, prefer
        )
        return Found(_shifted(res, lo), strategy)
    res = bisect_search(hi - lo + 1, oracle, skip, known, prefer)
    ledger.rounds += len(res.asked)
    return Found(_shifted(res, lo), strategy)


def _round(
    b: Bisection,
    offsets: list[int],
    lo: int,
    model: CommitVerdict | None,
    mode: str,
    q_bad: tuple[float, ...] | None,
    budget: int,
) -> list[tuple[Verdict, str]]:
    """One round on a cluster: the commits at lo + offsets, each with a step; a quick step
    that cannot place its commit is then probed against the reference."""
    plan = b.plan
    positions = [lo + i for i in offsets]
    b.ledger.rounds += 1
    b.events.emit(RoundStarted(b.ledger.rounds, tuple(plan.line[p] for p in positions)))
    ends = b.alike_table()
    got = b.test_many(
        [(plan.line[p], plan.ask("step", mode=mode, q_bad=q_bad, budget=budget, alike=ends)) for p in positions]
    )
    out = []
    for pos, v in zip(positions, got):
        if v.verdict is Verdict.INCONCLUSIVE and mode == "quick":
            v = probe(b, pos, model)
        out.append((plan.find.search_verdict(placed(v.verdict)), v.signature))
    return out


def probe(b: Bisection, pos: int, model: CommitVerdict | None) -> CommitVerdict:
    """A commit the search could not place, tested against the reference (its own runs,
    block 0: the test is one more claim in the bound, whatever block it reads)."""
    return b.test(pos, b.plan.ask("probe", q_bad=b.q_bad(model), budget=b.step_budget()))


# -- 3a. scan (--scan): a departure between two commits that test GOOD -------------------------------
def scan(b: Bisection) -> tuple[int, int] | Departure:
    """--scan (with --find bad): the bad end may test GOOD too (a defect that came and went
    between the ends is what is looked for). Every commit between that can change the binary
    is tested against the reference, the middle first (core.search.scan_order), then the bad
    end; at the first that is not GOOD (BAD, or undecided within a step's budget, as a search
    places it) the boundary is between it and the last commit below it that tested GOOD:
    (lo, hi) for `first_departure`. When none departs: status clean, each GOOD a claim."""
    plan = b.plan
    assert plan.find is Find.BAD, "--scan looks for a departure with --find bad"
    user = {p for p in range(plan.n) if plan.line[p] in plan.user_skipped}
    order = [p for p in scan_order(plan.n) if p not in user] + [plan.n - 1]
    budget = b.step_budget()
    skipped = 0
    for i, pos in enumerate(order):
        b.events.emit(StepStarted(i + 1, len(order), plan.line[pos], pos, plan.n - 1))
        role = "bad-endpoint" if pos == plan.n - 1 else "scan"
        v = b.test(pos, plan.ask(role, budget=None if pos == plan.n - 1 else budget))
        skipped += v.verdict is Verdict.SKIP
        if placed(v.verdict).side is Verdict.BAD:
            return b.ledger.last_passed(pos), pos
    tested = len(order) - skipped
    could = f"; {skipped} could not be built or run" if skipped else ""
    return Departure(
        BisectStatus.CLEAN,
        (
            f"no departure from the reference between {plan.good[:12]} and {plan.bad[:12]}: the {tested} "
            f"commits tested (those between that can change the binary, and the bad end) are within "
            f"tolerance {b.tester.cfg.test.tolerance:g} of it{could}"
        ),
        Found(SearchResult(plan.n - 1, plan.n - 1), "scan"),
        [],
        ["scan"],
    )


# -- 4. confirm, and walk back when a boundary is not the first departure (core.walkback) ----------
def first_departure(b: Bisection, lo: int = 0, hi: int | None = None) -> Departure:
    """core.walkback.first_departure between lo (working side) and hi (broken side; default the
    broken end), this bisect its oracle."""
    return walkback.first_departure(_Oracle(b), lo, b.plan.n - 1 if hi is None else hi)


class _Oracle:
    """core.walkback's oracle: the searches, tests and texts of one Bisection; it holds the
    broken side's model while a search compares commits with it."""

    def __init__(self, b: Bisection):
        self.b = b
        self.find = b.plan.find
        self.level = b.plan.level
        self.confidence = b.tester.cfg.test.confidence
        self.model: CommitVerdict | None = None

    def sha(self, pos: int) -> str:
        return self.b.plan.line[pos]

    def strategy(self, lo: int, hi: int, third: bool) -> str:
        return choose_strategy(self.b, lo, hi, third)

    def prepare(self, strategy: str, lo: int, hi: int) -> None:
        """Quick steps and sticky compare commits with the broken side's distribution: measure
        it at the range's broken end (once per commit)."""
        plan = self.b.plan
        broken = hi if self.find is Find.BAD else lo
        if strategy in ("plain", "sticky") and (self.model is None or self.model.sha != plan.line[broken]):
            if broken == plan.broken_pos:
                test_broken_end(self.b, "quick steps compare commits with it")
            self.model = bad_model(self.b, broken)

    def search(self, strategy: str, lo: int, hi: int, walk_back: bool) -> Found:
        return search(self.b, strategy, self.model, lo, hi, walk_back)

    def probe(self, pos: int) -> Verdict:
        return probe(self.b, pos, self.model).verdict

    def reached(self, result: SearchResult) -> None:
        unusual_working_end(self.b, result)
        if self.b.plan.broken_pos in (result.first_bad, result.last_good):
            test_broken_end(self.b, "the search ended next to it")

    def parent_of(self, pos: int) -> str:
        return self.b.ledger.parent_of(pos)

    def needs(self, pos: int, parent: str) -> tuple[bool, bool]:
        self.b.ledger.stand_ins.clear()  # only the boundary being confirmed is reported with its stand-ins
        return (
            _needs_test(self.b, parent, self.find.parent_verdict),
            _needs_test(self.b, self.b.plan.line[pos], self.find.culprit_verdict),
        )

    def doubt(self) -> float:
        return self.b.ledger.doubt()

    def claims(self) -> int:
        return len(self.b.ledger.decisive())

    def confirm(self, pos: int, parent: str, need_parent: bool, need_culprit: bool) -> Confirmation:
        return confirm_boundary(self.b, pos, parent, need_parent, need_culprit, self.model)

    def input_rule_missed(self, pos: int, parent: str, departs: CommitVerdict) -> str | None:
        return _input_rule_missed(self.b, pos, parent, departs)

    def culprit_claim(self, pos: int) -> CommitVerdict:
        return self.b.ledger.culprit_claim(pos)

    def last_passed(self, hi: int) -> int:
        return self.b.ledger.last_passed(hi)

    def walking_back(self, why: str, lo: int, hi: int) -> None:
        line = self.b.plan.line
        self.b.events.emit(WalkingBack(why, line[lo], line[hi], hi - lo + 1))

    def condition_shift(self, pos: int) -> str | None:
        return self.b.condition_shift_text(pos)

    def range_text(self, result: SearchResult) -> str:
        return _range_text(self.b, result)

    def no_change_text(self, pos: int, parent: str, conf: Confirmation) -> str:
        return _no_change_text(self.b, pos, parent, conf)


def _needs_test(b: Bisection, sha: str, wanted: Verdict) -> bool:
    """Whether the confirmation must test the commit against the reference: it has no
    `wanted` verdict of its own, and no commit running the same program has one
    (Ledger.passed_as: remembered in `stand_ins` for the report)."""
    own = b.ledger.tested(sha)
    if own is wanted:
        return False
    if own is None and (twin := b.passed_as(sha, wanted)) is not None:
        b.ledger.stand_ins[sha] = twin
        return False
    return True


def confirm_boundary(
    b: Bisection, culprit: int, parent_sha: str, need_parent: bool, need_culprit: bool, model: CommitVerdict | None
) -> Confirmation:
    """The confirmation of the boundary at `culprit` (bisecting.confirm), on the seeds of
    block 1 that no earlier test of this bisect has read."""
    plan, find, ledger = b.plan, b.plan.find, b.ledger
    sha = plan.line[culprit]
    b.events.emit(Confirming(sha, parent_sha))
    if (alike := _alike(b, sha, parent_sha)) is not None:
        return Confirmation(NO_CHANGE, why=alike)
    b.within_budget()
    q_bad = b.q_bad(model)
    own = {s: _own_estimate(b, s) for s in (sha, parent_sha)}
    toward_culprit = (q_bad,) if find is Find.BAD and q_bad is not None else ()
    toward_parent = (q_bad,) if find is Find.FIXED and q_bad is not None else ()
    pair = confirm.Pair(
        sha,
        parent_sha,
        ledger.fresh.get(sha, 0),
        ledger.fresh.get(parent_sha, 0),
        need_culprit,
        need_parent,
        toward_culprit + own[sha],
        toward_parent + own[parent_sha],
        *_retest_budgets(b, sha),
    )
    conf = confirm.confirm(b.tester, pair, find, level=plan.level, q_bad=q_bad)
    ledger.fresh[sha] = pair.start_culprit + conf.used[0]
    ledger.fresh[parent_sha] = pair.start_parent + conf.used[1]
    ledger.verdicts.extend(conf.verdicts)
    return conf


def _retest_budgets(b: Bisection, sha: str) -> tuple[int, int, str, str]:
    """The confirmation's budgets (parent, culprit) and the knob that sets each: test.retest_runs
    when the config gives it, else the parent 3 × the working end's GOOD and the culprit
    2 × run.max_runs (1 × for a commit placed by a test that could not decide)."""
    cfg = b.tester.cfg
    if cfg.test.retest_runs is not None:
        return cfg.test.retest_runs, cfg.test.retest_runs, "test.retest_runs", "test.retest_runs"
    parent = b.step_budget(PARENT_BUDGET_FACTOR)
    parent_knob = (
        "run.max_runs"
        if parent >= cfg.run.max_runs
        else f"test.retest_runs ({PARENT_BUDGET_FACTOR} × the working end's GOOD)"
    )
    culprit = cfg.run.max_runs * (1 if _zone_placed(b, sha) else CULPRIT_BUDGET_FACTOR)
    return parent, culprit, parent_knob, "run.max_runs (or test.retest_runs)"


def _alike(b: Bisection, sha: str, parent_sha: str) -> str | None:
    """Why no change test is worth running: the commit and its parent printed the same
    outputs on the search's seeds both ran, often enough to show them alike (two_sample.log_e_alike):
    whatever their verdicts, nothing changed between them that the test could find. None
    when they differ somewhere, or did not both run there, and for a program not deterministic
    per seed (Bisection.deterministic), whose runs on one seed need not be alike."""
    if not b.deterministic:
        return None
    same = two_sample.seed_for_seed(dict(b.tester.observations(sha)), dict(b.tester.observations(parent_sha)))
    if not same.alike():
        return None
    return (
        f"they printed the same {'number' if b.tester.numbers else 'outcome'} on {same.agree} of {same.shared} seeds "
        f"both ran in the "
        f"search (total variation below {two_sample.ALIKE_DELTA:g} between them)"
    )


def _zone_placed(b: Bisection, sha: str) -> bool:
    """The commit was put on the bad side only because a test could not show it GOOD (its
    own, or that of the commit it prints the same outputs as): likely between eta and
    tolerance, where a longer test seldom decides, so its re-test gets the usual budget."""
    own = b.ledger.own_block0(sha)
    if own is None or own.verdict is Verdict.INCONCLUSIVE:
        return own is not None
    if own.verdict is not Verdict.BAD_SIDE:
        return False
    mine = dict(b.tester.observations(sha))
    for side, other, table in b.alike_table():
        if side == Verdict.BAD.value and other != sha and b.ledger.tested(other) is None:  # an untested (zone) target
            if two_sample.seed_for_seed(mine, dict(table)).alike():
                return True
    return False


def _own_estimate(b: Bisection, sha: str) -> tuple[tuple[float, ...], ...]:
    """The commit's own search runs (block 0, other seeds than the confirmation's), smoothed:
    what the change test's mixture leans toward for it."""
    for v in reversed(b.ledger.verdicts):
        if v.sha == sha and v.arm == "main" and v.block == 0 and any(v.counts.values()):
            return (stats.kt_smooth([v.counts.get(n, 0) for n in b.tester.reference.names]),)
    return ()


def _input_rule_missed(b: Bisection, culprit: int, parent_sha: str, parent: CommitVerdict) -> str | None:
    """The parent of the candidate was skipped as building the same binary as line[c − 1],
    and departs on fresh seeds. When line[c − 1] passes the reference test on fresh seeds
    too, two commits with the same compile inputs disagree: the input rule missed something
    (both named). Otherwise (it departs as well) None: the search walks back."""
    plan, find, ledger = b.plan, b.plan.find, b.ledger
    same = plan.line[culprit - 1]
    b.within_budget()
    start = ledger.fresh.get(same, 0)
    v = b.test_sha(same, plan.ask("retest-equivalent", block=1, start=start, q_bad=b.q_bad()))
    ledger.fresh[same] = start + v.runs
    if v.verdict is not find.parent_verdict:
        return None
    return (
        f"the input rule missed something: {parent_sha[:12]} was skipped as building the same binary as "
        f"{same[:12]} (none of its build's inputs changed), yet on fresh seeds {same[:12]} tests "
        f"{v.verdict.value.upper()} and {parent_sha[:12]} {parent.verdict.value.upper()}; rerun with "
        f"--all-commits"
    )


def _range_text(b: Bisection, result: SearchResult) -> str:
    plan = b.plan
    inside = [blk for blk in result.blocks if blk.last >= result.last_good + 1 and blk.first <= result.first_bad - 1]
    parts = [summary.block_text(b, blk) for blk in inside if blk.signature]
    if user := [plan.line[p][:12] for p in result.candidates if plan.line[p] in plan.user_skipped]:
        parts.append(f"skipped by the user (--skip/--exclude): {', '.join(user)}")
    why = "; ".join(parts) or "the commits between could not be decided"
    crashed = any(blk.signature.startswith("runs ") and "match parse" not in blk.signature for blk in inside)
    if crashed and b.tester.reference.failed is None:  # a crash rate the tests do not see
        why += (
            "; commits whose runs mostly fail are skipped, as failed runs are no observation (statistic.failures: "
            "skip): if the crash is the bug, set statistic.failures: outcome to bisect it"
        )
    return (
        f"{len(result.candidates)} candidates between {plan.line[result.last_good][:12]} and "
        f"{plan.line[result.first_bad][:12]}: {why}"
    )


def _no_change_text(b: Bisection, culprit: int, parent_sha: str, conf: Confirmation) -> str:
    """Why a boundary between a GOOD and a BAD is not named: the two commits look alike (on
    the search's shared seeds, or on fresh seeds after the change test's budget). When the
    working end itself departs from the reference by more than eta, that is the likely
    cause: say so (bisectbot refuses rather than re-centres)."""
    plan, cfg = b.plan, b.tester.cfg
    sha = plan.line[culprit]
    if conf.change is not None:
        c, p = conf.change
        seen = f"on fresh seeds their runs could not be told apart ({_short(c)} against {_short(p)})"
    else:
        seen = conf.why
    text = (
        f"{sha[:12]} and its parent {parent_sha[:12]} are on either side of the search's boundary, but "
        f"{seen}: both may sit between eta {cfg.test.indifference:g} and tolerance "
        f"{cfg.test.tolerance:g} from the reference, where a change may be called either way: {band_knobs()}"
    )
    zone = zone_check(b)
    if zone is not None and zone.verdict is Verdict.BAD:
        text += (
            f"; the {plan.find.working_ref_name} end {zone.sha[:12]} itself departs from the reference by "
            f"more than eta ({zone.reason}): the reference does not describe it, so bisectbot does not "
            f"name a commit; to look for the first change from that end, make it the reference "
            f"(reference.control with its commit), or raise test.eta"
        )
    return text


def zone_check(b: Bisection) -> CommitVerdict | None:
    """Does the working end depart from the reference by more than eta? Its runs (block 0)
    continued with the BAD test alone, up to run.max_runs: asked only when an answer hinges
    on it (no builds, only runs). Not when the reference is that end's own runs (`reference:
    good`): a commit cannot depart from itself."""
    plan = b.plan
    if b.control_at_working_end:
        return None
    try:
        return b.test(plan.working_pos, plan.ask("zone-check", mode="depart", q_bad=b.q_bad()))
    except BudgetSpent:
        return None


def stopped(b: Bisection, stop: BudgetSpent) -> Departure:
    """A bisect ended by --max-builds or --deadline: the range the verdicts reached so far
    leave (the ends as given until they are tested), as status `stopped`. Everything
    finished is stored, so the same command resumes from here."""
    plan = b.plan
    b.events.emit(BudgetReached(str(stop)))
    lo, hi = b.ledger.reached()
    result = SearchResult(lo, hi)
    left = len(summary.candidates(plan, result))
    message = (
        f"stopped early: {stop}; the {plan.find.what} commit is one of the {left} commit(s) after "
        f"{plan.line[lo][:12]} up to {plan.line[hi][:12]}; run the same command again to go on: it "
        f"resumes from the state directory"
    )
    return Departure(BisectStatus.STOPPED, message, Found(result, plan.strategy), [], [], Stop(stop.by, str(stop)))


def _short(v: CommitVerdict) -> str:
    if v.values:
        return f"mean {v.values['mean']:.4g} of {v.values['n']:.0f} runs"
    return " ".join(f"{k}={c}" for k, c in v.counts.items() if c) or "no counted runs"


def _unit_costs(runner: Any) -> policy.UnitCosts:
    """What a build and a run cost here: the runner measures them (a simulated runner states them)."""
    costs = getattr(runner, "unit_costs", None)
    return costs() if costs is not None else policy.DEFAULT_COSTS


def run_bisect(
    plan: BisectPlan,
    tester: CommitTester,
    events: Events,
    context: ReportContext,
    budget: Budget | None = None,
    *,
    narrow: Callable[[BisectPlan], BisectPlan] | None = None,
) -> BisectReport:
    """All six stages, after `narrow` (the job's narrowing of the line: bisecting.narrow, built
    here or on a cluster) when the plan is not narrowed yet; raises EndpointError when an
    endpoint does not test as given. With a `budget` that runs out (while the ends are built to
    narrow the line, or later), the report (status `stopped`) gives the range reached so far."""
    spent: BudgetSpent | None = None
    try:
        plan = narrow(plan) if narrow is not None and plan.narrowed is None else plan
    except BudgetSpent as stop:
        spent = stop
    b = Bisection(plan, tester, events, budget)
    if spent is not None:  # out of budget while building the ends: the whole range, as given
        return summary.report(b, stopped(b, spent), context)
    events.emit(BisectStarted(plan.n, plan.good, plan.bad, plan.find.value, plan.level, steps_estimate(plan.n)))
    try:
        check_endpoints(b)
        if plan.scan:
            reached = scan(b)
            departure = reached if isinstance(reached, Departure) else first_departure(b, *reached)
        else:
            departure = first_departure(b)
    except BudgetSpent as stop:
        departure = stopped(b, stop)
    except NothingChanged as clean:
        departure = clean.departure
    cross_check(b, departure)
    return summary.report(b, departure, context)
