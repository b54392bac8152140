"""A job's progress in its comment: events in, a body out, posted from a thread of its own.

Why apart from the bot: GitHub must never sit on a job's path. `CommentObserver` is pure
bookkeeping on the job's thread; `ProgressPoster` owns the only thread that edits the comment
while the job runs, at most every `progress_interval` seconds, and (in watch mode) looks for
`/cancel`.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from typing import Callable, Container

from bisectbot.errors import GitHubError
from bisectbot.events import (
    Answered,
    BisectStarted,
    Building,
    Built,
    CancelToken,
    Confirming,
    EndpointStarted,
    Event,
    StepStarted,
    StickyVisit,
)
from bisectbot.github.client import PROGRESS_BUDGET
from bisectbot.github.comment import CommentContext, render_progress
from bisectbot.github.issueclient import IssueClient
from bisectbot.github.outbox import Outbox

log = logging.getLogger(__name__)


class CommentObserver:
    """Turns a job's events into the body of its comment: where it is, what it does, the last
    lines. Pure bookkeeping on the job's thread; `offer` hands each new body to the poster."""

    def __init__(self, title: str, ctx: CommentContext, offer: Callable[[str], None]):
        self.title, self.ctx, self.offer = title, ctx, offer
        self.lines: list[str] = []
        self.where = "starting"
        self.doing = ""
        self.commit_no = 0
        self.total = 0

    def __call__(self, event: Event) -> None:
        if event.transient:
            return
        self.lines = (self.lines + [event.text().strip()])[-60:]
        if isinstance(event, BisectStarted):
            self.total = 2 + event.steps
        elif isinstance(event, EndpointStarted):
            self.commit_no += 1
            self.where, self.doing = f"testing {event.name} {event.ref} = {event.sha[:12]}", ""
        elif isinstance(event, StepStarted):
            self.commit_no += 1
            of = (
                f"of ~{event.estimate}" if event.number <= event.estimate else f"(past the ~{event.estimate} estimated)"
            )
            self.where, self.doing = f"bisect step {event.number} {of}, `{event.sha[:12]}`", ""
        elif isinstance(event, StickyVisit):
            self.commit_no += 1
            self.where, self.doing = f"sticky bisection at `{event.sha[:12]}`", ""
        elif isinstance(event, Confirming):
            self.where, self.doing = "confirming the culprit against its parent on fresh seeds", ""
        elif isinstance(event, Answered):  # shown at once, before the arms run
            arms = f"; now the cross-check arm(s) {', '.join(event.arms)}" if event.arms else ""
            self.where, self.doing = f"answer ({event.status}): {event.message}{arms}", ""
        elif isinstance(event, Building):
            self.doing = "building"
        elif isinstance(event, Built):
            self.doing = "running seeds"
        self.offer(self.body())

    def phase(self) -> str:
        of = f" of ~{self.total}" if self.total else ""
        head = f"commit {self.commit_no}{of}: {self.where}" if self.commit_no else self.where
        return head + (f" — {self.doing}" if self.doing else "")

    def body(self) -> str:
        return render_progress(self.title, self.phase(), self.lines, self.ctx).fit()


class ProgressPoster:
    """Posts a job's progress from a thread of its own, so GitHub never slows the job.

    The latest body offered is posted at most every `interval` seconds (the first at once);
    bodies offered in between replace each other. With `poll_cancel` it also asks, every
    `max(interval, 5)` seconds, whether `/cancel` arrived, and stops the job through `cancel`.
    `stop()` waits for a post in flight, so no late progress edit can overwrite the result."""

    def __init__(
        self,
        post: Callable[[str], object],
        interval: float,
        cancel: CancelToken,
        *,
        poll_cancel: Callable[[], str | None] | None = None,
    ):
        self.post, self.interval, self.cancel, self.poll_cancel = post, interval, cancel, poll_cancel
        self._latest: str | None = None
        self._posted: str | None = None
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self.rounds = 0  # rounds the thread has finished: what a test waits on instead of sleeping
        self._thread = threading.Thread(target=self._run, name="bisectbot-progress", daemon=True)

    def offer(self, body: str) -> None:
        with self._lock:
            self._latest = body
        self._wake.set()

    def __enter__(self) -> "ProgressPoster":
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stopping = True
        self._wake.set()
        self._thread.join(timeout=1.0)  # a /cancel poll may still be waiting on GitHub: not for it

    def _run(self) -> None:
        last_post = last_poll = -math.inf
        while not self._stopping:
            now = time.monotonic()
            with self._lock:
                body = self._latest
            if body is not None and body != self._posted and now - last_post >= self.interval and not self._stopping:
                last_post = now
                try:
                    self.post(body)
                    self._posted = body
                except GitHubError as exc:
                    log.warning("progress update failed (the job goes on): %s", exc)
            if self.poll_cancel is not None and now - last_poll >= max(self.interval, 5.0):
                last_poll = now
                who = self.poll_cancel()
                if who is not None:
                    self.cancel.cancel(who)
            self.rounds += 1
            self._wake.wait(timeout=max(0.05, min(self.interval, 5.0)))
            self._wake.clear()


def progress_post(
    outbox: Outbox, client: IssueClient, ended: Container[str], issue: int, job: str
) -> Callable[[str], None]:
    """How a job's progress body reaches its comment: through the outbox's progress lane, one
    short try (the outbox retries it later, and meanwhile the job's result, same comment and
    key lock, never waits long behind it); never once the job ended (its result owns the comment)."""

    def post(body: str) -> None:
        def send() -> None:
            if job not in ended:
                client.upsert_job_comment(issue, job, body, budget=PROGRESS_BUDGET)

        outbox.put(("comment", issue, job), f"update the progress of {job} on #{issue}", send, lane="progress")

    return post
