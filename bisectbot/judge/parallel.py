"""How many runs at once (pure): start at the most, back off when cut output costs more than it gains.

Why not simply the core count: llama.cpp's logger is a leaked singleton whose thread is not
flushed before `main` returns, so the end of stdout is lost at exit, more often when the CPU is
contended (0.3.36 on an idle 2-core machine: 1 at a time 200/200 complete, 2 at a time 195/200,
4 at a time 109/300). A cut run is rerun with the same seed and never counted (judge.sweep),
so running more at once pays only while the reruns it causes cost less than the runs it adds.

The measure is goodput: complete runs per second of wall time, estimated per level k from the
runs finished at that level as k · (1 − cut share of attempts) / mean attempt duration (the
duration includes the slowdown of sharing the cores). The throttle measures its level over a
window of attempts (a neighbour it only probes, over half as many: a worse level costs
throughput while it is measured); while nothing is cut it stays where it is (reruns cost nothing); once
output is cut it measures the neighbouring levels too, settles on the best, holds it for a few
windows and then measures again (the machine's load changes) unless the windows of the hold
still beat the neighbours' last measurement by far (`clear`: the load has not turned against
it); each time the same level wins again it holds twice as long (up to `longest` windows), so
measuring costs little once settled;
a level that wins by far (`clear`: 1.5 times the runner-up's goodput; on 2 cores llama.cpp two
at once did 95 complete runs a second, one at a time 52) is held `longest` windows at once.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class LevelStats:
    attempts: int = 0
    cut: int = 0
    seconds: float = 0.0

    def plus(self, other: "LevelStats") -> "LevelStats":
        return LevelStats(self.attempts + other.attempts, self.cut + other.cut, self.seconds + other.seconds)

    @property
    def cut_share(self) -> float:
        return self.cut / self.attempts if self.attempts else 0.0

    def goodput(self, level: int) -> float:
        """Complete runs per second with `level` at once (0 when nothing was measured)."""
        if not self.attempts or self.seconds <= 0:
            return 0.0
        return level * (1 - self.cut_share) / (self.seconds / self.attempts)


@dataclass
class Throttle:
    """The number of runs to keep in flight, `level`, between 1 and `most`."""

    most: int
    window: int = 40  # attempts per measurement
    probe: int = 20  # attempts per measurement of a neighbour (each costs throughput: it is worse, usually)
    hold: int = 5  # windows to stay at the best level before measuring again
    longest: int = 80  # the most windows a hold grows to
    clear: float = 1.5  # a level this many times the runner-up's goodput is held `longest` at once
    level: int = field(init=False)
    measured: dict[int, LevelStats] = field(default_factory=dict)
    seen_cut: bool = False
    history: list[tuple[int, float, float]] = field(default_factory=list)  # (level, cut share, goodput)
    _current: LevelStats = field(default_factory=LevelStats)
    _held: int = 0
    _best: int | None = None  # the level the last comparison chose
    _streak: int = 0  # how many comparisons in a row chose it
    _holding: LevelStats = field(default_factory=LevelStats)  # the held level's windows so far
    _probing: bool = False  # the level is a neighbour being measured, not the best one

    def __post_init__(self) -> None:
        self.most = max(1, self.most)
        self.level = self.most

    def observe(self, attempts: int, cut: int, seconds: float) -> None:
        """One finished run: `attempts` tries (reruns included), `cut` of them cut short, in `seconds`."""
        cur = self._current
        cur.attempts += attempts
        cur.cut += cut
        cur.seconds += seconds
        self.seen_cut = self.seen_cut or cut > 0
        if cur.attempts >= (self.probe if self._probing else self.window):
            self._decide()

    def _decide(self) -> None:
        cur, self._current = self._current, LevelStats()
        self.measured[self.level] = cur
        self.history.append((self.level, cur.cut_share, cur.goodput(self.level)))
        if not self.seen_cut:
            return  # nothing cut: more at once only gains
        if self._held:
            self._held -= 1
            self._holding = self._holding.plus(cur)
            if self._held == 0:
                held, self._holding = self._holding, LevelStats()
                rivals = [self.measured[k].goodput(k) for k in self.measured if k != self.level]
                if rivals and held.goodput(self.level) >= self.clear * max(rivals):
                    # what the hold measured still wins by far against the neighbours' last
                    # measurement: the load has not turned against this level, hold longer
                    self.measured[self.level] = held
                    self._streak += 1
                    self._held = min(self.longest, self.hold * 2**self._streak)
                    return
                self.measured = {self.level: cur}  # measure again around the level held
            return
        for k in (self.level - 1, self.level + 1):
            if 1 <= k <= self.most and k not in self.measured:
                self.level, self._probing = k, True
                return
        self._probing = False
        self.level = max(self.measured, key=lambda k: (self.measured[k].goodput(k), -k))
        self._streak = self._streak + 1 if self.level == self._best else 0
        self._best = self.level
        self._held = min(self.longest, self.hold * 2**self._streak)
        rivals = [self.measured[k].goodput(k) for k in self.measured if k != self.level]
        if rivals and self.measured[self.level].goodput(self.level) >= self.clear * max(rivals):
            self._held = self.longest  # won by far: measuring again soon would only cost
