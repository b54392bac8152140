"""The GitHub edge: a thin client for the issue comments the bot reads and writes.

Why it looks like this:

* **github3.py's public API.** Issues, comments, edits, the bot's own identity and GitHub App
  tokens go through github3.py's documented calls; its session (a `requests.Session`) is used
  directly only where github3.py has no call (reactions).
* **One comment per job.** Every job comment starts with a hidden marker
  ``<!-- bisectbot:job=JOB_ID -->``. Before *every* create the issue's comments are listed again
  and the marker looked for among the bot's own, so a create retried after a dropped connection
  (the write may have happened), or a restarted bot, edits the existing comment instead.
* **Bounded, polite retries** (tenacity): ``Retry-After`` and ``x-ratelimit-reset`` are waited
  for, 5xx / 429 / secondary rate limits / dropped connections back off exponentially with
  jitter, a plain permission 403, 404 or 422 is never retried, and the whole call gives up
  before ``RetryPolicy.give_up_after`` seconds with a one-line :class:`GitHubError` naming the
  method and URL (never the token). Every call passes through :meth:`GitHubClient._call`.
* **An overall deadline per attempt.** Each attempt runs under the socket watchdog
  (`github.watchdog`): one that has not finished within ``RetryPolicy.attempt_deadline``
  (connect + the whole response) has its socket cut and fails like a timeout. A
  ``Retry-After`` longer than the call may wait is not waited for here: the error carries it
  (``GitHubError.retry_after``) so the caller can reschedule instead of giving up.
* **Dry run.** `github.dryrun.DryRunClient` keeps the same promise (`github.issueclient`) and
  writes what would be posted; :func:`make_client` picks it when no credentials are configured.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping, TypeVar

import github3
import github3.exceptions as gh_exc
import requests
import tenacity
from github3.issues.comment import IssueComment
from github3.session import AppInstallationTokenAuth, GitHubSession

from bisectbot.config import Config
from bisectbot.config.sections import GitHubConfig
from bisectbot.errors import GitHubError, one_line
from bisectbot.github.dryrun import DryRunClient
from bisectbot.github.issueclient import JOB_MARKER, KEY_RE, REACTIONS, REPLY_MARKER, Comment, clip
from bisectbot.github.watchdog import DeadlinePassed, Watchdog

log = logging.getLogger(__name__)

T = TypeVar("T")

DEFAULT_API_URL = "https://api.github.com"
CLAIM_BUDGET = 10.0  # seconds a job claim may take: the job waits for it (then runs unclaimed)
PROGRESS_BUDGET = 10.0  # seconds a progress edit may take: the outbox tries again later
_REPO_RE = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+")
_SINCE_RE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z")


# --------------------------------------------------------------------------- policy and credentials


@dataclass
class RetryPolicy:
    """How long and how often to retry. Tests shrink every number; defaults suit github.com.

    ``give_up_after`` bounds the whole call (attempts plus waits): a wait that would end past it
    (including one the server asked for) is not started, and the call fails at once. One attempt
    in flight can overrun it by up to the HTTP timeout. ``max_wait`` caps one backoff wait.
    """

    give_up_after: float = 120.0
    attempt_deadline: float = 60.0  # connect + the whole response of one attempt (the watchdog)
    backoff_base: float = 1.0
    max_wait: float = 30.0
    secondary_wait: float = 60.0  # GitHub: wait >= 1 minute after a secondary limit without Retry-After
    reset_slack: float = 1.0  # added to x-ratelimit-reset to absorb clock skew
    sleep: Callable[[float], None] = time.sleep

    @classmethod
    def of(cls, gh: GitHubConfig) -> "RetryPolicy":
        """From the config's github section."""
        return cls(
            give_up_after=gh.retry_give_up_after,
            attempt_deadline=gh.call_deadline,
            backoff_base=gh.retry_backoff,
            max_wait=gh.retry_max_wait,
            secondary_wait=min(60.0, gh.retry_give_up_after / 2),
        )


