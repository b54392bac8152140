"""State: one SQLite database under the state directory, the memory that makes runs resumable.

Every finished build and every finished seed is written (and committed) the moment it finishes,
so `kill -9` at any point loses at most the build or runs that were in flight. Verdicts are
derived data (recomputed from the runs) but are stored too, for reports and history.

Builds and runs are inserted, never replaced: doing one twice would be a bug, and the primary
key turns it into an error instead of hiding it.

Runs are keyed by (experiment digest, commit, seed): changing the test levels or the reference
reuses every stored run; changing the command or the parser does not.
"""

from __future__ import annotations

import fcntl
import json
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bisectbot.errors import StateError

SCHEMA = """
CREATE TABLE IF NOT EXISTS builds (
    build_key  TEXT NOT NULL,
    sha        TEXT NOT NULL,
    status     TEXT NOT NULL,          -- ok | failed | timeout | no-binary
    binaries   TEXT NOT NULL,          -- JSON {placeholder: kept path}
    log        TEXT NOT NULL,          -- path of the build log
    seconds    REAL NOT NULL,
    reason     TEXT NOT NULL,
    created    REAL NOT NULL,
    PRIMARY KEY (build_key, sha)
);
CREATE TABLE IF NOT EXISTS runs (
    experiment TEXT NOT NULL,
    sha        TEXT NOT NULL,
    seed       INTEGER NOT NULL,
    status     TEXT NOT NULL,          -- ok | incomplete | crash | timeout | unparsable
    tokens     TEXT,                   -- JSON list of generated tokens (status ok)
    exit_code  INTEGER,
    seconds    REAL NOT NULL,
    attempts   INTEGER NOT NULL,       -- 1 + reruns of an incomplete output
    variant    INTEGER NOT NULL DEFAULT 0,
    detail     TEXT NOT NULL,
    created    REAL NOT NULL,
    PRIMARY KEY (experiment, sha, seed)
);
CREATE TABLE IF NOT EXISTS verdicts (
    job        TEXT NOT NULL,
    sha        TEXT NOT NULL,
    role       TEXT NOT NULL,          -- good-endpoint | bad-endpoint | step | retest-... | check
    verdict    TEXT NOT NULL,
    record     TEXT NOT NULL,          -- JSON of the CommitVerdict
    created    REAL NOT NULL,
    PRIMARY KEY (job, sha, role)
);
CREATE TABLE IF NOT EXISTS jobs (
    id         TEXT PRIMARY KEY,
    kind       TEXT NOT NULL,          -- bisect | test | check
    status     TEXT NOT NULL,          -- running | done | failed
    args       TEXT NOT NULL,          -- JSON
    result     TEXT,                   -- JSON report when done
    published  INTEGER NOT NULL DEFAULT 0,
    created    REAL NOT NULL,
    updated    REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS kv (
    key        TEXT PRIMARY KEY,
    value      TEXT NOT NULL
);
"""


