"""The storage module: versioned schema and migrations (from a state database written by
bisectbot b6ae5a0), typed reads and writes, the state-directory lock, threads."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3
import subprocess
import threading
from pathlib import Path

import pytest

from bisectbot.bot.bot import Bot
from bisectbot.bot.memory import AlarmTarget, BisectTarget, BotMemory, Cursor, PullTarget, StatusTarget, Target
from bisectbot.config import load_config
from bisectbot.demo import generate_demo
from bisectbot.errors import StateError
from bisectbot.github.dryrun import DryRunClient
from bisectbot.records.commits import BuildRecord, CommitVerdict, RunRecord
from bisectbot.records.jobargs import BisectArgs, TestArgs
from bisectbot.records.reports import CommitReport, JobStop
from bisectbot.state.statedir import StateDir
from bisectbot.state.storage import SCHEMA_VERSION, LastGood, Store
from bisectbot.statistics.outcome import Find, Verdict
from sample_reports import a_test_report

from conftest import bisectbot_argv, subprocess_env

OLD = Path(__file__).parent / "data" / "state-b6ae5a0"
# The history the fixture was written against (make_fixture.py uses the same arguments).
OLD_DEMO = dict(n_commits=12, culprit_index=8, break_index=3, seed=5)
OLD_BISECT_JOB = "bisect-304088927059"


def old_state(dest: Path) -> Path:
    """A state directory holding the b6ae5a0 database, as an upgrade would find it."""
    dest.mkdir(parents=True)
    (dest / "state.sqlite3").write_bytes(gzip.decompress((OLD / "state.sqlite3.gz").read_bytes()))
    return dest


def rows(db: Path, sql: str) -> list[tuple]:
    con = sqlite3.connect(db)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_a_new_database_starts_at_the_current_schema(tmp_path: Path) -> None:
    with StateDir(tmp_path / "st") as state:
        assert state.store.version == SCHEMA_VERSION
    assert not list((tmp_path / "st").glob("*.bak"))  # nothing to back up


OLD_COLUMNS = {
    "builds": "build_key, sha, status, binaries, log, seconds, reason, created",
    "runs": "{run}, sha, seed, status, tokens, exit_code, seconds, attempts, variant, detail, created",
    "verdicts": "*",
    "jobs": "*",
    "bot_targets": "*",
    "webhook_deliveries": "*",
    "bot_commands": "comment_id, issue, author, association, body, status, job, created, updated",
}


def test_the_b6ae5a0_database_is_migrated_with_a_backup_and_nothing_lost(tmp_path: Path) -> None:
    root = old_state(tmp_path / "st")
    before = {
        t: rows(root / "state.sqlite3", f"SELECT {c.format(run='experiment')} FROM {t}") for t, c in OLD_COLUMNS.items()
    }
    kv = dict(rows(root / "state.sqlite3", "SELECT key, value FROM kv"))
    assert rows(root / "state.sqlite3", "PRAGMA user_version") == [(0,)]
    with StateDir(root) as state:
        store = state.store
        assert store.version == SCHEMA_VERSION
        # what lived in kv now has tables of its own
        last_good = json.loads(kv["check:last-good:specdemo"])
        assert store.last_good("specdemo") == LastGood(last_good["sha"], last_good["ref"], last_good["date"])
        assert BotMemory(store).cursor("octo/specdemo#7") == Cursor(901, "2026-11-30T12:00:00Z")
        # command variants are chosen per binary content since schema 3: the old choices go
        assert any(k.startswith("variant:") for k in kv)
        assert store.rows("SELECT COUNT(*) FROM variants")[0][0] == 0
        # the old rows are read through the new code
        job = store.job(OLD_BISECT_JOB)
        assert job is not None and job.kind == "bisect" and job.status == "running"
        assert isinstance(job.args, BisectArgs) and job.args.bad_ref == "main" and job.result is None
        assert [v.role for v in store.verdicts(OLD_BISECT_JOB)] == [
            "bad-endpoint",
            "good-endpoint",
            "bad-model",
            "step",
        ]
        assert BotMemory(store).claimed_commands() == [901]
        assert not BotMemory(store).add_delivery_if_new("delivery-3f2a")
    tables = {name for (name,) in rows(root / "state.sqlite3", "SELECT name FROM sqlite_master WHERE type='table'")}
    assert "kv" not in tables  # emptied by the migration
    for table, old_rows in before.items():
        columns = OLD_COLUMNS[table].format(run="run_key")
        assert rows(root / "state.sqlite3", f"SELECT {columns} FROM {table}") == old_rows, table
    assert set(rows(root / "state.sqlite3", "SELECT variant, notes FROM builds")) == {(0, "")}
    backup = root / "state.sqlite3.v0.bak"
    assert rows(backup, "SELECT key FROM kv") and rows(backup, "PRAGMA user_version") == [(0,)]


def test_results_written_by_b6ae5a0_read_back_as_typed_reports(tmp_path: Path) -> None:
    with StateDir(old_state(tmp_path / "st")) as state:
        done = [
            state.store.job(j) for (j,) in rows(state.root / "state.sqlite3", "SELECT id FROM jobs WHERE status='done'")
        ]
    reports = [j.result for j in done if j is not None]
    assert len(reports) == 2 and all(isinstance(r, CommitReport) for r in reports)
    assert all(r.verdict is Verdict.GOOD and r.detail.runs > 0 for r in reports)  # type: ignore[union-attr]


@pytest.mark.heavy  # whole bisects or long simulations, 4 s or more: after the default suite (README: Tests)
def test_a_bisect_killed_under_b6ae5a0_is_resumed_after_the_migration(tmp_path: Path) -> None:
    """The job b6ae5a0 left running is finished under its own id. Its runs are kept but not
    replayed: b6ae5a0 did not record what they ran (binary, fixtures), so reusing them could
    count a stale run; they are run again under keys that record it."""
    hist = generate_demo(tmp_path / "demo", **OLD_DEMO)
    for name in ("specdemo.yaml", "variants.yaml", "github.yaml"):
        shutil.copy(OLD / name, hist.config.parent / name)
    root = old_state(tmp_path / "st")
    db = root / "state.sqlite3"
    old_runs = set(rows(db, "SELECT experiment, sha, seed, status, tokens, created FROM runs"))
    assert {sha for (sha,) in rows(db, "SELECT DISTINCT sha FROM runs")} <= set(hist.commits), (
        "the demo history no longer matches the fixture (generate_demo changed)"
    )
    args = ["bisect", str(hist.config), "--good", hist.good, "--bad", "main", "--state", str(root), "--json", "-"]
    proc = subprocess.run(
        bisectbot_argv(*args), capture_output=True, text=True, timeout=600, env=subprocess_env(CI="1")
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["job"] == OLD_BISECT_JOB and report["first_bad"] == hist.culprit
    assert rows(db, f"SELECT status FROM jobs WHERE id='{OLD_BISECT_JOB}'") == [("done",)]
    now = set(rows(db, "SELECT run_key, sha, seed, status, tokens, created FROM runs"))
    assert old_runs <= now  # kept, untouched
    new_keys = {key for key, *_ in now - old_runs}
    assert new_keys and not new_keys & {key for key, *_ in old_runs}  # never replayed
    assert report["runs_executed"] >= report["runs"]
    # resumed again now: everything replays from the new keys
    again = subprocess.run(
        bisectbot_argv(*args), capture_output=True, text=True, timeout=600, env=subprocess_env(CI="1")
    )
    assert again.returncode == 0 and json.loads(again.stdout)["runs_executed"] == 0, again.stderr


def test_a_database_from_a_newer_bisectbot_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "state.sqlite3"
    con = sqlite3.connect(db)
    con.execute("PRAGMA user_version = 99")
    con.close()
    with pytest.raises(StateError, match=r"written by a newer bisectbot \(schema 99"):
        Store(db)


def test_a_file_that_is_not_a_database_is_one_clear_error(tmp_path: Path) -> None:
    (tmp_path / "state.sqlite3").write_text("not a database, just text " * 100)
    with pytest.raises(StateError) as err:
        StateDir(tmp_path)
    assert str(tmp_path / "state.sqlite3") in str(err.value) and "\n" not in str(err.value)


def test_one_process_at_a_time(tmp_path: Path) -> None:
    with StateDir(tmp_path):
        with pytest.raises(StateError, match="in use by another bisectbot process"):
            StateDir(tmp_path)
    with StateDir(tmp_path):  # released on close
        pass


def test_builds_runs_and_verdicts_round_trip(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite3")
    build = BuildRecord("a" * 40, "ok", {"binary": "/k/bin"}, "/log", 1.5)
    store.put_build("key", build)
    assert store.build("key", "a" * 40) == build and store.build("other", "a" * 40) is None
    with pytest.raises(StateError, match="UNIQUE"):
        store.put_build("key", build)  # a build is never done twice
    store.forget_build("key", "a" * 40)
    assert store.build("key", "a" * 40) is None
    runs = [RunRecord(7, "ok", ("f", "e"), 0, 0.1), RunRecord(8, "crash", None, 134, 0.2, 1, 1, "abort")]
    for r in runs:
        store.put_runs("exp", "a" * 40, [r])
    assert store.runs("exp", "a" * 40) == {7: runs[0], 8: runs[1]} and store.runs("exp2", "a" * 40) == {}
    # a seed another stream of the commit stored meanwhile (the control commit tested against
    # itself while the control grows) keeps its first run, and the batch's other runs are stored
    store.put_runs("exp", "a" * 40, [RunRecord(7, "ok", ("f", "g"), 0, 0.3), RunRecord(9, "ok", ("f",), 0, 0.1)])
    assert store.runs("exp", "a" * 40)[7] == runs[0] and 9 in store.runs("exp", "a" * 40)
    v = CommitVerdict(
        "a" * 40,
        "subject",
        "step",
        Verdict.BAD,
        2,
        {"e": 1},
        {"crash": 1},
        0,
        3.0,
        -1.0,
        "why",
        "two-point",
        1e-3,
        1e-3,
        (7, 8),
        "ok",
        1.5,
        arm="srv",
    )
    store.put_verdict("job-1", v)
    assert store.verdicts("job-1") == [v]
    store.close()


def test_a_verdict_stored_as_unlike_reads_back_as_inconclusive(tmp_path: Path) -> None:
    """Versions before c5ed8dd (2026-12-02) could store the verdict "unlike" (like neither end):
    in the verdicts table and in job results. It is read back as INCONCLUSIVE, which it behaved
    as (no side, exit 3, git bisect run 125), never as an error."""
    store = Store(tmp_path / "s.sqlite3")
    v = a_test_report(Verdict.INCONCLUSIVE).detail
    store.put_verdict("job-1", v)
    old = json.dumps({**v.to_json(), "verdict": "unlike"})
    con = sqlite3.connect(tmp_path / "s.sqlite3")
    with con:
        con.execute("UPDATE verdicts SET verdict='unlike', record=?", (old,))
    con.close()
    assert rows(tmp_path / "s.sqlite3", "SELECT verdict FROM verdicts") == [("unlike",)]
    assert store.verdicts("job-1") == [v]
    store.close()
    data = a_test_report(Verdict.INCONCLUSIVE).to_json()
    data["detail"]["verdict"] = data["verdict"] = "unlike"
    assert CommitReport.from_json(data).verdict is Verdict.INCONCLUSIVE
    with pytest.raises(ValueError):
        Verdict("alike")  # only the old word is read, not any word


def test_comment_targets_publish_the_job_once_every_comment_is_final(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite3")
    memory = BotMemory(store)
    store.start_job("j", TestArgs("a" * 40, "main", "check.yaml"))
    memory.set_target("check-status", 7, "j", StatusTarget("check.yaml", "2026-12-01 00:09 UTC", True))
    memory.set_target("j", 7, "j", AlarmTarget("check.yaml", "2026-12-01 00:09 UTC", None))
    assert memory.unpublished_targets() == []  # the job still runs
    report = a_test_report(Verdict.BAD)
    store.finish_job("j", report)
    assert sorted(memory.unpublished_targets()) == [("check-status", 7), ("j", 7)]
    memory.mark_target_published("check-status", 7, 101)
    assert store.job("j").published is False  # type: ignore[union-attr]
    memory.mark_target_published("j", 7, 102)
    job = store.job("j")
    assert job is not None and job.published and job.result == report and job.status == "done"
    assert job.args == TestArgs("a" * 40, "main", "check.yaml")
    target = memory.target("j", 7)
    assert target is not None and target.comment_id == 102
    assert target.target == AlarmTarget("check.yaml", "2026-12-01 00:09 UTC", None)
    store.close()


def test_claims_and_deliveries_hold_across_threads(tmp_path: Path) -> None:
    store = Store(tmp_path / "s.sqlite3")
    memory = BotMemory(store)
    wins: list[bool] = []
    lock = threading.Lock()

    def claim() -> None:
        won = memory.claim_command(55, 7, "maintainer", "MEMBER", "/check")
        got = memory.add_delivery_if_new("d-1")
        with lock:
            wins.extend([won, got])

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wins.count(True) == 2  # one claim, one delivery, whoever came first
    cmd = memory.command(55)
    assert cmd is not None and cmd.status == "claimed" and cmd.issue == 7
    memory.set_command(55, "done", "job-1")
    assert memory.command(55).job == "job-1" and memory.claimed_commands() == []  # type: ignore[union-attr]
    store.close()


def test_held_builds_reads_without_the_lock_and_a_foreign_schema_is_loud(tmp_path: Path) -> None:
    from bisectbot.state.storage import held_builds

    with StateDir(tmp_path / "st") as state:  # held: the query needs no lock
        state.store.put_build("k", BuildRecord("a" * 40, "ok", {}, "", 1.0))
        state.store.put_build("k", BuildRecord("b" * 40, "failed", {}, "", 1.0, "boom"))
        assert held_builds(state.root, "k", ["a" * 40, "b" * 40, "c" * 40]) == ["a" * 40]
        assert held_builds(state.root, "other", ["a" * 40]) == []
    assert held_builds(tmp_path / "nowhere", "k", ["a" * 40]) == []
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    sqlite3.connect(foreign / "state.sqlite3").execute("CREATE TABLE t (x)").connection.commit()
    with pytest.raises(StateError, match="no such table: builds"):
        held_builds(foreign, "k", ["a" * 40])


MAIN_8B65 = Path(__file__).parent / "data" / "state-8b65ff2"


@pytest.mark.heavy  # a whole bisect: after the default suite (README: Tests)
def test_a_bisect_killed_under_8b65ff2_is_resumed_after_the_migration(tmp_path: Path) -> None:
    """Schema 5 → 6: builds recorded without binary hashes are built again before their binaries
    are trusted (none of them is kept here), and the job 8b65ff2 left running is finished under
    its own id with the planted culprit."""
    hist = generate_demo(tmp_path / "demo", **OLD_DEMO)
    shutil.copy(MAIN_8B65 / "specdemo.yaml", hist.config)
    root = tmp_path / "st"
    root.mkdir()
    db = root / "state.sqlite3"
    db.write_bytes(gzip.decompress((MAIN_8B65 / "state.sqlite3.gz").read_bytes()))
    assert rows(db, "PRAGMA user_version") == [(5,)]
    (job,) = rows(db, "SELECT id FROM jobs WHERE kind='bisect' AND status='running'")
    steps_before = rows(db, f"SELECT COUNT(*) FROM verdicts WHERE job='{job[0]}'")[0][0]
    assert steps_before > 0
    args = ["bisect", str(hist.config), "--good", hist.good, "--bad", "main", "--state", str(root), "--json", "-"]
    proc = subprocess.run(
        bisectbot_argv(*args), capture_output=True, text=True, timeout=600, env=subprocess_env(CI="1")
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["job"] == job[0] and report["first_bad"] == hist.culprit
    assert rows(db, "PRAGMA user_version") == [(SCHEMA_VERSION,)]
    assert (root / "state.sqlite3.v5.bak").exists()
    assert rows(db, f"SELECT status FROM jobs WHERE id='{job[0]}'") == [("done",)]
    # every build the resumed bisect relies on now carries its binaries' hashes
    hashed = rows(db, "SELECT COUNT(*) FROM builds WHERE status='ok' AND hashes IS NOT NULL AND hashes != '{}'")
    assert hashed[0][0] >= 1


# -- comment targets: one record per kind, and the rows schema 7 kept -----------------------------
@pytest.mark.parametrize(
    "target",
    [
        StatusTarget("/c/github.yaml", "2026-12-01 00:09 UTC", alarm=False),
        StatusTarget("c.yaml", "2026-12-01 00:09 UTC", alarm=True),
        PullTarget("c.yaml", "2026-12-01 00:09 UTC", 8, "no network, 4 GB of memory"),
        AlarmTarget("c.yaml", "2026-12-01 00:09 UTC", "9" * 40),
        AlarmTarget("c.yaml", "2026-12-01 00:09 UTC", None),
        BisectTarget("c.yaml"),
    ],
)
def test_each_kind_of_comment_target_round_trips_as_its_record(tmp_path: Path, target: Target) -> None:
    store = Store(tmp_path / "s.sqlite3")
    memory = BotMemory(store)
    assert memory.set_target("m", 7, "j", target) is True
    assert memory.set_target("m", 7, "j", target) is False  # known: not a new comment
    row = memory.target("m", 7)
    assert row is not None and row.target == target and row.job == "j" and not row.published
    store.close()


def v7_database(path: Path, targets: list[tuple[str, str, str]]) -> None:
    """A schema-7 database holding comment targets as (marker, kind, extra JSON) rows."""
    Store(path).close()
    con = sqlite3.connect(path)
    con.execute("PRAGMA user_version = 7")
    con.executemany(
        "INSERT INTO bot_targets (marker, issue, job, kind, extra, published, updated) VALUES (?, 7, ?, ?, ?, 0, 1)",
        [(marker, marker, kind, extra) for marker, kind, extra in targets],
    )
    con.commit()
    con.close()


def test_comment_targets_of_schema_7_are_migrated_to_what_their_kind_needs(tmp_path: Path) -> None:
    """Schema 7 → 8: a bisect's target drops its refs and title (its job's arguments keep the
    refs); a key an older bot left out gets the value the renderer fell back on; a row already
    in its kind's form is left byte for byte."""
    status = '{"date": "2026-12-01 00:09 UTC", "alarm": false, "config": "/c/github.yaml"}'
    bisect = (
        '{"config": "/c/github.yaml", "title": "bisecting `968be871ad7b`..`9c7ae0ddfb80` (v1..main)", '
        '"good_ref": "v1", "bad_ref": "main"}'
    )
    pull = '{"date": "2026-12-01 00:09 UTC", "config": "/c/github.yaml", "pull": 8}'
    db = tmp_path / "state.sqlite3"
    v7_database(
        db, [("check-status", "status", status), ("bisect-1", "bisect", bisect), ("test-1-pull8", "pull", pull)]
    )
    store = Store(db)
    memory = BotMemory(store)
    assert store.version == SCHEMA_VERSION and (tmp_path / "state.sqlite3.v7.bak").exists()
    assert memory.target("check-status", 7).target == StatusTarget("/c/github.yaml", "2026-12-01 00:09 UTC", False)  # type: ignore[union-attr]
    assert memory.target("bisect-1", 7).target == BisectTarget("/c/github.yaml")  # type: ignore[union-attr]
    assert memory.target("test-1-pull8", 7).target == PullTarget(  # type: ignore[union-attr]
        "/c/github.yaml", "2026-12-01 00:09 UTC", 8, "no network"
    )
    extra = dict(rows(db, "SELECT marker, extra FROM bot_targets"))
    assert extra["check-status"] == status and json.loads(extra["bisect-1"]) == {"config": "/c/github.yaml"}
    store.close()


