"""The job runner behind `watch`, `serve`, `check` and `publish`: comment commands in, one
comment per job out.

Why it is built this way:

* **Claim before run.** A command comment is recorded (`BotStore.claim_command`) before
  anything runs; a claim that already exists is never handled again, and a claim left
  unfinished by a killed bot is *resumed* on the next start (`run_bisect` replays every finished
  build and seed from the state database, so resuming costs only the work that was in flight).
* **One comment per job.** The job comment's marker is the job id (`bisect.job_id`, computed
  before the job starts from the resolved shas), and `publish.upsert_job_comment` finds an
  existing comment by marker after a retry or a restart, so a job never gets two comments.
* **Results are never lost.** The result lives in the jobs table first; a comment target
  (`bot_targets`) is only marked published once GitHub accepted the final body, and
  `publish_pending` (`bisectbot publish`) posts whatever GitHub refused earlier.
* **Comment text never reaches a shell or git unchecked.** `commands.parse_comment` validates
  syntax and authorisation; refs are then resolved with `Workspace.resolve` (argv only, after
  `--end-of-options`) before any job starts, and config names map only to files directly inside
  the configured configs directory.
"""

from __future__ import annotations

import json
import logging
import math
import queue
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping

from bisectbot.pipeline.bisect import job_id, run_bisect
from bisectbot.github.commands import (BisectCommand, CancelCommand, CheckCommand, Refusal, parse_comment,
                       validate_config_name)
from bisectbot.github.comment import (CommentContext, fixture_hashes, render_alarm, render_bisect,
                      render_cancelled, render_failed, render_progress, render_status)
from bisectbot.edges.workspace import Workspace
from bisectbot.config import Config, GitHubConfig, load_config
from bisectbot.errors import BisectbotError, ConfigError, GitHubError, RefError
from bisectbot.pipeline.progress import Progress
from bisectbot.github.client import DryRunPublisher, GitHubSettings, Publisher, RetryPolicy, format_since, make_publisher
from bisectbot.edges.storage import BotStore, State
from bisectbot.pipeline.verdict import run_test

log = logging.getLogger(__name__)

STATUS_MARKER = "check-status"


class JobCancelled(Exception):
    """Raised from the progress hook when `/cancel` arrived; `who` asked for it."""

    def __init__(self, who: str | None):
        super().__init__(f"cancelled by {who}")
        self.who = who


def publisher_for(cfg: Config, env: Mapping[str, str] | None = None) -> Publisher:
    """The real publisher when the config's credentials are present, else a dry run."""
    gh = cfg.github
    if gh is None:
        return DryRunPublisher(None)
    settings = GitHubSettings(
        repo=gh.repo, api_url=gh.api_url, token_env=gh.token_env, app_id=gh.app_id,
        private_key_path=cfg.resolve(gh.private_key) if gh.private_key else None,
        installation_id=gh.installation_id, bot_login=gh.bot_login,
        dry_run_out=cfg.resolve(gh.dry_run_file) if gh.dry_run_file else None,
        retry=RetryPolicy(give_up_after=gh.retry_give_up_after, backoff_base=gh.retry_backoff,
                          max_wait=gh.retry_max_wait,
                          secondary_wait=min(60.0, gh.retry_give_up_after / 2)),
    )
    return make_publisher(settings, env)


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


# -- progress into the job comment ---------------------------------------------------------------
_STEP_RE = re.compile(r"^\[step (\d+)/~(\d+)\] ([0-9a-f]{12})")
_BISECTING_RE = re.compile(r"^bisecting (\d+) commits")


