"""Simulated bisects through the CLI's own orchestration (`bisectbot.bisecting.bisect.run_bisect`).

Only the edges are simulated: there is no git, no build and no program. A `SimRunner` stands
where `CommitRunner` stands and answers the same calls (prepare a commit, give its seed block,
stream its runs); everything above it is the real code: the CommitTester and its sequential tests,
the endpoint tests, the bad-model stage, the search strategies, the confirmation loop and the
summary. A run's outcome is a function of (the commit's distribution, the seed) alone, as for a
deterministic program: two commits with the same distribution give the same run for the same
seed, so shared seeds behave as they do for real.

Histories can hold commits that cannot change the binary (`History.equivalent`): the plan is
narrowed as `bisecting.narrow` would narrow it (such a commit builds its parent's binary, so it
has its parent's distribution), and the confirmation still builds a skipped parent. Runs can
fail (`History.failing`: a share of seeds crash, the same seeds at every commit; `failing_at`:
that share from each position on, a crash rate that changes at a commit). `History.noise` makes
the program not deterministic per seed (a share of runs draw afresh, as threads or the clock
would), and `sim_config(control=…)` takes a commit's own runs as the reference (a control sample).

Costs are seconds: `COSTS` holds two settings, llama.cpp's measured figures and the demo's; a
`SimRunner` states its setting to the strategy choice as a real runner states what its state
directory measured (`unit_costs`), and `Outcome.seconds` prices a bisect with it.

The module imports only what every version of bisectbot since the two-point search has, so
`bench_stats.py --baseline REV` can run the same histories through an older checkout.
"""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from bisectbot.bisecting import bisect
from bisectbot.config import Config, load_config
from bisectbot.events import Events
from bisectbot.judge.reference import resolve_reference
from bisectbot.judge.runner import Prepared
from bisectbot.records.commits import BuildRecord, RunRecord
from bisectbot.records.reports import ConfigSummary, Environment
from bisectbot.statistics import stats
from bisectbot.statistics.outcome import Find, Verdict

try:  # core.plan holds the plan's records now; an older checkout (bench_stats.py --baseline REV) has them in bisect
    from bisectbot.core.plan import BisectPlan, ReportContext
except ImportError:
    BisectPlan, ReportContext = bisect.BisectPlan, bisect.ReportContext  # type: ignore[attr-defined,misc]
try:  # renamed from Tester (pytest collects names starting with "Test")
    from bisectbot.judge.verdict import CommitTester
except ImportError:
    from bisectbot.judge.verdict import Tester as CommitTester  # type: ignore[attr-defined,no-redef]

P_29975 = {"e": 0.3454894722, "g": 0.4516915679, "h": 0.2028189600}
CONDITION_29975 = 0.82
BUILD_COST = 100  # a build costs as much as 100 runs (the first design's unit of cost)
# (seconds per build, wall seconds per run). llama.cpp: builds of llama-speculative on real
# history took 11–140 s, mean ~75 s, a run ~40 ms (issue 20: one build ≈ 1,900 runs). The demo:
# `bisectbot demo` on 2 cores, ccache warm: builds 0.1–0.7 s (~0.4), 4,272 runs in ~10 s.
COSTS: dict[str, tuple[float, float]] = {"llama": (75.0, 0.040), "demo": (0.4, 0.0023)}
# Seconds to scan a commit's compile inputs without building it (configure, then the preprocessor
# alone: `linkgraph.scanned_inputs`), for a broken end tested last. Measured on the 0.3.36 tree,
# 2 cores: 10.7 s (its cold build: 183 s). Versions without the scan never pay it.
SCAN_SECONDS: dict[str, float] = {"llama": 11.0, "demo": 0.4}

CONFIG = """\
name: sim
repo: {{path: .}}
build: {{targets: [sim], binaries: {{binary: [bin/sim]}}}}
run:
  argv: ["{{binary}}", -s, "{{seed}}"]
{max_runs}parse: {{split: chars}}
statistic:
  condition: {{position: 0, token: f}}
  outcome: {{position: 1}}
{failures}reference:
{reference}
{condition_prob}test:
  tolerance: 0.1
  confidence: 0.99
"""


