"""What the ends' runs say about the bisect itself (pure): nothing changed between them, or the
program is not deterministic per seed.

Why: a bisect that cannot be answered used to end in advice about the indifference band (lower
test.tolerance, raise test.eta) whatever the cause, and placements by seed identity assumed a
deterministic program. The texts here say what the runs show, with the evidence and the knob;
bisecting.endpoints gathers the runs and decides when they apply.
"""

from __future__ import annotations

from bisectbot.core.plan import Departure, Found
from bisectbot.core.search import SearchResult
from bisectbot.records.reports import BisectStatus, Repeatability
from bisectbot.statistics.two_sample import ALIKE_DELTA, SeedForSeed

NOTHING_CHANGED = "nothing changed between the ends"  # how that message begins
NO_SEARCH = "none"  # the report's strategy when the ends alone gave the answer


def nothing_changed(
    broken: tuple[str, str], working: tuple[str, str], same: SeedForSeed, last: int, scan: bool = True
) -> Departure:
    """The bisect's end when the broken end (name, sha) tests GOOD and prints what the working
    end prints on the seeds both ran (`same`, shown alike): status clean, the whole line on the
    working side (`last`: the broken end's position), no search made. `scan`: --scan can look
    between the ends (it goes with --find bad)."""
    (b_name, b_sha), (w_name, w_sha) = broken, working
    scan_it = ", or rerun with --scan to test every commit between them (a change that came and went)"
    message = (
        f"{NOTHING_CHANGED}: the {b_name} end {b_sha[:12]} printed what the {w_name} end {w_sha[:12]} printed "
        f"on {same.agree} of {same.shared} seeds both ran (total variation below {ALIKE_DELTA:g} between them), "
        f"and both test GOOD against the reference: there is no departure to bisect; give a --{b_name} where the "
        f"bug shows{scan_it if scan else ''}"
    )
    return Departure(BisectStatus.CLEAN, message, Found(SearchResult(last, last), NO_SEARCH), [], [])


def not_deterministic(end: str, sha: str, same: SeedForSeed) -> str:
    """The working end (`end`, `sha`) printed otherwise on some of its seeds run a second time
    (`same`): what that changes, and that the tests still hold."""
    return (
        f"the program is not deterministic per seed: {same.differ} of {same.shared} seeds of the {end} end "
        f"{sha[:12]} printed another outcome when run a second time, so no commit is placed beside another for "
        f"printing the same outcomes seed for seed; the tests stay valid (two runs on one seed are then "
        f"independent draws as far as the program's own noise goes, as the tests allow) but take more runs"
    )


def repeatability_text(end: str, again: Repeatability | None) -> str | None:
    """`not_deterministic` for a report's `repeatability` (the `end` it was checked at), or None
    when the program printed the same both times (or it was not checked)."""
    if again is None or again["deterministic"]:
        return None
    return not_deterministic(end, again["commit"], SeedForSeed(again["seeds"] - again["differ"], again["seeds"]))
