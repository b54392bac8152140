"""Write the state-database fixture `state.sqlite3.gz` with bisectbot 0.1.0 as it was at commit
4fd5644 (schema 7), the last before 0.2.0 removed keys and extras (docs/upgrading.md): a bisect
measured against the good end (`--reference good`: a control reference, whose config dump held
`reference.control.delta` and `ratio`) killed after its first step.

It must be written by the *old* code, so run it from a copy of 4fd5644 (the file itself only
uses what 4fd5644 had):

    mkdir /tmp/bisectbot-4fd5644 && git archive 4fd5644 | tar -x -C /tmp/bisectbot-4fd5644
    cp tests/data/state-4fd5644-control/make_fixture.py /tmp/bisectbot-4fd5644/
    cd /tmp/bisectbot-4fd5644 && PYTHONPATH=. python3 make_fixture.py /tmp/fx <this directory>

It runs, through the old CLI only, `bisectbot bisect --reference good` killed (SIGKILL) after
its first step, and copies the database (VACUUM INTO, gzipped) and the config next to this file.
"""

from __future__ import annotations

import gzip
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from bisectbot.demo import generate_demo

DEMO = dict(n_commits=12, culprit_index=8, break_index=3, seed=5)  # tests/test_storage.py uses the same


def cli(*args: str) -> subprocess.Popen:
    env = {**os.environ, "CI": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "bisectbot.cli", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def main(work: Path, here: Path) -> None:
    import bisectbot

    assert bisectbot.__version__ == "0.1.0", bisectbot.__file__
    hist = generate_demo(work / "demo", **DEMO)
    state = work / "state"
    args = ["--good", hist.good, "--bad", "main", "--reference", "good", "--state", str(state)]
    proc = cli("bisect", str(hist.config), *args)
    db = state / "state.sqlite3"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        if db.exists():
            with sqlite3.connect(db) as con:
                tables = {name for (name,) in con.execute("SELECT name FROM sqlite_master")}
                if (
                    "verdicts" in tables
                    and con.execute("SELECT COUNT(*) FROM verdicts WHERE role='step'").fetchone()[0]
                ):
                    break
        time.sleep(0.05)
    assert proc.poll() is None, "the bisect finished before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    plain = work / "state-copy.sqlite3"
    plain.unlink(missing_ok=True)
    with sqlite3.connect(db) as con:
        assert con.execute("PRAGMA user_version").fetchone()[0] == 7
        con.execute("VACUUM INTO ?", (str(plain),))
    out = here / "state.sqlite3.gz"
    out.write_bytes(gzip.compress(plain.read_bytes(), mtime=0))
    shutil.copy(hist.config, here / "specdemo.yaml")
    print(f"wrote {out} ({out.stat().st_size} bytes) from {state}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]).resolve())
