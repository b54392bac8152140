"""Search policy (pure): which test each search step uses, chosen by its expected wall time.

A step can be tested two ways:

* **reference**: the generic test against the reference. Its GOOD means "within tolerance of
  the reference", so the search can never be sent the wrong way by a commit that merely differs
  from the broken end. A GOOD costs as many runs as the working end's own test needed (the same
  test at the same level): ~600 for #29975's reference, ~2,000 for the demo's — unless the
  commit prints what a commit tested before prints, seed for seed (steps run on the working
  end's seeds): then ~120 runs place it beside that commit.
* **plain** (quick): BAD against the reference as above, or GOOD-SIDE once the commit is shown
  unlike the broken end (a few runs for a gross bug). Cheap, but a commit carrying a milder or
  different form of the defect looks unlike the broken end too: the search then ends at a later
  boundary, the confirmation finds its parent departing, and the search walks back (more builds).

Which is cheaper depends on what a build costs against a run, measured in the state directory
(`UnitCosts`), and on how often a range holds such a third distribution (`THIRD`, an assumption
stated in the report). For llama.cpp (a build ~75 s, a run ~0.04 s) reference steps win; for the
demo (a build ~0.4 s, a run ~2 ms, a GOOD ~2,000 runs) quick steps do. Before anything is
measured the default costs are llama.cpp-like, which picks reference steps: the conservative
choice (a wrong quick step costs builds, a reference step only runs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from bisectbot.core import broken_end
from bisectbot.statistics import stats, two_sample

# How often a range holds a distribution between the reference and the broken end's that a quick
# step would put on the wrong side (a defect that entered mild, another defect before it). An
# assumption, not a measurement: #29975's real history had one (June–October 2024), and a bug
# that enters mild and gets worse later is common. After a confirmation has found one, it is 1.
THIRD = 0.5
# Before this state directory has measured anything: llama.cpp's figures (a conservative choice).
DEFAULT_BUILD_SECONDS = 75.0
DEFAULT_RUN_SECONDS = 0.04
# A build at least this long makes the broken end worth testing last (`broken_end_last`).
BROKEN_LAST_MIN_BUILD_SECONDS = 20.0
CHANGE_PENALTY_NATS = 3.0  # what the change test's mixtures cost, in nats, on top of log(1/alpha)
# What each strategy's steps are, in a clause: said where a forecast names them (Choice.text, reports)
STEP_WORDS = {
    "reference": "each a GOOD or BAD test against the reference",
    "plain": "quick steps, placing a commit GOOD-SIDE (no test against the reference) once it is shown "
    "unlike the bad end",
    "sticky": "a Bayesian bisection, placing commits by its posterior",
}
# What a misplaced quick step is, and what it costs
MISPLACED = (
    "a milder defect, unlike the bad end yet not the reference, misplaces a quick step and the search walks back"
)


@dataclass(frozen=True)
class UnitCosts:
    """Seconds per build and wall seconds per run (runs at once accounted for), and what they
    rest on (`builds`/`runs` measured; 0 for the defaults)."""

    build: float
    run: float
    builds: int = 0
    runs: int = 0

    @property
    def measured(self) -> bool:
        return self.builds > 0 and self.runs > 0

    def seconds(self, builds: float, runs: float) -> float:
        return builds * self.build + runs * self.run

    def text(self) -> str:
        where = (
            f"measured in this state directory: {self.builds:,} builds, {self.runs:,} runs"
            if self.measured
            else "defaults: nothing measured yet"
        )
        return f"a build ~{_dur(self.build)}, a run ~{self.run:.3g} s ({where})"


DEFAULT_COSTS = UnitCosts(DEFAULT_BUILD_SECONDS, DEFAULT_RUN_SECONDS)


def unit_costs(build_seconds: Sequence[float], run_seconds: Sequence[float], at_once: int) -> UnitCosts:
    """Median seconds of the builds and runs a state directory has seen, a run's divided by the
    runs at once; a part never measured takes its default."""
    build = float(np.median(build_seconds)) if len(build_seconds) else DEFAULT_BUILD_SECONDS
    run = float(np.median(run_seconds)) / max(1, at_once) if len(run_seconds) else DEFAULT_RUN_SECONDS
    return UnitCosts(max(build, 1e-3), max(run, 1e-5), len(build_seconds), len(run_seconds))


@dataclass(frozen=True)
class Forecast:
    """Expected builds, runs and wall seconds of the rest of a bisect with one strategy."""

    strategy: str
    builds: float
    runs: float
    seconds: float

    def text(self) -> str:
        return f"~{self.builds:.0f} builds + ~{self.runs:,.0f} runs ≈ {_dur(self.seconds)}"


@dataclass(frozen=True)
class Situation:
    """What the choice knows once the ends are tested."""

    commits: int  # positions left to search, ends included
    good_runs: float  # runs the working end's GOOD took (a reference step's GOOD costs as much)
    bad_runs: float  # runs the broken end's BAD took
    quick_runs: float  # runs a quick step needs to show a reference-like commit unlike the broken end
    model_runs: float  # extra runs the quick steps' model of the broken end needs
    change_runs: float  # runs of the change test at the named commit and its parent
    third: float = THIRD  # probability that a quick step is misplaced somewhere in the range
    alike_runs: float = 120.0  # runs that place a commit beside one that prints the same (two_sample.log_e_alike)


@dataclass(frozen=True)
class Choice:
    strategy: str
    forecasts: tuple[Forecast, ...]
    costs: UnitCosts
    situation: Situation
    why: str = ""

    def forecast(self, strategy: str | None = None) -> Forecast | None:
        """The forecast of `strategy` (the chosen one by default); None for one never
        forecast (sticky)."""
        name = strategy or self.strategy
        return next((f for f in self.forecasts if f.strategy == name), None)

    def text(self) -> str:
        """'reference steps (each a test against the reference …): ~11 builds + ~3,900 runs ≈ 15
        min (plain: quick steps, …: … ≈ 19 min, assuming 50% of ranges where a milder defect …);
        a build ~75 s, a run ~0.024 s (measured …)': each strategy's steps said in a clause."""
        chosen = self.forecast()
        if chosen is None:
            return f"{self.strategy} steps ({self.why}); {self.costs.text()}"
        others = "; ".join(
            f"{f.strategy}: {STEP_WORDS.get(f.strategy, 'its steps')}: {f.text()}"
            for f in self.forecasts
            if f.strategy != self.strategy
        )
        why = f", {self.why}" if self.why else ""
        third = self.situation.third
        assumed = (
            f", assuming {third:.0%} of ranges where {MISPLACED}"
            if 0 < third < 1
            else f", as a confirmation here found: {MISPLACED}"
            if third >= 1
            else ""
        )
        words = f" ({STEP_WORDS[self.strategy]})" if self.strategy in STEP_WORDS else ""
        return (
            f"{self.strategy} steps{words}{why}: {chosen.text()}"
            + (f" ({others}{assumed})" if others else "")
            + f"; {self.costs.text()}; a GOOD ~{self.situation.good_runs:,.0f} runs, "
            f"a BAD ~{self.situation.bad_runs:,.0f}"
        )


def search_steps(commits: int) -> int:
    """Steps of a plain bisection over `commits` positions whose ends are known."""
    return math.ceil(math.log2(commits - 1)) if commits > 2 else 0


def forecast(strategy: str, s: Situation, costs: UnitCosts) -> Forecast:
    """Expected builds and runs from here to the answer.

    Every commit is tested on the same seeds, so a commit that prints what an end (or a commit
    tested before) prints is placed beside it after `alike_runs` runs; the forecast assumes so,
    with one whole BAD test per search for a distribution no end has. The confirmation runs the
    named commit and its parent on fresh seeds until the parent passes the reference test and
    the change test decides (both run the same runs).
    reference: every step a test against the reference, or a placement beside a tested commit.
    plain: quick steps after a model of the broken end; with probability `third` one was
    misplaced, the parent departs, and the search walks back over about half the range with
    reference steps and confirms again."""
    steps = search_steps(s.commits)
    confirmation = 2 * max(s.good_runs, s.change_runs / 2)
    if strategy == "reference":
        builds, runs = float(steps), steps * s.alike_runs + s.bad_runs + confirmation
    elif strategy == "plain":
        walk_back = steps / 2 * s.alike_runs + s.bad_runs + confirmation
        builds = steps + s.third * steps / 2
        runs = s.model_runs + steps / 2 * (s.quick_runs + s.bad_runs) + confirmation + s.third * walk_back
    else:
        raise ValueError(f"no forecast for strategy {strategy!r}")
    return Forecast(strategy, builds, runs, costs.seconds(builds, runs))


def choose(
    s: Situation, costs: UnitCosts, allowed: Sequence[str] = ("reference", "plain"), *, only: bool = False
) -> Choice:
    """The strategy of least expected wall time among `allowed` (ties: reference); `only`:
    forecast the allowed ones alone (the others cannot be used at all)."""
    names = [n for n in ("reference", "plain") if not only or n in allowed]
    forecasts = tuple(forecast(name, s, costs) for name in names)
    best = min((f for f in forecasts if f.strategy in allowed), key=lambda f: (f.seconds, f.strategy != "reference"))
    return Choice(best.strategy, forecasts, costs, s, "least expected time" if len(allowed) > 1 else "as asked")


def situation(
    commits: int,
    ref: stats.Reference,
    *,
    eta: float,
    good_runs: float,
    bad_counts: Sequence[int],
    level: float,
    max_runs: int,
    model_budget: int,
    third: float = THIRD,
) -> Situation:
    """The figures a choice needs, from the ends' tests: the working end's GOOD took
    `good_runs`, the broken end's BAD `bad_counts` (its smoothed distribution q̂ prices the
    quick step, the model stage and the change test)."""
    bad = np.array(bad_counts, dtype=float)
    q = np.array(stats.kt_smooth([float(x) for x in bad]), dtype=float)
    p = np.array(ref.tolerant(eta) if eta > 0 else stats.kt_smooth([x * 1e4 for x in ref.estimate]), dtype=float)
    log_level = math.log(1 / level)
    sep = max(stats.kl(p, q), 1e-6)
    quick = min(max_runs, (log_level + math.log(1 / (1 - broken_end.UNLIKE_WEIGHT))) / sep + 1)
    used = int(((bad > 0) | (p > 0)).sum())
    need_model = max(
        broken_end.BAD_ENDPOINT_MIN_RUNS,
        broken_end.BAD_ENDPOINT_NATS_PER_DF * max(used - 1, 1) / max(stats.kl(q, p), 1e-6),
    )
    model = max(0.0, min(model_budget, need_model) - float(bad.sum()))
    mid = (p + q) / 2
    js2 = max(stats.kl(p, mid) + stats.kl(q, mid), 1e-6)  # 2·JS: what one pair of runs tells apart
    change = min(2 * max_runs, 2 * (log_level + CHANGE_PENALTY_NATS) / js2)
    per_seed = math.log((1 - two_sample.ALIKE_DELTA / 4) / (1 - two_sample.ALIKE_DELTA))
    alike = min(float(max_runs), math.log(1 / two_sample.STEER_LEVEL) / per_seed + 1)
    return Situation(commits, float(good_runs), float(max(bad.sum(), 1)), quick, model, change, third, alike)


def numeric_situation(commits: int, *, good_runs: float, bad_runs: float, max_runs: int) -> Situation:
    """The figures a choice needs for a numeric statistic: only reference steps exist (quick
    steps compare distributions), the change test costs about two GOOD tests' runs."""
    per_seed = math.log((1 - two_sample.ALIKE_DELTA / 4) / (1 - two_sample.ALIKE_DELTA))
    alike = min(float(max_runs), math.log(1 / two_sample.STEER_LEVEL) / per_seed + 1)
    change = min(2.0 * max_runs, 2.0 * max(good_runs, bad_runs))
    return Situation(commits, float(good_runs), float(max(bad_runs, 1)), float(max_runs), 0.0, change, 0.0, alike)


