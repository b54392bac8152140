"""Numeric statistics in the pipeline: a run's number, the control's on the same seed, one test.

`Numbers` reads each run's number (the token at `statistic.outcome`, or the run's wall time),
holds the control's numbers for a reference like the good end (run on the common seeds, grown
as tests need, as `reference.GrowingControl` does for outcomes), and starts one
`statistics.means.MeanTest` per verdict (`NumberTest`), which the tester feeds run by run.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace
from typing import Sequence

from bisectbot.config import Config
from bisectbot.config.seeds import SEED_BLOCK
from bisectbot.judge.parse import mismatch, observe
from bisectbot.judge.reference import ResolvedReference, control_cap, control_runs, control_source, number_spec
from bisectbot.judge.runner import CommitRunner
from bisectbot.records.commits import Ask, CommitVerdict, RunRecord
from bisectbot.records.reports import NumericReference, ReferenceSummary
from bisectbot.statistics import means, stats
from bisectbot.statistics.outcome import Verdict


def reading(rec: RunRecord, cfg: Config) -> float | str | None:
    """A run's number, or why it has none (the run's output quoted, as for any unreadable run):
    the token at the statistic's position read as a finite number, within `statistic.bounds`
    when given; for kind time without an outcome, the run's wall time. None: the run printed
    `nan` or `inf` there, a number it could not compute (llama-speculative's `accept = -nan%`
    when it drafted nothing): no observation, as a run that misses a condition, not a failure."""
    stat = cfg.statistic
    if stat.wall_time:
        return rec.seconds
    obs = observe(rec.tokens or (), stat)
    text = obs.outcome
    shown = " ".join(rec.tokens or ())
    if text is None:
        return mismatch(shown, f"statistic.outcome.position {stat.position}: no token there")
    try:
        value = float(text)
    except ValueError:
        return mismatch(shown, f"statistic.kind {stat.kind}: {text[:40]!r} is not a number")
    if not math.isfinite(value):
        return None
    if stat.bounds is not None and not stat.bounds[0] <= value <= stat.bounds[1]:
        lo, hi = stat.bounds
        return mismatch(shown, f"statistic.bounds [{lo:g}, {hi:g}]: {value:g} is outside")
    if stat.kind == "time" and value <= 0:
        return mismatch(shown, f"statistic.kind time: {value:g} is not a positive number")
    return value


class Numbers:
    """The numeric statistic of one job: how runs are read, the test each verdict runs, and the
    control's numbers on the common seeds (grown as tests need them) when the reference is a
    control sample."""

    GROWTH = 0.1  # of its size, at least
    BATCH = 256  # runs, at least

    def __init__(self, cfg: Config, runner: CommitRunner, resolved: ResolvedReference):
        self.cfg, self.runner, self.resolved = cfg, runner, resolved
        control = cfg.reference.control
        self.sha = runner.workspace.resolve(control.commit) if control is not None else None
        self.cap = control_cap(cfg) if control is not None else 0
        self.values: list[float | None] = [self._number(o) for o in resolved.outcomes]
        self.common: dict[int, int] = (
            {seed: i for i, seed in enumerate(runner.seed_block(self.sha, 0, SEED_BLOCK))} if self.sha else {}
        )
        self.fresh: dict[int, float | None] = {}
        self.spec = number_spec(cfg, resolved)
        self.timed = cfg.statistic.kind == "time"
        self.pending: dict[int, float | None] = {}  # kind time: the control's run beside the run to come
        self.timed_control: list[float] = []  # kind time: every control number timed so far

    @property
    def paired(self) -> bool:
        return self.sha is not None

    def _number(self, outcome: str | None) -> float | None:
        if outcome is None or outcome in (stats.OTHER, stats.MISSED, stats.FAILED):
            return None
        try:
            value = float(outcome)
        except ValueError:
            return None
        return value if math.isfinite(value) else None

    def start(self, ask: Ask, seeds: Sequence[int] = ()) -> "NumberTest":
        """A fresh test of one commit (its runs in `seeds` order), at the ask's levels."""
        return NumberTest(self, self.spec.test(min(ask.alpha / 2, ask.beta)), list(seeds))

    def beside(self, seed: int, rec: RunRecord) -> None:
        """Kind time: the control's run timed beside the tested run on `seed` (judge.timing)."""
        value = reading(rec, self.cfg) if rec.ok else None
        number = value if isinstance(value, float) else None  # the pair counts only with both numbers
        self.pending[seed] = number
        if number is not None:
            self.timed_control.append(number)

    def partner(self, seed: int, ahead: Sequence[int]) -> float | None | bool:
        """The control's number on `seed` (None: its run failed), running the control there
        first when needed; False when the control may not grow that far (its cap). Kind time:
        the control's run timed beside this one."""
        if self.timed:
            return self.pending.pop(seed, None)
        index = self.common.get(seed)
        if index is not None:
            if index >= self.cap:
                return False
            if index >= len(self.values):
                self._grow(index + 1)
            return self.values[index]
        if seed not in self.fresh:
            assert self.sha is not None
            batch = [seed] + [s for s in ahead if s != seed and s not in self.fresh and s not in self.common][:31]
            outcomes = control_runs(self.cfg, self.runner, self.sha, batch, len(self.values) + len(self.fresh), True)
            self.fresh.update(zip(batch, (self._number(o) for o in outcomes)))
        return self.fresh[seed]

    def _grow(self, need: int) -> None:
        assert self.sha is not None
        size = len(self.values)
        target = min(self.cap, max(need, size + self.BATCH, int(size * (1 + self.GROWTH))))
        seeds = self.runner.seed_block(self.sha, 0, target)[size:]
        self.values += [self._number(o) for o in control_runs(self.cfg, self.runner, self.sha, seeds, size)]

    def control_numbers(self) -> list[float]:
        """Every number the control gave so far (common and fresh seeds; timed beside runs)."""
        return [v for v in [*self.values, *self.fresh.values()] if v is not None] + self.timed_control

    def extra_runs(self, verdicts: Sequence[CommitVerdict]) -> int:
        """Control runs no verdict counts among its own (the report's `control_runs`): all of
        them, less those the control commit's own tests on the common seeds read."""
        if self.sha is None:
            return 0
        if self.timed:
            return len(self.timed_control)
        read = max(
            (
                v.runs
                for v in verdicts
                if v.sha == self.sha and v.arm == "main" and v.seeds and self.common.get(v.seeds[0]) == 0
            ),
            default=0,
        )
        return max(0, len(self.values) - read) + len(self.fresh)

    def reference(self) -> NumericReference:
        """What the tests judge against, as reports show it (the control's numbers so far)."""
        numeric = self.grown(self.resolved.summary(self.cfg)).numeric
        assert numeric is not None
        return numeric

    def grown(self, summary: ReferenceSummary) -> ReferenceSummary:
        """`summary` with the control's numbers as they ended (their mean, how many)."""
        if self.sha is None or summary.numeric is None:
            return summary
        numbers = self.control_numbers()
        control = self.cfg.reference.control
        assert control is not None
        numeric = dict(summary.numeric, mean=statistics.fmean(numbers) if numbers else None)
        return replace(
            summary,
            source=control_source(len(numbers), self.sha, control.good_end, grown=True),
            numeric=NumericReference(**numeric),  # type: ignore[typeddict-item]
        )


