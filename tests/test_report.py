"""Reports: the JSON contract (round trips, and the fields docs/json-report.md documents), and the
Markdown a person reads for each outcome."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

from bisectbot.github.comment import CommentContext, render_bisect
from bisectbot.records.reports import (
    SCHEMA_VERSION,
    BisectReport,
    BisectStatus,
    CommitReport,
    JobStop,
    load_result,
)
from bisectbot.report.html import report_html
from bisectbot.report.markdown import bisect_markdown, bound_text, fmt_e, observed_vs_reference
from bisectbot.report.markdown import commit_markdown as markdown_of_test
from bisectbot.report.text import bisect_text, commit_text
from bisectbot.statistics.outcome import Find, Verdict
from coherence import (
    TERMS,
    builds_within_bound_or_say_why,
    html_chart_draws_no_placement,
    markdown_terms_glossed_where_first_used,
    mermaid_chart_draws_no_placement,
    table_words_explained,
    terminal_chart_draws_no_placement,
    terms_glossed_where_first_used,
)
from sample_reports import (
    BAD,
    CULPRIT,
    GOOD,
    GOOD_COUNTS,
    PARENT,
    PLACED,
    REFERENCE,
    a_test_report,
    bisect_report,
    coherent_report,
    verdict,
)

README = (Path(__file__).resolve().parents[1] / "docs" / "json-report.md").read_text()


def _names(text: str) -> set[str]:
    """The `names` of a comma-separated README list, leaving out what is in parentheses."""
    while "(" in text:
        text = re.sub(r"\([^()]*\)", "", text)
    return set(re.findall(r"`([a-z_]+)`", text))


def test_bisect_json_has_exactly_the_documented_fields_and_reads_back() -> None:
    report = bisect_report()
    data = json.loads(json.dumps(report.to_json()))
    section = README[README.index("# JSON report") :]
    table = section[: section.index("Each verdict:")]
    documented = set()
    for row in table.splitlines():
        if row.startswith("| `"):
            documented |= set(re.findall(r"`([a-z_]+)`", row.split("|")[1]))
    assert set(data) == documented
    assert list(data)[:2] == ["schema_version", "kind"] and data["schema_version"] == SCHEMA_VERSION == 1
    each = section[section.index("Each verdict:") : section.index("`bisectbot test --json FILE`")]
    assert _names(each) <= set(data["verdicts"][0]) and data["verdicts"][0]["commit"] == data["verdicts"][0]["sha"]
    assert BisectReport.from_json(data) == report


def test_test_json_has_the_documented_fields_and_reads_back() -> None:
    report = a_test_report(Verdict.BAD)
    data = json.loads(json.dumps(report.to_json()))
    section = README[README.index("`bisectbot test --json FILE`") :]
    documented = _names(section[: section.index("`reference` holds")])
    assert documented <= set(data)
    assert (data["verdict"], data["runs"], data["counts"]) == ("bad", report.detail.runs, report.detail.counts)
    assert CommitReport.from_json(data) == report
    assert load_result("test", "done", data) == report


def test_a_stored_result_without_new_fields_still_reads() -> None:
    data = bisect_report().to_json()
    for newer in ("strategy", "extra"):  # fields added after schema 1 was first written
        data.pop(newer)
    for v in data["verdicts"]:
        v.pop("block")
    back = BisectReport.from_json(data)
    assert back.strategy == "plain" and back.verdicts[0].block == 0
    assert load_result("bisect", "cancelled", {"status": "cancelled", "by": "maintainer"}) == JobStop(
        "cancelled", "", "maintainer"
    )


def test_found_bisect_markdown_names_culprit_parent_and_reproduction() -> None:
    md = bisect_markdown(bisect_report())
    assert md.startswith(f"## bisectbot: first bad commit is `{CULPRIT[:12]}` — speculative: take top draft")
    assert f"First bad: `{CULPRIT}`" in md and f"Last good: `{PARENT}`" in md
    assert "**found** · 12 commits between" in md and "**6 builds** (bound 7)" in md
    assert "> *bound 7 = ⌈log2 12⌉ + 3*: the builds a bisect of 12 commits needs" in md  # glossed where first met
    assert "confidence ≥ 99.60%" in md and f"bisectbot bisect c.yaml --good {GOOD} --bad {BAD}" in md
    fixed = bisect_markdown(replace(bisect_report(), find=Find.FIXED))
    assert fixed.startswith("## bisectbot: first fixed commit is") and "Last still bad:" in fixed


def test_the_markdown_lists_change_points_and_what_the_confidence_rests_on() -> None:
    md = bisect_markdown(bisect_report())
    changes = md[md.index("### Change points crossed") : md.index("### What the confidence rests on")]
    first, later = changes.strip().splitlines()[1:3]
    assert first.startswith(f"- `{CULPRIT[:12]}` speculative: take top draft candidate `(#1032)` — **first departure**")
    before, after = first.split(": before ")[1].split("; after ")
    assert "e 2 (0.40 vs 0.25)" in before and "e 14 (1.00 vs 0.25)" in after
    assert later.startswith(f"- `{BAD[:12]}`") and "later change point" in later
    rests = md[md.index("### What the confidence rests on") : md.index("### Reproduce")]
    assert "BAD means farther than eta 0.03 from the reference, GOOD within tolerance 0.1" in rests
    assert "- 1 later change point(s) crossed on the way" in rests
    # one change point (the usual case): no list, the culprit line says it all
    single = bisect_markdown(replace(bisect_report(), change_points=bisect_report().change_points[:1]))
    assert "### Change points crossed" not in single and "### What the confidence rests on" in single


def test_undecided_bisect_markdown_lists_the_candidates() -> None:
    ambiguous = replace(
        bisect_report(),
        status=BisectStatus.AMBIGUOUS,
        first_bad=None,
        candidates=[PARENT, CULPRIT],
        message="2 candidates between a and b",
    )
    md = bisect_markdown(ambiguous)
    assert md.startswith("## bisectbot: first bad commit is one of 2")
    assert f"Candidates: `{PARENT[:12]}`, `{CULPRIT[:12]}`" in md and "2 candidates between a and b" in md
    unconfirmed = bisect_markdown(
        replace(bisect_report(), status=BisectStatus.UNCONFIRMED, message="re-test on fresh seeds disagrees")
    )
    assert unconfirmed.startswith("## bisectbot: first bad commit not confirmed")


def test_test_markdown_shows_arms_failures_and_reruns() -> None:
    base = a_test_report(Verdict.GOOD)
    detail = replace(base.detail, failures={"crash": 2}, retried=3)
    arm = replace(verdict(BAD, "test", Verdict.GOOD, {"a": 5}), arm="server", reason="TV < 0.1")
    md = markdown_of_test(replace(base, detail=detail, arms={"server": arm}))
    assert md.startswith(f"## bisectbot: `{BAD[:12]}` is **GOOD** after {detail.runs} runs")
    assert "Arm **server**: **GOOD** after 5 runs — TV < 0.1" in md and "test [server]" in md
    assert "Failed runs: crash 2" in md and "Reruns of incomplete output: 3" in md


def test_observed_frequencies_are_among_runs_that_met_the_condition() -> None:
    assert observed_vs_reference({"b": 3, "d": 1, "<missed>": 6}, REFERENCE) == (
        "a 0 (0.00 vs 0.10) · b 3 (0.75 vs 0.20) · c 0 (0.00 vs 0.05) · d 1 (0.25 vs 0.30) · "
        "e 0 (0.00 vs 0.25) · f 0 (0.00 vs 0.10) · missed 6"
    )
    assert "other 2" in observed_vs_reference({"<other>": 2}, REFERENCE)
    assert [fmt_e(x) for x in (float("inf"), 800.0, 0.0, 10.0)] == ["∞", "e^800", "1", "2.2e+04"]


def test_variants_clean_rebuilds_and_skip_blocks_are_in_the_markdown() -> None:
    plain = bisect_markdown(bisect_report())
    assert "variants for their era" not in plain and "Skipped in blocks" not in plain  # nothing to say
    r = bisect_report()
    old = replace(
        r.verdicts[1],
        build_variant=2,
        variant=5,
        build_notes="built in a clean directory after the reused one failed: cmake build failed",
    )
    block = {
        "first": PARENT,
        "last": CULPRIT,
        "commits": 12,
        "tried": 3,
        "signature": "runs crash: …",
        "text": "12 commits 2024-06-01 … 2024-10-21 (3 tried): runs crash: killed by SIGSEGV",
    }
    md = bisect_markdown(replace(r, verdicts=[r.verdicts[0], old, *r.verdicts[2:]], skip_blocks=[block]))
    assert (
        f"- `{old.sha[:12]}`: build variant 2; command variant 5; built in a clean directory after the "
        "reused one failed"
    ) in md
    assert "- 12 commits 2024-06-01 … 2024-10-21 (3 tried): runs crash: killed by SIGSEGV" in md
    one = markdown_of_test(replace(a_test_report(Verdict.BAD), detail=old))
    assert "Built and run with:\n- `" in one and "command variant 5" in one


def test_the_distance_along_the_history_is_charted_in_history_order() -> None:
    """Where the distribution moved: one entry per tested commit, by its place on the line (not
    the order it was tested in), as bars on the terminal and a Mermaid chart in the Markdown."""
    from bisectbot.core.diagnose import distance_along
    from bisectbot.report.markdown import distance_chart, distance_rows
    from bisectbot.report.text import bisect_text

    report = bisect_report()
    positions = {v.sha: p for v, p in zip(report.verdicts, (11, 0, 6, 5))}
    ref = report.reference
    report = replace(report, along=distance_along(report.verdicts, positions, ref.categories, ref.category_probs))
    rows = distance_rows(report)
    assert [pos for pos, *_ in rows] == [0, 5, 6, 11]
    assert rows[0][2] < report.eta < report.tolerance < rows[2][2]  # good end near, culprit far
    summary, source = distance_chart(report) or ("", "")
    assert 'x-axis "commit position" ["0", "5", "6", "11"]' in source and source.count("line [") == 2
    assert "eta 0.03" in summary and "tolerance 0.1" in summary
    assert "```mermaid\nxychart-beta" in bisect_markdown(report)
    text = bisect_text(report, 80)
    bars = text[text.index("distance from the reference along the history") :].splitlines()[1:5]
    assert [ln.split()[0] for ln in bars] == ["0", "5", "6", "11"] and all(len(ln) <= 80 for ln in bars)
    assert "█" in bars[2] and bars[2].endswith("BAD") and bars[0].endswith("GOOD")
    assert distance_chart(replace(report, along=[])) is None  # no places, no chart


def test_the_summary_says_where_the_wall_time_went() -> None:
    from bisectbot.bisecting.summary import with_time
    from bisectbot.report.markdown import time_line

    r = with_time(bisect_report(), 1740.0, 1620.0, 100.0)
    assert r.cost is not None and r.cost["time"] == {
        "wall": 1740.0,
        "building": 1620.0,
        "running": 100.0,
        "other": 20.0,
    }
    line = "time here: 29 min: building 27 min (93%), runs 2 min, the rest 20 s (reference, checkouts)"
    assert time_line(r) == line
    # servers are named only when cross-check arms started some, and as theirs
    armed = replace(r, verdicts=[*r.verdicts, replace(r.verdicts[-1], arm="server")])
    assert (time_line(armed) or "").endswith("the rest 20 s (reference, checkouts, the cross-check arms' servers)")
    assert line[0].upper() + line[1:] in bisect_markdown(r) and line in bisect_text(r, width=200)
    assert BisectReport.from_json(r.to_json()).cost == r.cost  # kept in the JSON report
    # on a cluster the workers run the program: building and the wall time only
    assert time_line(with_time(bisect_report(), 600.0, 300.0, None)) == "time here: 10 min: building 5 min (50%)"
    assert time_line(bisect_report()) is None


def test_builds_past_the_bound_say_which_stage_needed_them() -> None:
    """Issue 45: a bisect built 19 commits against a bound of 10 and said only the number. Each
    build is charged to the stage that made it; a search after the first says what sent it."""
    from bisectbot.core.builds import build_stages, over_bound

    shas = [f"{i:040x}" for i in range(12)]
    held = [
        verdict(shas[0], "good-endpoint", Verdict.GOOD, GOOD_COUNTS),
        *(verdict(shas[i], "step", Verdict.BAD if i % 2 else Verdict.GOOD, GOOD_COUNTS) for i in range(1, 5)),
        replace(verdict(shas[5], "step", Verdict.SKIP, {}), build="failed"),
        verdict(shas[4], "retest-culprit", Verdict.GOOD, GOOD_COUNTS),  # the named commit held: search on above
        *(verdict(shas[i], "step", Verdict.BAD, GOOD_COUNTS) for i in range(6, 9)),
        verdict(shas[7], "retest-parent", Verdict.BAD, GOOD_COUNTS),  # its parent departs: walk back
        verdict(shas[9], "step", Verdict.GOOD, GOOD_COUNTS),
        verdict(shas[10], "retest-parent", Verdict.GOOD, GOOD_COUNTS),  # a parent skipped as equivalent
        verdict(shas[9], "confirm-culprit", Verdict.CHANGED, GOOD_COUNTS),
    ]
    stages = build_stages(held)
    assert [(s.stage, s.number, s.builds, s.skipped) for s in stages] == [
        ("ends", 1, 1, 0),
        ("search", 1, 5, 1),
        ("search", 2, 3, 0),
        ("search", 3, 1, 0),
        ("confirmation", 3, 1, 0),
    ]
    assert "tested GOOD on fresh seeds, not BAD: it went on above it" in stages[2].why and shas[4][:12] in stages[2].why
    assert "tested BAD on fresh seeds: it walked back below it" in stages[3].why and shas[7][:12] in stages[3].why
    assert sum(s.builds for s in stages) == len({v.sha for v in held}) == 11
    assert over_bound(stages, 11) == [] and over_bound(stages, 20) == []
    base = bisect_report()
    within = replace(base, builds=11, builds_bound=11, verdicts=held, build_stages=[s.to_json() for s in stages])
    assert bound_text(within) == "bound 11"
    over = replace(within, builds_bound=7)
    said = bound_text(over)
    assert said.startswith("bound 7, exceeded by 4: 1 commit that could not be built or run")
    assert "search 2 (3 builds): " in said and "search 3 (1 build): " in said
    flat = lambda text: " ".join(text.split())  # noqa: E731 - wrapped prose, read as one line
    for rendered in (bisect_text(over, width=100), bisect_markdown(over)):
        assert "search 2 (3 builds): " + stages[2].why in flat(rendered)
    assert BisectReport.from_json(json.loads(json.dumps(over.to_json()))) == over


def test_a_found_commit_says_what_it_proved_and_where_an_earlier_departure_could_hide() -> None:
    """Issue 45: a defect fixed and re-introduced was named at the re-introduction, reported as the
    "first bad commit" and nothing more. What the answer proves is a GOOD→BAD change; that it
    is the first departure, only when nothing before it went untested. Every summary says both,
    with the stretches a departure could have come and gone in, and the command that scans them."""
    from bisectbot.core.search import untested_stretches

    assert untested_stretches({40, 60, 64, 80, 95}, 70) == [(0, 40), (40, 60), (60, 64), (64, 69)]
    assert untested_stretches({1, 2}, 4) == [] and untested_stretches(set(), 1) == []
    first = "1" * 40
    scan = f"bisectbot bisect c.yaml --good {GOOD} --bad {PARENT} --scan"
    text = "a GOOD→BAD change at 60488cfca65a: its parent 2d5528afbae2 tests GOOD (…)"
    lone = "2" * 40
    found = replace(
        bisect_report(),
        proved={"change": "GOOD→BAD", "commit": CULPRIT, "parent": PARENT, "first_departure": False, "text": text},
        untested_before=[
            {"after": GOOD, "before": lone, "first": first, "last": PARENT, "commits": 51, "scan": scan},
            {"after": first, "before": PARENT, "first": lone, "last": lone, "commits": 1, "skipped": 1, "scan": scan},
        ],
        scan_command=scan,
    )
    flat = lambda text: " ".join(text.replace("\\\n", "").split())  # noqa: E731 - wrapped prose, read as one line
    md, terminal = bisect_markdown(found), flat(bisect_text(found, width=80))
    assert f"**Proved:** {text}." in md and f"Proved: {text}." in terminal
    hidden = (
        "Not proved: that it is the first departure. 52 commits before it that can change the binary were not "
        "tested, in 2 stretches between commits found on the GOOD side: {}..{} (51 commits), {} (1 commit, which "
        "could not be built or run); a departure that began and ended inside one would not show"
    )
    assert hidden.format(first[:12], PARENT[:12], lone[:12]) in terminal
    quoted = hidden.format(f"`{first[:12]}`", f"`{PARENT[:12]}`", f"`{lone[:12]}`")
    assert quoted.replace("Not proved:", "**Not proved:**") in md
    assert f"```\n{scan}\n```" in md and scan in terminal.replace(" \\ ", " ")
    from bisectbot.github.comment import CommentContext, render_bisect

    assert scan in render_bisect(found, CommentContext("o/r")).text()
    whole = replace(found, proved={**found.proved, "first_departure": True}, untested_before=[], scan_command=None)  # type: ignore[dict-item]
    assert "It is the first departure: every commit before it that can change the binary tested GOOD." in flat(
        bisect_text(whole)
    )
    assert "Not proved" not in bisect_markdown(whole) and "--scan" not in bisect_markdown(whole)
    assert BisectReport.from_json(json.loads(json.dumps(found.to_json()))) == found
    assert "Proved" not in bisect_markdown(bisect_report())  # a report stored before `proved` reads as before


# -- issue 48: an output that agrees with itself ------------------------------------------------
def test_placements_are_not_drawn_as_distances_in_any_chart() -> None:
    """Issue 48: the demo's chart drew GOOD-SIDE commits at 0.124, above the tolerance line, as if
    measured; their runs were the good end's, seed for seed. A placement has no distance of its
    own: every chart leaves it out and says which and why (the JSON's `along` keeps it)."""

    r = coherent_report()
    row = next(a for a in r.along if a["commit"] == PLACED)
    assert row["verdict"] == "good-side" and row["tv"] > (r.tolerance or 1)  # kept, and far above the line
    placed = {PLACED: 3}
    terminal_chart_draws_no_placement(bisect_text(r, 80), placed)
    mermaid_chart_draws_no_placement(bisect_markdown(r), placed)
    html_chart_draws_no_placement(report_html(r), placed)
    assert "placed beside a tested commit (the same outcomes seed for seed)" in bisect_text(r, 200)
    # a commit with a test against the reference is charted by it, not by a change test's few runs
    assert {a["commit"]: a["verdict"] for a in r.along}[PARENT] == "good"


def test_a_parents_changed_says_it_differs_from_its_child() -> None:
    """Issue 48: the good parent read `confirm-parent … CHANGED` with observed/reference far off
    after a few runs, as a defect. The change test found the two commits differ, which is the
    point: each side says what it differs from, and its runs are that test's sample."""

    r = coherent_report()
    table_words_explained(bisect_text(r, 80))
    md = bisect_markdown(r)
    parent_row = next(ln for ln in md.splitlines() if "| confirm-parent |" in ln)
    assert "E_change 8.1e+03: differs from its child on fresh seeds (change test, not vs the reference)" in parent_row
    assert "E_bad" not in parent_row
    comment = render_bisect(r, CommentContext(repo="o/r")).fit()
    assert "differs from its child" in comment and "differs from its parent" in comment


def test_every_term_is_glossed_where_it_is_first_used() -> None:
    """Issue 48: a bound, per-step errors, the confidence, eta and the tolerance, reference and
    plain steps, P(condition) were printed with no word on what they are. Each is glossed beside
    its first use, on the terminal and in the Markdown; the confidence is the union bound."""
    cost = {
        "unit": {"build_seconds": 0.4, "run_seconds": 0.002},
        "actual": {"builds": 6, "runs": 1460, "seconds": 5.3},
        "estimate": {"strategy": "reference", "builds": 5.0, "runs": 6779, "seconds": 16.0},
        "alternatives": [{"strategy": "plain", "builds": 6.0, "runs": 8000, "seconds": 19.0}],
    }
    r = replace(coherent_report(), cost=cost)
    for width in (80, 200):
        terms_glossed_where_first_used(bisect_text(r, width))
    markdown_terms_glossed_where_first_used(bisect_markdown(r))
    text = " ".join(bisect_text(r, 200).split())
    assert (
        "confidence ≥ 99.75%: the union bound over the 5 claims the answer rests on (4 tests against the "
        "reference, 1 change test), each wrong with probability ≤ 5.0e-04 (the per-step error): 1 − 5 × 5.0e-04"
    ) in text
    assert "bound 7 = ⌈log2 12⌉ + 3: the builds a bisect of 12 commits needs" in text
    # a report whose claims do not add up to its confidence gets no formula that contradicts it
    odd = replace(r, confidence=0.996)
    assert "1 − 5 ×" not in bisect_text(odd, 200) and "1 − the error levels of the claims" in bisect_text(odd, 200)
    # the checks can fail: a term used with no gloss after it
    bare = bisect_text(r, 200).replace("  · bound", "  bound")
    try:
        terms_glossed_where_first_used(bare, [t for t in TERMS if t[1] == r"bound "])
    except AssertionError:
        pass
    else:
        raise AssertionError("an unglossed bound passed")


def test_builds_past_their_bound_always_say_why_in_every_summary() -> None:
    """Issue 48: `7 builds (bound 6)` with no word on why it was passed. Every builds count
    printed is within its bound or says by how much and why, on the terminal and in the Markdown."""
    r = replace(coherent_report(), builds=9, builds_bound=7)  # no build_stages: told from the verdicts alone
    for rendered in (bisect_text(r, 80), bisect_markdown(r)):
        assert builds_within_bound_or_say_why(rendered) == 1
    try:
        builds_within_bound_or_say_why("· 9 builds (bound 7) · 1 run")
    except AssertionError:
        pass
    else:
        raise AssertionError("a bound passed without a word passed")


def test_runs_the_parse_cannot_read_are_listed_apart_from_runs_that_failed() -> None:
    """A test's summary lists the runs that failed and those whose output did not match parse on
    lines of their own, each with its last run (the output quoted, inert in Markdown)."""
    said = "'pick: <b>yellow</b>' does not match parse (expect_tokens 3: got 1 token)"
    base = a_test_report(Verdict.SKIP)
    detail = replace(
        base.detail,
        failures={"unparsable": 7, "crash": 2},
        last_unreadable=said,
        last_failed="killed by SIGSEGV: error: bad table",
    )
    text = " ".join(commit_text(replace(base, detail=detail), width=200).split())
    assert "failed runs: crash 2 (last: killed by SIGSEGV: error: bad table)" in text
    assert f"runs that do not match parse: unparsable 7 (last: {said})" in text
    md = markdown_of_test(replace(base, detail=detail))
    assert "Failed runs: crash 2 (last: killed by SIGSEGV: error: bad table)" in md
    assert "Runs that do not match parse: unparsable 7 (last: 'pick: `<b>yellow</b>'` does not match parse" in md
    assert md.count("<b>") == 1  # inert: in a code span, where GitHub parses no HTML
