"""The state database's schema, version by version (sqlite-utils' migrations are the model):
MIGRATIONS[v] takes a database at version v to v + 1, each run in its own transaction by
`storage.Store` after a copy of the old file is kept. Add a version at the end; never edit one
that shipped (states written by it exist)."""

from __future__ import annotations

import json
import sqlite3
from typing import Callable

SCHEMA_VERSION = 8
# Tables every schema version has: a database without them is not a bisectbot database.
CORE_TABLES = frozenset({"builds", "runs", "verdicts", "jobs"})

# Version 1: the tables of bisectbot b6ae5a0, the last schema without a version number.
_V1 = """
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
    role       TEXT NOT NULL,          -- good-endpoint | bad-endpoint | step | retest-… | test (@arm)
    verdict    TEXT NOT NULL,
    record     TEXT NOT NULL,          -- JSON of the CommitVerdict
    created    REAL NOT NULL,
    PRIMARY KEY (job, sha, role)
);
CREATE TABLE IF NOT EXISTS jobs (
    id         TEXT PRIMARY KEY,
    kind       TEXT NOT NULL,          -- bisect | test
    status     TEXT NOT NULL,          -- running | done | failed | cancelled
    args       TEXT NOT NULL,          -- JSON
    result     TEXT,                   -- JSON report when done, {status, message, by} otherwise
    published  INTEGER NOT NULL DEFAULT 0,
    created    REAL NOT NULL,
    updated    REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS kv (
    key        TEXT PRIMARY KEY,
    value      TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS bot_commands (
    comment_id  INTEGER PRIMARY KEY,   -- the GitHub comment that holds the command
    issue       INTEGER NOT NULL,
    author      TEXT NOT NULL,
    association TEXT NOT NULL,
    body        TEXT NOT NULL,
    status      TEXT NOT NULL,         -- claimed | done | refused | failed
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

# Version 2: what lived under prefixed keys in `kv` gets tables of its own.
_V2 = """
CREATE TABLE variants (
    build_key   TEXT NOT NULL,
    experiment  TEXT NOT NULL,
    sha         TEXT NOT NULL,
    variant     INTEGER,               -- index into run.variants; NULL when none fits
    why         TEXT NOT NULL,
    PRIMARY KEY (build_key, experiment, sha)
);
CREATE TABLE reference_cache (
    key         TEXT PRIMARY KEY,      -- hash of method, model, prompt, sampling, commit
    value       TEXT NOT NULL          -- JSON of the resolved reference
);
CREATE TABLE bot_cursors (
    key         TEXT PRIMARY KEY,      -- owner/name#issue
    comment_id  INTEGER NOT NULL,      -- the newest comment handled
    at          TEXT                   -- its time, as GitHub's `since` wants it
);
CREATE TABLE last_good (
    config      TEXT PRIMARY KEY,      -- config name
    sha         TEXT NOT NULL,
    ref         TEXT NOT NULL,
    date        TEXT NOT NULL
);
"""


def _execute_each(db: sqlite3.Connection, script: str) -> None:
    """Run a script statement by statement (executescript would COMMIT the migration's transaction)."""
    for statement in script.split(";\n"):
        if statement.strip():
            db.execute(statement)


def _to_v1(db: sqlite3.Connection) -> None:
    _execute_each(db, _V1)


def _to_v2(db: sqlite3.Connection) -> None:
    _execute_each(db, _V2)
    moved = []
    for row in db.execute("SELECT key, value FROM kv").fetchall():
        key, value = row["key"], json.loads(row["value"])
        kind, _, rest = key.partition(":")
        if kind == "variant":
            build_key, experiment, sha = rest.split(":", 2)
            db.execute(
                "INSERT INTO variants (build_key, experiment, sha, variant, why) VALUES (?,?,?,?,?)",
                (build_key, experiment, sha, value[0], value[1]),
            )
        elif kind == "reference":
            db.execute("INSERT INTO reference_cache (key, value) VALUES (?,?)", (rest, row["value"]))
        elif kind == "cursor":
            db.execute(
                "INSERT INTO bot_cursors (key, comment_id, at) VALUES (?,?,?)",
                (rest, int(value["id"]), value.get("at")),
            )
        elif kind == "check" and rest.startswith("last-good:"):
            db.execute(
                "INSERT INTO last_good (config, sha, ref, date) VALUES (?,?,?,?)",
                (rest.removeprefix("last-good:"), value["sha"], value["ref"], value["date"]),
            )
        else:
            continue  # not ours to interpret: it stays in kv
        moved.append(key)
    db.executemany("DELETE FROM kv WHERE key=?", [(k,) for k in moved])
    if db.execute("SELECT COUNT(*) FROM kv").fetchone()[0] == 0:
        db.execute("DROP TABLE kv")


# Version 3: a build records the variant it used and notes (a clean-directory retry); runs are
# keyed by a run key that hashes everything that determines them (the binary's content, the
# argv, the files it names, env, parsing) instead of the config digest, so runs stored before
# are kept but never reused (what they ran was not recorded); a command variant is chosen per
# binary content and remembers variants that failed at run time.
_V3 = """
ALTER TABLE builds ADD COLUMN variant INTEGER NOT NULL DEFAULT 0;
ALTER TABLE builds ADD COLUMN notes TEXT NOT NULL DEFAULT '';
ALTER TABLE runs RENAME COLUMN experiment TO run_key;
DROP TABLE variants;
CREATE TABLE variants (
    binary      TEXT NOT NULL,         -- sha256 of the binary whose --help chose it
    spec        TEXT NOT NULL,         -- digest of the command variants it chose among
    variant     INTEGER,               -- the index chosen; NULL when none fits
    why         TEXT NOT NULL,
    failed      TEXT NOT NULL DEFAULT '[]',  -- JSON [[index, why], ...] that failed at run time
    PRIMARY KEY (binary, spec)
);
"""


def _to_v3(db: sqlite3.Connection) -> None:
    _execute_each(db, _V3)


# Version 4: a build records the repository files its targets were compiled from (NULL: not
# known, e.g. built before this version: then no commit is skipped as unable to change the
# binary), and the host and compiler that made it (a cluster's builds are not mixed).
_V4 = """
ALTER TABLE builds ADD COLUMN inputs TEXT;
ALTER TABLE builds ADD COLUMN host TEXT NOT NULL DEFAULT '';
ALTER TABLE builds ADD COLUMN compiler TEXT NOT NULL DEFAULT '';
"""


def _to_v4(db: sqlite3.Connection) -> None:
    _execute_each(db, _V4)


# Version 5: the bot counts how often handling a command raised (twice: failed, not resumed a
# third time), and keeps the replies it owes until GitHub took them (an outage loses none).
_V5 = """
ALTER TABLE bot_commands ADD COLUMN raises INTEGER NOT NULL DEFAULT 0;
CREATE TABLE bot_replies (
    issue       INTEGER NOT NULL,
    key         TEXT NOT NULL,         -- the reply marker's key (the command comment's id)
    body        TEXT NOT NULL,
    comment_id  INTEGER,               -- set once posted
    created     REAL NOT NULL,
    PRIMARY KEY (issue, key)
);
CREATE TABLE bot_meta (
    key         TEXT PRIMARY KEY,      -- instance: this state directory's bot, in its job comments
    value       TEXT NOT NULL
);
"""


def _to_v5(db: sqlite3.Connection) -> None:
    _execute_each(db, _V5)


# Version 6: each build's binaries' sha256 (checked before a kept binary is reused), and when a
# trusted build last wrote each build directory (a file newer than that: the directory is wiped).
_V6 = """
ALTER TABLE builds ADD COLUMN hashes TEXT;
CREATE TABLE build_dirs (
    path        TEXT PRIMARY KEY,
    written     REAL NOT NULL          -- when the last trusted build in it ended (time.time())
);
"""


def _to_v6(db: sqlite3.Connection) -> None:
    _execute_each(db, _V6)


# Version 7: the files the run command names, as first seen, and whether a run wrote them
# (a log file is not an input of the runs' key: issue 25).
_V7 = """
CREATE TABLE run_files (
    path        TEXT PRIMARY KEY,
    first       TEXT,                  -- sha256 when first seen; NULL: it did not exist
    output      INTEGER NOT NULL DEFAULT 0   -- 1: a run was seen writing it
);
"""


def _to_v7(db: sqlite3.Connection) -> None:
    _execute_each(db, _V7)


# Version 8: a comment target's `extra` holds what its kind of comment needs, every key of it
# (bot.memory's records): a bisect's refs and title are no longer kept there (its job's
# arguments keep the refs), and a key an older bot left out gets the value its renderer fell
# back on. No table changes; a row already in that form is left as it is.
_V8_TARGETS: dict[str, tuple[tuple[str, object], ...]] = {
    "status": (("config", ""), ("date", ""), ("alarm", False)),
    "pull": (("config", ""), ("date", ""), ("pull", 0), ("sandbox", "no network")),
    "alarm": (("config", ""), ("date", ""), ("last_good", None)),
    "bisect": (("config", ""),),
}


def _to_v8(db: sqlite3.Connection) -> None:
    for row in db.execute("SELECT marker, issue, kind, extra FROM bot_targets").fetchall():
        keys = _V8_TARGETS.get(row["kind"])
        old = json.loads(row["extra"])
        if keys is None or not isinstance(old, dict):
            continue  # not a kind any bot wrote: reading it says the row is damaged
        new = {key: old.get(key) or fallback for key, fallback in keys}
        if new != old:
            db.execute(
                "UPDATE bot_targets SET extra=? WHERE marker=? AND issue=?",
                (json.dumps(new), row["marker"], row["issue"]),
            )


# MIGRATIONS[v] takes a database at version v to v + 1.
MIGRATIONS: tuple[Callable[[sqlite3.Connection], None], ...] = (
    _to_v1,
    _to_v2,
    _to_v3,
    _to_v4,
    _to_v5,
    _to_v6,
    _to_v7,
    _to_v8,
)
assert len(MIGRATIONS) == SCHEMA_VERSION
