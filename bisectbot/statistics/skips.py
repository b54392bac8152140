"""When to skip a commit (pure): evidence that more than half of its runs fail.

A commit whose program mostly crashes or times out tells nothing about the outcome
distribution; this sequential test (valid after every run, like the others) lets the pipeline
skip it early without skipping a commit that merely fails now and then.
"""

from __future__ import annotations

import math

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
