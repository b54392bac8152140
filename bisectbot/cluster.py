"""Cluster stage: verdicts built and tested on Dask workers, several commits at once.

`ClusterTester` answers the same questions as `verdict.CommitTester`, but each commit is checked out,
built and run on a Dask worker (`distributed`), and `verdicts` answers a whole round at once:
the bisect then probes K commits per round (`search.kary_search`). What each worker needs: the
toolchain (the same compiler as the coordinator: a worker with another one refuses the task,
builds are never mixed), access to the repository the config names, the config's fixtures at
the same paths, and a directory of its own (`<root>/worker-<name>`: clone, build directories,
kept binaries; ccache as usual). Start workers with one thread each (`dask worker ADDRESS
--nthreads 1`): a worker's state directory is used by one task at a time.

Nothing is lost when something dies. Every run a worker makes is streamed to the coordinator
(a `distributed.Queue`) and stored in its state database as it arrives; a task is handed the
runs the coordinator already has for its commit, so a seed is never run twice, whichever worker
runs it. Runs are filed under the build's identity (commit, build key with the compiler, build
variant), not the binary's bytes, which embed each worker's source path. A worker lost mid-task
has its task rescheduled by Dask on another worker (not a SKIP); the coordinator remembers
which worker built which commit and sends it there first (its build is reused); a coordinator
killed mid-round resumes on rerun from its database and the workers' stored builds (a commit
the coordinator never heard was built is sent to the worker whose database holds its build).
"""

from __future__ import annotations

import platform
import re
import time
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Iterator, Sequence

from bisectbot.building.buildkeys import toolchain_identity
from bisectbot.building.workspace import Workspace
from bisectbot.config import Config
from bisectbot.config.seeds import SEED_BLOCK
from bisectbot.errors import BisectbotError, ClusterError
from bisectbot.events import Events, VerdictReached, WorkerDone
from bisectbot.judge.reference import GrowingControl
from bisectbot.judge.runner import CommitRunner, Prepared
from bisectbot.judge.verdict import CommitTester, Feed, Untestable, judge
from bisectbot.records.commits import Ask, BuildRecord, CommitVerdict, RunRecord, Tally, masked
from bisectbot.state import storage
from bisectbot.state.statedir import StateDir
from bisectbot.statistics import stats
from bisectbot.statistics.outcome import Verdict


@dataclass(frozen=True)
class WorkTask:
    """One verdict for a worker to reach: everything it needs travels with it."""

    cfg: Config
    root: str  # workers' state directories go under it
    sha: str
    ask: Ask
    reference: stats.Reference
    compiler: str  # the coordinator's toolchain
    known: dict[str, dict[int, RunRecord]]  # runs the coordinator has for this commit, by run key
    queue: str  # where to stream each run


@dataclass(frozen=True)
class WorkResult:
    verdict: CommitVerdict | None  # None for a build alone
    worker: str
    host: str
    compiler: str
    build: BuildRecord | None
    built: bool  # this task built the commit (not replayed)


def _own_dir(root: str, worker: Any = None) -> tuple[str, Path]:
    """On a worker: its name and its own state directory under `root`."""
    from distributed import get_worker

    name = str((worker or get_worker()).name)
    return name, Path(root) / f"worker-{re.sub(r'[^A-Za-z0-9._-]', '_', name)}"


def _worker_root(task: WorkTask) -> tuple[str, str, Path]:
    """On a worker: its name, its toolchain (refusing the task when it is not the coordinator's)
    and its own state directory."""
    name, root = _own_dir(task.root)
    mine = toolchain_identity()
    if mine != task.compiler:
        raise ClusterError(
            f"worker {name} on {platform.node()} compiles with {mine!r}, the coordinator "
            f"with {task.compiler!r}: refused (builds are never mixed)"
        )
    return name, mine, root


