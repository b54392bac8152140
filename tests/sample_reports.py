"""Typed sample reports for the renderer tests (built with the real constructors, so a change of
the report types breaks these tests instead of passing unnoticed)."""

from __future__ import annotations

from dataclasses import replace

from bisectbot import __version__
from bisectbot.core.diagnose import distance_along
from bisectbot.records.commits import CommitVerdict
from bisectbot.records.reports import (
    BisectReport,
    BisectStatus,
    CommitReport,
    ConfigSummary,
    Environment,
    Proved,
    ReferenceSummary,
)
from bisectbot.statistics.outcome import Find, Verdict

CULPRIT = "60488cfca65a3397efe863d5a17de27690693113"
PARENT = "2d5528afbae2786560f2830e76f49dbba90ef99b"
GOOD = "eb9e4f74679b1d6ff1ef8b47ef1a6ff05bc711f0"
BAD = "bbf3fb5a170220952c75da96fceb76a89ba18c13"
REFERENCE = ReferenceSummary(
    probs={"a": 0.1, "b": 0.2, "c": 0.05, "d": 0.3, "e": 0.25, "f": 0.1},
    condition_prob=0.4,
    source="config",
    categories=["a", "b", "c", "d", "e", "f", "<other>", "<missed>"],
    category_probs=[0.04, 0.08, 0.02, 0.12, 0.1, 0.04, 0.0, 0.6],
    condition={"position": 0, "token": "c"},
    outcome={"position": 1},
)
ENVIRONMENT = Environment(
    compiler="c++ (Debian 12.2.0) 12.2.0",
    cmake="cmake version 3.25.1",
    cmake_args=["-DCMAKE_BUILD_TYPE=Release"],
    host="h",
    platform="p",
    python="3.11",
    bisectbot=__version__,
)
BAD_COUNTS = {"a": 0, "b": 8, "c": 0, "d": 3, "e": 0, "f": 1, "<other>": 0, "<missed>": 1}
GOOD_COUNTS = {"a": 56, "b": 118, "c": 25, "d": 177, "e": 141, "f": 64, "<other>": 0, "<missed>": 810}


def verdict(
    sha: str,
    role: str,
    v: Verdict,
    counts: dict[str, int],
    subject: str = "x (#1)",
    seeds: tuple[int, int] | None = (1, 13),
) -> CommitVerdict:
    return CommitVerdict(
        sha=sha,
        subject=subject,
        role=role,
        verdict=v,
        runs=sum(counts.values()),
        counts=counts,
        failures={},
        retried=0,
        log_e_bad=9.0 if v is Verdict.BAD else -8.0,
        log_e_good=-8.0 if v is Verdict.BAD else 8.0,
        reason="decided",
        mode="reference",
        alpha=5e-4,
        beta=5e-4,
        seeds=seeds,
        build="ok",
        build_seconds=1.0,
    )


