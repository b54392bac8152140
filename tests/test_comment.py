"""Result comments (pure rendering of typed reports), the job comment's progress, and the poster
that sends it from its own thread."""

from __future__ import annotations

import hashlib
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bisectbot import __version__
from bisectbot.bot.progress import CommentObserver, ProgressPoster
from bisectbot.errors import GitHubError
from bisectbot.events import (
    Answered,
    BisectStarted,
    Building,
    Built,
    Cancelled,
    CancelToken,
    EndpointStarted,
    RunsProgress,
    StepStarted,
)
from bisectbot.github.comment import (
    BODY_LIMIT,
    Code,
    Collapsed,
    CommentContext,
    Document,
    commit_ref,
    render_alarm,
    render_bisect,
    render_status,
)
from bisectbot.state.files import fixture_hashes
from bisectbot.statistics.outcome import Find, Verdict
from sample_reports import BAD, CULPRIT, GOOD, PARENT, a_test_report, bisect_report


def ctx(fixtures: dict[str, str] | None = None) -> CommentContext:
    return CommentContext(
        repo="ggml-org/llama.cpp", html_url="https://github.com", fixtures=fixtures or {}, first_seed=1, max_runs=6000
    )


def test_culprit_is_linked_with_subject_and_pr() -> None:
    body = render_bisect(bisect_report(), ctx()).text()
    first = body.splitlines()[0]
    assert f"[`{CULPRIT[:12]}`](https://github.com/ggml-org/llama.cpp/commit/{CULPRIT})" in first
    assert "speculative: take top draft candidate" in first
    assert "([#1032](https://github.com/ggml-org/llama.cpp/pull/1032))" in first
    assert f"commit/{PARENT}" in body and "tests GOOD" in body  # the last good commit, linked


def test_first_fixed_says_the_parent_tests_bad() -> None:
    from dataclasses import replace

    body = render_bisect(replace(bisect_report(), find=Find.FIXED), ctx()).text()
    assert body.startswith("### bisectbot: first fixed commit is") and "tests BAD" in body


def test_subject_without_pr_number_has_no_pr_link() -> None:
    out = commit_ref(CULPRIT, "plain subject", ctx())
    assert out.endswith(" plain subject") and "/pull/" not in out


def test_table_chart_and_reproduction_footer(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "draft.gguf").write_bytes(b"draft weights")
    hashes = fixture_hashes(tmp_path)
    assert hashes == {"models/draft.gguf": hashlib.sha256(b"draft weights").hexdigest()}
    body = render_bisect(bisect_report(), ctx(hashes)).text()
    # the verdict table is always there, outside any <details> (the chart's fallback)
    table_at = body.index("| commit | subject | role | verdict | runs | observed (vs reference) | evidence |")
    assert "<details>" not in body[:table_at]
    assert "**BAD**" in body and "b 8 (0.67 vs 0.20)" in body
    # mermaid chart inside <details>: reference bars, observed lines, categories quoted
    chart = body[body.index("```mermaid") :]
    assert body.rindex("<details>", 0, body.index("```mermaid")) > table_at
    assert "xychart-beta" in chart and 'x-axis ["a", "b", "c", "d", "e", "f", "<other>"]' in chart
    assert "bar [0.1, 0.2, 0.05, 0.3, 0.25, 0.1, 0.0]" in chart
    assert "line [0.0, 0.6667, 0.0, 0.25, 0.0, 0.0833, 0.0]" in chart  # the bad side
    # the good side: the parent's re-test and the good endpoint met the condition equally often
    # (581 runs each); the parent comes first
    assert f"good side `{PARENT[:12]}` (n=581)" in body
    # footer: repo, range, digest, cmake args, compiler, fixture hash, seeds, version
    footer = body[body.index("<summary>Reproduce</summary>") :]
    for needle in (
        "ggml-org/llama.cpp",
        f"`{GOOD[:12]}`",
        "ad81a2d7a2ee4f1a",
        "-DCMAKE_BUILD_TYPE=Release",
        "c++ (Debian 12.2.0) 12.2.0",
        hashes["models/draft.gguf"],
        "seeds 6001–6022",
        "at most 6000 runs",
        f"bisectbot {__version__}",
        "bisectbot bisect c.yaml",
    ):
        assert needle in footer, needle
    # the change points crossed, and what the confidence rests on (collapsed)
    assert "Change points crossed (the distribution changed more than once):" in body
    rests = body[body.index("<summary>What the confidence rests on</summary>") :]
    assert "BAD means farther than eta 0.03" in rests and rests.index("re-tests") < rests.index("</details>")


