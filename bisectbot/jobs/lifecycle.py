"""Jobs: `test`, `bisect` and `check` from start to finish, and the only writer of the jobs table.

A job is planned first (refs resolved, the job id fixed: `plan_test`, `plan_bisect`), then run.
While it runs, every verdict it reaches is stored as it happens (an observer of the pipeline's
events); it ends `done` with its report, `failed` with the reason, or `cancelled` with who asked.
Running a job again with the same plan resumes it: builds and runs are replayed from storage.

`Session` wires the stages for one config and state directory, in the order data flows:
clone → builder and runner → reference → tester. The CLI and the GitHub bot both use it.

A pull request's head (`pull/<N>/head`) is untrusted code: `run_check` tests it in an
`untrusted` session, whose tester builds and runs in the sandbox (processes.sandbox) over a
throwaway box that holds its export, build, binaries and runs, deleted afterwards; the
reference is still resolved by the trusted runner. It is only checked: never recorded as the
last known good commit, never bisected, no cross-check arms.
"""

from __future__ import annotations

import hashlib
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from bisectbot.bisecting import bisect, summary
from bisectbot.bisecting.budget import Budget, BudgetLimits
from bisectbot.bisecting.narrow import narrow_plan
from bisectbot.building.buildkeys import Placeholders, toolchain
from bisectbot.building.workspace import Export, ExportBudget, Workspace
from bisectbot.config import Config
from bisectbot.core.estimate import estimate
from bisectbot.core.plan import BisectPlan, Narrowing, ReportContext, plan_level
from bisectbot.errors import BisectbotError, RefError, StateError
from bisectbot.events import (
    Built,
    Cancelled,
    CommitTestStarted,
    EstimateReady,
    Event,
    Events,
    Scanned,
    StorageTrimmed,
    Syncing,
    VerdictReached,
)
from bisectbot.jobs.gc import collect, storage_caps
from bisectbot.judge.numeric import Numbers
from bisectbot.judge.reference import GrowingControl, ResolvedReference, resolve_reference
from bisectbot.judge.runner import CommitRunner
from bisectbot.judge.verdict import CommitTester
from bisectbot.processes.procs import stop_drivers
from bisectbot.processes.sandbox import BoxState, Limits, Sandbox, Scratch, sandbox
from bisectbot.records.commits import Ask, BuildRecord
from bisectbot.records.jobargs import BisectArgs, JobArgs, TestArgs
from bisectbot.records.refs import pull_number
from bisectbot.records.reports import BisectReport, CommitReport, ConfigSummary, JobStop
from bisectbot.state.statedir import StateDir
from bisectbot.state.storage import LastGood
from bisectbot.statistics.outcome import Find, Verdict


