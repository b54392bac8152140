"""The GitHub bot end to end: real demo histories, real builds, the real GitHub stand-in over HTTP
(tests/ghserver.py), the real CLI in subprocesses where restarts matter. No mocking library."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests
import yaml

from bisectbot.bot.bot import Bot
from bisectbot.bot.serve import BotServer, watch
from bisectbot.bot.webhook import sign
from bisectbot.config import load_config
from bisectbot.demo import DemoHistory, generate_demo
from bisectbot.github.client import make_client
from bisectbot.state.statedir import StateDir

from conftest import TOOLCHAIN, bisectbot_argv, require, subprocess_env
from ghserver import BOT_LOGIN, BOT_TOKEN, FULL_NAME, ISSUE, GitHubStandIn, gh_server  # noqa: F401

TOKEN_ENV = "BISECTBOT_TEST_GH_TOKEN"
SECRET = b"webhook secret for tests"
COMMENTS = r"/repos/ggml-org/llama\.cpp/issues/1/comments"
ONE_COMMENT = r"/repos/ggml-org/llama\.cpp/issues/comments/\d+"


@pytest.fixture(scope="module")
def demo12(tmp_path_factory: pytest.TempPathFactory) -> DemoHistory:
    """12 commits: good at 0, build break at 3 (fixed at 4), culprit at 8, HEAD (main) bad."""
    require(*TOOLCHAIN)
    return generate_demo(tmp_path_factory.mktemp("bot-demo"), n_commits=12, culprit_index=8, break_index=3, seed=1)


def write_config(tmp_path: Path, demo: DemoHistory, gh: GitHubStandIn, name: str = "bot.yaml", **github: Any) -> Path:
    data = yaml.safe_load(demo.config.read_text())
    data["repo"]["path"] = str(demo.repo)
    data["github"] = {
        "repo": FULL_NAME,
        "api_url": gh.base_url,
        "html_url": gh.html_root,
        "token_env": TOKEN_ENV,
        "bot_login": BOT_LOGIN,
        "issue": ISSUE,
        "progress_interval": 0,
        "poll_interval": 1,
        "retry_give_up_after": 10,
        "retry_backoff": 0.01,
        "retry_max_wait": 0.05,
        **github,
    }
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@contextmanager
def open_bot(config: Path, state_dir: Path, env: dict[str, str] | None = None) -> Iterator[Bot]:
    cfg = load_config(config)
    with StateDir(state_dir) as state:
        yield Bot(cfg, str(config), state, make_client(cfg, env if env is not None else {TOKEN_ENV: BOT_TOKEN}))


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        bisectbot_argv(*args),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=subprocess_env(CI="1", **(env if env is not None else {TOKEN_ENV: BOT_TOKEN})),
    )


def bot_comments(gh: GitHubStandIn) -> list[str]:
    return [c.body for c in gh.comments_on(FULL_NAME, ISSUE) if c.login == BOT_LOGIN]


def job_comments(gh: GitHubStandIn, prefix: str = "bisect-") -> list[str]:
    return [b for b in bot_comments(gh) if f"<!-- bisectbot:job={prefix}" in b]


def commit_link(gh: GitHubStandIn, sha: str) -> str:
    return f"{gh.html_root}/{FULL_NAME}/commit/{sha}"


def db_rows(state_dir: Path, sql: str) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(state_dir / "state.sqlite3")
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


# --------------------------------------------------------------------------- comment → bisect


@pytest.mark.heavy  # after the default suite (README: Tests)
def test_comment_bisect_one_comment_with_culprit_despite_failing_writes(
    gh_server: GitHubStandIn, demo12: DemoHistory, tmp_path: Path
) -> None:
    config = write_config(tmp_path, demo12, gh_server)
    cmd_id = gh_server.add_comment(FULL_NAME, ISSUE, "maintainer", f"/bisect good={demo12.good[:10]} bad=main")
    # GitHub fails the first writes: creates fail (one after writing), edits fail
    gh_server.fail("POST", COMMENTS, "500", times=2)
    gh_server.fail("POST", COMMENTS, "write_then_drop", times=1)
    gh_server.fail("PATCH", ONE_COMMENT, "502", times=2)
    state_dir = tmp_path / "st"
    with open_bot(config, state_dir) as bot:
        watch(bot, ISSUE, once=True, interval=1)
    ours = job_comments(gh_server)
    assert len(ours) == 1 and len(bot_comments(gh_server)) == 1
    body = ours[0]
    assert f"[`{demo12.culprit[:12]}`]({commit_link(gh_server, demo12.culprit)})" in body.splitlines()[1]
    assert "take top draft candidate" in body and "/pull/" in body and "| commit |" in body
    assert "⏳" not in body  # the final result replaced the progress text
    assert "eyes" in gh_server.comments[cmd_id].reactions
    assert db_rows(state_dir, "SELECT status FROM bot_commands") == [("done",)]
    assert db_rows(state_dir, "SELECT published FROM jobs WHERE kind='bisect'") == [(1,)]

    # another poll: nothing new is handled, nothing is posted
    posts = gh_server.count("POST", COMMENTS)
    with open_bot(config, state_dir) as bot:
        watch(bot, ISSUE, once=True, interval=1)
    assert gh_server.count("POST", COMMENTS) == posts
    assert len(bot_comments(gh_server)) == 1


@pytest.mark.heavy  # after the default suite (README: Tests)
def test_reference_good_in_a_comment_measures_the_good_end_with_no_config_edit(
    gh_server: GitHubStandIn, demo12: DemoHistory, tmp_path: Path
) -> None:
    config = write_config(tmp_path, demo12, gh_server)
    gh_server.add_comment(FULL_NAME, ISSUE, "maintainer", f"/bisect good={demo12.good[:10]} bad=main reference=good")
    with open_bot(config, tmp_path / "st") as bot:
        watch(bot, ISSUE, once=True, interval=1)
    ours = job_comments(gh_server)
    assert len(ours) == 1
    body = ours[0]
    assert f"[`{demo12.culprit[:12]}`]({commit_link(gh_server, demo12.culprit)})" in body.splitlines()[1]
    assert "like the good end" in body and demo12.good[:12] in body


@pytest.mark.heavy  # after the default suite (README: Tests)
def test_watch_killed_mid_bisect_resumes_without_rerunning_or_posting_twice(
    gh_server: GitHubStandIn, demo12: DemoHistory, tmp_path: Path
) -> None:
    config = write_config(tmp_path, demo12, gh_server)
    gh_server.add_comment(FULL_NAME, ISSUE, "collab", f"/bisect good={demo12.good} bad=main")
    state_dir = tmp_path / "st"
    args = ["watch", str(config), "--issue", str(ISSUE), "--once", "--state", str(state_dir)]
    proc = subprocess.Popen(
        bisectbot_argv(*args),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=subprocess_env(CI="1", **{TOKEN_ENV: BOT_TOKEN}),
    )
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and proc.poll() is None:  # kill once the search started
            bodies = job_comments(gh_server)
            if bodies and "bisect step" in bodies[0]:
                break
            time.sleep(0.05)
        assert proc.poll() is None, "the bisect finished before it could be killed"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert db_rows(state_dir, "SELECT status FROM bot_commands") == [("claimed",)]
    runs_before = db_rows(state_dir, "SELECT run_key, sha, seed, created FROM runs")
    builds_before = db_rows(state_dir, "SELECT sha, created FROM builds")
    assert runs_before, "killed before any run was stored"

    again = cli(*args)
    assert again.returncode == 0, again.stderr
    ours = job_comments(gh_server)
    assert len(ours) == 1 and len(bot_comments(gh_server)) == 1
    assert demo12.culprit[:12] in ours[0].splitlines()[1]
    assert gh_server.count("POST", COMMENTS) == 1  # created once, edited in place ever after
    assert db_rows(state_dir, "SELECT status FROM bot_commands") == [("done",)]
    # resumed, not restarted: finished builds and runs were kept (same rows, same times) and
    # replayed, so the resumed job executed fewer runs than its result counts
    assert set(builds_before) <= set(db_rows(state_dir, "SELECT sha, created FROM builds"))
    assert set(runs_before) <= set(db_rows(state_dir, "SELECT run_key, sha, seed, created FROM runs"))
    result = json.loads(db_rows(state_dir, "SELECT result FROM jobs WHERE kind='bisect'")[0][0])
    assert result["runs_executed"] < result["runs"]

    # a third run neither handles the command again nor posts
    requests_before = gh_server.count("POST") + gh_server.count("PATCH")
    third = cli(*args)
    assert third.returncode == 0, third.stderr
    assert gh_server.count("POST") + gh_server.count("PATCH") == requests_before


# --------------------------------------------------------------------------- refusals


def test_unauthorised_and_unsafe_commands_are_refused_before_anything_runs(
    gh_server: GitHubStandIn, demo12: DemoHistory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    configs = tmp_path / "configs"
    configs.mkdir()
    (tmp_path / "secret.yaml").write_text("name: x\n")
    config = write_config(tmp_path, demo12, gh_server, configs_dir="configs")
    good = demo12.good
    cases = {
        gh_server.add_comment(
            FULL_NAME, ISSUE, "stranger", f"/bisect good={good} bad=main"
        ): "only repository owners, members and collaborators",
        gh_server.add_comment(FULL_NAME, ISSUE, "maintainer", "/bisect good=$(touch x) bad=main"): "it contains '$'",
        gh_server.add_comment(
            FULL_NAME, ISSUE, "maintainer", f"/bisect good=--upload-pack=touch{os.sep}x bad={good}"
        ): "it starts with '-'",
        gh_server.add_comment(
            FULL_NAME, ISSUE, "maintainer", "/bisect good=no-such-branch bad=main"
        ): "`no-such-branch` does not resolve",
        gh_server.add_comment(
            FULL_NAME, ISSUE, "maintainer", f"/bisect good={good} bad=main config=../secret"
        ): "config name `../secret` is not allowed",
        gh_server.add_comment(
            FULL_NAME, ISSUE, "maintainer", f"/bisect good={good} bad=main config=secret"
        ): "there is no config `secret`",
        gh_server.add_comment(FULL_NAME, ISSUE, "maintainer", "/cancel"): "nothing to cancel",
        # a right-to-left override is shown, not obeyed, in the reply that echoes it
        gh_server.add_comment(FULL_NAME, ISSUE, "maintainer", "/bisect good=v1\u202egood bad=main"): "v1\\u202egood",
        # a member quoting the bot's hidden marker is still heard (the bot is known by its login)
        gh_server.add_comment(
            FULL_NAME, ISSUE, "maintainer", "<!-- bisectbot:job=x -->\n/bisect good=gone bad=main"
        ): "`gone` does not resolve",
    }
    gh_server.add_comment(FULL_NAME, ISSUE, "stranger", "thanks, this is just a comment")
    state_dir = tmp_path / "st"
    with open_bot(config, state_dir) as bot:
        watch(bot, ISSUE, once=True, interval=1)
    replies = bot_comments(gh_server)
    assert len(replies) == len(cases)
    for cid, expected in cases.items():
        mine = [r for r in replies if f"<!-- bisectbot:reply=reply-{cid} -->" in r]
        assert len(mine) == 1 and expected in mine[0], (expected, mine)
        assert len(mine[0].splitlines()) == 2  # marker + one polite line
        assert not any(ch in mine[0] for ch in "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
    stranger_cmd = next(iter(cases))
    assert not gh_server.comments[stranger_cmd].reactions  # outsiders are not acknowledged
    assert not (tmp_path / "x").exists() and not list(tmp_path.glob("*touch*"))
    assert db_rows(state_dir, "SELECT COUNT(*) FROM jobs")[0][0] == 0  # nothing ran
    # handled once: another poll posts nothing
    posts = gh_server.count("POST", COMMENTS)
    with open_bot(config, state_dir) as bot:
        watch(bot, ISSUE, once=True, interval=1)
    assert gh_server.count("POST", COMMENTS) == posts


# --------------------------------------------------------------------------- webhooks


def deliver(
    port: int,
    payload: dict[str, Any],
    *,
    delivery: str | None = None,
    secret: bytes = SECRET,
    signature: str | None = None,
) -> requests.Response:
    body = json.dumps(payload).encode()
    headers = {
        "Content-Type": "application/json",
        "X-GitHub-Event": "issue_comment",
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
        "X-Hub-Signature-256": signature if signature is not None else sign(secret, body),
    }
    return requests.post(f"http://127.0.0.1:{port}/", data=body, headers=headers, timeout=10)


def comment_payload(gh: GitHubStandIn, login: str, body: str) -> dict[str, Any]:
    cid = gh.add_comment(FULL_NAME, ISSUE, login, body)
    assoc = gh.association(gh.repos[FULL_NAME], login)
    return {
        "action": "created",
        "issue": {"number": ISSUE},
        "repository": {"full_name": FULL_NAME},
        "comment": {"id": cid, "body": body, "author_association": assoc, "user": {"login": login, "type": "User"}},
    }


def test_webhook_forged_replayed_and_unauthorised(
    gh_server: GitHubStandIn, demo12: DemoHistory, tmp_path: Path
) -> None:
    config = write_config(tmp_path, demo12, gh_server)
    cfg = load_config(config)
    state_dir = tmp_path / "st"

    def server() -> BotServer:
        return BotServer(cfg, str(config), state_dir, make_client(cfg, {TOKEN_ENV: BOT_TOKEN}), SECRET).start()

    def handled(commands: int, timeout: float) -> bool:
        """Every one of `commands` claimed commands was handled (none is left 'claimed')."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            rows = db_rows(state_dir, "SELECT status FROM bot_commands")
            if len(rows) == commands and all(status != "claimed" for (status,) in rows):
                return True
            time.sleep(0.05)
        return False

    srv = server()
    try:
        check = comment_payload(gh_server, "collab", "/check ref=main")
        forged = deliver(srv.port, check, secret=b"not the secret")
        assert forged.status_code == 401
        assert deliver(srv.port, check, signature="").status_code == 401
        assert db_rows(state_dir, "SELECT COUNT(*) FROM bot_commands")[0][0] == 0
        delivery = str(uuid.uuid4())
        assert deliver(srv.port, check, delivery=delivery).status_code == 202
        assert deliver(srv.port, check, delivery=delivery).json()["message"] == "duplicate delivery ignored"
        outsider = comment_payload(gh_server, "stranger", "/bisect good=main~3 bad=main")
        assert deliver(srv.port, outsider).status_code == 202
        assert handled(2, 120)
    finally:
        srv.stop()
    bodies = bot_comments(gh_server)
    assert sum("<!-- bisectbot:job=check-status -->" in b for b in bodies) == 1
    alarms = [b for b in bodies if "no longer holds" in b]
    assert len(alarms) == 1 and "No commit is recorded as known good" in alarms[0]
    refusals = [b for b in bodies if "only repository owners" in b]
    assert len(refusals) == 1
    assert "eyes" in gh_server.comments[check["comment"]["id"]].reactions
    # replayed after a restart: the SQLite delivery store remembers
    srv = server()
    try:
        assert deliver(srv.port, check, delivery=delivery).json()["message"] == "duplicate delivery ignored"
        # a new delivery id for an already handled comment is not run again either
        # on_command claims before the 202 is sent, and stop() below drains the worker's queue:
        # a second run of the comment would show in the counts after it, no waiting needed
        assert deliver(srv.port, check).status_code == 202
        assert handled(2, 30)
    finally:
        srv.stop()
    assert len(bot_comments(gh_server)) == len(bodies)
    assert db_rows(state_dir, "SELECT COUNT(*) FROM jobs WHERE kind='test'")[0][0] == 1