def sim_config(
    max_runs: int | None = None,
    *,
    failures: str | None = None,
    condition_prob: bool = True,
    probs: dict[str, float] | None = None,
    control: str | int | None = None,
    max_categories: int | str | None = None,
    **test: float,
) -> Config:
    """The bench's config: the #29975 reference, the defaults otherwise (`max_runs` and `test`
    keys when given; `failures`: statistic.failures; `condition_prob` False: a reference without
    P(condition); `probs`: another reference; `control`: a control sample instead — of that
    commit's runs (a sha), or of that many first runs at the good end (an int, `reference: good`);
    `max_categories`: statistic.max_categories). Without them only keys that every version knows,
    so a baseline checkout reads the same file."""
    runs = "" if max_runs is None else f"  max_runs: {max_runs}\n"
    probs = P_29975 if probs is None else probs
    if isinstance(control, int):
        reference = f"  control: {{commit: '{{good}}', runs: {control}}}"
    elif control is not None:
        reference = f"  control: {{commit: '{control}'}}"
    else:
        reference = "  probs: {" + ", ".join(f"{k}: {v!r}" for k, v in probs.items()) + "}"
    statistic = "" if failures is None else f"  failures: {failures}\n"
    statistic += "" if max_categories is None else f"  max_categories: {max_categories}\n"
    text = CONFIG.format(
        max_runs=runs,
        failures=statistic,
        reference=reference,
        condition_prob=f"  condition_prob: {CONDITION_29975}\n" if condition_prob and control is None else "",
    )
    text += "".join(f"  {key}: {value}\n" for key, value in test.items())
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "sim.yaml"
        path.write_text(text)
        return load_config(path)


def joint(cond: Sequence[float], other: float = 0.0, condition: float = CONDITION_29975) -> np.ndarray:
    """Category probabilities (e, g, h, OTHER, MISSED) for a conditional outcome distribution
    with a share `other` of stray outcomes among the runs that meet the condition, which a
    share `condition` of runs meet."""
    cp = np.append(np.asarray(cond, float) * (1 - other), other)
    return np.append(cp * condition, 1 - condition)


def reference_joint(other: float = 0.0) -> np.ndarray:
    return joint(list(P_29975.values()), other)


TOKENS: tuple[tuple[str, ...], ...] = (("f", "e"), ("f", "g"), ("f", "h"), ("f", "z"), ("a", "b"))


def tokens_for(names: Sequence[str]) -> tuple[tuple[str, ...], ...]:
    """What a run of each category prints, for a reference of these outcomes (then an outcome
    it does not list, then a run that misses the condition): `History.tokens`."""
    return (*(("f", name) for name in names), ("f", "<unlisted>"), ("a", "b"))


@dataclass(frozen=True)
class History:
    """A line of `n` commits; `changes` maps a position to the distribution from there on
    (position 0 must be present). The first departure is the first change at a position > 0.
    `equivalent`: positions that cannot change the binary (never a change point); `failing`:
    the share of seeds whose run crashes (at every commit); `failing_at`, when given, maps a
    position to that share from there on instead (position 0 must be present); `tokens`: what a
    run of each category prints (`tokens_for`; default #29975's)."""

    n: int
    changes: dict[int, np.ndarray]
    salt: int
    equivalent: frozenset[int] = frozenset()
    failing: float = 0.0
    failing_at: dict[int, float] | None = None
    noise: float = 0.0  # the share of runs that draw afresh (not deterministic per seed)
    tokens: tuple[tuple[str, ...], ...] = TOKENS

    def failing_share(self, pos: int) -> float:
        if self.failing_at is None:
            return self.failing
        return self.failing_at[max(p for p in self.failing_at if p <= pos)]

    @property
    def shas(self) -> list[str]:
        return [hashlib.sha1(f"{self.salt}:{i}".encode()).hexdigest() for i in range(self.n)]

    def dist_at(self, pos: int) -> np.ndarray:
        return self.changes[max(p for p in self.changes if p <= pos)]

    def narrowed(self, lo: int = 0, hi: int | None = None) -> Any:
        """The line lo..hi (default: all of it) as bisecting.narrow would leave it: the ends and
        the commits that can change the binary; each kept commit stands for the equivalent ones
        after it."""
        from bisectbot.core.plan import Narrowed

        shas = self.shas
        hi = self.n - 1 if hi is None else hi
        kept = [i for i in range(lo, hi + 1) if i in (lo, hi) or i not in self.equivalent]
        stands: dict[str, tuple[str, ...]] = {}
        for a, b in zip(kept, kept[1:]):
            if b - a > 1:
                stands[shas[a]] = tuple(shas[a + 1 : b])
        return Narrowed(
            tuple(shas[i] for i in kept),
            tuple(shas[lo : hi + 1]),
            stands,
            {shas[i]: "simulated input" for i in kept[1:-1]},
            "simulated",
        )


class _Info:
    def __init__(self, sha: str):
        self.subject = f"commit {sha[:7]}"
        self.date = "2026-01-01T00:00:00"


class _Workspace:
    def info(self, sha: str) -> _Info:
        return _Info(sha)

    def resolve(self, ref: str) -> str:
        return ref  # the histories' refs are their shas (a control sample's commit too)