class Session:
    """What one command works with: a config, a state directory and the event channel. The
    stages are made on first use; the reference is resolved before the tester that uses it."""

    def __init__(
        self,
        cfg: Config,
        state: StateDir,
        events: Events | None = None,
        *,
        config_path: str = "CONFIG",
        cluster: Any = None,
        worker_root: Path | None = None,
        sandbox: Sandbox | None = None,
        name_build_log: bool = True,
    ):
        self.cfg, self.state, self.config_path = cfg, state, config_path
        # a failed build names the `bisectbot build-log` command (with local paths: not for the bot)
        self.name_build_log = name_build_log
        self.events = events or Events()
        # a Dask client: verdicts are reached on its workers, K commits per round (cluster)
        self.cluster, self.worker_root = cluster, worker_root or state.root / "workers"
        self.sandbox = sandbox  # set: the commits under test are untrusted code
        self.scratch: Scratch | None = None  # and this is the throwaway box they are built in

    @cached_property
    def workspace(self) -> Workspace:
        return Workspace(self.cfg.repo_source, self.state.clone_dir)

    @cached_property
    def runner(self) -> CommitRunner:
        runner = CommitRunner(self.cfg, self.state, self.workspace, self.events)
        runner.builder.config_path = self.config_path if self.name_build_log else None
        return runner

    @cached_property
    def test_runner(self) -> CommitRunner:
        """The runner of the commits under test: the session's, or in the sandbox one of its own
        (the reference, from the config, is still built and run by the trusted one)."""
        if self.sandbox is None:
            return self.runner
        if self.scratch is None:  # never the trusted runner for untrusted code
            raise BisectbotError("untrusted code needs its throwaway box (jobs.untrusted makes one)")
        box = BoxState(self.scratch)
        inputs = {
            "fixtures": str(self.scratch.copy_in("fixtures", self.cfg.fixtures_dir)),
            "config_dir": str(self.scratch.copy_in("config", self.cfg.config_dir, config_files(self.cfg))),
        }
        limits = self.cfg.untrusted
        budget = ExportBudget(max_files=limits.max_files, max_bytes=limits.disk_mb << 20)
        export = Export(self.workspace, box.clone_dir, after=self.sandbox.hand_over_tree, budget=budget)
        return CommitRunner(self.cfg, box, export, self.events, sandbox=self.sandbox, inputs=inputs)

    @cached_property
    def reference(self) -> ResolvedReference:
        return resolve_reference(self.cfg, self.runner)

    @cached_property
    def tester(self) -> CommitTester:
        if self.cfg.statistic.numeric:
            if self.cluster is not None:
                raise BisectbotError(
                    f"statistic.kind {self.cfg.statistic.kind}: numbers are judged here, not on a cluster yet: "
                    "leave out --workers and --scheduler"
                )
            numbers = Numbers(self.cfg, self.runner, self.reference)
            return CommitTester(
                self.cfg, self.test_runner, self.reference.stats_reference(), self.events, None, numbers
            )
        if self.cluster is not None:
            if self.sandbox is not None:
                raise BisectbotError("untrusted code is built and run here, in the sandbox, never on a cluster")
            from bisectbot.cluster import ClusterTester

            # a control sample is built and run here, by the coordinator's runner; the workers
            # make the tested runs and the coordinator pairs them seed for seed (ClusterTester)
            cluster_control = (
                GrowingControl(self.cfg, self.runner, self.reference) if self.reference.control is not None else None
            )
            return ClusterTester(
                self.cfg,
                self.runner,
                cluster_control.reference if cluster_control else self.reference.stats_reference(),
                self.events,
                self.cluster,
                self.worker_root,
                cluster_control,
            )
        control = GrowingControl(self.cfg, self.runner, self.reference) if self.reference.control is not None else None
        reference = control.reference if control is not None else self.reference.stats_reference()
        return CommitTester(self.cfg, self.test_runner, reference, self.events, control)

    def bind_good_end(self, sha: str) -> None:
        """A reference "like the good end" (`reference: good`, `--reference good`) is measured
        at this job's good end: bound before the reference is resolved (its stages are made
        again from the bound config if they were made already)."""
        bound = self.cfg.with_good_end(sha)
        if bound is self.cfg:
            return
        self.cfg = bound
        for made in ("runner", "test_runner", "reference", "tester"):
            self.__dict__.pop(made, None)

    def builds(self) -> int:
        """Builds this process made (not replayed), trusted and sandboxed."""
        extra = self.test_runner.builder.built if self.sandbox is not None else []
        return len(self.runner.builder.built) + len(extra)

    def build_many(self, shas: Sequence[str]) -> list[BuildRecord]:
        """Build commits: on the cluster's workers when there is one, else here."""
        return list(self.tester.build_many(shas))

    def scan(self) -> Callable[[str], list[str] | None] | None:
        """How a commit's inputs are found without building it, here only (None on a cluster:
        its workers build the ends at once)."""
        if self.cluster is not None:
            return None
        builder, cfg = self.runner.builder, self.cfg.build
        return lambda sha: builder.scan_inputs(sha, cfg)

    def sync(self) -> None:
        self.events.emit(Syncing(self.workspace.source))
        self.workspace.sync()

    def report_context(self) -> ReportContext:
        cfg = self.cfg
        return ReportContext(
            reference=self.reference.summary(cfg),
            config=ConfigSummary(cfg.name, cfg.digest(), self.config_path, self.runner.experiment),
            environment=toolchain(cfg.build),
        )


def job_id(kind: str, cfg: Config, *parts: str) -> str:
    blob = "\0".join([kind, cfg.digest(), *parts]).encode()
    return f"{kind}-{hashlib.sha256(blob).hexdigest()[:12]}"


@dataclass
class _Ending:
    """How a running job ended: the caller puts its report here, and the job is recorded done."""

    report: BisectReport | CommitReport | None = None


@contextmanager
def _running(session: Session, job: str, args: JobArgs) -> Iterator[_Ending]:
    """A job's life: registered (or resumed), its verdicts stored as they come, and its end
    recorded: done with the report the caller leaves in the `_Ending`, or failed or cancelled."""
    store = session.state.store
    store.start_job(job, args)

    def record(event: Event) -> None:
        if isinstance(event, VerdictReached):
            store.put_verdict(job, event.verdict)

    ending = _Ending()
    with session.events.observing(record):
        try:
            yield ending
        except Cancelled as stop:
            store.finish_job(job, stop_of(stop))
            raise
        except BisectbotError as exc:
            try:
                store.finish_job(job, stop_of(exc))
            except StateError:
                pass  # the database failed too (a full disk): the first reason is the one to tell
            raise
    if ending.report is not None:
        store.finish_job(job, ending.report)


