"""`bisectbot log`'s rows (pure): a change test's verdict says which commit it is about."""

from __future__ import annotations

import dataclasses

from bisectbot.records.jobargs import BisectArgs
from bisectbot.records.joblog import log_text, logged_job
from bisectbot.statistics.outcome import Find, Verdict
from sample_reports import BAD_COUNTS, GOOD_COUNTS, verdict

GOOD, BAD, CULPRIT, PARENT = "1" * 40, "2" * 40, "3" * 40, "4" * 40


def test_a_parent_s_changed_reads_as_differing_from_its_child_not_as_a_defect() -> None:
    """Issue 48: a confirmation's parent showed `CHANGED` bare, read as one more bad commit."""
    args = BisectArgs(GOOD, BAD, "v1", "main", Find.BAD, "auto", "c.yaml")
    change = [
        dataclasses.replace(
            verdict(CULPRIT, "confirm-culprit", Verdict.CHANGED, BAD_COUNTS, "take top"), mode="change"
        ),
        dataclasses.replace(
            verdict(PARENT, "confirm-parent", Verdict.CHANGED, GOOD_COUNTS, "add helper"), mode="change"
        ),
        dataclasses.replace(verdict(GOOD, "confirm-parent", Verdict.GOOD, GOOD_COUNTS, "the parent"), mode="change"),
    ]
    rows = [(verdict(BAD, "bad-endpoint", Verdict.BAD, BAD_COUNTS, "docs"), 0.0), *[(v, 1.0) for v in change]]
    job = logged_job("bisect-1", "done", args, None, 0.0, 1.0, rows)
    notes = {c.sha: c.note for c in job.commits}
    assert notes == {
        BAD: "",
        CULPRIT: "differs from its parent",
        PARENT: "differs from its child",
        GOOD: "not shown to differ from its child",
    }
    text = log_text([job], width=200)
    assert f"{PARENT[:12]}  CHANGED" in text and "(differs from its child) add helper" in text
    assert "(differs from its parent) take top" in text
    assert "docs" in text and "() docs" not in text
    assert job.to_json()["commits"][2]["note"] == "differs from its child"