def held_builds(root: str, build_key: str, shas: list[str], dask_worker: Any = None) -> list[str]:
    """On a worker (`Client.run` passes `dask_worker`), between rounds: which of `shas` its own
    database holds a good build of. Read-only and without the state lock (a task may hold it);
    a database it cannot read holds nothing, since the answer only says where a task goes first."""
    _, own = _own_dir(root, dask_worker)
    return storage.held_builds(own, build_key, shas)


def _runner(cfg: Config, state: StateDir) -> CommitRunner:
    """A worker's runner: its own clone and state directory, keys that name commits (portable)."""
    return CommitRunner(cfg, state, Workspace(cfg.repo_source, state.clone_dir), Events(), portable=True)


@contextmanager
def _streaming_runner(task: WorkTask) -> Iterator[tuple[str, str, StateDir, CommitRunner]]:
    """On a worker: its name, toolchain, state directory (holding the runs the coordinator sent)
    and a runner that streams every run it stores back to the coordinator."""
    from distributed import Queue

    name, mine, root = _worker_root(task)
    queue = Queue(task.queue)
    with StateDir(root) as state:
        for key, runs in task.known.items():
            state.store.add_runs(key, task.sha, list(runs.values()))
        runner = _runner(task.cfg, state)
        runner.on_run = lambda key, sha, rec: queue.put((key, sha, asdict(rec)))
        yield name, mine, state, runner


def work(task: WorkTask) -> WorkResult:
    """On a worker: build and test the commit in the worker's own state directory, streaming
    every run to the coordinator."""
    with _streaming_runner(task) as (name, mine, state, runner):
        verdict = CommitTester(task.cfg, runner, task.reference, Events()).verdict(task.sha, task.ask)
        build = state.store.build(runner.builder.key(task.cfg.build), task.sha)
        return WorkResult(verdict, name, platform.node(), mine, build, bool(runner.builder.built))


@dataclass(frozen=True)
class RunsResult:
    """A batch of one commit's runs, reached on a worker (records None: it cannot be run)."""

    records: list[RunRecord] | None
    build: BuildRecord | None
    variant: int | None
    why: str
    worker: str
    host: str
    compiler: str
    built: bool


def work_runs(task: WorkTask, block: int, start: int, count: int) -> RunsResult:
    """On a worker: the commit's runs for the seeds start … start + count − 1 of `block` (built
    first when needed), each streamed to the coordinator as every run is."""
    with _streaming_runner(task) as (name, mine, _state, runner):
        prepared: Prepared | None = runner.prepare(task.sha)
        records = None
        seeds = runner.seed_block(task.sha, block, start + count)[start:]
        while prepared is not None and prepared.executor is not None:
            with runner.runs(prepared, seeds) as stream:
                records = list(stream)
            tally = Tally(())
            for rec in records:
                tally.add(rec, None)
            if not tally.mostly_failed or task.cfg.statistic.failures_counted:
                break
            # as on every tester: the variant's runs mostly fail, the next one that fits is tried
            retry = runner.variant_failed(prepared, tally.failure_reason())
            if retry is None:
                break
            prepared, records = retry, None
        assert prepared is not None
        return RunsResult(
            records,
            prepared.build,
            prepared.variant,
            prepared.why,
            name,
            platform.node(),
            mine,
            bool(runner.builder.built),
        )


def work_build(task: WorkTask) -> WorkResult:
    """On a worker: only build the commit (the ends of a bisect, whose inputs narrow the line)."""
    name, mine, root = _worker_root(task)
    with StateDir(root) as state:
        runner = _runner(task.cfg, state)
        build = runner.builder.ensure(task.sha, task.cfg.build)
        return WorkResult(None, name, platform.node(), mine, build, bool(runner.builder.built))