def stop_of(exc: Cancelled | BisectbotError) -> JobStop:
    """How a job that raised `exc` ended, as its row records it (a caller that caught the error
    renders this instead of reading the row back)."""
    if isinstance(exc, Cancelled):
        return JobStop("cancelled", by=exc.who)
    return JobStop("failed", str(exc))


# -- test ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CommitPlan:
    job: str
    sha: str
    ref: str


def limits(cfg: Config) -> Limits:
    u = cfg.untrusted
    return Limits(u.cpu_seconds, u.memory_mb, u.file_size_mb, u.processes, u.disk_mb, u.output_mb)


def config_files(cfg: Config) -> list[Path]:
    """The files under the config's directory that its build or run arguments name (copied
    into the box for untrusted code; nothing else of that directory is)."""
    values = {"config_dir": str(cfg.config_dir), "fixtures": str(cfg.fixtures_dir or "")}
    args = [a for v in cfg.build.choices for a in (*cfg.build.cmake_args, *v.cmake_args)]
    args += [a for command in cfg.build.commands for a in command]
    args += [a for v in cfg.run.templates for a in v.argv]
    named = [Path(a.format_map(Placeholders(values)).split("=", 1)[-1]) for a in args if "{config_dir}" in a]
    return [p for p in named if p.is_relative_to(cfg.config_dir)]


@contextmanager
def untrusted(session: Session) -> Iterator[Session]:
    """A session for untrusted code: the same config without cross-check arms, its tester in
    the sandbox over a throwaway box (removed afterwards, in the background). SandboxError (before anything is
    fetched) when no sandbox can be made here."""
    cfg = session.cfg
    scratch = Scratch(cfg.untrusted.scratch)
    try:
        box = sandbox(limits(cfg), scratch.box)
        scratch.hand_over(box)
        pr = Session(
            cfg.without_arms(),
            session.state,
            session.events,
            config_path=session.config_path,
            sandbox=box,
            name_build_log=False,
        )
        pr.scratch = scratch
        try:
            yield pr
        finally:
            stop_drivers(box)
            if "test_runner" in pr.__dict__:
                pr.test_runner.state.close()
    finally:
        scratch.close_later()  # off the answer's path (its processes are stopped above)


def _trusted_only(*refs: str, session: Session | None = None) -> None:
    """A pull request's head is untrusted code: never built or run outside the sandbox."""
    for ref in refs:
        if pull_number(ref) is not None and (session is None or session.sandbox is None):
            raise RefError(
                f"{ref} is a pull request's head, untrusted code: it is only checked in the "
                f"sandbox (`bisectbot check --ref {ref}`, `/check ref={ref}`), never tested "
                "or bisected as trusted code"
            )


def plan_test(session: Session, ref: str) -> CommitPlan:
    _trusted_only(ref, session=session)
    session.sync()
    sha = session.workspace.resolve(ref)
    if (number := pull_number(ref)) is not None:  # its own job (and comment) per pull request and head
        return CommitPlan(f"test-{sha[:12]}-{session.cfg.digest()}-pull{number}", sha, ref)
    return CommitPlan(f"test-{sha[:12]}-{session.cfg.digest()}", sha, ref)


def run_test(session: Session, plan: CommitPlan) -> CommitReport:
    """`bisectbot test`: one commit's verdict with the generic test, and its cross-check arms."""
    cfg = session.cfg
    with _running(session, plan.job, TestArgs(plan.sha, plan.ref, session.config_path)) as ending:
        session.events.emit(CommitTestStarted(plan.ref, plan.sha))
        tester = session.tester
        detail = tester.verdict(plan.sha, Ask(role="test", alpha=cfg.test.alpha, beta=cfg.test.beta))
        arms = {
            name: tester.verdict(plan.sha, Ask(role="test", alpha=cfg.test.alpha, beta=cfg.test.beta, arm=name))
            for name in cfg.arms
        }
        context = session.report_context()
        reproduce = (
            f"bisectbot test {session.config_path} --commit {plan.sha}"
            if pull_number(plan.ref) is None
            else f"bisectbot check {session.config_path} --ref {plan.ref}  # head {plan.sha}"
        )
        report = CommitReport(
            job=plan.job,
            commit=plan.sha,
            ref=plan.ref,
            detail=detail,
            arms=arms,
            builds=session.builds(),
            reference=tester.grown_reference(context.reference),
            config=context.config,
            environment=context.environment,
            reproduce=reproduce,
            eta=session.cfg.test.indifference,
            tolerance=session.cfg.test.tolerance,
            control_runs=tester.control_runs([detail]),
        )
        ending.report = report
    return report


