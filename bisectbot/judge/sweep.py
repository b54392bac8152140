"""Sweep stage: one commit's runs, seed by seed, replayed when stored, executed when not.

This is the one place runs are executed. `RunStream` hands runs out strictly in seed order
(seed s only after s−1), whatever order the parallel runs finish in: a sequential test then sees
one fixed sequence, which is what the anytime-valid tests assume. A stored run is handed out
without starting anything, so replaying a finished verdict executes nothing (and a server arm
is never started); only when the next seed is missing are up to `jobs` seeds run at once.
Executed runs are stored in batches, in the consumer's thread (right after the slot a run freed
is refilled): one transaction once `FLUSH_RUNS` runs wait or the last batch is `FLUSH_SECONDS`
old, so a killed process loses at most that much work; runs still in flight when the consumer
stops are finished and stored too (they continue the same sequence next time), and leaving the
stream stores every run it executed.

A crash, timeout or output past `run.max_output_mb` (`output-too-large`, never parsed) of one
run is a record, never fatal. Each run starts in a jail (processes.rundriver): what it leaves running
is killed when it exits, and its deadline covers its output. Output that is cut short (exit 0,
incomplete stdout) is rerun with the same seed up to `retries` times and is never counted.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Protocol, Sequence

from bisectbot.config.sections import ArmConfig, ParseConfig, RunConfig
from bisectbot.judge.parallel import Throttle
from bisectbot.judge.parse import Incomplete, Unparsable, parse_output, parse_tokens
from bisectbot.processes import localhttp
from bisectbot.processes.procs import Server, ServerError, exit_reason, run
from bisectbot.processes.sandbox import Sandbox
from bisectbot.records.commits import RunRecord


class Executor(Protocol):
    """Runs one seed of one commit; `close` releases what it started (a server)."""

    def run(self, seed: int) -> RunRecord: ...

    def close(self) -> None: ...


def render_argv(template: list[str], values: Mapping[str, str]) -> list[str]:
    """Fill `{placeholders}` in each argv element; the result is never joined into a shell string."""
    return [arg.format_map(values) for arg in template]


class ProgramExecutor:
    """The program under test, once per seed, with reruns while its output is cut short (in
    `sandbox` when it is untrusted code)."""

    def __init__(
        self,
        argv: list[str],
        values: Mapping[str, str],
        *,
        run_cfg: RunConfig,
        parse_cfg: ParseConfig,
        workdir: Path,
        env: Mapping[str, str],
        variant: int = 0,
        sandbox: Sandbox | None = None,
        watched: Iterable[Path] = (),
        on_written: Callable[[Path], None] | None = None,
    ):
        self.argv, self.values = argv, dict(values)
        self.run_cfg, self.parse_cfg = run_cfg, parse_cfg
        self.workdir, self.env, self.variant = workdir, dict(env), variant
        self.sandbox = sandbox
        # files the command names that no run was seen writing yet: a change after a run means
        # the program writes it (not an input of the runs' key): `on_written` is told, once
        self._watched = {path: _signature(path) for path in watched} if on_written is not None else {}
        self._on_written = on_written
        self._watch_lock = threading.Lock()

    def run(self, seed: int) -> RunRecord:
        argv = render_argv(self.argv, {**self.values, "seed": str(seed)})
        attempts, seconds, variant = 0, 0.0, self.variant
        while True:
            attempts += 1
            res = run(
                argv,
                cwd=self.workdir,
                env=self.env,
                timeout=self.run_cfg.timeout,
                sandbox=self.sandbox,
                cap=self.run_cfg.max_output_mb << 20,
            )
            seconds += res.seconds
            if self._watched:
                self._notice_writes()
            if res.too_large:
                return RunRecord(seed, "output-too-large", None, None, seconds, attempts, variant, res.stopped)
            if res.timed_out:
                return RunRecord(
                    seed, "timeout", None, None, seconds, attempts, variant, f"killed after {self.run_cfg.timeout:g} s"
                )
            if res.returncode != 0:
                return RunRecord(seed, "crash", None, res.returncode, seconds, attempts, variant, exit_reason(res))
            try:
                tokens = parse_output(res.stdout, res.stderr, self.parse_cfg)
            except Incomplete as exc:
                if attempts <= self.run_cfg.retries:
                    continue
                return RunRecord(seed, "incomplete", None, 0, seconds, attempts, variant, str(exc))
            except Unparsable as exc:
                return RunRecord(seed, "unparsable", None, 0, seconds, attempts, variant, str(exc))
            return RunRecord(seed, "ok", tokens, 0, seconds, attempts, variant, "")

    def _notice_writes(self) -> None:
        with self._watch_lock:
            written = [p for p, sig in self._watched.items() if _signature(p) != sig]
            for path in written:
                del self._watched[path]
        for path in written:
            assert self._on_written is not None
            self._on_written(path)

    def close(self) -> None:
        pass


def _signature(path: Path) -> tuple[int, int, int] | None:
    """What changes when a file is written: its inode, size and modification time."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