class ClusterTester(CommitTester):
    """A tester whose verdicts are reached on a Dask cluster, `width` at a time."""

    where = "cluster"

    def __init__(
        self,
        cfg: Config,
        runner: CommitRunner,
        reference: stats.Reference,
        events: Events,
        client: Any,
        root: Path,
        control: GrowingControl | None = None,
    ):
        super().__init__(cfg, runner, reference, events, control)
        self.client, self.root = client, root
        self.compiler = toolchain_identity()
        self.queue = f"bisectbot-runs-{uuid.uuid4().hex[:12]}"
        workers = client.scheduler_info()["workers"]
        if not workers:
            raise ClusterError(f"the Dask cluster at {client.scheduler.address} has no workers")
        self.width = len(workers)
        self.builds: list[BuildRecord] = []  # the builds made for this bisect, with worker and compiler

    def cluster_build_key(self) -> str:
        return f"{self.runner.builder.key(self.cfg.build)}@cluster"

    def verdict(self, sha: str, ask: Ask) -> CommitVerdict:
        return self.verdicts([(sha, ask)])[0]

    def _builders(self, shas: Sequence[str]) -> dict[str, str]:
        """Which worker (address) to send each commit to first: the one the coordinator recorded
        as its builder, else one whose own database holds its build (built while a killed
        coordinator waited for the round, so never recorded here)."""
        where = {str(info.get("name")): addr for addr, info in self.client.scheduler_info()["workers"].items()}
        store = self.runner.state.store
        out: dict[str, str] = {}
        unknown = []
        for sha in shas:
            before = store.build(self.cluster_build_key(), sha)
            if before is None:
                unknown.append(sha)
            elif before.host in where:
                out[sha] = where[before.host]
        if unknown:
            try:
                # `callback_timeout` is read by Client.sync: a worker that does not answer costs 30 s, not the bisect
                held = self.client.run(
                    held_builds,
                    str(self.root),
                    self.runner.builder.key(self.cfg.build),
                    unknown,
                    on_error="return",
                    callback_timeout=30,
                )
            except Exception:  # noqa: BLE001 - only a preference: the tasks go anywhere, as before
                held = {}
            for addr in sorted(held):
                for sha in held[addr] if isinstance(held[addr], list) else []:
                    out.setdefault(sha, addr)
        return out

    def _submit(self, fn: Any, task: WorkTask, builder: str | None) -> Any:
        """The task, sent first to the worker that built its commit before (if it is still there)."""
        prefer = [builder] if builder is not None else None
        return self.client.submit(
            fn, task, pure=False, retries=1, workers=prefer, allow_other_workers=prefer is not None
        )

    def _record(self, res: WorkResult) -> None:
        """A build a worker made, with its worker and compiler (the first for each commit)."""
        store = self.runner.state.store
        if res.build is not None and store.build(self.cluster_build_key(), res.build.sha) is None:
            rec = replace(res.build, host=res.worker, compiler=res.compiler)
            store.put_build(self.cluster_build_key(), rec)
            self.builds.append(rec)

    def build_many(self, shas: Sequence[str]) -> list[BuildRecord]:
        """Build commits on the workers, at once; their build records (with inputs)."""
        ask = Ask(role="build", alpha=1.0, beta=1.0)  # not a question: the task only builds
        builders = self._builders(shas)
        futures = [
            self._submit(
                work_build,
                WorkTask(self.cfg, str(self.root), sha, ask, self.reference, self.compiler, {}, self.queue),
                builders.get(sha),
            )
            for sha in shas
        ]
        out = []
        for fut in futures:
            res = _result(fut)
            self._record(res)
            assert res.build is not None
            self.events.emit(WorkerDone(res.build.sha, res.worker, f"build {res.build.status}", res.built))
            out.append(res.build)
        return out

    def observations(self, sha: str) -> tuple[tuple[int, int], ...]:
        """None here: the commits' builds and run keys live on the workers, so a cluster places
        no commit by likeness (every step is tested; nothing is built on the coordinator)."""
        return ()

    def failed_runs(self, sha: str) -> dict[int, bool]:
        """None here either: the runs' keys live on the workers (no crash rate is compared)."""
        return {}

    def feed(self, sha: str, block: int = 0, start: int = 0, toward: Sequence[float] | None = None) -> Feed:
        """The commit's runs one counted category at a time, fetched from a worker in batches
        (the confirmation's fresh seeds): built and run there, like every verdict."""
        return RemoteFeed(self, sha, block, start, toward)

    def batch(self, sha: str, block: int, start: int, count: int) -> RunsResult:
        """Runs start … start + count − 1 of the commit's block, on a worker (the one that
        built it, preferably); every run streamed back and stored here."""
        return self.batches([(sha, block, start, count)])[0]

    def batches(self, wanted: Sequence[tuple[str, int, int, int]]) -> list[RunsResult]:
        """Several commits' batches of runs (sha, block, start, count) at once, each on a worker
        (the one that built it, preferably); every run streamed back and stored here."""
        from distributed import Queue

        self.events.check()
        store = self.runner.state.store
        queue = Queue(self.queue, client=self.client)
        builders = self._builders(list({sha for sha, *_ in wanted}))
        futures = []
        for sha, block, start, count in wanted:
            task = WorkTask(
                self.cfg,
                str(self.root),
                sha,
                Ask(role="runs", alpha=1.0, beta=1.0),
                self.reference,
                self.compiler,
                store.runs_at(sha),
                self.queue,
            )
            prefer = builders.get(sha)
            futures.append(
                self.client.submit(
                    work_runs,
                    task,
                    block,
                    start,
                    count,
                    pure=False,
                    retries=1,
                    workers=[prefer] if prefer else None,
                    allow_other_workers=prefer is not None,
                )
            )
        try:
            while True:
                done = all(f.done() for f in futures)
                for key, run_sha, rec in queue.get(batch=True):
                    tokens = tuple(rec["tokens"]) if rec["tokens"] is not None else None
                    store.add_runs(key, run_sha, [RunRecord(**{**rec, "tokens": tokens})])
                if done:
                    break
                self.events.check()
                time.sleep(0.05)
        except BaseException:
            self.client.cancel(futures)
            raise
        out = []
        for (sha, *_), fut in zip(wanted, futures):
            try:
                res: RunsResult = fut.result()
            except BisectbotError:
                raise
            except Exception as exc:  # noqa: BLE001 - as _result
                raise ClusterError(
                    f"a task on the Dask cluster failed ({fut.key}): {type(exc).__name__}: {exc}"
                ) from None
            if res.build is not None:
                self._record(WorkResult(None, res.worker, res.host, res.compiler, res.build, res.built))
                self.events.emit(WorkerDone(sha, res.worker, f"{len(res.records or [])} runs", res.built))
            out.append(res)
        return out

    def verdicts(self, items: Sequence[tuple[str, Ask]]) -> list[CommitVerdict]:
        """The verdicts of a round, reached at once on the workers (each commit preferably on
        the worker that built it before); with a control-sample reference, the workers make the
        runs and the verdicts are reached here (`_paired_verdicts`)."""
        if self.control is not None:
            return self._paired_verdicts(items)
        from distributed import Queue

        self.events.check()
        store = self.runner.state.store
        queue = Queue(self.queue, client=self.client)
        builders = self._builders([sha for sha, _ in items])
        futures = [
            self._submit(
                work,
                WorkTask(
                    self.cfg, str(self.root), sha, ask, self.reference, self.compiler, store.runs_at(sha), self.queue
                ),
                builders.get(sha),
            )
            for sha, ask in items
        ]
        try:
            while True:  # store the runs as they come, until the round is done
                done = all(f.done() for f in futures)
                for key, sha, rec in queue.get(batch=True):
                    tokens = tuple(rec["tokens"]) if rec["tokens"] is not None else None
                    store.add_runs(key, sha, [RunRecord(**{**rec, "tokens": tokens})])
                if done:
                    break
                self.events.check()  # a /cancel stops the round (what was streamed is kept)
                time.sleep(0.3)
        except BaseException:
            self.client.cancel(futures)
            raise
        out = []
        for fut in futures:
            res = _result(fut)
            assert res.verdict is not None
            self._record(res)
            self.events.emit(WorkerDone(res.verdict.sha, res.worker, res.verdict.verdict.value, res.built))
            self.events.emit(VerdictReached(res.verdict))
            out.append(res.verdict)
        return out

    def _paired_verdicts(self, items: Sequence[tuple[str, Ask]]) -> list[CommitVerdict]:
        """A round's verdicts against a control sample: each tested run must be paired with the
        control's run on its seed, and the control lives here (built and run by the
        coordinator's runner, grown while tests need it), so the workers make the commits'
        runs, a batch per commit at once, and each run is paired and judged here, in seed
        order, exactly as `CommitTester` does. A commit decided (or out of budget) asks for no
        more batches; the others get their next one together."""
        feeds = [RemoteFeed(self, sha, ask.block, ask.start, ask.q_bad) for sha, ask in items]
        out: list[CommitVerdict | None] = [None] * len(items)
        while any(v is None for v in out):
            waiting = [i for i, v in enumerate(out) if v is None and not feeds[i].buffered]
            for i, res in zip(waiting, self.batches([feeds[i].request() for i in waiting])):
                feeds[i].load(res)
            for i, (_sha, ask) in enumerate(items):
                if out[i] is None:
                    out[i] = self._advance(feeds[i], ask)
        for v in out:
            assert v is not None
            self.events.emit(VerdictReached(v))
        return [v for v in out if v is not None]

    def _advance(self, feed: "RemoteFeed", ask: Ask) -> CommitVerdict | None:
        """Judge the feed's buffered runs; its verdict once decided (or skipped, or out of
        budget), None while it needs another batch."""
        budget = self.cfg.test.model_runs if ask.mode == "bad-model" else ask.budget or self.cfg.run.max_runs
        test = self.cfg.test
        while feed.buffered:
            try:
                category = feed.next_buffered()
            except Untestable as exc:
                return feed.verdict(Verdict.SKIP, str(exc), exc.signature, ask=ask, executed=feed.executed)
            if category is None:
                continue
            ev = judge(
                feed.tally.counts,
                ask,
                self.reference,
                tolerance=test.tolerance,
                budget=budget,
                eta=test.indifference,
                paired=feed.paired_evidence(ask, budget) if ask.mode != "bad-model" else None,
            )
            if ev.decision is not None:
                return feed.verdict(
                    ev.decision, ev.reason, ask=ask, evidence=(ev.log_e_bad, ev.log_e_good), executed=feed.executed
                )
            if feed.tally.consumed >= budget:
                return feed.verdict(
                    Verdict.INCONCLUSIVE,
                    f"undecided after {feed.tally.consumed} runs (budget {budget}); {ev.reason}",
                    ask=ask,
                    evidence=(ev.log_e_bad, ev.log_e_good),
                    executed=feed.executed,
                )
        return None