# -- bisect ----------------------------------------------------------------------------------------
def plan_bisect(
    session: Session,
    good_ref: str,
    bad_ref: str,
    *,
    find: Find = Find.BAD,
    strategy: str = "auto",
    narrowing: Narrowing = Narrowing(),
    skip: Sequence[str] = (),
    exclude: Sequence[str] = (),
    scan: bool = False,
) -> BisectPlan:
    """Resolve the refs and the first-parent line, fix the job id and the per-step level
    (the line is narrowed when the bisect runs, once the ends are built). `skip` and `exclude`
    are the user's --skip and --exclude refs (a commit, or A..B: the line's commits after A up
    to B), the same thing under two names (errors name the one typed). `scan`: --scan (the
    ends may both test GOOD; every commit between is tested until one departs)."""
    _trusted_only(good_ref, bad_ref, *skip, *exclude)
    session.sync()
    ws = session.workspace
    good, bad = ws.resolve(good_ref), ws.resolve(bad_ref)
    session.bind_good_end(good if find is Find.BAD else bad)  # the working end: "like the good end"
    cfg = session.cfg
    line = ws.first_parent_line(good, bad)
    skipped = user_skips(ws, line, [*(("--skip", r) for r in skip), *(("--exclude", r) for r in exclude)])
    job = job_id(
        "bisect",
        cfg,
        good,
        bad,
        find.value,
        *(() if strategy == "auto" else (strategy,)),
        *narrowing.job_parts(),
        *(f"skip={sha}" for sha in skipped),
        *(("scan",) if scan else ()),
    )
    level = min(cfg.test.alpha, cfg.test.beta, plan_level(len(line), cfg.test.confidence, scan))
    return BisectPlan(
        job,
        tuple(line),
        good_ref,
        bad_ref,
        find,
        strategy,
        level,
        session.config_path,
        narrowing=narrowing,
        user_skipped=skipped,
        scan=scan,
    )


def user_skips(ws: Workspace, line: Sequence[str], refs: Sequence[tuple[str, str]]) -> tuple[str, ...]:
    """The commits of `line` the user skipped, in line order, from (option, ref) pairs: each ref
    resolved like --good and --bad (RefError, exit 2, names the option and the ref that does not
    resolve or is not between the ends); `A..B` skips the line's commits after A up to B, as
    `git bisect skip A..B`."""
    where = {sha: i for i, sha in enumerate(line)}
    span = f"{line[0][:12]}..{line[-1][:12]}"

    def position(ref: str, option: str, whole: str) -> int:
        sha = ws.resolve(ref)
        if sha not in where:
            raise RefError(f"{option} {whole}: {ref} ({sha[:12]}) is not on the first-parent line {span}")
        return where[sha]

    picked: set[int] = set()
    for option, ref in refs:
        if ".." in ref and not ref.startswith(".") and not ref.endswith("."):
            first, last = ref.split("..", 1)
            a, b = position(first, option, ref), position(last, option, ref)
            if a >= b:
                raise RefError(f"{option} {ref}: {first} is not before {last} on the line {span}")
            chosen = range(a + 1, b + 1)
        else:
            at = position(ref, option, ref)
            chosen = range(at, at + 1)
        for i in chosen:
            if i in (0, len(line) - 1):
                end = "--good" if i == 0 else "--bad"
                raise RefError(
                    f"{option} {ref} includes the {end} end {line[i][:12]}: an end is always tested "
                    "(give another ref as the end instead)"
                )
            picked.add(i)
    return tuple(line[i] for i in sorted(picked))


def bisect_args(plan: BisectPlan) -> BisectArgs:
    """What the jobs table keeps of a planned bisect: its ends, as resolved and as the user
    gave them, and how it was asked."""
    how = plan.narrowing
    return BisectArgs(
        plan.good,
        plan.bad,
        plan.good_ref,
        plan.bad_ref,
        plan.find,
        plan.strategy,
        plan.config_path,
        paths=how.paths,
        also=how.also,
        all_commits=not how.enabled,
        skip=plan.user_skipped,
    )