class CommentProgress(Progress):
    """`run_bisect`'s progress, echoed to stderr and upserted into the job comment.

    Step lines update the comment at most every `interval` seconds (so a long bisect edits it
    a few dozen times, not thousands); transient status lines only go to the terminal. Each
    step also asks `cancelled()` whether `/cancel` arrived, and stops the job if so (between
    stored verdicts, so nothing half-done is kept).
    """

    def __init__(self, inner: Progress, title: str, ctx: CommentContext,
                 update: Callable[[str], None], *, interval: float,
                 cancelled: Callable[[], str | None] = lambda: None,
                 clock: Callable[[], float] = time.monotonic):
        super().__init__(inner.stream, quiet=True)
        self.inner, self.title, self.ctx, self.update = inner, title, ctx, update
        self.interval, self.cancelled, self.clock = interval, cancelled, clock
        self.lines: list[str] = []
        self.where = "starting"
        self.doing = ""
        self.commit_no = 0
        self.total = 0
        self._last_update = -math.inf

    def step(self, message: str) -> None:
        self.inner.step(message)
        self.lines = (self.lines + [message.strip()])[-60:]
        self._track(message.strip())
        who = self.cancelled()
        if who is not None:
            raise JobCancelled(who)
        now = self.clock()
        if now - self._last_update >= self.interval:
            self._last_update = now
            self.flush()

    def status(self, message: str, *, force: bool = False) -> None:
        self.inner.status(message, force=force)

    def phase(self) -> str:
        of = f" of ~{self.total}" if self.total else ""
        head = f"commit {self.commit_no}{of}: {self.where}" if self.commit_no else self.where
        return head + (f" — {self.doing}" if self.doing else "")

    def _track(self, msg: str) -> None:
        if m := _BISECTING_RE.match(msg):
            n = int(m.group(1))
            self.total = 2 + max(1, math.ceil(math.log2(max(n - 1, 2))))
        elif msg.startswith("[endpoint]"):
            self.commit_no += 1
            self.where, self.doing = msg.removeprefix("[endpoint] "), ""
        elif m := _STEP_RE.match(msg):
            self.commit_no += 1
            self.where, self.doing = f"bisect step {m.group(1)} of ~{m.group(2)}, `{m.group(3)}`", ""
        elif msg.startswith("[confirm]"):
            self.where, self.doing = "re-testing the culprit and its parent on fresh seeds", ""
        elif msg.startswith("building "):
            self.doing = "building"
        elif msg.startswith("built "):
            self.doing = "running seeds"

    def flush(self) -> None:
        """Upsert the progress body now; GitHub being down must not stop the job."""
        try:
            self.update(render_progress(self.title, self.phase(), self.lines, self.ctx))
        except GitHubError as exc:
            log.warning("progress update failed (the job goes on): %s", exc)


# -- the bot ---------------------------------------------------------------------------------------
@dataclass
class CheckOutcome:
    """What `check` did: the test result, the bisect report if one ran, and whether all posted."""

    result: dict[str, Any]
    bisect: dict[str, Any] | None = None
    bisect_error: str | None = None
    published: bool = True
    last_good: str | None = None