def _result(fut: Any) -> WorkResult:
    """A task's result; a worker's own error (its compiler, a git failure) as it is, anything
    else (a task that killed its workers again and again) as one line."""
    try:
        return fut.result()  # type: ignore[no-any-return]
    except BisectbotError:
        raise
    except Exception as exc:  # noqa: BLE001 - the cluster's failures are many; say which task
        raise ClusterError(f"a task on the Dask cluster failed ({fut.key}): {type(exc).__name__}: {exc}") from None


def connect(workers: int | None, scheduler: str | None) -> Any:
    """A Dask client: to the scheduler at `scheduler`, or to a new local cluster of `workers`
    worker processes with one thread each."""
    from distributed import Client, LocalCluster

    if scheduler:
        try:
            return Client(scheduler, timeout=10)
        except OSError as exc:
            raise ClusterError(f"cannot reach the Dask scheduler at {scheduler}: {exc}") from None
    cluster = LocalCluster(
        n_workers=workers or 1, threads_per_worker=1, processes=True, dashboard_address=":0", silence_logs=40
    )
    return Client(cluster)


class RemoteFeed(Feed):
    """`verdict.Feed` over runs made on the cluster's workers, BATCH seeds at a time (paired
    with a control-sample reference here, like any feed)."""

    BATCH = 64

    def __init__(
        self, tester: ClusterTester, sha: str, block: int, start: int, toward: Sequence[float] | None = None
    ):  # super().__init__ is not called on purpose: nothing is built or run here
        self.tester, self.sha, self.block, self.start = tester, sha, block, start
        self.cluster = tester
        self.tally = Tally(tester.reference.names)
        self.stream = None
        self._buffer: list[RunRecord] = []
        self._next = start
        self.prepared = Prepared(sha, BuildRecord(sha, "unknown", {}, "", 0.0), None, "not built yet")
        self._failed: str | None = None
        self.toward = toward
        self.pairing = None
        self._fed: list[tuple[int, int]] = []
        self.seeds = tester.runner.seed_block(sha, block, SEED_BLOCK)[start:]
        self.executed = 0  # runs the workers made for it (not replayed from the coordinator's store)
        self._replayed: set[int] = set()  # seeds the coordinator had stored when the batch was asked

    @property
    def buffered(self) -> bool:
        """Runs fetched and not yet counted (or a failure to report)."""
        return bool(self._buffer) or self._failed is not None

    def request(self) -> tuple[str, int, int, int]:
        """The next batch to ask a worker for (ClusterTester.batches)."""
        known = self.cluster.runner.state.store.runs_at(self.sha)
        self._replayed = {seed for runs in known.values() for seed in runs}
        if self._next >= SEED_BLOCK:
            self._failed = f"its block of {SEED_BLOCK} seeds used up"
        return self.sha, self.block, self._next, min(self.BATCH, max(1, SEED_BLOCK - self._next))

    def load(self, res: RunsResult) -> None:
        """A batch a worker made: its runs to count (the variant it ran them with: a worker that
        set one aside starts the commit over with the next)."""
        if res.records is None:
            build = res.build
            self._failed = res.why if build is None else (res.why or build.reason)
            self.prepared = Prepared(self.sha, build or self.prepared.build, None, res.why, variant=res.variant)
            return
        if self.tally.consumed and res.variant != self.prepared.variant:
            self.tally, self._fed, self.pairing = Tally(self.tester.reference.names), [], None
        self.prepared = Prepared(self.sha, res.build or self.prepared.build, None, res.why, variant=res.variant)
        self.executed += sum(rec.seed not in self._replayed for rec in res.records)
        self._buffer, self._next = list(res.records), self._next + len(res.records)

    def next_buffered(self) -> int | None:
        """Count the next fetched run: its category (None: it failed or is not counted);
        `Untestable` when the commit cannot be run or its runs mostly fail."""
        if self._failed is not None:
            raise Untestable(self._failed, masked(self._failed))
        rec = self._buffer.pop(0)
        self.tally.add(rec, *self.tester.classify(rec))
        if self.tally.mostly_failed and not self.tester.cfg.statistic.failures_counted:
            self._failed = self.tally.failure_reason()
            self._buffer.clear()
            raise Untestable(self._failed, self.tally.failure_signature(self.prepared.variant))
        if self.tally.last_category is not None:
            self._pair(self.tally.last_category, rec.seed)
        return self.tally.last_category

    def next(self) -> int:
        while True:
            if not self.buffered:
                self.load(self.cluster.batch(*self.request()))
            category = self.next_buffered()
            if category is not None:
                return category

    def close(self) -> None:
        pass