# --------------------------------------------------------------------------- token hygiene


def test_token_never_reaches_build_or_run_subprocesses(
    gh_server: GitHubStandIn, demo12: DemoHistory, tmp_path: Path
) -> None:
    dumps = tmp_path / "env-dumps"
    dumps.mkdir()
    spy = tmp_path / "envspy.py"
    spy.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys, uuid\n"
        f"path = os.path.join({str(dumps)!r}, sys.argv[1] + '-' + uuid.uuid4().hex + '.json')\n"
        "open(path, 'w').write(json.dumps(dict(os.environ)))\n"
        "os.execv(sys.argv[2], sys.argv[2:])\n"
    )
    spy.chmod(0o755)
    launcher = tmp_path / "cxx-launcher"
    launcher.write_text(f'#!/bin/sh\nexec {spy} build "$@"\n')
    launcher.chmod(0o755)
    config = write_config(tmp_path, demo12, gh_server, token_env="GITHUB_TOKEN")
    data = yaml.safe_load(config.read_text())
    data["build"]["cmake_args"].append(f"-DCMAKE_CXX_COMPILER_LAUNCHER={launcher}")
    data["run"]["argv"] = [str(spy), "run", *data["run"]["argv"]]
    data["run"]["max_runs"] = 60
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    secrets = {
        "GITHUB_TOKEN": BOT_TOKEN,
        "GH_TOKEN": BOT_TOKEN,
        "BISECTBOT_GITHUB_TOKEN": BOT_TOKEN,
        TOKEN_ENV: BOT_TOKEN,
    }
    proc = cli(
        "check", str(config), "--ref", "main", "--issue", str(ISSUE), "--state", str(tmp_path / "st"), env=secrets
    )
    assert proc.returncode == 1, proc.stderr  # BAD: the alarm was posted with the token
    assert any("no longer holds" in b for b in bot_comments(gh_server))
    seen = {kind: [json.loads(p.read_text()) for p in dumps.glob(f"{kind}-*.json")] for kind in ("build", "run")}
    assert seen["build"] and seen["run"], "the spy did not see the compiler and the program run"
    for envs in seen.values():
        for env in envs:
            assert "PATH" in env  # a real environment, just without credentials
            assert not [k for k, v in env.items() if BOT_TOKEN in v or k in secrets], env.keys()


