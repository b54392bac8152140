"""Bisect stage: the wiring from two refs to a named culprit (the search itself is `search.py`).

Order of work, each step a stored verdict:
1. the broken endpoint (bad, or the old one with ``find="fixed"``) with the generic test: it must
   test BAD, and its counts become the bad model q̂ for bisect mode;
2. the working endpoint with the generic test: it must test GOOD (clear error otherwise);
3. binary search, each probed commit tested "like good" vs "like bad" (two-point test);
4. the culprit and its parent re-tested on fresh seeds.
Per-step error levels come from the whole-bisect confidence (union bound over the verdicts
that can end up in the answer), so the report can state how sure the answer is.

Everything is replayed from the state database on a rerun: a killed bisect resumes where it was.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import asdict, dataclass, field
from typing import Any, Callable

from bisectbot.core import stats
from bisectbot.edges.workspace import Workspace
from bisectbot.config import Config
from bisectbot.errors import EndpointError
from bisectbot.pipeline.progress import Progress
from bisectbot.core.search import Answer, SearchResult, bisect_search
from bisectbot.edges.storage import State
from bisectbot.report import environment, reference_json
from bisectbot.pipeline.verdict import Accumulator, CommitVerdict, Mode, Tester

SCHEMA_VERSION = 1


@dataclass
class BisectReport:
    """The JSON report of `bisectbot bisect` (schema documented in README.md, stable)."""

    schema_version: int
    kind: str
    job: str
    status: str                 # found | ambiguous | unconfirmed
    find: str                   # bad | fixed
    first_bad: str | None       # the culprit (first bad, or first fixed with find=fixed)
    first_bad_subject: str | None
    last_good: str | None
    candidates: list[str]       # possible culprits (one when found)
    good: str
    bad: str
    good_ref: str
    bad_ref: str
    commits: int                # commits on the first-parent line, good and bad included
    builds: int
    builds_bound: int           # ceil(log2 commits) + 3
    runs: int
    runs_executed: int          # runs executed by this invocation (0 when fully replayed)
    retried: int
    confidence: float
    step_alpha: float
    message: str
    verdicts: list[dict[str, Any]]
    reference: dict[str, Any]
    config: dict[str, Any]
    environment: dict[str, Any]
    reproduce: str
    strategy: str = "plain"     # plain | sticky (the one used; `auto` picks per bug)
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def job_id(kind: str, cfg: Config, *parts: str) -> str:
    blob = "\0".join([kind, cfg.digest(), *parts]).encode()
    return f"{kind}-{hashlib.sha256(blob).hexdigest()[:12]}"


def run_bisect(cfg: Config, state: State, good_ref: str, bad_ref: str, *,
               find: str = "bad", strategy: str = "auto", progress: Progress | None = None,
               config_path: str = "CONFIG") -> BisectReport:
    progress = progress or Progress(quiet=True)
    ws = Workspace(cfg.repo_source, state.clone_dir)
    progress.step(f"syncing {ws.source} …")
    ws.sync()
    good, bad = ws.resolve(good_ref), ws.resolve(bad_ref)
    line = ws.first_parent_line(good, bad)
    n = len(line)
    job = job_id("bisect", cfg, good, bad, find, *(() if strategy == "auto" else (strategy,)))
    state.start_job(job, "bisect", {"good": good, "bad": bad, "good_ref": good_ref,
                                    "bad_ref": bad_ref, "find": find, "strategy": strategy,
                                    "config": config_path})
    level = min(cfg.test.alpha, cfg.test.beta, stats.step_level(n, cfg.test.confidence))
    tester = Tester(cfg, state, ws, progress)
    verdicts: list[CommitVerdict] = []
    progress.step(f"bisecting {n} commits {good[:12]}..{bad[:12]} (find first {find}; "
                  f"per-step error ≤ {level:.1e})")

    def record(v: CommitVerdict) -> CommitVerdict:
        verdicts.append(v)
        key = v.role if v.arm == "main" else f"{v.role}@{v.arm}"
        state.put_verdict(job, v.sha, key, v.verdict, v.to_json())
        arm = "" if v.arm == "main" else f" [{v.arm}]"
        progress.step(f"  {v.role}{arm} {v.sha[:12]}: {v.verdict.upper()} after {v.runs} runs — {v.reason}")
        return v

    def test(pos: int, role: str, mode: Mode = Mode(), block: int = 0) -> CommitVerdict:
        sha = line[pos]
        return record(tester.verdict(sha, role=role, mode=mode, alpha=level, beta=level,
                                     block=block, subject=ws.info(sha).subject))

    # Which endpoint is broken: with find=bad the new one, with find=fixed the old one.
    broken_pos, working_pos = (n - 1, 0) if find == "bad" else (0, n - 1)
    broken_name, working_name = ("bad", "good") if find == "bad" else ("good", "bad")
    broken_ref = bad_ref if find == "bad" else good_ref
    working_ref = good_ref if find == "bad" else bad_ref

    progress.step(f"[endpoint] testing {broken_name} {broken_ref} = {line[broken_pos][:12]}")
    broken = test(broken_pos, f"{broken_name}-endpoint")
    if broken.verdict != "bad":
        _endpoint_failed(state, job, broken_name, broken_ref, broken, "bad")
    progress.step(f"[endpoint] testing {working_name} {working_ref} = {line[working_pos][:12]}")
    working = test(working_pos, f"{working_name}-endpoint")
    if working.verdict != "good":
        _endpoint_failed(state, job, working_name, working_ref, working, "good")

    # Cross-check arms (e.g. llama-server -md): their own verdicts at both endpoints, reported
    # beside the main ones; they do not steer the search.
    for name in cfg.arms:
        for pos, role in ((broken_pos, f"{broken_name}-endpoint"), (working_pos, f"{working_name}-endpoint")):
            progress.step(f"[arm {name}] testing {line[pos][:12]}")
            record(tester.arm_verdict(line[pos], name, role=role, subject=ws.info(line[pos]).subject))

    # The bad model q̂ for bisect mode: keep measuring the broken endpoint (same seeds onwards)
    # until q̂ is precise relative to the size of the bug (≥ 100 runs; more for subtle bugs).
    model = test(broken_pos, f"{broken_name}-model", Mode("bad-model"))
    if model.verdict != "bad":
        _endpoint_failed(state, job, broken_name, broken_ref, model, "bad")
    q_bad = stats.smooth_bad([model.counts[name] for name in tester.reference.names])
    two_point = Mode("two-point", tuple(q_bad))
    steps = max(1, math.ceil(math.log2(max(n - 1, 2))))
    step_no = 0

    def oracle(pos: int) -> Answer:
        nonlocal step_no
        step_no += 1
        progress.step(f"[step {step_no}/~{steps}] {line[pos][:12]} (position {pos} of {n - 1})")
        v = test(pos, "step", two_point)
        answer = Answer(v.verdict) if v.verdict in Answer._value2member_map_ else Answer.SKIP
        return _flip(answer) if find == "fixed" else answer

    posterior = None
    requested = strategy
    if strategy == "auto":
        strategy = "sticky" if stats.prefer_sticky(list(model.counts.values())) else "plain"
        progress.step(f"[strategy] {strategy} bisection: the bad endpoint model took "
                      f"{sum(model.counts.values())} counted runs")
    if strategy == "sticky":
        progress.step("[sticky] Bayesian bisection: stays on a commit until its side is clear")
        result, posterior = _sticky_search(tester, line, find, model, progress, record,
                                           confidence=1 - level)
    else:
        result = bisect_search(n, oracle)
    culprit_pos = result.first_bad  # the first bad one, or with find=fixed the first fixed one
    status, message = "ambiguous", ""
    if posterior is not None and posterior < 1 - level:
        status = "unconfirmed"
        message = (f"sticky bisection ran out of runs with P(first bad = {line[culprit_pos][:12]}) "
                   f"= {posterior:.4f} only")
    elif result.exact:
        progress.step(f"[confirm] re-testing {line[culprit_pos][:12]} and its parent on fresh seeds")
        again = test(culprit_pos, "retest-culprit", two_point, block=1)
        parent = test(culprit_pos - 1, "retest-parent", two_point, block=1)
        want_culprit, want_parent = ("bad", "good") if find == "bad" else ("good", "bad")
        if again.verdict == want_culprit and parent.verdict == want_parent:
            status = "found"
            message = f"first {find} commit is {line[culprit_pos]}"
        else:
            status = "unconfirmed"
            message = (f"re-test on fresh seeds disagrees: candidate {again.verdict}, "
                       f"parent {parent.verdict}")
    else:
        cands = [line[p] for p in result.candidates]
        message = (f"{len(cands)} candidates between {line[result.last_good][:12]} and "
                   f"{line[result.first_bad][:12]}: the commits between could not be decided")

    informative = [v for v in verdicts if v.verdict in ("good", "bad") and v.arm == "main"
                   and v.mode in ("reference", "two-point")]
    # Union bound: wrong only if a verdict on the way is wrong (or, sticky, the posterior is).
    doubt = sum(max(v.alpha, v.beta) for v in informative) + (1 - posterior if posterior else 0)
    confidence = max(0.0, 1.0 - doubt)
    tested = {v.sha for v in verdicts if v.arm == "main"}  # each built exactly once, ever
    first = line[culprit_pos] if status in ("found", "unconfirmed") else None
    report = BisectReport(
        schema_version=SCHEMA_VERSION, kind="bisect", job=job, status=status, find=find,
        first_bad=first if status == "found" else None,
        first_bad_subject=ws.info(first).subject if first and status == "found" else None,
        last_good=line[result.last_good],
        candidates=[line[p] for p in result.candidates],
        good=good, bad=bad, good_ref=good_ref, bad_ref=bad_ref, commits=n,
        builds=len(tested), builds_bound=math.ceil(math.log2(n)) + 3,
        runs=_distinct_runs(verdicts), runs_executed=sum(v.executed for v in verdicts),
        retried=sum(v.retried for v in verdicts), confidence=confidence, step_alpha=level,
        message=message, verdicts=[v.to_json() for v in verdicts],
        strategy=strategy, extra={"strategy_requested": requested},
        reference=reference_json(cfg, tester.resolved),
        config={"name": cfg.name, "digest": cfg.digest(), "path": config_path,
                "experiment": tester.experiment},
        environment=environment(cfg),
        reproduce=_reproduce(config_path, good, bad, find, strategy),
    )
    state.finish_job(job, "done", report.to_json())
    return report


def _distinct_runs(verdicts: list[CommitVerdict]) -> int:
    """Runs spent, each counted once: verdicts on the same commit, arm and seed block read the
    same seeds from the start (the bad-endpoint model extends the bad endpoint's test)."""
    longest: dict[tuple[str, str, int], int] = {}
    for v in verdicts:
        key = (v.sha, v.arm, v.block)
        longest[key] = max(longest.get(key, 0), v.runs)
    return sum(longest.values())


def _flip(answer: Answer) -> Answer:
    return {Answer.GOOD: Answer.BAD, Answer.BAD: Answer.GOOD}.get(answer, answer)


def _endpoint_failed(state: State, job: str, name: str, ref: str, v: CommitVerdict, want: str) -> None:
    what = {"skip": "cannot be tested", "inconclusive": "is inconclusive"}.get(v.verdict, f"tests {v.verdict.upper()}")
    msg = (f"{name} ref {ref} ({v.sha[:12]}) {what}, expected {want.upper()}: "
           f"{v.reason} (after {v.runs} runs)")
    state.finish_job(job, "failed", {"status": "failed", "message": msg})
    raise EndpointError(msg)


def _reproduce(config_path: str, good: str, bad: str, find: str, strategy: str) -> str:
    extra = " --find fixed" if find == "fixed" else ""
    return f"bisectbot bisect {config_path} --good {good} --bad {bad}{extra} --strategy {strategy}"


class _Untestable(Exception):
    def __init__(self, index: int, reason: str):
        super().__init__(reason)
        self.index = index


class _Feed:
    """One commit's runs for the sticky bisection, one category at a time in seed order:
    replayed from the database when stored, executed (and stored) otherwise."""

    def __init__(self, tester: Tester, sha: str, index: int):
        self.tester, self.sha, self.index = tester, sha, index
        self.build, self.execute, self.variant, self.why = tester.runner(sha)
        self.seeds = iter(tester.seed_block(0))
        self.done = tester.state.get_runs(tester.experiment, sha)
        self.acc = Accumulator(tester, sha, Mode("sticky"), 0.0, 0.0, tester.cfg.run.max_runs)
        self.executed = 0

    def next(self) -> int:
        if self.execute is None:
            raise _Untestable(self.index, self.why)
        for seed in self.seeds:
            rec = self.done.get(seed)
            if rec is None:
                rec = self.execute(seed)
                self.tester.state.put_run(self.tester.experiment, self.sha, rec)
                self.executed += 1
            if self.acc.feed(rec):
                raise _Untestable(self.index, self.acc.skip or "runs mostly fail")
            if self.acc.last_index is not None:
                return self.acc.last_index
        raise _Untestable(self.index, f"seed budget of {self.tester.cfg.run.max_runs} runs used up")


def _sticky_search(tester: Tester, line: list[str], find: str, model: CommitVerdict,
                   progress: Progress, record: Callable[[CommitVerdict], CommitVerdict], *,
                   confidence: float) -> tuple[SearchResult, float]:
    """Probabilistic bisection (stats.sticky_bisect) over the commits that can be tested.

    A commit that cannot be built or run is dropped and the search restarted on the rest; its
    stored runs replay, so a restart costs nothing. Each tested commit is recorded as a verdict
    on the side the final posterior puts it."""
    ref = tester.reference
    names = ref.names
    # a control sample's zero counts are not impossibilities: smooth them like q̂
    p = ref.probs if ref.control is None else tuple(
        (c + 0.5) / (sum(ref.control) + len(ref.control) / 2) for c in ref.control)
    bad_counts = [model.counts[name] for name in names]
    positions = list(range(len(line)))  # testable positions of the line
    while True:
        # sticky_bisect wants good first and bad last: with find=fixed walk the line backwards
        order = positions if find == "bad" else positions[::-1]
        feeds: dict[int, _Feed] = {}

        def run(i: int) -> int:
            pos = order[i]
            if pos not in feeds:
                progress.step(f"[sticky] {line[pos][:12]} (position {pos} of {len(line) - 1})")
                feeds[pos] = _Feed(tester, line[pos], i)
            return feeds[pos].next()

        try:
            res = stats.sticky_bisect(len(order), run, p, bad_counts, confidence=confidence,
                                      max_runs=tester.cfg.run.max_runs * len(line))
            break
        except _Untestable as exc:
            pos = order[exc.index]
            progress.step(f"[sticky] skipping {line[pos][:12]}: {exc}")
            record(_feed_verdict(feeds[pos], "skip", str(exc)))
            positions.remove(pos)
    # In `order`, res.culprit is the first broken position and the one before it the last
    # working one; in line order that is (last good, first bad), or with find=fixed
    # (last broken, first fixed) — run_bisect's (last_good, first_bad) either way.
    broken, working = order[res.culprit], order[res.culprit - 1]
    boundary = (working, broken) if find == "bad" else (broken, working)
    for pos, feed in sorted(feeds.items()):
        side = "bad" if (pos >= broken if find == "bad" else pos <= broken) else "good"
        record(_feed_verdict(feed, side, f"sticky bisection: P(first {find} = {line[boundary[1]][:12]}) "
                                         f"= {res.posterior:.4f} after {res.runs} runs, {res.visits} visits"))
    return SearchResult(*boundary), res.posterior


def _feed_verdict(feed: _Feed, verdict: str, reason: str) -> CommitVerdict:
    acc = feed.acc
    return CommitVerdict(
        sha=feed.sha, subject=feed.tester.workspace.info(feed.sha).subject, role="sticky",
        verdict=verdict, runs=acc.consumed, counts=dict(zip(acc.names, acc.counts)),
        failures=dict(acc.failures), retried=acc.retried, log_e_bad=0.0, log_e_good=0.0,
        reason=reason, mode="sticky", alpha=0.0, beta=0.0,
        seeds=(acc.first, acc.last) if acc.first is not None else None,
        build=feed.build.status, build_seconds=feed.build.seconds, executed=feed.executed,
        build_log=feed.build.log, binaries=dict(feed.build.binaries), variant=feed.variant)
