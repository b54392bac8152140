"""What the ends' runs say about the bisect itself (pure): nothing changed between them, the
program is not deterministic per seed, or the working end is unlike the commits next to it.

Why: a bisect that cannot be answered used to end in advice about the indifference band (lower
test.tolerance, raise test.eta) whatever the cause, and placements by seed identity assumed a
deterministic program. The texts here say what the runs show, with the evidence and the knob;
bisecting.endpoints gathers the runs and decides when they apply.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from bisectbot.core.diagnose import tv_from_reference
from bisectbot.core.plan import Departure, Found
from bisectbot.core.search import SearchResult
from bisectbot.records.commits import CommitVerdict
from bisectbot.records.reports import BisectStatus, Repeatability
from bisectbot.statistics.outcome import Verdict
from bisectbot.statistics.two_sample import ALIKE_DELTA, SeedForSeed, seed_for_seed

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


@dataclass(frozen=True)
class Unusual:
    """What shows a working end unlike the commits next to it, when its own runs are the
    reference (`reference: good`): the commit the search ended next to it (`neighbour`), how
    its runs compare with the end's seed for seed (`unlike`), the undecided test it was placed
    by (its own, or the commit it prints like: `tested`, with its observed TV from the end's
    runs), and the other commits that print what it prints (`alike`)."""

    end: str  # good, or with --find fixed bad: the working end's name
    end_sha: str
    neighbour: str
    unlike: SeedForSeed
    tested: CommitVerdict
    tv: float | None
    alike: tuple[str, ...]
    after: bool = True  # the commits are after the end (--find bad), or before it (--find fixed)


def find_unusual(
    end: tuple[str, str],
    neighbour: str,
    verdicts: Sequence[CommitVerdict],
    seen: Mapping[str, Mapping[int, int]],
    reference: tuple[Sequence[str], Sequence[float]],
    after: bool = True,
) -> Unusual | None:
    """Is the working end (name, sha) unlike the commits next to it? `neighbour`: the commit the
    search ended next to it; `seen`: the observations (seed → category) of the end, the
    neighbour and the other commits on the neighbour's side that this bisect ran; `reference`:
    the categories and probabilities the tests judged against (the end's own runs). Yes when the
    neighbour prints otherwise than the end on some seeds (not shown alike), prints what at
    least one other commit there prints (shown alike), and the commits like it have an
    undecided test against the end's runs and none a BAD (which would be a real departure)."""
    name, sha = end
    mine = seen.get(neighbour, {})
    unlike = seed_for_seed(seen.get(sha, {}), mine)
    if not mine or not unlike.differ or unlike.alike():
        return None
    like = [c for c in seen if c == neighbour or (c != sha and seed_for_seed(mine, seen[c]).alike())]
    tests = [v for v in verdicts if v.arm == "main" and v.block == 0 and v.mode == "reference" and v.sha in like]
    undecided = next((v for v in reversed(tests) if v.verdict is Verdict.INCONCLUSIVE), None)
    if undecided is None or any(v.verdict is Verdict.BAD for v in tests) or len(like) < 2:
        return None
    tv = tv_from_reference(undecided.counts, *reference)
    others = tuple(c for c in like if c != neighbour)
    return Unusual(name, sha, neighbour, unlike, undecided, tv, others, after)


def unusual_end(u: Unusual, eta: float, tolerance: float) -> str:
    """The one-line error for an unusual working end: what shows it, and which --good (or
    --bad) to try instead (the neighbour, which prints like the rest), or the tolerance."""
    where = "after" if u.after else "before"
    named = [sha[:12] for sha in u.alike[:3]] + ([f"{len(u.alike) - 3} more"] if len(u.alike) > 3 else [])
    others = named[0] if len(named) == 1 else f"{', '.join(named[:-1])} and {named[-1]}"
    tv = f"observed TV {u.tv:.3f} from it; " if u.tv is not None else ""
    return (
        f"the {u.end} end {u.end_sha[:12]} looks unlike the commits {where} it: {u.neighbour[:12]}, the commit the "
        f"search ended next to it, printed another outcome than it on {u.unlike.differ} of {u.unlike.shared} seeds "
        f"both ran, while {others} print what {u.neighbour[:12]} prints seed for seed; the reference is the "
        f"{u.end} end's own runs (a control sample), and {u.tested.sha[:12]}'s test against them was undecided "
        f"after {u.tested.runs} runs ({tv}eta {eta:g}, tolerance {tolerance:g}), so no commit {where} it can be "
        f"placed: try another --{u.end}, e.g. {u.neighbour[:12]} (or, if a change this small matters, lower "
        f"test.tolerance to it)"
    )
