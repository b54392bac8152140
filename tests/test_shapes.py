"""Issue 45's shapes of defect through `bisect.run_bisect` over simulated histories (the bench's
own cases, bench/statcases.shape_cases; only git, builds and the program are simulated): what
each report says. Fixed repetitions: each case is one deterministic bisect."""

from __future__ import annotations

from typing import Any

import pytest

from bench import simbisect as sb
from bench import statcases as sc
from bisectbot.core.walkback import CONDITION_CHANGED
from bisectbot.errors import EndpointError
from bisectbot.inert import prose
from bisectbot.report.markdown import bisect_markdown, bound_text
from bisectbot.report.text import bisect_text

SHAPES = {case["shape"]: case for case in sc.shape_cases(0.1)}
ZONE_BLAME = ("may sit between eta", "may be called either way", "undecided: a change")


def flat(text: str) -> str:
    """Rendered prose as one line (the terminal summary wraps it)."""
    return " ".join(text.split())


def bisect(shape: str, rep: int) -> tuple[Any, sb.History, list[int]]:
    case = SHAPES[shape]
    hist, where = sc.history(case, rep)
    return sb.run_report(sb.sim_config(**case.get("config", {})), hist, "auto", "llama"), hist, where


@pytest.mark.parametrize("rep", [0, 3, 5])
def test_a_condition_rate_change_is_named_as_such_not_blamed_on_the_zone(rep: int) -> None:
    """P(condition) 0.5 → 0.1, the outcome among the runs that meet it unchanged, and a
    reference without condition_prob: nothing may be named (the tests cannot see the change),
    and the report says what changed instead of "between eta and tolerance". It says so at the
    first confirmation that finds the commit GOOD: searching on above it (issue 45: up to 19
    builds against a bound of 10) would find only more of the same."""
    report, hist, where = bisect("condition", rep)
    assert report.status.value in ("ambiguous", "unconfirmed") and report.first_bad is None
    message = report.message
    assert message.startswith(CONDITION_CHANGED + ": 0.5") and " → 0.1" in message, message
    assert "the outcome among them" in message and "give reference.condition_prob" in message
    assert not any(blame in message for blame in ZONE_BLAME), message
    # where the tested commits put the change: around the real change point
    short = [sha[:12] for sha in hist.shas]
    after, by = (short.index(sha) for sha in message.split("it changed after ")[1].split(";")[0].split(" and by "))
    assert after < where[0] <= by
    # on the terminal as it is; in Markdown made inert (its shas are code: GitHub would link them)
    for rendered, said in ((bisect_text(report, width=120), message), (bisect_markdown(report), prose(message))):
        assert flat(said) in flat(rendered)
    assert report.builds <= report.builds_bound, bound_text(report)


def test_a_condition_rate_change_at_the_bad_end_is_named_in_the_endpoint_error() -> None:
    """The change at the bad end itself: every step tests GOOD, the search ends next to the bad
    end, which, tested last, is undecided; the error names the change as the likely cause."""
    hist = sb.History(64, {0: sb.joint(sc.P_COND, condition=0.5), 63: sb.joint(sc.P_COND, condition=0.1)}, salt=9)
    with pytest.raises(EndpointError) as stop:
        sb.run_report(sb.sim_config(condition_prob=False), hist, "auto", "llama")
    text = str(stop.value)
    assert "bad ref bad" in text and f"likely cause: {CONDITION_CHANGED}: 0.50 → 0.1" in text, text


@pytest.mark.parametrize("rep", [0, 1])
def test_a_condition_rate_change_is_named_when_the_bad_end_is_tested_first(rep: int) -> None:
    """With quick builds the bad end is tested first, before the good end: it cannot decide (the
    outcome among runs meeting the condition is unchanged) and the error names the change of how
    often the condition is met, from the good end's runs on the same seeds (tested for it now:
    before, with nothing to compare, it only said to raise run.max_runs, which changes nothing)."""
    case = SHAPES["condition"]
    hist, _ = sc.history(case, rep)
    with pytest.raises(EndpointError) as stop:
        sb.run_report(sb.sim_config(**case["config"]), hist, "auto", "demo")
    text = str(stop.value)
    assert "bad ref bad" in text and f"likely cause: {CONDITION_CHANGED}: 0.5" in text and " → 0.1" in text, text
    assert "raise run.max_runs" not in text, text


def scan_ends(command: str, hist: sb.History) -> tuple[int, int]:
    """The positions of a `--scan` command's --good and --bad."""
    words = command.split()
    return hist.shas.index(words[words.index("--good") + 1]), hist.shas.index(words[words.index("--bad") + 1])