def test_a_comment_target_that_does_not_decode_is_a_damaged_database(tmp_path: Path) -> None:
    db = tmp_path / "state.sqlite3"
    v7_database(db, [("bisect-1", "bisect", "{}"), ("odd", "review", "{}")])
    store = Store(db)
    memory = BotMemory(store)
    assert memory.target("bisect-1", 7).target == BisectTarget("")  # type: ignore[union-attr]  # the bot's own config
    with pytest.raises(StateError, match="does not decode"):
        memory.target("odd", 7)
    store.close()


MAIN_4FD5 = Path(__file__).parent / "data" / "state-4fd5644"
OLD_CHECK_BISECT = "bisect-304088927059"


def main_4fd5_state(dest: Path) -> Path:
    dest.mkdir(parents=True)
    (dest / "state.sqlite3").write_bytes(gzip.decompress((MAIN_4FD5 / "state.sqlite3.gz").read_bytes()))
    return dest


def test_the_4fd5644_targets_migrate_and_render_from_the_records_the_bot_holds(tmp_path: Path) -> None:
    """A state directory of 4fd5644 (schema 7): its check's status and alarm comments, and the
    job comment of the bisect the check started (killed while running), read back as records;
    the bisect's comment is rendered from its job's arguments with the refs as given."""
    root = main_4fd5_state(tmp_path / "st")
    db = root / "state.sqlite3"
    (old_title,) = [json.loads(e)["title"] for (e,) in rows(db, "SELECT extra FROM bot_targets WHERE kind='bisect'")]
    with StateDir(root) as state:
        assert state.store.version == SCHEMA_VERSION and (root / "state.sqlite3.v7.bak").exists()
        memory = BotMemory(state.store)
        kinds = {
            row.target.kind
            for m, i in rows(db, "SELECT marker, issue FROM bot_targets")
            if (row := memory.target(m, i))
        }
        assert kinds == {"status", "alarm", "bisect"}
        target = memory.target(OLD_CHECK_BISECT, 7)
        job = state.store.job(OLD_CHECK_BISECT)
        assert target is not None and isinstance(target.target, BisectTarget) and not target.published
        assert job is not None and job.status == "running" and job.result is None
        assert isinstance(job.args, BisectArgs) and (job.args.good_ref, job.args.bad_ref) == ("968be871ad7b", "main")
        assert job.args.find is Find.BAD
        # the job ends cancelled: its comment is headed as the stored title said, from the args
        state.store.finish_job(OLD_CHECK_BISECT, JobStop("cancelled", by="maintainer"))
        cfg = load_config(MAIN_4FD5 / "github.yaml")
        bot = Bot(cfg, str(MAIN_4FD5 / "github.yaml"), state, DryRunClient(tmp_path / "dry-run.md"))
        job = state.store.job(OLD_CHECK_BISECT)
        assert job is not None
        body = bot.render(target, job).fit()
        assert f"### bisectbot: {old_title}" in body and "cancelled by @maintainer" in body
        assert memory.unpublished_targets() == [(OLD_CHECK_BISECT, 7)]
        bot.settle(10)
        assert memory.unpublished_targets() == []
    assert old_title in (tmp_path / "dry-run.md").read_text()


