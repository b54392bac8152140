"""Bisection on a real two-worker Dask cluster (separate worker processes): the same answer as
the serial path in fewer rounds; a worker with another compiler is refused; a worker killed
mid-build has its build redone elsewhere; a coordinator killed mid-round resumes."""

from __future__ import annotations

import json
import math
import os
import signal
import sqlite3
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from bisectbot.cluster import connect
from bisectbot.config import load_config
from bisectbot.demo import DemoHistory, generate_demo
from bisectbot.errors import ClusterError
from bisectbot.events import Event, Events, RoundStarted, WorkerDone
from bisectbot.jobs import lifecycle as jobs
from bisectbot.records.commits import Ask
from bisectbot.records.reports import BisectStatus
from bisectbot.state.statedir import StateDir
from bisectbot.statistics.outcome import Verdict

from conftest import TOOLCHAIN, bisectbot_argv, require, subprocess_env

# Dask clusters of real worker processes building the demo: minutes, so after the default suite.
pytestmark = pytest.mark.heavy


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> DemoHistory:
    require(*TOOLCHAIN)
    return generate_demo(
        tmp_path_factory.mktemp("cluster"), n_commits=30, culprit_index=17, break_index=4, seed=1, outside=0.5
    )


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    c = connect(2, None)
    yield c
    cluster = c.cluster
    c.close()
    cluster.close()


@pytest.mark.longest  # the longest tier: by hand, not in CI (README: Tests)
def test_two_workers_name_the_same_commit_as_the_serial_path_in_fewer_rounds(
    history: DemoHistory, client: Any, tmp_path: Path
) -> None:
    cfg = load_config(history.config)
    reports = {}
    seen: list[Event] = []
    for name, cl in (("serial", None), ("cluster", client)):
        with StateDir(tmp_path / name) as state:
            session = jobs.Session(cfg, state, Events(seen.append), cluster=cl)
            reports[name] = jobs.run_bisect(session, jobs.plan_bisect(session, history.good, "main"))
            if cl is not None:
                con = sqlite3.connect(state.root / "state.sqlite3")
                built = con.execute("SELECT sha, host, compiler FROM builds").fetchall()
    serial, cluster = reports["serial"], reports["cluster"]
    assert serial.status is cluster.status is BisectStatus.FOUND
    assert serial.first_bad == cluster.first_bad == history.culprit
    assert cluster.workers == 2 and serial.workers == 1
    assert serial.rounds is not None and cluster.rounds is not None and cluster.rounds < serial.rounds
    assert cluster.searched is not None and cluster.rounds <= math.ceil(math.log(cluster.searched, 3)) + 2
    assert serial.builds <= serial.builds_bound
    # every build the cluster made is recorded with its worker and compiler
    assert {sha for sha, *_ in built} >= {v.sha for v in cluster.verdicts}
    assert {host for _, host, _ in built} <= {"0", "1"} and all(comp for *_, comp in built)
    rounds = [e for e in seen if isinstance(e, RoundStarted)]
    assert rounds and all(len(e.shas) <= 2 for e in rounds)
    assert {e.worker for e in seen if isinstance(e, WorkerDone)} == {"0", "1"}  # both worked


def test_a_worker_with_another_compiler_is_refused(history: DemoHistory, client: Any, tmp_path: Path) -> None:
    cfg = load_config(history.config)
    with StateDir(tmp_path / "st") as state:
        session = jobs.Session(cfg, state, cluster=client)
        tester = session.tester
        tester.compiler = "g++ 99.0 | cmake version 9"  # type: ignore[attr-defined]
        with pytest.raises(ClusterError, match=r"worker \d on .* compiles with .*refused"):
            tester.verdict(history.good, Ask(role="test", alpha=1e-3, beta=1e-3))
        assert state.store.build(tester.cluster_build_key(), history.good) is None  # type: ignore[attr-defined]