def bisect_report(n_extra: int = 0) -> BisectReport:
    verdicts = [
        verdict(BAD, "bad-endpoint", Verdict.BAD, BAD_COUNTS, "docs: note output format (#1045)"),
        verdict(GOOD, "good-endpoint", Verdict.GOOD, GOOD_COUNTS, "specdemo: demo (#1003)", (1, 1391)),
        *[verdict(PARENT, "step", Verdict.GOOD, GOOD_COUNTS, "pipes | in subject") for _ in range(n_extra)],
        verdict(
            CULPRIT,
            "retest-culprit",
            Verdict.BAD,
            BAD_COUNTS,
            "speculative: take top draft candidate (#1032)",
            (6001, 6022),
        ),
        verdict(
            PARENT, "retest-parent", Verdict.GOOD, GOOD_COUNTS, "build: bump version to 0.1.2 (#1028)", (6001, 6006)
        ),
    ]
    return BisectReport(
        job="bisect-0123456789ab",
        status=BisectStatus.FOUND,
        find=Find.BAD,
        first_bad=CULPRIT,
        first_bad_subject="speculative: take top draft candidate (#1032)",
        last_good=PARENT,
        candidates=[CULPRIT],
        good=GOOD,
        bad=BAD,
        good_ref=GOOD,
        bad_ref="main",
        commits=12,
        builds=6,
        builds_bound=7,
        runs=1460,
        runs_executed=1460,
        retried=0,
        confidence=0.996,
        step_alpha=5e-4,
        message="first bad commit is x",
        verdicts=verdicts,
        reference=REFERENCE,
        config=ConfigSummary("specdemo", "ad81a2d7a2ee4f1a", "c.yaml", "e"),
        environment=ENVIRONMENT,
        reproduce=f"bisectbot bisect c.yaml --good {GOOD} --bad {BAD}",
        change_points=[
            {
                "commit": CULPRIT,
                "subject": "speculative: take top draft candidate (#1032)",
                "first": True,
                "before": {"e": 2, "b": 2, "d": 1},
                "after": {"e": 14},
                "text": "the first departure",
            },
            {
                "commit": BAD,
                "subject": "docs: note output format (#1045)",
                "first": False,
                "before": {"e": 9, "b": 1},
                "after": {"e": 20},
                "text": "a later change point",
            },
        ],
        assumptions=[
            "the bound counts the 2 re-tests on fresh seeds against the reference",
            "1 later change point(s) crossed on the way: listed in change_points",
        ],
        posterior=None,
        eta=0.03,
        tolerance=0.1,
    )


def a_test_report(v: Verdict) -> CommitReport:
    return CommitReport(
        job="test-x",
        commit=BAD,
        ref="master",
        detail=verdict(BAD, "test", v, GOOD_COUNTS, "docs: note output format (#1045)"),
        arms={},
        builds=1,
        reference=REFERENCE,
        config=ConfigSummary("s", "d", "c.yaml"),
        environment=ENVIRONMENT,
        reproduce=f"bisectbot test c.yaml --commit {BAD}",
    )


PLACED = "5a" * 20  # a step placed beside the good end: its 13 runs alone would sit far above the tolerance


def coherent_report() -> BisectReport:
    """The sample bisect with what issue 48 saw in the demo: a GOOD-SIDE placement whose few runs
    are far from the reference, the change test's rows (the good parent's few fresh runs look
    far too), and a confidence that is 1 − 5 claims × the per-step error."""
    base = bisect_report()
    placed = replace(
        verdict(PLACED, "step", Verdict.GOOD_SIDE, BAD_COUNTS),
        reason=f"like {GOOD[:12]} (on the GOOD side): the same outcome on 13 of 13 seeds both ran (TV < 0.05 "
        "between them); not a test against the reference",
    )
    change = [
        replace(
            verdict(sha, role, Verdict.CHANGED, BAD_COUNTS, seeds=(7001, 7013)),
            mode="change",
            log_e_bad=9.0,
            log_e_good=0.0,
            block=1,
            reason=f"differs from {other} on fresh seeds: E_change = 8.1e+03 ≥ 1/alpha = 2e+03 after 13 + 13 runs",
        )
        for sha, role, other in (
            (CULPRIT, "confirm-culprit", f"its parent {PARENT[:12]}"),
            (PARENT, "confirm-parent", f"its child {CULPRIT[:12]}"),
        )
    ]
    verdicts = [*base.verdicts[:2], placed, *base.verdicts[2:], *change]
    positions = {BAD: 11, GOOD: 0, PLACED: 3, PARENT: 5, CULPRIT: 6}
    ref = base.reference
    text = (
        f"a GOOD→BAD change at {CULPRIT[:12]}: its parent {PARENT[:12]} tests GOOD (within tolerance 0.1 from the "
        f"reference), {CULPRIT[:12]} tests BAD (farther than eta 0.03), and their runs differ on fresh seeds; all at "
        "confidence ≥ 99.75%"
    )
    proved = Proved(change="GOOD→BAD", commit=CULPRIT, parent=PARENT, first_departure=True, text=text, placed=True)
    return replace(
        base,
        verdicts=verdicts,
        confidence=1 - 5 * 5e-4,
        along=distance_along(verdicts, positions, ref.categories, ref.category_probs),
        proved=proved,
    )
