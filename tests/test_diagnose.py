"""core.diagnose: the observed distribution beside the reference, the config mistakes runs point
at, and how many runs an undecided test would need (checked against the test itself)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from bisectbot.core.diagnose import observed_cells, observed_pairs
from bisectbot.report.hints import likely_causes, undecided_hint
from bisectbot.statistics.condition import condition_shift, log_e_discordant, share_change_between
from bisectbot.statistics.sequential import test_against_reference as against_reference
from bisectbot.statistics.stats import MISSED, OTHER, Reference

REF = Reference.from_probs({"e": 0.345, "g": 0.452, "h": 0.203})
CONDITIONAL = Reference.from_probs({"e": 0.345, "g": 0.452, "h": 0.203}, condition_prob=0.82)


def test_cells_and_pairs_are_one_computation() -> None:
    counts = {"e": 40, "g": 20, "h": 40, OTHER: 0}
    cells = observed_cells(counts, REF.names, REF.probs)
    assert [(c.label, c.count) for c in cells] == [("e", 40), ("g", 20), ("h", 40)]  # OTHER unseen: left out
    assert observed_pairs(counts, REF.names, REF.probs) == "g .20/.45 h .40/.20 e .40/.34"  # largest first
    assert observed_pairs({OTHER: 3, "e": 1}, REF.names, REF.probs).startswith("other .75/0")
    assert observed_pairs({MISSED: 7}, CONDITIONAL.names, CONDITIONAL.probs) == "missed 7"


def test_a_misspelt_reference_name_is_pointed_at() -> None:
    ref = Reference.from_probs({"e": 0.345, "gg": 0.452, "h": 0.203})  # the program prints 'g'
    causes = likely_causes({"e": 35, "gg": 0, "h": 20, OTHER: 45}, {}, {"g": 45}, ref)
    assert len(causes) == 1
    assert "45 of 100 runs (45%) gave outcomes reference.probs does not list" in causes[0]
    assert "'g' looks like the reference's 'gg', misspelt there?" in causes[0]


def test_a_real_departure_is_not_called_a_config_mistake() -> None:
    assert likely_causes({"e": 90, "g": 5, "h": 5, OTHER: 0}, {}, {}, REF) == []
    assert likely_causes({"e": 90, "g": 5, "h": 5, OTHER: 2}, {}, {"x": 2}, REF) == []  # 2% stray: not a cause


def test_a_rare_condition_and_unreadable_runs_are_named() -> None:
    causes = likely_causes({"e": 3, "g": 3, "h": 4, OTHER: 0, MISSED: 90}, {}, {}, CONDITIONAL)
    assert causes == [
        "the condition was met in 10% of runs, the reference says 82%: check statistic.condition "
        "(token, position) and reference.condition_prob"
    ]
    said = "'pick: yellow' does not match parse (expect_tokens 3: got 1 token)"
    causes = likely_causes({"e": 10, "g": 10, "h": 5}, {"unparsable": 70, "crash": 5}, {}, REF, last_unreadable=said)
    assert causes == [
        f"70 of 100 runs (70%) do not match parse (unparsable 70); the last: {said}: check the parse: section "
        "(prefix, split, expect_tokens) against it, or run `bisectbot init` again to propose one"
    ]  # 5% crashed: below FAILED_SHARE, not a cause


def test_runs_that_fail_are_a_cause_apart_from_runs_the_parse_cannot_read() -> None:
    """A program that crashes is not told to fix its parse section: its runs failed, and the
    last one says how (its exit status or signal, its last error line)."""
    crash = "exit status 3: error: cannot open table.txt"
    causes = likely_causes(
        {"e": 10, "g": 10, "h": 5},
        {"crash": 40, "timeout": 5, "incomplete": 30},
        {},
        REF,
        last_unreadable="'pick: ' does not match parse (expect_tokens 1: got 0 tokens)",
        last_failed=crash,
    )
    assert [c.split(" (")[0] for c in causes] == ["30 of 100 runs", "45 of 100 runs"]
    assert "do not match parse (incomplete 30)" in causes[0] and "parse: section" in causes[0]
    assert causes[1].startswith(f"45 of 100 runs (45%) failed (crash 40, timeout 5); the last: {crash}: ")
    assert "parse" not in causes[1]


def hint(counts: dict[str, int], **kw: float) -> str:
    args = {"alpha": 1e-3, "beta": 1e-3, "tolerance": 0.1, "eta": 0.03, "max_runs": 200, "cap": 16384, **kw}
    return undecided_hint(counts, REF, **args)  # type: ignore[arg-type]


def advised(text: str) -> int | None:
    found = re.search(r"raise run.max_runs to ([\d,]+)", text)
    return int(found.group(1).replace(",", "")) if found else None


def test_the_hint_says_which_verdict_is_near_and_where_more_runs_do_not_help() -> None:
    assert "GOOD needs about" in hint({"e": 69, "g": 90, "h": 41})
    assert "BAD needs about" in hint({"e": 120, "g": 40, "h": 40})


def test_an_undecided_hint_asks_for_all_the_runs_when_only_some_meet_the_condition() -> None:
    """run.max_runs counts every run: when 10% meet the condition (and only they count), the runs
    asked for are ten times the counted runs the test needs."""
    every = hint({"e": 69, "g": 90, "h": 41})
    tenth = hint({"e": 69, "g": 90, "h": 41, MISSED: 1800})
    runs = [int(m.replace(",", "")) for m in re.findall(r"needs about ([\d,]+) runs", every + " " + tenth)]
    assert runs[1] == pytest.approx(10 * runs[0], rel=0.01), (every, tenth)
    between = hint({"e": 5_900, "g": 9_040, "h": 5_060})  # TV 0.05: between eta and the tolerance
    assert "between test.eta 0.03 and test.tolerance 0.1" in between and "raise test.eta" in between
    assert "more than run.max_runs can be (16,384" in hint({"e": 690, "g": 904, "h": 406}, tolerance=0.02, eta=0.0)


@pytest.mark.parametrize("q", [(0.345, 0.452, 0.203), (0.33, 0.47, 0.20)], ids=["like", "near"])
def test_the_advised_budget_decides_a_good_commit_most_of_the_time(q: tuple[float, ...]) -> None:
    """Calibration of the estimate: commits stopped undecided after 300 runs, given the budget
    the hint advises from those runs, reach GOOD within it in ≥ 70% of 60 simulated histories
    (fixed seed; a hint that calls the commit "between eta and tolerance" by sampling noise
    counts as a miss), and the advice is not wildly more than needed (median use ≥ a fifth)."""
    rng = np.random.default_rng(7)
    decided, used = 0, []
    for _ in range(60):
        draws = rng.choice(3, size=20_000, p=q)
        first = np.bincount(draws[:300], minlength=3)
        budget = advised(hint(dict(zip("egh", map(int, first)))))
        if budget is None:
            continue
        for n in range(10, budget + 1, 10):  # looked at every 10 runs (valid at any stopping time)
            counts = np.append(np.bincount(draws[:n], minlength=3), 0)
            ev = against_reference(counts, REF, alpha=1e-3, beta=1e-3, tolerance=0.1, max_runs=budget, eta=0.03)
            if ev.decision is not None:
                decided += ev.decision.value == "good"
                used.append(n / budget)
                break
    assert decided >= 0.7 * 60, decided  # measured: 57 and 46 of 60
    assert float(np.median(used)) >= 0.2, used


def test_tv_from_the_reference() -> None:
    from bisectbot.core.diagnose import tv_from_reference

    assert tv_from_reference({"e": 345, "g": 452, "h": 203}, REF.names, REF.probs) == pytest.approx(0.0, abs=1e-9)
    assert tv_from_reference({"e": 10}, REF.names, REF.probs) == pytest.approx(0.655)  # all on e
    assert tv_from_reference({OTHER: 5}, REF.names, REF.probs) == pytest.approx(1.0)  # nothing in common
    assert tv_from_reference({}, REF.names, REF.probs) is None


def test_the_advised_budget_holds_for_a_control_sample_too() -> None:
    """With a measured reference (each run paired with one control run, `statistics.control_sample`)
    the hint scales its estimate by 2, for pairs the seed does not tie (the worst case); a commit
    like the reference stopped after 300 runs then reaches GOOD within the advised budget in
    ≥ 70% of 40 simulated histories."""
    from bisectbot.statistics.control_sample import paired_evidence

    rng = np.random.default_rng(11)
    p = np.asarray((0.345, 0.452, 0.203))
    decided = 0
    for _ in range(40):
        tested, control = rng.choice(3, size=20_000, p=p), rng.choice(3, size=20_000, p=p)
        first = np.bincount(tested[:300], minlength=3)
        budget = advised(hint(dict(zip("egh", map(int, first))), slower=2.0))
        if budget is None:
            continue
        ev = paired_evidence(
            tested[:budget].tolist(),
            control[:budget].tolist(),
            3,
            alpha=1e-3,
            beta=1e-3,
            tolerance=0.1,
            eta=0.03,
            max_runs=budget,
        )
        decided += ev.decision is not None and ev.decision.value == "good"
    assert decided >= 0.7 * 40, decided


# -- a change in how often the condition is met, when the reference does not test it -----------


def test_the_seed_paired_condition_test_holds_its_level_and_sees_a_gross_shift() -> None:
    """McNemar made sequential: at two commits that meet the condition equally often (seeds
    where they disagree go either way), E ever ≥ 1/α in at most α of the paths; 0.5 → 0.1 is
    shown within a hundred seeds."""
    alpha, paths, seeds = 0.01, 3000, 400
    rng = np.random.default_rng(41)
    flips = rng.random((paths, seeds)) < 0.5  # the discordant seeds under H0: fair coins
    down = np.cumsum(flips, axis=1)
    up = np.arange(1, seeds + 1) - down
    fired = sum(
        any(log_e_discordant(int(d), int(u)) >= np.log(1 / alpha) for d, u in zip(dr, ur)) for dr, ur in zip(down, up)
    )
    assert fired / paths <= alpha + 3 * np.sqrt(alpha / paths), fired
    # 0.5 → 0.1 on common seeds (a seed that met it at 0.1 met it at 0.5 too: the program's coupling)
    u = np.random.default_rng(42).random(100)
    before = {s: (0 if x < 0.5 else -1) for s, x in enumerate(u)}
    after = {s: (0 if x < 0.1 else -1) for s, x in enumerate(u)}
    shift = condition_shift(before, after, alpha=5e-4)
    assert shift is not None and shift.up == 0 and shift.down == sum(0.1 <= x < 0.5 for x in u)
    assert abs(shift.before - 0.5) < 0.15 and abs(shift.after - 0.1) < 0.1
    assert condition_shift(before, before, alpha=5e-4) is None  # nothing changed
    failed = {s: (3 if s % 2 else c) for s, c in after.items()}  # category 3 (FAILED) tells nothing
    assert condition_shift(before, failed, alpha=5e-4, skip=3).after_runs == 50  # type: ignore[union-attr]


def test_where_the_share_changed_among_the_tested_commits() -> None:
    shares = [(0, 0.5), (40, 0.52), (60, 0.47), (70, 0.11), (90, 0.09)]
    assert share_change_between(shares, 0.5, 0.1) == (60, 70)
    assert share_change_between(shares[:3], 0.5, 0.1) == (60, None)