def run_bisect(session: Session, plan: BisectPlan, *, limits: BudgetLimits = BudgetLimits()) -> BisectReport:
    """Run (or resume) a planned bisect; EndpointError when an endpoint does not test as given.
    `session` is the one that planned it, or one made with its config (`plan_bisect` bound the
    reference "like the good end" there).

    An estimate of its cost is told first. With `limits` (--max-builds, --deadline) that run out,
    it ends between steps with status `stopped` and the range so far (a `done` job: the same
    command resumes it). The state directory's size caps (config `storage:`) are applied after."""
    start, built, ran_before = time.monotonic(), [], _running_seconds(session)

    def on_built(event: Event) -> None:  # every build this invocation made (and scan), the ends' too
        if isinstance(event, (Built, Scanned)):
            built.append(event.seconds)

    args = bisect_args(plan)
    with _running(session, plan.job, args) as ending, session.events.observing(on_built):
        # what it will cost, from the range and what this state directory has seen (its builds'
        # seconds, runs per tested commit, seconds per run), told first
        store, cfg = session.state.store, session.cfg
        key = session.runner.builder.key(cfg.build)
        stored = store.kept_builds(key, plan.line)
        told = estimate(plan.total, store.timings(key), parallel=cfg.run.jobs or os.cpu_count() or 1, stored=stored)
        session.events.emit(EstimateReady(told.text()))
        budget = _budget(session, limits)

        def narrow(p: BisectPlan) -> BisectPlan:
            return narrow_plan(p, session.cfg, session.workspace, session.build_many, session.events, session.scan())

        report = bisect.run_bisect(
            plan, session.tester, session.events, session.report_context(), budget, narrow=narrow
        )
        ran = _running_seconds(session)
        report = summary.with_time(
            report, time.monotonic() - start, sum(built), ran - (ran_before or 0.0) if ran is not None else None
        )
        ending.report = report
    apply_caps(session.state, session.cfg, session.events)
    return report


def _running_seconds(session: Session) -> float | None:
    """What the session's tester spent running the program so far (0 before it is made; None
    for a cluster's tester, whose workers run it)."""
    tester = vars(session).get("tester")  # a cached_property: not made here just to ask
    if tester is None:
        return 0.0
    spent = getattr(tester, "spent", None)
    return spent.running if spent is not None else None


def _budget(session: Session, limits: BudgetLimits) -> Budget | None:
    """The budget of this invocation, its build check on every builder the session uses. The
    reference and the tester are made first: what they build is not the bisect's to stop."""
    if not limits.any:
        return None
    if limits.max_builds is not None and session.cluster is not None:
        raise BisectbotError(
            "--max-builds counts the builds made here: it does not work with --workers or --scheduler (use --deadline)"
        )
    session.report_context()  # resolves the reference, and the tester is made with it
    _ = session.tester
    budget = Budget(limits, session.builds)
    for runner in {id(r): r for r in (session.runner, session.test_runner)}.values():
        runner.builder.guard = budget.before_build
    return budget


def apply_caps(state: StateDir, cfg: Config, events: Events) -> None:
    """The config's size caps (`storage:`), applied after a job; nothing when it sets none."""
    caps = storage_caps(cfg)
    if caps.any:
        result = collect(state, caps)
        if result.removed:
            events.emit(StorageTrimmed(result.summary()))


# -- check -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CheckResult:
    """A scheduled check: the test of the ref, the last known good commit before it, and the
    bisect to run when the fix no longer holds (None when there is nothing to bisect)."""

    test: CommitReport
    last_good: LastGood | None
    bisect: BisectPlan | None
    pull: int | None = None  # a pull request's head, checked in the sandbox
    sandbox: str | None = None  # what the sandbox allowed it, for people


def run_check(session: Session, ref: str, *, date: str) -> CheckResult:
    """Test `ref`; GOOD becomes the last known good commit, BAD plans a bisect from it. A pull
    request's head (`pull/<N>/head`) is tested in the sandbox, and only tested."""
    if (number := pull_number(ref)) is not None:
        with untrusted(session) as pr:
            assert pr.sandbox is not None
            return CheckResult(run_test(pr, plan_test(pr, ref)), None, None, number, pr.sandbox.text())
    store, name = session.state.store, session.cfg.name
    last = store.last_good(name)
    control = session.cfg.reference.control
    if control is not None and control.unbound:  # like the good end: the last known good commit
        if last is None:
            raise BisectbotError(
                "the reference is like the good end (reference: good), and there is no last known good "
                "commit yet: give the config a reference.control commit, or bisect once"
            )
        session.bind_good_end(last.sha)
    report = run_test(session, plan_test(session, ref))
    if report.verdict is Verdict.GOOD:
        store.put_last_good(name, LastGood(report.commit, ref, date))
    plan = None
    if report.verdict is Verdict.BAD and last is not None and last.sha != report.commit:
        plan = replace(plan_bisect(session, last.sha, report.commit), good_ref=last.sha[:12], bad_ref=ref)
    return CheckResult(report, last, plan)