def test_huge_report_fits_github_limit_and_keeps_the_head() -> None:
    doc = render_bisect(bisect_report(n_extra=700), ctx())
    body = doc.text()
    assert len(body) > BODY_LIMIT
    fitted = doc.fit()
    assert len(fitted) <= BODY_LIMIT - 200  # room for the client's marker line
    assert fitted.splitlines()[0] == body.splitlines()[0]
    assert fitted.count("```") % 2 == 0 and fitted.count("<details>") == fitted.count("</details>")


# -- fitting a document to GitHub's limit ----------------------------------------------------------
TABLE = "| commit | p-value | verdict |\n|---|---|---|\n" + "".join(
    f"| {i:07x} | 0.{i:04d} | good |\n" for i in range(40)
)


def test_fit_cuts_the_largest_collapsed_part_first_and_keeps_the_table() -> None:
    small = Collapsed("small log", (Code("s" * 1_000),))
    big = Collapsed("build log", (Code("\n".join(f"line {i} " + "x" * 60 for i in range(2_000))),))
    doc = Document(("## Result", TABLE, small, big, "_footer_"))
    out = doc.fit(BODY_LIMIT)
    assert len(doc.text()) > BODY_LIMIT >= len(out)
    assert TABLE in out and small.render() in out and out.endswith("_footer_\n")
    assert "<summary>build log</summary>" in out and "characters cut to fit" in out
    assert out.count("```") == 4 and out.count("</details>") == 2
    log = out[out.index("<summary>build log") :].splitlines()
    kept = log[log.index("```") + 1 : next(i for i, ln in enumerate(log) if "characters cut" in ln)]
    assert kept[0].startswith("line 0 ") and all(ln == f"line {i} " + "x" * 60 for i, ln in enumerate(kept))


def test_fit_leaves_a_short_document_alone() -> None:
    doc = Document(("## Result", TABLE))
    assert doc.fit() == doc.text() == "## Result\n\n" + TABLE + "\n"


def test_fit_without_collapsed_parts_cuts_the_end() -> None:
    out = Document((TABLE, "y" * 100_000)).fit(BODY_LIMIT)
    assert len(out) <= BODY_LIMIT and out.startswith(TABLE) and "characters cut to fit" in out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(min_value=0, max_value=40_000), max_size=6),
    fenced=st.lists(st.booleans(), min_size=6, max_size=6),
    tail=st.integers(min_value=0, max_value=30_000),
    limit=st.integers(min_value=2_000, max_value=BODY_LIMIT),
)
def test_fit_properties(sizes: list[int], fenced: list[bool], tail: int, limit: int) -> None:
    blocks: list = ["## Verdict", TABLE]
    for i, n in enumerate(sizes):
        inner = Code("q" * n) if fenced[i] else "w" * n
        blocks.append(Collapsed(f"block {i}", (inner,)))
    blocks.append("t" * tail)
    doc = Document(tuple(blocks))
    out = doc.fit(limit)
    assert len(out) <= limit
    if len(doc.text()) <= limit:
        assert out == doc.text()
    assert out.count("```") % 2 == 0 and out.count("<details>") == out.count("</details>")
    if len(TABLE) + 13 + 600 * len(sizes) + tail < limit:  # the table fits once details are cut
        assert TABLE in out


def test_status_and_alarm_comments() -> None:
    ok = render_status(a_test_report(Verdict.GOOD), ctx(), date="2025-01-02 04:17 UTC").text()
    assert ok.startswith(f"### bisectbot: ✅ still fixed at [`{BAD[:12]}`]") and "2025-01-02 04:17 UTC" in ok
    assert "`master` after 1391 runs: a 56 (0.10 vs 0.10)" in ok
    broken = render_status(a_test_report(Verdict.BAD), ctx(), date="d", alarm=True).text()
    assert "❌ broken again" in broken and "see the alarm below" in broken
    alarm = render_alarm(a_test_report(Verdict.BAD), ctx(), last_good=GOOD, date="d").text()
    assert "no longer holds" in alarm and f"commit/{GOOD}" in alarm
    none = render_alarm(a_test_report(Verdict.BAD), ctx(), last_good=None, date="d").text()
    assert "/bisect good=<ref> bad=" + BAD[:12] in none


