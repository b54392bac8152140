"""The bisect stage: the plan, the stages in order on a real generated history, and the report
they produce; an endpoint that does not test as given stops the bisect with why."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Iterator

import pytest

from bisectbot.bisecting import bisect
from bisectbot.bisecting.bisection import Bisection
from bisectbot.bisecting.crosscheck import cross_check
from bisectbot.bisecting.summary import reproduce_line
from bisectbot.config import load_config
from bisectbot.core.plan import BisectPlan, Departure, Found, steps_estimate
from bisectbot.core.search import SearchResult
from bisectbot.demo import DemoHistory
from bisectbot.errors import EndpointError
from bisectbot.events import (
    Answered,
    ArmStarted,
    BisectStarted,
    Confirming,
    EndpointStarted,
    Event,
    Events,
    StepStarted,
    StrategyChosen,
    VerdictReached,
)
from bisectbot.jobs.lifecycle import Session, plan_bisect
from bisectbot.records.commits import Ask, CommitVerdict
from bisectbot.records.reports import BisectStatus
from bisectbot.state.statedir import StateDir
from bisectbot.statistics.outcome import Find, Verdict
from sample_reports import verdict as sample_verdict

LINE = tuple(f"{i:040x}" for i in range(10))


def plan(find: Find) -> BisectPlan:
    return BisectPlan("bisect-x", LINE, "v1", "main", find, "auto", 1e-3, "c.yaml")


def test_the_plan_knows_which_end_is_broken() -> None:
    bad, fixed = plan(Find.BAD), plan(Find.FIXED)
    assert (bad.broken_pos, bad.working_pos) == (9, 0) and (fixed.broken_pos, fixed.working_pos) == (0, 9)
    assert (bad.good, bad.bad, bad.n) == (LINE[0], LINE[-1], 10)
    assert fixed.ref(fixed.find.broken_ref_name) == "v1"  # --find fixed: the old ref is the broken one
    ask = bad.ask("step", mode="two-point", q_bad=(0.5, 0.5))
    assert (ask.alpha, ask.beta, ask.mode, ask.block) == (1e-3, 1e-3, "two-point", 0)
    assert steps_estimate(2) == 1 and steps_estimate(10) == 4 and steps_estimate(4097) == 12
    assert reproduce_line(fixed, "sticky") == (
        f"bisectbot bisect c.yaml --good {LINE[0]} --bad {LINE[-1]} --find fixed --strategy sticky"
    )


@pytest.fixture
def session(small_demo: DemoHistory, tmp_path: Path) -> Iterator[tuple[Session, list[Event]]]:
    seen: list[Event] = []
    with StateDir(tmp_path / "st") as state:
        yield Session(load_config(small_demo.config), state, Events(seen.append), config_path="demo.yaml"), seen


@pytest.mark.longest  # the longest tier: by hand, not in CI (README: Tests)
def test_the_stages_run_in_order_and_the_report_rests_on_their_verdicts(small_demo: DemoHistory, session) -> None:
    s, seen = session
    p = plan_bisect(s, small_demo.good, "main")
    report = bisect.run_bisect(p, s.tester, s.events, s.report_context())
    lines = [
        e for e in seen if isinstance(e, (BisectStarted, EndpointStarted, StrategyChosen, StepStarted, Confirming))
    ]
    kinds = [type(e) for e in lines]
    assert kinds[:4] == [BisectStarted, EndpointStarted, EndpointStarted, StrategyChosen]
    assert [e.name for e in lines if isinstance(e, EndpointStarted)] == ["bad", "good"]
    assert kinds[-1] is Confirming and set(kinds[4:-1]) == {StepStarted}
    # every verdict the report lists was announced as it was reached, in the same order
    assert [e.verdict for e in seen if isinstance(e, VerdictReached)] == report.verdicts
    roles = [v.role for v in report.verdicts]
    assert roles[:2] == ["bad-endpoint", "good-endpoint"] and roles[-2:] == ["confirm-culprit", "confirm-parent"]
    assert report.status is BisectStatus.FOUND and report.first_bad == small_demo.culprit
    assert report.last_good == small_demo.commits[small_demo.commits.index(small_demo.culprit) - 1]
    assert report.builds <= report.builds_bound and report.confidence >= 0.99
    assert report.reproduce == reproduce_line(p, report.strategy) and report.job == p.job
    # the culprit's runs differ from its parent's, on fresh seeds
    assert report.verdicts[-2].verdict is Verdict.CHANGED and report.verdicts[-2].block == 1
    # the strategy was chosen by the measured costs, and said so with its forecast
    chosen = next(e for e in lines if isinstance(e, StrategyChosen))
    assert chosen.strategy == report.strategy and "least expected time" in chosen.text()
    assert report.cost is not None and report.cost["estimate"]["strategy"] == report.strategy


def test_a_good_endpoint_that_tests_bad_stops_the_bisect(small_demo: DemoHistory, session) -> None:
    s, seen = session
    p = plan_bisect(s, small_demo.culprit, "main")
    with pytest.raises(
        EndpointError,
        match=rf"good ref {small_demo.culprit} \({small_demo.culprit[:12]}\) "
        r"tests BAD, expected GOOD",
    ):
        bisect.run_bisect(p, s.tester, s.events, s.report_context())
    assert not [e for e in seen if isinstance(e, StepStarted)]  # the search never started


class ArmTester:
    """Answers for the cross-check arm only: it exists from LINE[7] on (as llama-server's
    speculative decoding arrived long after #29975's culprit) and is GOOD there."""

    def __init__(self) -> None:
        self.cfg = load_config(Path(__file__).resolve().parents[1] / "configs" / "llama-cpp-29975.yaml")
        self.asked: list[tuple[str, str, str]] = []

    def verdict(self, sha: str, ask: Ask) -> CommitVerdict:
        self.asked.append((ask.role, ask.arm, sha))
        v = Verdict.NOT_APPLICABLE if LINE.index(sha) < 7 else Verdict.GOOD
        return replace(sample_verdict(sha, ask.role, v, {}), arm=ask.arm)


@pytest.mark.parametrize(
    "status, first_bad, expected",
    [
        # not applicable at the culprit: asked at the broken end too (the commit to fix)
        (BisectStatus.FOUND, 4, [("culprit", 4), ("bad-endpoint", 9), ("parent", 3)]),
        (BisectStatus.FOUND, 8, [("culprit", 8), ("parent", 7)]),
        (BisectStatus.AMBIGUOUS, 8, [("bad-endpoint", 9), ("good-endpoint", 0)]),
    ],
)
def test_arms_run_after_the_answer_at_the_culprit_and_its_parent(
    status: BisectStatus, first_bad: int, expected: list[tuple[str, int]]
) -> None:
    tester, seen = ArmTester(), []
    ledger = Bisection(plan(Find.BAD), tester, Events(seen.append))  # type: ignore[arg-type]
    departure = Departure(status, "the message", Found(SearchResult(first_bad - 1, first_bad), "plain"), [], [])
    cross_check(ledger, departure)
    assert tester.asked == [(role, "server-speculative", LINE[pos]) for role, pos in expected]
    assert isinstance(seen[0], Answered) and seen[0].text().startswith(f"[answer] {status.value}: the message")
    assert [type(e) for e in seen[1:]] == [ArmStarted] * len(expected)
    # a stopped bisect (its budget spent) runs no arm and announces no answer
    stopped = Bisection(plan(Find.BAD), ArmTester(), Events(seen.append))  # type: ignore[arg-type]
    cross_check(stopped, replace(departure, status=BisectStatus.STOPPED))
    assert stopped.tester.asked == [] and len(seen) == 1 + len(expected)  # type: ignore[attr-defined]


def test_an_ends_observations_are_remembered_until_a_run_of_it_is_stored(
    small_demo: DemoHistory, session, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The alike table asks for every end's observations at every step: the answer is
    remembered (no sha256 of the kept binaries or the inputs is read again), and a run of the
    commit stored since is in the next answer, never a stale one."""
    from bisectbot.building import keep
    from bisectbot.judge import runner
    from bisectbot.records.commits import RunRecord

    s, _ = session
    t, good = s.tester, small_demo.good
    prepared = t.runner.prepare(good)
    assert t.observations(good) == ()  # built, nothing run yet
    seeds = t.runner.seed_block(good, 0, 4)
    store = t.runner.state.store
    for seed in seeds[:3]:
        store.put_runs(prepared.run_key, good, [RunRecord(seed, "ok", ("a",), 0, 0.01, 1)])
    first = t.observations(good)
    assert [seed for seed, _ in first] == sorted(seeds[:3])
    hashed: list[object] = []
    for module in (keep, runner):
        real = module.file_sha256
        monkeypatch.setattr(module, "file_sha256", lambda p, real=real: hashed.append(p) or real(p))
    assert t.observations(good) == first and hashed == []  # remembered
    store.put_runs(prepared.run_key, good, [RunRecord(seeds[3], "ok", ("a",), 0, 0.01, 1)])
    assert [seed for seed, _ in t.observations(good)] == sorted(seeds) and hashed  # found again
    # block 0 is every commit's: the remembered seeds are what the config gives any commit
    other = small_demo.culprit
    assert t.runner.seed_block(other, 0, 50) == s.cfg.run.commit_seeds(other, 0, 50)
    assert t.runner.seed_block(other, 1, 50) == s.cfg.run.commit_seeds(other, 1, 50) != seeds[:50]