@dataclass
class Bot:
    """Handles commands and checks for one config; owns nothing but references.

    `state` must be used from the thread that opened it; `store` may be shared between threads.
    """

    cfg: Config
    config_path: str
    state: State
    store: BotStore
    publisher: Publisher
    progress: Progress = field(default_factory=lambda: Progress(quiet=True))
    cancel_flags: dict[int, str] = field(default_factory=dict)  # issue -> who asked (serve)
    cancel_lock: threading.Lock = field(default_factory=threading.Lock)
    consumed_cancels: set[int] = field(default_factory=set)  # issues whose job a cancel stopped
    poll_cancels: bool = False  # watch: look for /cancel comments while a job runs
    _ctx_cache: dict[str, CommentContext] = field(default_factory=dict)
    _last_cancel_poll: float = -math.inf

    @property
    def gh(self) -> GitHubConfig:
        if self.cfg.github is None:
            raise ConfigError(f"{self.config_path}: github: section missing (repo, token_env, …)")
        return self.cfg.github

    def ctx(self, cfg: Config | None = None) -> CommentContext:
        cfg = cfg or self.cfg
        key = str(cfg.source_path)
        if key not in self._ctx_cache:
            gh = self.cfg.github
            self._ctx_cache[key] = CommentContext(
                repo=gh.repo if gh else "owner/repo", html_url=gh.html_url if gh else "https://github.com",
                fixtures=fixture_hashes(cfg.fixtures_dir), first_seed=cfg.run.first_seed,
                max_runs=cfg.run.max_runs)
        return self._ctx_cache[key]

    # -- entry points ------------------------------------------------------------------------------
    def resume_interrupted(self) -> None:
        """Finish commands a killed bot had claimed (their jobs resume from the database)."""
        for comment_id in self.store.claimed_commands():
            log.info("resuming command in comment %s", comment_id)
            self.handle_claimed(comment_id)

    def poll(self, issue: int) -> int:
        """Handle the comments on `issue` newer than the stored cursor; return how many were new."""
        key = f"{self.gh.repo}#{issue}"
        cur = self.store.get_cursor(key) or {}
        comments = self.publisher.list_new_comments(issue, cur.get("at"))
        new = [c for c in comments if c.id > int(cur.get("id", 0))]
        for c in sorted(new, key=lambda c: c.id):
            self.take(c.id, c.issue_number, c.author, c.author_association, c.body, c.author_type)
            self.store.put_cursor(key, {"id": c.id, "at": format_since(c.created_at)})
        return len(new)

    def take(self, comment_id: int, issue: int, author: str, association: str, body: str,
             author_type: str = "User") -> bool:
        """Claim a comment's command and handle it; False if not a new command."""
        if self._is_own(author, author_type, body):
            return False
        if parse_comment(body, association, author) is None:
            return False
        if not self.store.claim_command(comment_id, issue, author, association, body):
            return False  # handled (or being handled) already
        self.handle_claimed(comment_id)
        return True

    def claim(self, comment_id: int, issue: int, author: str, association: str, body: str,
              author_type: str = "User") -> bool:
        """Claim without handling (webhook thread); True if there is now work to do."""
        if self._is_own(author, author_type, body) or parse_comment(body, association, author) is None:
            return False
        return self.store.claim_command(comment_id, issue, author, association, body)

    def _is_own(self, author: str, author_type: str, body: str) -> bool:
        if author_type == "Bot" or "<!-- bisectbot:" in (body or ""):
            return True
        try:
            login = getattr(self.publisher, "bot_login", None)
        except GitHubError:
            login = self.cfg.github.bot_login if self.cfg.github else None
        return bool(login) and author.lower() == str(login).lower()

    def handle_claimed(self, comment_id: int) -> None:
        row = self.store.get_command(comment_id)
        if row is None or row["status"] != "claimed":
            return
        issue = int(row["issue"])
        cmd = parse_comment(row["body"], row["association"], row["author"])
        try:
            if cmd is None:
                self.store.set_command(comment_id, "done")
            elif isinstance(cmd, Refusal):
                self._reply(issue, comment_id, cmd.reason)
                self.store.set_command(comment_id, "refused")
            elif isinstance(cmd, CancelCommand):
                self._react(comment_id)
                self._handle_cancel(issue, comment_id, row["author"])
            elif isinstance(cmd, BisectCommand):
                self._react(comment_id)
                self._handle_bisect(issue, comment_id, cmd, row["author"])
            elif isinstance(cmd, CheckCommand):
                self._react(comment_id)
                self.run_check(cmd.ref or self.gh.default_ref, issue)
                self.store.set_command(comment_id, "done")
        except _Refused as r:
            self._reply(issue, comment_id, str(r))
            self.store.set_command(comment_id, "refused")
        except BisectbotError as exc:
            log.error("command in comment %s failed: %s", comment_id, exc)
            self._reply(issue, comment_id, f"Sorry, that failed: {exc}")
            self.store.set_command(comment_id, "failed")

    # -- commands ------------------------------------------------------------------------------
    def _config_for(self, name: str | None) -> tuple[Config, str]:
        """`config=<name>` → `<configs_dir>/<name>.yaml`, nothing else (no paths, same repo)."""
        if name is None:
            return self.cfg, self.config_path
        if why := validate_config_name(name):
            raise _Refused(f"Sorry, {why}.")
        if not self.gh.configs_dir:
            raise _Refused("Sorry, config= is not enabled for this bot (no github.configs_dir).")
        base = self.cfg.resolve(self.gh.configs_dir)
        path = (base / f"{name}.yaml").resolve()
        if path.parent != base.resolve() or not path.is_file():
            raise _Refused(f"Sorry, there is no config `{name}` (looked in the configured configs directory).")
        try:
            cfg = load_config(path)
        except ConfigError as exc:
            raise _Refused(f"Sorry, config `{name}` is invalid: {str(exc).split(': ', 1)[-1]}") from None
        if cfg.repo_source != self.cfg.repo_source:
            raise _Refused(f"Sorry, config `{name}` bisects another repository than this bot's.")
        return cfg, str(path)

    def _resolve(self, cfg: Config, ref: str) -> str:
        ws = Workspace(cfg.repo_source, self.state.clone_dir)
        try:
            return ws.resolve(ref)
        except RefError:
            raise _Refused(f"Sorry, ref `{ref}` does not resolve to a commit in {self.gh.repo}.") from None

    def _handle_bisect(self, issue: int, comment_id: int, cmd: BisectCommand, author: str) -> None:
        cfg, config_path = self._config_for(cmd.config)
        Workspace(cfg.repo_source, self.state.clone_dir).sync()
        good, bad = self._resolve(cfg, cmd.good), self._resolve(cfg, cmd.bad)
        ws = Workspace(cfg.repo_source, self.state.clone_dir)
        try:
            ws.first_parent_line(good, bad)
        except RefError as exc:
            raise _Refused(f"Sorry, {exc}.") from None
        job = job_id("bisect", cfg, good, bad, "bad")
        self.store.set_command(comment_id, "claimed", job)
        self.bisect_job(cfg, config_path, issue, good, bad, cmd.good, cmd.bad)
        self.store.set_command(comment_id, "done", job)

    def bisect_job(self, cfg: Config, config_path: str, issue: int | None, good: str, bad: str,
                   good_ref: str, bad_ref: str) -> dict[str, Any]:
        """Run (or resume) one bisect with its job comment; return the stored job result."""
        job = job_id("bisect", cfg, good, bad, "bad")
        title = f"bisecting `{good[:12]}`..`{bad[:12]}` ({good_ref}..{bad_ref})"
        ctx = self.ctx(cfg)
        if issue is not None:
            self.store.set_target(job, issue, job, "bisect", {"config": config_path, "title": title,
                                                              "good_ref": good_ref, "bad_ref": bad_ref})
            progress: Progress = CommentProgress(
                self.progress, title, ctx,
                lambda body: self.publisher.upsert_job_comment(issue, job, body),
                interval=self.gh.progress_interval, cancelled=lambda: self._cancel_requested(issue))
            if self.state.get_job(job) is None:
                try:
                    self.publisher.upsert_job_comment(issue, job, render_progress(title, "queued", [], ctx))
                except GitHubError as exc:
                    log.warning("could not post the queued comment (the job goes on): %s", exc)
        else:
            progress = self.progress
        args = {"good": good, "bad": bad, "good_ref": good_ref, "bad_ref": bad_ref, "find": "bad",
                "config": config_path}
        try:
            run_bisect(cfg, self.state, good, bad, find="bad", progress=progress, config_path=config_path)
        except JobCancelled as c:
            if self.state.get_job(job) is None:  # stopped before run_bisect registered it
                self.state.start_job(job, "bisect", args)
            self.state.finish_job(job, "cancelled", {"status": "cancelled", "by": c.who})
        except BisectbotError as exc:
            row = self.state.get_job(job)
            if row is None:
                self.state.start_job(job, "bisect", args)
            if row is None or row["status"] == "running":
                self.state.finish_job(job, "failed", {"status": "failed", "message": str(exc)})
        if issue is not None:
            self.publish_target(job, issue)
        row = self.state.get_job(job)
        assert row is not None
        return row

    def _handle_cancel(self, issue: int, comment_id: int, author: str) -> None:
        """Acknowledge `/cancel`; a running job already stopped at its next step."""
        with self.cancel_lock:
            self.cancel_flags.pop(issue, None)  # not consumed by a job: nothing was running
            stopped = issue in self.consumed_cancels
            self.consumed_cancels.discard(issue)
        if not stopped:
            self._reply(issue, comment_id, "Nothing is running for this issue, so there is nothing to cancel.")
        self.store.set_command(comment_id, "done")

    def request_cancel(self, issue: int, who: str) -> None:
        """Ask the running job of `issue` to stop at its next step (thread-safe)."""
        with self.cancel_lock:
            self.cancel_flags[issue] = who

    def _cancel_requested(self, issue: int) -> str | None:
        with self.cancel_lock:
            who = self.cancel_flags.pop(issue, None)
        if who is None and self.poll_cancels:
            who = self._poll_for_cancel(issue)
        if who is not None:
            with self.cancel_lock:
                self.consumed_cancels.add(issue)
        return who

    def _poll_for_cancel(self, issue: int) -> str | None:
        """watch mode: while a job runs, look (throttled) for a `/cancel` on its issue."""
        now = time.monotonic()
        if now - self._last_cancel_poll < max(self.gh.progress_interval, 5.0):
            return None
        self._last_cancel_poll = now
        try:
            cur = self.store.get_cursor(f"{self.gh.repo}#{issue}") or {}
            comments = self.publisher.list_new_comments(issue, cur.get("at"))
        except GitHubError:
            return None
        for c in comments:
            if c.id <= int(cur.get("id", 0)) or self._is_own(c.author, c.author_type, c.body):
                continue
            if isinstance(parse_comment(c.body, c.author_association, c.author), CancelCommand):
                if self.store.claim_command(c.id, issue, c.author, c.author_association, c.body):
                    self._react(c.id)
                    self.store.set_command(c.id, "done")  # the job comment says who cancelled
                    return c.author
        return None

    # -- check ---------------------------------------------------------------------------------
    def last_good_key(self) -> str:
        return f"check:last-good:{self.cfg.name}"

    def run_check(self, ref: str, issue: int | None) -> CheckOutcome:
        """Test `ref`; record it as last known good, or raise the alarm and bisect from there."""
        result = run_test(self.cfg, self.state, ref, progress=self.progress, config_path=self.config_path)
        sha, verdict, date = result["commit"], result["verdict"], _now()
        stored = self.state.get_kv(self.last_good_key())
        last_good = json.loads(stored)["sha"] if stored else None
        out = CheckOutcome(result, last_good=last_good)
        if verdict == "good":
            self.state.put_kv(self.last_good_key(), json.dumps({"sha": sha, "ref": ref, "date": date}))
        if issue is not None:
            self.store.set_target(STATUS_MARKER, issue, result["job"], "status",
                                  {"date": date, "alarm": verdict == "bad", "config": self.config_path})
            out.published &= self.publish_target(STATUS_MARKER, issue)
            if verdict == "bad":
                self.store.set_target(result["job"], issue, result["job"], "alarm",
                                      {"date": date, "last_good": last_good, "config": self.config_path})
                out.published &= self.publish_target(result["job"], issue)
        if verdict == "bad" and last_good and last_good != sha:
            row = self.bisect_job(self.cfg, self.config_path, issue, last_good, sha, last_good[:12], ref)
            out.bisect = row["result"] if row["status"] == "done" else None
            if row["status"] != "done":
                out.bisect_error = (row["result"] or {}).get("message", row["status"])
            if issue is not None:
                target = self.store.get_target(row["id"], issue)
                out.published &= bool(target and target["published"])
        return out

    # -- publishing ----------------------------------------------------------------------------
    def render(self, target: Mapping[str, Any], job: Mapping[str, Any]) -> str:
        extra = target["extra"]
        cfg = self.cfg
        if extra.get("config") and extra["config"] != self.config_path:
            try:
                cfg = load_config(extra["config"])
            except ConfigError:
                cfg = self.cfg
        ctx = self.ctx(cfg)
        result = job["result"] or {}
        if target["kind"] == "status":
            return render_status(result, ctx, date=extra.get("date", ""), alarm=bool(extra.get("alarm")))
        if target["kind"] == "alarm":
            return render_alarm(result, ctx, last_good=extra.get("last_good"), date=extra.get("date", ""))
        if job["status"] == "done":  # the refs as the user gave them (the job ran on their shas)
            refs = {k: extra[k] for k in ("good_ref", "bad_ref") if extra.get(k)}
            return render_bisect({**result, **refs}, ctx)
        if job["status"] == "cancelled":
            return render_cancelled(extra.get("title", "bisect"), result.get("by"), ctx)
        return render_failed(job["kind"], job["args"], result.get("message", job["status"]), ctx)

    def publish_target(self, marker: str, issue: int) -> bool:
        """Post the final body of one comment target; False (kept for later) if GitHub fails."""
        target = self.store.get_target(marker, issue)
        job = self.state.get_job(target["job"]) if target else None
        if target is None or job is None or job["status"] == "running":
            return False
        try:
            cid = self.publisher.upsert_job_comment(issue, marker, self.render(target, job))
        except GitHubError as exc:
            log.error("publishing %s on #%s failed, kept for `bisectbot publish`: %s", marker, issue, exc)
            self.progress.step(f"publishing {marker} on #{issue} failed (kept in the state database): {exc}")
            return False
        self.store.mark_target_published(marker, issue, cid)
        return True

    def publish_pending(self) -> tuple[int, int]:
        """Post every finished, unpublished result; return (posted, still failing)."""
        ok = failed = 0
        for marker, issue in self.store.unpublished_targets():
            if self.publish_target(marker, issue):
                ok += 1
            else:
                failed += 1
        return ok, failed

    # -- small GitHub actions (never fatal) ------------------------------------------------------
    def _react(self, comment_id: int) -> None:
        try:
            self.publisher.react(comment_id, "eyes")
        except GitHubError as exc:
            log.warning("could not react to comment %s: %s", comment_id, exc)

    def _reply(self, issue: int, comment_id: int, text: str) -> None:
        try:
            self.publisher.post_comment(issue, text, f"reply-{comment_id}")
        except GitHubError as exc:
            log.warning("could not reply to comment %s: %s", comment_id, exc)


