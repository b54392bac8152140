"""Sweep stage: run the command once per seed, in parallel, until the sequential test decides.

Seeds are consumed strictly in order (seed s is fed to the test only after s-1), whatever order
the parallel runs finish in: the stopping rule then sees one fixed sequence, which is what the
anytime-valid test assumes. Runs already in the database are replayed, not rerun; runs that
finish after the decision are stored too (they continue the same sequence next time).

A crash or timeout of one run is recorded, never fatal. Output that is cut short (exit 0,
incomplete stdout) is rerun with the same seed up to `retries` times and is never counted.
"""

from __future__ import annotations

import os
import re
from collections import deque
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping

from bisectbot.config import ArmConfig, Config, Variant
from bisectbot.pipeline.parse import Incomplete, Unparsable, parse_tokens
from bisectbot.edges.procs import clean_env, last_line, run
from bisectbot.edges.storage import RunRecord

# Decide whether to stop after seeing one more run (in seed order). Returns True to stop.
Consumer = Callable[[RunRecord], bool]
Store = Callable[[RunRecord], None]


@dataclass(frozen=True)
class SweepOutcome:
    consumed: int       # runs fed to the consumer
    executed: int       # runs actually executed now (not replayed from the database)
    retried: int        # reruns of incomplete outputs among the executed ones
    stopped: bool       # the consumer asked to stop (else the seed range ran out)


def render_argv(template: list[str], values: Mapping[str, str]) -> list[str]:
    """Fill `{placeholders}` in each argv element; the result is never joined into a shell string."""
    return [arg.format_map(values) for arg in template]


def missing_for_variant(help_text: str, variant: Variant) -> list[str]:
    """Flags (and help_contains texts) of a variant that the binary's --help does not show."""
    missing = []
    for arg in variant.argv[1:]:
        if re.fullmatch(r"--?[A-Za-z][\w-]*(=.*)?", arg):
            flag = arg.split("=", 1)[0]
            if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_text):
                missing.append(flag)
    missing += [text for text in variant.help_contains if text not in help_text]
    return missing


def pick_variant(help_text: str, variants: list[Variant]) -> tuple[int | None, str]:
    """The first variant that fits, or None with the reason each one did not."""
    reasons = []
    for i, variant in enumerate(variants):
        missing = missing_for_variant(help_text, variant)
        if not missing:
            return i, f"variant {i}"
        reasons.append(f"variant {i} lacks {', '.join(missing[:3])}")
    return None, "no command variant fits the binary's --help: " + "; ".join(reasons)


def run_seed(cfg: Config, argv_template: list[str], values: Mapping[str, str], seed: int,
             workdir: Path, env: Mapping[str, str], variant: int = 0) -> RunRecord:
    """One seed, with reruns while the output is incomplete."""
    argv = render_argv(argv_template, {**values, "seed": str(seed)})
    attempts = 0
    seconds = 0.0
    while True:
        attempts += 1
        res = run(argv, cwd=workdir, env=env, timeout=cfg.run.timeout)
        seconds += res.seconds
        if res.timed_out:
            return RunRecord(seed, "timeout", None, None, seconds, attempts, variant,
                             f"killed after {cfg.run.timeout:g} s")
        if res.returncode != 0:
            return RunRecord(seed, "crash", None, res.returncode, seconds, attempts, variant,
                             last_line(res.stderr) or f"exit status {res.returncode}")
        try:
            tokens = parse_tokens(res.stdout, cfg.parse)
        except Incomplete as exc:
            if attempts <= cfg.run.retries:
                continue
            return RunRecord(seed, "incomplete", None, 0, seconds, attempts, variant, str(exc))
        except Unparsable as exc:
            return RunRecord(seed, "unparsable", None, 0, seconds, attempts, variant, str(exc))
        return RunRecord(seed, "ok", tokens, 0, seconds, attempts, variant, "")


