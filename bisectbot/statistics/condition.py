"""Whether how often the condition is met changed between two commits (pure): a paired test.

Why: with a condition but no `reference.condition_prob`, the tests judge only the outcome among
the runs that meet the condition; a change in how often it is met is invisible to them, and a
bisect over it ends undecided or ambiguous, blaming the indifference zone. Comparing two commits'
runs on the seeds both ran (McNemar's test made sequential) says what changed instead.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence


@dataclass(frozen=True)
class ConditionShift:
    """The share of runs meeting the condition at two commits, compared seed for seed.

    Why: with a condition but no `reference.condition_prob`, the tests judge only the outcome
    among the runs that meet the condition; a change in how often it is met is invisible to
    them, and a bisect over it ends undecided or ambiguous, blaming the indifference zone.
    Comparing the two commits' runs on the seeds both ran says what changed instead."""

    before_met: int
    before_runs: int
    after_met: int
    after_runs: int
    down: int  # seeds whose run met the condition before and not after
    up: int  # and the reverse
    log_e: float  # against "the same share at both" (`log_e_discordant`)

    @property
    def before(self) -> float:
        return self.before_met / self.before_runs if self.before_runs else 0.0

    @property
    def after(self) -> float:
        return self.after_met / self.after_runs if self.after_runs else 0.0


def log_e_discordant(down: int, up: int) -> float:
    """log E against H0 "two commits meet the condition equally often", from their runs on
    the same seeds: under H0 each seed where they disagree is equally likely to go either way
    (seeds are exchangeable draws), so the discordant seeds are fair coin flips and a
    Krichevsky–Trofimov mixture over their bias, against ½, is a test martingale (McNemar's
    test made sequential): P(E ever ≥ 1/α) ≤ α."""
    n = down + up
    log_mix = math.lgamma(down + 0.5) + math.lgamma(up + 0.5) - math.lgamma(n + 1.0) - math.log(math.pi)
    return log_mix + n * math.log(2.0)


def condition_shift(
    before: Mapping[int, int], after: Mapping[int, int], alpha: float, skip: int | None = None
) -> ConditionShift | None:
    """The shift in the share of runs meeting the condition between two commits' runs (seed →
    category, −1: the condition was missed; `skip`: a category that tells nothing about the
    condition, FAILED), when their runs on the shared seeds show it at level `alpha`; else None."""
    mine = {s: c != -1 for s, c in before.items() if c != skip}
    theirs = {s: c != -1 for s, c in after.items() if c != skip}
    shared = [s for s in mine if s in theirs]
    down = sum(mine[s] and not theirs[s] for s in shared)
    up = sum(theirs[s] and not mine[s] for s in shared)
    log_e = log_e_discordant(down, up)
    if log_e < math.log(1 / alpha):
        return None
    return ConditionShift(sum(mine.values()), len(mine), sum(theirs.values()), len(theirs), down, up, log_e)


def share_change_between(
    shares: Sequence[tuple[int, float]], before: float, after: float
) -> tuple[int | None, int | None]:
    """Where the share changed, as far as the tested commits show: given (position, observed
    share) in line order, the last position whose share is nearer `before` ahead of the first
    whose share is nearer `after` (None where no such commit was tested)."""
    like_after = [pos for pos, share in shares if abs(share - after) < abs(share - before)]
    first_after = min(like_after, default=None)
    like_before = [
        pos
        for pos, share in shares
        if abs(share - before) <= abs(share - after) and (first_after is None or pos < first_after)
    ]
    return max(like_before, default=None), first_after