@dataclass(frozen=True)
class AppCredentials:
    """GitHub App installation credentials (the token is minted and renewed by us)."""

    app_id: str
    private_key_path: Path
    installation_id: int
    renew_margin: float = 300.0  # renew this many seconds before the 1 h token expires


# --------------------------------------------------------------------------- retries


@dataclass(frozen=True)
class _Failure:
    """What a failed call says about retrying, and whether GitHub said how long to wait."""

    retry: bool
    server_wait: float | None = None  # seconds the server asked for, if any
    secondary: bool = False
    reset: bool = False  # server_wait comes from x-ratelimit-reset (add clock-skew slack)


def _classify(exc: BaseException | None) -> _Failure:
    """Decide whether a failed call is worth retrying, and whether GitHub said how long to wait."""
    if exc is None:
        return _Failure(retry=False)
    if isinstance(exc, gh_exc.TransportError):  # includes ConnectionError (dropped socket, timeout)
        inner = getattr(exc, "exception", None)
        transient = (requests.ConnectionError, requests.Timeout, requests.exceptions.ChunkedEncodingError)
        return _Failure(retry=isinstance(inner, transient))
    if isinstance(exc, (requests.ConnectionError, requests.Timeout)):
        return _Failure(retry=True)
    if isinstance(exc, gh_exc.AppInstallationTokenExpired):
        return _Failure(retry=True, server_wait=0.0)
    if not isinstance(exc, gh_exc.GitHubError) or getattr(exc, "response", None) is None:
        return _Failure(retry=False)
    resp = exc.response
    status = resp.status_code
    headers = resp.headers
    retry_after = _float_header(headers, "Retry-After")
    remaining = headers.get("X-RateLimit-Remaining")
    message = str(getattr(exc, "msg", "") or "").lower()
    if status < 400:  # unparseable 2xx body: a proxy hiccup
        return _Failure(retry=True)
    if status in (403, 429):
        if retry_after is not None:
            return _Failure(retry=True, server_wait=retry_after, secondary=True)
        if remaining == "0":
            reset = _float_header(headers, "X-RateLimit-Reset")
            wait = max(0.0, reset - time.time()) if reset is not None else None
            return _Failure(retry=True, server_wait=wait, reset=wait is not None)
        if "secondary rate limit" in message or status == 429:
            return _Failure(retry=True, secondary=True)
        return _Failure(retry=False)  # a plain permission refusal: retrying cannot help
    if status >= 500:
        return _Failure(retry=True, server_wait=retry_after)
    return _Failure(retry=False)  # 401, 404, 410, 422, ...


class _GitHubWait(tenacity.wait.wait_base):
    """Wait as GitHub asked (Retry-After, the rate-limit reset); at least `secondary_wait` after
    a secondary rate limit; otherwise tenacity's exponential backoff with full jitter."""

    def __init__(self, policy: RetryPolicy):
        self.policy = policy
        self.backoff = tenacity.wait_random_exponential(multiplier=policy.backoff_base, max=policy.max_wait)

    def __call__(self, retry_state: tenacity.RetryCallState) -> float:
        outcome = retry_state.outcome
        failure = _classify(outcome.exception() if outcome else None)
        if failure.server_wait is not None:
            return failure.server_wait + (self.policy.reset_slack if failure.reset else 0.0)
        backoff = self.backoff(retry_state)
        return max(backoff, self.policy.secondary_wait) if failure.secondary else backoff


def _float_header(headers: Mapping[str, str], name: str) -> float | None:
    value = headers.get(name)
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, gh_exc.TransportError):
        inner = getattr(exc, "exception", exc)
        return f"connection failed ({type(inner).__name__})"
    if isinstance(exc, gh_exc.GitHubError) and getattr(exc, "response", None) is not None:
        msg = getattr(exc, "msg", "")
        if isinstance(msg, bytes) or (isinstance(msg, str) and msg.lstrip().startswith("<")):
            msg = exc.response.reason
        msg = one_line(str(msg or exc.response.reason), 200)
        return f"{exc.response.status_code} {msg}"
    return one_line(str(exc), 200) or type(exc).__name__