# --------------------------------------------------------------------------- scheduled check


@pytest.mark.heavy  # after the default suite (README: Tests)
def test_check_still_fixed_then_alarm_and_culprit(
    gh_server: GitHubStandIn, demo12: DemoHistory, tmp_path: Path
) -> None:
    config = write_config(tmp_path, demo12, gh_server)
    state = ["--state", str(tmp_path / "st")]
    fixed = cli("check", str(config), "--ref", demo12.good, *state)
    assert fixed.returncode == 0, fixed.stderr
    status = [b for b in bot_comments(gh_server) if "job=check-status" in b]
    assert len(status) == 1 and f"still fixed at [`{demo12.good[:12]}`]" in status[0]

    broken = cli("check", str(config), "--ref", "main", *state)
    assert broken.returncode == 1, broken.stderr
    bodies = bot_comments(gh_server)
    alarms = [b for b in bodies if "the fix no longer holds" in b]
    assert len(alarms) == 1 and commit_link(gh_server, demo12.good) in alarms[0]
    culprit = job_comments(gh_server)
    assert len(culprit) == 1
    assert f"[`{demo12.culprit[:12]}`]({commit_link(gh_server, demo12.culprit)})" in culprit[0]
    assert "broken again" in [b for b in bodies if "job=check-status" in b][0]

    again = cli("check", str(config), "--ref", demo12.good, *state)
    assert again.returncode == 0, again.stderr
    status = [b for b in bot_comments(gh_server) if "job=check-status" in b]
    assert len(status) == 1 and "still fixed" in status[0]  # the same comment, updated in place
    assert len(bot_comments(gh_server)) == 3  # status, alarm, culprit


