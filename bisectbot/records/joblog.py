"""What a state directory has tested (pure): `bisectbot log`, like `git bisect log`.

The jobs table and each job's stored verdicts become one entry per job (a bisect good..bad or a
test) with one row per commit: its verdict, the runs it took and when. A commit asked several
questions in one job (an endpoint, then the model, then a re-test) is one row: the last verdict
it reached, its roles in order, and its runs counted once per seed block (`distinct_runs`).
Plain text fits a given width (80 columns by default); the JSON carries every field.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Sequence

from bisectbot.records.commits import CommitVerdict, distinct_runs
from bisectbot.statistics.outcome import Find


@dataclass(frozen=True)
class LoggedCommit:
    """One commit of a job: the last verdict it reached (main arm) and what it took."""

    sha: str
    subject: str
    verdict: str
    runs: int
    roles: tuple[str, ...]
    when: float  # Unix time of its last verdict

    def to_json(self) -> dict[str, Any]:
        return {
            "commit": self.sha,
            "subject": self.subject,
            "verdict": self.verdict,
            "runs": self.runs,
            "roles": list(self.roles),
            "when": _iso(self.when),
        }


@dataclass(frozen=True)
class LoggedJob:
    """One job of the state directory and the commits it tested."""

    id: str
    kind: str  # bisect | test
    status: str  # running | done | failed | cancelled
    args: dict[str, Any]
    result: dict[str, Any] | None
    created: float
    updated: float
    commits: tuple[LoggedCommit, ...]

    @property
    def title(self) -> str:
        """'bisect 1a2b3c4d5e6f..9f8e7d6c5b4a (find bad)' or 'test main (1a2b3c4d5e6f)'."""
        a = self.args
        if self.kind == "bisect":
            extra = "".join(f" --skip {s[:12]}" for s in a.get("skip", ()))
            extra += "".join(f" --paths {p}" for p in a.get("paths", ()))
            return (
                f"bisect {str(a.get('good', '?'))[:12]}..{str(a.get('bad', '?'))[:12]} "
                f"(find {a.get('find', 'bad')}){extra}"
            )
        commit = str(a.get("commit", "?"))
        ref = a.get("ref")
        return f"test {ref} ({commit[:12]})" if ref and not commit.startswith(str(ref)) else f"test {commit[:12]}"

    @property
    def outcome(self) -> str:
        """'done: found 26ca871ccdfa', 'done: GOOD', 'failed: <why>', 'running'."""
        res = self.result or {}
        if self.status == "done" and self.kind == "bisect":
            named = res.get("first_bad")
            status = res.get("status", "?")
            if named:
                return f"done: {status} {named[:12]}"
            return f"done: {status}, {len(res.get('candidates', []))} candidates"
        if self.status == "done":
            return f"done: {str(res.get('verdict', '?')).upper()}"
        if self.status in ("failed", "cancelled") and res.get("message"):
            return f"{self.status}: {res['message']}"
        return self.status

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.id,
            "kind": self.kind,
            "status": self.status,
            "title": self.title,
            "outcome": self.outcome,
            "args": self.args,
            "created": _iso(self.created),
            "updated": _iso(self.updated),
            "commits": [c.to_json() for c in self.commits],
        }


def logged_job(
    job_id: str,
    kind: str,
    status: str,
    args: dict[str, Any],
    result: dict[str, Any] | None,
    created: float,
    updated: float,
    verdicts: Sequence[tuple[CommitVerdict, float]],
) -> LoggedJob:
    """A job and its stored verdicts (with when each was reached) as one log entry."""
    find = Find(args.get("find", "bad")) if kind == "bisect" else Find.BAD
    by_sha: dict[str, list[tuple[CommitVerdict, float]]] = {}
    for v, when in verdicts:
        if v.arm == "main":
            by_sha.setdefault(v.sha, []).append((v, when))
    commits = []
    for sha, seen in by_sha.items():
        last, when = seen[-1]
        roles = tuple(dict.fromkeys(find.role_label(v.role) for v, _ in seen))
        commits.append(
            LoggedCommit(sha, last.subject, last.verdict.value, distinct_runs([v for v, _ in seen]), roles, when)
        )
    return LoggedJob(job_id, kind, status, dict(args), result, created, updated, tuple(commits))


def log_text(jobs: Sequence[LoggedJob], width: int = 80, where: str = "") -> str:
    """Every job, oldest first: a head line, then one line per commit, none wider than `width`."""
    if not jobs:
        return f"no jobs in the state directory {where} yet\n" if where else "no jobs in this state directory yet\n"
    lines: list[str] = []
    for job in jobs:
        lines.append(_cut(f"{job.title} · {job.outcome}", width))
        lines.append(_cut(f"  {job.id} · started {_local(job.created, '%Y-%m-%d %H:%M')}", width))
        runs_w = max([4, *(len(f"{c.runs:,}") for c in job.commits)])
        for c in job.commits:
            left = f"  {c.sha[:12]}  {c.verdict.upper():<12}  {c.runs:>{runs_w},}  {_local(c.when, '%m-%d %H:%M')}  "
            lines.append(_cut(left + c.subject, width))
        if not job.commits:
            lines.append("  (no verdict reached)")
        lines.append("")
    return "\n".join(lines)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(1, width - 1)] + "…"


def _local(when: float, fmt: str) -> str:
    return time.strftime(fmt, time.localtime(when))


def _iso(when: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(when))
