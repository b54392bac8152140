"""Estimates and durations (pure): what a bisect will cost, told before it starts.

A bisect of N commits builds about ⌈log2 N⌉ commits for the search plus its two ends, and runs
each tested commit until its sequential test decides. How long that takes depends on the
project: the state directory's own history (build seconds, runs per tested commit, seconds per
run) is the only honest source, so the estimate says what it rests on, and says so when the
state has seen nothing yet instead of inventing a number.

`parse_duration` reads `--deadline` values ("90m", "2h", "1h30m", "45s", "3600").
"""

from __future__ import annotations

import math
import re
import statistics
from dataclasses import dataclass

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)([smhd])")


def parse_duration(text: str) -> float:
    """Seconds from '90m', '2h', '1h30m', '45s', '1.5h' or plain seconds ('3600');
    ValueError naming the text when it is none of those or not positive."""
    value = text.strip().lower()
    try:
        seconds = float(value)
    except ValueError:
        parts = _PART.findall(value)
        if not parts or "".join(n + u for n, u in parts) != value:
            raise ValueError(f"{text!r} is not a duration (e.g. 90m, 2h, 1h30m, 45s or seconds)") from None
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if not math.isfinite(seconds) or seconds <= 0:
        raise ValueError(f"{text!r} is not a positive duration")
    return seconds


def format_duration(seconds: float) -> str:
    """'40 s', '12 min', '2.5 h': rounded as an estimate deserves."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def search_builds(commits: int) -> int:
    """Builds a plain bisect of `commits` commits (ends included) needs: ⌈log2(commits − 1)⌉
    search steps plus the two ends."""
    return max(1, math.ceil(math.log2(max(commits - 1, 2)))) + 2


@dataclass(frozen=True)
class Timings:
    """What a state directory has seen: seconds of its successful builds, runs stored per
    tested commit (per commit and run key) and seconds per run (the latest ones, at most a few
    thousand of each)."""

    build_seconds: tuple[float, ...] = ()
    runs_per_commit: tuple[int, ...] = ()
    run_seconds: tuple[float, ...] = ()

    @property
    def empty(self) -> bool:
        return not self.build_seconds and not self.run_seconds


@dataclass(frozen=True)
class Estimate:
    """The cost of a bisect, up front: builds from the range, time from the state's history
    (None when it has none)."""

    commits: int
    builds: int
    stored: int  # of those commits, builds the state already has
    tests: int  # commit tests: every build, plus the re-tests of culprit and parent
    parallel: int  # runs at once
    median_build: float | None
    runs_per_commit: float | None
    median_run: float | None
    seconds: float | None

    def text(self) -> str:
        """'estimate: ~9 builds (⌈log2 1,571⌉ + 2 ends), ~40 min from what this state has seen
        (median build 2.1 min, 300 runs/commit at 0.40 s, 2 at once)'."""
        stored = f", {self.stored} already built" if self.stored else ""
        head = f"estimate: ~{self.builds} builds (⌈log2 {max(self.commits - 1, 2):,}⌉ + 2 ends{stored})"
        if self.seconds is None:
            return f"{head}; no timings yet in this state directory (the first bisect here sets them)"
        parts = []
        if self.median_build is not None:
            parts.append(f"median build {format_duration(self.median_build)}")
        if self.runs_per_commit is not None and self.median_run is not None:
            at_once = f", {self.parallel} at once" if self.parallel > 1 else ""
            parts.append(f"{self.runs_per_commit:,.0f} runs/commit at {self.median_run:.2f} s{at_once}")
        return f"{head}, ~{format_duration(self.seconds)} from what this state has seen ({'; '.join(parts)})"


def estimate(commits: int, timings: Timings, *, parallel: int = 1, stored: int = 0) -> Estimate:
    """The cost of bisecting `commits` commits (ends included) with what `timings` saw.

    Time = builds still to make × median build + tests × runs per commit × median run ÷ runs at
    once. A part the state has no timing for counts as zero and is left out of the text; with
    neither, no time is given."""
    builds = min(search_builds(commits), commits)
    tests = builds + 2
    parallel = max(1, parallel)
    median_build = statistics.median(timings.build_seconds) if timings.build_seconds else None
    rpc = statistics.mean(timings.runs_per_commit) if timings.runs_per_commit else None
    median_run = statistics.median(timings.run_seconds) if timings.run_seconds else None
    if timings.empty:
        seconds = None
    else:
        seconds = max(0, builds - stored) * (median_build or 0.0)
        if rpc is not None and median_run is not None:
            seconds += tests * rpc * median_run / parallel
    return Estimate(commits, builds, min(stored, builds), tests, parallel, median_build, rpc, median_run, seconds)