# -- the job comment while it runs ----------------------------------------------------------------
def test_comment_observer_tracks_the_phase_from_typed_events() -> None:
    bodies: list[str] = []
    obs = CommentObserver("bisecting a..b", ctx(), bodies.append)
    obs(BisectStarted(12, GOOD, BAD, "bad", 5e-4, 4))
    assert "⏳ starting" in bodies[-1]
    obs(EndpointStarted("bad", "main", BAD))
    obs(Building(BAD, ("specdemo",)))
    assert "⏳ commit 1 of ~6: testing bad main = bbf3fb5a1702 — building" in bodies[-1]
    n = len(bodies)
    obs(RunsProgress(BAD, 3, 6000, "b=3"))  # transient: not a line, no new body
    assert len(bodies) == n
    obs(Built(BAD, "ok", 1.0, ""))
    obs(StepStarted(2, 4, CULPRIT, 8, 11))
    body = bodies[-1]
    assert "⏳ commit 2 of ~6: bisect step 2 of ~4, `60488cfca65a`\n" in body
    assert "[step 2/~4] 60488cfca65a (position 8 of 11)" in body  # the last lines, collapsed
    assert "3 of at most 6000 runs" not in body
    # the answer reaches the comment before the cross-check arms run
    obs(Answered("found", f"first bad commit is {CULPRIT}", ("server",), ("culprit", "parent")))
    assert f"answer (found): first bad commit is {CULPRIT}; now the cross-check arm(s) server" in bodies[-1]


def wait_for(predicate, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return False


@pytest.mark.heavy  # whole bisects or long simulations, 4 s or more: after the default suite (README: Tests)
def test_poster_posts_the_first_body_at_once_then_at_most_once_per_interval() -> None:
    posted: list[str] = []
    with ProgressPoster(posted.append, 3600, CancelToken()) as poster:
        poster.offer("v1")
        assert wait_for(lambda: posted == ["v1"])
        for i in range(2, 50):
            poster.offer(f"v{i}")
        seen = poster.rounds
        assert wait_for(lambda: poster.rounds >= seen + 2)  # the thread has looked at the last offer
    assert posted == ["v1"]  # nothing more, and nothing on stop: the result comes next


def test_poster_survives_github_failures_and_sends_the_latest_body() -> None:
    posted: list[str] = []
    failures = [GitHubError("500"), GitHubError("502")]

    def post(body: str) -> None:
        if failures:
            raise failures.pop()
        posted.append(body)

    with ProgressPoster(post, 0, CancelToken()) as poster:
        poster.offer("first")
        assert wait_for(lambda: not failures)
        poster.offer("second")
        poster.offer("third")
        assert wait_for(lambda: posted[-1:] == ["third"])
    assert "second" not in posted  # replaced before it was sent


def test_poster_stops_the_job_when_it_finds_a_cancel() -> None:
    token, asked = CancelToken(), threading.Event()

    def poll() -> str | None:
        asked.set()
        return "maintainer"

    def cancelled_by() -> str | None:
        try:
            token.check()
        except Cancelled as stop:
            return stop.who
        return None

    with ProgressPoster(lambda body: None, 0, token, poll_cancel=poll):
        assert wait_for(lambda: cancelled_by() is not None)
    assert asked.is_set() and cancelled_by() == "maintainer"


def test_the_comment_says_which_variants_commits_needed_and_names_skip_blocks() -> None:
    from dataclasses import replace

    r = bisect_report()
    assert "variants for their era" not in render_bisect(r, ctx()).text()
    old = replace(r.verdicts[1], build_variant=3, variant=6)
    block = {
        "first": PARENT,
        "last": CULPRIT,
        "commits": 4,
        "tried": 2,
        "signature": "s",
        "text": "4 commits 2024-06-01 … 2024-06-04 (2 tried): runs crash: killed by SIGSEGV",
    }
    body = render_bisect(replace(r, verdicts=[r.verdicts[0], old, *r.verdicts[2:]], skip_blocks=[block]), ctx()).text()
    assert f"- `{old.sha[:12]}`: build variant 3; command variant 6" in body
    assert "Skipped in blocks (commits that fail the same way):\n- 4 commits 2024-06-01" in body


def test_a_job_that_stopped_is_told_from_its_arguments() -> None:
    from bisectbot.github.comment import job_title, render_cancelled, render_failed
    from bisectbot.records.jobargs import BisectArgs, TestArgs

    bisect = BisectArgs(GOOD, BAD, "v1.2", "main", Find.BAD, "auto", "c.yaml")
    assert job_title(bisect) == f"bisecting `{GOOD[:12]}`..`{BAD[:12]}` (v1.2..main)"
    failed = render_failed(bisect, "the good end tested BAD", ctx()).text()
    assert failed.startswith(f"### bisectbot: bisect `{GOOD}`..`{BAD}` stopped without an answer")
    cancelled = render_cancelled(job_title(bisect), "maintainer", ctx()).text()
    assert cancelled.startswith(f"### bisectbot: {job_title(bisect)}\n") and "cancelled by @maintainer" in cancelled
    test = TestArgs(CULPRIT, "main", "c.yaml")
    assert render_failed(test, "git failed", ctx()).text().startswith("### bisectbot: test stopped without an answer")
    assert job_title(test) == f"testing `{CULPRIT[:12]}` (main)"
