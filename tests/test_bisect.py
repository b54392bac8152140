"""The bisect stage: the plan, the stages in order on a real generated history, and the report
they produce; an endpoint that does not test as given stops the bisect with why."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest

from bisectbot.config import load_config
from bisectbot.core.outcome import Find, Verdict
from bisectbot.core.reports import BisectStatus
from bisectbot.demo import DemoHistory
from bisectbot.edges.statedir import StateDir
from bisectbot.errors import EndpointError
from bisectbot.pipeline import bisect
from bisectbot.pipeline.events import (
    BisectStarted,
    Confirming,
    EndpointStarted,
    Event,
    Events,
    StepStarted,
    StrategyChosen,
    VerdictReached,
)
from bisectbot.pipeline.jobs import Session, plan_bisect
from bisectbot.pipeline.plan import BisectPlan, steps_estimate
from bisectbot.pipeline.summary import reproduce_line

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


@pytest.mark.heavy  # after the default suite (README: Tests)
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
