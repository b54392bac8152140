"""How many runs at once: the throttle settles where complete runs per second are highest, by
simulation with fixed seeds (cut rates and slowdowns like llama-speculative's on 2 cores), and
the sweep keeps that many in flight."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

import pytest

from bisectbot.judge.parallel import LevelStats, Throttle
from bisectbot.judge.sweep import RunStream
from bisectbot.records.commits import RunRecord


def simulate(most: int, machine: dict[int, tuple[float, float]], runs: int, seed: int) -> Counter[int]:
    """Feed a throttle runs whose cut chance and attempt time depend on its level; how many
    runs finished at each level."""
    rng = random.Random(seed)
    th = Throttle(most)
    at: Counter[int] = Counter()
    for _ in range(runs):
        cut_p, seconds = machine[th.level]
        attempts = 1
        while rng.random() < cut_p and attempts < 11:
            attempts += 1
        at[th.level] += 1
        th.observe(attempts, attempts - 1, attempts * seconds * rng.uniform(0.8, 1.2))
    return at


# (cut chance per attempt, seconds per attempt) at each level
LLAMA_2_CORES = {1: (0.0, 1.0), 2: (0.025, 1.1)}  # the measurement: 195/200 at 2
OVERLOADED = {1: (0.0, 1.0), 2: (0.03, 1.1), 3: (0.35, 1.6), 4: (0.64, 2.2)}  # 109/300 at 4
CUT_ALONE = {1: (0.6, 1.0), 2: (0.6, 1.05)}  # cut as often alone: parallel still pays
CONTENDED = {1: (0.05, 1.0), 2: (0.7, 1.9)}  # two at once mostly cut: one at a time


@pytest.mark.parametrize(
    "most, machine, best", [(2, LLAMA_2_CORES, 2), (4, OVERLOADED, 2), (2, CUT_ALONE, 2), (2, CONTENDED, 1)]
)
def test_the_throttle_settles_on_the_level_with_the_most_complete_runs_per_second(
    most: int, machine: dict[int, tuple[float, float]], best: int
) -> None:
    for seed in range(5):
        at = simulate(most, machine, 4000, seed)
        assert at[best] >= 0.75 * 4000, (seed, at)


def test_nothing_cut_means_no_backing_off() -> None:
    at = simulate(4, {k: (0.0, 1.0 + 0.1 * k) for k in range(1, 5)}, 2000, 0)
    assert at == Counter({4: 2000})


def test_goodput_counts_cut_attempts_and_the_slowdown() -> None:
    s = LevelStats(attempts=100, cut=20, seconds=200.0)
    assert s.cut_share == 0.2 and s.goodput(2) == pytest.approx(2 * 0.8 / 2.0)
    assert LevelStats().goodput(3) == 0.0


class Contended:
    """A program whose output is cut while more than one run is in flight (always, here)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.inflight = 0
        self.most_inflight = 0

    def run(self, seed: int) -> RunRecord:
        with self.lock:
            self.inflight += 1
            self.most_inflight = max(self.most_inflight, self.inflight)
            sharing = self.inflight
        time.sleep(0.002)
        with self.lock:
            self.inflight -= 1
        attempts = 4 if sharing > 1 else 1  # three reruns of cut output before a complete one
        # as it would take on one core shared by `sharing` runs
        return RunRecord(seed, "ok", ("a",), 0, 0.002 * attempts * sharing, attempts)

    def close(self) -> None:
        pass


def test_the_sweep_follows_the_throttle() -> None:
    prog = Contended()
    th = Throttle(4, window=20, hold=1000)
    stored: list[RunRecord] = []
    with RunStream(range(1, 601), {}, prog, stored.extend, jobs=th) as stream:
        got = [r.seed for r in stream]
    assert got == list(range(1, 601))  # in seed order, every seed once
    assert th.level == 1 and prog.most_inflight > 1  # it tried more at once, and backed off
    assert [lvl for lvl, *_ in th.history][:3] == [4, 3, 2]


def test_once_settled_measuring_costs_little() -> None:
    """The hold doubles each time the same level wins again: over a long sweep almost every run
    is at the best level (measuring one level down costs throughput)."""
    for seed in range(3):
        at = simulate(2, LLAMA_2_CORES, 20000, seed)
        assert at[2] >= 0.95 * 20000, at


def test_a_level_that_wins_by_far_is_not_measured_against_again_soon() -> None:
    """Two at once nearly twice one at a time (llama.cpp on 2 cores): after the first
    comparison the throttle holds two for `longest` windows, so one at a time gets one probe
    (20 attempts) of 4,000 runs, not one every few hundred; a close race is still measured again."""
    for seed in range(3):
        at = simulate(2, LLAMA_2_CORES, 4000, seed)
        assert at[1] <= 20 + 5, (seed, at)  # one probe of one at a time: 20 attempts
    close = {1: (0.0, 1.0), 2: (0.3, 1.3)}  # 2 at once: 1.08 the goodput of one
    th = Throttle(2)
    rng = random.Random(5)
    for _ in range(4000):
        cut_p, seconds = close[th.level]
        attempts = 2 if rng.random() < cut_p else 1
        th.observe(attempts, attempts - 1, attempts * seconds)
    assert sum(1 for lvl, *_ in th.history if lvl == 1) >= 4  # measured again and again


def test_a_hold_that_still_wins_by_far_is_extended_without_measuring_again() -> None:
    """The first window of a commit's runs is slow (a fresh binary, cold caches): two at once
    then seems only 1.4 times one at a time, so the hold is short; but its windows show two at
    once far ahead of what one at a time did, so the hold is extended instead of spending
    another window one at a time (each costs ~0.3 s on llama.cpp)."""
    th = Throttle(2)
    rng = random.Random(3)
    for i in range(4000):
        cut_p, seconds = LLAMA_2_CORES[th.level]
        if i < 40:
            seconds *= 1.35  # the slow start
        attempts = 2 if rng.random() < cut_p else 1
        th.observe(attempts, attempts - 1, attempts * seconds * rng.uniform(0.9, 1.1))
    ones = [lvl for lvl, *_ in th.history].count(1)
    assert ones == 1, th.history
    # and when the held level's windows fall behind (from run 120 on, two at once cut and slow),
    # one at a time is measured again, and wins
    th = Throttle(2)
    for i in range(2000):
        cut_p, seconds = (0.0, 1.0) if th.level == 1 else ((0.025, 1.5) if i < 40 else (0.025, 1.1))
        if th.level == 2 and i >= 120:
            cut_p, seconds = 0.3, 1.8
        attempts = 2 if rng.random() < cut_p else 1
        th.observe(attempts, attempts - 1, attempts * seconds)
    assert [lvl for lvl, *_ in th.history].count(1) >= 2 and th.level == 1