@dataclass(frozen=True)
class Request:
    """What a server is asked once per seed: POST `body` (the string "{seed}" becomes the seed)
    to `path`; the generated text is the answer's `field`."""

    path: str
    body: Mapping[str, Any]
    field: str
    timeout: float

    @classmethod
    def of_arm(cls, arm: ArmConfig) -> "Request":
        return cls(arm.path, arm.body, arm.field, arm.timeout)

    @classmethod
    def of_run(cls, run_cfg: RunConfig) -> "Request":
        assert run_cfg.serve is not None
        return cls(run_cfg.serve.path, run_cfg.serve.body, run_cfg.serve.field, run_cfg.timeout)


class ServerExecutor:
    """A server asked once per seed over HTTP: started on the first seed that must run (never
    when every seed is stored), stopped on close.

    A server that does not start raises `procs.ServerError` from `run` for a cross-check arm
    (the commit is then skipped, with the reason). For the program under test
    (`failures_as_runs`), every run fails instead, with the reason: its runs then mostly fail
    and the next command variant is tried, as for a program that crashes."""

    def __init__(self, request: Request, server: Server, parse: ParseConfig, *, failures_as_runs: bool = False):
        self.request, self.server, self.parse = request, server, parse
        self.failures_as_runs = failures_as_runs
        self._lock = threading.Lock()
        self._started = False
        self._start_failed: str | None = None

    def run(self, seed: int) -> RunRecord:
        with self._lock:
            if self._start_failed is not None:
                return RunRecord(seed, "crash", None, None, 0.0, 1, 0, self._start_failed)
            if not self._started:
                try:
                    self.server.start()
                except ServerError as exc:
                    if not self.failures_as_runs:
                        raise
                    self._start_failed = f"the server did not start: {exc}"[:300]
                    return RunRecord(seed, "crash", None, None, 0.0, 1, 0, self._start_failed)
                self._started = True
        req = self.request
        body = {k: (seed if v == "{seed}" else v) for k, v in req.body.items()}
        start = time.monotonic()
        try:
            payload = localhttp.request(self.server.base_url + req.path, body, timeout=req.timeout).json()
        except localhttp.HttpFailure as exc:
            status = "timeout" if exc.timed_out else "crash"
            detail = self.server.exited() or str(exc)
            return RunRecord(seed, status, None, None, time.monotonic() - start, 1, 0, detail[:300])
        except ValueError:
            return RunRecord(
                seed, "unparsable", None, None, time.monotonic() - start, 1, 0, f"{req.path}: the answer is not JSON"
            )
        seconds = time.monotonic() - start
        text = payload.get(req.field) if isinstance(payload, dict) else None
        if not isinstance(text, str):
            return RunRecord(seed, "unparsable", None, None, seconds, 1, 0, f"no string field {req.field!r}")
        try:
            tokens = parse_tokens(text, self.parse)
        except (Incomplete, Unparsable) as exc:
            return RunRecord(seed, "unparsable", None, None, seconds, 1, 0, str(exc))
        return RunRecord(seed, "ok", tokens, None, seconds, 1, 0, "")

    def close(self) -> None:
        with self._lock:
            if self._started:
                self.server.stop()
                self._started = False


FLUSH_RUNS = 32  # runs waiting that make a batch (a killed bot redoes about these at most)
FLUSH_SECONDS = 0.5  # and no run waits longer than this to be stored


