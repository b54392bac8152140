"""Bad local input is one line naming what and where, and exit 2: never a traceback or a hang.

Each case runs the real CLI in a subprocess and checks its stderr is exactly one line
`bisectbot: error: …` naming the path. Some cases need root's powers: a tmpfs (`mount`), a repo
owned by another uid (`chown`), or a child that file permissions do stop. For the last, the
child is root without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (`setpriv --bounding-set`): a
child as `nobody` could not reach this Python install (it lives under /root). Each of those
tests is skipped, saying why, where its tool is missing.
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sqlite3
import subprocess
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from bisectbot.config import load_config
from bisectbot.demo import DemoHistory, generate_demo
from bisectbot.errors import StateError
from bisectbot.jobs import lifecycle as jobs
from bisectbot.records.commits import BuildRecord, RunRecord
from bisectbot.state.statedir import StateDir
from bisectbot.state.storage import SCHEMA_VERSION, Store

from conftest import TOOLCHAIN, bisectbot_argv, missing_tools, require, subprocess_env

OLD_DB = Path(__file__).parent / "data" / "state-b6ae5a0" / "state.sqlite3.gz"
PAGE = 4096
# root, but file permissions apply to it: what an ordinary user meets
NO_OVERRIDE = ["setpriv", "--bounding-set=-dac_override,-dac_read_search"]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoHistory:
    require(*TOOLCHAIN)
    return generate_demo(tmp_path_factory.mktemp("localinput"), n_commits=6, culprit_index=3, break_index=1, seed=1)


def cli(
    *args: str, prefix: tuple[str, ...] | list[str] = (), env: dict[str, str] | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*prefix, *bisectbot_argv(*args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=subprocess_env(CI="1", **(env or {})),
    )


def one_line_error(proc: subprocess.CompletedProcess[str], *names: object) -> str:
    """The single error line, after checking exit 2, no traceback, and that it names `names`."""
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("bisectbot: error: "), proc.stderr
    for name in names:
        assert str(name) in lines[0], (name, lines[0])
    return lines[0]


def argv_test(demo: DemoHistory, state: Path, *extra: str, config: Path | None = None) -> list[str]:
    """`bisectbot test` of the good endpoint: each case fails before anything is built."""
    return ["test", str(config or demo.config), "--commit", demo.good, "--state", str(state), "-q", *extra]


def config_for_repo(demo: DemoHistory, repo: Path, where: Path) -> Path:
    data = yaml.safe_load(demo.config.read_text())
    data["repo"] = {"path": str(repo)}
    where.mkdir(parents=True, exist_ok=True)
    path = where / "specdemo.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def make_state(root: Path, runs: int = 600) -> Path:
    """A real state directory whose database spans well over two pages; returns the database."""
    with StateDir(root) as state:
        for seed in range(runs):
            state.store.put_runs("run-key", "a" * 40, [RunRecord(seed, "ok", tuple("abcd"), 0, 0.01)])
    db = root / "state.sqlite3"
    con = sqlite3.connect(db)
    try:
        assert con.execute("PRAGMA page_count").fetchone()[0] > 3
    finally:
        con.close()
    return db


def overwrite_page(db: Path, page: int, fill: bytes = b"\xde\xad\xbe\xef") -> None:
    data = bytearray(db.read_bytes())
    assert len(data) >= page * PAGE
    data[(page - 1) * PAGE : page * PAGE] = fill * (PAGE // len(fill))
    db.write_bytes(bytes(data))


def can_mount(where: Path) -> str | None:
    """Why a tmpfs cannot be mounted here, or None."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return "needs root and mount(8) for a tmpfs"
    where.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)], capture_output=True, text=True
    )
    if proc.returncode != 0:
        return f"cannot mount a tmpfs: {proc.stderr.strip()}"
    subprocess.run(["umount", str(where)], check=True)
    return None


@contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    why = can_mount(where)
    if why:
        pytest.skip(why)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], check=True)
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill(fs: Path) -> None:
    """Use up every block of the file system at `fs`."""
    fd = os.open(fs / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass  # ENOSPC: full
    finally:
        os.close(fd)


def permissions_apply(tmp: Path) -> str | None:
    """Why a child cannot be made that file permissions stop, or None."""
    if os.geteuid() != 0:
        return None  # we are an ordinary user already: NO_OVERRIDE is not needed… nor allowed
    if (why := missing_tools("setpriv")) is not None:
        return f"{why}: it drops root's permission override"
    closed = tmp / "closed"
    closed.mkdir()
    closed.chmod(0o555)
    probe = subprocess.run([*NO_OVERRIDE, "touch", str(closed / "x")], capture_output=True)
    closed.chmod(0o755)
    if probe.returncode == 0:
        return "setpriv could not drop CAP_DAC_OVERRIDE here"
    return None


def ordinary_user(tmp: Path) -> list[str]:
    why = permissions_apply(tmp)
    if why:
        pytest.skip(why)
    return NO_OVERRIDE if os.geteuid() == 0 else []


# -- 1. a damaged database ------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["page 3", "last page"])
def test_a_database_damaged_past_page_2_is_one_line(demo: DemoHistory, tmp_path: Path, where: str) -> None:
    db = make_state(tmp_path / "st")
    pages = db.stat().st_size // PAGE
    overwrite_page(db, 3 if where == "page 3" else pages)
    line = one_line_error(cli(*argv_test(demo, tmp_path / "st")), db)
    assert "is damaged" in line and "--reset-state" in line


def test_a_stored_row_that_does_not_decode_is_one_line_when_read(demo: DemoHistory, tmp_path: Path) -> None:
    """Damage no structural check sees (the file is sound, a row's JSON is not) shows up only
    when that row is read, here by `build-log`."""
    cfg = load_config(demo.config)
    with StateDir(tmp_path / "st") as state:
        key = jobs.Session(cfg, state).runner.builder.key(cfg.build)
        state.store.put_build(key, BuildRecord(demo.good, "ok", {"binary": "/nowhere"}, "/nowhere.log", 1.0))
    con = sqlite3.connect(tmp_path / "st" / "state.sqlite3")
    con.execute('UPDATE builds SET binaries = \'{"binary": "/nowh\' WHERE sha = ?', (demo.good,))
    con.commit()
    con.close()
    proc = cli("build-log", str(demo.config), "--commit", demo.good, "--state", str(tmp_path / "st"))
    line = one_line_error(proc, tmp_path / "st" / "state.sqlite3")
    assert "is damaged" in line and "does not decode" in line


def test_damage_met_after_the_database_was_opened_is_a_state_error(tmp_path: Path) -> None:
    """Every Store read and write maps SQLite's failures to StateError naming the file."""
    db = make_state(tmp_path / "st")
    store = Store(db)
    pages = db.stat().st_size // PAGE
    for page in range(3, pages + 1):
        overwrite_page(db, page)
    errors: list[BaseException] = []

    def use() -> None:  # a thread of its own: a connection of its own, which reads the file afresh
        try:
            store.runs("run-key", "a" * 40)
        except BaseException as exc:  # noqa: BLE001 - what it raised is the point
            errors.append(exc)

    worker = threading.Thread(target=use)
    worker.start()
    worker.join()
    store.close()
    assert len(errors) == 1 and isinstance(errors[0], StateError), errors
    assert str(db) in str(errors[0]) and "damaged" in str(errors[0]) and "\n" not in str(errors[0])


# -- 2. a read-only state directory -----------------------------------------------------------------
def test_a_state_directory_on_a_read_only_mount(demo: DemoHistory, tmp_path: Path) -> None:
    with tmpfs(tmp_path / "ro", "4m") as fs:
        make_state(fs / "st", runs=10)
        subprocess.run(["mount", "-o", "remount,ro", str(fs)], check=True)
        line = one_line_error(cli(*argv_test(demo, fs / "st")), fs / "st")
        assert "not writable" in line and "Read-only file system" in line
        line = one_line_error(cli(*argv_test(demo, fs / "new")), fs / "new")
        assert "Read-only file system" in line


def test_a_state_directory_this_user_may_not_write(demo: DemoHistory, tmp_path: Path) -> None:
    prefix = ordinary_user(tmp_path)
    make_state(tmp_path / "st", runs=10)
    (tmp_path / "st").chmod(0o555)
    (tmp_path / "shut").mkdir(mode=0o555)
    try:
        line = one_line_error(cli(*argv_test(demo, tmp_path / "st"), prefix=prefix), tmp_path / "st")
        assert "not writable" in line and "Permission denied" in line
        line = one_line_error(cli(*argv_test(demo, tmp_path / "shut" / "st"), prefix=prefix), tmp_path / "shut" / "st")
        assert "Permission denied" in line
    finally:
        (tmp_path / "st").chmod(0o755)
        (tmp_path / "shut").chmod(0o755)


# -- 3. a full disk ---------------------------------------------------------------------------------
def test_a_full_disk_when_the_database_is_made(demo: DemoHistory, tmp_path: Path) -> None:
    with tmpfs(tmp_path / "full", "512k") as fs:
        fill(fs)
        line = one_line_error(cli(*argv_test(demo, fs / "st")), fs / "st" / "state.sqlite3")
        assert "cannot create the state database" in line and "full" in line
        assert not (fs / "st" / "state.sqlite3").exists()  # no empty file left to be refused later


def test_a_full_disk_when_the_database_is_written(demo: DemoHistory, tmp_path: Path) -> None:
    """An older schema's database on a full disk: its migration (a backup, then new tables) is
    refused in one line, and leaves neither a half backup nor a half migration."""
    with tmpfs(tmp_path / "full", "1m") as fs:
        (fs / "st").mkdir()
        db = fs / "st" / "state.sqlite3"
        db.write_bytes(gzip.decompress(OLD_DB.read_bytes()))
        fill(fs)
        line = one_line_error(cli("reference", str(demo.config), "--state", str(fs / "st"), "-q"), db)
        assert "full" in line
        assert not list((fs / "st").glob("*.bak")) and not list((fs / "st").glob(".*partial"))
        (fs / "filler").unlink()
        proc = cli("reference", str(demo.config), "--state", str(fs / "st"), "-q")
        assert proc.returncode == 0, proc.stderr  # with room again, it is migrated as ever
        assert (fs / "st" / "state.sqlite3.v0.bak").is_file()


def test_a_full_disk_is_a_state_error_for_every_write(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "full", "1m") as fs:
        store = Store(fs / "state.sqlite3")
        fill(fs)
        with pytest.raises(StateError) as err:
            for seed in range(10_000):  # the WAL grows until the disk refuses it
                store.put_runs("run-key", "b" * 40, [RunRecord(seed, "ok", tuple("abcd") * 50, 0, 0.01)])
        store.close()
        assert str(fs / "state.sqlite3") in str(err.value) and "full" in str(err.value)


@pytest.mark.parametrize("command", ["test", "bisect"])
def test_a_full_disk_when_the_built_binary_is_kept(demo: DemoHistory, tmp_path: Path, command: str) -> None:
    """The binary is built, then copied into <state>/kept on a full file system: one line naming
    the kept directory and the reason, not a traceback, and no build recorded for the commit."""
    state = tmp_path / "st"
    (state / "kept").mkdir(parents=True)
    with tmpfs(state / "kept", "64k") as kept:
        fill(kept)
        args = (
            argv_test(demo, state)
            if command == "test"
            else ["bisect", str(demo.config), "--good", demo.good, "--bad", demo.bad, "--state", str(state), "-q"]
        )
        line = one_line_error(cli(*args), kept)
        assert "cannot keep the built" in line and "No space left on device" in line
    con = sqlite3.connect(state / "state.sqlite3")
    try:
        assert con.execute("SELECT COUNT(*) FROM builds").fetchone()[0] == 0
    finally:
        con.close()


# -- 4. the lock path is a directory; the state directory is a file ----------------------------------
def test_a_lock_path_that_is_a_directory(demo: DemoHistory, tmp_path: Path) -> None:
    (tmp_path / "st" / "lock").mkdir(parents=True)
    line = one_line_error(cli(*argv_test(demo, tmp_path / "st")), tmp_path / "st" / "lock")
    assert "is a directory" in line


def test_a_state_directory_that_is_a_file(demo: DemoHistory, tmp_path: Path) -> None:
    (tmp_path / "st").write_text("a file\n")
    line = one_line_error(cli(*argv_test(demo, tmp_path / "st")), tmp_path / "st")
    assert "is a file" in line


# -- 5. config files that are not text ---------------------------------------------------------------
def test_a_binary_config_file(demo: DemoHistory, tmp_path: Path) -> None:
    config = tmp_path / "binary.yaml"
    config.write_bytes(bytes(range(256)) * 64)
    line = one_line_error(cli(*argv_test(demo, tmp_path / "st", config=config)), config)
    assert "not UTF-8" in line


def test_dev_zero_as_the_config(demo: DemoHistory, tmp_path: Path) -> None:
    line = one_line_error(cli(*argv_test(demo, tmp_path / "st", config=Path("/dev/zero")), timeout=60), "/dev/zero")
    assert "not a regular file" in line


def test_a_fifo_as_the_config(demo: DemoHistory, tmp_path: Path) -> None:
    fifo = tmp_path / "config.fifo"
    os.mkfifo(fifo)
    line = one_line_error(cli(*argv_test(demo, tmp_path / "st", config=fifo), timeout=60), fifo)
    assert "FIFO" in line


def test_a_directory_as_the_config(demo: DemoHistory, tmp_path: Path) -> None:
    (tmp_path / "conf.d").mkdir()
    line = one_line_error(cli(*argv_test(demo, tmp_path / "st", config=tmp_path / "conf.d")), tmp_path / "conf.d")
    assert "is a directory" in line


# -- 6. git's reason, kept ---------------------------------------------------------------------------
def test_a_repo_path_that_does_not_exist(demo: DemoHistory, tmp_path: Path) -> None:
    config = config_for_repo(demo, tmp_path / "nowhere", tmp_path / "conf")
    line = one_line_error(cli(*argv_test(demo, tmp_path / "st", config=config)), tmp_path / "nowhere")
    assert line.endswith(f"cannot clone or fetch {tmp_path / 'nowhere'}: no such file or directory")


def test_a_repo_path_that_is_not_a_git_repository(demo: DemoHistory, tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "README").write_text("no git here\n")
    config = config_for_repo(demo, tmp_path / "plain", tmp_path / "conf")
    line = one_line_error(cli(*argv_test(demo, tmp_path / "st", config=config)), tmp_path / "plain")
    assert "not a git repository" in line


def test_a_repo_this_user_may_not_read(demo: DemoHistory, tmp_path: Path) -> None:
    prefix = ordinary_user(tmp_path)
    repo = tmp_path / "shut-repo"
    shutil.copytree(demo.repo, repo)
    config = config_for_repo(demo, repo, tmp_path / "conf")
    repo.chmod(0)
    try:
        line = one_line_error(cli(*argv_test(demo, tmp_path / "st", config=config), prefix=prefix), repo)
        assert "Permission denied" in line
    finally:
        repo.chmod(0o755)


def test_a_repo_owned_by_another_user(demo: DemoHistory, tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root to chown the repository to another uid")
    repo = tmp_path / "their-repo"
    shutil.copytree(demo.repo, repo)
    for path in [repo, *repo.rglob("*")]:
        os.lchown(path, 12345, 12345)
    config = config_for_repo(demo, repo, tmp_path / "conf")
    # no safe.directory from this machine's git config may trust it
    env = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    line = one_line_error(cli(*argv_test(demo, tmp_path / "st", config=config), env=env), repo)
    assert "dubious ownership" in line and f"git config --global --add safe.directory {repo}" in line


# -- 7. a database that is not ours ------------------------------------------------------------------
def _other_sqlite(db: Path) -> None:
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE photos (id INTEGER PRIMARY KEY, name TEXT)")
    con.execute("INSERT INTO photos (name) VALUES ('cat.jpg')")
    con.commit()
    con.close()


NOT_OURS = {
    "empty": (lambda db: db.write_bytes(b""), "empty"),
    "another program's SQLite": (_other_sqlite, "photos"),
    "text": (lambda db: db.write_text("these are my notes\n" * 50), "not an SQLite file"),
}


@pytest.mark.parametrize("kind", sorted(NOT_OURS))
def test_a_database_that_is_not_ours_is_refused_then_moved_aside_with_reset_state(
    demo: DemoHistory, tmp_path: Path, kind: str
) -> None:
    make, why = NOT_OURS[kind]
    st = tmp_path / "st"
    st.mkdir()
    db = st / "state.sqlite3"
    make(db)
    before = db.read_bytes()
    line = one_line_error(cli("reference", str(demo.config), "--state", str(st), "-q"), db)
    assert f"{db} is not a bisectbot database" in line and why in line
    assert line.endswith("pass --reset-state to start it afresh")
    assert db.read_bytes() == before  # refused: not touched
    proc = cli("reference", str(demo.config), "--state", str(st), "-q", "--reset-state")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    [aside] = st.glob("state.sqlite3.bak-*")
    assert aside.read_bytes() == before and "moved aside" in proc.stderr  # kept, never deleted
    store = Store(db)
    assert store.version == SCHEMA_VERSION
    store.close()


def test_reset_state_moves_a_damaged_database_aside(demo: DemoHistory, tmp_path: Path) -> None:
    db = make_state(tmp_path / "st")
    overwrite_page(db, 3)
    proc = cli("reference", str(demo.config), "--state", str(tmp_path / "st"), "-q", "--reset-state")
    assert proc.returncode == 0, proc.stderr
    assert len(list((tmp_path / "st").glob("state.sqlite3.bak-*"))) == 1


def test_reset_state_leaves_a_sound_database_alone(demo: DemoHistory, tmp_path: Path) -> None:
    db = make_state(tmp_path / "st", runs=10)
    proc = cli("reference", str(demo.config), "--state", str(tmp_path / "st"), "-q", "--reset-state")
    assert proc.returncode == 0 and "moved aside" not in proc.stderr, proc.stderr
    assert not list((tmp_path / "st").glob("state.sqlite3.bak-*"))
    store = Store(db)
    assert len(store.runs("run-key", "a" * 40)) == 10
    store.close()


def test_an_older_schema_is_still_migrated_not_refused(demo: DemoHistory, tmp_path: Path) -> None:
    (tmp_path / "st").mkdir()
    db = tmp_path / "st" / "state.sqlite3"
    db.write_bytes(gzip.decompress(OLD_DB.read_bytes()))
    proc = cli("reference", str(demo.config), "--state", str(tmp_path / "st"), "--json", "-", "-q")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["probs"]
    store = Store(db)
    assert store.version == SCHEMA_VERSION
    store.close()
    assert (tmp_path / "st" / "state.sqlite3.v0.bak").is_file()
    assert not list((tmp_path / "st").glob("state.sqlite3.bak-*"))


def test_a_database_of_a_newer_schema_is_one_line(demo: DemoHistory, tmp_path: Path) -> None:
    db = make_state(tmp_path / "st", runs=10)
    con = sqlite3.connect(db)
    con.execute("PRAGMA user_version = 99")
    con.close()
    line = one_line_error(cli("reference", str(demo.config), "--state", str(tmp_path / "st"), "-q"), db)
    assert "written by a newer bisectbot (schema 99" in line