class _Refused(BisectbotError):
    """A command that passed parsing but cannot run (unknown ref, unknown config): one line."""


# -- watch and serve -------------------------------------------------------------------------------
def watch(bot: Bot, issue: int, *, once: bool, interval: float,
          stop: threading.Event | None = None) -> None:
    """Poll `issue` for commands: resume claimed ones, post pending results, handle new ones."""
    stop = stop or threading.Event()
    bot.poll_cancels = True
    bot.resume_interrupted()
    while True:
        bot.publish_pending()
        try:
            bot.poll(issue)
        except GitHubError as exc:
            if once:
                raise
            log.error("polling #%s failed, trying again in %.0f s: %s", issue, interval, exc)
        if once or stop.wait(interval):
            return


class BotServer:
    """`bisectbot serve`: webhooks in on HTTP threads, jobs run one at a time on a worker thread.

    The HTTP thread verifies, de-duplicates (SQLite delivery store), claims the command and
    queues its comment id; the worker owns the `State` (SQLite connections are per thread).
    On start the worker first resumes commands a previous server had claimed.
    """

    def __init__(self, cfg: Config, config_path: str, state_dir: Path, publisher: Publisher,
                 secret: bytes, *, host: str = "127.0.0.1", port: int = 0,
                 progress: Progress | None = None):
        from bisectbot.github.webhook import make_webhook_server

        self.cfg, self.config_path, self.state_dir = cfg, config_path, Path(state_dir)
        self.publisher, self.progress = publisher, progress or Progress(quiet=True)
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.store = BotStore(self.state_dir)
        self.jobs: queue.Queue[int | None] = queue.Queue()
        self.cancel_flags: dict[int, str] = {}
        self.cancel_lock = threading.Lock()
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.httpd = make_webhook_server(host, port, secret, self.on_command, self.store)
        self._threads: list[threading.Thread] = []

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def on_command(self, payload: dict[str, Any]) -> None:
        """HTTP thread: claim and queue (answer GitHub fast); `/cancel` also flags the job."""
        repo = str((payload.get("repository") or {}).get("full_name", ""))
        gh = self.cfg.github
        if gh is not None and repo and repo.lower() != gh.repo.lower():
            return  # a webhook for another repository
        c, issue = payload["comment"], int((payload.get("issue") or {}).get("number", 0))
        user = c.get("user") or {}
        body, assoc, login = str(c.get("body") or ""), str(c.get("author_association") or ""), str(user.get("login") or "")
        if "<!-- bisectbot:" in body or not issue:
            return
        cmd = parse_comment(body, assoc, login)
        if cmd is None:
            return
        if isinstance(cmd, CancelCommand):
            with self.cancel_lock:
                self.cancel_flags[issue] = login
        if self.store.claim_command(int(c["id"]), issue, login, assoc, body):
            self.jobs.put(int(c["id"]))

    def _work(self) -> None:
        try:
            with State(self.state_dir) as state:
                bot = Bot(self.cfg, self.config_path, state, self.store, self.publisher, self.progress,
                          cancel_flags=self.cancel_flags, cancel_lock=self.cancel_lock)
                self.ready.set()
                bot.resume_interrupted()
                bot.publish_pending()
                while (item := self.jobs.get()) is not None:
                    bot.handle_claimed(item)
                    bot.publish_pending()
        except BaseException as exc:  # surfaced by serve_forever / tests
            self.error = exc
            self.ready.set()
            log.exception("bisectbot worker stopped")

    def start(self) -> "BotServer":
        worker = threading.Thread(target=self._work, name="bisectbot-worker", daemon=True)
        http = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self._threads = [worker, http]
        worker.start()
        self.ready.wait(60)
        if self.error is not None:
            raise self.error
        http.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.jobs.put(None)
        self._threads[0].join(timeout=600)
        self.store.close()

    def wait_idle(self, timeout: float = 120) -> bool:
        """Tests: wait until every claimed command was handled."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.jobs.empty() and not self.store.claimed_commands():
                return True
            time.sleep(0.05)
        return False