class NumberTest:
    """One commit's numeric test as its runs come: each number paired with the control's on the
    same seed (a paired scale), or taken alone (an exact reference)."""

    def __init__(self, numbers: Numbers, test: means.MeanTest, seeds: list[int]):
        self.numbers, self.test, self.seeds, self.capped = numbers, test, seeds, False
        self._at = {seed: i for i, seed in enumerate(seeds)}

    def add(self, value: float, seed: int) -> None:
        if self.capped:
            return
        if not self.numbers.paired:
            self.test.add(value)
            return
        at = self._at.get(seed, len(self.seeds))
        partner = self.numbers.partner(seed, self.seeds[at + 1 : at + 32])
        if partner is False:
            self.capped = True
        elif partner is not None:  # a pair whose control run failed is left out
            self.test.add(value, float(partner))

    def evidence(self, ask: Ask, budget: int) -> stats.Evidence:
        if self.capped:
            return stats.Evidence(
                Verdict.INCONCLUSIVE,
                self.test.n,
                self.test.log_e_bad,
                self.test.log_e_good,
                f"undecided after {self.test.n} runs: the control reached its cap of {self.numbers.cap:,} runs "
                "(raise run.max_runs or reference.control.max_runs)",
            )
        return self.test.evidence(alpha=ask.alpha, beta=ask.beta, max_runs=budget, what=what(self.numbers.spec))


def what(spec: means.Spec) -> str:
    """How a reason line names θ."""
    return {
        "mean": "mean",
        "difference": "mean − control's",
        "ratio": "mean / control's",
        "median-ratio": "log of a pair's time ratio, median",
    }[spec.scale.kind]
