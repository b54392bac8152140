"""The pure decisions around the search (issue 47), property-tested over oracles, as
cargo-bisect-rustc tests `least_satisfying`: core.confirming.settle (when a pair's fresh runs
have answered), core.walkback.first_departure (search, confirm, walk back) and
core.assembly.assemble (the report from the ledger and gathered facts). No git, no builds, no
runs: simulated sides, searches and histories with hypothesis."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from bisectbot.core import walkback
from bisectbot.core.assembly import Facts, assemble
from bisectbot.core.confirming import (
    CULPRIT_HOLDS,
    FOUND,
    NO_CHANGE,
    PARENT_DEPARTS,
    SIDES,
    UNDECIDED,
    UNTESTABLE,
    Confirmation,
    Untestable,
    settle,
)
from bisectbot.core.ledger import Ledger
from bisectbot.core.plan import BisectPlan, ChangePoint, Departure, Found, ReportContext
from bisectbot.core.search import SearchResult, bisect_search
from bisectbot.records.reports import BisectReport, BisectStatus, ConfigSummary
from bisectbot.statistics import stats
from bisectbot.statistics.outcome import Find, Verdict
from sample_reports import ENVIRONMENT, REFERENCE, verdict

DECISIONS = st.sampled_from([Verdict.GOOD, Verdict.BAD, Verdict.INCONCLUSIVE])


# -- core.confirming.settle ----------------------------------------------------------------------
@dataclass
class ScriptedSide:
    """A side whose test decides `decision` after `after` runs, and cannot run past `fails_at`."""

    decision: Verdict
    after: int
    fails_at: int | None = None
    runs: int = 0
    closed_at: list[int] = field(default_factory=list)
    log: list[str] | None = None
    name: str = ""

    def advance(self) -> None:
        if self.fails_at is not None and self.runs >= self.fails_at:
            raise Untestable("killed by SIGSEGV")
        self.runs += 1
        if self.log is not None:
            self.log.append(self.name)

    def close(self) -> None:
        self.closed_at.append(self.runs)

    def decide(self) -> Verdict | None:
        return self.decision if self.runs >= self.after else None

    def snapshot(self) -> int:
        return self.runs


pair_cases = st.fixed_dictionaries(
    {
        "culprit": st.tuples(DECISIONS, st.integers(1, 30), st.none() | st.integers(0, 40)),
        "parent": st.tuples(DECISIONS, st.integers(1, 30), st.none() | st.integers(0, 40)),
        "needed": st.sets(st.sampled_from(SIDES)),
        "change": st.tuples(st.sampled_from([Verdict.CHANGED, Verdict.INCONCLUSIVE]), st.integers(1, 30)),
        "find": st.sampled_from(list(Find)),
    }
)


@given(pair_cases)
@settings(max_examples=400, deadline=None)
def test_a_pair_is_found_exactly_when_every_question_got_the_answer_the_boundary_needs(case: dict) -> None:
    log: list[str] = []
    sides = {
        name: ScriptedSide(decision, after, fails_at, log=log, name=name)
        for name, (decision, after, fails_at) in ((n, case[n]) for n in SIDES)
    }
    wanted = {"culprit": case["find"].culprit_verdict, "parent": case["find"].parent_verdict}
    said, after = case["change"]

    def change() -> Verdict | None:
        return said if min(s.runs for s in sides.values()) >= after else None

    out = settle(sides, case["needed"], wanted, change)
    # FOUND ⇔ no side failed, every asked test gave what the boundary needs, and a change was shown
    every = all(out.decided.get(n, (None,))[0] is wanted[n] for n in case["needed"])
    assert (out.outcome == FOUND) == (
        out.untestable is None and every and out.change is not None and out.change[0] is Verdict.CHANGED
    ), out
    # each outcome names the side it turned on, with what that side's test said
    if out.outcome in (PARENT_DEPARTS, CULPRIT_HOLDS, UNDECIDED):
        side = out.why_side
        assert side in case["needed"] and out.decided[side][0] is not wanted[side]
        assert (out.outcome == PARENT_DEPARTS) == (side == "parent" and out.decided[side][0] is wanted[side].flipped())
    if out.outcome == NO_CHANGE:
        assert out.change is not None and out.change[0] is Verdict.INCONCLUSIVE
    if out.outcome == UNTESTABLE:
        assert out.untestable is not None and out.untestable[0] == out.why_side
    # a test decides once, on the runs made when it did; nothing asked decides beyond what was asked
    assert set(out.decided) <= case["needed"]
    for name, (_, runs) in out.decided.items():
        assert runs >= sides[name].after
    # lockstep until the change test decides: culprit, parent, culprit, parent, …
    before_change = log if out.change is None else log[: 2 * out.change[1]]
    assert before_change == [SIDES[i % 2] for i in range(len(before_change))]
    # after it, a side runs only while its own test is asked and open
    if out.change is not None:
        for name in SIDES:
            at_change = out.change[1 if name == "culprit" else 2]
            assert sides[name].runs == at_change or name in case["needed"]
            if name in out.decided:  # and stops once it has decided
                assert sides[name].runs == max(out.decided[name][1], at_change)


def test_settle_stops_at_the_first_answer_that_rules_the_pair_out() -> None:
    sides = {"culprit": ScriptedSide(Verdict.BAD, 5), "parent": ScriptedSide(Verdict.BAD, 3)}
    out = settle(sides, {"culprit", "parent"}, {"culprit": Verdict.BAD, "parent": Verdict.GOOD}, lambda: None)
    assert out.outcome == PARENT_DEPARTS and sides["parent"].runs == 3 and sides["culprit"].runs == 3


# -- core.walkback.first_departure -----------------------------------------------------------------
def cv(sha: str, role: str, v: Verdict) -> object:
    return verdict(sha, role, v, {"a": 1})


@dataclass
class History:
    """A line of commits, each departing from the reference or not (`departs`), searched by a
    binary search whose steps read `misplaced` positions the wrong way (quick steps that put a
    commit on the wrong side), and confirmed truthfully."""

    departs: list[bool]
    misplaced: set[int]
    find: Find = Find.BAD
    level: float = 5e-4
    confidence: float = 0.99
    confirmed: list[tuple[int, str]] = field(default_factory=list)
    claims_made: int = 2  # the two ends
    doubt_at_confirm: list[float] = field(default_factory=list)
    searches: list[tuple[int, int]] = field(default_factory=list)
    events: list[str] = field(default_factory=list)

    def sha(self, pos: int) -> str:
        return f"{pos:040x}"

    def strategy(self, lo: int, hi: int, third: bool) -> str:
        return "reference" if third else "plain"

    def prepare(self, strategy: str, lo: int, hi: int) -> None:
        pass

    def search(self, strategy: str, lo: int, hi: int, walk_back: bool) -> Found:
        self.searches.append((lo, hi))

        def step(i: int) -> tuple[Verdict, str]:
            pos = lo + i
            bad = self.departs[pos] != (pos in self.misplaced and strategy == "plain")
            return (Verdict.BAD if bad else Verdict.GOOD), ""

        res = bisect_search(hi - lo + 1, step)
        return Found(SearchResult(res.last_good + lo, res.first_bad + lo), strategy)

    def probe(self, pos: int) -> Verdict:
        return Verdict.BAD if self.departs[pos] else Verdict.GOOD

    def reached(self, result: SearchResult) -> None:
        pass

    def parent_of(self, pos: int) -> str:
        return self.sha(pos - 1)

    def needs(self, pos: int, parent: str) -> tuple[bool, bool]:
        return True, True

    def doubt(self) -> float:
        return self.claims_made * self.level

    def claims(self) -> int:
        return self.claims_made

    def confirm(self, pos: int, parent: str, need_parent: bool, need_culprit: bool) -> Confirmation:
        self.doubt_at_confirm.append(self.doubt())
        self.confirmed.append((pos, parent))
        self.claims_made += 3
        if self.departs[pos - 1]:
            return Confirmation(PARENT_DEPARTS, parent=cv(parent, "retest-parent", Verdict.BAD), why="parent departs")  # type: ignore[arg-type]
        if not self.departs[pos]:
            return Confirmation(CULPRIT_HOLDS, why="culprit holds")
        return Confirmation(FOUND)

    def input_rule_missed(self, pos: int, parent: str, departs: object) -> str | None:
        return None

    def culprit_claim(self, pos: int) -> object:
        return cv(self.sha(pos), "step", Verdict.BAD)

    def last_passed(self, hi: int) -> int:
        good = [p for p in range(hi) if not self.departs[p]]
        return max(good, default=0)

    def walking_back(self, why: str, lo: int, hi: int) -> None:
        self.events.append(f"walk back {lo}..{hi}")

    def condition_shift(self, pos: int) -> str | None:
        return None

    def range_text(self, result: SearchResult) -> str:
        return "range"

    def no_change_text(self, pos: int, parent: str, conf: Confirmation) -> str:
        return "no change"


histories = st.integers(3, 60).flatmap(
    lambda n: st.tuples(
        st.lists(st.booleans(), min_size=n - 2, max_size=n - 2),
        st.sets(st.integers(1, n - 2)),
    ).map(lambda t: ([False, *t[0], True], t[1]))
)


@given(histories)
@settings(max_examples=300, deadline=None)
def test_what_is_named_is_a_true_change_and_the_walk_back_only_goes_down(case: tuple) -> None:
    departs, misplaced = case
    h = History(departs, misplaced)
    dep = walkback.first_departure(h, 0, len(departs) - 1)  # type: ignore[arg-type]
    if dep.status is BisectStatus.FOUND:
        pos = dep.found.result.first_bad
        assert departs[pos] and not departs[pos - 1], (departs, pos)
        assert dep.message == f"first bad commit is {h.sha(pos)}"
    # every confirmation was affordable: the claims' levels never summed past 1 − confidence
    assert all(d + 3 * h.level <= 1 - h.confidence + 1e-12 for d in h.doubt_at_confirm)
    # no boundary is confirmed twice; each change point crossed is a boundary whose parent departs
    assert len(set(h.confirmed)) == len(h.confirmed)
    assert all(departs[cp.position - 1] for cp in dep.crossed)
    assert [cp.position for cp in dep.crossed] == sorted((cp.position for cp in dep.crossed), reverse=True)
    # each search after a walk-back ends below where the one before it started
    for (lo1, hi1), (lo2, hi2) in zip(h.searches, h.searches[1:]):
        assert hi2 < hi1 or lo2 > lo1


@given(st.integers(3, 80).flatmap(lambda n: st.tuples(st.just(n), st.integers(1, n - 1))))
@settings(max_examples=200, deadline=None)
def test_one_change_and_honest_steps_name_it_at_once(case: tuple[int, int]) -> None:
    n, at = case
    h = History([p >= at for p in range(n)], set())
    dep = walkback.first_departure(h, 0, n - 1)  # type: ignore[arg-type]
    assert dep.status is BisectStatus.FOUND and dep.found.result.first_bad == at
    assert h.confirmed == [(at, h.sha(at - 1))] and dep.crossed == []


def test_a_misplaced_step_is_walked_back_below_the_parent_that_departs() -> None:
    departs = [False, False, True, True, True, True, True, True]
    h = History(departs, misplaced={2, 3})  # quick steps put 2 and 3 on the good side
    dep = walkback.first_departure(h, 0, len(departs) - 1)  # type: ignore[arg-type]
    assert dep.status is BisectStatus.FOUND and dep.found.result.first_bad == 2
    assert [cp.position for cp in dep.crossed] == [4] and h.events == ["walk back 1..3"]
    assert dep.strategies == ["plain", "reference"]


def test_out_of_error_budget_no_boundary_is_confirmed() -> None:
    h = History([False, True], set(), confidence=0.99)
    h.claims_made = 100  # 100 claims at 5e-4: 0.05 > 0.01
    dep = walkback.first_departure(h, 0, 1)  # type: ignore[arg-type]
    assert dep.status is BisectStatus.UNCONFIRMED and h.confirmed == []
    assert dep.message.startswith("no boundary confirmed within the error budget (confidence 0.99): 100 claims")


# -- core.assembly.assemble -----------------------------------------------------------------------
def _plan(n: int) -> BisectPlan:
    return BisectPlan(
        job="bisect-x",
        line=tuple(f"{i:040x}" for i in range(n)),
        good_ref="v1",
        bad_ref="main",
        find=Find.BAD,
        strategy="auto",
        level=5e-4,
        config_path="c.yaml",
    )


@given(
    st.integers(4, 40).flatmap(
        lambda n: st.tuples(
            st.just(n),
            st.integers(1, n - 1),
            st.lists(st.tuples(st.integers(0, n - 1), DECISIONS), max_size=12),
            st.sampled_from([BisectStatus.FOUND, BisectStatus.AMBIGUOUS, BisectStatus.UNCONFIRMED]),
        )
    )
)
@settings(max_examples=200, deadline=None)
def test_a_report_says_what_its_verdicts_and_departure_hold(case: tuple) -> None:
    n, at, steps, status = case
    plan = _plan(n)
    ledger = Ledger(plan)
    line = plan.line
    ledger.verdicts += [cv(line[0], "good-endpoint", Verdict.GOOD), cv(line[-1], "bad-endpoint", Verdict.BAD)]  # type: ignore[list-item]
    ledger.verdicts += [cv(line[p], "step", v) for p, v in steps]  # type: ignore[misc]
    crossed = [ChangePoint(at, cv(line[at - 1], "retest-parent", Verdict.BAD), cv(line[at], "step", Verdict.BAD))]  # type: ignore[arg-type]
    dep = Departure(status, "the message", Found(SearchResult(at - 1, at), "plain"), crossed, ["plain"])
    facts = Facts(
        eta=0.03,
        tolerance=0.1,
        reference=stats.Reference.from_probs({"a": 0.5, "b": 0.5}),
        summary=REFERENCE,
        subjects={line[at]: "a subject"},
        skip_blocks=(),
    )
    context = ReportContext(REFERENCE, ConfigSummary("c", "d", "c.yaml", "e"), ENVIRONMENT)
    report = assemble(ledger, dep, context, facts)
    assert report.builds == len({v.sha for v in ledger.verdicts}) and report.verdicts == ledger.verdicts
    found = status is BisectStatus.FOUND
    assert report.first_bad == (line[at] if found else None) and report.last_good == line[at - 1]
    assert report.confidence == (max(0.0, 1 - ledger.doubt()) if found else 0.0)
    # what a found commit proves: the first departure only when nothing before it went untested
    if found:
        assert report.proved is not None and report.proved["commit"] == line[at]
        assert report.proved["first_departure"] == (report.untested_before == [])
        for row in report.untested_before:
            assert line.index(row["after"]) < line.index(row["before"]) <= at
    else:
        assert report.proved is None and report.untested_before == []
    assert [cp["commit"] for cp in report.change_points][-1] == line[at]
    assert "the bound counts the" in report.assumptions[0]
    assert BisectReport.from_json(report.to_json()) == report  # the JSON form holds all of it
