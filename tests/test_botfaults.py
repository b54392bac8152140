"""The bot stays up: a command that cannot be handled still gets an answer and an end, and
GitHub failing never slows a job. Real demo builds, the real GitHub stand-in over HTTP."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable, TypeVar

import pytest

from bisectbot.bot.bot import Bot
from bisectbot.bot.serve import watch
from bisectbot.config import load_config
from bisectbot.demo import DemoHistory
from bisectbot.errors import GitHubError
from bisectbot.events import Syncing
from bisectbot.github.client import GitHubClient, RetryPolicy
from bisectbot.github.commands import BisectCommand
from bisectbot.github.outbox import Outbox
from bisectbot.state.statedir import StateDir

from conftest import bisectbot_argv
from ghserver import BOT_LOGIN, BOT_TOKEN, FULL_NAME, ISSUE, GitHubStandIn, gh_server  # noqa: F401
from test_bot import COMMENTS, ONE_COMMENT, bot_comments, cli, db_rows, demo12, job_comments, open_bot, write_config  # noqa: F401

T = TypeVar("T")


def replies_to(gh: GitHubStandIn, comment_id: int) -> list[str]:
    return [b for b in bot_comments(gh) if f"<!-- bisectbot:reply=reply-{comment_id} -->" in b]


# --------------------------------------------------------------------------- every command ends


def test_an_unreadable_config_is_answered_and_the_next_command_goes_on(
    gh_server: GitHubStandIn, demo12: DemoHistory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "latin1.yaml").write_bytes("# caf\xe9\nname: x\n".encode("latin-1"))
    config = write_config(tmp_path, demo12, gh_server, configs_dir="configs")
    poison = gh_server.add_comment(FULL_NAME, ISSUE, "maintainer", f"/bisect good={demo12.good} bad=main config=latin1")
    after = gh_server.add_comment(FULL_NAME, ISSUE, "maintainer", "/cancel")
    state = ["--state", str(tmp_path / "st")]
    first = cli("watch", str(config), "--issue", str(ISSUE), "--once", *state)
    assert first.returncode == 0, first.stderr
    answer = replies_to(gh_server, poison)
    assert len(answer) == 1 and "latin1" in answer[0], answer
    assert len(replies_to(gh_server, after)) == 1  # the command queued behind it was handled
    statuses = dict(db_rows(tmp_path / "st", "SELECT comment_id, status FROM bot_commands"))
    assert statuses[poison] in ("refused", "failed") and statuses[after] == "done"
    posts = gh_server.count("POST", COMMENTS)
    again = cli("watch", str(config), "--issue", str(ISSUE), "--once", *state)
    assert again.returncode == 0, again.stderr
    assert gh_server.count("POST", COMMENTS) == posts  # nothing resumed, nothing answered twice


class BuggyBot(Bot):
    """A bot with a bug in its bisect handler (what a traceback in a job would look like)."""

    def _handle_bisect(self, issue: int, comment_id: int, cmd: BisectCommand) -> None:
        raise KeyError("a bug")


def test_an_unforeseen_exception_is_a_reply_and_a_failed_command(
    gh_server: GitHubStandIn, demo12: DemoHistory, tmp_path: Path
) -> None:
    config = write_config(tmp_path, demo12, gh_server)
    broken = gh_server.add_comment(FULL_NAME, ISSUE, "maintainer", f"/bisect good={demo12.good} bad=main")
    after = gh_server.add_comment(FULL_NAME, ISSUE, "maintainer", "/cancel")
    cfg = load_config(config)
    from bisectbot.github.client import make_client

    with StateDir(tmp_path / "st") as state:
        bot = BuggyBot(cfg, str(config), state, make_client(cfg, {"BISECTBOT_TEST_GH_TOKEN": BOT_TOKEN}))
        watch(bot, ISSUE, once=True, interval=1)
        bot.outbox.close()
    answer = replies_to(gh_server, broken)
    assert len(answer) == 1 and "internal error: KeyError" in answer[0]
    assert len(replies_to(gh_server, after)) == 1
    assert db_rows(tmp_path / "st", "SELECT comment_id, status, raises FROM bot_commands ORDER BY comment_id") == [
        (broken, "failed", 1),
        (after, "done", 0),
    ]


def test_a_command_whose_handling_raised_twice_is_not_resumed_a_third_time(
    gh_server: GitHubStandIn, demo12: DemoHistory, tmp_path: Path
) -> None:
    config = write_config(tmp_path, demo12, gh_server)
    cid = gh_server.add_comment(FULL_NAME, ISSUE, "maintainer", f"/bisect good={demo12.good} bad=main")
    with open_bot(config, tmp_path / "st") as bot:
        assert bot.claim(cid, ISSUE, "maintainer", "MEMBER", f"/bisect good={demo12.good} bad=main")
        bot.memory.note_command_raised(cid)  # two bots died of it before they could mark it failed
        bot.memory.note_command_raised(cid)
        bot.resume_interrupted()
        bot.settle(10)
        bot.outbox.close()
    assert db_rows(tmp_path / "st", "SELECT status FROM bot_commands") == [("failed",)]
    assert db_rows(tmp_path / "st", "SELECT COUNT(*) FROM jobs") == [(0,)]  # not run a third time
    assert len(replies_to(gh_server, cid)) == 1 and "failed twice" in replies_to(gh_server, cid)[0]


# --------------------------------------------------------------------------- GitHub off the job's path


class ThreadRecordingClient(GitHubClient):
    """The real client, noting which thread made each call (the job runs on the caller's)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[tuple[str, str]] = []

    def _call(self, method: str, url: str, fn: Callable[[], T], **kw: Any) -> T:
        self.calls.append((threading.current_thread().name, method))
        return super()._call(method, url, fn, **kw)


@pytest.mark.longest  # the longest tier: by hand, not in CI (README: Tests)
def test_a_write_outage_does_not_slow_the_job_and_the_result_is_posted_once_after(
    gh_server: GitHubStandIn, demo12: DemoHistory, tmp_path: Path
) -> None:
    config = write_config(tmp_path, demo12, gh_server, retry_give_up_after=0.5)
    cmd = gh_server.add_comment(FULL_NAME, ISSUE, "maintainer", f"/bisect good={demo12.good} bad=main")
    for method, path in (("POST", COMMENTS), ("PATCH", ONE_COMMENT), ("POST", r".*/reactions")):
        gh_server.fail(method, path, "502", times=100_000)
    cfg = load_config(config)
    client = ThreadRecordingClient(
        FULL_NAME,
        api_url=gh_server.base_url,
        token=BOT_TOKEN,
        bot_login=BOT_LOGIN,
        retry=RetryPolicy(give_up_after=0.5, backoff_base=0.01, max_wait=0.05),
    )
    seen: list[int] = []  # how many calls were made at each of the job's events
    # The command is claimed on the issue (one POST, one GET, bounded by CLAIM_BUDGET) after the
    # refs are synced and before the job starts: the job is what must not wait on GitHub.

    def observe(event: object) -> None:
        if not isinstance(event, Syncing):
            seen.append(len(client.calls))

    with StateDir(tmp_path / "st") as state:
        bot = Bot(cfg, str(config), state, client, observe)
        bot.poll_cancels = True
        bot.poll(ISSUE)  # the whole job runs here, on this thread, while every write fails
        job_thread = threading.current_thread().name
        assert db_rows(tmp_path / "st", "SELECT kind, status FROM jobs") == [("bisect", "done")]
        assert bot_comments(gh_server) == []  # nothing got through
        during = client.calls[seen[0] : seen[-1]]  # from the job's first event to its last
        assert during and not [c for c in during if c[0] == job_thread]  # none on the job's thread
        assert any(m in ("POST", "PATCH") for t, m in client.calls if t.startswith("bisectbot-outbox"))
        gh_server.faults.clear()  # GitHub answers again: the outbox's next attempt gets through
        assert bot.outbox.flush(120)
        bot.outbox.close()
    ours = job_comments(gh_server)
    assert len(ours) == 1 and demo12.culprit[:12] in ours[0].splitlines()[1] and "⏳" not in ours[0]
    creates = [r for r in gh_server.matching("POST", COMMENTS) if b"bisectbot:job=" in r.body]
    assert len({r.body for r in creates}) >= 1 and len(bot_comments(gh_server)) == 1
    assert "eyes" in gh_server.comments[cmd].reactions  # the reaction was not lost either
    assert db_rows(tmp_path / "st", "SELECT published FROM jobs") == [(1,)]


# --------------------------------------------------------------------------- the outbox itself


def test_outbox_coalesces_by_key_and_waits_out_retry_after() -> None:
    sent: list[str] = []
    gate = threading.Event()
    failures = iter([GitHubError("asked to wait")])

    def slow(text: str) -> Callable[[], None]:
        def send() -> None:
            gate.wait(10)
            sent.append(text)

        return send

    def once_refused() -> None:
        err = next(failures, None)
        if err is not None:
            err.retry_after = 0.2
            raise err
        sent.append("reaction")

    box = Outbox()
    box.put(("comment", 1), "progress", slow("progress 1"))  # in flight, held by the gate
    for i in range(2, 6):  # four more bodies while the first is stuck: only the last is sent
        box.put(("comment", 2), "progress", slow(f"other {i}"))
    box.put(("react", 9), "react", once_refused)
    gate.set()
    assert box.flush(30)
    box.close()
    assert sent == ["progress 1", "other 5", "reaction"]
    assert box.dropped == 0


def test_outbox_drops_what_retrying_cannot_change() -> None:
    calls = []

    def not_found() -> None:
        calls.append(1)
        err = GitHubError("404 Not Found")
        err.status = 404
        raise err

    box = Outbox()
    box.put("k", "react to a deleted comment", not_found)
    assert box.flush(30)
    box.close()
    assert calls == [1] and box.dropped == 1


def test_a_write_that_keeps_failing_delays_neither_its_own_lane_nor_the_results() -> None:
    """Issue 25: writes went out one at a time in order, and a failed one went back to the head:
    a reaction answering 500 forever held back a finished job's result. Now a failed write waits
    on its own schedule, the lane sends what is ready meanwhile, and results have their own lane
    (a Retry-After of five minutes on one reaction reschedules that reaction only)."""
    sent: list[str] = []
    attempts = {"react 1": 0, "react 2": 0}

    def refused(name: str, retry_after: float | None) -> Callable[[], None]:
        def send() -> None:
            attempts[name] += 1
            err = GitHubError("500 Internal Server Error")
            err.status, err.retry_after = 500, retry_after
            raise err

        return send

    box = Outbox(max_backoff=0.05)
    box.put(("react", 1), "react 1", refused("react 1", None), lane="react")
    box.put(("react", 2), "react 2", refused("react 2", 300.0), lane="react")
    box.put(("react", 3), "react 3", lambda: sent.append("react 3"), lane="react")
    box.put(("comment", 7), "progress", lambda: sent.append("progress"), lane="progress")
    box.put(("comment", 8), "result", lambda: sent.append("result"), lane="result")
    assert box.flush(30, lanes=("result", "progress"))
    deadline = time.monotonic() + 30
    while "react 3" not in sent and time.monotonic() < deadline:
        time.sleep(0.01)
    while attempts["react 1"] < 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sorted(sent) == ["progress", "react 3", "result"]
    assert attempts["react 1"] >= 5 and attempts["react 2"] == 1  # retried; waiting its 300 s
    assert not box.flush(0.2)  # the two refused reactions are still owed to GitHub
    box.close()


def test_a_result_drops_the_progress_of_its_job_still_waiting_and_never_runs_beside_it() -> None:
    sent: list[str] = []
    gate, inflight = threading.Event(), threading.Event()

    def slow_progress() -> None:
        inflight.set()
        gate.wait(10)
        sent.append("progress 1")

    box = Outbox()
    box.put(("comment", 1, "job"), "progress 1", slow_progress, lane="progress")
    assert inflight.wait(10)
    box.put(("comment", 1, "job"), "progress 2", lambda: sent.append("progress 2"), lane="progress")
    box.put(("comment", 1, "job"), "result", lambda: sent.append("result"), lane="result")
    box.put(("comment", 1, "job"), "progress 3", lambda: sent.append("progress 3"), lane="progress")
    time.sleep(0.2)
    assert sent == []  # the result waits for the progress edit in flight on its comment
    gate.set()
    assert box.flush(30)
    box.close()
    assert sent == ["progress 1", "result"]


def test_a_progress_put_while_its_result_is_being_sent_is_dropped() -> None:
    """The race the test above can lose under load: the result already taken by its lane (in
    flight, not waiting) when a progress body for the same comment arrives."""
    sent: list[str] = []
    gate, inflight = threading.Event(), threading.Event()

    def slow_result() -> None:
        inflight.set()
        gate.wait(10)
        sent.append("result")

    box = Outbox()
    box.put(("comment", 1, "job"), "result", slow_result, lane="result")
    assert inflight.wait(10)
    box.put(("comment", 1, "job"), "late progress", lambda: sent.append("late progress"), lane="progress")
    gate.set()
    assert box.flush(30)
    box.close()
    assert sent == ["result"]


@pytest.mark.longest  # the longest tier: by hand, not in CI (README: Tests)
def test_reactions_refused_forever_do_not_hold_back_the_result_under_watch(
    gh_server: GitHubStandIn, demo12: DemoHistory, tmp_path: Path
) -> None:
    """The probe of issue 25 under a continuous `watch`: every reaction answers 500. The job's
    result comment is posted within 30 s of the job's end, while the reaction is still failing."""
    config = write_config(tmp_path, demo12, gh_server, retry_give_up_after=5)
    gh_server.add_comment(FULL_NAME, ISSUE, "maintainer", f"/bisect good={demo12.good} bad=main")
    gh_server.fail("POST", r".*/reactions", "500", times=100_000)
    stop = threading.Event()
    with open_bot(config, tmp_path / "st") as bot:
        thread = threading.Thread(target=watch, args=(bot, ISSUE), kwargs={"once": False, "interval": 1, "stop": stop})
        thread.start()
        try:
            done = posted = None
            deadline = time.monotonic() + 600
            while posted is None and time.monotonic() < deadline:
                if done is None and db_rows(tmp_path / "st", "SELECT status FROM jobs") == [("done",)]:
                    done = time.monotonic()
                ours = job_comments(gh_server)
                if done is not None and ours and demo12.culprit[:12] in ours[0] and "⏳" not in ours[0]:
                    posted = time.monotonic()
                time.sleep(0.1)
            assert done is not None and posted is not None, "no result comment"
            assert posted - done <= 30, posted - done
            assert gh_server.count("POST", r".*/reactions") >= 2  # still trying, still refused
        finally:
            stop.set()
            thread.join(timeout=120)
            bot.outbox.close()


# --------------------------------------------------------------------------- claims across state directories


@pytest.mark.longest  # the longest tier: by hand, not in CI (README: Tests)
def test_two_bots_with_separate_state_directories_never_run_the_same_bisect(
    gh_server: GitHubStandIn, demo12: DemoHistory, tmp_path: Path
) -> None:
    import subprocess

    from conftest import subprocess_env
    from test_bot import TOKEN_ENV

    config = write_config(tmp_path, demo12, gh_server)
    gh_server.add_comment(FULL_NAME, ISSUE, "maintainer", f"/bisect good={demo12.good} bad=main")
    argv = [
        bisectbot_argv("watch", str(config), "--issue", str(ISSUE), "--once", "--state", str(tmp_path / s))
        for s in ("a", "b")
    ]
    env = subprocess_env(CI="1", **{TOKEN_ENV: BOT_TOKEN})
    procs = [subprocess.Popen(a, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env) for a in argv]
    for proc in procs:
        assert proc.wait(timeout=300) == 0, proc.stderr.read() if proc.stderr else ""
    runs = {s: db_rows(tmp_path / s, "SELECT COUNT(*) FROM runs")[0][0] for s in ("a", "b")}
    statuses = sorted(db_rows(tmp_path / s, "SELECT status FROM bot_commands")[0][0] for s in ("a", "b"))
    assert statuses == ["done", "elsewhere"], statuses
    assert sorted(runs.values())[0] == 0 and sorted(runs.values())[1] > 0, runs  # one bot ran it all
    ours = job_comments(gh_server)
    assert len(ours) == 1 and demo12.culprit[:12] in ours[0].splitlines()[1]
    assert len(bot_comments(gh_server)) == 1


def test_a_claim_race_is_won_by_the_earliest_comment(gh_server: GitHubStandIn) -> None:
    a = GitHubClient(FULL_NAME, api_url=gh_server.base_url, token=BOT_TOKEN, bot_login=BOT_LOGIN)
    b = GitHubClient(FULL_NAME, api_url=gh_server.base_url, token=BOT_TOKEN, bot_login=BOT_LOGIN)
    # b's claim lands second although both found no comment: simulate by a's existing first
    assert a.claim_job(ISSUE, "bisect-abc", "aaaa", "queued")
    assert not b.claim_job(ISSUE, "bisect-abc", "bbbb", "queued")
    assert a.claim_job(ISSUE, "bisect-abc", "aaaa", "queued")  # a restarted a: still its own
    a.upsert_job_comment(ISSUE, "bisect-abc", "result")  # edits keep the owner's marker line
    bodies = [c.body for c in gh_server.comments_on(FULL_NAME, ISSUE)]
    assert bodies == ["<!-- bisectbot:job=bisect-abc by=aaaa -->\nresult"]
    # both created (a race): the later comment is deleted by its own bot
    gh_server.add_comment(FULL_NAME, ISSUE, BOT_LOGIN, "<!-- bisectbot:job=bisect-xyz by=aaaa -->\nqueued")
    gh_server.add_comment(FULL_NAME, ISSUE, BOT_LOGIN, "<!-- bisectbot:job=bisect-xyz by=bbbb -->\nqueued")
    assert not b.claim_job(ISSUE, "bisect-xyz", "bbbb", "queued")
    assert [c.body.split("\n")[0] for c in gh_server.comments_on(FULL_NAME, ISSUE)][1:] == [
        "<!-- bisectbot:job=bisect-xyz by=aaaa -->"
    ]