def gross_guess(ref: stats.Reference) -> list[int]:
    """Counts standing for a broken end not tested yet (tested last): every run the reference's
    least likely outcome, a gross defect, the case most favourable to quick steps (so a choice of
    reference steps made with it holds for any broken end)."""
    rare = int(np.argmin(np.asarray(ref.estimate, dtype=float)))
    return [100 if i == rare else 0 for i in range(len(ref.names))]


def broken_end_last(build_seconds: float) -> bool:
    """Test the broken end only when the answer rests on it, not before the search?

    With reference steps (every step a test against the reference) the answer never rests on
    the broken end unless the search ends next to it: a named commit is shown to depart by its
    own test, its parent to pass by its own, and the two to differ. Testing the broken end first
    buys an early error when it does not reproduce, at the price of its build on every bisect
    (one build of ~⌈log2 N⌉ + 2, a cold one: 3 min for a 2025 llama.cpp tree). Worth paying
    when builds are cheap (the early error costs nothing); not when a build, measured on the
    working end, takes `BROKEN_LAST_MIN_BUILD_SECONDS` or more: then the broken end is tested
    when the search reaches it (its "does not test as given" error comes at the end) and its
    compile inputs, which the narrowing needs, are scanned without building (a few per cent
    of a build)."""
    return build_seconds >= BROKEN_LAST_MIN_BUILD_SECONDS


def _dur(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.3g} s" if seconds < 10 else f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
