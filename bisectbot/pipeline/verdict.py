"""Verdict stage: one commit → build → sweep → sequential test → good / bad / skip / ….

This is where the edges meet the pure statistics: `Tester.verdict` makes sure the commit is
built (once, ever), feeds its runs in seed order to the sequential test, and stops as soon as
the test decides. Everything it does is stored, so asking again for the same verdict replays
the database instead of rerunning anything.

Seed blocks: a commit's main test uses seeds [first_seed, first_seed + max_runs); the final
re-test of the culprit and its parent uses the next block, so it sees fresh seeds and is
independent of the verdicts that led the search there.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import asdict, dataclass, field
from contextlib import nullcontext
from functools import cached_property
from pathlib import Path
from typing import Callable, Sequence

from bisectbot.core import stats
from bisectbot.pipeline.build import build_commit, build_dir_key, build_key
from bisectbot.edges.workspace import Workspace
from bisectbot.config import BuildConfig, Config
from bisectbot.pipeline.parse import observe
from bisectbot.pipeline.progress import Progress
from bisectbot.pipeline.reference import ResolvedReference, resolve_reference
from bisectbot.edges.storage import BuildRecord, RunRecord, State
from bisectbot.edges.procs import Server, ServerError, free_port, run
from bisectbot.pipeline.sweep import pick_variant, render_argv, request_seed, run_env, run_seed, sweep

# A commit whose runs mostly fail is skipped: judged once this many runs have failed.
MIN_FAILURES_TO_SKIP = 5
# The control sample's seeds start this far out: disjoint from every test block.
CONTROL_SEED_OFFSET = 10**9


@dataclass(frozen=True)
class Mode:
    """Which test decides: the generic one against the reference, the bisect-mode two-point
    test against the bad endpoint's smoothed distribution `q_bad`, or (bad-model) no test but
    measuring the bad endpoint until `q_bad` is estimated well enough."""

    kind: str = "reference"  # reference | two-point | bad-model | sticky
    q_bad: tuple[float, ...] | None = None


@dataclass(frozen=True)
class CommitVerdict:
    sha: str
    subject: str
    role: str
    verdict: str                   # good | bad | skip | inconclusive | unlike
    runs: int                      # runs consumed by the test (every seed, failures included)
    counts: dict[str, int]         # category -> runs
    failures: dict[str, int]       # crash / timeout / incomplete / unparsable -> runs
    retried: int                   # reruns of incomplete outputs
    log_e_bad: float
    log_e_good: float
    reason: str
    mode: str
    alpha: float
    beta: float
    seeds: tuple[int, int] | None  # first and last seed consumed
    build: str                     # build status
    build_seconds: float
    executed: int = 0              # runs executed by this call (0 when replayed)
    build_log: str | None = None
    binaries: dict[str, str] = field(default_factory=dict)
    variant: int | None = None     # which run.variants entry was used (0 with plain argv)
    arm: str = "main"              # "main", or the name of a cross-check arm
    block: int = 0                 # seed block: 0 for the search, 1 for the final re-test

    def to_json(self) -> dict:
        """The JSON form: `commit` (the contract's name) first, then every field."""
        return {"commit": self.sha, **asdict(self)}


class Tester:
    """Builds and tests commits of one config, with everything remembered in `state`."""

    def __init__(self, cfg: Config, state: State, workspace: Workspace, progress: Progress | None = None):
        self.cfg = cfg
        self.state = state
        self.workspace = workspace
        self.progress = progress or Progress(quiet=True)
        self.experiment = cfg.experiment_digest()
        self.build_key = build_key(cfg.build)
        self.builds_done: list[str] = []  # commits built by this process (not replayed)

    @cached_property
    def resolved(self) -> ResolvedReference:
        """The reference, computed (and cached in the database) on first use."""
        return resolve_reference(self.cfg, self)

    @cached_property
    def reference(self) -> stats.Reference:
        return self.resolved.stats_reference()

    def control_counts(self, ref: str, runs: int) -> tuple[str, dict[str, int]]:
        """The control sample: `runs` runs of a known-good commit, on seeds no test uses."""
        from bisectbot.errors import BisectbotError

        sha = self.workspace.resolve(ref)
        build, execute, _, why = self.runner(sha)
        if execute is None:
            raise BisectbotError(f"reference.control: {ref} ({sha[:12]}) cannot be tested: {why}")
        seeds = self._seeds(CONTROL_SEED_OFFSET + self.cfg.run.first_seed, runs)
        counts: Counter[str] = Counter()
        failures = 0

        def consume(rec: RunRecord) -> bool:
            nonlocal failures
            if not rec.ok:
                failures += 1
                return False
            obs = observe(rec.tokens or (), self.cfg.statistic)
            counts[(obs.outcome if obs.outcome is not None else stats.OTHER)
                   if obs.met_condition else stats.MISSED] += 1
            self.progress.status(f"  control {sha[:12]}: {sum(counts.values())}/{runs} runs")
            return False

        self.progress.step(f"  control sample: {runs} runs at {sha[:12]}")
        sweep(seeds, self.state.get_runs(self.experiment, sha), execute=execute, consume=consume,
              store=lambda rec: self.state.put_run(self.experiment, sha, rec),
              jobs=self.cfg.run.jobs or os.cpu_count() or 1)
        if failures * 2 > runs or not counts:
            raise BisectbotError(f"reference.control: {failures} of {runs} runs at {sha[:12]} failed")
        return sha, dict(counts)

    # -- build ---------------------------------------------------------------------------------
    def ensure_built(self, sha: str) -> BuildRecord:
        """The commit's build record, building it only if no usable build is stored."""
        return self._build(sha, self.cfg.build)

    def build_target(self, ref: str, target: str, binaries: list[str]) -> tuple[str, BuildRecord]:
        """Another target at some commit (llama-server for a reference), same cmake arguments."""
        sha = self.workspace.resolve(ref)
        build_cfg = self.cfg.build.model_copy(update={"targets": [target], "binaries": {"server": binaries}})
        return sha, self._build(sha, build_cfg)

    def _build(self, sha: str, build_cfg: BuildConfig) -> BuildRecord:
        key = build_key(build_cfg)
        rec = self.state.get_build(key, sha)
        # A stored build is final, unless its binaries were deleted by hand or it timed out and
        # the timeout has since been raised.
        retry_timeout = rec is not None and rec.status == "timeout" and build_cfg.timeout > rec.seconds + 1
        if rec is not None and not retry_timeout and (
                not rec.ok or all(Path(p).is_file() for p in rec.binaries.values())):
            return rec
        if rec is not None:  # forget it and build again
            self.state.db.execute("DELETE FROM builds WHERE build_key=? AND sha=?", (key, sha))
        self.progress.step(f"  building {', '.join(build_cfg.targets)} at {sha[:12]} …")
        source = self.workspace.checkout(sha)
        rec = build_commit(
            build_cfg, sha, source,
            self.state.build_dir(build_dir_key(build_cfg)),
            self.state.kept_dir(key, sha),
            self.state.log_path(f"build-{key}-{sha}.log"),
            progress=self.progress,
        )
        self.state.put_build(key, rec)
        self.builds_done.append(sha)
        self.progress.step(
            f"  built {sha[:12]} in {rec.seconds:.1f} s" if rec.ok else f"  build {rec.status}: {rec.reason}"
        )
        return rec

    # -- test ----------------------------------------------------------------------------------
    def seed_block(self, block: int) -> list[int]:
        """Seeds of one block: the main test uses block 0, the final re-test block 1."""
        return self._seeds(self.cfg.run.first_seed + block * self.cfg.run.max_runs, self.cfg.run.max_runs)

    def _seeds(self, start: int, count: int) -> list[int]:
        """The seeds passed for run indices start … start + count − 1 (hashed or not)."""
        return [self.cfg.run.seed(i) for i in range(start, start + count)]

    def runner(self, sha: str) -> tuple[BuildRecord, Callable[[int], RunRecord] | None, int | None, str]:
        """Build the commit and pick its command variant: (build, run one seed, variant, why).

        The run callable is None (with the reason) when the commit cannot be tested."""
        build = self.ensure_built(sha)
        if not build.ok:
            return build, None, None, build.reason
        kept = Path(next(iter(build.binaries.values()))).parent
        env = run_env(self.cfg, kept)
        variant, why = self.variant_for(sha, build, env)
        if variant is None:
            return build, None, None, why
        values = {
            **build.binaries,
            "fixtures": str(self.cfg.fixtures_dir or ""),
            "config_dir": str(self.cfg.config_dir),
            "source": str(self.workspace.root),
            "build": str(self.state.build_dir(build_dir_key(self.cfg.build))),
        }
        workdir = self.state.root / "run"
        workdir.mkdir(exist_ok=True)
        argv = self.cfg.run.templates[variant].argv
        return build, (lambda seed: run_seed(self.cfg, argv, values, seed, workdir, env, variant)), variant, why

    def verdict(self, sha: str, *, role: str, mode: Mode = Mode(), alpha: float | None = None,
                beta: float | None = None, block: int = 0, subject: str = "") -> CommitVerdict:
        alpha = alpha if alpha is not None else self.cfg.test.alpha
        beta = beta if beta is not None else self.cfg.test.beta
        build, execute, variant, why = self.runner(sha)
        if execute is None:
            return self._skip(sha, subject, role, mode, alpha, beta, build, why)
        seeds = self.seed_block(block)
        acc = Accumulator(self, sha, mode, alpha, beta, len(seeds))
        outcome = sweep(
            seeds,
            self.state.get_runs(self.experiment, sha),
            execute=execute,
            consume=acc.feed,
            store=lambda rec: self.state.put_run(self.experiment, sha, rec),
            jobs=self.cfg.run.jobs or os.cpu_count() or 1,
        )
        verdict, reason = acc.conclusion()
        return self._verdict(sha, subject, role, mode, alpha, beta, build, acc, verdict, reason,
                             outcome.executed, variant, block=block)

    def _verdict(self, sha: str, subject: str, role: str, mode: Mode, alpha: float, beta: float,
                 build: BuildRecord, acc: "Accumulator", verdict: str, reason: str, executed: int,
                 variant: int | None, arm: str = "main", block: int = 0) -> CommitVerdict:
        ev = acc.evidence
        return CommitVerdict(
            sha=sha, subject=subject, role=role, verdict=verdict, runs=acc.consumed,
            counts=dict(zip(acc.names, acc.counts)), failures=dict(acc.failures),
            retried=acc.retried, log_e_bad=ev.log_e_bad if ev else 0.0,
            log_e_good=ev.log_e_good if ev else 0.0, reason=reason, mode=mode.kind, alpha=alpha,
            beta=beta, seeds=(acc.first, acc.last) if acc.first is not None else None,
            build=build.status, build_seconds=build.seconds, executed=executed,
            build_log=build.log, binaries=dict(build.binaries), variant=variant, arm=arm,
            block=block,
        )

    def arm_verdict(self, sha: str, arm: str, *, role: str, alpha: float | None = None,
                    beta: float | None = None, block: int = 0, subject: str = "") -> CommitVerdict:
        """The generic test on a cross-check arm: a server started at this commit, one HTTP
        request per seed. Its runs are stored under the arm's own digest."""
        alpha = alpha if alpha is not None else self.cfg.test.alpha
        beta = beta if beta is not None else self.cfg.test.beta
        spec = self.cfg.arms[arm]
        mode = Mode()
        build_cfg = self.cfg.build.model_copy(update={"targets": spec.targets, "binaries": spec.binaries})
        build = self._build(sha, build_cfg)
        if not build.ok:
            return self._skip(sha, subject, role, mode, alpha, beta, build, build.reason, arm=arm)
        port = free_port()
        kept = Path(next(iter(build.binaries.values()))).parent
        values = {**build.binaries, "port": str(port), "fixtures": str(self.cfg.fixtures_dir or ""),
                  "config_dir": str(self.cfg.config_dir)}
        argv = render_argv(spec.serve, values)
        experiment = self.cfg.arm_digest(arm)
        seeds = self.seed_block(block)
        done = self.state.get_runs(experiment, sha)
        # no server is started when the stored runs alone decide this verdict
        replayed = _replay_decides(Accumulator(self, sha, mode, alpha, beta, len(seeds)), seeds, done)
        server = nullcontext() if replayed else Server(
            argv, port=port, health=spec.health, startup_timeout=spec.startup_timeout,
            env=run_env(self.cfg, kept), log=self.state.log_path(f"server-{arm}-{sha}.log"),
            cwd=self.state.root)
        acc = Accumulator(self, sha, mode, alpha, beta, len(seeds))
        try:
            with server:
                outcome = sweep(
                    seeds, done,
                    execute=lambda seed: request_seed(spec, port, seed),
                    consume=acc.feed,
                    store=lambda rec: self.state.put_run(experiment, sha, rec),
                    jobs=spec.jobs,
                )
        except ServerError as exc:
            return self._skip(sha, subject, role, mode, alpha, beta, build, str(exc), arm=arm)
        verdict, reason = acc.conclusion()
        return self._verdict(sha, subject, role, mode, alpha, beta, build, acc, verdict, reason,
                             outcome.executed, None, arm, block)

    def variant_for(self, sha: str, build: BuildRecord, env: dict[str, str]) -> tuple[int | None, str]:
        """Which command variant this commit's binary accepts (asked once, then remembered)."""
        variants = self.cfg.run.templates
        if len(variants) == 1 and self.cfg.run.variants is None:
            return 0, "argv"
        key = f"variant:{self.build_key}:{self.experiment}:{sha}"
        if (known := self.state.get_kv(key)) is not None:
            index, why = json.loads(known)
            return index, why
        binary = next(iter(build.binaries.values()))
        res = run([binary, *self.cfg.run.help_args], env=env, timeout=60,
                  cwd=self.state.root)
        index, why = pick_variant(res.stdout + res.stderr, variants)
        if index is None and not (res.stdout + res.stderr).strip():
            why = f"`{Path(binary).name} {' '.join(self.cfg.run.help_args)}` printed nothing (exit {res.returncode})"
        self.state.put_kv(key, json.dumps([index, why]))
        if index is not None:
            self.progress.step(f"  {sha[:12]} uses command variant {index}")
        return index, why

    def _test(self, counts: Sequence[int], mode: Mode, alpha: float, beta: float, budget: int) -> stats.Evidence:
        if mode.kind == "sticky":  # the sticky bisection decides from all commits at once
            return stats.Evidence(None, sum(counts), 0.0, 0.0, "")
        if mode.kind == "bad-model":
            # Not a test: keep measuring the (already BAD) endpoint until q̂ is good enough for
            # bisect mode relative to the size of the bug (stats.bad_endpoint_enough).
            enough = stats.bad_endpoint_enough(counts, self.reference)
            return stats.Evidence(stats.Decision.BAD if enough else None, sum(counts), 0.0, 0.0,
                                  f"bad-endpoint model from {sum(counts)} counted runs")
        ref = self.reference
        if mode.kind == "two-point":
            assert mode.q_bad is not None
            if ref.control is not None:  # a control sample's zeros are not impossibilities
                m = [c + 0.5 for c in ref.control]
                ref = stats.Reference(ref.names, tuple(c / sum(m) for c in m))
            return stats.test_two_point(counts, ref, mode.q_bad,
                                        alpha=alpha, beta=beta, max_runs=budget)
        if ref.control is not None:
            return stats.test_against_control(counts, ref, alpha=alpha, beta=beta,
                                              tolerance=self.cfg.test.tolerance, max_runs=budget)
        return stats.test_against_reference(counts, ref, alpha=alpha, beta=beta,
                                            tolerance=self.cfg.test.tolerance, max_runs=budget)

    def _skip(self, sha: str, subject: str, role: str, mode: Mode, alpha: float, beta: float,
              build: BuildRecord, reason: str, arm: str = "main") -> CommitVerdict:
        return CommitVerdict(
            sha=sha, subject=subject, role=role, verdict="skip", runs=0, counts={}, failures={},
            retried=0, log_e_bad=0.0, log_e_good=0.0, reason=reason, mode=mode.kind, alpha=alpha,
            beta=beta, seeds=None, build=build.status, build_seconds=build.seconds,
            build_log=build.log, arm=arm,
        )


class Accumulator:
    """Counts one commit's runs in seed order and asks the sequential test after each."""

    def __init__(self, tester: Tester, sha: str, mode: Mode, alpha: float, beta: float, budget: int):
        self.tester, self.sha, self.mode = tester, sha, mode
        self.alpha, self.beta, self.budget = alpha, beta, budget
        self.ref = tester.reference
        self.names = self.ref.names
        self.counts = [0] * len(self.names)
        self.failures: Counter[str] = Counter()
        self.consumed = self.retried = 0
        self.first: int | None = None
        self.last: int | None = None
        self.evidence: stats.Evidence | None = None
        self.skip: str | None = None
        self.last_index: int | None = None  # category of the last run fed (None: not counted)

    def feed(self, rec: RunRecord) -> bool:
        """Count one run; True when the verdict is decided (or the commit is to be skipped)."""
        self.consumed += 1
        self.first = rec.seed if self.first is None else self.first
        self.last = rec.seed
        self.retried += rec.attempts - 1
        self.last_index = None
        if not rec.ok:
            self.failures[rec.status] += 1
            failed = sum(self.failures.values())
            if failed >= MIN_FAILURES_TO_SKIP and failed * 2 > self.consumed:
                self.skip = _failure_reason(self.failures, self.consumed, rec)
                return True
            return False
        obs = observe(rec.tokens or (), self.tester.cfg.statistic)
        idx = self.ref.index(obs.outcome, obs.met_condition)
        self.last_index = idx
        if idx is not None:
            self.counts[idx] += 1
        self.evidence = self.tester._test(self.counts, self.mode, self.alpha, self.beta, self.budget)
        self.tester.progress.status(
            f"  {self.sha[:12]} seeds {self.consumed}/{self.budget}: {_short_counts(self.names, self.counts)}"
        )
        return self.evidence.decision is not None

    def conclusion(self) -> tuple[str, str]:
        ev = self.evidence
        if self.skip:
            return "skip", self.skip
        if ev is not None and ev.decision is not None:
            return ev.decision.value, ev.reason
        return "inconclusive", (f"undecided after {self.consumed} runs (budget {self.budget})"
                                + (f"; {ev.reason}" if ev is not None else "; no run met the condition"))


def _replay_decides(acc: "Accumulator", seeds: Sequence[int], done: dict[int, RunRecord]) -> bool:
    """Whether the stored runs alone reach a decision (then no server needs to start)."""
    for seed in seeds:
        rec = done.get(seed)
        if rec is None:
            return False
        if acc.feed(rec):
            return True
    return True


def _failure_reason(failures: Counter[str], consumed: int, last: RunRecord) -> str:
    parts = ", ".join(f"{n} {status}" for status, n in failures.most_common())
    return f"runs mostly fail ({parts} of {consumed}); last: {last.detail or last.status}"


def _short_counts(names: Sequence[str], counts: Sequence[int]) -> str:
    return " ".join(f"{n}={c}" for n, c in zip(names, counts) if c)


def run_test(cfg: Config, state: State, ref: str, *, progress: Progress | None = None,
             config_path: str = "CONFIG") -> dict:
    """`bisectbot test`: one commit's verdict with the generic test, as the JSON report."""
    from bisectbot.report import environment, reference_json

    progress = progress or Progress(quiet=True)
    ws = Workspace(cfg.repo_source, state.clone_dir)
    progress.step(f"syncing {ws.source} …")
    ws.sync()
    sha = ws.resolve(ref)
    job = f"test-{sha[:12]}-{cfg.digest()}"
    state.start_job(job, "test", {"commit": sha, "ref": ref, "config": config_path})
    tester = Tester(cfg, state, ws, progress)
    progress.step(f"testing {ref} = {sha[:12]}")
    subject = ws.info(sha).subject
    v = tester.verdict(sha, role="test", subject=subject)
    state.put_verdict(job, sha, "test", v.verdict, v.to_json())
    arms = {}
    for name in cfg.arms:
        progress.step(f"testing arm {name} at {sha[:12]}")
        av = tester.arm_verdict(sha, name, role="test", subject=subject)
        state.put_verdict(job, sha, f"test@{name}", av.verdict, av.to_json())
        progress.step(f"  arm {name}: {av.verdict.upper()} after {av.runs} runs — {av.reason}")
        arms[name] = av.to_json()
    result = {
        "schema_version": 1,
        "kind": "test",
        "job": job,
        "commit": sha,
        "ref": ref,
        "verdict": v.verdict,
        "runs": v.runs,
        "counts": v.counts,
        "retried": v.retried,
        "failures": v.failures,
        "reason": v.reason,
        "builds": len(tester.builds_done),
        "detail": v.to_json(),
        "arms": arms,
        "reference": reference_json(cfg, tester.resolved),
        "config": {"name": cfg.name, "digest": cfg.digest(), "path": config_path},
        "environment": environment(cfg),
        "reproduce": f"bisectbot test {config_path} --commit {sha}",
    }
    state.finish_job(job, "done", result)
    return result