@dataclass(frozen=True)
class BuildRecord:
    sha: str
    status: str
    binaries: dict[str, str]
    log: str
    seconds: float
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class RunRecord:
    seed: int
    status: str
    tokens: tuple[str, ...] | None
    exit_code: int | None
    seconds: float
    attempts: int = 1
    variant: int = 0
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class State:
    """The state directory: database, lock, clone, build dir, kept binaries, logs."""

    def __init__(self, root: Path):
        self.root = Path(root).resolve()  # relative paths would break cmake, which runs elsewhere
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StateError(f"cannot create state directory {self.root}: {exc.strerror}") from None
        self._lock_file = open(self.root / "lock", "w")
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise StateError(
                f"state directory {self.root} is in use by another bisectbot process"
            ) from None
        try:
            self.db = sqlite3.connect(self.root / "state.sqlite3", isolation_level=None)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.executescript(SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise StateError(f"{self.root / 'state.sqlite3'}: {exc}") from None

    # -- layout --------------------------------------------------------------------------------
    @property
    def clone_dir(self) -> Path:
        return self.root / "src"

    def build_dir(self, build_key: str) -> Path:
        return self.root / f"build-{build_key}"

    def kept_dir(self, build_key: str, sha: str) -> Path:
        return self.root / "kept" / build_key / sha

    def log_path(self, name: str) -> Path:
        (self.root / "logs").mkdir(exist_ok=True)
        return self.root / "logs" / name

    def close(self) -> None:
        self.db.close()
        self._lock_file.close()

    def __enter__(self) -> "State":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- builds --------------------------------------------------------------------------------
    def get_build(self, build_key: str, sha: str) -> BuildRecord | None:
        row = self.db.execute(
            "SELECT sha, status, binaries, log, seconds, reason FROM builds WHERE build_key=? AND sha=?",
            (build_key, sha),
        ).fetchone()
        if row is None:
            return None
        return BuildRecord(row[0], row[1], json.loads(row[2]), row[3], row[4], row[5])

    def put_build(self, build_key: str, rec: BuildRecord) -> None:
        self.db.execute(
            "INSERT INTO builds VALUES (?,?,?,?,?,?,?,?)",
            (build_key, rec.sha, rec.status, json.dumps(rec.binaries), rec.log, rec.seconds,
             rec.reason, time.time()),
        )

    # -- runs ----------------------------------------------------------------------------------
    def get_runs(self, experiment: str, sha: str) -> dict[int, RunRecord]:
        rows = self.db.execute(
            "SELECT seed, status, tokens, exit_code, seconds, attempts, variant, detail FROM runs "
            "WHERE experiment=? AND sha=?",
            (experiment, sha),
        )
        return {
            r[0]: RunRecord(r[0], r[1], tuple(json.loads(r[2])) if r[2] is not None else None,
                            r[3], r[4], r[5], r[6], r[7])
            for r in rows
        }

    def put_run(self, experiment: str, sha: str, rec: RunRecord) -> None:
        tokens = json.dumps(list(rec.tokens)) if rec.tokens is not None else None
        self.db.execute(
            "INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (experiment, sha, rec.seed, rec.status, tokens, rec.exit_code, rec.seconds,
             rec.attempts, rec.variant, rec.detail, time.time()),
        )

    # -- verdicts and jobs ---------------------------------------------------------------------
    def put_verdict(self, job: str, sha: str, role: str, verdict: str, record: dict[str, Any]) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO verdicts VALUES (?,?,?,?,?,?)",
            (job, sha, role, verdict, json.dumps(record), time.time()),
        )

    def start_job(self, job: str, kind: str, args: dict[str, Any]) -> None:
        now = time.time()
        self.db.execute(
            "INSERT INTO jobs (id, kind, status, args, created, updated) VALUES (?,?,?,?,?,?) "
            "ON CONFLICT(id) DO UPDATE SET status='running', updated=excluded.updated",
            (job, kind, "running", json.dumps(args), now, now),
        )

    def finish_job(self, job: str, status: str, result: dict[str, Any]) -> None:
        self.db.execute(
            "UPDATE jobs SET status=?, result=?, updated=? WHERE id=?",
            (status, json.dumps(result), time.time(), job),
        )

    def get_job(self, job: str) -> dict[str, Any] | None:
        row = self.db.execute(
            "SELECT id, kind, status, args, result, published, created, updated FROM jobs WHERE id=?",
            (job,),
        ).fetchone()
        if row is None:
            return None
        keys = ("id", "kind", "status", "args", "result", "published", "created", "updated")
        out = dict(zip(keys, row))
        out["args"] = json.loads(out["args"])
        out["result"] = json.loads(out["result"]) if out["result"] else None
        return out

    def get_kv(self, key: str, default: str | None = None) -> str | None:
        row = self.db.execute("SELECT value FROM kv WHERE key=?", (key,)).fetchone()
        return row[0] if row else default

    def put_kv(self, key: str, value: str) -> None:
        self.db.execute("INSERT OR REPLACE INTO kv VALUES (?,?)", (key, value))


# -- the GitHub bot's memory ---------------------------------------------------------------------
BOT_SCHEMA = """
CREATE TABLE IF NOT EXISTS bot_commands (
    comment_id  INTEGER PRIMARY KEY,   -- the GitHub comment that holds the command
    issue       INTEGER NOT NULL,
    author      TEXT NOT NULL,
    association TEXT NOT NULL,
    body        TEXT NOT NULL,
    status      TEXT NOT NULL,         -- claimed | done | refused | failed | cancelled
    job         TEXT,
    created     REAL NOT NULL,
    updated     REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS bot_targets (
    marker      TEXT NOT NULL,         -- the comment's job marker (a job id, or check-status)
    issue       INTEGER NOT NULL,
    job         TEXT NOT NULL,         -- the jobs-table row whose result it shows
    kind        TEXT NOT NULL,         -- bisect | alarm | status
    extra       TEXT NOT NULL,         -- JSON the renderer needs besides the job result
    comment_id  INTEGER,
    published   INTEGER NOT NULL DEFAULT 0,
    updated     REAL NOT NULL,
    PRIMARY KEY (marker, issue)
);
CREATE TABLE IF NOT EXISTS webhook_deliveries (
    id          TEXT PRIMARY KEY,
    created     REAL NOT NULL
);
"""


