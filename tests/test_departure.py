"""The first departure from the reference, through `bisect.run_bisect` over simulated histories
(bench/simbisect.py: only git, builds and the program are simulated; a run's outcome is fixed by
the commit's distribution and the seed). Fixed salts: each case is one deterministic bisect."""

from __future__ import annotations

import numpy as np
import pytest

from bench import simbisect as sb
from bench.simulate import hardest_tv_shift
from bisectbot.bisecting import confirm
from bisectbot.core import broken_end
from bisectbot.errors import EndpointError
from bisectbot.statistics import stats as S

P = list(sb.P_29975.values())
REF = sb.reference_joint()
GROSS = sb.joint([1.0, 0.0, 0.0])
TV15 = np.asarray(hardest_tv_shift(P, 0.15))
TV30 = np.asarray(P) + 2 * (TV15 - np.asarray(P))  # the same direction, twice as far


def roles(report) -> list[str]:  # type: ignore[no-untyped-def]
    return [v.role for v in report.verdicts]


def claims(report) -> list:  # type: ignore[no-untyped-def]
    """What the stated confidence counts: every GOOD/BAD of a test, every change found."""
    return [
        v
        for v in report.verdicts
        if v.mode in ("reference", "quick", "change")
        and (v.verdict.value in ("good", "bad") or (v.role == "confirm-culprit" and v.verdict.value == "changed"))
    ]


def only_tests_say_good(report) -> None:  # type: ignore[no-untyped-def]
    for v in report.verdicts:
        if v.verdict.value == "good":
            assert v.mode == "reference", v  # GOOD is only ever a test against the reference


@pytest.mark.parametrize("strategy", ["auto", "plain"])
def test_two_change_points_name_the_first(strategy: str) -> None:
    """A TV 0.15 change, then a gross one: the first is named. `auto` at llama.cpp's costs takes
    reference steps; quick steps (`plain`) are fooled by the TV 0.15 commits (unlike the broken
    end), so the search walks back from the parent that departs, never from scratch."""
    hist = sb.History(64, {0: REF, 20: sb.joint(TV15), 45: GROSS}, salt=2)
    report = sb.run_report(sb.sim_config(), hist, strategy=strategy, costs="llama")
    line = hist.shas
    assert report.status.value == "found" and report.first_bad == line[20], report.message
    only_tests_say_good(report)
    strategies = report.extra["strategies"]
    assert strategies[0] == ("reference" if strategy == "auto" else "plain"), report.cost["text"]
    if strategy == "plain":  # walked back from the gross boundary, what passed kept
        assert len(strategies) == 2 and [c["commit"] for c in report.change_points[1:]] == [line[45]]
        steps = [v.sha for v in report.verdicts if v.role == "step" and v.mode == "reference"]
        assert len(steps) == len(set(steps))  # nothing tested twice against the reference
    # the bound counts every claim the answer rests on, and nothing else
    assert report.confidence == pytest.approx(1 - sum(max(v.alpha, v.beta) for v in claims(report)))
    assert report.confidence >= 0.99
    cost = report.cost
    assert cost["estimate"]["strategy"] == strategies[0] and cost["actual"]["builds"] == report.builds


def test_the_named_commit_changed_the_distribution_on_fresh_seeds() -> None:
    hist = sb.History(128, {0: REF, 70: GROSS}, salt=11)
    report = sb.run_report(sb.sim_config(), hist)
    change = [v for v in report.verdicts if v.role in ("confirm-culprit", "confirm-parent")]
    assert [v.verdict.value for v in change] == ["changed", "changed"] and all(v.block == 1 for v in change)
    assert {v.sha for v in change} == {hist.shas[70], hist.shas[69]}
    assert report.outputs is None or report.outputs["culprit"] == hist.shas[70]


def test_a_stray_outcome_on_every_commit_does_not_stop_the_bisect() -> None:
    glitchy = {0: sb.joint(P, other=0.02), 300: sb.joint([1.0, 0.0, 0.0], other=0.02)}
    report = sb.run_report(sb.sim_config(), sb.History(1024, glitchy, salt=3))
    assert report.status.value == "found" and report.first_bad == sb.History(1024, glitchy, 3).shas[300]
    assert any("stray outcome(s) seen at commits judged GOOD" in a for a in report.assumptions)


