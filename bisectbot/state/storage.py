"""Storage: the state directory's SQLite database, the memory that makes work resumable.

Nothing else in bisectbot writes SQL but the bot's own rows (`bot.memory`); the schema
and its migrations are in `state.migrations`, the checks a database file must pass before it
is opened in `state.storage_file`, and the directory around it (its lock and layout) in
`state.statedir`. Why it looks like this:

* **Written the moment it finishes.** Every build and every seed is committed as soon as it is
  done, so `kill -9` loses at most what was in flight. Builds and runs are inserted, never
  replaced: doing one twice would be a bug, and the primary key turns it into an error.
* **A versioned schema.** `PRAGMA user_version` says which migrations a database has had; on
  open, the missing ones run in order, each in its own transaction, after a copy of the old
  file is kept beside it (`state.sqlite3.v<N>.bak`). A database written by a newer bisectbot is
  refused, never misread. Version 1 is the schema before versions existed (bisectbot b6ae5a0).
* **Named columns and typed rows.** Queries name their columns; rows come back as dataclasses.
* **Refused when it is not ours or damaged.** On open the file is checked (`storage_file`): a
  file that is not ours, or is damaged, is a StateError naming the file and why
  (`--reset-state` moves it aside as `state.sqlite3.bak-<time>` and starts afresh). Every
  SQLite failure later (damage, a full disk, a read-only file) is a one-line StateError.
* **Usable from the bot's threads.** Each thread gets its own connection (WAL mode, a busy
  timeout), so the webhook server's HTTP threads record deliveries while a job writes runs.

Runs are keyed by (run key, commit, seed); the run key hashes everything that determines a run
(the binary's content, the argv, the files it names, env, parsing), so a changed fixture or
binary never replays a stale run, while changing the test levels or the reference reuses them.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sqlite3
import threading
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, TypeVar, cast

from bisectbot.core.estimate import Timings
from bisectbot.errors import StateError
from bisectbot.records.commits import BuildRecord, CommitVerdict, RunRecord
from bisectbot.records.jobargs import JobArgs, load_args
from bisectbot.records.reports import JobResult, JobStop, load_result
from bisectbot.state import storage_file
from bisectbot.state.migrations import MIGRATIONS, SCHEMA_VERSION

log = logging.getLogger(__name__)


# -- rows ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class JobRow:
    id: str
    kind: str  # bisect | test: the kind of its args
    status: str  # running | done | failed | cancelled
    args: JobArgs
    result: JobResult | None  # how it ended (None while it runs)
    published: bool


@dataclass(frozen=True)
class LastGood:
    sha: str
    ref: str
    date: str


@dataclass(frozen=True)
class RunFile:
    """A file the run command names: its sha256 when first seen (None: it did not exist), and
    whether a run was seen writing it (then it is not an input of the runs' key)."""

    first: str | None
    output: bool


@dataclass(frozen=True)
class VariantChoice:
    """Which command variant a binary runs with, why, and the variants that failed at run time."""

    index: int | None
    why: str
    failed: tuple[tuple[int, str], ...] = ()


@dataclass(frozen=True)
class Stored:
    """What the database holds before a job starts, for the `state:` line: every run and build,
    and those at the job's commits that it can replay (runs under any run key; builds under the
    job's build key, `builds_here` being their commits)."""

    runs: int
    builds: int
    runs_here: int
    builds_here: frozenset[str]


def _job_row(row: Any) -> JobRow:
    """A `jobs` row (id, kind, status, args, result, published) as a JobRow. A job that runs
    again keeps its last end's result in the row until it ends anew: not read as its end."""
    kind, status = row["kind"], row["status"]
    ended = status != "running" and row["result"]
    return JobRow(
        id=row["id"],
        kind=kind,
        status=status,
        args=load_args(kind, row["args"]),
        result=load_result(kind, status, json.loads(row["result"])) if ended else None,
        published=bool(row["published"]),
    )


# -- the database --------------------------------------------------------------------------------
_Read = TypeVar("_Read", bound=Callable[..., Any])


def decoded(method: _Read) -> _Read:
    """A read whose stored text or JSON does not decode is a damaged database, not a crash."""

    @functools.wraps(method)
    def read(self: Any, *args: Any, **kwargs: Any) -> Any:  # a Store, or a store of rows over one
        try:
            return method(self, *args, **kwargs)
        except (ValueError, TypeError, KeyError) as exc:  # UnicodeDecodeError, JSONDecodeError, …
            raise self.damaged(f"a stored row does not decode: {type(exc).__name__}: {exc}") from None

    return cast(_Read, read)


class Store:
    """The state database: typed reads and writes, one connection per thread.

    With `reset`, a file that is not a bisectbot database, is damaged or is of a newer schema is
    renamed `<name>.bak-<time>` (`moved_aside`) and a fresh database made; without, StateError."""

    def __init__(self, path: Path, *, reset: bool = False):
        self.path = Path(path)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._connections: list[sqlite3.Connection] = []
        self.moved_aside: Path | None = None
        # what this process wrote, for readers that remember a result until it may have changed
        # (CommitTester.observations): runs stored per commit, and files marked as run outputs
        self.runs_written: Counter[str] = Counter()
        self.outputs_marked = 0
        if not os.path.lexists(self.path):
            storage_file.create(self.path)
        try:
            storage_file.check(self.path)
        except storage_file.Unusable as why:
            if not reset:
                raise StateError(str(why)) from None
            self.moved_aside = storage_file.move_aside(self.path)
            log.info("%s: moved aside to %s; starting a fresh state database", self.path, self.moved_aside)
            storage_file.create(self.path)
        self._migrate()

    def damaged(self, why: str) -> StateError:
        return StateError(f"state database {self.path} is damaged ({why}); pass --reset-state to start it afresh")

    def _failed(self, exc: sqlite3.Error) -> StateError:
        """A failed SQLite call as one line naming the database (and, when it is damaged, the way out)."""
        name = str(getattr(exc, "sqlite_errorname", ""))
        if name.startswith("SQLITE_CORRUPT") or name == "SQLITE_NOTADB":
            return self.damaged(str(exc))
        return StateError(f"state database {self.path}: {exc}")

    # -- plumbing ------------------------------------------------------------------------------
    def _db(self) -> sqlite3.Connection:
        con: sqlite3.Connection | None = getattr(self._local, "con", None)
        if con is None:
            try:
                con = sqlite3.connect(self.path, isolation_level=None, timeout=30, check_same_thread=False)
                con.row_factory = sqlite3.Row
                con.execute("PRAGMA journal_mode=WAL")
                con.execute("PRAGMA synchronous=NORMAL")
            except sqlite3.Error as exc:
                if con is not None:
                    con.close()
                raise self._failed(exc) from None
            self._local.con = con
            with self._lock:
                self._connections.append(con)
        return con

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """One transaction; an SQLite failure becomes a one-line StateError naming the file."""
        db = self._db()
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise self._failed(exc) from None

    def rows(self, sql: str, args: tuple[Any, ...] = ()) -> list[sqlite3.Row]:
        try:
            return self._db().execute(sql, args).fetchall()
        except sqlite3.Error as exc:
            raise self._failed(exc) from None
        except UnicodeDecodeError as exc:
            raise self.damaged(f"a stored text does not decode: {exc}") from None

    def one(self, sql: str, args: tuple[Any, ...] = ()) -> sqlite3.Row | None:
        rows = self.rows(sql, args)
        return rows[0] if rows else None

    def _migrate(self) -> None:
        db = self._db()
        try:
            version = db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise StateError(
                    f"{self.path}: written by a newer bisectbot (schema {version}; "
                    f"this one knows up to {SCHEMA_VERSION})"
                )
            if version == SCHEMA_VERSION:
                return
            if db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0]:
                backup = self.path.with_name(f"{self.path.name}.v{version}.bak")
                if not backup.exists():  # written whole under another name: a full disk leaves no half copy
                    partial = backup.with_name(f".{backup.name}.partial")
                    partial.unlink(missing_ok=True)
                    try:
                        db.execute("VACUUM INTO ?", (str(partial),))
                        os.rename(partial, backup)
                    finally:
                        partial.unlink(missing_ok=True)
            for v in range(version, SCHEMA_VERSION):
                with self.write() as tx:
                    if tx.execute("PRAGMA user_version").fetchone()[0] != v:
                        continue  # another process got there first
                    MIGRATIONS[v](tx)
                    tx.execute(f"PRAGMA user_version = {v + 1}")
        except sqlite3.Error as exc:
            raise self._failed(exc) from None
        except (ValueError, KeyError, TypeError) as exc:  # a kv row of an old schema that does not decode
            raise self.damaged(f"cannot migrate it: {type(exc).__name__}: {exc}") from None
        except OSError as exc:
            raise StateError(
                f"cannot back up the state database {self.path} before migrating it: {exc.strerror}"
            ) from None

    @property
    def version(self) -> int:
        return int(self.rows("PRAGMA user_version")[0][0])

    def close(self) -> None:
        with self._lock:
            for con in self._connections:
                con.close()
            self._connections.clear()
        self._local = threading.local()

    # -- builds --------------------------------------------------------------------------------
    def kept_builds(self, build_key: str, shas: Sequence[str]) -> int:
        """How many of these commits have a good build stored whose binaries are still there (a
        bisect over them need not build those again)."""
        return sum(
            1
            for sha in shas
            if (rec := self.build(build_key, sha)) is not None
            and rec.ok
            and all(Path(p).is_file() for p in rec.binaries.values())
        )

    @decoded
    def build(self, build_key: str, sha: str) -> BuildRecord | None:
        row = self.one(
            "SELECT sha, status, binaries, log, seconds, reason, variant, notes, inputs, host, "
            "compiler, hashes FROM builds WHERE build_key=? AND sha=?",
            (build_key, sha),
        )
        if row is None:
            return None
        inputs = json.loads(row["inputs"]) if row["inputs"] is not None else None
        return BuildRecord(
            sha=row["sha"],
            status=row["status"],
            binaries=json.loads(row["binaries"]),
            log=row["log"],
            seconds=row["seconds"],
            reason=row["reason"],
            variant=row["variant"],
            notes=row["notes"],
            inputs=tuple(inputs) if inputs is not None else None,
            host=row["host"],
            compiler=row["compiler"],
            hashes=json.loads(row["hashes"]) if row["hashes"] else {},
        )

    def put_build(self, build_key: str, rec: BuildRecord) -> None:
        inputs = json.dumps(list(rec.inputs)) if rec.inputs is not None else None
        with self.write() as db:
            db.execute(
                "INSERT INTO builds (build_key, sha, status, binaries, log, seconds, reason, variant, "
                "notes, inputs, host, compiler, created, hashes) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    build_key,
                    rec.sha,
                    rec.status,
                    json.dumps(rec.binaries),
                    rec.log,
                    rec.seconds,
                    rec.reason,
                    rec.variant,
                    rec.notes,
                    inputs,
                    rec.host,
                    rec.compiler,
                    time.time(),
                    json.dumps(rec.hashes),
                ),
            )

    def build_dir_written(self, path: Path) -> float | None:
        """When a trusted build last ended in the build directory `path` (None: never recorded)."""
        row = self.one("SELECT written FROM build_dirs WHERE path=?", (str(path),))
        return row["written"] if row is not None else None

    def put_build_dir_written(self, path: Path, when: float) -> None:
        with self.write() as db:
            db.execute("INSERT OR REPLACE INTO build_dirs (path, written) VALUES (?,?)", (str(path), when))

    def forget_build(self, build_key: str, sha: str) -> None:
        """A stored build that can no longer be used (its binaries are gone): build again."""
        with self.write() as db:
            db.execute("DELETE FROM builds WHERE build_key=? AND sha=?", (build_key, sha))

    def stored(self, build_key: str, shas: Iterable[str]) -> Stored:
        """Runs and builds stored, in all and at `shas` (builds under `build_key` only)."""
        want = set(shas)
        runs = self.rows("SELECT sha, COUNT(*) AS n FROM runs GROUP BY sha")
        builds = self.rows("SELECT sha, build_key FROM builds")
        return Stored(
            runs=sum(r["n"] for r in runs),
            builds=len(builds),
            runs_here=sum(r["n"] for r in runs if r["sha"] in want),
            builds_here=frozenset(r["sha"] for r in builds if r["build_key"] == build_key and r["sha"] in want),
        )

    # -- runs ----------------------------------------------------------------------------------
    @decoded
    def runs(self, run_key: str, sha: str) -> dict[int, RunRecord]:
        rows = self.rows(
            "SELECT seed, status, tokens, exit_code, seconds, attempts, variant, detail "
            "FROM runs WHERE run_key=? AND sha=?",
            (run_key, sha),
        )
        return {
            r["seed"]: RunRecord(
                seed=r["seed"],
                status=r["status"],
                tokens=tuple(json.loads(r["tokens"])) if r["tokens"] is not None else None,
                exit_code=r["exit_code"],
                seconds=r["seconds"],
                attempts=r["attempts"],
                variant=r["variant"],
                detail=r["detail"],
            )
            for r in rows
        }

    def runs_at(self, sha: str) -> dict[str, dict[int, RunRecord]]:
        """Every run stored for a commit, by run key (what a cluster worker is handed)."""
        keys = [r["run_key"] for r in self.rows("SELECT DISTINCT run_key FROM runs WHERE sha=?", (sha,))]
        return {key: self.runs(key, sha) for key in keys}

    def add_runs(self, run_key: str, sha: str, recs: list[RunRecord]) -> int:
        """Store the runs not stored yet (runs made elsewhere: another worker's); how many were new."""
        have = self.runs(run_key, sha)
        new = [r for r in recs if r.seed not in have]
        self.put_runs(run_key, sha, new)
        return len(new)

    def put_runs(self, run_key: str, sha: str, recs: Sequence[RunRecord]) -> None:
        """Store runs of one commit in one transaction (a batch costs about what one run does).
        A seed stored meanwhile by another stream of the same commit keeps its first run: two
        streams can run one seed at once when the control commit of `reference.control` is
        itself tested, as the control grows along the seeds its own test is running."""
        if not recs:
            return
        now = time.time()
        rows = [
            (
                run_key,
                sha,
                rec.seed,
                rec.status,
                json.dumps(list(rec.tokens)) if rec.tokens is not None else None,
                rec.exit_code,
                rec.seconds,
                rec.attempts,
                rec.variant,
                rec.detail,
                now,
            )
            for rec in recs
        ]
        with self.write() as db:
            db.executemany(
                "INSERT OR IGNORE INTO runs (run_key, sha, seed, status, tokens, exit_code, seconds, "
                "attempts, variant, detail, created) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
                rows,
            )
            self.runs_written[sha] += len(rows)  # inside the write: writers are serialised

    def timings(self, build_key: str | None = None, latest: int = 2000) -> Timings:
        """What this state has seen, for an up-front estimate: the seconds of its latest
        successful builds (under `build_key` when it has any), runs per tested commit and
        seconds per successful run (the latest `latest` of each)."""
        builds = (
            self.rows(
                "SELECT seconds FROM builds WHERE status='ok' AND build_key=? ORDER BY created DESC LIMIT ?",
                (build_key, latest),
            )
            if build_key
            else []
        )
        if not builds:
            builds = self.rows("SELECT seconds FROM builds WHERE status='ok' ORDER BY created DESC LIMIT ?", (latest,))
        per_commit = self.rows(
            "SELECT COUNT(*) AS n FROM runs GROUP BY run_key, sha ORDER BY MAX(created) DESC LIMIT ?", (latest,)
        )
        runs = self.rows("SELECT seconds FROM runs WHERE status='ok' ORDER BY rowid DESC LIMIT ?", (latest,))
        return Timings(
            tuple(float(r["seconds"]) for r in builds),
            tuple(int(r["n"]) for r in per_commit),
            tuple(float(r["seconds"]) for r in runs),
        )

    # -- verdicts ------------------------------------------------------------------------------
    def put_verdict(self, job: str, v: CommitVerdict) -> None:
        with self.write() as db:
            db.execute(
                "INSERT OR REPLACE INTO verdicts (job, sha, role, verdict, record, created) VALUES (?,?,?,?,?,?)",
                (job, v.sha, v.key, v.verdict.value, json.dumps(v.to_json()), time.time()),
            )

    def verdicts(self, job: str) -> list[CommitVerdict]:
        """A job's verdicts, in the order they were reached."""
        return [v for v, _when in self.verdict_log(job)]

    @decoded
    def verdict_log(self, job: str) -> list[tuple[CommitVerdict, float]]:
        """A job's verdicts with when each was reached (Unix time), in that order (`bisectbot log`)."""
        rows = self.rows("SELECT record, created FROM verdicts WHERE job=? ORDER BY created, rowid", (job,))
        return [(CommitVerdict.from_json(json.loads(r["record"])), float(r["created"])) for r in rows]

    # -- jobs ----------------------------------------------------------------------------------
    @decoded
    def job_log(self) -> list[tuple[JobRow, float, float]]:
        """Every job, oldest first, with when it was started and last updated (`bisectbot log`)."""
        rows = self.rows(
            "SELECT id, kind, status, args, result, published, created, updated FROM jobs ORDER BY created, rowid"
        )
        return [(_job_row(r), float(r["created"]), float(r["updated"])) for r in rows]

    def start_job(self, job: str, args: JobArgs) -> None:
        """Register a job (or mark a resumed one running again: its arguments are the first run's)."""
        now = time.time()
        with self.write() as db:
            db.execute(
                "INSERT INTO jobs (id, kind, status, args, created, updated) VALUES (?,?,?,?,?,?) "
                "ON CONFLICT(id) DO UPDATE SET status='running', updated=excluded.updated",
                (job, args.kind, "running", json.dumps(args.to_json()), now, now),
            )

    def finish_job(self, job: str, result: JobResult) -> None:
        """A job's end: `done` with its report, or failed or cancelled (a JobStop says which)."""
        status = result.status if isinstance(result, JobStop) else "done"
        with self.write() as db:
            db.execute(
                "UPDATE jobs SET status=?, result=?, updated=? WHERE id=?",
                (status, json.dumps(result.to_json()), time.time(), job),
            )

    @decoded
    def job(self, job: str) -> JobRow | None:
        row = self.one("SELECT id, kind, status, args, result, published FROM jobs WHERE id=?", (job,))
        return None if row is None else _job_row(row)

    # -- command variants and computed references ----------------------------------------------
    @decoded
    def variant(self, binary: str, spec: str) -> VariantChoice | None:
        row = self.one("SELECT variant, why, failed FROM variants WHERE binary=? AND spec=?", (binary, spec))
        if row is None:
            return None
        return VariantChoice(row["variant"], row["why"], tuple((int(i), str(w)) for i, w in json.loads(row["failed"])))

    def put_variant(self, binary: str, spec: str, choice: VariantChoice) -> None:
        with self.write() as db:
            db.execute(
                "INSERT OR REPLACE INTO variants (binary, spec, variant, why, failed) VALUES (?,?,?,?,?)",
                (binary, spec, choice.index, choice.why, json.dumps([list(f) for f in choice.failed])),
            )

    @decoded
    def cached_reference(self, key: str) -> dict[str, Any] | None:
        row = self.one("SELECT value FROM reference_cache WHERE key=?", (key,))
        return None if row is None else json.loads(row["value"])

    def put_reference(self, key: str, value: Mapping[str, object]) -> None:
        with self.write() as db:
            db.execute("INSERT OR REPLACE INTO reference_cache (key, value) VALUES (?,?)", (key, json.dumps(value)))

    # -- files the run command names ----------------------------------------------------------
    def run_file(self, path: str) -> RunFile | None:
        """What is known of a file the run command names (None: never seen)."""
        row = self.one("SELECT first, output FROM run_files WHERE path=?", (path,))
        return None if row is None else RunFile(row["first"], bool(row["output"]))

    def first_sight(self, path: str, sha: str | None) -> RunFile:
        """Record a run-command file the first time it is seen (never overwritten); the record."""
        with self.write() as db:
            db.execute("INSERT OR IGNORE INTO run_files (path, first) VALUES (?,?)", (path, sha))
        found = self.run_file(path)
        assert found is not None
        return found

    def mark_output(self, path: str) -> None:
        """A run wrote this file: from now on it is not an input of the runs' key."""
        with self.write() as db:
            db.execute("INSERT OR IGNORE INTO run_files (path, first) VALUES (?, NULL)", (path,))
            db.execute("UPDATE run_files SET output=1 WHERE path=?", (path,))
            self.outputs_marked += 1

    # -- scheduled checks ----------------------------------------------------------------------
    def last_good(self, config: str) -> LastGood | None:
        row = self.one("SELECT sha, ref, date FROM last_good WHERE config=?", (config,))
        return None if row is None else LastGood(row["sha"], row["ref"], row["date"])

    def put_last_good(self, config: str, good: LastGood) -> None:
        with self.write() as db:
            db.execute(
                "INSERT OR REPLACE INTO last_good (config, sha, ref, date) VALUES (?,?,?,?)",
                (config, good.sha, good.ref, good.date),
            )


# -- the database of a state directory, read from outside ---------------------------------------
def database_path(root: Path) -> Path:
    """The state database of the state directory `root`."""
    return root / "state.sqlite3"


def held_builds(root: Path, build_key: str, shas: list[str]) -> list[str]:
    """Which of `shas` the state directory `root` holds a good build of, read without its lock
    (read-only: another process may hold it). A database that cannot be read holds nothing:
    callers use the answer only to choose where work goes first. A table this schema does not
    have is an error, not "nothing": a schema change must not cost rebuilds in silence."""
    db = database_path(root)
    if not db.is_file() or not shas:
        return []
    try:
        con = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error:
        return []
    try:
        marks = ",".join("?" * len(shas))
        rows = con.execute(
            f"SELECT sha FROM builds WHERE build_key=? AND status='ok' AND sha IN ({marks})", (build_key, *shas)
        ).fetchall()
    except sqlite3.OperationalError as exc:
        if "no such" in str(exc):
            raise StateError(f"state database {db}: {exc} (written by another bisectbot?)") from None
        return []  # busy or locked: nothing known now
    except sqlite3.Error:
        return []
    finally:
        con.close()
    return [sha for (sha,) in rows]