@pytest.mark.heavy  # whole bisects or builds, 3-8 s: after the default suite (README: Tests)
def test_result_survives_github_outage_and_publish_posts_it_later(
    gh_server: GitHubStandIn, demo12: DemoHistory, tmp_path: Path
) -> None:
    config = write_config(tmp_path, demo12, gh_server, retry_give_up_after=0.3)
    gh_server.fail("POST", COMMENTS, "500", times=10_000)
    state = ["--state", str(tmp_path / "st")]
    down = cli("check", str(config), "--ref", "main", *state)
    assert down.returncode == 5, down.stderr
    assert bot_comments(gh_server) == []
    assert db_rows(tmp_path / "st", "SELECT kind, status, published FROM jobs") == [("test", "done", 0)]
    still_down = cli("publish", str(config), *state)
    assert still_down.returncode == 5
    gh_server.faults.clear()
    up = cli("publish", str(config), *state)
    assert up.returncode == 0, up.stderr
    bodies = bot_comments(gh_server)
    assert len(bodies) == 2 and sum("no longer holds" in b for b in bodies) == 1
    assert db_rows(tmp_path / "st", "SELECT published FROM jobs") == [(1,)]
    posts = gh_server.count("POST", COMMENTS)
    assert cli("publish", str(config), *state).returncode == 0
    assert gh_server.count("POST", COMMENTS) == posts


