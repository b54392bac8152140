"""A real GitHub REST stand-in on 127.0.0.1 for the publish/webhook tests.

Why a server and not mocks: the retry, pagination and duplicate-avoidance logic in
``bisectbot.github.client`` only means something against real HTTP — real sockets that drop,
real ``Link``/``Retry-After``/``x-ratelimit-*`` headers, and github3.py parsing real
GitHub field sets. Every ``url`` in a response points back at this server.

Use it through the ``gh_server`` fixture (import it into a test module)::

    from ghserver import gh_server, OWNER, REPO, BOT_TOKEN   # noqa: F401

    def test_x(gh_server):
        gh_server.fail("POST", r"/repos/.*/comments", "write_then_drop", times=1)
        ...
        assert gh_server.count("POST", r"/repos/.*/issues/1/comments") == 2

Fault kinds for :meth:`GitHubStandIn.fail`: ``500``, ``502`` (HTML body),
``secondary`` (403 + Retry-After + "secondary rate limit" message),
``secondary_no_retry_after``, ``429`` (+ Retry-After), ``ratelimit`` (403 with
``x-ratelimit-remaining: 0`` and a reset time), ``forbidden`` (plain permission 403),
``not_found``, ``422``, ``hang`` (no answer for ``hang_for`` s, then drop), ``drop`` (close the socket without answering, nothing done),
``trickle`` (perform the request, then send the answer one byte every ``hang_for`` s; ``trickled`` counts the bytes),
``write_then_drop`` and ``write_then_500`` (perform the request, then fail the answer).
"""

from __future__ import annotations

import html
import json
import re
import secrets
import socket
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterator
from urllib.parse import parse_qs, urlencode, urlsplit

import pytest

OWNER = "ggml-org"
REPO = "llama.cpp"
FULL_NAME = f"{OWNER}/{REPO}"
ISSUE = 1
BOT_LOGIN = "bisectbot"
BOT_TOKEN = "ghp_bisectbotTESTtoken0123456789abcdef"

SECONDARY_MESSAGE = (
    "You have exceeded a secondary rate limit. Please wait a few minutes before you "
    "try again. If you reach out to GitHub Support for help, please include the "
    "request ID 0000:0000:0000000:0000000:00000000."
)
DOCS = "https://docs.github.com/rest"
FAULT_KINDS = frozenset(
    {
        "500",
        "502",
        "secondary",
        "secondary_no_retry_after",
        "429",
        "ratelimit",
        "forbidden",
        "not_found",
        "422",
        "hang",
        "drop",
        "write_then_drop",
        "write_then_500",
        "trickle",
    }
)
REACTION_CONTENTS = ("+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes")


def iso(dt: datetime) -> str:
    """GitHub's timestamp format: UTC, second precision, trailing Z."""
    return dt.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Fault:
    """Fail the next ``times`` requests whose method and path match."""

    method: str
    path_re: re.Pattern[str]
    kind: str
    times: int
    retry_after: int = 1
    reset_in: float = 1.0
    hang_for: float = 1.0


