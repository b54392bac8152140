"""The bot's own memory in the state database: the commands it claimed, the replies it owes,
the comments that show job results (targets), how far it read each issue (cursors) and the
webhook deliveries it has seen. Only `bot/` reads or writes these tables (their schema is
with the others in `state.migrations`).

A comment target is kept as a record of its kind (`StatusTarget`, `PullTarget`, `AlarmTarget`,
`BisectTarget`): what that comment is rendered from besides its job's row (the job's arguments
and result). The bot renders from these records, never from keys looked up by name."""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from typing import ClassVar, TypedDict, Union

from bisectbot.state.storage import Store, decoded


@dataclass(frozen=True)
class CommandRow:
    comment_id: int
    issue: int
    author: str
    association: str
    body: str
    status: str  # claimed | done | refused | failed | elsewhere (another bot's)
    job: str | None


# -- comment targets: what each kind of result comment needs besides its job's row -------------
# Each is stored as the JSON of its `to_json` in `bot_targets.extra`, the kind beside it (every
# key always there: migration 8 filled in what older bots left out). A target's `config` is the
# config path the bot renders it with ("": the bot's own); the job's arguments keep the one the
# job first ran with. A bisect's refs are in its job's arguments alone.
class StatusJson(TypedDict):
    config: str
    date: str
    alarm: bool


class PullJson(TypedDict):
    config: str
    date: str
    pull: int
    sandbox: str


class AlarmJson(TypedDict):
    config: str
    date: str
    last_good: str | None


class BisectJson(TypedDict):
    config: str


@dataclass(frozen=True)
class StatusTarget:
    """The issue's one status comment, which scheduled checks keep updating."""

    kind: ClassVar[str] = "status"
    config: str
    date: str  # when the check ran, as people read it
    alarm: bool  # BAD: an alarm comment of its own follows

    def to_json(self) -> StatusJson:
        return {"config": self.config, "date": self.date, "alarm": self.alarm}

    @classmethod
    def from_json(cls, data: StatusJson) -> StatusTarget:
        return cls(str(data["config"]), str(data["date"]), bool(data["alarm"]))


@dataclass(frozen=True)
class PullTarget:
    """A pull request's head, checked in the sandbox: a comment per head."""

    kind: ClassVar[str] = "pull"
    config: str
    date: str
    pull: int  # the pull request's number
    sandbox: str  # what the sandbox allowed it, for people

    def to_json(self) -> PullJson:
        return {"config": self.config, "date": self.date, "pull": self.pull, "sandbox": self.sandbox}

    @classmethod
    def from_json(cls, data: PullJson) -> PullTarget:
        return cls(str(data["config"]), str(data["date"]), int(data["pull"]), str(data["sandbox"]))


@dataclass(frozen=True)
class AlarmTarget:
    """The fix no longer holds at a checked commit: a loud comment of its own."""

    kind: ClassVar[str] = "alarm"
    config: str
    date: str
    last_good: str | None  # the last known good commit, bisected from (None: nothing to bisect)

    def to_json(self) -> AlarmJson:
        return {"config": self.config, "date": self.date, "last_good": self.last_good}

    @classmethod
    def from_json(cls, data: AlarmJson) -> AlarmTarget:
        last = data["last_good"]
        return cls(str(data["config"]), str(data["date"]), None if last is None else str(last))


@dataclass(frozen=True)
class BisectTarget:
    """A bisect's job comment: its progress while it runs, then its result."""

    kind: ClassVar[str] = "bisect"
    config: str

    def to_json(self) -> BisectJson:
        return {"config": self.config}

    @classmethod
    def from_json(cls, data: BisectJson) -> BisectTarget:
        return cls(str(data["config"]))


Target = Union[StatusTarget, PullTarget, AlarmTarget, BisectTarget]


