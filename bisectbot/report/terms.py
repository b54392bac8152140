"""What a summary's terms mean, said where each is first met (pure).

A reader who has not read the design meets words a bisect's summary cannot do without: a bound
on the builds, a confidence made of per-step errors, eta and the tolerance, the strategies'
steps, P(condition), placements (GOOD-SIDE, BAD-SIDE) and the change test's CHANGED. Each is
glossed in one clause beside its first use, the same words on the terminal (`report.text`), in
the Markdown (`report.markdown`, so the `--html` page) and in the GitHub comment. Rows that are
not tests against the reference (a placement, one side of the change test) carry a note saying
what they are, and the distance charts leave placements out, saying which and why.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

from bisectbot.core.ledger import decisive
from bisectbot.core.policy import MISPLACED, STEP_WORDS
from bisectbot.records.commits import CommitVerdict
from bisectbot.records.reports import BisectReport, BisectStatus, NumericReference, ReferenceSummary
from bisectbot.statistics.outcome import Verdict

PLACEMENTS = (Verdict.GOOD_SIDE, Verdict.BAD_SIDE)
NOT_A_TEST = "; not a test against the reference"  # how a placement's reason ends (judge.verdict, core.broken_end)

# What each strategy's search steps are, in a clause (a forecast names them: "reference steps", "plain")
STEPS = {**STEP_WORDS, "plain": f"{STEP_WORDS['plain']} (cheaper, but {MISPLACED})"}


def is_placement(v: CommitVerdict) -> bool:
    return v.verdict in PLACEMENTS


def placed_beside(v: CommitVerdict) -> bool:
    """A placement beside a tested commit whose runs it repeats seed for seed (judge.verdict's
    `like <sha> (on the … side): …`), not one read off the broken end or the sticky posterior."""
    return is_placement(v) and v.reason.startswith("like ")


def verdict_note(v: CommitVerdict) -> str | None:
    """What a row is when it is not a test against the reference: a placement (what placed it)
    or one side of the change test (which commit it differs from); None for the others."""
    if is_placement(v):
        return "placed, not tested against the reference: " + v.reason.replace(NOT_A_TEST, "")
    if v.mode == "change":
        other = "its child" if v.role == "confirm-parent" else "its parent"
        said = "differs from" if v.verdict is Verdict.CHANGED else "not shown to differ from"
        return f"{said} {other} on fresh seeds (change test, not vs the reference)"
    return None


def table_terms(verdicts: Sequence[CommitVerdict]) -> list[str]:
    """The verdict table's words that are not claims about the reference, one line each, when
    the table shows them (for its "how to read it")."""
    lines = []
    if any(is_placement(v) for v in verdicts):
        lines.append(
            "GOOD-SIDE, BAD-SIDE: placements, not verdicts: the search put the commit on a side without a test "
            "against the reference (beside a tested commit whose runs it repeats seed for seed, unlike the bad end, "
            "or by the sticky search's posterior); never read as GOOD or BAD, and not drawn as a distance."
        )
    if any(v.mode == "change" for v in verdicts):
        lines.append(
            "CHANGED: the change test found the runs of the named commit and of its parent differ on fresh seeds "
            "(E_change ≥ 1/alpha), which confirms the answer: on the parent's row it means it differs from its "
            "child, not that it is broken (its test against the reference is retest-parent's); their change-test "
            "runs beside the reference are that test's small sample, not a test against the reference."
        )
    return lines


def change_words(numeric: NumericReference | None) -> str:
    """'a change of total variation' / 'a change of the mean' (by how far it moved)."""
    if numeric is None:
        return "a change of total variation"
    if numeric["kind"] == "time":
        return "a slowdown or speed-up (as a fraction of the control's time)"
    relative = numeric.get("relative")
    return "a change of the mean" + (" (as a fraction of the reference's)" if relative else " (in its own units)")


def zone_gloss(r: BisectReport) -> str | None:
    """eta and the tolerance, the indifference zone every GOOD and BAD is said against."""
    if r.eta is None or r.tolerance is None:
        return None
    return (
        f"eta {r.eta:g}, tolerance {r.tolerance:g}: {change_words(r.reference.numeric)} below eta is never called "
        "BAD, above tolerance never GOOD; in between either verdict is allowed"
    )


def confidence_gloss(r: BisectReport) -> str | None:
    """How the per-step error becomes the confidence: the union bound over the answer's claims."""
    if r.status not in (BisectStatus.FOUND, BisectStatus.CLEAN):
        return None
    claims = decisive(r.verdicts)
    changes = sum(1 for v in claims if v.mode == "change")
    levels = sum(max(v.alpha, v.beta) for v in claims)
    n = len(claims)
    head = f"confidence ≥ {r.confidence:.2%}: the union bound"
    if not n or not math.isclose(1 - levels, r.confidence, abs_tol=1e-9):  # verdicts that do not add up to it
        return (
            f"{head}: 1 − the error levels of the claims the answer rests on (tests against the reference, "
            f"the change test), each at most the per-step error {r.step_alpha:.1e}, summed"
        )
    each = (
        f"each wrong with probability ≤ {r.step_alpha:.1e} (the per-step error): 1 − {n} × {r.step_alpha:.1e}"
        if math.isclose(levels, n * r.step_alpha, rel_tol=1e-9)
        else f"wrong with probabilities summing to {levels:.2g}: 1 − {levels:.2g}"
    )
    return (
        f"{head} over the {n} claims the answer rests on ({n - changes} tests against the reference, "
        f"{changes} change test{'' if changes == 1 else 's'}), {each}"
    )


