"""When runs fail (pure): whether a commit's runs mostly fail, and whether two commits fail
equally often.

A commit whose program mostly crashes or times out tells nothing about the outcome
distribution; a sequential test (valid after every run, like the others) skips it early
without skipping a commit that merely fails now and then. A crash rate that rose between two
commits is invisible to the tests while failed runs are no observation: a paired test on the
seeds both ran says so (`failure_shift`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from bisectbot.statistics.condition import log_e_discordant

SKIP_LEVEL = 0.02  # P(skipping a commit whose runs fail at most half the time) ≤ this
# alternatives (failure rate f, weight) of the mixture; most weight on "nearly every run fails"
SKIP_ALTERNATIVES: tuple[tuple[float, float], ...] = ((0.6, 0.1), (0.8, 0.2), (0.95, 0.7))


def log_e_mostly_failing(failed: int, ok: int) -> float:
    """log E against H0 "at most half of this commit's runs fail".

    A mixture over alternatives f > ½ of the likelihood ratios (f/½)^failed ((1−f)/½)^ok;
    under any failure rate ≤ ½ each ratio has mean ≤ 1 per run (2(f_H f + (1−f_H)(1−f)) ≤ 1),
    so the mixture is a test supermartingale (Ville). When every run fails it reaches 1/0.02
    after 7 runs; a commit where 10% of runs fail essentially never gets there."""
    terms = [math.log(w) + failed * math.log(2 * f) + ok * math.log(2 * (1 - f)) for f, w in SKIP_ALTERNATIVES]
    top = max(terms)
    return top + math.log(sum(math.exp(t - top) for t in terms))


def mostly_failing(failed: int, ok: int, level: float = SKIP_LEVEL) -> bool:
    """Evidence, at `level`, that more than half of the commit's runs fail: skip it."""
    return log_e_mostly_failing(failed, ok) >= math.log(1 / level)


@dataclass(frozen=True)
class FailureShift:
    """How often two commits' runs fail, compared on the seeds both ran: `before` (the
    working end's, say) and `after`; `log_e` against "they fail equally often"."""

    before_failed: int
    before_runs: int
    after_failed: int
    after_runs: int
    shared: int  # seeds both ran
    only_after: int  # of them, seeds whose run failed after and not before
    only_before: int  # and the reverse
    log_e: float

    @property
    def before(self) -> float:
        return self.before_failed / self.before_runs if self.before_runs else 0.0

    @property
    def after(self) -> float:
        return self.after_failed / self.after_runs if self.after_runs else 0.0


def failure_shift(before: Mapping[int, bool], after: Mapping[int, bool], alpha: float) -> FailureShift | None:
    """Whether runs fail more often at one commit than at another (seed → whether its run
    failed), shown at level `alpha` on the seeds both ran: the seeds where exactly one of them
    failed are fair coin flips when both fail equally often (McNemar's test made sequential,
    condition.log_e_discordant). None when not shown, or when `after` does not fail more."""
    shared = [seed for seed in after if seed in before]
    only_after = sum(after[s] and not before[s] for s in shared)
    only_before = sum(before[s] and not after[s] for s in shared)
    log_e = log_e_discordant(only_after, only_before)
    if only_after <= only_before or log_e < math.log(1 / alpha):
        return None
    return FailureShift(
        sum(before.values()), len(before), sum(after.values()), len(after), len(shared), only_after, only_before, log_e
    )