def test_a_build_the_coordinator_never_recorded_is_found_on_its_worker(
    history: DemoHistory, client: Any, tmp_path: Path
) -> None:
    """A coordinator killed while a round ran never recorded what the workers built: the next
    run asks the workers' own databases and sends each commit to the worker that holds it."""
    cfg = load_config(history.config)
    shas = list(history.commits[5:9])
    with StateDir(tmp_path / "st") as state:
        tester = jobs.Session(cfg, state, cluster=client).tester
        first = tester.build_many(shas)  # type: ignore[attr-defined]
        assert all(b.ok for b in first)
        hosts = {
            sha: state.store.build(tester.cluster_build_key(), sha).host  # type: ignore[attr-defined,union-attr]
            for sha in shas
        }
        assert set(hosts.values()) == {"0", "1"}  # both workers built some
        for sha in shas:  # as if the coordinator had died before the results came back
            state.store.forget_build(tester.cluster_build_key(), sha)  # type: ignore[attr-defined]
        seen: list[WorkerDone] = []
        tester.events = Events(lambda e: seen.append(e) if isinstance(e, WorkerDone) else None)
        again = tester.build_many(shas[::-1])  # type: ignore[attr-defined]  # not placed as before by chance
    assert [b.sha for b in again] == shas[::-1] and all(b.ok for b in again)
    assert {e.sha: e.worker for e in seen} == hosts  # each went back to its builder...
    assert not any(e.built for e in seen)  # ...which reused its build
    assert sum(_count_worker_builds(tmp_path / "st" / "workers").values()) == len(shas)


def _worker_logs(root: Path, sha: str) -> dict[str, Path]:
    return {p.parent.parent.name.removeprefix("worker-"): p for p in root.glob(f"worker-*/logs/build-*-{sha}.log")}


@pytest.mark.longest  # the longest tier: by hand, not in CI (README: Tests)
def test_a_worker_killed_mid_build_has_the_build_redone_elsewhere(history: DemoHistory, tmp_path: Path) -> None:
    cfg = load_config(history.config)
    c = connect(2, None)
    try:
        with StateDir(tmp_path / "st") as state:
            session = jobs.Session(cfg, state, cluster=c)
            tester = session.tester
            out: dict[str, Any] = {}
            sha = history.commits[9]
            t = threading.Thread(
                target=lambda: out.update(v=tester.verdict(sha, Ask(role="test", alpha=1e-3, beta=1e-3)))
            )
            t.start()
            deadline = time.monotonic() + 60
            while not (logs := _worker_logs(session.worker_root, sha)) and time.monotonic() < deadline:
                time.sleep(0.02)
            assert logs, "no worker started the build"
            victim = next(iter(logs))
            pids = c.run(os.getpid)
            addr = next(a for a, info in c.scheduler_info()["workers"].items() if str(info["name"]) == victim)
            os.kill(pids[addr], signal.SIGKILL)  # mid-build
            t.join(timeout=300)
            assert not t.is_alive()
            v = out["v"]
            assert v.verdict in (Verdict.GOOD, Verdict.BAD) and v.runs > 0  # not a SKIP
            rec = state.store.build(tester.cluster_build_key(), sha)  # type: ignore[attr-defined]
            assert rec is not None and rec.ok
    finally:
        cluster = c.cluster
        c.close()
        cluster.close()


