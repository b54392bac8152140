"""The verdict stage: the pure `judge`, and `CommitTester` on a real generated history (real builds,
real runs): decisions, replay, skips, the events it emits, cancellation, the sticky feed."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterator

import pytest

from bisectbot.config import load_config
from bisectbot.demo import DemoHistory
from bisectbot.events import Building, Cancelled, Event, Events, VerdictReached
from bisectbot.jobs.lifecycle import Session
from bisectbot.judge.verdict import Untestable, judge
from bisectbot.records.commits import Ask, BuildRecord, CommitVerdict, RunRecord, Tally
from bisectbot.state.statedir import StateDir
from bisectbot.statistics import stats
from bisectbot.statistics.outcome import Verdict

REF = stats.Reference.from_probs({"a": 0.5, "b": 0.3, "c": 0.2})  # categories a, b, c, <other>
ASK = Ask(role="test", alpha=1e-3, beta=1e-3)


def ASK_TOWARD(q_bad: tuple[float, ...]) -> Ask:  # noqa: N802 - a constant's companion
    return Ask(role="test", alpha=1e-3, beta=1e-3, q_bad=q_bad)


def test_judge_runs_the_test_the_question_asks_for() -> None:
    gross = [0, 60, 0, 0]
    assert judge(gross, ASK, REF, tolerance=0.1, budget=1000).decision is Verdict.BAD
    fair = [500, 300, 200, 0]
    assert judge(fair, ASK, REF, tolerance=0.1, budget=1000).decision is Verdict.GOOD
    assert judge([1, 1, 0, 0], ASK, REF, tolerance=0.1, budget=1000).decision is None  # keep going
    assert judge([1, 1, 0, 0], ASK, REF, tolerance=0.1, budget=2).decision is Verdict.INCONCLUSIVE


def test_judge_quick_is_bad_against_the_reference_or_only_good_side() -> None:
    q_bad = stats.kt_smooth([0, 90, 10, 0])
    quick = Ask(role="step", alpha=1e-3, beta=1e-3, mode="quick", q_bad=q_bad)
    like_bad = judge([0, 9, 1, 0], quick, REF, tolerance=0.1, budget=1000)
    unlike_bad = judge([15, 3, 2, 0], quick, REF, tolerance=0.1, budget=1000)
    assert like_bad.decision is Verdict.BAD  # a real BAD: the reference test's BAD side
    assert math.isclose(
        like_bad.log_e_bad, judge([0, 9, 1, 0], ASK_TOWARD(q_bad), REF, tolerance=0.1, budget=1000).log_e_bad
    )
    # unlike the bad end after a few runs: placed on the good side, never called GOOD
    assert unlike_bad.decision is Verdict.GOOD_SIDE and "not a test against the reference" in unlike_bad.reason
    # with the generic test the same few runs would not decide GOOD (it must rule out a TV ball)
    assert judge([15, 3, 2, 0], ASK, REF, tolerance=0.1, budget=1000).decision is None


def test_judge_depart_is_the_bad_side_alone() -> None:
    depart = Ask(role="zone-check", alpha=1e-3, beta=1e-3, mode="depart")
    assert judge([0, 30, 0, 0], depart, REF, tolerance=0.1, budget=1000).decision is Verdict.BAD
    looks_good = [int(1000 * p) for p in REF.probs]
    assert judge(looks_good, ASK, REF, tolerance=0.1, budget=1000).decision is Verdict.GOOD
    assert judge(looks_good, depart, REF, tolerance=0.1, budget=1000).decision is Verdict.INCONCLUSIVE


def test_judge_bad_model_measures_until_q_hat_is_precise_enough() -> None:
    model = Ask(role="bad-model", alpha=1e-3, beta=1e-3, mode="bad-model")
    assert judge([0, 50, 0, 0], model, REF, tolerance=0.1, budget=1000).decision is None  # < 100 runs
    assert judge([0, 100, 0, 0], model, REF, tolerance=0.1, budget=1000).decision is Verdict.BAD


def test_judge_quick_on_a_control_sample_treats_its_zeros_as_possible() -> None:
    control = stats.Reference.from_control({"a": 60, "b": 40, "c": 0})  # c never seen in the sample
    quick = Ask(role="step", alpha=1e-3, beta=1e-3, mode="quick", q_bad=stats.kt_smooth([0, 90, 10, 0]))
    ev = judge([5, 3, 1, 0], quick, control, tolerance=0.1, budget=1000)
    assert math.isfinite(ev.log_e_bad) and math.isfinite(ev.log_e_good)  # one `c` is evidence, not an impossibility


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


def test_the_feed_gives_the_same_runs_as_a_verdict(small_demo: DemoHistory, session) -> None:
    s, _ = session
    verdict = s.tester.verdict(small_demo.bad, Ask(role="bad-endpoint", alpha=1e-3, beta=1e-3))
    feed = s.tester.feed(small_demo.bad)
    categories = [feed.next() for _ in range(sum(c for k, c in verdict.counts.items()))]
    feed.close()
    names = s.tester.reference.names
    assert {names[i]: categories.count(i) for i in set(categories)} == {k: c for k, c in verdict.counts.items() if c}
    assert feed.stream is not None and feed.stream.executed == 0  # replayed from the verdict's runs
    sticky = feed.verdict(Verdict.BAD_SIDE, "posterior")
    assert sticky.mode == "sticky" and sticky.role == "sticky" and sticky.counts == verdict.counts
    # block 1 from a later seed: the seeds a confirmation reads after an earlier one
    later = s.tester.feed(small_demo.bad, block=1, start=5)
    later.next()
    later.close()
    assert later.tally.first == s.cfg.run.commit_seeds(small_demo.bad, 1, 6)[5]
    broken = s.tester.feed(small_demo.build_break)
    with pytest.raises(Untestable, match="build failed"):
        broken.next()


# -- failed runs as an outcome (statistic.failures: outcome) -----------------------------------


def sim_verdict(failures: str | None, crash: float, salt: int = 5):  # type: ignore[no-untyped-def]
    """One test of a simulated commit (#29975's reference distribution) whose runs crash a share
    `crash` of the time (bench/simbisect.py: the seeds that crash are fixed by the salt)."""
    from bench import simbisect as sb
    from bisectbot.judge.reference import resolve_reference
    from bisectbot.judge.verdict import CommitTester

    cfg = sb.sim_config(failures=failures)
    hist = sb.History(2, {0: sb.reference_joint()}, salt=salt, failing=crash)
    tester = CommitTester(cfg, sb.SimRunner(cfg, hist), resolve_reference(cfg).stats_reference(), Events())
    return tester.verdict(hist.shas[1], Ask(role="test", alpha=5e-4, beta=5e-4))


@pytest.mark.parametrize("salt", [5, 6, 7])
def test_with_failures_an_outcome_a_30_percent_crash_rate_tests_bad_and_none_good(salt: int) -> None:
    crashing = sim_verdict("outcome", 0.3, salt)
    assert crashing.verdict is Verdict.BAD and crashing.runs < 100, crashing.reason
    assert crashing.counts[stats.FAILED] == crashing.failures["crash"] > 0  # counted, and listed as failures
    sound = sim_verdict("outcome", 0.0, salt)
    assert sound.verdict is Verdict.GOOD and sound.counts[stats.FAILED] == 0
    # by default a failed run is no observation: the same runs of the crashing commit test GOOD
    ignored = sim_verdict(None, 0.3, salt)
    assert ignored.verdict is Verdict.GOOD and stats.FAILED not in ignored.counts and ignored.failures["crash"] > 0


def test_with_failures_an_outcome_a_commit_whose_runs_all_fail_is_bad_not_skipped() -> None:
    skipped = sim_verdict(None, 1.0)
    assert skipped.verdict is Verdict.SKIP and "runs mostly fail" in skipped.reason  # the default rule
    bad = sim_verdict("outcome", 1.0)
    assert bad.verdict is Verdict.BAD and bad.counts[stats.FAILED] == bad.runs


def test_runs_the_parse_cannot_read_are_told_apart_from_runs_that_fail() -> None:
    """Issue 48: output the parse rejects is "does not match parse" with the output quoted, never
    "failed"; a run that fails says its exit status and error line; both kinds, each its last."""
    said = "'pick: yellow' does not match parse (expect_tokens 3: got 1 token)"
    unread = Tally(("red", "blue"))
    unread.add(RunRecord(1, "ok", ("red",), 0, 0.1), 0)
    unread.add(RunRecord(2, "unparsable", None, 0, 0.1, detail=said.replace("yellow", "green")), None)
    unread.add(RunRecord(3, "incomplete", None, 0, 0.1, attempts=4, detail=said), None)
    assert unread.failure_reason(0) == (
        f"runs mostly do not match parse (1 unparsable, 1 incomplete of 3); last: {said}; command variant 0"
    )
    # the signature is what commits failing alike share: the key, not the output (it differs)
    assert unread.failure_signature(0) == "runs do not match parse (expect_tokens #: got # token), command variant #"
    crash = "exit status 3: error: cannot open table.txt"
    both = Tally(("red",))
    both.add(RunRecord(1, "crash", None, 3, 0.1, detail=crash), None)
    both.add(RunRecord(2, "unparsable", None, 0, 0.1, detail=said), None)
    assert both.failure_reason() == (
        f"runs mostly fail or do not match parse (1 crash, 1 unparsable of 2); last failed: {crash}; "
        f"last unreadable: {said}"
    )
    v = CommitVerdict.of("a" * 40, "s", ASK, BuildRecord("a" * 40, "ok", {}, "", 0.0), both, Verdict.SKIP, "r")
    assert (v.last_failed, v.last_unreadable) == (crash, said)
    assert CommitVerdict.from_json(v.to_json()) == v
    crashed = Tally(("red",))
    crashed.add(RunRecord(1, "crash", None, -11, 0.1, detail="killed by SIGSEGV"), None)
    assert crashed.failure_reason() == "runs mostly fail (1 crash of 1); last: killed by SIGSEGV"
    assert crashed.failure_signature(None) == "runs crash: killed by SIGSEGV"


def test_with_failures_an_outcome_a_commit_that_does_not_build_is_still_skipped(
    small_demo: DemoHistory, tmp_path: Path
) -> None:
    cfg = load_config(small_demo.config)
    cfg = cfg.model_copy(update={"statistic": cfg.statistic.model_copy(update={"failures": "outcome"})})
    with StateDir(tmp_path / "st") as state:
        s = Session(cfg, state, Events())
        assert stats.FAILED in s.tester.reference.names
        v = s.tester.verdict(small_demo.build_break, ASK)
    assert v.verdict is Verdict.SKIP and v.build == "failed" and v.runs == 0
