"""The first departure from the reference, through `bisect.run_bisect` over simulated histories
(bench/simbisect.py: only git, builds and the program are simulated; a run's outcome is fixed by
the commit's distribution and the seed). Fixed salts: each case is one deterministic bisect."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from bisectbot.core import stats as S

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench import simbisect as sb  # noqa: E402

P = list(sb.P_29975.values())
REF = sb.reference_joint()
GROSS = sb.joint([1.0, 0.0, 0.0])
TV15 = np.asarray(S.hardest_tv_shift(P, 0.15))
TV30 = np.asarray(P) + 2 * (TV15 - np.asarray(P))  # the same direction, twice as far


def roles(report) -> list[str]:  # type: ignore[no-untyped-def]
    return [v.role for v in report.verdicts]


def test_two_change_points_name_the_first_and_list_both() -> None:
    hist = sb.History(64, {0: REF, 20: sb.joint(TV15), 45: GROSS}, salt=2)
    report = sb.run_report(sb.sim_config(), hist)
    line = hist.shas
    assert report.status.value == "found" and report.first_bad == line[20]
    first, *later = report.change_points
    assert first["commit"] == line[20] and first["first"] and [c["commit"] for c in later] == [line[45]]
    assert any("1 later change point(s) crossed" in a for a in report.assumptions)
    # the bound counts every decisive test (two re-test pairs here), and nothing else
    decisive = [v for v in report.verdicts if v.role in ("retest-culprit", "retest-parent", "probe")]
    assert report.confidence == 1 - sum(max(v.alpha, v.beta) for v in decisive) >= 0.99


def test_a_stray_outcome_on_every_commit_does_not_stop_the_bisect() -> None:
    glitchy = {0: sb.joint(P, other=0.02), 300: sb.joint([1.0, 0.0, 0.0], other=0.02)}
    report = sb.run_report(sb.sim_config(), sb.History(1024, glitchy, salt=3))
    assert report.status.value == "found" and report.first_bad == sb.History(1024, glitchy, 3).shas[300]
    assert any("stray outcome(s) seen at commits judged GOOD" in a for a in report.assumptions)


def test_the_sticky_search_has_a_run_cap_and_then_gives_its_credible_range() -> None:
    hist = sb.History(512, {0: REF, 200: sb.joint(TV15)}, salt=4)
    report = sb.run_report(sb.sim_config(search_runs=600), hist, strategy="sticky")
    assert report.status.value == "ambiguous" and "used its budget of 600 runs" in report.message
    assert len(report.candidates) > 1 and hist.shas[200] in report.candidates
    assert report.confidence == 0.0 and report.posterior is not None and report.posterior < 0.99
    assert not [r for r in roles(report) if r.startswith("retest")]  # nothing confirmed, nothing claimed


def test_the_bad_model_has_its_own_budget_and_its_q_hat_is_used_when_it_runs_out() -> None:
    """The model stage runs on test.model_runs, not run.max_runs (it used to be capped there and
    abort the bisect); out of budget, its q̂ steers the search as it is (the re-tests decide)."""
    hist = sb.History(64, {0: REF, 30: sb.joint(TV15)}, salt=6)
    report = sb.run_report(sb.sim_config(max_runs=2000, model_runs=300), hist)
    model = next(v for v in report.verdicts if v.role == "bad-model")
    assert model.runs == 300 and model.verdict.value == "inconclusive"
    assert report.status.value == "found" and report.first_bad == hist.shas[30]
    roomy = sb.run_report(sb.sim_config(max_runs=2000, model_runs=3000), hist)
    assert next(v for v in roomy.verdicts if v.role == "bad-model").runs > 300


def test_a_two_change_point_history_searched_plainly_crosses_the_later_one() -> None:
    """TV 0.15 then TV 0.30 the same way, plain two-point steps against the bad end's q̂: the
    first boundary found is the later change; its parent departs too, so the search goes on
    below it with the parent's distribution as the broken end and names the first change."""
    hist = sb.History(256, {0: REF, 60: sb.joint(TV15), 180: sb.joint(TV30)}, salt=6)
    report = sb.run_report(sb.sim_config(), hist, strategy="plain")
    assert report.status.value == "found" and report.first_bad == hist.shas[60]
    assert [c["commit"] for c in report.change_points] == [hist.shas[60], hist.shas[180]]
    assert roles(report).count("bad-model") == 2


def test_a_sticky_visit_that_does_not_settle_is_probed_against_the_reference(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A commit the sticky search cannot put on either side within its visit budget ends the
    search there; it is tested against the reference on fresh seeds (a probe, counted in the
    bound) and the search goes on on its side."""
    monkeypatch.setattr(S, "STICKY_VISIT_RUNS", 60)
    hist = sb.History(128, {0: REF, 50: sb.joint(TV15)}, salt=7)
    report = sb.run_report(sb.sim_config(), hist, strategy="sticky")
    probes = [v for v in report.verdicts if v.role == "probe"]
    assert probes and all(v.block == 1 and v.verdict.value in ("good", "bad") for v in probes)
    assert report.status.value == "found" and report.first_bad == hist.shas[50]
    decisive = [v for v in report.verdicts if v.role in ("retest-culprit", "retest-parent", "probe")]
    assert report.confidence == 1 - sum(max(v.alpha, v.beta) for v in decisive)
