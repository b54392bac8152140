"""bisectbot.github.client against a real HTTP GitHub stand-in (tests/ghserver.py). No mocks."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from bisectbot.config import load_config
from bisectbot.errors import GitHubError
from bisectbot.github.client import (
    AppCredentials,
    GitHubClient,
    RetryPolicy,
    format_since,
    make_client,
)
from bisectbot.github.comment import BODY_LIMIT
from bisectbot.github.dryrun import DryRunClient

try:  # tests/ is on sys.path when it is not a package (pytest's default "prepend" import mode)
    from ghserver import BOT_LOGIN, BOT_TOKEN, FULL_NAME, ISSUE, GitHubStandIn, gh_server, make_standard_server  # noqa: F401
except ImportError:  # pragma: no cover - tests/ turned into a package
    from tests.ghserver import BOT_LOGIN, BOT_TOKEN, FULL_NAME, ISSUE, GitHubStandIn, gh_server, make_standard_server  # noqa: F401

COMMENTS = r"/repos/ggml-org/llama\.cpp/issues/1/comments"
ONE_COMMENT = r"/repos/ggml-org/llama\.cpp/issues/comments/\d+"


class RecordingSleep:
    """Sleeps for real (briefly) and remembers what it was asked, to check waits."""

    def __init__(self, cap: float = 0.02) -> None:
        self.asked: list[float] = []
        self.cap = cap

    def __call__(self, seconds: float) -> None:
        self.asked.append(seconds)
        time.sleep(min(seconds, self.cap))


def fast_policy(**kw: object) -> RetryPolicy:
    base = dict(give_up_after=5.0, backoff_base=0.005, max_wait=0.02, secondary_wait=0.01, reset_slack=0.0)
    base.update(kw)
    return RetryPolicy(**base)  # type: ignore[arg-type]


def publisher(gh: GitHubStandIn, **kw: object) -> GitHubClient:
    retry = kw.pop("retry", None) or fast_policy()
    return GitHubClient(FULL_NAME, api_url=gh.base_url, token=BOT_TOKEN, retry=retry, **kw)  # type: ignore[arg-type]


def job_comments(gh: GitHubStandIn, job: str) -> list[str]:
    return [c.body for c in gh.comments_on(FULL_NAME, ISSUE) if f"<!-- bisectbot:job={job} -->" in c.body]


# --------------------------------------------------------------------------- basics


def test_comment_created_once_then_edited_in_place(gh_server: GitHubStandIn) -> None:
    p = publisher(gh_server)
    first = p.upsert_job_comment(ISSUE, "job-7", "| commit | verdict |\n|---|---|\n| abc | good |")
    second = p.upsert_job_comment(ISSUE, "job-7", "| commit | verdict |\n|---|---|\n| abc | bad |")
    assert first == second
    assert job_comments(gh_server, "job-7") == [
        "<!-- bisectbot:job=job-7 -->\n| commit | verdict |\n|---|---|\n| abc | bad |"
    ]
    assert gh_server.count("POST", COMMENTS) == 1
    assert gh_server.count("PATCH", ONE_COMMENT) == 1
    # every request carried the token, and the server's urls point back at itself
    assert all(r.headers.get("Authorization") == f"token {BOT_TOKEN}" for r in gh_server.requests)
    assert [c.html_url.startswith(gh_server.origin) for c in p.comments(ISSUE)] == [True]


def test_restarted_bot_finds_its_comment_by_marker(gh_server: GitHubStandIn) -> None:
    cid = publisher(gh_server).upsert_job_comment(ISSUE, "job-1", "run 1")
    again = publisher(gh_server).upsert_job_comment(ISSUE, "job-1", "run 2")  # fresh process, no cache
    assert again == cid
    assert job_comments(gh_server, "job-1") == ["<!-- bisectbot:job=job-1 -->\nrun 2"]


def test_marker_in_someone_elses_comment_is_not_ours(gh_server: GitHubStandIn) -> None:
    gh_server.add_comment(FULL_NAME, ISSUE, "collab", "<!-- bisectbot:job=job-1 -->\nquoted")
    p = publisher(gh_server)
    cid = p.upsert_job_comment(ISSUE, "job-1", "real")
    mine = gh_server.comments[cid]
    assert mine.login == BOT_LOGIN and mine.body.endswith("real")
    assert [c.body for c in gh_server.comments_on(FULL_NAME, ISSUE) if c.login == "collab"] == [
        "<!-- bisectbot:job=job-1 -->\nquoted"
    ]


def test_comment_deleted_by_a_human_is_recreated(gh_server: GitHubStandIn) -> None:
    p = publisher(gh_server)
    cid = p.upsert_job_comment(ISSUE, "job-1", "v1")
    del gh_server.comments[cid]
    new = p.upsert_job_comment(ISSUE, "job-1", "v2")
    assert new != cid and job_comments(gh_server, "job-1") == ["<!-- bisectbot:job=job-1 -->\nv2"]


def test_marker_search_follows_pagination(gh_server: GitHubStandIn) -> None:
    p = publisher(gh_server)
    cid = p.upsert_job_comment(ISSUE, "job-1", "early")
    for i in range(230):  # push the bot's comment far from the newest page
        gh_server.add_comment(FULL_NAME, ISSUE, "stranger", f"chatter {i}")
    assert publisher(gh_server).upsert_job_comment(ISSUE, "job-1", "late") == cid
    pages = gh_server.matching("GET", COMMENTS)
    assert any(r.query.get("page") == ["3"] for r in pages), "did not follow Link rel=next"
    assert len(job_comments(gh_server, "job-1")) == 1


def test_post_comment_answers_once_per_key(gh_server: GitHubStandIn) -> None:
    p = publisher(gh_server)
    a = p.post_comment(ISSUE, "Sorry, only collaborators can run commands.", key="reply-to-123")
    b = publisher(gh_server).post_comment(ISSUE, "Sorry, only collaborators can run commands.", key="reply-to-123")
    assert a == b and gh_server.count("POST", COMMENTS) == 1


def test_react_eyes_is_idempotent(gh_server: GitHubStandIn) -> None:
    cid = gh_server.add_comment(FULL_NAME, ISSUE, "collab", "/bisect good=b1 bad=b2")
    p = publisher(gh_server)
    p.react(cid, "eyes")
    p.react(cid, "eyes")
    assert gh_server.comments[cid].reactions == {"eyes": {BOT_LOGIN}}
    with pytest.raises(ValueError):
        p.react(cid, "thumbsup")


def test_issue_is_found_and_a_missing_one_is_a_clear_error(gh_server: GitHubStandIn) -> None:
    p = publisher(gh_server)
    issue = p.issue(ISSUE)
    assert issue.number == ISSUE and issue.url.startswith(gh_server.base_url)
    with pytest.raises(GitHubError, match="404"):
        p.issue(999)
    with pytest.raises(GitHubError, match="404"):
        p.comments(999)


def test_list_comments_since_id_and_timestamp(gh_server: GitHubStandIn) -> None:
    t0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=timezone.utc)
    old = gh_server.add_comment(FULL_NAME, ISSUE, "collab", "old", at=t0)
    new = gh_server.add_comment(FULL_NAME, ISSUE, "maintainer", "/check", at=t0 + timedelta(hours=1))
    p = publisher(gh_server)
    assert [c.id for c in p.comments(ISSUE, old)] == [new]
    assert [c.id for c in p.comments(ISSUE, None)] == [old, new]
    # an aware datetime (github3 4.0.1 would send "...+00:00Z", which GitHub rejects)
    got = p.comments(ISSUE, t0 + timedelta(minutes=30))
    assert [(c.id, c.author, c.author_association, c.issue_number) for c in got] == [
        (new, "maintainer", "MEMBER", ISSUE)
    ]
    assert gh_server.matching("GET", COMMENTS)[-1].query["since"] == ["2024-05-01T12:30:00Z"]
    assert got[0].created_at == t0 + timedelta(hours=1)


def test_format_since() -> None:
    assert (
        format_since(datetime(2024, 1, 2, 3, 4, 5, 999, tzinfo=timezone(timedelta(hours=2)))) == "2024-01-02T01:04:05Z"
    )
    assert format_since(datetime(2024, 1, 2, 3, 4, 5)) == "2024-01-02T03:04:05Z"
    with pytest.raises(ValueError):
        format_since("2024-01-02T03:04:05+00:00Z")


def test_api_url_with_a_path_prefix_like_github_enterprise() -> None:
    gh = make_standard_server(prefix="/api/v3")
    try:
        p = publisher(gh)
        cid = p.upsert_job_comment(ISSUE, "job-1", "on GHE")
        assert gh.comments[cid].body.endswith("on GHE")
        assert not gh.matching("GET", "/__outside_prefix__.*")
    finally:
        gh.stop()


def test_job_id_must_be_marker_safe(gh_server: GitHubStandIn) -> None:
    with pytest.raises(ValueError):
        publisher(gh_server).upsert_job_comment(ISSUE, "x --> <b>", "body")


# --------------------------------------------------------------------------- failures and retries


@pytest.mark.parametrize("kind", ["500", "502", "drop", "write_then_drop", "write_then_500"])
def test_create_survives_failing_writes_exactly_once(gh_server: GitHubStandIn, kind: str) -> None:
    gh_server.fail("POST", COMMENTS, kind, times=3)
    cid = publisher(gh_server).upsert_job_comment(ISSUE, "job-9", "result")
    assert job_comments(gh_server, "job-9") == ["<!-- bisectbot:job=job-9 -->\nresult"]
    assert gh_server.comments[cid].body.endswith("result")
    # each retry re-listed before creating again
    assert gh_server.count("GET", COMMENTS) >= gh_server.count("POST", COMMENTS)


def test_edit_survives_dropped_connections(gh_server: GitHubStandIn) -> None:
    p = publisher(gh_server)
    cid = p.upsert_job_comment(ISSUE, "job-2", "v1")
    gh_server.fail("PATCH", ONE_COMMENT, "drop", times=2)
    gh_server.fail("PATCH", ONE_COMMENT, "write_then_drop", times=1)
    assert p.upsert_job_comment(ISSUE, "job-2", "v2") == cid
    assert job_comments(gh_server, "job-2") == ["<!-- bisectbot:job=job-2 -->\nv2"]
    assert gh_server.count("PATCH", ONE_COMMENT) == 4


def test_listing_failures_mid_pagination_are_retried(gh_server: GitHubStandIn) -> None:
    for i in range(150):
        gh_server.add_comment(FULL_NAME, ISSUE, "stranger", f"c{i}")
    gh_server.fail("GET", COMMENTS, "500", times=1)
    gh_server.fail("GET", COMMENTS, "drop", times=1)
    assert len(publisher(gh_server).comments(ISSUE)) == 150


def test_a_hung_request_times_out_and_is_retried(gh_server: GitHubStandIn) -> None:
    gh_server.fail("GET", COMMENTS, "hang", times=1, hang_for=1.0)
    start = time.monotonic()
    p = publisher(gh_server, timeout=0.2)
    assert p.comments(ISSUE) == []
    assert time.monotonic() - start < 0.9 and gh_server.count("GET", COMMENTS) == 2


def test_retry_after_is_honoured(gh_server: GitHubStandIn) -> None:
    sleep = RecordingSleep()
    gh_server.fail("POST", COMMENTS, "secondary", times=1, retry_after=3)
    gh_server.fail("POST", COMMENTS, "429", times=1, retry_after=2)
    publisher(gh_server, retry=fast_policy(sleep=sleep, give_up_after=10.0)).upsert_job_comment(ISSUE, "job-3", "x")
    assert sleep.asked[:2] == [3.0, 2.0]
    assert len(job_comments(gh_server, "job-3")) == 1


def test_retry_after_really_waits(gh_server: GitHubStandIn) -> None:
    gh_server.fail("GET", COMMENTS, "secondary", times=1, retry_after=1)
    start = time.monotonic()
    publisher(gh_server).comments(ISSUE)
    assert time.monotonic() - start >= 0.95
    assert gh_server.count("GET", COMMENTS) == 2


def test_rate_limit_remaining_zero_waits_for_reset(gh_server: GitHubStandIn) -> None:
    sleep = RecordingSleep()
    gh_server.fail("GET", COMMENTS, "ratelimit", times=1, reset_in=2.0)
    publisher(gh_server, retry=fast_policy(sleep=sleep, reset_slack=0.5)).comments(ISSUE)
    assert len(sleep.asked) == 1 and 1.0 <= sleep.asked[0] <= 2.6


def test_secondary_limit_without_retry_after_backs_off(gh_server: GitHubStandIn) -> None:
    sleep = RecordingSleep()
    gh_server.fail("POST", COMMENTS, "secondary_no_retry_after", times=2)
    publisher(gh_server, retry=fast_policy(sleep=sleep, secondary_wait=0.5)).upsert_job_comment(ISSUE, "job-4", "x")
    assert len(sleep.asked) == 2 and all(w >= 0.5 for w in sleep.asked)
    assert len(job_comments(gh_server, "job-4")) == 1


def test_plain_403_is_not_retried_and_says_where(gh_server: GitHubStandIn) -> None:
    gh_server.fail("POST", COMMENTS, "forbidden", times=5)
    with pytest.raises(GitHubError) as err:
        publisher(gh_server).upsert_job_comment(ISSUE, "job-5", "x")
    msg = str(err.value)
    assert gh_server.count("POST", COMMENTS) == 1
    assert msg.startswith("GitHub POST http://127.0.0.1:") and "/issues/1/comments" in msg
    assert "403 Resource not accessible by integration" in msg
    assert "\n" not in msg and BOT_TOKEN not in msg and "gave up" not in msg
    assert err.value.exit_code == 5


def test_404_and_422_are_not_retried(gh_server: GitHubStandIn) -> None:
    p = publisher(gh_server)
    with pytest.raises(GitHubError, match="404"):
        p.react(424242, "eyes")
    assert gh_server.count("POST", r".*/reactions") == 1
    p.upsert_job_comment(ISSUE, "job-1", "v1")
    gh_server.fail("PATCH", ONE_COMMENT, "422", times=5)
    with pytest.raises(GitHubError, match="422 Validation Failed"):
        p.upsert_job_comment(ISSUE, "job-1", "v2")
    assert gh_server.count("PATCH", ONE_COMMENT) == 1


def test_giving_up_is_bounded_and_clear(gh_server: GitHubStandIn) -> None:
    gh_server.fail("POST", COMMENTS, "500", times=10_000)
    start = time.monotonic()
    with pytest.raises(GitHubError) as err:
        publisher(gh_server, retry=fast_policy(give_up_after=0.5)).upsert_job_comment(ISSUE, "job-6", "x")
    assert time.monotonic() - start < 1.5
    msg = str(err.value)
    assert "GitHub POST" in msg and "500 Server Error" in msg and "gave up after" in msg and "\n" not in msg
    assert BOT_TOKEN not in msg


def test_a_wait_longer_than_the_budget_gives_up_at_once(gh_server: GitHubStandIn) -> None:
    gh_server.fail("GET", COMMENTS, "secondary", times=1, retry_after=3600)
    start = time.monotonic()
    with pytest.raises(GitHubError, match="server asked to wait 3600 s"):
        publisher(gh_server, retry=fast_policy(give_up_after=2.0)).comments(ISSUE)
    assert time.monotonic() - start < 1.0


def test_a_longer_retry_after_is_handed_back_for_rescheduling(gh_server: GitHubStandIn) -> None:
    gh_server.fail("POST", r".*/reactions", "secondary", times=1, retry_after=300)
    p = publisher(gh_server, retry=fast_policy(give_up_after=2.0))
    p.upsert_job_comment(ISSUE, "job-1", "x")
    cid = gh_server.comments_on(FULL_NAME, ISSUE)[0].id
    with pytest.raises(GitHubError) as err:
        p.react(cid, "eyes")
    assert err.value.retry_after == 300.0 and err.value.status == 403
    p.react(cid, "eyes")  # when the caller comes back, it goes through
    assert gh_server.count("POST", r".*/reactions") == 2


def test_a_trickled_answer_is_abandoned_at_the_call_deadline(gh_server: GitHubStandIn) -> None:
    """A byte every 50 ms never trips the 30 s read timeout; the watchdog ends the attempt."""
    gh_server.fail("GET", COMMENTS, "trickle", times=1, hang_for=0.05)
    p = publisher(gh_server, retry=fast_policy(attempt_deadline=0.5, give_up_after=0.1))
    with pytest.raises(GitHubError) as err:
        p.comments(ISSUE)
    msg = str(err.value)
    assert "no complete answer within 0.5 s" in msg and "\n" not in msg, msg
    assert 0 < gh_server.trickled < 65536  # cut mid-answer, not read to the end
    assert p.comments(ISSUE) == []  # the client (and its lock) still work


def test_a_trickle_is_retried_within_the_give_up_budget(gh_server: GitHubStandIn) -> None:
    gh_server.fail("GET", COMMENTS, "trickle", times=1, hang_for=0.05)
    p = publisher(gh_server, retry=fast_policy(attempt_deadline=0.5, give_up_after=5.0))
    assert p.comments(ISSUE) == []
    assert gh_server.count("GET", COMMENTS) == 2


def test_bad_token_fails_without_leaking_it(gh_server: GitHubStandIn) -> None:
    p = GitHubClient(FULL_NAME, api_url=gh_server.base_url, token="ghp_WRONG_secret_value", retry=fast_policy())
    with pytest.raises(GitHubError) as err:
        p.upsert_job_comment(ISSUE, "job-1", "x")
    assert "401" in str(err.value) and "ghp_WRONG" not in str(err.value)


def test_unreachable_server_gives_up(gh_server: GitHubStandIn) -> None:
    url = gh_server.base_url
    gh_server.stop()
    p = GitHubClient(FULL_NAME, api_url=url, token=BOT_TOKEN, bot_login=BOT_LOGIN, retry=fast_policy(give_up_after=0.3))
    with pytest.raises(GitHubError, match="connection failed"):
        p.comments(ISSUE)


# --------------------------------------------------------------------------- GitHub App


def _rsa_pair(tmp_path: Path) -> tuple[Path, bytes]:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, serialization.NoEncryption()
    )
    pub = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    path = tmp_path / "app.pem"
    path.write_bytes(pem)
    return path, pub


def test_github_app_installation_token_is_minted_and_renewed(gh_server: GitHubStandIn, tmp_path: Path) -> None:
    key_path, pub = _rsa_pair(tmp_path)
    gh_server.enable_app("12345", pub, installation_id=777, slug="bisectbot", token_ttl=3600)
    gh_server.add_collaborator(FULL_NAME, "bisectbot[bot]", "write")
    app = AppCredentials(app_id="12345", private_key_path=key_path, installation_id=777, renew_margin=300)
    p = GitHubClient(FULL_NAME, api_url=gh_server.base_url, app=app, retry=fast_policy())
    cid = p.upsert_job_comment(ISSUE, "job-1", "from the app")
    assert gh_server.comments[cid].login == "bisectbot[bot]"
    assert p.upsert_job_comment(ISSUE, "job-1", "edited by the app") == cid
    # no bot_login given: the App's login is `<slug>[bot]` from GET /app (an installation token cannot GET /user)
    assert p.bot_login == "bisectbot[bot]"
    assert gh_server.count("GET", r"/app") == 1 and gh_server.count("GET", r"/user") == 0
    assert gh_server.count("POST", r"/app/installations/777/access_tokens") == 1
    # tokens that expire within the renewal margin are renewed before the next call
    gh_server.app.token_ttl = 60  # type: ignore[union-attr]
    p._gh.session.auth = None  # noqa: SLF001 - force a fresh token with the short lifetime
    p.react(cid, "rocket")
    p.react(cid, "eyes")
    assert gh_server.count("POST", r"/app/installations/777/access_tokens") == 3
    tokens = {r.headers["Authorization"] for r in gh_server.matching("POST", r".*/reactions")}
    assert len(tokens) == 2 and all(t.startswith("token ghs_") for t in tokens)


def test_github_app_with_wrong_key_is_refused(gh_server: GitHubStandIn, tmp_path: Path) -> None:
    _, pub = _rsa_pair(tmp_path / "..")
    other_key, _ = _rsa_pair(tmp_path)
    gh_server.enable_app("12345", pub, installation_id=777)
    app = AppCredentials(app_id="12345", private_key_path=other_key, installation_id=777)
    p = GitHubClient(FULL_NAME, api_url=gh_server.base_url, app=app, bot_login="bisectbot[bot]", retry=fast_policy())
    with pytest.raises(GitHubError, match=r"POST .*/app/installations/777/access_tokens failed: 401"):
        p.comments(ISSUE)


# --------------------------------------------------------------------------- dry run and factory


def test_dry_run_writes_what_would_be_posted(tmp_path: Path) -> None:
    out = tmp_path / "dry.md"
    p = DryRunClient(out, repo=FULL_NAME)
    a = p.upsert_job_comment(ISSUE, "job-1", "table v1")
    b = p.upsert_job_comment(ISSUE, "job-1", "table v2")
    p.react(5, "eyes")
    p.post_comment(ISSUE, "Sorry.", key="r1")
    p.post_comment(ISSUE, "Sorry.", key="r1")
    assert a == b and p.comments(ISSUE) == []
    text = out.read_text()
    assert "would create comment" in text and "would edit comment" in text and "table v2" in text
    assert text.count("Sorry.") == 1 and "would react eyes to comment 5" in text


def github_config(tmp_path: Path, gh: GitHubStandIn, **github: object) -> Path:
    """A minimal valid config whose github section talks to the stand-in."""
    data = {
        "name": "t",
        "repo": {"path": "."},
        "build": {"targets": ["x"], "binaries": {"binary": ["x"]}},
        "run": {"argv": ["{binary}", "{seed}"]},
        "statistic": {"outcome": {"position": 0}},
        "reference": {"probs": {"a": 1.0}},
        "github": {"repo": FULL_NAME, "api_url": gh.base_url, "token_env": "BISECTBOT_TEST_TOKEN", **github},
    }
    path = tmp_path / "gh.yaml"
    path.write_text(json.dumps(data))  # JSON is YAML
    return path


def test_make_client_picks_a_dry_run_without_credentials(gh_server: GitHubStandIn, tmp_path: Path) -> None:
    cfg = load_config(github_config(tmp_path, gh_server, dry_run_file="dry.md"))
    dry = make_client(cfg, env={})
    assert isinstance(dry, DryRunClient)
    dry.upsert_job_comment(ISSUE, "j", "hello")
    assert "hello" in (tmp_path / "dry.md").read_text() and gh_server.requests == []
    real = make_client(cfg, env={"BISECTBOT_TEST_TOKEN": BOT_TOKEN}, retry=fast_policy())
    assert isinstance(real, GitHubClient)
    real.upsert_job_comment(ISSUE, "j", "hello")
    assert len(job_comments(gh_server, "j")) == 1
    half_an_app = load_config(github_config(tmp_path, gh_server, app_id="1"))
    with pytest.raises(GitHubError, match="together"):
        make_client(half_an_app, env={})


# --------------------------------------------------------------------------- the size limit


def test_an_oversized_body_is_clipped_at_a_line_end_and_accepted(gh_server: GitHubStandIn) -> None:
    table = "| commit | verdict |\n|---|---|\n" + "".join(f"| {i:07x} | good |\n" for i in range(5000))
    cid = publisher(gh_server).upsert_job_comment(ISSUE, "job-big", table + "z" * 100_000)
    body = gh_server.comments[cid].body
    assert len(body) <= BODY_LIMIT and "characters cut to fit" in body
    assert body.startswith("<!-- bisectbot:job=job-big -->\n| commit | verdict |")
    kept = body.split("\n\n*…")[0].splitlines()[1:]
    assert kept[-1] == kept[-1].strip() and kept[-1].endswith("| good |")  # whole rows only
