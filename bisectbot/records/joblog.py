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
from typing import Sequence, TypedDict

from bisectbot.records.commits import CommitVerdict, distinct_runs
from bisectbot.records.jobargs import BisectArgs, BisectArgsJson, JobArgs, TestArgsJson
from bisectbot.records.reports import BisectReport, CommitReport, JobResult, JobStop
from bisectbot.statistics.outcome import Find, Verdict


class LoggedCommitJson(TypedDict):
    commit: str
    subject: str
    verdict: str
    runs: int
    roles: list[str]
    when: str
    note: str


class LoggedJobJson(TypedDict):
    job: str
    kind: str
    status: str
    title: str
    outcome: str
    args: TestArgsJson | BisectArgsJson
    created: str
    updated: str
    commits: list[LoggedCommitJson]


@dataclass(frozen=True)
class LoggedCommit:
    """One commit of a job: the last verdict it reached (main arm) and what it took."""

    sha: str
    subject: str
    verdict: str
    runs: int
    roles: tuple[str, ...]
    when: float  # Unix time of its last verdict
    note: str = ""  # what the verdict is against when not the reference: "differs from its child"

    def to_json(self) -> LoggedCommitJson:
        return {
            "commit": self.sha,
            "subject": self.subject,
            "verdict": self.verdict,
            "runs": self.runs,
            "roles": list(self.roles),
            "when": _iso(self.when),
            "note": self.note,
        }


@dataclass(frozen=True)
class LoggedJob:
    """One job of the state directory and the commits it tested."""

    id: str
    status: str  # running | done | failed | cancelled
    args: JobArgs  # its kind's
    result: JobResult | None  # how it ended (None while it runs)
    created: float
    updated: float
    commits: tuple[LoggedCommit, ...]

    @property
    def kind(self) -> str:
        return self.args.kind

    @property
    def title(self) -> str:
        """'bisect 1a2b3c4d5e6f..9f8e7d6c5b4a (find bad)' or 'test main (1a2b3c4d5e6f)'."""
        a = self.args
        if isinstance(a, BisectArgs):
            extra = "".join(f" --skip {s[:12]}" for s in a.skip) + "".join(f" --paths {p}" for p in a.paths)
            return f"bisect {a.good[:12]}..{a.bad[:12]} (find {a.find.value}){extra}"
        if a.ref and not a.commit.startswith(a.ref):
            return f"test {a.ref} ({a.commit[:12]})"
        return f"test {a.commit[:12]}"

    @property
    def outcome(self) -> str:
        """'done: found 26ca871ccdfa', 'done: GOOD', 'failed: <why>', 'running'."""
        res = self.result
        if isinstance(res, BisectReport):
            if res.first_bad:
                return f"done: {res.status.value} {res.first_bad[:12]}"
            return f"done: {res.status.value}, {len(res.candidates)} candidates"
        if isinstance(res, CommitReport):
            return f"done: {res.verdict.value.upper()}"
        if isinstance(res, JobStop) and res.message:
            return f"{self.status}: {res.message}"
        return self.status

    def to_json(self) -> LoggedJobJson:
        return {
            "job": self.id,
            "kind": self.kind,
            "status": self.status,
            "title": self.title,
            "outcome": self.outcome,
            "args": self.args.to_json(),
            "created": _iso(self.created),
            "updated": _iso(self.updated),
            "commits": [c.to_json() for c in self.commits],
        }


def logged_job(
    job_id: str,
    status: str,
    args: JobArgs,
    result: JobResult | None,
    created: float,
    updated: float,
    verdicts: Sequence[tuple[CommitVerdict, float]],
) -> LoggedJob:
    """A job and its stored verdicts (with when each was reached) as one log entry."""
    find = args.find if isinstance(args, BisectArgs) else Find.BAD
    by_sha: dict[str, list[tuple[CommitVerdict, float]]] = {}
    for v, when in verdicts:
        if v.arm == "main":
            by_sha.setdefault(v.sha, []).append((v, when))
    commits = []
    for sha, seen in by_sha.items():
        last, when = seen[-1]
        roles = tuple(dict.fromkeys(find.role_label(v.role) for v, _ in seen))
        runs = distinct_runs([v for v, _ in seen])
        commits.append(LoggedCommit(sha, last.subject, last.verdict.value, runs, roles, when, _against(last)))
    return LoggedJob(job_id, status, args, result, created, updated, tuple(commits))


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
            lines.append(_cut(left + (f"({c.note}) " if c.note else "") + c.subject, width))
        if not job.commits:
            lines.append("  (no verdict reached)")
        lines.append("")
    return "\n".join(lines)


def _against(v: CommitVerdict) -> str:
    """A change test's verdict is about the commit beside it, not the reference: a parent's
    CHANGED confirms an answer (it differs from its child), it is no defect of the parent."""
    if v.mode != "change":
        return ""
    other = "its child" if v.role == "confirm-parent" else "its parent"
    said = "differs from" if v.verdict is Verdict.CHANGED else "not shown to differ from"
    return f"{said} {other}"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(1, width - 1)] + "…"


def _local(when: float, fmt: str) -> str:
    return time.strftime(fmt, time.localtime(when))


def _iso(when: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(when))