def bound_gloss(r: BisectReport) -> str:
    """What the builds bound is: what a bisect needs when every build halves the range."""
    n = r.searched if r.searched is not None else r.commits
    formula = f" = ⌈log2 {n}⌉ + 3" if n > 0 and math.ceil(math.log2(n)) + 3 == r.builds_bound else ""
    return (
        f"bound {r.builds_bound}{formula}: the builds a bisect of {n} commits needs when every build halves "
        "the range (the two ends, one per halving, one for a parent skipped as equivalent); a yardstick, "
        "not a limit (--max-builds sets one)"
    )


def strategy_gloss(r: BisectReport) -> str | None:
    """The steps the cost line's forecast names (`reference steps`, `plain`), when it has one."""
    estimate = (r.cost or {}).get("estimate")
    if not estimate:
        return None
    named = [estimate["strategy"], *(a["strategy"] for a in (r.cost or {}).get("alternatives", []))]
    words = [f"{s} steps: {STEPS[s]}" if i == 0 else f"{s}: {STEPS[s]}" for i, s in enumerate(named) if s in STEPS]
    return "; ".join(words) or None


def condition_gloss(reference: ReferenceSummary, quote: Callable[[str], str] = str) -> str | None:
    """P(condition), when the reference line gives it."""
    cond = reference.condition
    if not reference.condition_prob or not cond:
        return None
    return (
        f"P(condition): the reference's share of runs that meet the condition (token {cond['position']} = "
        f"{quote(cond['token'])}); outcome shares are among those runs, the others count as missed"
    )


def placements_note(r: BisectReport) -> str | None:
    """Which commits the distance charts leave out and why: placements (GOOD-SIDE, BAD-SIDE) have
    no distance of their own (None when the chart has none)."""
    placed = [a for a in r.along if Verdict(a["verdict"]) in PLACEMENTS]
    if not placed:
        return None
    main = {v.sha: v for v in r.verdicts if v.arm == "main" and is_placement(v)}
    beside = all(placed_beside(main[a["commit"]]) for a in placed if a["commit"] in main)
    listed = ", ".join(f"{a['commit'][:12]} at {a['position']}" for a in placed[:4]) + (
        f" and {len(placed) - 4} more" if len(placed) > 4 else ""
    )
    words = {str(Verdict(a["verdict"])).upper() for a in placed}
    why = (
        "placed beside a tested commit (the same outcomes seed for seed)"
        if beside
        else "placed on a side by the search"
    )
    one = len(placed) == 1
    return (
        f"not drawn: {len(placed)} {'placement' if one else 'placements'} ({'/'.join(sorted(words))}: {listed}), "
        f"{why}, not tested against the reference: {'not a distance of its own' if one else 'no distances of their own'}"
    )