def load_target(kind: str, text: str) -> Target:
    """A stored target (its kind and the JSON text of its record); KeyError, ValueError or
    TypeError when it does not decode (a damaged row)."""
    data = json.loads(text)
    if kind == StatusTarget.kind:
        return StatusTarget.from_json(data)
    if kind == PullTarget.kind:
        return PullTarget.from_json(data)
    if kind == AlarmTarget.kind:
        return AlarmTarget.from_json(data)
    if kind == BisectTarget.kind:
        return BisectTarget.from_json(data)
    raise ValueError(f"a comment target of unknown kind {kind!r}")


@dataclass(frozen=True)
class TargetRow:
    """An issue comment that shows a job's result (`marker` is its job marker)."""

    marker: str
    issue: int
    job: str
    target: Target  # what its kind of comment needs besides the job
    comment_id: int | None
    published: bool


@dataclass(frozen=True)
class Cursor:
    comment_id: int
    at: str | None


class BotMemory:
    """The bot's rows, over the state directory's `Store` (its connection and transactions)."""

    def __init__(self, store: Store):
        self.store = store

    def damaged(self, why: str) -> Exception:  # what `decoded` raises for a row that does not decode
        return self.store.damaged(why)

    def claim_command(self, comment_id: int, issue: int, author: str, association: str, body: str) -> bool:
        """Record a command before anything runs; False if it was already claimed (handled)."""
        now = time.time()
        with self.store.write() as db:
            cur = db.execute(
                "INSERT OR IGNORE INTO bot_commands (comment_id, issue, author, association, "
                "body, status, job, created, updated) VALUES (?,?,?,?,?,?,?,?,?)",
                (int(comment_id), int(issue), author or "", association or "", body, "claimed", None, now, now),
            )
            return cur.rowcount == 1

    def command(self, comment_id: int) -> CommandRow | None:
        row = self.store.one(
            "SELECT comment_id, issue, author, association, body, status, job FROM bot_commands WHERE comment_id=?",
            (int(comment_id),),
        )
        return None if row is None else CommandRow(**dict(row))

    def set_command(self, comment_id: int, status: str, job: str | None = None) -> None:
        with self.store.write() as db:
            db.execute(
                "UPDATE bot_commands SET status=?, job=COALESCE(?, job), updated=? WHERE comment_id=?",
                (status, job, time.time(), int(comment_id)),
            )

    def note_command_raised(self, comment_id: int) -> int:
        """Count one more time handling this command raised; return the count."""
        with self.store.write() as db:
            db.execute(
                "UPDATE bot_commands SET raises=raises+1, updated=? WHERE comment_id=?", (time.time(), int(comment_id))
            )
            row = db.execute("SELECT raises FROM bot_commands WHERE comment_id=?", (int(comment_id),)).fetchone()
            return int(row["raises"]) if row is not None else 0

    def command_raises(self, comment_id: int) -> int:
        row = self.store.one("SELECT raises FROM bot_commands WHERE comment_id=?", (int(comment_id),))
        return int(row["raises"]) if row is not None else 0

    def put_reply(self, issue: int, key: str, body: str) -> None:
        """A reply the bot owes (kept until posted; the first body for a key stands)."""
        with self.store.write() as db:
            db.execute(
                "INSERT OR IGNORE INTO bot_replies (issue, key, body, created) VALUES (?,?,?,?)",
                (int(issue), key, body, time.time()),
            )

    def unposted_replies(self) -> list[tuple[int, str, str]]:
        return [
            (r["issue"], r["key"], r["body"])
            for r in self.store.rows(
                "SELECT issue, key, body FROM bot_replies WHERE comment_id IS NULL ORDER BY created"
            )
        ]

    def mark_reply_posted(self, issue: int, key: str, comment_id: int) -> None:
        with self.store.write() as db:
            db.execute(
                "UPDATE bot_replies SET comment_id=? WHERE issue=? AND key=?", (int(comment_id), int(issue), key)
            )

    def bot_instance(self) -> str:
        """This state directory's bot, as its job comments name it (made once, kept)."""
        with self.store.write() as db:
            db.execute("INSERT OR IGNORE INTO bot_meta (key, value) VALUES ('instance', ?)", (secrets.token_hex(4),))
            return str(db.execute("SELECT value FROM bot_meta WHERE key='instance'").fetchone()["value"])

    def claimed_commands(self) -> list[int]:
        """Commands claimed but not finished (a killed bot resumes them), oldest first."""
        return [
            r["comment_id"]
            for r in self.store.rows("SELECT comment_id FROM bot_commands WHERE status='claimed' ORDER BY comment_id")
        ]

    def set_target(self, marker: str, issue: int, job: str, target: Target) -> bool:
        """(Re)point an issue comment at a job result; it is unpublished until posted. True when
        the issue had no such comment target yet (a new job there: its comment starts as queued)."""
        with self.store.write() as db:
            known = db.execute("SELECT 1 FROM bot_targets WHERE marker=? AND issue=?", (marker, int(issue))).fetchone()
            db.execute(
                "INSERT INTO bot_targets (marker, issue, job, kind, extra, published, updated) "
                "VALUES (?,?,?,?,?,0,?) ON CONFLICT(marker, issue) DO UPDATE SET job=excluded.job, "
                "kind=excluded.kind, extra=excluded.extra, published=0, updated=excluded.updated",
                (marker, int(issue), job, target.kind, json.dumps(target.to_json()), time.time()),
            )
        return known is None

    @decoded
    def target(self, marker: str, issue: int) -> TargetRow | None:
        row = self.store.one(
            "SELECT marker, issue, job, kind, extra, comment_id, published FROM bot_targets WHERE marker=? AND issue=?",
            (marker, int(issue)),
        )
        if row is None:
            return None
        return TargetRow(
            marker=row["marker"],
            issue=row["issue"],
            job=row["job"],
            target=load_target(row["kind"], row["extra"]),
            comment_id=row["comment_id"],
            published=bool(row["published"]),
        )

    def mark_target_published(self, marker: str, issue: int, comment_id: int) -> None:
        """The comment shows the final result; the job is published once all its comments are."""
        with self.store.write() as db:
            row = db.execute("SELECT job FROM bot_targets WHERE marker=? AND issue=?", (marker, int(issue))).fetchone()
            db.execute(
                "UPDATE bot_targets SET published=1, comment_id=? WHERE marker=? AND issue=?",
                (int(comment_id), marker, int(issue)),
            )
            if row is not None:
                left = db.execute(
                    "SELECT COUNT(*) FROM bot_targets WHERE job=? AND published=0", (row["job"],)
                ).fetchone()[0]
                if left == 0:
                    db.execute("UPDATE jobs SET published=1 WHERE id=?", (row["job"],))

    def unpublished_targets(self) -> list[tuple[str, int]]:
        """Targets whose job finished (done, failed or cancelled) but whose comment is not final."""
        return [
            (r["marker"], r["issue"])
            for r in self.store.rows(
                "SELECT t.marker, t.issue FROM bot_targets t JOIN jobs j ON j.id = t.job "
                "WHERE t.published=0 AND j.status != 'running' ORDER BY t.updated"
            )
        ]

    def cursor(self, key: str) -> Cursor | None:
        row = self.store.one("SELECT comment_id, at FROM bot_cursors WHERE key=?", (key,))
        return None if row is None else Cursor(row["comment_id"], row["at"])

    def put_cursor(self, key: str, cursor: Cursor) -> None:
        with self.store.write() as db:
            db.execute(
                "INSERT OR REPLACE INTO bot_cursors (key, comment_id, at) VALUES (?,?,?)",
                (key, cursor.comment_id, cursor.at),
            )

    def add_delivery_if_new(self, delivery_id: str) -> bool:
        """Record a webhook delivery id; True if it was not seen before (atomic)."""
        with self.store.write() as db:
            cur = db.execute(
                "INSERT OR IGNORE INTO webhook_deliveries (id, created) VALUES (?,?)", (delivery_id, time.time())
            )
            return cur.rowcount == 1

    def forget_delivery(self, delivery_id: str) -> None:
        with self.store.write() as db:
            db.execute("DELETE FROM webhook_deliveries WHERE id=?", (delivery_id,))
