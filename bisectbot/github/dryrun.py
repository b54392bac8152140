"""The dry run: an issue client that posts nothing and writes what it would post.

Why: a config without GitHub credentials still runs the whole bot (commands, jobs, comment
bodies) so it can be tried locally or in CI; `github.client.make_client` picks it then, and
says so. It keeps the same promise as the real client (`github.issueclient`): one comment per
job, a reply at most once per key, the same markers and the same cut to GitHub's limit.
"""

from __future__ import annotations

import itertools
import sys
import threading
from datetime import datetime
from pathlib import Path
from typing import TextIO

from bisectbot.github.issueclient import JOB_MARKER, KEY_RE, REACTIONS, REPLY_MARKER, Comment, clip


class DryRunClient:
    """Same interface, posts nothing: writes what would be posted (no credentials needed)."""

    def __init__(self, out: TextIO | str | Path | None = None, repo: str = "owner/repo") -> None:
        self.repo = repo
        self._path = Path(out) if isinstance(out, (str, Path)) else None
        self._stream = out if out is not None and not isinstance(out, (str, Path)) else None
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._keys: dict[tuple[int, str], int] = {}
        self.bot_login = "bisectbot-dry-run"

    def _write(self, text: str) -> None:
        with self._lock:
            if self._path is not None:
                with self._path.open("a", encoding="utf-8") as f:
                    f.write(text)
            else:
                stream = self._stream or sys.stdout
                stream.write(text)
                stream.flush()

    def _id_for(self, issue: int, key: str) -> tuple[int, bool]:
        with self._lock:
            k = (int(issue), key)
            if k in self._keys:
                return self._keys[k], False
            self._keys[k] = next(self._ids)
            return self._keys[k], True

    def upsert_job_comment(self, issue: int, job_id: str, body: str, *, budget: float | None = None) -> int:
        if not KEY_RE.fullmatch(job_id):
            raise ValueError(f"job id {job_id!r} must match {KEY_RE.pattern}")
        cid, new = self._id_for(issue, "job=" + job_id)
        verb = "create" if new else "edit"
        full = clip(f"{JOB_MARKER.format(job_id)}\n{body}")
        self._write(
            f"--- dry run: would {verb} comment {cid} on {self.repo}#{issue} (job {job_id}) ---\n{full}\n--- end ---\n"
        )
        return cid

    def claim_job(self, issue: int, job_id: str, instance: str, body: str) -> bool:
        self.upsert_job_comment(issue, job_id, body)
        return True  # a dry run is alone

    def post_comment(self, issue: int, body: str, key: str) -> int:
        cid, new = self._id_for(issue, "reply=" + key)
        if new:
            full = clip(f"{REPLY_MARKER.format(key)}\n{body}")
            self._write(f"--- dry run: would post comment {cid} on {self.repo}#{issue} ---\n{full}\n--- end ---\n")
        return cid

    def react(self, comment_id: int, content: str = "eyes") -> None:
        if content not in REACTIONS:
            raise ValueError(f"unknown reaction {content!r}")
        self._write(f"--- dry run: would react {content} to comment {comment_id} ---\n")

    def comments(self, issue: int, since: int | datetime | str | None = None) -> list[Comment]:
        return []  # nothing to read without credentials