@pytest.mark.heavy  # a whole bisect: after the default suite (README: Tests)
def test_a_check_killed_under_4fd5644_is_resumed_after_the_migration(tmp_path: Path) -> None:
    """The same check run again by this bisectbot: the bisect 4fd5644 left running is resumed
    under its own id (its builds and runs replayed), and its job comment names the planted
    culprit with the refs as the check gave them."""
    hist = generate_demo(tmp_path / "demo", **OLD_DEMO)
    config = hist.config.parent / "github.yaml"
    shutil.copy(MAIN_4FD5 / "github.yaml", config)
    root = main_4fd5_state(tmp_path / "st")
    db = root / "state.sqlite3"
    runs_before = rows(db, "SELECT run_key, sha, seed, created FROM runs")
    args = ["check", str(config), "--ref", "main", "--state", str(root)]
    proc = subprocess.run(
        bisectbot_argv(*args), capture_output=True, text=True, timeout=600, env=subprocess_env(CI="1")
    )
    assert proc.returncode == 1, proc.stderr  # BAD: the alarm, and the bisect's culprit
    assert rows(db, f"SELECT status, published FROM jobs WHERE id='{OLD_CHECK_BISECT}'") == [("done", 1)]
    assert rows(db, "SELECT COUNT(*) FROM bot_targets WHERE published=0") == [(0,)]
    assert set(runs_before) <= set(rows(db, "SELECT run_key, sha, seed, created FROM runs"))
    (result,) = rows(db, f"SELECT result FROM jobs WHERE id='{OLD_CHECK_BISECT}'")
    report = json.loads(result[0])
    assert report["first_bad"] == hist.culprit and report["runs_executed"] < report["runs"]
    posted = (hist.config.parent / "dry-run.md").read_text()
    comment = posted[posted.index(f"(job {OLD_CHECK_BISECT})") :]
    assert hist.culprit[:12] in comment and "(`968be871ad7b`) .. " in comment and "(`main`)" in comment


