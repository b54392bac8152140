"""The bot's own memory in the state database: the commands it claimed, the replies it owes,
the comments that show job results (targets), how far it read each issue (cursors) and the
webhook deliveries it has seen. Only `github/` reads or writes these tables (their schema is
with the others in `state.storage`'s migrations)."""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

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


@dataclass(frozen=True)
class TargetRow:
    marker: str
    issue: int
    job: str
    kind: str  # bisect | alarm | status
    extra: dict[str, Any]
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

    def set_target(self, marker: str, issue: int, job: str, kind: str, extra: dict[str, Any] | None = None) -> bool:
        """(Re)point an issue comment at a job result; it is unpublished until posted. True when
        the issue had no such comment target yet (a new job there: its comment starts as queued)."""
        with self.store.write() as db:
            known = db.execute("SELECT 1 FROM bot_targets WHERE marker=? AND issue=?", (marker, int(issue))).fetchone()
            db.execute(
                "INSERT INTO bot_targets (marker, issue, job, kind, extra, published, updated) "
                "VALUES (?,?,?,?,?,0,?) ON CONFLICT(marker, issue) DO UPDATE SET job=excluded.job, "
                "kind=excluded.kind, extra=excluded.extra, published=0, updated=excluded.updated",
                (marker, int(issue), job, kind, json.dumps(extra or {}), time.time()),
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
            kind=row["kind"],
            extra=json.loads(row["extra"]),
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
