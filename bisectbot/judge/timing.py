"""Timed runs (statistic.kind time): each run of a tested commit beside a run of the control made
right before or after it, so that what the machine is doing meanwhile touches both alike.

A pair is two runs on one seed, one at a time, in alternating order (control then tested, then
tested then control: ABBA, so a steady drift cancels within two pairs). A pair is stored in one
transaction under a key naming both commits and programs, apart from ordinary runs (a timing is
never replayed beside another commit's), the control's run at seed −1 − s, so a resumed bisect
reads the pairs it made instead of timing them again. Whenever a
stream starts timing (not replaying), it first runs `warmup` pairs it keeps no record of: the
first runs after a build or an idle spell are slower (cold caches, a CPU ramping up).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Iterator, Sequence

from bisectbot.judge.runner import CommitRunner, Prepared
from bisectbot.records.commits import RunRecord
from bisectbot.records.keys import json_key


class TimedPairs:
    """One commit's timed runs over `seeds`, each with its control run: `for tested, control in
    pairs`. `executed` counts the runs of the tested commit this stream made (warm-up included)."""

    def __init__(self, runner: CommitRunner, tested: Prepared, control: Prepared, seeds: Sequence[int], warmup: int):
        assert tested.executor is not None and control.executor is not None, "both must be runnable"
        self.runner, self.tested, self.control = runner, tested, control
        self.seeds, self.warmup = list(seeds), warmup
        self.key = json_key(
            {"timed": tested.run_key, "sha": tested.sha, "control": control.run_key, "control_sha": control.sha}, 24
        )
        self._stored = runner.state.store.runs(self.key, tested.sha)
        self._warmed = False
        self.executed = 0

    def __iter__(self) -> Iterator[tuple[RunRecord, RunRecord]]:
        for i, seed in enumerate(self.seeds):
            self.runner.events.check()
            mine, theirs = self._stored.get(seed), self._stored.get(-1 - seed)
            if theirs is not None:
                theirs = replace(theirs, seed=seed)
            if mine is None or theirs is None:
                if not self._warmed:
                    self._warm(seed)
                mine, theirs = self._time(seed, tested_first=i % 2 == 1)
            yield mine, theirs

    def _time(self, seed: int, *, tested_first: bool) -> tuple[RunRecord, RunRecord]:
        """One pair on `seed`, in the given order, stored at once (a killed job keeps it)."""
        assert self.tested.executor is not None and self.control.executor is not None
        first, second = (self.tested, self.control) if tested_first else (self.control, self.tested)
        assert first.executor is not None and second.executor is not None
        a = first.executor.run(seed)
        b = second.executor.run(seed)
        mine, theirs = (a, b) if tested_first else (b, a)
        self.runner.state.store.put_runs(self.key, self.tested.sha, [mine, replace(theirs, seed=-1 - seed)])
        self.executed += 1
        return mine, theirs

    def _warm(self, seed: int) -> None:
        """`warmup` pairs on `seed`, timed and thrown away, before the first pair this stream times."""
        assert self.tested.executor is not None and self.control.executor is not None
        for k in range(self.warmup):
            first, second = (self.control, self.tested) if k % 2 == 0 else (self.tested, self.control)
            assert first.executor is not None and second.executor is not None
            first.executor.run(seed)
            second.executor.run(seed)
            self.executed += 1
        self._warmed = True

    def close(self) -> None:
        for side in (self.tested, self.control):
            if side.executor is not None:
                side.executor.close()


class TimedStream:
    """`TimedPairs` as a commit's stream of runs (judge.verdict reads a run stream): each tested
    run handed out after `on_control` was told its control run, which the test pairs it with."""

    def __init__(self, pairs: TimedPairs, on_control: Callable[[int, RunRecord], None]):
        self.pairs, self.on_control = pairs, on_control
        self._it = iter(pairs)

    def __iter__(self) -> "TimedStream":
        return self

    def __next__(self) -> RunRecord:
        mine, theirs = next(self._it)
        self.on_control(mine.seed, theirs)
        return mine

    @property
    def executed(self) -> int:
        return self.pairs.executed

    def __enter__(self) -> "TimedStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.pairs.close()
