"""GitHub writes off the job's path: sent by threads of their own, for as long as it takes.

Why: a job must finish at its own speed whatever GitHub does. A progress edit that retries for
two minutes, a reaction that GitHub asks to delay by five, a result posted during an outage:
none of it may hold up a build or a seed, nor one another. So the bot only *hands over* writes
here and goes on.

* **Lanes.** Each kind of write has a lane of its own, with its own thread: `result` (a job's
  final body), `reply`, `progress`, `react`. A reaction answering 500 forever or a progress
  edit waiting out a `Retry-After` never delays a result: the lanes share nothing but the
  client's one-call-at-a-time lock, which no lane holds while it waits.
* **Coalesced.** Writes are keyed (a comment's marker, a reaction's comment): a newer write for
  a key replaces the one still waiting, so ten progress bodies during an outage become one edit.
  A job's result and its progress share the job's key: putting the result drops the progress
  still waiting, a progress put while the result waits or is being sent is dropped, and one key
  is never sent by two lanes at once (a lock per key), so no late progress can overwrite a result.
* **Patient, one write at a time.** A failed write stays queued in its lane and waits on its
  own: GitHub's `Retry-After` (`GitHubError.retry_after`) reschedules only that write; any other
  transient failure backs it off exponentially up to `max_backoff`, and the lane sends the next
  ready write meanwhile. A refusal that retrying cannot change (401, 403 without Retry-After,
  404, 410, 422) drops the write with a log line.
* **Nothing owed is only here.** Results and replies are in the state database before they
  are put here (targets, `bot_replies`); the outbox is how they get posted, not where they are
  kept, so a restart posts what a killed bot still owed.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Callable, Hashable

from bisectbot.errors import GitHubError

log = logging.getLogger(__name__)

_FINAL_REFUSALS = frozenset({401, 403, 404, 410, 422})
LANES = ("result", "reply", "progress", "react")


@dataclass
class _Write:
    what: str
    send: Callable[[], object]
    not_before: float = 0.0  # its own schedule: a Retry-After or a backoff delays it alone
    failures: int = 0


class Outbox:
    """Keyed GitHub writes in lanes, each lane sent by a thread of its own (started on first use)."""

    def __init__(self, *, max_backoff: float = 60.0, clock: Callable[[], float] = time.monotonic):
        self.max_backoff, self.clock = max_backoff, clock
        self._cond = threading.Condition()
        self._lanes: dict[str, dict[Hashable, _Write]] = {}  # lane -> key -> write, in order of first put
        self._busy: dict[str, Hashable] = {}  # lane -> the key it is sending
        self._threads: dict[str, threading.Thread] = {}
        self._key_locks: dict[Hashable, threading.Lock] = {}
        self._closed = False
        self.dropped = 0

    def put(self, key: Hashable, what: str, send: Callable[[], object], lane: str = "progress") -> None:
        """Queue `send` under `key` in `lane` (replacing a write for that key still waiting);
        returns at once."""
        if lane not in LANES:
            raise ValueError(f"unknown outbox lane {lane!r}")
        with self._cond:
            if lane == "result":
                for other, items in self._lanes.items():
                    if other != "result":
                        items.pop(key, None)  # the result owns the key from now on
            elif self._result_holds(key):
                return  # its result is waiting or being sent: an older kind of write for it is moot
            items = self._lanes.setdefault(lane, {})
            old = items.get(key)
            items[key] = _Write(what, send, old.not_before if old else 0.0, old.failures if old else 0)
            if lane not in self._threads:
                thread = threading.Thread(target=self._run, args=(lane,), name=f"bisectbot-outbox-{lane}", daemon=True)
                self._threads[lane] = thread
                thread.start()
            self._cond.notify_all()

    def flush(self, timeout: float, lanes: tuple[str, ...] = LANES) -> bool:
        """Wait until everything queued in `lanes` was sent (or dropped); False if `timeout`
        passed first."""
        end = self.clock() + timeout
        with self._cond:
            while any(self._lanes.get(lane) or lane in self._busy for lane in lanes):
                left = end - self.clock()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.5))
            return True

    def close(self) -> None:
        """Stop the threads after the writes in flight (what is still queued is owed in the database)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            threads = list(self._threads.values())
        for thread in threads:
            thread.join(timeout=5.0)

    def _result_holds(self, key: Hashable) -> bool:
        """A result for `key` is queued or in flight (call with the condition held)."""
        return key in self._lanes.get("result", {}) or ("result" in self._busy and self._busy["result"] == key)

    def _next(self, lane: str) -> tuple[Hashable, _Write] | None:
        with self._cond:
            while not self._closed:
                items = self._lanes.get(lane, {})
                now = self.clock()
                ready = next((k for k, w in items.items() if w.not_before <= now), None)
                if ready is not None:
                    self._busy[lane] = ready
                    return ready, items.pop(ready)
                soonest = min((w.not_before for w in items.values()), default=None)
                self._cond.wait(None if soonest is None else min(max(soonest - now, 0.01), 1.0))
            return None

    def _run(self, lane: str) -> None:
        while (item := self._next(lane)) is not None:
            key, write = item
            with self._cond:
                lock = self._key_locks.setdefault(key, threading.Lock())
            try:
                with lock:
                    write.send()
            except GitHubError as exc:
                self._failed(lane, key, write, exc)
            except Exception:  # a bug in a write must not stop every later one
                log.exception("could not %s", write.what)
                with self._cond:
                    self.dropped += 1
            finally:
                with self._cond:
                    self._busy.pop(lane, None)
                    self._cond.notify_all()

    def _failed(self, lane: str, key: Hashable, write: _Write, exc: GitHubError) -> None:
        with self._cond:
            if exc.retry_after is None and exc.status in _FINAL_REFUSALS:
                log.warning("could not %s (not retried): %s", write.what, exc)
                self.dropped += 1
                return
            if exc.retry_after is not None:
                delay = float(exc.retry_after)
            else:
                delay = min(self.max_backoff, 2.0**write.failures)
            write.failures += 1
            write.not_before = self.clock() + delay
            items = self._lanes.setdefault(lane, {})
            if lane != "result" and self._result_holds(key):
                return  # its result is waiting or being sent now: this write is moot
            if key not in items:  # a newer write for the key wins; else this one goes first again
                self._lanes[lane] = {key: write, **items}
            log.warning("could not %s, trying again in %.0f s: %s", write.what, delay, exc)
