"""What every issue client promises the bot: the `IssueClient` interface, the `Comment` record,
the hidden markers that make one comment per job, and the fitting of a body to GitHub's limit.

Why a module of its own: the github3.py client (`github.client`) and the dry run
(`github.dryrun`) are two ways to keep the same promise, and the bot needs only the promise.
Both write the same markers and cut bodies the same way, so a dry run shows what would be posted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol, runtime_checkable

from bisectbot.github.comment import BODY_LIMIT, neutral

JOB_MARKER = "<!-- bisectbot:job={} -->"
REPLY_MARKER = "<!-- bisectbot:reply={} -->"
REACTIONS = frozenset({"+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes"})
KEY_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}")  # a job id, an instance name, a reply key


@dataclass(frozen=True)
class Comment:
    """An issue comment as bisectbot needs it (decoupled from github3 objects)."""

    id: int
    issue_number: int
    body: str
    author: str
    author_type: str  # "User" or "Bot"
    author_association: str  # OWNER, MEMBER, COLLABORATOR, CONTRIBUTOR, NONE, ...
    created_at: datetime
    updated_at: datetime
    html_url: str


@runtime_checkable
class IssueClient(Protocol):
    """What the bot needs from GitHub; the real client or the dry run."""

    bot_login: str

    def upsert_job_comment(self, issue: int, job_id: str, body: str, *, budget: float | None = None) -> int:
        """Create the job's comment once, then edit it in place; return its id (within `budget`
        seconds when given: a progress edit tries once, briefly)."""
        ...

    def post_comment(self, issue: int, body: str, key: str) -> int:
        """Post a one-off reply (e.g. a refusal) at most once per ``key``; return its id."""
        ...

    def react(self, comment_id: int, content: str = "eyes") -> None:
        """Add a reaction (acknowledge a command) to a comment."""
        ...

    def claim_job(self, issue: int, job_id: str, instance: str, body: str) -> bool:
        """Create the job's comment as `instance`'s claim; False if another instance has the job."""
        ...

    def comments(self, issue: int, since: int | datetime | str | None = None) -> list[Comment]:
        """Comments newer than ``since`` (a comment id, or an inclusive timestamp), oldest first."""
        ...


def clip(text: str, limit: int = BODY_LIMIT) -> str:
    """Never send GitHub more than it takes. Bodies come fitted (`comment.Document.fit`); a
    longer one is cut at a line end, with a note. No bidirectional control gets through: what
    a comment echoes (refs, config names) reads as it is."""
    text = neutral(text)
    if len(text) <= limit:
        return text
    note = f"\n\n*… {len(text) - limit:,}+ characters cut to fit GitHub's comment limit …*\n"
    keep = limit - len(note)
    line_end = text.rfind("\n", 0, keep)
    return text[: line_end if line_end > keep // 2 else keep] + note