def test_a_re_introduced_defect_named_at_the_re_introduction_says_what_it_proved() -> None:
    """Gross at 30%, fixed at 50%, back at 80% (positions 84, 128, 206 here): the search's first
    step lands in the fixed stretch and the bisect names the re-introduction. That is a true
    GOOD→BAD change, and the report says exactly that, names the untested stretch that hides
    the first departure, and gives the --scan command over it, which finds it."""
    report, hist, where = bisect("reintroduced", 0)
    assert report.status.value == "found" and report.first_bad == hist.shas[where[2]], report.message
    proved = report.proved
    assert proved["change"] == "GOOD→BAD" and not proved["first_departure"] and proved["commit"] == report.first_bad
    hiding = [
        s for s in report.untested_before if hist.shas.index(s["after"]) < where[0] < hist.shas.index(s["before"])
    ]
    assert len(hiding) == 1 and hist.shas.index(hiding[0]["before"]) >= where[1]  # fixed again before its end
    text = flat(bisect_text(report, width=100)).replace(" \\ ", " ")
    assert f"Proved: a GOOD→BAD change at {report.first_bad[:12]}: its parent" in text
    assert "Not proved: that it is the first departure." in text and report.scan_command in text
    assert f"{hiding[0]['first'][:12]}..{hiding[0]['last'][:12]}" in text
    assert report.scan_command in bisect_markdown(report)
    good, bad = scan_ends(report.scan_command, hist)
    assert good < where[0] < where[1] <= bad < where[2]
    scanned = sb.run_report(sb.sim_config(), hist, "auto", "llama", good=good, bad=bad, scan=True)
    assert scanned.status.value == "found" and scanned.first_bad == hist.shas[where[0]], scanned.message
    assert scanned.confidence >= 0.99 and "--scan" in scanned.reproduce
    assert any(v.role == "scan" for v in scanned.verdicts) and not any(
        v.role == "bad-endpoint" for v in scanned.verdicts
    )


@pytest.mark.heavy  # whole bisects or builds, 3-8 s: after the default suite (README: Tests)
def test_a_scan_of_commits_that_all_test_good_is_clean() -> None:
    """--scan over the fixed stretch (50% … 80%): every commit in it tests GOOD, the bad end
    too: status clean, the GOODs its claims."""
    _, hist, where = bisect("reintroduced", 0)
    clean = sb.run_report(sb.sim_config(), hist, "auto", "llama", good=where[1], bad=where[2] - 1, scan=True)
    assert clean.status.value == "clean" and clean.first_bad is None and clean.candidates == []
    tested = [v for v in clean.verdicts if v.role in ("scan", "bad-endpoint")]
    assert all(v.verdict.value == "good" for v in tested) and len(tested) == clean.searched - 1
    assert clean.confidence >= 0.99 and "no departure from the reference" in clean.message
    assert bisect_text(clean).startswith(f"bisectbot: no departure from the reference in {clean.commits} commits")


@pytest.mark.parametrize("rep", [0, 1, 2])
def test_a_crash_rate_regression_is_bisected_like_any_other(rep: int) -> None:
    """A crash rate rising 0 → 30% at one commit, the config counting failed runs as an outcome:
    found and confirmed at that commit (before: an endpoint error, every time)."""
    report, hist, where = bisect("crash", rep)
    assert report.status.value == "found" and report.first_bad == hist.shas[where[0]], report.message
    culprit = next(v for v in report.verdicts if v.role == "confirm-culprit")
    assert culprit.verdict.value == "changed" and culprit.counts["<failed>"] > 0
    assert report.confidence >= 0.99 and report.proved["change"] == "GOOD→BAD"


EITHER_WAY = (
    "may be called either way: if a change this small matters, lower test.tolerance to it (bisectbot init --tolerance)"
)


@pytest.mark.parametrize(
    ("costs", "salt", "how"),
    [("demo", 0, "is inconclusive"), ("demo", 9, "tests GOOD"), ("llama", 0, "unconfirmed")],
    ids=["bad-end-undecided", "bad-end-good", "culprit-undecided"],
)
def test_a_change_inside_the_band_is_said_to_go_either_way_and_the_knob_named(costs: str, salt: int, how: str) -> None:
    """Issue 48: a change of TV 0.06 (eta 0.03, tolerance 0.1: the defaults) may be called either
    way. Whichever way it goes — the broken end, tested first, undecided or GOOD; or, tested
    last, the named commit undecided on fresh seeds — what stops the bisect says so, and names
    test.tolerance (init --tolerance) and test.eta; it is never silent."""
    hist = sb.History(32, {0: sb.reference_joint(), 20: sb.joint(list(sc.shifted(0.06)))}, salt=salt)
    try:
        report = sb.run_report(sb.sim_config(), hist, "auto", costs)
    except EndpointError as stop:
        said = str(stop)
        assert said.startswith("bad ref bad") and how in said.split(":")[0], said
    else:
        assert report.status.value == how and report.first_bad is None, report.message
        said = report.message
        assert flat(said) in flat(bisect_text(report, width=120))
    assert EITHER_WAY in said and "raise test.eta above it" in said, said
