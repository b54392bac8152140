"""The job runner behind `watch`, `serve`, `check` and `publish`: comment commands in, one
comment per job out.

Why it is built this way:

* **Claim before run.** A command comment is recorded (`Store.claim_command`) before anything
  runs; a claim that already exists is never handled again, and a claim left unfinished by a
  killed bot is *resumed* on the next start (the job replays every finished build and seed).
* **One comment per job.** The job comment's marker is the job id, fixed by `jobs.plan_bisect`
  before the job starts, and `GitHubClient.upsert_job_comment` finds an existing comment by
  marker after a retry or a restart, so a job never gets two comments.
* **Claimed on the issue, too.** A bisect command is claimed in the state database *and* on the
  issue: the job comment is created before the job runs, naming this state directory's bot
  (`GitHubClient.claim_job`); a bot that finds another's claim leaves the command, so two bots
  with separate state directories never run the same bisect. The claim gets a short budget:
  when GitHub cannot be reached the job runs anyway (a lone bot must not wait on GitHub).
* **GitHub never sits on the job's path.** The job emits typed events; `CommentObserver`
  turns them into the comment's progress text and hands it to a `ProgressPoster`, a thread of
  its own that offers the latest text at most every `progress_interval` seconds and (in watch
  mode) looks for `/cancel`. A cancel reaches the job as a `CancelToken`. Every write (progress,
  reactions, replies, results) goes through the `Outbox`, whose thread waits out an outage or
  a `Retry-After` while the jobs go on.
* **Results are never lost.** The result lives in the jobs table first (a reply in
  `bot_replies`); a comment target (`bot_targets`) is marked published only once GitHub
  accepted the final body, and `publish_pending` (`bisectbot publish`, every `watch` round, a
  server's start) queues whatever is still owed.
* **Every command ends.** Whatever fails while a command is prepared or run (a config that is
  not UTF-8, a bug) becomes a reply and a `failed` command; the next command goes on. A command
  whose handling raised twice (the bot died of it) is failed, not resumed a third time.
* **Comment text never reaches a shell or git unchecked.** `commands.parse_comment` validates
  syntax and authorisation; refs are resolved (argv only, after `--end-of-options`) before any
  job starts, and config names map only to files directly inside the configured directory.
"""

from __future__ import annotations

import logging
import threading
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable

from bisectbot.bot.memory import (
    AlarmTarget,
    BisectTarget,
    BotMemory,
    CommandRow,
    Cursor,
    PullTarget,
    StatusTarget,
    Target,
    TargetRow,
)
from bisectbot.bot.progress import CommentObserver, ProgressPoster, progress_post
from bisectbot.config import Config, load_config
from bisectbot.config.sections import GitHubConfig
from bisectbot.core.plan import BisectPlan
from bisectbot.errors import BisectbotError, ConfigError, GitHubError, RefError, one_line
from bisectbot.events import (
    Cancelled,
    CancelToken,
    Events,
    Observer,
)
from bisectbot.github.client import format_since
from bisectbot.github.commands import (
    BisectCommand,
    CancelCommand,
    CheckCommand,
    Refusal,
    parse_comment,
    validate_config_name,
)
from bisectbot.github.comment import (
    CommentContext,
    Document,
    bisect_title,
    job_title,
    render_alarm,
    render_bisect,
    render_cancelled,
    render_failed,
    render_progress,
    render_pull_check,
    render_status,
)
from bisectbot.github.issueclient import IssueClient
from bisectbot.github.outbox import Outbox
from bisectbot.inert import code, prose
from bisectbot.jobs import lifecycle as jobs
from bisectbot.records.jobargs import JobArgs
from bisectbot.records.reports import BisectReport, CommitReport, JobResult, JobStop
from bisectbot.state.files import fixture_hashes
from bisectbot.state.statedir import StateDir
from bisectbot.state.storage import JobRow
from bisectbot.statistics.outcome import Verdict

log = logging.getLogger(__name__)

