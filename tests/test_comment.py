"""Result-comment rendering (pure): links, table, chart, reproduction footer, size limit."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import Any

import pytest

from bisectbot import __version__
from bisectbot.github.bot import CommentProgress, JobCancelled
from bisectbot.github.comment import (CommentContext, commit_ref, fixture_hashes, render_alarm,
                               render_bisect, render_progress, render_status)
from bisectbot.pipeline.progress import Progress
from bisectbot.github.client import BODY_LIMIT, fit_body

CULPRIT = "60488cfca65a3397efe863d5a17de27690693113"
PARENT = "2d5528afbae2786560f2830e76f49dbba90ef99b"
GOOD = "eb9e4f74679b1d6ff1ef8b47ef1a6ff05bc711f0"
BAD = "bbf3fb5a170220952c75da96fceb76a89ba18c13"
REFERENCE = {
    "probs": {"a": 0.1, "b": 0.2, "c": 0.05, "d": 0.3, "e": 0.25, "f": 0.1},
    "condition_prob": 0.4,
    "categories": ["a", "b", "c", "d", "e", "f", "<other>", "<missed>"],
    "category_probs": [0.04, 0.08, 0.02, 0.12, 0.1, 0.04, 0.0, 0.6],
    "condition": {"position": 0, "token": "c"},
    "outcome": {"position": 1},
}


def verdict(sha: str, role: str, v: str, counts: dict[str, int], subject: str = "x (#1)",
            seeds: tuple[int, int] | None = (1, 13)) -> dict[str, Any]:
    return {"commit": sha, "sha": sha, "subject": subject, "role": role, "verdict": v,
            "runs": sum(counts.values()), "counts": counts, "failures": {}, "retried": 0,
            "log_e_bad": 9.0 if v == "bad" else -8.0, "log_e_good": -8.0 if v == "bad" else 8.0,
            "reason": "decided", "mode": "reference", "alpha": 5e-4, "beta": 5e-4,
            "seeds": list(seeds) if seeds else None, "build": "ok", "build_seconds": 1.0}


def bisect_report(n_extra: int = 0) -> dict[str, Any]:
    bad_counts = {"a": 0, "b": 8, "c": 0, "d": 3, "e": 0, "f": 1, "<other>": 0, "<missed>": 1}
    good_counts = {"a": 56, "b": 118, "c": 25, "d": 177, "e": 141, "f": 64, "<other>": 0, "<missed>": 810}
    verdicts = [
        verdict(BAD, "bad-endpoint", "bad", bad_counts, "docs: note output format (#1045)"),
        verdict(GOOD, "good-endpoint", "good", good_counts, "specdemo: demo (#1003)", (1, 1391)),
        *[verdict(PARENT, "step", "good", good_counts, "pipes | in subject") for _ in range(n_extra)],
        verdict(CULPRIT, "retest-culprit", "bad", bad_counts, "speculative: take top draft candidate (#1032)",
                (6001, 6022)),
        verdict(PARENT, "retest-parent", "good", good_counts, "build: bump version to 0.1.2 (#1028)",
                (6001, 6006)),
    ]
    return {
        "schema_version": 1, "kind": "bisect", "job": "bisect-0123456789ab", "status": "found",
        "find": "bad", "first_bad": CULPRIT,
        "first_bad_subject": "speculative: take top draft candidate (#1032)", "last_good": PARENT,
        "candidates": [CULPRIT], "good": GOOD, "bad": BAD, "good_ref": GOOD, "bad_ref": "main",
        "commits": 12, "builds": 6, "builds_bound": 7, "runs": 1460, "runs_executed": 1460,
        "retried": 0, "confidence": 0.996, "step_alpha": 5e-4, "message": "first bad commit is x",
        "verdicts": verdicts, "reference": REFERENCE,
        "config": {"name": "specdemo", "digest": "ad81a2d7a2ee4f1a", "path": "c.yaml", "experiment": "e"},
        "environment": {"compiler": "c++ (Debian 12.2.0) 12.2.0", "cmake": "cmake version 3.25.1",
                        "cmake_args": ["-DCMAKE_BUILD_TYPE=Release"], "host": "h", "platform": "p",
                        "python": "3.11", "bisectbot": __version__},
        "reproduce": f"bisectbot bisect c.yaml --good {GOOD} --bad {BAD}",
    }


def ctx(fixtures: dict[str, str] | None = None) -> CommentContext:
    return CommentContext(repo="ggml-org/llama.cpp", html_url="https://github.com",
                          fixtures=fixtures or {}, first_seed=1, max_runs=6000)


def test_culprit_is_linked_with_subject_and_pr() -> None:
    body = render_bisect(bisect_report(), ctx())
    first = body.splitlines()[0]
    assert f"[`{CULPRIT[:12]}`](https://github.com/ggml-org/llama.cpp/commit/{CULPRIT})" in first
    assert "speculative: take top draft candidate" in first
    assert "([#1032](https://github.com/ggml-org/llama.cpp/pull/1032))" in first
    assert f"commit/{PARENT}" in body  # the last good commit is linked too


def test_subject_without_pr_number_has_no_pr_link() -> None:
    out = commit_ref(CULPRIT, "plain subject", ctx())
    assert out.endswith(" plain subject") and "/pull/" not in out


def test_table_chart_and_reproduction_footer(tmp_path: Path) -> None:
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "draft.gguf").write_bytes(b"draft weights")
    hashes = fixture_hashes(tmp_path)
    assert hashes == {"models/draft.gguf": hashlib.sha256(b"draft weights").hexdigest()}
    body = render_bisect(bisect_report(), ctx(hashes))
    # the verdict table is always there, outside any <details> (the chart's fallback)
    table_at = body.index("| commit | subject | role | verdict | runs | observed (vs reference) | evidence |")
    assert "<details>" not in body[:table_at]
    assert "**BAD**" in body and "b 8 (0.67 vs 0.20)" in body
    # mermaid chart inside <details>: reference bars, observed lines, categories quoted
    chart = body[body.index("```mermaid"):]
    assert body.rindex("<details>", 0, body.index("```mermaid")) > table_at
    assert "xychart-beta" in chart and 'x-axis ["a", "b", "c", "d", "e", "f", "<other>"]' in chart
    assert "bar [0.1, 0.2, 0.05, 0.3, 0.25, 0.1, 0.0]" in chart
    assert "line [0.0, 0.6667, 0.0, 0.25, 0.0, 0.0833, 0.0]" in chart  # the bad side
    assert f"good side `{PARENT[:12]}` (n=581)" in body  # more runs than the good endpoint? a tie: first wins
    # footer: repo, range, digest, cmake args, compiler, fixture hash, seeds, version
    footer = body[body.index("<summary>Reproduce</summary>"):]
    for needle in ("ggml-org/llama.cpp", f"`{GOOD[:12]}`", "ad81a2d7a2ee4f1a", "-DCMAKE_BUILD_TYPE=Release",
                   "c++ (Debian 12.2.0) 12.2.0", hashes["models/draft.gguf"], "seeds 6001–6022",
                   "at most 6000 runs", f"bisectbot {__version__}", "bisectbot bisect c.yaml"):
        assert needle in footer, needle


def test_huge_report_fits_github_limit_and_keeps_the_head() -> None:
    body = render_bisect(bisect_report(n_extra=700), ctx())
    assert len(body) > BODY_LIMIT
    fitted = fit_body(body)
    assert len(fitted) <= BODY_LIMIT
    assert fitted.splitlines()[0] == body.splitlines()[0]


def test_status_and_alarm_comments() -> None:
    result = {"commit": BAD, "ref": "master", "verdict": "good", "runs": 1391,
              "counts": bisect_report()["verdicts"][1]["counts"], "reference": REFERENCE,
              "detail": verdict(BAD, "test", "good", {"a": 1}), "config": {"name": "s", "digest": "d"},
              "environment": {"cmake_args": []}, "reproduce": f"bisectbot test c.yaml --commit {BAD}"}
    ok = render_status(result, ctx(), date="2025-01-02 04:17 UTC")
    assert ok.startswith(f"### bisectbot: ✅ still fixed at [`{BAD[:12]}`]") and "2025-01-02 04:17 UTC" in ok
    alarm = render_alarm(dict(result, verdict="bad"), ctx(), last_good=GOOD, date="d")
    assert "no longer holds" in alarm and f"commit/{GOOD}" in alarm
    none = render_alarm(dict(result, verdict="bad"), ctx(), last_good=None, date="d")
    assert "/bisect good=<ref> bad=" + BAD[:12] in none


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_progress_updates_the_comment_at_most_every_interval() -> None:
    bodies: list[str] = []
    clock = FakeClock()
    cancel: list[str] = []
    p = CommentProgress(Progress(io.StringIO(), quiet=True), "bisecting a..b", ctx(), bodies.append,
                        interval=30, cancelled=lambda: cancel[0] if cancel else None, clock=clock)
    p.step("bisecting 12 commits aaaa..bbbb (find first bad; per-step error ≤ 5e-4)")
    assert len(bodies) == 1
    p.step("[endpoint] testing bad main = bbf3fb5a1702")
    p.step("  building bbf3fb5a1702 …")
    assert len(bodies) == 1  # throttled
    clock.t = 31
    p.step("[step 2/~4] 60488cfca65a (position 8 of 11)")
    assert len(bodies) == 2
    assert "commit 2 of ~6: bisect step 2 of ~4, `60488cfca65a`" in bodies[-1]
    assert bodies[-1] == render_progress("bisecting a..b", p.phase(), p.lines, ctx())
    cancel.append("maintainer")
    with pytest.raises(JobCancelled) as exc:
        p.step("  built 60488cfca65a in 1.0 s")
    assert exc.value.who == "maintainer"