class SimStream:
    """A commit's runs over its seeds: each outcome from the commit's distribution and the
    seed's uniform (the same uniform for every commit); a share `failing` of seeds crash; a
    share `noise` of runs draw from a uniform of their own (`stream`: the commit and which run
    of the seed, so reruns and other commits draw apart)."""

    def __init__(
        self,
        cdf: np.ndarray,
        seeds: list[int],
        salt: int,
        failing: float = 0.0,
        keep: dict[int, RunRecord] | None = None,
        noise: float = 0.0,
        stream: int = 0,
        tokens: tuple[tuple[str, ...], ...] = TOKENS,
    ):
        self._cdf, self._seeds, self._salt, self._tokens = cdf, iter(seeds), salt, tokens
        self._failing = failing
        self._keep = keep if keep is not None else {}
        self._noise, self._stream = noise, stream
        self.executed = 0
        self.retried = 0

    def __enter__(self) -> "SimStream":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __iter__(self) -> Iterator[RunRecord]:
        return self

    def __next__(self) -> RunRecord:
        seed = next(self._seeds)
        if self._noise and seed in self._keep:  # a noisy seed's run is the one stored (a deterministic one is the same)
            return self._keep[seed]
        self.executed += 1
        if self._failing and uniform(self._salt + 7919, seed) < self._failing:
            rec = RunRecord(seed, "crash", None, 139, 0.0, 1, 0, "killed by SIGSEGV")
        else:
            u = uniform(self._salt, seed)
            if self._noise and uniform(self._stream, seed) < self._noise:
                u = uniform(self._stream + 1, seed)
            category = int(np.searchsorted(self._cdf, u, side="right"))
            rec = RunRecord(seed, "ok", self._tokens[min(category, len(self._tokens) - 1)], 0, 0.0)
        self._keep[seed] = rec
        return rec

    def close(self) -> None:
        pass