class RunStream:
    """One commit's runs in seed order: `for rec in stream` until the consumer has enough.

    Use it as a context manager: leaving it stores the runs still in flight and closes the
    executor. `store` is given the executed runs in batches (see the module's docstring).
    `executed` and `retried` count what this stream ran (not what it replayed).
    `check` is called before each run is handed out (a cancelled job stops there).
    """

    def __init__(
        self,
        seeds: Iterable[int],
        stored: Mapping[int, RunRecord],
        executor: Executor,
        store: Callable[[Sequence[RunRecord]], None],
        *,
        jobs: int | Throttle = 1,
        check: Callable[[], None] = lambda: None,
    ):
        self._order: Iterator[int] = iter(seeds)
        self._stored = stored
        self._executor = executor
        self._store = store
        # a fixed number at once, or a throttle that adapts it to the cut rate (core.parallel)
        self._throttle = jobs if isinstance(jobs, Throttle) else None
        self._most = jobs.most if isinstance(jobs, Throttle) else max(1, jobs)
        self._check = check
        self._queue: deque[int] = deque()  # seeds taken in order, not yet handed out
        self._pending: dict[int, Future[RunRecord]] = {}
        self._finished: dict[int, RunRecord] = {}
        self._unstored: list[RunRecord] = []  # collected, not stored yet
        self._flushed_at = time.monotonic()
        self._pool: ThreadPoolExecutor | None = None
        self._exhausted = False
        self.executed = 0
        self.retried = 0

    @property
    def _jobs(self) -> int:
        """How many runs may be in flight now."""
        return self._throttle.level if self._throttle is not None else self._most

    @property
    def _unread(self) -> int:
        """Runs started and not handed out yet, finished ones included: kept to `_jobs`, so a
        consumer that stops leaves at most that many runs it did not read."""
        return len(self._pending) + len(self._finished)

    def __iter__(self) -> "RunStream":
        return self

    def __next__(self) -> RunRecord:
        self._check()
        if not self._queue and not self._take():
            raise StopIteration
        head = self._queue[0]
        if head in self._stored:
            self._queue.popleft()
            return self._stored[head]
        if head not in self._finished:
            self._fill()
            if head not in self._pending and head not in self._finished:  # keep the order's promise
                assert self._pool is not None
                self._pending[head] = self._pool.submit(self._executor.run, head)
            while head not in self._finished:
                done, _ = wait(self._pending.values(), return_when=FIRST_COMPLETED)
                self._collect(done)
        self._queue.popleft()
        rec = self._finished.pop(head)
        # the slot this run freed is filled before a batch is stored and this run is handed
        # out: the storage write and the consumer's test then overlap the next run instead of
        # delaying its start
        try:
            self._fill()
        finally:
            if len(self._unstored) >= FLUSH_RUNS or time.monotonic() - self._flushed_at >= FLUSH_SECONDS:
                self._flush()
        return rec

    def _take(self) -> bool:
        """Queue the next seed of the order; False when there is none."""
        if self._exhausted:
            return False
        seed = next(self._order, None)
        if seed is None:
            self._exhausted = True
            return False
        self._queue.append(seed)
        return True

    def _fill(self) -> None:
        """Start the queued seeds that need a run, then take more, until `jobs` runs are started and unread."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self._most, thread_name_prefix="run")
        for seed in self._queue:
            if self._unread >= self._jobs:
                return
            if seed not in self._stored and seed not in self._finished and seed not in self._pending:
                self._pending[seed] = self._pool.submit(self._executor.run, seed)
        while self._unread < self._jobs and self._take():
            seed = self._queue[-1]
            if seed not in self._stored:
                self._pending[seed] = self._pool.submit(self._executor.run, seed)

    def _collect(self, futures: Iterable[Future[RunRecord]], *, tolerant: bool = False) -> None:
        done = set(futures)
        for seed in [s for s, f in self._pending.items() if f in done]:
            fut = self._pending.pop(seed)
            if tolerant and fut.exception() is not None:
                continue  # closing: a run that raised has nothing to store
            rec = fut.result()
            self._unstored.append(rec)
            self.executed += 1
            self.retried += rec.attempts - 1
            if self._throttle is not None:
                cut = rec.attempts - 1 + (rec.status == "incomplete")
                self._throttle.observe(rec.attempts, cut, rec.seconds)
            self._finished[seed] = rec

    def _flush(self) -> None:
        """Store the runs collected since the last flush, in one batch (kept when storing fails)."""
        if self._unstored:
            self._store(list(self._unstored))
            self._unstored.clear()
        self._flushed_at = time.monotonic()

    def close(self) -> None:
        """Store the runs in flight (finished work), drop the ones not started, stop the executor."""
        try:
            for fut in self._pending.values():
                fut.cancel()
            running = [f for f in self._pending.values() if not f.cancelled()]
            if running:
                wait(running)
                self._collect(running, tolerant=True)
            self._pending.clear()
            self._flush()
        finally:
            if self._pool is not None:
                self._pool.shutdown(wait=True, cancel_futures=True)
                self._pool = None
            self._executor.close()

    def __enter__(self) -> "RunStream":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