class BotStore:
    """Claims, comment targets, poll cursors and webhook delivery ids, in the state database.

    Its own connection (usable from any thread, serialised by a lock): the webhook server's
    HTTP threads record deliveries and claims while the worker thread holds the `State`.
    Implements `webhook.DeliveryStore`.
    """

    def __init__(self, root: Path):
        import threading

        self._lock = threading.Lock()
        try:
            self.db = sqlite3.connect(Path(root) / "state.sqlite3", isolation_level=None,
                                      check_same_thread=False, timeout=30)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.executescript(SCHEMA + BOT_SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise StateError(f"{Path(root) / 'state.sqlite3'}: {exc}") from None

    def close(self) -> None:
        self.db.close()

    def _q(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self.db.execute(sql, args).fetchall()

    # -- webhook deliveries (DeliveryStore) ----------------------------------------------------
    def add_if_new(self, delivery_id: str) -> bool:
        with self._lock:
            cur = self.db.execute("INSERT OR IGNORE INTO webhook_deliveries VALUES (?,?)",
                                  (delivery_id, time.time()))
            return cur.rowcount == 1

    def forget(self, delivery_id: str) -> None:
        self._q("DELETE FROM webhook_deliveries WHERE id=?", (delivery_id,))

    # -- commands ------------------------------------------------------------------------------
    def claim_command(self, comment_id: int, issue: int, author: str, association: str, body: str) -> bool:
        """Record a command before anything runs; False if it was already claimed (handled)."""
        now = time.time()
        with self._lock:
            cur = self.db.execute(
                "INSERT OR IGNORE INTO bot_commands VALUES (?,?,?,?,?,?,?,?,?)",
                (int(comment_id), int(issue), author or "", association or "", body, "claimed", None, now, now))
            return cur.rowcount == 1

    def get_command(self, comment_id: int) -> dict[str, Any] | None:
        rows = self._q("SELECT comment_id, issue, author, association, body, status, job FROM bot_commands "
                       "WHERE comment_id=?", (int(comment_id),))
        keys = ("comment_id", "issue", "author", "association", "body", "status", "job")
        return dict(zip(keys, rows[0])) if rows else None

    def set_command(self, comment_id: int, status: str, job: str | None = None) -> None:
        self._q("UPDATE bot_commands SET status=?, job=COALESCE(?, job), updated=? WHERE comment_id=?",
                (status, job, time.time(), int(comment_id)))

    def claimed_commands(self) -> list[int]:
        """Commands claimed but not finished (a killed bot resumes them), oldest first."""
        return [r[0] for r in self._q("SELECT comment_id FROM bot_commands WHERE status='claimed' "
                                      "ORDER BY comment_id")]

    # -- comment targets -----------------------------------------------------------------------
    def set_target(self, marker: str, issue: int, job: str, kind: str, extra: dict[str, Any] | None = None) -> None:
        """(Re)point an issue comment at a job result; it is unpublished until posted."""
        self._q("INSERT INTO bot_targets (marker, issue, job, kind, extra, published, updated) "
                "VALUES (?,?,?,?,?,0,?) ON CONFLICT(marker, issue) DO UPDATE SET job=excluded.job, "
                "kind=excluded.kind, extra=excluded.extra, published=0, updated=excluded.updated",
                (marker, int(issue), job, kind, json.dumps(extra or {}), time.time()))

    def get_target(self, marker: str, issue: int) -> dict[str, Any] | None:
        rows = self._q("SELECT marker, issue, job, kind, extra, comment_id, published FROM bot_targets "
                       "WHERE marker=? AND issue=?", (marker, int(issue)))
        if not rows:
            return None
        keys = ("marker", "issue", "job", "kind", "extra", "comment_id", "published")
        out = dict(zip(keys, rows[0]))
        out["extra"] = json.loads(out["extra"])
        return out

    def mark_target_published(self, marker: str, issue: int, comment_id: int) -> None:
        """The comment shows the final result; the job is published once all its comments are."""
        with self._lock:
            row = self.db.execute("SELECT job FROM bot_targets WHERE marker=? AND issue=?",
                                  (marker, int(issue))).fetchone()
            self.db.execute("UPDATE bot_targets SET published=1, comment_id=? WHERE marker=? AND issue=?",
                            (int(comment_id), marker, int(issue)))
            if row is not None:
                left = self.db.execute("SELECT COUNT(*) FROM bot_targets WHERE job=? AND published=0",
                                       (row[0],)).fetchone()[0]
                if left == 0:
                    self.db.execute("UPDATE jobs SET published=1 WHERE id=?", (row[0],))

    def unpublished_targets(self) -> list[tuple[str, int]]:
        """Targets whose job finished (done, failed or cancelled) but whose comment is not final."""
        return [(r[0], r[1]) for r in self._q(
            "SELECT t.marker, t.issue FROM bot_targets t JOIN jobs j ON j.id = t.job "
            "WHERE t.published=0 AND j.status != 'running' ORDER BY t.updated")]

    # -- cursors -------------------------------------------------------------------------------
    def get_cursor(self, key: str) -> dict[str, Any] | None:
        rows = self._q("SELECT value FROM kv WHERE key=?", (f"cursor:{key}",))
        return json.loads(rows[0][0]) if rows else None

    def put_cursor(self, key: str, value: dict[str, Any]) -> None:
        self._q("INSERT OR REPLACE INTO kv VALUES (?,?)", (f"cursor:{key}", json.dumps(value)))