def test_steps_like_an_end_are_placed_beside_it_without_a_whole_test() -> None:
    """Steps run on the working end's seeds: a commit printing the same outputs as a commit
    placed before is put beside it after ~120 runs (GOOD-SIDE / BAD-SIDE), never called GOOD."""
    hist = sb.History(512, {0: REF, 300: GROSS}, salt=12)
    report = sb.run_report(sb.sim_config(), hist)
    steps = [v for v in report.verdicts if v.role == "step"]
    placed = [v for v in steps if v.verdict.value in ("good-side", "bad-side")]
    assert placed and all(v.runs <= 200 and "not a test against the reference" in v.reason for v in placed)
    assert report.status.value == "found" and report.first_bad == hist.shas[300]
    only_tests_say_good(report)


def test_the_sticky_search_has_a_run_cap_and_then_gives_its_credible_range() -> None:
    hist = sb.History(512, {0: REF, 200: sb.joint(TV15)}, salt=4)
    report = sb.run_report(sb.sim_config(search_runs=600), hist, strategy="sticky")
    assert report.status.value == "ambiguous" and "used its budget of 600 runs" in report.message
    assert len(report.candidates) > 1 and hist.shas[200] in report.candidates
    assert report.confidence == 0.0 and report.posterior is not None and report.posterior < 0.99
    assert not [r for r in roles(report) if r.startswith(("retest", "confirm"))]  # nothing confirmed, nothing claimed
    assert {v.verdict.value for v in report.verdicts if v.role == "sticky"} <= {"good-side", "bad-side"}


def test_the_bad_model_has_its_own_budget_and_its_q_hat_is_used_when_it_runs_out() -> None:
    """The model stage (quick steps and sticky only) runs on test.model_runs, not run.max_runs;
    out of budget, its q̂ steers the search as it is (the confirmation decides)."""
    hist = sb.History(64, {0: REF, 30: sb.joint(TV15)}, salt=6)
    report = sb.run_report(sb.sim_config(max_runs=2000, model_runs=300), hist, strategy="plain")
    model = next(v for v in report.verdicts if v.role == "bad-model")
    assert model.runs == 300 and model.verdict.value == "inconclusive"
    assert report.status.value == "found" and report.first_bad == hist.shas[30]
    roomy = sb.run_report(sb.sim_config(max_runs=2000, model_runs=3000), hist, strategy="plain")
    assert next(v for v in roomy.verdicts if v.role == "bad-model").runs > 300
    assert "bad-model" not in roles(sb.run_report(sb.sim_config(), hist, strategy="reference"))


def test_a_walk_back_keeps_what_passed_and_tries_built_commits_first() -> None:
    """Plain quick steps on TV 0.15 then TV 0.30: the first boundary is the later change; its
    parent departs on fresh seeds, so the search goes on below it — from the last commit that
    passed the reference test, trying the commits already built before building new ones."""
    hist = sb.History(256, {0: REF, 60: sb.joint(TV15), 180: sb.joint(TV30)}, salt=6)
    report = sb.run_report(sb.sim_config(), hist, strategy="plain")
    line = hist.shas
    assert report.status.value == "found" and report.first_bad == line[60], report.message
    assert [c["commit"] for c in report.change_points] == [line[60], line[180]]
    order = [v.sha for v in report.verdicts if v.role == "step"]
    first_pass = order[: order.index(line[180]) + 1]
    walk = [sha for sha in order[len(first_pass) :]]
    built_before = [sha for sha in walk if sha in first_pass]
    assert walk and walk[: len(built_before)] == built_before  # the built ones first
    only_tests_say_good(report)