def _request_of(exc: BaseException) -> tuple[str, str] | None:
    """The method and URL of the request that actually failed, when known."""
    req = None
    resp = getattr(exc, "response", None)
    if resp is not None:
        req = getattr(resp, "request", None)
    inner = getattr(exc, "exception", None)
    if req is None and inner is not None:
        req = getattr(inner, "request", None)
    if req is None or not getattr(req, "url", None):
        return None
    return str(req.method), str(req.url)


# --------------------------------------------------------------------------- the client


class GitHubClient:
    """github3.py client for the issues of one repository, with retries and job-comment upserts."""

    def __init__(
        self,
        repo: str,
        *,
        api_url: str = DEFAULT_API_URL,
        token: str | None = None,
        app: AppCredentials | None = None,
        bot_login: str | None = None,
        retry: RetryPolicy | None = None,
        timeout: float = 30.0,
    ) -> None:
        if not _REPO_RE.fullmatch(repo):
            raise GitHubError(f"repository must look like owner/name, got {repo!r}")
        if (token is None) == (app is None):
            raise GitHubError("give exactly one of a token or GitHub App credentials")
        self.owner, self.name = repo.split("/")
        self.repo = repo
        self.api_url = api_url.rstrip("/")
        self.retry = retry or RetryPolicy()
        self._app = app
        self._app_key: bytes | None = None
        self._bot_login = bot_login
        self._lock = threading.RLock()
        self._known: dict[tuple[int, str], IssueComment] = {}  # (issue, marker) -> our comment
        self._issues: dict[int, Any] = {}
        session = GitHubSession(default_connect_timeout=min(timeout, 10.0), default_read_timeout=timeout)
        # github3.GitHubEnterprise appends /api/v3 to a host URL; the session's base_url takes any
        # API root as it is (github.com, GitHub Enterprise, the test stand-in).
        session.base_url = self.api_url
        self._watchdog = Watchdog()
        self._watchdog.mount(session)
        self._gh = github3.GitHub(session=session)
        if token is not None:
            self._gh.login(token=token)
        else:
            assert app is not None
            try:
                self._app_key = Path(app.private_key_path).read_bytes()
            except OSError as e:
                raise GitHubError(f"cannot read GitHub App private key {app.private_key_path}: {e.strerror}") from None

    # ------------------------------------------------------------------ plumbing
    def _url(self, *parts: object) -> str:
        return "/".join([self.api_url, "repos", self.owner, self.name, *map(str, parts)])

    def _ensure_token(self) -> None:
        """Mint or renew the installation token before it expires (GitHub: 1 h lifetime)."""
        if self._app is None:
            return
        auth = self._gh.session.auth
        if isinstance(auth, AppInstallationTokenAuth):
            left = (auth.expires_at - datetime.now(timezone.utc)).total_seconds()
            if left > self._app.renew_margin:
                return
        assert self._app_key is not None
        log.info("minting a GitHub App installation token for installation %s", self._app.installation_id)
        # PyJWT refuses an integer app id: pass it as a string
        self._gh.login_as_app_installation(
            self._app_key, str(self._app.app_id), self._app.installation_id, expire_in=60
        )

    def _call(self, method: str, url: str, fn: Callable[[], T], *, budget: float | None = None) -> T:
        """Run one logical API call with bounded retries (within `budget` seconds when given,
        else the policy's); raise a one-line GitHubError."""
        policy = (
            self.retry
            if budget is None
            else replace(
                self.retry,
                give_up_after=min(budget, self.retry.give_up_after),
                attempt_deadline=min(budget, self.retry.attempt_deadline),
            )
        )

        def attempt() -> T:
            with self._lock, self._watchdog.deadline(policy.attempt_deadline):
                self._ensure_token()
                return fn()

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(lambda e: isinstance(e, DeadlinePassed) or _classify(e).retry),
            wait=_GitHubWait(policy),
            stop=tenacity.stop_before_delay(policy.give_up_after),
            sleep=policy.sleep,
            reraise=True,
        )
        start = time.monotonic()
        try:
            return retrying(attempt)
        except DeadlinePassed:
            attempts = retrying.statistics.get("attempt_number", 1)
            err = GitHubError(
                f"GitHub {method} {url} failed: no complete answer within "
                f"{policy.attempt_deadline:g} s (the call's deadline; {attempts} attempts)"
            )
            raise err from None
        except (gh_exc.GitHubException, requests.RequestException) as exc:
            failure = _classify(exc)
            attempts = retrying.statistics.get("attempt_number", 1)
            elapsed = time.monotonic() - start
            where = _request_of(exc) or (method, url)
            asked = failure.server_wait
            longer = asked is not None and asked > policy.give_up_after - elapsed
            extra = f"; server asked to wait {asked:.0f} s" if longer else ""
            tries = f" (gave up after {attempts} attempts in {elapsed:.1f} s{extra})" if failure.retry else ""
            err = GitHubError(f"GitHub {where[0]} {where[1]} failed: {_describe(exc)}{tries}")
            resp = getattr(exc, "response", None)
            err.status = resp.status_code if resp is not None else None
            # GitHub asked for a longer wait than this call may take: the caller can come back then
            err.retry_after = asked if longer and failure.retry else None
            raise err from None

    # ------------------------------------------------------------------ identity
    @property
    def bot_login(self) -> str:
        """Whose comments count as ours (the marker search ignores everyone else's)."""
        if self._bot_login is None:
            self._bot_login = self._resolve_bot_login()
        return self._bot_login

    def _resolve_bot_login(self) -> str:
        if self._app is not None:
            app, key = self._app, self._app_key

            def slug() -> str:
                # GET /app takes the App's own JWT; the installation token is put back after
                installation = self._gh.session.auth
                self._gh.login_as_app(key, str(app.app_id), expire_in=60)
                try:
                    return str(self._gh.authenticated_app().slug)
                finally:
                    self._gh.session.auth = installation

            return f"{self._call('GET', f'{self.api_url}/app', slug)}[bot]"
        try:
            return str(self._call("GET", f"{self.api_url}/user", lambda: self._gh.me()).login)
        except GitHubError as e:
            if getattr(e, "status", None) == 403:  # an Actions GITHUB_TOKEN cannot read /user
                return "github-actions[bot]"
            raise

    # ------------------------------------------------------------------ reads
    def issue(self, number: int) -> Any:
        """The github3 Issue (cached: its URLs do not change)."""
        number = int(number)
        if number not in self._issues:
            url = self._url("issues", number)
            issue = self._call("GET", url, lambda: self._gh.issue(self.owner, self.name, number))
            if issue is None:  # github3 answers None for an issue it cannot read
                raise GitHubError(f"GitHub GET {url} failed: no such issue")
            self._issues[number] = issue
        return self._issues[number]

    def comments(self, issue: int, since: int | datetime | str | None = None) -> list[Comment]:
        """Comments on one issue, oldest first, through every page.

        ``since`` is a comment id (strictly newer ones are returned) or a timestamp (GitHub's
        filter: updated at or after it, second resolution — callers dedupe by id).
        """
        if isinstance(since, bool):
            raise TypeError("since must be a comment id or a timestamp")
        since_id = since if isinstance(since, int) else None
        stamp = None if since is None or isinstance(since, int) else format_since(since)
        target = self.issue(issue)
        url = self._url("issues", int(issue), "comments")
        found = self._call("GET", url, lambda: [_to_comment(c) for c in target.comments(since=stamp)])
        if since_id is not None:
            found = [c for c in found if c.id > since_id]
        return sorted(found, key=lambda c: c.id)

    # ------------------------------------------------------------------ writes
    def react(self, comment_id: int, content: str = "eyes") -> None:
        """github3.py has no reactions call: POST through its session (idempotent on GitHub)."""
        if content not in REACTIONS:
            raise ValueError(f"unknown reaction {content!r}")
        url = self._url("issues", "comments", int(comment_id), "reactions")

        def post() -> None:
            resp = self._gh.session.post(
                url, json={"content": content}, headers={"Accept": "application/vnd.github+json"}
            )
            if resp.status_code not in (200, 201):
                raise gh_exc.error_for(resp)

        self._call("POST", url, post)

    def upsert_job_comment(self, issue: int, job_id: str, body: str, *, budget: float | None = None) -> int:
        """Create the job's comment once, then edit it in place. Safe to retry and to restart.
        `budget` bounds the whole call (a progress edit: short, the outbox tries again later)."""
        if not KEY_RE.fullmatch(job_id):
            raise ValueError(f"job id {job_id!r} must match {KEY_RE.pattern}")
        return self._create_once(int(issue), JOB_MARKER.format(job_id), body, edit=True, budget=budget)

    def claim_job(self, issue: int, job_id: str, instance: str, body: str) -> bool:
        """Claim a job on the issue itself: True if it is this bot instance's to run.

        Two bots with separate state directories see the same command; the first job comment
        decides. The comment's marker names the instance (``<!-- bisectbot:job=J by=I -->``): if
        another instance's comment for the job is there, the job is not ours; if none is, ours
        is created and the issue listed again, and when two bots created at once the earliest
        comment wins (the other deletes its own). A comment without an owner (an older bot)
        counts as ours. Later edits keep the comment's marker line."""
        if not KEY_RE.fullmatch(job_id) or not KEY_RE.fullmatch(instance):
            raise ValueError(f"job id {job_id!r} and instance {instance!r} must match {KEY_RE.pattern}")
        issue = int(issue)
        target = self.issue(issue)
        me = self.bot_login.lower()
        mine = _owned_marker(job_id, instance)

        def job_comments() -> list[IssueComment]:
            return sorted(
                (c for c in target.comments() if c.user.login.lower() == me and _job_of(c.body or "") == job_id),
                key=lambda c: c.id,
            )

        def claim() -> bool:
            found = job_comments()
            if not found:
                created = target.create_comment(clip(f"{mine}\n{body}"))
                if created is None:
                    raise GitHubError(
                        f"GitHub POST {self._url('issues', issue, 'comments')} failed: no comment was created"
                    )
                found = job_comments() or [created]
            first = found[0]
            ours = _first_line(first.body or "") in (mine, JOB_MARKER.format(job_id))
            if ours:
                self._known[(issue, JOB_MARKER.format(job_id))] = first
            for c in found[1:]:  # a comment of ours that lost the race: gone, so one comment per job
                if _first_line(c.body or "") == mine:
                    c.delete()
            return ours

        return self._call("POST", self._url("issues", issue, "comments"), claim, budget=CLAIM_BUDGET)

    def post_comment(self, issue: int, body: str, key: str) -> int:
        """Post a reply once per ``key`` (e.g. the command comment's id): a retry or a
        restart that handles the same command again does not answer twice."""
        if not KEY_RE.fullmatch(key):
            raise ValueError(f"reply key {key!r} must match {KEY_RE.pattern}")
        return self._create_once(int(issue), REPLY_MARKER.format(key), body, edit=False)

    def _create_once(self, issue: int, marker: str, body: str, *, edit: bool, budget: float | None = None) -> int:
        full = clip(f"{marker}\n{body}")
        key = (issue, marker)
        known = self._known.get(key)
        if known is not None and not edit:
            return int(known.id)
        if known is not None:
            url = self._url("issues", "comments", known.id)
            edit_it = lambda: _edit(known, clip(f"{_first_line(known.body or '')}\n{body}"))  # noqa: E731
            if self._call("PATCH", url, edit_it, budget=budget):
                return int(known.id)
            self._known.pop(key, None)  # deleted by someone: find or create again
        target = self.issue(issue)
        me = self.bot_login.lower()
        job = _job_of(marker)

        def names(text: str) -> bool:  # a job comment may carry its owner in its marker
            return marker in text if job is None else _job_of(text) == job

        def find_or_create() -> IssueComment:
            # Re-list before every create: a previous attempt may have written the comment
            # before its connection dropped, or a previous run may have.
            ours = [c for c in target.comments() if c.user.login.lower() == me and names(c.body or "")]
            if ours:
                first = min(ours, key=lambda c: c.id)
                if not edit or _edit(first, clip(f"{_first_line(first.body or '')}\n{body}")):
                    return first
            created = target.create_comment(full)
            if created is None:
                raise GitHubError(
                    f"GitHub POST {self._url('issues', issue, 'comments')} failed: no comment was created"
                )
            return created

        comment = self._call("POST", self._url("issues", issue, "comments"), find_or_create, budget=budget)
        self._known[key] = comment
        return int(comment.id)