def test_dry_run_without_credentials_writes_what_it_would_post(
    gh_server: GitHubStandIn, demo12: DemoHistory, tmp_path: Path
) -> None:
    config = write_config(tmp_path, demo12, gh_server, dry_run_file="dry-run.md")
    proc = cli("check", str(config), "--ref", "main", "--state", str(tmp_path / "st"), env={})
    assert proc.returncode == 1, proc.stderr
    out = (tmp_path / "dry-run.md").read_text()
    assert "would create comment" in out and "the fix no longer holds" in out
    assert "<!-- bisectbot:job=check-status -->" in out
    assert gh_server.requests == []  # nothing reached GitHub


def test_cancel_stops_the_running_job_and_says_so_in_its_comment(
    gh_server: GitHubStandIn, demo12: DemoHistory, tmp_path: Path
) -> None:
    config = write_config(tmp_path, demo12, gh_server)
    gh_server.add_comment(FULL_NAME, ISSUE, "maintainer", f"/bisect good={demo12.good} bad=main")
    cancel_id = gh_server.add_comment(FULL_NAME, ISSUE, "collab", "/cancel")
    state_dir = tmp_path / "st"
    with open_bot(config, state_dir) as bot:
        watch(bot, ISSUE, once=True, interval=1)
    ours = job_comments(gh_server)
    assert len(ours) == 1 and "cancelled by @collab" in ours[0]
    assert len(bot_comments(gh_server)) == 1  # the /cancel needs no reply of its own
    assert "eyes" in gh_server.comments[cancel_id].reactions
    assert db_rows(state_dir, "SELECT status FROM jobs") == [("cancelled",)]
    assert db_rows(state_dir, "SELECT COUNT(*) FROM builds")[0][0] == 0  # stopped before building