@dataclass
class Recorded:
    """One request as the server saw it (for assertions)."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    status: int | None = None  # None: the connection was dropped

    def json(self) -> Any:
        return json.loads(self.body or b"null")


@dataclass
class UserRec:
    login: str
    id: int
    type: str = "User"
    created_at: datetime = field(default_factory=lambda: datetime(2020, 1, 1, tzinfo=timezone.utc))


@dataclass
class CommentRec:
    id: int
    repo: str
    issue: int
    login: str
    body: str
    created_at: datetime
    updated_at: datetime
    reactions: dict[str, set[str]] = field(default_factory=dict)


@dataclass
class IssueRec:
    id: int
    number: int
    title: str
    login: str
    body: str
    created_at: datetime
    state: str = "open"


@dataclass
class RepoRec:
    id: int
    owner: str
    name: str
    members: set[str] = field(default_factory=set)
    collaborators: dict[str, str] = field(default_factory=dict)  # login -> permission
    issues: dict[int, IssueRec] = field(default_factory=dict)

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.name}"


@dataclass
class AppRec:
    app_id: str
    public_key_pem: bytes
    installation_id: int
    slug: str
    token_ttl: float


class GitHubStandIn:
    """In-memory GitHub with an HTTP front end; thread-safe; see module docstring."""

    def __init__(self, prefix: str = "") -> None:
        self.prefix = prefix.rstrip("/")
        self.lock = threading.RLock()
        self.users: dict[str, UserRec] = {}
        self.tokens: dict[str, tuple[str, datetime | None]] = {}
        self.repos: dict[str, RepoRec] = {}
        self.comments: dict[int, CommentRec] = {}
        self.faults: list[Fault] = []
        self.trickled = 0  # bytes sent by `trickle` faults
        self.requests: list[Recorded] = []
        self.app: AppRec | None = None
        self.clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)
        self.rate_remaining = 5000
        self._ids = iter(range(1_000_001, 10**12))
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ---------------------------------------------------------------- lifecycle
    def start(self) -> "GitHubStandIn":
        handler = _make_handler(self)
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    @property
    def origin(self) -> str:
        assert self._httpd is not None, "server not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def base_url(self) -> str:
        """The API root to give the client (``api_url``)."""
        return self.origin + self.prefix

    @property
    def html_root(self) -> str:
        return self.origin + "/html"

    # ---------------------------------------------------------------- seeding
    def add_user(self, login: str, type: str = "User") -> UserRec:
        with self.lock:
            if login not in self.users:
                self.users[login] = UserRec(login, next(self._ids), type)
            return self.users[login]

    def add_token(self, token: str, login: str, expires_at: datetime | None = None) -> None:
        with self.lock:
            self.add_user(login, "Bot" if login.endswith("[bot]") else "User")
            self.tokens[token] = (login, expires_at)

    def add_repo(self, owner: str, name: str) -> RepoRec:
        with self.lock:
            self.add_user(owner)
            rec = RepoRec(next(self._ids), owner, name)
            self.repos[rec.full_name] = rec
            return rec

    def add_collaborator(self, repo: str, login: str, permission: str = "write") -> None:
        with self.lock:
            self.add_user(login)
            self.repos[repo].collaborators[login] = permission

    def add_member(self, repo: str, login: str) -> None:
        with self.lock:
            self.add_user(login)
            self.repos[repo].members.add(login)

    def add_issue(
        self, repo: str, number: int, title: str = "Distribution changed", login: str | None = None
    ) -> IssueRec:
        with self.lock:
            r = self.repos[repo]
            login = login or r.owner
            self.add_user(login)
            rec = IssueRec(next(self._ids), number, title, login, "", self.clock())
            r.issues[number] = rec
            return rec

    def add_comment(self, repo: str, issue: int, login: str, body: str, at: datetime | None = None) -> int:
        with self.lock:
            self.add_user(login, "Bot" if login.endswith("[bot]") else "User")
            now = at or self.clock()
            cid = next(self._ids)
            self.comments[cid] = CommentRec(cid, repo, issue, login, body, now, now)
            return cid

    def enable_app(
        self,
        app_id: str,
        public_key_pem: bytes,
        installation_id: int,
        slug: str = "bisectbot",
        token_ttl: float = 3600.0,
    ) -> None:
        """Accept GitHub App JWTs signed by the matching private key."""
        with self.lock:
            self.app = AppRec(str(app_id), public_key_pem, installation_id, slug, token_ttl)
            self.add_user(f"{slug}[bot]", "Bot")

    # ---------------------------------------------------------------- faults & records
    def fail(
        self,
        method: str,
        path: str,
        kind: str,
        times: int = 1,
        retry_after: int = 1,
        reset_in: float = 1.0,
        hang_for: float = 1.0,
    ) -> None:
        """Fail the next ``times`` requests for METHOD and path regex (full match)."""
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}")
        with self.lock:
            self.faults.append(Fault(method.upper(), re.compile(path), kind, times, retry_after, reset_in, hang_for))

    def _take_fault(self, method: str, path: str) -> Fault | None:
        with self.lock:
            for f in self.faults:
                if f.times > 0 and f.method == method and f.path_re.fullmatch(path):
                    f.times -= 1
                    return f
        return None

    def matching(self, method: str, path: str = ".*") -> list[Recorded]:
        pat = re.compile(path)
        with self.lock:
            return [r for r in self.requests if r.method == method.upper() and pat.fullmatch(r.path)]

    def count(self, method: str, path: str = ".*") -> int:
        return len(self.matching(method, path))

    def comments_on(self, repo: str, issue: int) -> list[CommentRec]:
        with self.lock:
            return sorted(
                (c for c in self.comments.values() if c.repo == repo and c.issue == issue), key=lambda c: c.id
            )

    # ---------------------------------------------------------------- JSON shapes
    def user_json(self, login: str) -> dict[str, Any]:
        u = self.users[login]
        api = f"{self.base_url}/users/{login}"
        return {
            "login": login,
            "id": u.id,
            "node_id": f"U_{u.id}",
            "avatar_url": f"{self.origin}/avatars/u/{u.id}?v=4",
            "gravatar_id": "",
            "url": api,
            "html_url": f"{self.html_root}/{login}",
            "followers_url": f"{api}/followers",
            "following_url": f"{api}/following{{/other_user}}",
            "gists_url": f"{api}/gists{{/gist_id}}",
            "starred_url": f"{api}/starred{{/owner}}{{/repo}}",
            "subscriptions_url": f"{api}/subscriptions",
            "organizations_url": f"{api}/orgs",
            "repos_url": f"{api}/repos",
            "events_url": f"{api}/events{{/privacy}}",
            "received_events_url": f"{api}/received_events",
            "type": u.type,
            "user_view_type": "public",
            "site_admin": False,
        }

    def full_user_json(self, login: str) -> dict[str, Any]:
        u = self.users[login]
        data = self.user_json(login)
        data.update(
            name=login,
            company=None,
            blog="",
            location=None,
            email=None,
            hireable=None,
            bio=None,
            twitter_username=None,
            public_repos=1,
            public_gists=0,
            followers=0,
            following=0,
            created_at=iso(u.created_at),
            updated_at=iso(u.created_at),
        )
        return data

    def association(self, repo: RepoRec, login: str) -> str:
        if login == repo.owner:
            return "OWNER"
        if login in repo.members:
            return "MEMBER"
        if login in repo.collaborators:
            return "COLLABORATOR"
        return "NONE"

    def permission(self, repo: RepoRec, login: str) -> str:
        if login == repo.owner:
            return "admin"
        if login in repo.members:
            return "write"
        return repo.collaborators.get(login, "none")

    def repo_json(self, r: RepoRec) -> dict[str, Any]:
        api = f"{self.base_url}/repos/{r.full_name}"
        stamp = iso(datetime(2023, 3, 10, tzinfo=timezone.utc))
        data: dict[str, Any] = {
            "id": r.id,
            "node_id": f"R_{r.id}",
            "name": r.name,
            "full_name": r.full_name,
            "private": False,
            "owner": self.user_json(r.owner),
            "html_url": f"{self.html_root}/{r.full_name}",
            "description": "LLM inference in C/C++",
            "fork": False,
            "url": api,
            "homepage": "",
            "language": "C++",
            "size": 1,
            "created_at": stamp,
            "updated_at": stamp,
            "pushed_at": stamp,
            "git_url": f"git://127.0.0.1/{r.full_name}.git",
            "ssh_url": f"git@127.0.0.1:{r.full_name}.git",
            "clone_url": f"{self.html_root}/{r.full_name}.git",
            "svn_url": f"{self.html_root}/{r.full_name}",
            "mirror_url": None,
            "archived": False,
            "disabled": False,
            "default_branch": "master",
            "has_issues": True,
            "has_projects": True,
            "has_wiki": True,
            "has_pages": False,
            "has_downloads": True,
            "has_discussions": True,
            "forks_count": 0,
            "stargazers_count": 0,
            "watchers_count": 0,
            "watchers": 0,
            "forks": 0,
            "open_issues_count": len(r.issues),
            "open_issues": len(r.issues),
            "network_count": 0,
            "subscribers_count": 0,
            "visibility": "public",
            "topics": [],
            "license": None,
            "allow_forking": True,
            "is_template": False,
            "web_commit_signoff_required": False,
            "permissions": {"admin": False, "maintain": False, "push": True, "triage": True, "pull": True},
        }
        for name, tail in [
            ("archive_url", "/{archive_format}{/ref}"),
            ("assignees_url", "/assignees{/user}"),
            ("blobs_url", "/git/blobs{/sha}"),
            ("branches_url", "/branches{/branch}"),
            ("collaborators_url", "/collaborators{/collaborator}"),
            ("comments_url", "/comments{/number}"),
            ("commits_url", "/commits{/sha}"),
            ("compare_url", "/compare/{base}...{head}"),
            ("contents_url", "/contents/{+path}"),
            ("contributors_url", "/contributors"),
            ("deployments_url", "/deployments"),
            ("downloads_url", "/downloads"),
            ("events_url", "/events"),
            ("forks_url", "/forks"),
            ("git_commits_url", "/git/commits{/sha}"),
            ("git_refs_url", "/git/refs{/sha}"),
            ("git_tags_url", "/git/tags{/sha}"),
            ("hooks_url", "/hooks"),
            ("issue_comment_url", "/issues/comments{/number}"),
            ("issue_events_url", "/issues/events{/number}"),
            ("issues_url", "/issues{/number}"),
            ("keys_url", "/keys{/key_id}"),
            ("labels_url", "/labels{/name}"),
            ("languages_url", "/languages"),
            ("merges_url", "/merges"),
            ("milestones_url", "/milestones{/number}"),
            ("notifications_url", "/notifications{?since,all,participating}"),
            ("pulls_url", "/pulls{/number}"),
            ("releases_url", "/releases{/id}"),
            ("stargazers_url", "/stargazers"),
            ("statuses_url", "/statuses/{sha}"),
            ("subscribers_url", "/subscribers"),
            ("subscription_url", "/subscription"),
            ("tags_url", "/tags"),
            ("teams_url", "/teams"),
            ("trees_url", "/git/trees{/sha}"),
        ]:
            data[name] = api + tail
        return data

    def _reactions_json(self, url: str, reactions: dict[str, set[str]]) -> dict[str, Any]:
        counts = {c: len(reactions.get(c, ())) for c in REACTION_CONTENTS}
        return {"url": url, "total_count": sum(counts.values()), **counts}

    def issue_json(self, r: RepoRec, i: IssueRec, accept: str) -> dict[str, Any]:
        api = f"{self.base_url}/repos/{r.full_name}/issues/{i.number}"
        n_comments = sum(1 for c in self.comments.values() if c.repo == r.full_name and c.issue == i.number)
        data: dict[str, Any] = {
            "url": api,
            "repository_url": f"{self.base_url}/repos/{r.full_name}",
            "labels_url": f"{api}/labels{{/name}}",
            "comments_url": f"{api}/comments",
            "events_url": f"{api}/events",
            "html_url": f"{self.html_root}/{r.full_name}/issues/{i.number}",
            "id": i.id,
            "node_id": f"I_{i.id}",
            "number": i.number,
            "title": i.title,
            "user": self.user_json(i.login),
            "labels": [],
            "state": i.state,
            "locked": False,
            "assignee": None,
            "assignees": [],
            "milestone": None,
            "comments": n_comments,
            "created_at": iso(i.created_at),
            "updated_at": iso(i.created_at),
            "closed_at": None,
            "author_association": self.association(r, i.login),
            "active_lock_reason": None,
            "body": i.body,
            "closed_by": None,
            "reactions": self._reactions_json(f"{api}/reactions", {}),
            "timeline_url": f"{api}/timeline",
            "performed_via_github_app": None,
            "state_reason": None,
        }
        _add_body_variants(data, i.body, accept)
        return data

    def comment_json(self, c: CommentRec, accept: str) -> dict[str, Any]:
        r = self.repos[c.repo]
        api = f"{self.base_url}/repos/{c.repo}/issues/comments/{c.id}"
        data: dict[str, Any] = {
            "url": api,
            "html_url": f"{self.html_root}/{c.repo}/issues/{c.issue}#issuecomment-{c.id}",
            "issue_url": f"{self.base_url}/repos/{c.repo}/issues/{c.issue}",
            "id": c.id,
            "node_id": f"IC_{c.id}",
            "user": self.user_json(c.login),
            "created_at": iso(c.created_at),
            "updated_at": iso(c.updated_at),
            "author_association": self.association(r, c.login),
            "body": c.body,
            "reactions": self._reactions_json(f"{api}/reactions", c.reactions),
            "performed_via_github_app": None,
        }
        _add_body_variants(data, c.body, accept)
        return data


def _add_body_variants(data: dict[str, Any], body: str, accept: str) -> None:
    """GitHub adds body_html/body_text only for the matching media types."""
    if "full+json" in accept or "html+json" in accept:
        data["body_html"] = f"<p>{html.escape(body)}</p>"
    if "full+json" in accept or "text+json" in accept:
        data["body_text"] = body


class _Drop(Exception):
    """Internal: close the connection without an answer."""


def _make_handler(gh: GitHubStandIn) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "GitHub.com"
        sys_version = ""
        wbufsize = -1  # one send per response (headers + body): no 40 ms delayed-ACK stalls
        disable_nagle_algorithm = True

        def log_message(self, format: str, *args: Any) -> None:  # quiet test output
            pass

        def do_GET(self) -> None:
            self._handle("GET")

        def do_POST(self) -> None:
            self._handle("POST")

        def do_PATCH(self) -> None:
            self._handle("PATCH")

        def do_DELETE(self) -> None:
            self._handle("DELETE")

        # ------------------------------------------------------------ plumbing
        def _handle(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            split = urlsplit(self.path)
            path = split.path
            if gh.prefix and path.startswith(gh.prefix + "/"):
                path = path[len(gh.prefix) :]
            elif gh.prefix:
                path = "/__outside_prefix__" + path
            rec = Recorded(method, path, parse_qs(split.query), dict(self.headers.items()), body)
            with gh.lock:
                gh.requests.append(rec)
            self._rec = rec
            fault = gh._take_fault(method, path)
            if fault and fault.kind == "hang":  # answer nothing for a while, then drop
                time.sleep(fault.hang_for)
                return self._drop()
            if fault and fault.kind == "drop":
                return self._drop()
            if fault and fault.kind not in ("write_then_drop", "write_then_500", "trickle"):
                return self._fault(fault)
            try:
                status, payload, extra = self._route(method, path, parse_qs(split.query), body)
            except _Drop:
                return self._drop()
            if fault and fault.kind == "write_then_drop":
                return self._drop()
            if fault and fault.kind == "write_then_500":
                return self._fault(Fault(method, fault.path_re, "500", 0))
            if fault and fault.kind == "trickle":
                return self._trickle(status, payload, fault.hang_for)
            self._send(status, payload, extra)

        def _trickle(self, status: int, payload: Any, every: float) -> None:
            """The whole answer, padded to 64 KiB, one byte at a time (a stalled proxy)."""
            data = json.dumps(payload).encode()
            data += b" " * max(0, 65536 - len(data))
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.flush()
            for byte in data:
                try:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                except OSError:
                    return
                with gh.lock:
                    gh.trickled += 1
                time.sleep(every)

        def _drop(self) -> None:
            self.close_connection = True
            try:
                self.connection.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

        def _rate_headers(self) -> dict[str, str]:
            reset = int(time.time()) + 3600
            return {
                "X-RateLimit-Limit": "5000",
                "X-RateLimit-Remaining": str(gh.rate_remaining),
                "X-RateLimit-Reset": str(reset),
                "X-RateLimit-Used": str(5000 - gh.rate_remaining),
                "X-RateLimit-Resource": "core",
            }

        def _send(
            self, status: int, payload: Any, extra: dict[str, str] | None = None, raw: bytes | None = None
        ) -> None:
            data = raw if raw is not None else (b"" if payload is None else json.dumps(payload).encode())
            self.send_response(status)
            headers = {
                "Content-Type": "text/html" if raw is not None else "application/json; charset=utf-8",
                "X-GitHub-Media-Type": "github.v3; format=json",
                "X-GitHub-Request-Id": secrets.token_hex(8).upper(),
                **self._rate_headers(),
                **(extra or {}),
            }
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            self._rec.status = status

        def _fault(self, f: Fault) -> None:
            if f.kind == "500":
                return self._send(500, {"message": "Server Error"})
            if f.kind == "502":
                return self._send(502, None, raw=b"<html><body><h1>502 Bad Gateway</h1></body></html>")
            if f.kind in ("secondary", "429"):
                msg = {"message": SECONDARY_MESSAGE, "documentation_url": DOCS + "#secondary-rate-limits"}
                return self._send(403 if f.kind == "secondary" else 429, msg, {"Retry-After": str(f.retry_after)})
            if f.kind == "secondary_no_retry_after":
                return self._send(403, {"message": SECONDARY_MESSAGE, "documentation_url": DOCS})
            if f.kind == "ratelimit":
                extra = {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": str(int(time.time() + f.reset_in))}
                msg = {"message": "API rate limit exceeded for user ID 1.", "documentation_url": DOCS}
                return self._send(403, msg, extra)
            if f.kind == "forbidden":
                return self._send(403, {"message": "Resource not accessible by integration", "documentation_url": DOCS})
            if f.kind == "422":
                return self._send(
                    422,
                    {
                        "message": "Validation Failed",
                        "errors": [{"resource": "IssueComment", "code": "invalid", "field": "body"}],
                        "documentation_url": DOCS,
                    },
                )
            if f.kind == "not_found":
                return self._send(404, {"message": "Not Found", "documentation_url": DOCS})
            raise AssertionError(f.kind)

        # ------------------------------------------------------------ auth
        def _auth(self) -> tuple[str, str] | None:
            """Return (kind, subject): ('token', login) or ('jwt', app_id); None if bad."""
            header = self.headers.get("Authorization", "")
            scheme, _, value = header.partition(" ")
            if scheme.lower() == "token" and value in gh.tokens:
                login, expires = gh.tokens[value]
                if expires is not None and expires <= gh.clock():
                    return None
                return ("token", login)
            if scheme.lower() == "bearer" and value in gh.tokens:
                return ("token", gh.tokens[value][0])
            if scheme.lower() == "bearer" and gh.app is not None:
                import jwt  # PyJWT, a github3.py dependency

                try:
                    claims = jwt.decode(
                        value, gh.app.public_key_pem, algorithms=["RS256"], options={"require": ["iat", "exp", "iss"]}
                    )
                except jwt.PyJWTError:
                    return None
                if str(claims["iss"]) != gh.app.app_id or not isinstance(claims["iss"], str):
                    return None
                return ("jwt", gh.app.app_id)
            return None

        # ------------------------------------------------------------ routes
        def _route(
            self, method: str, path: str, query: dict[str, list[str]], body: bytes
        ) -> tuple[int, Any, dict[str, str]]:
            accept = self.headers.get("Accept", "application/vnd.github+json")
            with gh.lock:
                gh.rate_remaining = max(0, gh.rate_remaining - 1)
                if method == "GET" and path == "/rate_limit":
                    core = {
                        "limit": 5000,
                        "remaining": gh.rate_remaining,
                        "reset": int(time.time()) + 3600,
                        "used": 5000 - gh.rate_remaining,
                    }
                    return 200, {"resources": {"core": core, "search": dict(core, limit=30)}, "rate": core}, {}
                who = self._auth()
                if who is None:
                    return 401, {"message": "Bad credentials", "documentation_url": DOCS}, {}
                kind, subject = who
                m = re.fullmatch(r"/app/installations/(\d+)/access_tokens", path)
                if method == "POST" and m:
                    if kind != "jwt" or gh.app is None or int(m.group(1)) != gh.app.installation_id:
                        return 401, {"message": "A JSON web token could not be decoded", "documentation_url": DOCS}, {}
                    token = "ghs_" + secrets.token_hex(18)
                    expires = gh.clock() + timedelta(seconds=gh.app.token_ttl)
                    gh.add_token(token, f"{gh.app.slug}[bot]", expires)
                    out = {
                        "token": token,
                        "expires_at": iso(expires),
                        "permissions": {"issues": "write", "metadata": "read"},
                        "repository_selection": "selected",
                    }
                    return 201, out, {}
                if method == "GET" and path == "/app":
                    if kind != "jwt" or gh.app is None:
                        return 401, {"message": "A JSON web token could not be decoded", "documentation_url": DOCS}, {}
                    owner = gh.user_json(OWNER) if OWNER in gh.users else gh.user_json(next(iter(gh.users)))
                    app_json = {
                        "id": int(gh.app.app_id),
                        "slug": gh.app.slug,
                        "node_id": "A_1",
                        "name": gh.app.slug,
                        "owner": owner,
                        "description": "",
                        "external_url": f"{gh.html_root}/apps/{gh.app.slug}",
                        "html_url": f"{gh.html_root}/apps/{gh.app.slug}",
                        "created_at": "2024-01-01T00:00:00Z",
                        "updated_at": "2024-01-01T00:00:00Z",
                        "permissions": {"issues": "write", "metadata": "read"},
                        "events": ["issue_comment"],
                    }
                    return 200, app_json, {}
                if kind == "jwt":
                    return (
                        401,
                        {"message": "A JSON web token cannot be used for this endpoint", "documentation_url": DOCS},
                        {},
                    )
                login = subject
                if method == "GET" and path == "/user":
                    if login.endswith("[bot]"):
                        return 403, {"message": "Resource not accessible by integration", "documentation_url": DOCS}, {}
                    return 200, gh.full_user_json(login), {}
                m = re.fullmatch(r"/repos/([^/]+)/([^/]+)(/.*)?", path)
                if not m or f"{m.group(1)}/{m.group(2)}" not in gh.repos:
                    return 404, {"message": "Not Found", "documentation_url": DOCS}, {}
                repo = gh.repos[f"{m.group(1)}/{m.group(2)}"]
                rest = m.group(3) or ""
                return self._repo_route(method, repo, rest, query, body, login, accept)

        def _repo_route(
            self,
            method: str,
            repo: RepoRec,
            rest: str,
            query: dict[str, list[str]],
            body: bytes,
            login: str,
            accept: str,
        ) -> tuple[int, Any, dict[str, str]]:
            not_found = (404, {"message": "Not Found", "documentation_url": DOCS}, {})
            if method == "GET" and rest == "":
                return 200, gh.repo_json(repo), {}
            if m := re.fullmatch(r"/issues/(\d+)", rest):
                issue = repo.issues.get(int(m.group(1)))
                if method != "GET" or issue is None:
                    return not_found
                return 200, gh.issue_json(repo, issue, accept), {}
            if m := re.fullmatch(r"/issues/(\d+)/comments", rest):
                number = int(m.group(1))
                if number not in repo.issues:
                    return not_found
                if method == "POST":
                    text = _json_body(body).get("body")
                    if not isinstance(text, str) or not text:
                        return (
                            422,
                            {
                                "message": "Validation Failed",
                                "errors": [{"resource": "IssueComment", "code": "missing_field", "field": "body"}],
                            },
                            {},
                        )
                    if len(text) > 65536:
                        return (
                            422,
                            {
                                "message": "Validation Failed",
                                "errors": [
                                    {
                                        "resource": "IssueComment",
                                        "code": "custom",
                                        "field": "body",
                                        "message": "body is too long (maximum is 65536 characters)",
                                    }
                                ],
                            },
                            {},
                        )
                    cid = gh.add_comment(repo.full_name, number, login, text)
                    c = gh.comments[cid]
                    return 201, gh.comment_json(c, accept), {"Location": gh.comment_json(c, accept)["url"]}
                if method == "GET":
                    pool = [c for c in gh.comments.values() if c.repo == repo.full_name and c.issue == number]
                    return self._paginate(pool, query, accept, f"/repos/{repo.full_name}/issues/{number}/comments")
                return not_found
            if rest == "/issues/comments" and method == "GET":
                pool = [c for c in gh.comments.values() if c.repo == repo.full_name]
                return self._paginate(pool, query, accept, f"/repos/{repo.full_name}/issues/comments")
            if m := re.fullmatch(r"/issues/comments/(\d+)", rest):
                c = gh.comments.get(int(m.group(1)))
                if c is None or c.repo != repo.full_name:
                    return not_found
                if method == "GET":
                    return 200, gh.comment_json(c, accept), {}
                if method == "PATCH":
                    if c.login != login and gh.permission(repo, login) not in ("admin", "write"):
                        return 403, {"message": "Must have admin rights to Repository.", "documentation_url": DOCS}, {}
                    text = _json_body(body).get("body")
                    if not isinstance(text, str) or not text or len(text) > 65536:
                        return (
                            422,
                            {
                                "message": "Validation Failed",
                                "errors": [{"resource": "IssueComment", "code": "invalid", "field": "body"}],
                            },
                            {},
                        )
                    c.body = text
                    c.updated_at = gh.clock()
                    return 200, gh.comment_json(c, accept), {}
                if method == "DELETE":
                    del gh.comments[c.id]
                    return 204, None, {}
                return not_found
            if m := re.fullmatch(r"/issues/comments/(\d+)/reactions", rest):
                c = gh.comments.get(int(m.group(1)))
                if c is None or c.repo != repo.full_name or method != "POST":
                    return not_found
                content = _json_body(body).get("content")
                if content not in REACTION_CONTENTS:
                    return (
                        422,
                        {
                            "message": "Validation Failed",
                            "errors": [{"resource": "Reaction", "code": "invalid", "field": "content"}],
                        },
                        {},
                    )
                who = c.reactions.setdefault(content, set())
                status = 200 if login in who else 201
                who.add(login)
                rid = abs(hash((c.id, content, login))) % 10**9
                return (
                    status,
                    {
                        "id": rid,
                        "node_id": f"REA_{rid}",
                        "user": gh.user_json(login),
                        "content": content,
                        "created_at": iso(gh.clock()),
                    },
                    {},
                )
            if m := re.fullmatch(r"/collaborators/([^/]+)/permission", rest):
                user = m.group(1)
                if method != "GET" or user not in gh.users:
                    return not_found
                perm = gh.permission(repo, user)
                role = {"admin": "admin", "write": "write", "read": "read", "none": "read"}[perm]
                return (
                    200,
                    {
                        "permission": perm,
                        "role_name": role,
                        "user": dict(
                            gh.user_json(user),
                            permissions={"admin": perm == "admin", "push": perm in ("admin", "write"), "pull": True},
                        ),
                    },
                    {},
                )
            return not_found

        def _paginate(
            self, pool: list[CommentRec], query: dict[str, list[str]], accept: str, path: str
        ) -> tuple[int, Any, dict[str, str]]:
            since_raw = query.get("since", [None])[0]
            if since_raw is not None:
                try:
                    since = datetime.fromisoformat(since_raw)
                    if since.tzinfo is None:
                        raise ValueError
                except ValueError:
                    return (
                        422,
                        {
                            "message": "Validation Failed",
                            "errors": [
                                {"resource": "IssueComment", "field": "since", "code": "invalid", "value": since_raw}
                            ],
                        },
                        {},
                    )
                pool = [c for c in pool if c.updated_at >= since]
            pool.sort(key=lambda c: c.id)
            try:
                per_page = min(100, max(1, int(query.get("per_page", ["30"])[0])))
                page = max(1, int(query.get("page", ["1"])[0]))
            except ValueError:
                return 422, {"message": "Validation Failed"}, {}
            last = max(1, -(-len(pool) // per_page))
            items = pool[(page - 1) * per_page : page * per_page]
            keep = {k: v[0] for k, v in query.items() if k not in ("page", "per_page")}

            def link(p: int) -> str:
                q = urlencode({**keep, "per_page": per_page, "page": p})
                return f"{gh.base_url}{path}?{q}"

            rels = []
            if page > 1:
                rels += [f'<{link(page - 1)}>; rel="prev"', f'<{link(1)}>; rel="first"']
            if page < last:
                rels += [f'<{link(page + 1)}>; rel="next"', f'<{link(last)}>; rel="last"']
            extra = {"Link": ", ".join(rels)} if rels else {}
            return 200, [gh.comment_json(c, accept) for c in items], extra

    return Handler


def _json_body(body: bytes) -> dict[str, Any]:
    try:
        data = json.loads(body or b"{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def make_standard_server(prefix: str = "") -> GitHubStandIn:
    """A started server seeded like llama.cpp: an owner, a member, a collaborator, a stranger, issue #1."""
    gh = GitHubStandIn(prefix=prefix).start()
    gh.add_repo(OWNER, REPO)
    gh.add_member(FULL_NAME, "maintainer")
    gh.add_collaborator(FULL_NAME, "collab", "write")
    gh.add_collaborator(FULL_NAME, BOT_LOGIN, "write")
    gh.add_user("stranger")
    gh.add_issue(FULL_NAME, ISSUE, login="stranger")
    gh.add_token(BOT_TOKEN, BOT_LOGIN)
    return gh


@pytest.fixture
def gh_server() -> Iterator[GitHubStandIn]:
    """A fresh stand-in per test (state and faults never leak between tests)."""
    gh = make_standard_server()
    try:
        yield gh
    finally:
        gh.stop()
