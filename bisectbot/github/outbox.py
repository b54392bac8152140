"""GitHub writes off the job's path: one thread sends them, in order, for as long as it takes.

Why: a job must finish at its own speed whatever GitHub does. A progress edit that retries for
two minutes, a reaction that GitHub asks to delay by five, a result posted during an outage:
none of it may hold up a build or a seed. So the bot only *hands over* writes here and goes on.

* **Coalesced.** Writes are keyed (a comment's marker, a reaction's comment): a newer write for
  a key replaces the one still waiting, so ten progress bodies during an outage become one edit,
  and a job's final body replaces its last progress body (no late progress can overwrite it:
  one thread sends, in the order keys were first put).
* **Patient.** A failed write stays queued. GitHub's own `Retry-After` (`GitHubError.retry_after`)
  pauses the whole outbox until then (GitHub is asking all of us to wait); any other transient
  failure backs off exponentially up to `max_backoff`. A refusal that retrying cannot change
  (401, 403 without Retry-After, 404, 410, 422) drops the write with a log line.
* **Nothing owed is only here.** Results and replies are in the state database before they
  are put here (targets, `bot_replies`); the outbox is how they get posted, not where they are
  kept, so a restart posts what a killed bot still owed.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Hashable

from bisectbot.errors import GitHubError

log = logging.getLogger(__name__)

_FINAL_REFUSALS = frozenset({401, 403, 404, 410, 422})


class Outbox:
    """A queue of keyed GitHub writes, sent by a thread of its own (started on first use)."""

    def __init__(self, *, max_backoff: float = 60.0, clock: Callable[[], float] = time.monotonic):
        self.max_backoff, self.clock = max_backoff, clock
        self._items: dict[Hashable, tuple[str, Callable[[], object]]] = {}  # key -> (what, send)
        self._cond = threading.Condition()
        self._busy = False
        self._hold_until = 0.0
        self._failures = 0
        self._closed = False
        self._thread: threading.Thread | None = None
        self.sent = 0
        self.dropped = 0

    def put(self, key: Hashable, what: str, send: Callable[[], object]) -> None:
        """Queue `send` under `key` (replacing a write for that key still waiting); returns at once."""
        with self._cond:
            self._items[key] = (what, send)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="bisectbot-outbox", daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def flush(self, timeout: float) -> bool:
        """Wait until everything queued was sent (or dropped); False if `timeout` passed first."""
        end = self.clock() + timeout
        with self._cond:
            while self._items or self._busy:
                left = end - self.clock()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.5))
            return True

    def close(self) -> None:
        """Stop the thread after the write in flight (what is still queued is owed in the database)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    def _next(self) -> tuple[Hashable, str, Callable[[], object]] | None:
        with self._cond:
            while not self._closed:
                wait = self._hold_until - self.clock()
                if self._items and wait <= 0:
                    key = next(iter(self._items))
                    what, send = self._items.pop(key)
                    self._busy = True
                    return key, what, send
                self._cond.wait(None if not self._items else min(wait, 1.0))
            return None

    def _run(self) -> None:
        while (item := self._next()) is not None:
            key, what, send = item
            try:
                send()
            except GitHubError as exc:
                self._failed(key, what, send, exc)
            except Exception:  # a bug in a write must not stop every later one
                log.exception("could not %s", what)
                with self._cond:
                    self.dropped += 1
            else:
                with self._cond:
                    self.sent += 1
                    self._failures = 0
            finally:
                with self._cond:
                    self._busy = False
                    self._cond.notify_all()

    def _failed(self, key: Hashable, what: str, send: Callable[[], object], exc: GitHubError) -> None:
        with self._cond:
            if exc.retry_after is None and exc.status in _FINAL_REFUSALS:
                log.warning("could not %s (not retried): %s", what, exc)
                self.dropped += 1
                return
            if exc.retry_after is not None:
                delay = float(exc.retry_after)
            else:
                self._failures += 1
                delay = min(self.max_backoff, 2.0 ** (self._failures - 1))
            self._hold_until = max(self._hold_until, self.clock() + delay)
            if key not in self._items:  # a newer write for the key wins; else this one goes first again
                self._items = {key: (what, send), **self._items}
            log.warning("could not %s, trying again in %.0f s: %s", what, delay, exc)
