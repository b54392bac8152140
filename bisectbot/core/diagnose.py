"""What a commit's runs looked like beside the reference (pure): the one computation behind
every observed-vs-reference rendering (terminal, Markdown, comments, error messages, the distance
charts). Which config mistake such runs point at is report.hints; whether how often the
condition is met changed, statistics.condition.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from bisectbot.records.commits import CommitVerdict
from bisectbot.records.reports import AlongRow, NumericReference
from bisectbot.statistics import means
from bisectbot.statistics.outcome import Verdict
from bisectbot.statistics.stats import FAILED, MISSED, OTHER

OTHER_LABEL = "other"  # how OTHER is written in reports
FAILED_LABEL = "failed"
MISSED_LABEL = "missed"


def distance_name(numeric: NumericReference | None) -> str:
    """What "distance from the reference" is, in the fewest words: TV for outcomes; for a
    number, the quantity its tolerance bounds (statistics.means.distance)."""
    if numeric is None:
        return "TV"
    scale = numeric["scale"]
    if scale == "mean":
        return "|mean − reference| / reference" if numeric.get("relative") else "|mean − reference|"
    return {
        "difference": "|mean − control's|",
        "ratio": "|mean / control's − 1|",
        "median-ratio": "time ratio to the control's − 1, either way",
    }[scale]


def either_way(eta: float | None = None, tolerance: float | None = None, distance: str = "total variation") -> str:
    """The one sentence every message says of a change inside the indifference band (issue 48:
    with the defaults a real 0.08 shift may be called either way, and nobody was told): that it
    may be called either way, and the two knobs, each for what the user wants of such a change.
    `distance`: what the band bounds (a number's: distance_name)."""
    band = (
        f"eta {eta:g} and tolerance {tolerance:g}" if eta is not None and tolerance is not None else "eta and tolerance"
    )
    return f"a change between {band} ({distance}) from the reference may be called either way: {band_knobs()}"


def band_knobs() -> str:
    """What to set for a change inside the band, by what the user wants of it."""
    return (
        "if a change this small matters, lower test.tolerance to it (bisectbot init --tolerance); if it does "
        "not, raise test.eta above it"
    )


def short_p(x: float) -> str:
    """0.25 → '.25', 1.0 → '1', 0 → '0': two digits in little room."""
    if x >= 0.995:
        return "1"
    if x < 0.005:
        return "0"
    return f"{x:.2f}".lstrip("0")


@dataclass(frozen=True)
class Cell:
    """One outcome of a commit's runs beside the reference: among the runs that met the condition."""

    label: str  # the outcome, OTHER, FAILED and MISSED written as 'other', 'failed' and 'missed'
    count: int
    freq: float | None  # observed share (None: no run met the condition)
    ref: float  # the reference's share


LABELS = {OTHER: OTHER_LABEL, FAILED: FAILED_LABEL, MISSED: MISSED_LABEL}


def observed_cells(counts: Mapping[str, int], categories: Sequence[str], probs: Sequence[float]) -> list[Cell]:
    """The one computation behind every observed-vs-reference rendering (terminal, Markdown,
    comments, error messages), in the reference's order; OTHER and FAILED only when seen, MISSED
    apart."""
    prob_of = dict(zip(categories, probs))
    names = [n for n in categories if n != MISSED]
    met = sum(counts.get(n, 0) for n in names)
    p_met = sum(prob_of[n] for n in names) or 1.0
    return [
        Cell(LABELS.get(n, n), counts.get(n, 0), counts.get(n, 0) / met if met else None, prob_of[n] / p_met)
        for n in names
        if not (n in (OTHER, FAILED) and counts.get(n, 0) == 0)
    ]


def tv_from_reference(counts: Mapping[str, int], categories: Sequence[str], probs: Sequence[float]) -> float | None:
    """Total variation between a commit's observed shares and the reference's, among the runs
    that met the condition (None: no such run). What the distance charts plot."""
    cells = observed_cells(counts, categories, probs)
    if not any(c.count for c in cells):
        return None
    seen = {c.label for c in cells}
    missing = sum(p for n, p in zip(categories, probs) if LABELS.get(n, n) not in seen and n != MISSED)
    return 0.5 * (sum(abs((c.freq or 0.0) - c.ref) for c in cells) + missing)


def distance_along(
    verdicts: Sequence[CommitVerdict],
    positions: Mapping[str, int],
    categories: Sequence[str],
    probs: Sequence[float],
    numeric: NumericReference | None = None,
) -> list[AlongRow]:
    """Where the distribution moved: each tested commit on the line once, in history order, with
    its TV from the reference and its verdict — the series the distance charts draw, kept in the
    report so renderers only read it. A commit's row is its longest main-arm test against the
    reference (GOOD, BAD); without one, its longest other sample (an undecided test, then the
    change test's), and only then a placement (GOOD-SIDE, BAD-SIDE: no distance of its own, which
    renderers leave out of the chart). For a number (`numeric`), the distance is its estimate's
    (`number_distance`, in the units of the tolerance), and θ's interval comes with it."""
    best: dict[str, CommitVerdict] = {}
    for v in verdicts:
        if (
            v.arm == "main"
            and v.sha in positions
            and v.counts
            and distance_rank(v) <= distance_rank(best.get(v.sha, v))
        ):
            best[v.sha] = v
    out = []
    for sha, v in best.items():
        if numeric is not None:
            if v.values and "estimate" in v.values:
                out.append(
                    AlongRow(
                        commit=sha,
                        position=positions[sha],
                        tv=round(number_distance(v.values["estimate"], numeric), 4),
                        verdict=v.verdict.value,
                        value=v.values["estimate"],
                        low=v.values["low"],
                        high=v.values["high"],
                    )
                )
            continue
        tv = tv_from_reference(v.counts, categories, probs)
        if tv is not None:
            out.append(AlongRow(commit=sha, position=positions[sha], tv=round(tv, 4), verdict=v.verdict.value))
    return sorted(out, key=lambda row: row["position"])


def number_distance(theta: float, numeric: NumericReference) -> float:
    """θ's distance from the reference in the tolerance's units (statistics.means.distance)."""
    return means.distance(numeric["scale"], theta, numeric.get("mean"), numeric.get("relative", False))


# θ in a few words, per scale (charts, captions)
THETA_LONG = {
    "mean": "mean",
    "difference": "mean − the control's mean",
    "ratio": "mean / the control's mean",
    "median-ratio": "median log of the time ratio to the control's",
}
# How θ is named beside its value, per scale; a timing's median log-ratio is shown as the ratio e^θ
THETA_NAMES = {"mean": "mean", "difference": "− control's", "ratio": "/ control's", "median-ratio": "/ control's"}


def theta_text(theta: float, numeric: NumericReference) -> str:
    """θ as a person reads it: a mean or a difference as it is, a ratio as ×r."""
    scale = numeric["scale"]
    if scale == "median-ratio":
        return f"×{math.exp(theta):.4f}" if math.isfinite(theta) else ("×inf" if theta > 0 else "×0")
    if scale == "ratio":
        return f"×{theta:.4f}"
    return f"{theta:+.4g}" if scale == "difference" else f"{theta:.4g}"


def observed_number(values: Mapping[str, float], numeric: NumericReference) -> str:
    """'mean 0.4922 (sd 0.12, 90 runs); − control's −0.1479 [−0.2506, −0.0152]: 0.148 from the
    reference': a numeric verdict's runs beside the reference, θ with the interval its test left."""
    n = int(values.get("n", 0))
    what = " s" if numeric.get("wall_time") else ""
    skipped = int(values.get("no_number", 0))
    none = f"; {skipped} more printed no number (nan)" if skipped else ""
    head = f"mean {values['mean']:.4g}{what} (sd {values['sd']:.3g}, {n} run{'s' if n != 1 else ''}{none})"
    if "estimate" not in values:
        return head
    est, lo, hi = values["estimate"], values["low"], values["high"]
    name = THETA_NAMES[numeric["scale"]]
    interval = f"[{theta_text(lo, numeric)}, {theta_text(hi, numeric)}]"
    away = number_distance(est, numeric)
    ref = numeric.get("mean")
    against = f"reference {ref:.4g}" if numeric["scale"] == "mean" and ref is not None else "the reference"
    if numeric["scale"] == "mean":
        return f"{head}: {interval}, {away:.3g} from {against}"
    noise = f"; noise {values['noise']:.1%} a pair" if numeric["scale"] == "median-ratio" and "noise" in values else ""
    return f"{head}; {name} {theta_text(est, numeric)} {interval}: {away:.3g} from {against}{noise}"


def distance_rank(v: CommitVerdict) -> tuple[int, int]:
    """Which of a commit's verdicts stands for its distance from the reference (its row in the
    distance charts, its observed-vs-reference chart): the lowest rank, then the most runs."""
    if v.verdict.tested:
        kind = 0
    elif v.verdict in (Verdict.GOOD_SIDE, Verdict.BAD_SIDE):
        kind = 3
    else:
        kind = 2 if v.mode == "change" else 1
    return kind, -v.runs


def observed_pairs(counts: Mapping[str, int], categories: Sequence[str], probs: Sequence[float]) -> str:
    """'b .67/.20 d .25/.30 …': observed share / reference share, the largest departures first
    (so a cut drops the least telling); 'missed N' when no run met the condition."""
    cells = observed_cells(counts, categories, probs)
    if not any(c.count for c in cells):
        return f"{MISSED_LABEL} {counts.get(MISSED, 0)}" if counts.get(MISSED) else ""
    cells.sort(key=lambda c: -abs((c.freq or 0.0) - c.ref))
    return " ".join(f"{c.label} {short_p(c.freq or 0.0)}/{short_p(c.ref)}" for c in cells)