STATUS_MARKER = "check-status"


def _one_line(exc: BaseException) -> str:
    text = one_line(str(exc), 300)
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


# -- the bot ---------------------------------------------------------------------------------------
@dataclass
class CheckOutcome:
    """What `check` did: the test, the bisect if one ran, and whether every comment was posted."""

    test: CommitReport
    bisect: BisectReport | None = None
    bisect_error: str | None = None
    published: bool = True
    last_good: str | None = None
    pull: int | None = None  # the pull request whose head was checked (in the sandbox)
    sandbox: str | None = None

    def to_json(self) -> dict[str, object]:
        """`bisectbot check --json`: the test's report, the last known good commit, the bisect's."""
        return {
            **self.test.to_json(),
            "last_good": self.last_good,
            "bisect": self.bisect.to_json() if self.bisect else None,
            **({"pull": self.pull, "sandbox": self.sandbox} if self.pull is not None else {}),
        }


class _Refused(BisectbotError):
    """A command that passed parsing but cannot run (unknown ref, unknown config): one line."""


class Bot:
    """Handles commands and checks for one config, in one state directory, on one issue client.

    Jobs run on the thread that calls `handle_claimed` / `run_check`; `request_cancel` may be
    called from any thread (the webhook server's)."""

    def __init__(
        self,
        cfg: Config,
        config_path: str,
        state: StateDir,
        client: IssueClient,
        terminal: Observer = lambda event: None,
        *,
        poll_cancels: bool = False,
    ):
        self.cfg, self.config_path, self.state, self.client = cfg, config_path, state, client
        self.store = state.store
        self.memory = BotMemory(state.store)
        self.terminal = terminal
        self.poll_cancels = poll_cancels  # watch: look for /cancel comments while a job runs
        self._running: dict[int, CancelToken] = {}  # issue -> the running job's token
        self._stopped: set[int] = set()  # issues whose job a /cancel stopped
        self._ended: set[str] = set()  # jobs this bot ran to their end (no progress posts after)
        self._lock = threading.Lock()
        self._contexts: dict[str, CommentContext] = {}
        self.outbox = Outbox()

    @property
    def gh(self) -> GitHubConfig:
        if self.cfg.github is None:
            raise ConfigError(f"{self.config_path}: github: section missing (repo, token_env, …)")
        return self.cfg.github

    def session(
        self, cfg: Config, config_path: str, *extra: Observer, cancel: CancelToken | None = None
    ) -> jobs.Session:
        return jobs.Session(
            cfg, self.state, Events(self.terminal, *extra, cancel=cancel), config_path=config_path, name_build_log=False
        )  # no host paths in comments

    def ctx(self, cfg: Config | None = None) -> CommentContext:
        cfg = cfg or self.cfg
        key = str(cfg.source_path)
        if key not in self._contexts:
            gh = self.cfg.github
            self._contexts[key] = CommentContext(
                repo=gh.repo if gh else "owner/repo",
                html_url=gh.html_url if gh else "https://github.com",
                fixtures=fixture_hashes(cfg.fixtures_dir),
                first_seed=cfg.run.first_seed,
                max_runs=cfg.run.max_runs,
            )
        return self._contexts[key]

    # -- commands ------------------------------------------------------------------------------
    def resume_interrupted(self) -> None:
        """Finish commands a killed bot had claimed (their jobs resume from the database); a
        command whose handling raised twice is failed instead (it would take the bot down again)."""
        for comment_id in self.memory.claimed_commands():
            if self.memory.command_raises(comment_id) >= 2:
                row = self.memory.command(comment_id)
                log.error("command in comment %s failed twice while being handled: not resumed", comment_id)
                if row is not None:
                    self._reply(
                        row.issue,
                        comment_id,
                        "Sorry, handling that command failed twice; "
                        "it will not be tried again (the bot's log says why).",
                    )
                self.memory.set_command(comment_id, "failed")
                continue
            log.info("resuming command in comment %s", comment_id)
            self.handle_claimed(comment_id)

    def poll(self, issue: int) -> int:
        """Handle the comments on `issue` newer than the stored cursor; return how many were new."""
        key = f"{self.gh.repo}#{issue}"
        cursor = self.memory.cursor(key)
        comments = self.client.comments(issue, cursor.at if cursor else None)
        new = [c for c in comments if c.id > (cursor.comment_id if cursor else 0)]
        for c in sorted(new, key=lambda c: c.id):
            self.take(c.id, c.issue_number, c.author, c.author_association, c.body, c.author_type)
            self.memory.put_cursor(key, Cursor(c.id, format_since(c.created_at)))
        return len(new)

    def take(
        self, comment_id: int, issue: int, author: str, association: str, body: str, author_type: str = "User"
    ) -> bool:
        """Claim a comment's command and handle it; False if it is not a new command."""
        if not self.claim(comment_id, issue, author, association, body, author_type):
            return False
        self.handle_claimed(comment_id)
        return True

    def claim(
        self, comment_id: int, issue: int, author: str, association: str, body: str, author_type: str = "User"
    ) -> bool:
        """Record a command before it runs (any thread); True if there is now work to do."""
        if self.is_own(author, author_type, body) or parse_comment(body, association, author) is None:
            return False
        return self.memory.claim_command(comment_id, issue, author, association, body)

    def is_own(self, author: str, author_type: str, body: str) -> bool:
        """The bot's own comment (never a command). By its login: a member's command that quotes
        the bot's hidden marker is still a command. The marker decides only when the login
        cannot be learnt."""
        if author_type == "Bot":
            return True
        login: str | None
        try:
            login = self.client.bot_login
        except GitHubError:
            login = self.cfg.github.bot_login if self.cfg.github else None
        if not login:
            return "<!-- bisectbot:" in (body or "")
        return author.lower() == str(login).lower()

    def handle_claimed(self, comment_id: int) -> None:
        """Handle a claimed command to an end: done, refused or failed, with a reply when it failed."""
        row = self.memory.command(comment_id)
        if row is None or row.status != "claimed":
            return
        try:
            self._handle(row)
        except Exception as exc:  # not the user's fault and not foreseen: still an answer, still an end
            self.memory.note_command_raised(comment_id)
            log.exception("command in comment %s raised", comment_id)
            self._reply(row.issue, comment_id, f"Sorry, that failed with an internal error: {prose(_one_line(exc))}")
            self.memory.set_command(comment_id, "failed")

    def _handle(self, row: CommandRow) -> None:
        comment_id = row.comment_id
        cmd = parse_comment(row.body, row.association, row.author)
        try:
            if cmd is None:
                self.memory.set_command(comment_id, "done")
            elif isinstance(cmd, Refusal):
                self._reply(row.issue, comment_id, cmd.reason)
                self.memory.set_command(comment_id, "refused")
            else:
                self._react(comment_id)
                if isinstance(cmd, CancelCommand):
                    self._handle_cancel(row.issue, comment_id)
                elif isinstance(cmd, BisectCommand):
                    self._handle_bisect(row.issue, comment_id, cmd)
                elif isinstance(cmd, CheckCommand):
                    self.run_check(cmd.ref or self.gh.default_ref, row.issue)
                    self.memory.set_command(comment_id, "done")
        except _Refused as refused:
            self._reply(row.issue, comment_id, str(refused))
            self.memory.set_command(comment_id, "refused")
        except BisectbotError as exc:
            log.error("command in comment %s failed: %s", comment_id, exc)
            self._reply(row.issue, comment_id, f"Sorry, that failed: {prose(str(exc))}")
            self.memory.set_command(comment_id, "failed")

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
            raise _Refused(f"Sorry, there is no config {code(name)} (looked in the configured configs directory).")
        try:
            cfg = load_config(path)
        except ConfigError as exc:
            raise _Refused(f"Sorry, config {code(name)} is invalid: {prose(str(exc).split(': ', 1)[-1])}") from None
        if cfg.repo_source != self.cfg.repo_source:
            raise _Refused(f"Sorry, config {code(name)} bisects another repository than this bot's.")
        # the bot's own GitHub section (not part of the experiment): its secrets stay withheld
        return cfg.model_copy(update={"github": self.cfg.github}), str(path)

    def _handle_bisect(self, issue: int, comment_id: int, cmd: BisectCommand) -> None:
        cfg, config_path = self._config_for(cmd.config)
        cfg = cfg.with_reference(cmd.reference)  # reference=good: like the good end, no config edit
        session = self.session(cfg, config_path)
        try:
            plan = jobs.plan_bisect(session, cmd.good, cmd.bad)
        except RefError as exc:
            if exc.unresolved is not None:
                raise _Refused(
                    f"Sorry, ref {code(exc.unresolved)} does not resolve to a commit in {self.gh.repo}."
                ) from None
            raise _Refused(f"Sorry, {prose(str(exc))}.") from None
        self.memory.set_command(comment_id, "claimed", plan.job)
        if not self._claim_on_issue(issue, cfg, plan):
            log.info("comment %s: another bot's job comment claims %s; leaving it to that bot", comment_id, plan.job)
            self.memory.set_command(comment_id, "elsewhere", plan.job)
            return
        self.bisect_job(session.cfg, config_path, plan, issue)
        self.memory.set_command(comment_id, "done", plan.job)

    def _claim_on_issue(self, issue: int, cfg: Config, plan: BisectPlan) -> bool:
        body = render_progress(self._title(plan), "queued", [], self.ctx(cfg)).fit()
        try:
            return self.client.claim_job(issue, plan.job, self.memory.bot_instance(), body)
        except GitHubError as exc:
            log.warning("could not claim %s on #%s, running it anyway: %s", plan.job, issue, exc)
            return True

    @staticmethod
    def _title(plan: BisectPlan) -> str:
        return bisect_title(plan.good, plan.bad, plan.good_ref, plan.bad_ref)

    def _handle_cancel(self, issue: int, comment_id: int) -> None:
        """Acknowledge `/cancel`; a running job already stopped at its next step."""
        with self._lock:
            stopped = issue in self._stopped
            self._stopped.discard(issue)
        if not stopped:
            self._reply(issue, comment_id, "Nothing is running for this issue, so there is nothing to cancel.")
        self.memory.set_command(comment_id, "done")

    def request_cancel(self, issue: int, who: str) -> None:
        """Ask the running job of `issue` (if any) to stop at its next step; any thread."""
        with self._lock:
            token = self._running.get(issue)
        if token is not None:
            token.cancel(who)

    # -- jobs ----------------------------------------------------------------------------------
    def bisect_job(self, cfg: Config, config_path: str, plan: BisectPlan, issue: int | None) -> JobResult:
        """Run (or resume) one bisect with its job comment; return how it ended (its report, or
        why it stopped: what the job's row records, rendered without reading it back). `cfg` is
        the config the plan was made with (`jobs.plan_bisect` bound its reference to the good end).

        On an issue, the job's comment is its target (published once the job ended), its progress
        posted off the job's thread from the events the job emits (the first one creates the
        comment when no claim did), and a /cancel already on the issue stops it before it builds."""
        title, token = self._title(plan), CancelToken()
        observers: tuple[Observer, ...] = ()
        poster: ProgressPoster | None = None
        if issue is not None:
            self.memory.set_target(plan.job, issue, plan.job, BisectTarget(config_path))
            poll = (lambda: self._poll_for_cancel(issue)) if self.poll_cancels else None
            if poll is not None and (who := poll()) is not None:
                token.cancel(who)  # a /cancel already on the issue stops the job before it builds
            poster = ProgressPoster(
                progress_post(self.outbox, self.client, self._ended, issue, plan.job),
                self.gh.progress_interval,
                token,
                poll_cancel=poll,
            )
            observers = (CommentObserver(title, self.ctx(cfg), poster.offer),)
            with self._lock:
                self._running[issue] = token
        session, args = self.session(cfg, config_path, *observers, cancel=token), jobs.bisect_args(plan)
        try:
            with poster if poster is not None else nullcontext():
                outcome: JobResult = jobs.run_bisect(session, plan)
        except (Cancelled, BisectbotError) as exc:
            log.info("bisect %s ended without a result: %s", plan.job, exc)
            outcome = jobs.stop_of(exc)
        finally:
            if issue is not None:
                with self._lock:
                    self._running.pop(issue, None)
                    self._ended.add(plan.job)
        if issue is None:
            return outcome
        if isinstance(outcome, JobStop) and outcome.status == "cancelled":
            with self._lock:
                self._stopped.add(issue)
        body = self.render_result(BisectTarget(config_path), args, outcome, self.ctx(cfg)).fit()
        send = self._sender(plan.job, issue, body)
        self.outbox.put(("comment", issue, plan.job), f"publish {plan.job} on #{issue}", send, lane="result")
        return outcome

    def _poll_for_cancel(self, issue: int) -> str | None:
        """watch mode: a `/cancel` on the issue since the cursor, claimed here (it needs no reply)."""
        try:
            cursor = self.memory.cursor(f"{self.gh.repo}#{issue}")
            comments = self.client.comments(issue, cursor.at if cursor else None)
        except GitHubError:
            return None
        for c in comments:
            if c.id <= (cursor.comment_id if cursor else 0) or self.is_own(c.author, c.author_type, c.body):
                continue
            if isinstance(parse_comment(c.body, c.author_association, c.author), CancelCommand):
                if self.memory.claim_command(c.id, issue, c.author, c.author_association, c.body):
                    self._react(c.id)
                    self.memory.set_command(c.id, "done")  # the job comment says who cancelled
                    return c.author
        return None

    # -- check ---------------------------------------------------------------------------------
    def run_check(self, ref: str, issue: int | None) -> CheckOutcome:
        """Test `ref`; record it as last known good, or raise the alarm and bisect from there.
        A pull request's head (`pull/<N>/head`) is only tested, in the sandbox: its result gets
        a comment of its own per head."""
        date = _now()
        session = self.session(self.cfg, self.config_path)
        result = jobs.run_check(session, ref, date=date)
        report = result.test
        if result.pull is not None:
            if issue is not None:
                pull = PullTarget(self.config_path, date, result.pull, result.sandbox or "no network")
                self.memory.set_target(report.job, issue, report.job, pull)
                self.queue_publish(report.job, issue)
            return CheckOutcome(report, pull=result.pull, sandbox=result.sandbox)
        out = CheckOutcome(report, last_good=result.last_good.sha if result.last_good else None)
        broken = report.verdict is Verdict.BAD
        if issue is not None:
            self.memory.set_target(STATUS_MARKER, issue, report.job, StatusTarget(self.config_path, date, broken))
            self.queue_publish(STATUS_MARKER, issue)
            if broken:
                self.memory.set_target(
                    report.job, issue, report.job, AlarmTarget(self.config_path, date, out.last_good)
                )
                self.queue_publish(report.job, issue)
        if result.bisect is not None:  # planned in `session`: its config has the plan's good end
            outcome = self.bisect_job(session.cfg, self.config_path, result.bisect, issue)
            if isinstance(outcome, BisectReport):
                out.bisect = outcome
            elif isinstance(outcome, JobStop):
                out.bisect_error = outcome.message or outcome.status
        return out

    # -- publishing ----------------------------------------------------------------------------
    def render(self, row: TargetRow, job: JobRow) -> Document:
        """The final body of a stored target (a result published after a restart)."""
        cfg = self.cfg
        if row.target.config and row.target.config != self.config_path:
            try:
                cfg = load_config(row.target.config)
            except ConfigError:
                cfg = self.cfg
        return self.render_result(row.target, job.args, job.result, self.ctx(cfg), job.status)

    def render_result(
        self, target: Target, args: JobArgs, result: JobResult | None, ctx: CommentContext, status: str = "done"
    ) -> Document:
        """A comment target's final body, from its job's arguments and result as it ended."""
        if isinstance(result, CommitReport) and isinstance(target, StatusTarget):
            return render_status(result, ctx, date=target.date, alarm=target.alarm)
        if isinstance(result, CommitReport) and isinstance(target, PullTarget):
            return render_pull_check(result, ctx, number=target.pull, date=target.date, sandbox=target.sandbox)
        if isinstance(result, CommitReport) and isinstance(target, AlarmTarget):
            return render_alarm(result, ctx, last_good=target.last_good, date=target.date)
        if isinstance(result, BisectReport):
            return render_bisect(result, ctx)
        if isinstance(result, JobStop) and result.status == "cancelled":
            return render_cancelled(job_title(args), result.by, ctx)
        message = result.message if isinstance(result, JobStop) and result.message else status
        return render_failed(args, message, ctx)

    def _post_target(self, marker: str, issue: int) -> None:
        """Outbox thread: post the final body of one stored comment target (GitHubError: kept, retried)."""
        target = self.memory.target(marker, issue)
        job = self.store.job(target.job) if target else None
        if target is None or job is None or job.status == "running" or target.published:
            return
        cid = self.client.upsert_job_comment(issue, marker, self.render(target, job).fit())
        self.memory.mark_target_published(marker, issue, cid)

    def _sender(self, marker: str, issue: int, body: str) -> Callable[[], None]:
        """What the outbox runs to publish a job's final body, rendered from the result in hand (it
        replaces the job's last progress); a restart publishes what is still owed from the database."""

        def send() -> None:
            self.memory.mark_target_published(marker, issue, self.client.upsert_job_comment(issue, marker, body))

        return send

    def queue_publish(self, marker: str, issue: int) -> None:
        """Hand a finished target's final body to the outbox (it replaces the job's last progress)."""
        self.outbox.put(
            ("comment", issue, marker),
            f"publish {marker} on #{issue}",
            lambda: self._post_target(marker, issue),
            lane="result",
        )

    def publish_pending(self) -> None:
        """Queue every finished, unpublished result and every reply still owed."""
        for marker, issue in self.memory.unpublished_targets():
            self.queue_publish(marker, issue)
        for issue, key, body in self.memory.unposted_replies():
            self._queue_reply(issue, key, body)

    def settle(self, timeout: float) -> tuple[int, int]:
        """Queue what is owed and wait up to `timeout` for GitHub to take it; return (results
        published, still owed). What is still owed stays in the database for the next run."""
        before = len(self.memory.unpublished_targets())
        self.publish_pending()
        self.outbox.flush(timeout, lanes=("result", "reply"))  # what is owed; reactions and progress are not
        return max(0, before - len(self.memory.unpublished_targets())), self.owed()

    def owed(self) -> int:
        """Results and replies GitHub has not taken yet (kept in the database)."""
        return len(self.memory.unpublished_targets()) + len(self.memory.unposted_replies())

    # -- small GitHub writes: through the outbox, never on a job's path --------------------------

    def _react(self, comment_id: int) -> None:
        self.outbox.put(
            ("react", comment_id),
            f"react to comment {comment_id}",
            lambda: self.client.react(comment_id, "eyes"),
            lane="react",
        )

    def _reply(self, issue: int, comment_id: int, text: str) -> None:
        key = f"reply-{comment_id}"
        self.memory.put_reply(issue, key, text)
        self._queue_reply(issue, key, text)

    def _queue_reply(self, issue: int, key: str, text: str) -> None:
        def send() -> None:
            self.memory.mark_reply_posted(issue, key, self.client.post_comment(issue, text, key))

        self.outbox.put(("reply", issue, key), f"reply on #{issue} ({key})", send, lane="reply")