_JOB_RE = re.compile(r"<!-- bisectbot:job=([A-Za-z0-9][A-Za-z0-9_.:-]{0,99})(?: by=[A-Za-z0-9_.:-]+)? -->")


def _owned_marker(job_id: str, instance: str) -> str:
    return f"<!-- bisectbot:job={job_id} by={instance} -->"


def _first_line(text: str) -> str:
    return text.split("\n", 1)[0]


def _job_of(text: str) -> str | None:
    """The job a job comment is for (its first line is the marker), else None."""
    m = _JOB_RE.fullmatch(_first_line(text).strip())
    return m.group(1) if m else None


def _edit(comment: IssueComment, body: str) -> bool:
    """Put `body` in the comment (no request when it is there already); False if it is gone."""
    if comment.body == body:
        return True
    try:
        return bool(comment.edit(body))
    except gh_exc.NotFoundError:
        return False


def _to_comment(c: IssueComment) -> Comment:
    return Comment(
        id=int(c.id),
        issue_number=int(str(c.issue_url).rstrip("/").rsplit("/", 1)[-1]),
        body=c.body or "",
        author=c.user.login,
        author_type=c.user.type,
        author_association=c.author_association,
        created_at=c.created_at.astimezone(timezone.utc),
        updated_at=c.updated_at.astimezone(timezone.utc),
        html_url=c.html_url,
    )


