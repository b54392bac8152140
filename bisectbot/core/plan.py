"""The records a bisect is planned with and concludes in (pure): what is searched, what was found.

A `BisectPlan` is decided before the bisect runs (which commits, which job, at which error
level, how the line is narrowed: `Narrowing`); `Found`, `ChangePoint` and `Departure` are what
the search and its confirmation loop (core.walkback) hand to the report (core.assembly);
`ReportContext` is what the report carries besides the verdicts. They live apart from the
stages because planning (jobs.lifecycle, bisecting.narrow), the bot and the benchmarks build and
read them without running a bisect.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

from bisectbot.core.search import SearchResult
from bisectbot.records.commits import Ask, CommitVerdict
from bisectbot.records.reports import BisectStatus, ConfigSummary, Environment, ReferenceSummary
from bisectbot.statistics import stats
from bisectbot.statistics.outcome import Find


@dataclass(frozen=True)
class Narrowing:
    """How a bisect's line is narrowed: `paths` restricts (as `git bisect start -- <paths>`),
    `also` adds paths that always count as inputs, `enabled` False keeps every commit."""

    enabled: bool = True
    paths: tuple[str, ...] = ()
    also: tuple[str, ...] = ()

    def job_parts(self) -> tuple[str, ...]:
        """What the job id must include (nothing for the default, so existing ids stay)."""
        parts = [] if self.enabled else ["all-commits"]
        parts += [f"paths={p}" for p in self.paths] + [f"also={p}" for p in self.also]
        return tuple(parts)


@dataclass(frozen=True)
class Narrowed:
    """The line the search runs over, and what the skipped commits stand for.

    `line` keeps both ends and every commit that can change the binary, in order; `stands_for`
    maps a kept commit to the skipped ones after it (they build its binary); `why` says, per
    kept commit, which change made it count."""

    line: tuple[str, ...]
    full: tuple[str, ...]
    stands_for: Mapping[str, tuple[str, ...]]
    why: Mapping[str, str]
    rule: str = ""  # the rule as applied, for the report

    @property
    def skipped(self) -> int:
        return len(self.full) - len(self.line)

    def expand(self, first: str, last: str) -> list[str]:
        """The commits of the full line that the kept commits first … last stand for."""
        out: list[str] = []
        i, j = self.line.index(first), self.line.index(last)
        for sha in self.line[i : j + 1]:
            out.append(sha)
            out.extend(self.stands_for.get(sha, ()))
        return out


@dataclass(frozen=True)
class BisectPlan:
    """A bisect decided before it runs: which commits, which job, at which error level."""

    job: str
    line: tuple[str, ...]  # the first-parent line good..bad, oldest first
    good_ref: str  # the refs as the user gave them
    bad_ref: str
    find: Find
    strategy: str  # auto | plain | sticky, as asked
    level: float  # per-verdict alpha = beta
    config_path: str
    narrowing: Narrowing = Narrowing()  # how the line is to be narrowed (bisecting.narrow)
    narrowed: Narrowed | None = None  # once it is: the full line and what its skipped commits stand for
    user_skipped: tuple[str, ...] = ()  # commits the user skipped (--skip, --exclude): never built nor tested
    broken_last: bool = False  # the broken end is tested only when the answer rests on it (policy.broken_end_last)
    # --scan: both ends may test GOOD; every commit between is tested, the middle first, until one
    # departs (a defect that came and went between two GOOD commits), then the bisect goes on below it
    scan: bool = False

    @property
    def total(self) -> int:
        """Commits in the whole range (`n` counts those the search runs over)."""
        return len(self.narrowed.full) if self.narrowed is not None else self.n

    @property
    def n(self) -> int:
        return len(self.line)

    @property
    def good(self) -> str:
        return self.line[0]

    @property
    def bad(self) -> str:
        return self.line[-1]

    @property
    def broken_pos(self) -> int:
        return self.n - 1 if self.find is Find.BAD else 0

    @property
    def working_pos(self) -> int:
        return 0 if self.find is Find.BAD else self.n - 1

    def ref(self, name: str) -> str:
        return self.good_ref if name == "good" else self.bad_ref

    def skipped_in(self, lo: int, hi: int) -> list[int]:
        """Positions strictly between lo and hi that the user skipped, relative to lo."""
        skip = set(self.user_skipped)
        return [p - lo for p in range(lo + 1, hi) if self.line[p] in skip]

    def ask(self, role: str, **kw: object) -> Ask:
        """A question at this bisect's per-step error level."""
        return Ask(role=role, alpha=self.level, beta=self.level, **kw)  # type: ignore[arg-type]


@dataclass(frozen=True)
class ReportContext:
    """What a report carries besides the verdicts: the reference, the config, the machine."""

    reference: ReferenceSummary
    config: ConfigSummary
    environment: Environment


@dataclass(frozen=True)
class Found:
    """What one search concluded: the boundary, for sticky its posterior probability, and why
    it stopped short when it did (a sticky search out of budget, or at a commit it could not
    place on either side)."""

    result: SearchResult
    strategy: str
    posterior: float | None = None
    unfinished: str | None = None
    stuck: int | None = None  # a position the search could not place (fits neither side)


@dataclass(frozen=True)
class ChangePoint:
    """A boundary the search found that was not the first departure: its parent departs from
    the reference too. `culprit` is its position; the verdicts are the two re-tests."""

    position: int
    parent: CommitVerdict
    culprit: CommitVerdict


@dataclass(frozen=True)
class Stop:
    """Why a bisect stopped before its answer: which limit of this invocation (`max-builds` or
    `deadline`) and what it says."""

    by: str
    reason: str


@dataclass(frozen=True)
class Departure:
    """The outcome of searching for the first departure: status and message, the last search,
    the change points crossed on the way (latest first), the strategies used."""

    status: BisectStatus
    message: str
    found: Found
    crossed: list[ChangePoint]
    strategies: list[str]
    stop: Stop | None = None  # status stopped: which limit, and why


def plan_level(n: int, confidence: float, scan: bool = False) -> float:
    """The per-verdict level of a bisect over n commits (a scan tests up to every one of them)."""
    return stats.scan_level(n, confidence) if scan else stats.step_level(n, confidence)


def steps_estimate(n: int) -> int:
    """How many search steps plain bisection needs over n commits (both ends known)."""
    return max(1, math.ceil(math.log2(max(n - 1, 2))))