def request_seed(arm: ArmConfig, port: int, seed: int) -> RunRecord:
    """One seed of a server arm: POST the configured body with the seed filled in."""
    import json
    import time
    import urllib.error
    import urllib.request

    body = {k: (seed if v == "{seed}" else v) for k, v in arm.body.items()}
    req = urllib.request.Request(f"http://127.0.0.1:{port}{arm.path}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    start = time.monotonic()
    try:
        with urllib.request.urlopen(req, timeout=arm.timeout) as resp:
            payload = json.loads(resp.read())
    except TimeoutError:
        return RunRecord(seed, "timeout", None, None, time.monotonic() - start, 1, 0,
                         f"no answer after {arm.timeout:g} s")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return RunRecord(seed, "crash", None, None, time.monotonic() - start, 1, 0,
                         f"{arm.path}: {getattr(exc, 'reason', exc)}"[:160])
    seconds = time.monotonic() - start
    text = payload.get(arm.field) if isinstance(payload, dict) else None
    if not isinstance(text, str):
        return RunRecord(seed, "unparsable", None, None, seconds, 1, 0, f"no string field {arm.field!r}")
    try:
        tokens = parse_tokens(text, arm.parse)
    except (Incomplete, Unparsable) as exc:
        return RunRecord(seed, "unparsable", None, None, seconds, 1, 0, str(exc))
    return RunRecord(seed, "ok", tokens, None, seconds, 1, 0, "")


def sweep(
    seeds: Iterable[int],
    done: Mapping[int, RunRecord],
    execute: Callable[[int], RunRecord],
    consume: Consumer,
    store: Store,
    jobs: int,
) -> SweepOutcome:
    """Feed runs to `consume` in seed order, executing the missing ones `jobs` at a time.

    Stored runs are replayed first and new seeds are only started while the stored ones have not
    decided, so replaying a finished verdict executes nothing.
    """
    jobs = max(1, jobs or os.cpu_count() or 1)
    pending: dict[int, Future[RunRecord]] = {}
    finished: dict[int, RunRecord] = {}
    order = iter(seeds)
    queue: deque[int] = deque()  # seeds taken in order, not yet consumed
    consumed = executed = retried = 0
    exhausted = False

    def take_next(pool: ThreadPoolExecutor) -> bool:
        """Queue the next seed (replayed or started); False when none can be taken now."""
        nonlocal exhausted
        if exhausted or len(pending) >= jobs:
            return False
        seed = next(order, None)
        if seed is None:
            exhausted = True
            return False
        queue.append(seed)
        if seed in done:
            finished[seed] = done[seed]
        else:
            pending[seed] = pool.submit(execute, seed)
        return True

    def collect(futures: Iterable[Future[RunRecord]]) -> None:
        nonlocal executed, retried
        for seed in [s for s, f in pending.items() if f in futures]:
            rec = pending.pop(seed).result()
            store(rec)
            executed += 1
            retried += rec.attempts - 1
            finished[seed] = rec

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        try:
            while True:
                while queue and queue[0] in finished:
                    rec = finished.pop(queue.popleft())
                    consumed += 1
                    if consume(rec):
                        for fut in pending.values():
                            fut.cancel()
                        # runs already in flight are finished work: store them, never discard
                        collect([f for f in pending.values() if not f.cancelled()])
                        return SweepOutcome(consumed, executed, retried, True)
                # start new seeds only when the queue head is not ready to consume
                if take_next(pool) and queue[-1] in finished:
                    continue
                while take_next(pool):
                    if queue[-1] in finished:
                        break
                if not queue:
                    return SweepOutcome(consumed, executed, retried, False)
                if queue[0] not in finished:
                    ready, _ = wait(pending.values(), return_when=FIRST_COMPLETED)
                    collect(ready)
        except BaseException:
            for fut in pending.values():
                fut.cancel()
            raise


def run_env(cfg: Config, kept_dir: Path | None) -> dict[str, str]:
    """Environment for the program under test: no credentials; kept libraries first."""
    extra = dict(cfg.run.env)
    if kept_dir is not None:
        old = os.environ.get("LD_LIBRARY_PATH", "")
        extra.setdefault("LD_LIBRARY_PATH", f"{kept_dir}{os.pathsep + old if old else ''}")
    return clean_env(extra)