def format_since(since: datetime | str) -> str:
    """``YYYY-MM-DDTHH:MM:SSZ`` in UTC (github3 4.0.1 turns aware datetimes into ``+00:00Z``)."""
    if isinstance(since, str):
        if not _SINCE_RE.fullmatch(since):
            raise ValueError(f"since must look like 2024-01-31T12:00:00Z, got {since!r}")
        return since
    if since.tzinfo is None:
        since = since.replace(tzinfo=timezone.utc)  # naive means UTC here
    return since.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


# --------------------------------------------------------------------------- factory


def make_client(
    cfg: Config, env: Mapping[str, str] | None = None, *, retry: RetryPolicy | None = None
) -> GitHubClient | DryRunClient:
    """The client the config's github section asks for: a GitHub App, a token from the
    environment variable it names, or (no credentials) a dry run — logged, never silent."""
    gh = cfg.github
    if gh is None:
        return DryRunClient(None)
    env = os.environ if env is None else env
    retry = retry or RetryPolicy.of(gh)
    app_parts = (gh.app_id, gh.private_key, gh.installation_id)
    if all(p is not None for p in app_parts):
        app = AppCredentials(str(gh.app_id), cfg.resolve(str(gh.private_key)), int(gh.installation_id or 0))
        return GitHubClient(gh.repo, api_url=gh.api_url, app=app, bot_login=gh.bot_login, retry=retry)
    if any(p is not None for p in app_parts):
        raise GitHubError(
            f"{cfg.source_path}: github: a GitHub App needs app_id, private_key and installation_id together"
        )
    token = env.get(gh.token_env, "").strip()
    if token:
        return GitHubClient(gh.repo, api_url=gh.api_url, token=token, bot_login=gh.bot_login, retry=retry)
    log.warning("no %s and no GitHub App configured: dry run, nothing will be posted", gh.token_env)
    return DryRunClient(cfg.resolve(gh.dry_run_file) if gh.dry_run_file else None, repo=gh.repo)