def _count_worker_builds(root: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for db in root.glob("worker-*/state.sqlite3"):
        for (sha,) in sqlite3.connect(db).execute("SELECT sha FROM builds WHERE status='ok'"):
            counts[sha] = counts.get(sha, 0) + 1
    return counts


@pytest.mark.longest  # the longest tier: by hand, not in CI (README: Tests)
def test_a_coordinator_killed_mid_round_resumes(history: DemoHistory, tmp_path: Path) -> None:
    state = tmp_path / "st"
    args = [
        "bisect",
        str(history.config),
        "--good",
        history.good,
        "--bad",
        "main",
        "--workers",
        "2",
        "--state",
        str(state),
        "--json",
        str(tmp_path / "r.json"),
        "-q",
    ]
    proc = subprocess.Popen(
        bisectbot_argv(*args),
        env=subprocess_env(CI="1"),
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    db = state / "state.sqlite3"
    deadline = time.monotonic() + 300
    killed = False
    while time.monotonic() < deadline and proc.poll() is None:
        try:  # kill everything once the ends and a first round have stored runs
            # read-only: a plain connect would create an empty file the bisect then refuses as not its own
            con = sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True)
            built = con.execute("SELECT COUNT(*) FROM builds").fetchone()[0]
            steps = con.execute("SELECT COUNT(DISTINCT sha) FROM runs").fetchone()[0]
            con.close()
        except sqlite3.Error:
            built = steps = 0
        if built >= 2 and steps >= 3:  # the ends built (more builds happen on the workers), a round stored
            os.killpg(proc.pid, signal.SIGKILL)
            killed = True
            break
        time.sleep(0.05)
    proc.wait(timeout=60)
    assert killed, f"the bisect ended before it could be killed: {proc.stderr.read().decode()[-2000:]}"  # type: ignore[union-attr]
    before = _count_worker_builds(state / "workers")
    runs_before = sqlite3.connect(db).execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    done = subprocess.run(
        bisectbot_argv(*args), env=subprocess_env(CI="1"), capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["status"] == "found" and report["first_bad"] == history.culprit
    # every run executed now is a new row: no seed stored before the kill was run again
    runs_after = sqlite3.connect(db).execute("SELECT COUNT(*) FROM runs").fetchone()[0]
    assert 0 < report["runs_executed"] <= runs_after - runs_before
    after = _count_worker_builds(state / "workers")
    assert all(after[sha] == 1 for sha in before), (before, after)  # no finished build made again


def test_cluster_options_fail_in_one_line(history: DemoHistory, tmp_path: Path) -> None:
    base = ["bisect", str(history.config), "--good", history.good, "--bad", "main", "--state", str(tmp_path / "st")]
    both = subprocess.run(
        bisectbot_argv(*base, "--workers", "2", "--scheduler", "tcp://127.0.0.1:1"),
        capture_output=True,
        text=True,
        env=subprocess_env(CI="1"),
        timeout=120,
    )
    assert both.returncode == 2 and "not both" in both.stderr
    gone = subprocess.run(
        bisectbot_argv(*base, "--scheduler", "tcp://127.0.0.1:9"),
        capture_output=True,
        text=True,
        env=subprocess_env(CI="1"),
        timeout=120,
    )
    assert gone.returncode == 2, gone.stderr
    assert (
        gone.stderr.strip()
        .splitlines()[-1]
        .startswith("bisectbot: error: cannot reach the Dask scheduler at tcp://127.0.0.1:9")
    )


def test_like_the_good_end_on_two_workers_names_the_same_commit_as_the_serial_path(
    history: DemoHistory, client: Any, tmp_path: Path
) -> None:
    """`reference: good` on a cluster: the workers make the runs, the coordinator pairs each with
    the control's run on its seed (the control built and run here) and reaches the verdicts;
    the same commit is found as serially, confirmed, and the report says so."""
    cfg = load_config(history.config).with_reference("good")
    reports = {}
    for name, cl in (("serial", None), ("cluster", client)):
        with StateDir(tmp_path / name) as state:
            session = jobs.Session(cfg, state, cluster=cl)
            reports[name] = jobs.run_bisect(session, jobs.plan_bisect(session, history.good, "main"))
    serial, cluster = reports["serial"], reports["cluster"]
    assert serial.status is cluster.status is BisectStatus.FOUND, (serial.message, cluster.message)
    assert serial.first_bad == cluster.first_bad == history.culprit
    assert cluster.workers == 2 and "like the good end" in cluster.reference.source
    assert cluster.control_runs and cluster.control_runs > 0
    assert any("against" in v.reason and "control runs on the same seeds" in v.reason for v in cluster.verdicts)
