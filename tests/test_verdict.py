"""The verdict stage: the pure `judge`, and `Tester` on a real generated history (real builds,
real runs): decisions, replay, skips, the events it emits, cancellation, the sticky feed."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterator

import pytest

from bisectbot.config import load_config
from bisectbot.core import stats
from bisectbot.core.outcome import Verdict
from bisectbot.core.records import Ask
from bisectbot.demo import DemoHistory
from bisectbot.edges.storage import StateDir
from bisectbot.pipeline.events import Building, Cancelled, Event, Events, VerdictReached
from bisectbot.pipeline.jobs import Session
from bisectbot.pipeline.verdict import Untestable, judge

REF = stats.Reference.from_probs({"a": 0.5, "b": 0.3, "c": 0.2})  # categories a, b, c, <other>
ASK = Ask(role="test", alpha=1e-3, beta=1e-3)


def test_judge_runs_the_test_the_question_asks_for() -> None:
    gross = [0, 60, 0, 0]
    assert judge(gross, ASK, REF, tolerance=0.1, budget=1000).decision is Verdict.BAD
    fair = [500, 300, 200, 0]
    assert judge(fair, ASK, REF, tolerance=0.1, budget=1000).decision is Verdict.GOOD
    assert judge([1, 1, 0, 0], ASK, REF, tolerance=0.1, budget=1000).decision is None  # keep going
    assert judge([1, 1, 0, 0], ASK, REF, tolerance=0.1, budget=2).decision is Verdict.INCONCLUSIVE


def test_judge_two_point_is_the_bisect_mode_test() -> None:
    q_bad = stats.kt_smooth([0, 90, 10, 0])
    two_point = Ask(role="step", alpha=1e-3, beta=1e-3, mode="two-point", q_bad=q_bad)
    like_bad = judge([0, 9, 1, 0], two_point, REF, tolerance=0.1, budget=1000)
    like_good = judge([15, 3, 2, 0], two_point, REF, tolerance=0.1, budget=1000)
    assert like_bad.decision is Verdict.BAD and like_good.decision is Verdict.GOOD
    # with the generic test the same few runs would not decide GOOD (it must rule out a TV ball)
    assert judge([15, 3, 2, 0], ASK, REF, tolerance=0.1, budget=1000).decision is None


def test_judge_bad_model_measures_until_q_hat_is_precise_enough() -> None:
    model = Ask(role="bad-model", alpha=1e-3, beta=1e-3, mode="bad-model")
    assert judge([0, 50, 0, 0], model, REF, tolerance=0.1, budget=1000).decision is None  # < 100 runs
    assert judge([0, 100, 0, 0], model, REF, tolerance=0.1, budget=1000).decision is Verdict.BAD


def test_judge_two_point_on_a_control_sample_treats_its_zeros_as_possible() -> None:
    control = stats.Reference.from_control({"a": 60, "b": 40, "c": 0})  # c never seen in the sample
    two_point = Ask(role="step", alpha=1e-3, beta=1e-3, mode="two-point",
                    q_bad=stats.kt_smooth([0, 90, 10, 0]))
    ev = judge([5, 3, 1, 0], two_point, control, tolerance=0.1, budget=1000)
    assert math.isfinite(ev.log_e_bad)  # one `c` is evidence, not an impossibility


@pytest.fixture
def session(small_demo: DemoHistory, tmp_path: Path) -> Iterator[tuple[Session, list[Event]]]:
    seen: list[Event] = []
    with StateDir(tmp_path / "st") as state:
        yield Session(load_config(small_demo.config), state, Events(seen.append)), seen


def test_a_verdict_is_reached_once_and_replayed_after(small_demo: DemoHistory, session) -> None:
    s, seen = session
    ask = Ask(role="bad-endpoint", alpha=1e-3, beta=1e-3)
    first = s.tester.verdict(small_demo.bad, ask)
    assert first.verdict is Verdict.BAD and first.executed >= first.runs > 0 and first.build == "ok"
    own = s.cfg.run.commit_seeds(small_demo.bad, 0, first.runs)  # the commit's own seeds, in order
    assert first.subject and first.seeds == (own[0], own[-1])
    assert [e.verdict for e in seen if isinstance(e, VerdictReached)] == [first]
    seen.clear()
    again = s.tester.verdict(small_demo.bad, ask)
    assert again.executed == 0 and again.counts == first.counts and again.verdict is first.verdict
    assert not [e for e in seen if isinstance(e, Building)]  # not built again either


def test_a_commit_that_does_not_build_is_skipped_with_the_reason(small_demo: DemoHistory, session) -> None:
    s, _ = session
    v = s.tester.verdict(small_demo.build_break, ASK)
    assert v.verdict is Verdict.SKIP and v.build == "failed" and v.runs == 0
    assert "build failed" in v.reason and v.build_log and Path(v.build_log).is_file()


def test_a_cancelled_job_stops_before_the_next_verdict_builds(small_demo: DemoHistory, session) -> None:
    s, seen = session
    s.events.cancel.cancel("maintainer")
    with pytest.raises(Cancelled) as stop:
        s.tester.verdict(small_demo.good, ASK)
    assert stop.value.who == "maintainer" and not [e for e in seen if isinstance(e, Building)]


def test_the_sticky_feed_gives_the_same_runs_as_a_verdict(small_demo: DemoHistory, session) -> None:
    s, _ = session
    verdict = s.tester.verdict(small_demo.bad, Ask(role="bad-endpoint", alpha=1e-3, beta=1e-3))
    feed = s.tester.sticky_feed(small_demo.bad)
    categories = [feed.next() for _ in range(sum(c for k, c in verdict.counts.items()))]
    feed.close()
    names = s.tester.reference.names
    assert {names[i]: categories.count(i) for i in set(categories)} == {k: c for k, c in verdict.counts.items() if c}
    assert feed.stream is not None and feed.stream.executed == 0  # replayed from the verdict's runs
    sticky = feed.verdict(Verdict.BAD, "posterior")
    assert sticky.mode == "sticky" and sticky.role == "sticky" and sticky.counts == verdict.counts
    broken = s.tester.sticky_feed(small_demo.build_break)
    with pytest.raises(Untestable, match="build failed"):
        broken.next()