def uniform(salt: int, seed: int) -> float:
    """A uniform in [0, 1) fixed by (salt, seed): splitmix64."""
    z = (salt * 0x9E3779B97F4A7C15 + seed * 0xBF58476D1CE4E5B9 + 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    z ^= z >> 31
    return (z >> 11) / float(1 << 53)


class SimRunner:
    """Stands where CommitRunner stands: every commit builds; its runs come from History, kept
    per run key (a seed's second runs apart from its first)."""

    def __init__(self, cfg: Config, history: History, costs: str = "llama"):
        self.cfg, self.history, self.costs = cfg, history, costs
        self._kept: dict[tuple[str, str], dict[int, RunRecord]] = {}
        self.workspace = _Workspace()
        self.events = Events()  # a control sample's runs report to it
        self.control_executed = 0  # as CommitRunner's: the control's runs executed
        shas = history.shas
        self._cdf = {sha: np.cumsum(history.dist_at(i))[:-1] for i, sha in enumerate(shas)}
        self._failing = {sha: history.failing_share(i) for i, sha in enumerate(shas)}

    def seed_block(self, *args: Any) -> list[int]:
        """The real runner's seeds: per commit (sha, block, count) where the config has
        `commit_seeds`, the older shared blocks (block) otherwise."""
        run = self.cfg.run
        if hasattr(run, "commit_seeds"):
            sha, block, *rest = args
            count = rest[0] if rest and rest[0] else run.max_runs
            return run.commit_seeds(sha, block, count)
        (block,) = args
        return [
            run.seed(i)
            for i in range(run.first_seed + block * run.max_runs, run.first_seed + (block + 1) * run.max_runs)
        ]

    def prepare(self, sha: str) -> Prepared:
        build = BuildRecord(sha, "ok", {"binary": "/sim"}, "", 0.0)
        return Prepared(sha, build, object(), "simulated", run_key="sim")  # type: ignore[arg-type]

    def variant_failed(self, *args: Any) -> None:
        return None

    def rerunning(self, prepared: Prepared) -> Prepared:
        """A seed's second runs, kept under a key of their own (as CommitRunner's)."""
        return replace(prepared, run_key=f"{prepared.run_key}/rerun")

    def stored_runs(self, prepared: Prepared) -> dict[int, Any]:
        """The runs made so far at the commit (every run is drawn afresh, as if executed, and
        kept: what a commit tested on the same seeds is compared with)."""
        return dict(self._kept.get((prepared.run_key, prepared.sha), {}))

    def runs_version(self, sha: str) -> int:
        return sum(len(runs) for (_, at), runs in self._kept.items() if at == sha)

    def runs(self, prepared: Prepared, seeds: list[int]) -> SimStream:
        """The commit's runs, kept per run key; with noise a seed's stored run is replayed (as a
        state directory does) and a run key's noise draws apart from another's."""
        keep = self._kept.setdefault((prepared.run_key, prepared.sha), {})
        stream = int(hashlib.sha1(f"{prepared.run_key}:{prepared.sha}".encode()).hexdigest()[:8], 16)
        cdf, failing = self._cdf[prepared.sha], self._failing[prepared.sha]
        h = self.history
        return SimStream(cdf, seeds, h.salt, failing, keep, h.noise, stream, h.tokens)

    def built_already(self, sha: str) -> bool:
        return True  # every commit "builds" instantly

    def unit_costs(self) -> Any:
        """The setting's seconds per build and per run, as a real runner's state measures them."""
        from bisectbot.core.policy import UnitCosts

        build, run = COSTS[self.costs]
        return UnitCosts(build, run, builds=100, runs=10_000)


@dataclass(frozen=True)
class Outcome:
    """One simulated bisect, as the report gave it."""

    status: str
    named: int | None  # position of the named commit (None: nothing named)
    confidence: float
    runs: int
    builds: int
    strategy: str
    error: str = ""
    scans: int = 0  # the broken end's inputs scanned instead of built (a broken end tested last)

    @property
    def cost(self) -> int:
        return self.runs + BUILD_COST * self.builds

    def seconds(self, setting: str) -> float:
        """Wall seconds at a cost setting (COSTS): builds and runs, one after the other."""
        build, run = COSTS[setting]
        return self.builds * build + self.runs * run + self.scans * SCAN_SECONDS[setting]


def run_one(cfg: Config, history: History, strategy: str = "auto", costs: str = "llama") -> Outcome:
    """One bisect of `history` from its first commit (good) to its last (bad), through
    `bisect.run_bisect` as the CLI calls it."""
    from bisectbot.errors import EndpointError

    try:
        report = run_report(cfg, history, strategy, costs)
    except EndpointError as exc:
        return Outcome("endpoint-error", None, 0.0, 0, 0, strategy, str(exc)[:200], int(_broken_last(costs)))
    return outcome_of(report, history, costs)


def outcome_of(report: Any, history: History, costs: str = "llama") -> Outcome:
    """What `run_one` keeps of a bisect's report."""
    line = history.shas
    named = line.index(report.first_bad) if report.first_bad else None
    return Outcome(
        report.status.value,
        named,
        report.confidence,
        report.runs,
        report.builds,
        report.strategy,
        "" if named is not None else report.message[:200],
        int(_broken_last(costs)),
    )


def _broken_last(costs: str) -> bool:
    """Does this version test the broken end last at this cost setting (as bisecting.narrow
    decides from the working end's build)? False for versions without it."""
    from bisectbot.core import policy

    decide = getattr(policy, "broken_end_last", None)
    return bool(decide and decide(COSTS[costs][0]))


def run_report(
    cfg: Config,
    history: History,
    strategy: str = "auto",
    costs: str = "llama",
    find: Find = Find.BAD,
    *,
    good: int = 0,
    bad: int | None = None,
    scan: bool = False,
) -> Any:
    """The whole BisectReport of one simulated bisect (EndpointError propagates), from the
    history's first commit to its last, or from position `good` to `bad`, with `--scan` when
    `scan`; the plan is narrowed as bisecting.narrow does when the history has equivalent commits."""
    events = Events()
    control = getattr(cfg.reference, "control", None)
    if control is not None:  # `reference: good`: the history's good end is the control
        cfg = cfg.with_good_end(history.shas[good])
    runner = SimRunner(cfg, history, costs)
    if control is not None:  # a control sample (only versions with one)
        from bisectbot.judge.reference import GrowingControl

        resolved = resolve_reference(cfg, runner)  # type: ignore[arg-type]
        growing = GrowingControl(cfg, runner, resolved)  # type: ignore[arg-type]
        tester = CommitTester(cfg, runner, growing.reference, events, growing)  # type: ignore[arg-type]
    else:
        resolved = resolve_reference(cfg)
        tester = CommitTester(cfg, runner, resolved.stats_reference(), events)  # type: ignore[arg-type]
    bad = history.n - 1 if bad is None else bad
    narrowed = history.narrowed(good, bad) if history.equivalent else None
    line = narrowed.line if narrowed is not None else tuple(history.shas[good : bad + 1])
    level = min(cfg.test.alpha, cfg.test.beta, stats.step_level(len(line), cfg.test.confidence))
    plan = BisectPlan("sim", line, "good", "bad", find, strategy, level, "sim.yaml", narrowed=narrowed)
    if scan:  # only versions with --scan
        plan = replace(plan, scan=True, level=min(level, stats.scan_level(len(line), cfg.test.confidence)))
    if _broken_last(costs):
        plan = replace(plan, broken_last=True)
    context = ReportContext(
        resolved.summary(cfg), ConfigSummary("sim", "", "sim.yaml"), Environment("", "", [], "", "", "", "")
    )
    return bisect.run_bisect(plan, tester, events, context)


__all__ = [
    "History",
    "Outcome",
    "SimRunner",
    "joint",
    "outcome_of",
    "reference_joint",
    "run_one",
    "run_report",
    "sim_config",
    "tokens_for",
    "Verdict",
]