def test_a_sticky_visit_that_does_not_settle_is_probed_against_the_reference(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A commit the sticky search cannot put on either side within its visit budget ends the
    search there; it is tested against the reference (a probe, a claim in the bound) and the
    search goes on on its side."""
    monkeypatch.setattr(broken_end, "STICKY_VISIT_RUNS", 60)
    hist = sb.History(128, {0: REF, 50: sb.joint(TV15)}, salt=7)
    report = sb.run_report(sb.sim_config(), hist, strategy="sticky")
    probes = [v for v in report.verdicts if v.role == "probe"]
    assert probes and all(v.verdict.value in ("good", "bad", "inconclusive") for v in probes)
    assert report.status.value == "found" and report.first_bad == hist.shas[50]
    assert report.confidence == pytest.approx(1 - sum(max(v.alpha, v.beta) for v in claims(report)))


def test_two_commits_that_cannot_be_told_apart_are_not_named(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """When the change test shows no change between the boundary's commits, nothing is named:
    ambiguous, with both commits and their counts; the working end's zone check runs."""

    def never(*args, **kw):  # type: ignore[no-untyped-def]
        return S.Evidence(S.Verdict.INCONCLUSIVE, 2, 0.0, 0.0, "no change shown after 1 + 1 runs (budget 1 each)")

    monkeypatch.setattr(confirm.two_sample, "test_change", never)
    hist = sb.History(64, {0: REF, 30: GROSS}, salt=8)
    report = sb.run_report(sb.sim_config(), hist)
    assert report.status.value == "ambiguous" and report.first_bad is None and report.confidence == 0.0
    assert hist.shas[30][:12] in report.message and hist.shas[29][:12] in report.message
    assert "could not be told apart" in report.message
    assert "zone-check" in roles(report)


def test_a_working_end_in_the_indifference_zone_is_named_as_the_reason(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A stray outcome in 6% of runs at every commit (TV 0.06: beyond eta 0.03, within tolerance):
    when the answer hinges on it, the report says that the working end itself departs, and
    bisectbot refuses rather than re-centres (docs/how-it-decides.md)."""

    def never(*args, **kw):  # type: ignore[no-untyped-def]
        return S.Evidence(S.Verdict.INCONCLUSIVE, 2, 0.0, 0.0, "no change shown")

    monkeypatch.setattr(confirm.two_sample, "test_change", never)
    zone = {0: sb.joint(P, other=0.06), 30: sb.joint([1.0, 0.0, 0.0], other=0.06)}
    report = sb.run_report(sb.sim_config(), sb.History(64, zone, salt=19))
    assert report.status.value == "ambiguous"
    assert "itself departs from the reference by more than eta" in report.message
    assert "reference.control" in report.message
    # the same shape where the working end's own test already shows it beyond eta: refused up
    # front, with the same advice
    with pytest.raises(EndpointError, match="reference.control"):
        sb.run_report(sb.sim_config(), sb.History(64, zone, salt=9))


def test_a_skipped_parent_that_departs_while_its_twin_passes_names_both() -> None:
    """The culprit's parent was skipped as building the same binary as the commit before it; on
    fresh seeds the parent departs while that commit passes: the input rule missed something
    (in the simulation: a change placed at a commit marked equivalent), and both are named."""
    hist = sb.History(64, {0: REF, 29: GROSS}, salt=10, equivalent=frozenset({28, 29}))
    report = sb.run_report(sb.sim_config(), hist)
    line = hist.shas
    assert report.status.value == "unconfirmed", report.message
    assert "the input rule missed something" in report.message
    assert line[29][:12] in report.message and line[27][:12] in report.message
    assert "retest-equivalent" in roles(report)


def test_failing_runs_at_a_tenth_of_seeds_do_not_skip_commits() -> None:
    hist = sb.History(128, {0: REF, 40: sb.joint(TV15)}, salt=13, failing=0.10)
    report = sb.run_report(sb.sim_config(), hist)
    assert report.status.value == "found" and report.first_bad == hist.shas[40]
    assert not [v for v in report.verdicts if v.verdict.value == "skip"]


@pytest.mark.parametrize("strategy", ["auto", "plain"])
def test_find_fixed_names_the_first_commit_back_within_tolerance(strategy: str) -> None:
    """--find fixed over a fix that came in two steps (gross → TV 0.15 → the reference): the
    first fixed commit is the one within tolerance again. Quick steps take the partial fix for
    fixed (it is unlike the broken end); its re-test on fresh seeds still departs, and the search
    goes on above it."""
    hist = sb.History(96, {0: GROSS, 30: sb.joint(TV15), 70: REF}, salt=14)
    report = sb.run_report(sb.sim_config(), hist, strategy=strategy, find=sb.Find.FIXED)
    assert report.status.value == "found" and report.first_bad == hist.shas[70], report.message
    only_tests_say_good(report)
    if strategy == "plain":
        culprits = [v for v in report.verdicts if v.role == "retest-culprit"]
        assert any(v.sha == hist.shas[30] and v.verdict.value == "bad" for v in culprits)  # the partial fix
