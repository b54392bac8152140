"""Issue 45's shapes of defect through `bisect.run_bisect` over simulated histories (the bench's
own cases, bench/statcases.shape_cases; only git, builds and the program are simulated): what
each report says. Fixed repetitions: each case is one deterministic bisect."""

from __future__ import annotations

from typing import Any

import pytest

from bench import simbisect as sb
from bench import statcases as sc
from bisectbot.errors import EndpointError
from bisectbot.pipeline.ledger import CONDITION_CHANGED
from bisectbot.report import bisect_markdown, bound_text
from bisectbot.report_text import bisect_text

SHAPES = {case["shape"]: case for case in sc.shape_cases(0.1)}
ZONE_BLAME = ("may sit between eta", "between eta and tolerance from the reference may be named", "undecided: a commit")


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
    and the report says what changed instead of "between eta and tolerance"; past the bound on
    builds it says which searches needed them (rep 3 builds 19 against 10)."""
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
    for rendered in (bisect_text(report, width=120), bisect_markdown(report)):
        assert flat(message) in flat(rendered)
    if report.builds > report.builds_bound:
        said = bound_text(report)
        assert "exceeded by" in said and "tested GOOD on fresh seeds, not BAD: it went on above it" in said, said
        assert said in flat(bisect_text(report, width=10_000))
    if rep == 3:
        assert report.builds == 19 and report.builds_bound == 10


def test_a_condition_rate_change_before_the_bad_end_is_named_in_the_endpoint_error() -> None:
    """The change 8 commits before the bad end: the search ends next to it and the bad end,
    tested last, is undecided; the error names the change as the likely cause."""
    with pytest.raises(EndpointError) as stop:
        bisect("condition", 4)
    text = str(stop.value)
    assert "bad ref bad" in text and f"likely cause: {CONDITION_CHANGED}: 0.5" in text, text