MAIN_4FD5_CONTROL = Path(__file__).parent / "data" / "state-4fd5644-control"


@pytest.mark.heavy  # a whole bisect: after the default suite (README: Tests)
def test_a_bisect_killed_under_0_1_0_resumes_under_its_own_id(tmp_path: Path) -> None:
    """0.1.0 (4fd5644, schema 7) left a bisect against the good end (`--reference good`) running:
    0.2.0 finishes it under its own id, though the control reference it hashes lost `delta` and
    `ratio` (config.history keeps the digest), replaying the runs stored for its ends and step."""
    hist = generate_demo(tmp_path / "demo", **OLD_DEMO)
    shutil.copy(MAIN_4FD5_CONTROL / "specdemo.yaml", hist.config)
    root = tmp_path / "st"
    root.mkdir()
    db = root / "state.sqlite3"
    db.write_bytes(gzip.decompress((MAIN_4FD5_CONTROL / "state.sqlite3.gz").read_bytes()))
    assert rows(db, "PRAGMA user_version") == [(7,)]
    (job,) = rows(db, "SELECT id FROM jobs WHERE kind='bisect' AND status='running'")
    stored = rows(db, "SELECT COUNT(*) FROM runs")[0][0]
    args = ["bisect", str(hist.config), "--good", hist.good, "--bad", "main", "--reference", "good"]
    proc = subprocess.run(
        bisectbot_argv(*args, "--state", str(root), "--json", "-"),
        capture_output=True,
        text=True,
        timeout=600,
        env=subprocess_env(CI="1"),
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["job"] == job[0] and report["first_bad"] == hist.culprit
    assert rows(db, f"SELECT status FROM jobs WHERE id='{job[0]}'") == [("done",)]
    assert rows(db, "SELECT COUNT(*) FROM jobs") == [(1,)]  # no new job
    # the runs stored before are replayed, never run again: every run executed is a new row
    assert report["runs_executed"] == rows(db, "SELECT COUNT(*) FROM runs")[0][0] - stored
    assert report["runs"] + report["control_runs"] > report["runs_executed"]
