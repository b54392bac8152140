"""Every run in a jail (issue 25): real processes that misbehave the ways a program under test
can — leave children behind that hold its stdout, leave its session, hang with them, print
without end — and a real bisect whose program does it on every run.

Processes are counted in /proc by a marker in their command line (a sleep of an odd length)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml

from bisectbot.demo import DemoHistory
from bisectbot.processes.procs import run, stop_drivers
from tests.conftest import bisectbot_argv, subprocess_env

CAP = 1 << 20


def alive(marker: str) -> list[int]:
    """Processes whose command line has `marker` (zombies are not alive)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker in cmdline and state != "Z":
            found.append(int(name))
    return found


def test_a_child_that_leaves_the_session_holding_stdout_neither_stalls_the_run_nor_survives_it() -> None:
    res = run(["sh", "-c", "setsid sleep 1001.25 & echo out"], timeout=60, cap=CAP)
    assert res.returncode == 0 and res.stdout == "out\n" and res.seconds < 30, res
    assert alive("sleep 1001.25") == []


def test_what_a_run_leaves_running_is_killed_whether_or_not_it_holds_the_pipe() -> None:
    argv = [
        "sh",
        "-c",
        "setsid sleep 1001.5 >/dev/null 2>&1 & (setsid sh -c 'sleep 1001.5' </dev/null >/dev/null 2>&1 &); "
        "sleep 1001.5 & echo done",
    ]
    res = run(argv, timeout=60, cap=CAP)
    assert res.returncode == 0 and res.stdout == "done\n", res
    assert alive("1001.5") == []


def test_the_deadline_covers_the_output_and_kills_the_whole_tree() -> None:
    start = time.monotonic()
    res = run(["sh", "-c", "setsid sleep 1001.75 & echo started; sleep 1001.75"], timeout=1, cap=CAP)
    assert res.timed_out and res.stdout == "started\n", res
    assert time.monotonic() - start < 20  # bounded by the deadline, not by the sleeps
    assert alive("1001.75") == []


def test_a_program_that_closes_its_output_and_hangs_is_killed_at_the_deadline_not_later() -> None:
    # after its pipes close, the driver waits for the exit itself: that wait and the one after
    # it share what is left of the deadline (each taking all of it would double the deadline)
    start = time.monotonic()
    res = run(["sh", "-c", "echo started; exec >&- 2>&-; sleep 1001.9"], timeout=3, cap=CAP)
    took = time.monotonic() - start
    assert res.timed_out and res.stdout == "started\n", res
    assert took < 5.5, took  # the deadline (3 s) and some slack, well short of twice it
    assert alive("1001.9") == []


def test_output_past_the_cap_stops_the_run_at_once_and_keeps_only_the_cap() -> None:
    res = run(["sh", "-c", "yes; echo never"], timeout=60, cap=CAP)
    assert res.too_large and res.returncode is None and len(res.stdout) == CAP, (res.stopped, len(res.stdout))
    err = run(["sh", "-c", "yes >&2"], timeout=60, cap=CAP)
    assert err.too_large and len(err.stderr) == CAP
    fine = run(["sh", "-c", "head -c 1048576 /dev/zero"], timeout=60, cap=CAP)  # exactly the cap: fine
    assert fine.returncode == 0 and not fine.too_large and len(fine.stdout) == CAP


def test_output_read_in_batches_comes_back_whole_and_in_order() -> None:
    """The driver lets output gather in the pipes between reads (a few ms): a program that writes
    line by line, far past a pipe's size, on both streams at once, is read whole, in order, and
    is not cut (a driver that blocked would hit the run's deadline: no exit status)."""
    prog = (
        "import sys\n"
        "for i in range(120000):\n"
        "    sys.stdout.write('%d\\n' % i); sys.stdout.flush()\n"
        "    if i % 3 == 0: sys.stderr.write('e%d\\n' % i); sys.stderr.flush()\n"
    )
    res = run([sys.executable, "-c", prog], timeout=120, cap=8 * CAP)
    assert res.returncode == 0 and not res.stopped, res.stopped
    assert res.stdout == "".join(f"{i}\n" for i in range(120000))
    assert res.stderr == "".join(f"e{i}\n" for i in range(0, 120000, 3))
    # and a run that exits between writes is answered at its exit, not after a batch's wait
    quick = [run(["sh", "-c", "echo a; echo b >&2; echo c"], timeout=60, cap=CAP) for _ in range(20)]
    assert all(r.stdout == "a\nc\n" and r.stderr == "b\n" for r in quick)


def test_exit_statuses_and_start_failures_come_back_as_they_were() -> None:
    codes = [run(["sh", "-c", f"echo {i}; exit {i % 3}"], timeout=60, cap=CAP).returncode for i in range(60)]
    assert codes == [i % 3 for i in range(60)]
    missing = run(["/no/such/program"], timeout=60, cap=CAP)
    assert missing.returncode == 127 and "cannot start /no/such/program" in missing.stderr
    killed = run(["sh", "-c", "kill -9 $$"], timeout=60, cap=CAP)
    assert killed.returncode == -9


def test_a_driver_ends_with_the_thread_that_started_it_and_takes_its_run_along() -> None:
    """The thread that runs programs ends (a pool shrinks, the bot stops) while a run is in
    flight: its driver kills that run's tree and exits; nothing is left."""
    from bisectbot.processes import procs

    seen: list[int] = []

    def worker() -> None:
        driver = procs._driver(None)
        driver._start()
        assert driver.proc is not None
        seen.append(driver.proc.pid)
        driver.proc.stdin.write(  # type: ignore[union-attr]
            (
                json.dumps(
                    {
                        "argv": ["sh", "-c", "setsid sleep 1002.25 & sleep 1002.25"],
                        "cwd": "/",
                        "env": {"PATH": "/usr/bin:/bin"},
                        "timeout": 600,
                        "cap": CAP,
                    }
                )
                + "\n"
            ).encode()
        )
        driver.proc.stdin.flush()  # type: ignore[union-attr]
        deadline = time.monotonic() + 10
        while len(alive("sleep 1002.25")) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    deadline = time.monotonic() + 10
    while alive("sleep 1002.25") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert alive("sleep 1002.25") == []
    procs._trusted.pop(thread.ident or 0, None)

    def driver_gone() -> bool:  # exited (a zombie until reaped) or reaped
        try:
            return "Z" in Path(f"/proc/{seen[0]}/stat").read_text().split()[2]
        except FileNotFoundError:
            return True

    # it exits after killing its run's tree: allow it the moment that takes, as the runs above
    while not driver_gone() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert driver_gone()


def test_stopping_the_drivers_stops_the_runs_in_flight() -> None:
    got: list = []
    thread = threading.Thread(
        target=lambda: got.append(run(["sh", "-c", "setsid sleep 1002.5 & sleep 1002.5"], timeout=600, cap=CAP))
    )
    thread.start()
    deadline = time.monotonic() + 10
    while len(alive("sleep 1002.5")) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    stop_drivers()
    thread.join(timeout=30)
    assert got and got[0].returncode is None, got
    assert alive("sleep 1002.5") == []


def _wrapped(history: DemoHistory, tmp_path: Path, shell: str, name: str, **run_cfg: object) -> Path:
    """The demo's config with its command run through `sh -c shell` (the program is "$@")."""
    data = yaml.safe_load(history.config.read_text())
    data["repo"]["path"] = str(history.repo)
    data["run"]["argv"] = ["sh", "-c", shell, "sh", *data["run"]["argv"]]
    data["run"].update(run_cfg)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.heavy  # after the default suite (README: Tests)
def test_a_bisect_whose_program_leaves_a_child_holding_stdout_on_every_run(
    small_demo: DemoHistory, tmp_path: Path
) -> None:
    """Issue 25's probe: every run starts `setsid sleep 1000 &` with the program's stdout. The
    bisect names the right commit without one run waiting for its deadline (60 s: a run that
    waited for the pipe would time out), and no process of the program remains."""
    cfg = _wrapped(small_demo, tmp_path, 'setsid sleep 1003.25 & exec "$@"', "leaky.yaml", timeout=60)
    out = tmp_path / "r.json"
    argv = ["bisect", str(cfg), "--good", small_demo.good, "--bad", "main", "--state", str(tmp_path / "st")]
    proc = subprocess.run(
        bisectbot_argv(*argv, "--json", str(out), "--no-arms"),
        capture_output=True,
        text=True,
        timeout=900,
        env=subprocess_env(CI="1"),
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    assert report["first_bad"] == small_demo.culprit
    failures: dict[str, int] = {}
    for verdict in report["verdicts"]:
        for kind, n in (verdict.get("failures") or {}).items():
            failures[kind] = failures.get(kind, 0) + n
    assert not failures.get("timeout"), failures
    assert report["runs"] > 100
    assert alive("sleep 1003.25") == []


@pytest.mark.heavy  # after the default suite (README: Tests)
def test_two_gigabytes_on_one_seed_cost_the_bot_no_memory(small_demo: DemoHistory, tmp_path: Path) -> None:
    """One seed prints 2 GB: that run is `output-too-large`, the verdict is reached, and the
    bot's peak memory (its own and its children's, measured by a parent that only waits for it)
    stays under 300 MB. The build is made first, outside the measurement."""
    state = tmp_path / "st"
    plain = _wrapped(small_demo, tmp_path, 'exec "$@"', "plain.yaml")
    first = subprocess.run(
        bisectbot_argv("test", str(plain), "--commit", small_demo.good, "--state", str(state), "--json", "-"),
        capture_output=True,
        text=True,
        timeout=600,
        env=subprocess_env(CI="1"),
    )
    assert first.returncode == 0, first.stderr
    once = tmp_path / "once"  # mkdir is atomic: exactly one run (one seed) prints the 2 GB
    shell = f'mkdir {once} 2>/dev/null && head -c 2000000000 /dev/zero; exec "$@"'
    loud = _wrapped(small_demo, tmp_path, shell, "loud.yaml")
    argv = bisectbot_argv("test", str(loud), "--commit", small_demo.good, "--state", str(state), "--json", "-")
    measure = (
        "import json, resource, subprocess, sys\n"
        "p = subprocess.run(json.loads(sys.argv[1]), capture_output=True, text=True)\n"
        "print(json.dumps({'rc': p.returncode, 'out': p.stdout, 'err': p.stderr,\n"
        "                  'maxrss_kb': resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", measure, json.dumps(argv)],
        capture_output=True,
        text=True,
        timeout=600,
        env=subprocess_env(CI="1"),
    )
    got = json.loads(proc.stdout)
    assert got["rc"] == 0, got["err"]
    result = json.loads(got["out"])
    assert result["verdict"] == "good" and result["failures"] == {"output-too-large": 1}, result
    assert got["maxrss_kb"] < 300 * 1024, got["maxrss_kb"]


# --------------------------------------------------------------------------- SIGTERM, SIGHUP


def _recorded(state: Path, word: str) -> bool:
    """A child whose argv has `word` is recorded as running in the state directory."""
    for path in (state / "procs").glob("*.json") if (state / "procs").is_dir() else []:
        try:
            if any(word in arg for arg in json.loads(path.read_text())["argv"]):
                return True
        except (OSError, ValueError, KeyError):
            pass
    return False


def _stored(state: Path, table: str) -> dict:
    import sqlite3

    db = state / "state.sqlite3"
    if not db.exists():
        return {}
    con = sqlite3.connect(db)
    try:
        if table == "builds":
            return {r[0]: r[1] for r in con.execute("SELECT sha, created FROM builds")}
        # the experiment too: the working end's second runs (a rerun key of their own) are other rows
        return {r[:3]: r[3] for r in con.execute("SELECT run_key, sha, seed, created FROM runs")}
    except sqlite3.OperationalError:  # the schema is not there yet
        return {}
    finally:
        con.close()


def _stop_when(tmp_path: Path, cfg: Path, history: DemoHistory, ready, signum: int) -> tuple[Path, list[str]]:  # noqa: ANN001
    """Start a bisect, send `signum` once `ready(state)` holds; its exit code and stderr checked
    by the caller. Returns the state directory and the bisect's argv."""
    import signal

    state = tmp_path / "st"
    argv = ["bisect", str(cfg), "--good", history.good, "--bad", "main", "--state", str(state)]
    argv += ["--json", str(tmp_path / "r.json"), "--no-arms"]
    proc = subprocess.Popen(
        bisectbot_argv(*argv), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=subprocess_env(CI="1")
    )
    deadline = time.monotonic() + 300
    while proc.poll() is None and not ready(state) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert proc.poll() is None, "the bisect ended before it could be stopped"
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=120)
    name = signal.Signals(signum).name
    assert proc.returncode == 128 + signum, (proc.returncode, err)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert lines[-1] == f"bisectbot: stopping ({name}); rerun the same command to resume", err
    assert not any("Traceback" in ln for ln in lines), err
    return state, argv


@pytest.mark.heavy  # after the default suite (README: Tests)
def test_sigterm_during_a_build_stops_it_and_a_rerun_redoes_only_that_build(
    small_demo: DemoHistory, tmp_path: Path
) -> None:
    import signal

    cfg = _wrapped(small_demo, tmp_path, 'exec "$@"', "plain.yaml")
    state, argv = _stop_when(tmp_path, cfg, small_demo, lambda st: _recorded(st, "--build"), signal.SIGTERM)
    assert alive(str(state)) == []  # no compiler, no cmake, no run of ours
    before = _stored(state, "builds")
    resumed = subprocess.run(
        bisectbot_argv(*argv), capture_output=True, text=True, timeout=900, env=subprocess_env(CI="1")
    )
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["first_bad"] == small_demo.culprit
    after = _stored(state, "builds")
    assert all(after[sha] == t for sha, t in before.items())  # finished builds were not redone


@pytest.mark.heavy  # after the default suite (README: Tests)
@pytest.mark.parametrize("signame", ["SIGTERM", "SIGHUP"])
def test_a_stop_signal_during_runs_stops_them_and_a_rerun_runs_no_stored_seed_again(
    small_demo: DemoHistory, tmp_path: Path, signame: str
) -> None:
    import signal

    marker = "sleep 1004.25"
    cfg = _wrapped(small_demo, tmp_path, f'setsid {marker} & exec "$@"', "leaky.yaml")
    signum = getattr(signal, signame)
    state, argv = _stop_when(tmp_path, cfg, small_demo, lambda st: len(_stored(st, "runs")) > 50, signum)
    assert alive(str(state)) == [] and alive(marker) == []
    before = _stored(state, "runs")
    resumed = subprocess.run(
        bisectbot_argv(*argv), capture_output=True, text=True, timeout=900, env=subprocess_env(CI="1")
    )
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads((tmp_path / "r.json").read_text())["first_bad"] == small_demo.culprit
    after = _stored(state, "runs")
    assert all(after[key] == t for key, t in before.items())  # no stored seed was run again
    assert alive(marker) == []


# --------------------------------------------------------------------------- files runs write


@pytest.mark.heavy  # after the default suite (README: Tests)
def test_a_log_file_the_runs_append_to_is_not_an_input_a_restart_reruns_nothing(
    small_demo: DemoHistory, tmp_path: Path
) -> None:
    """Issue 25's probe: a wrapper named in argv appends to its log file on every run. Before,
    the log's content was part of the stored-run key, so a restart reran every seed."""
    log = tmp_path / "wrapper.log"
    data = yaml.safe_load(small_demo.config.read_text())
    data["repo"]["path"] = str(small_demo.repo)
    data["run"]["argv"] = ["sh", "-c", 'log=$1; shift; echo "$*" >> "$log"; exec "$@"', "sh", str(log)]
    data["run"]["argv"] += yaml.safe_load(small_demo.config.read_text())["run"]["argv"]
    cfg = tmp_path / "logged.yaml"
    cfg.write_text(yaml.safe_dump(data))
    argv = ["bisect", str(cfg), "--good", small_demo.good, "--bad", "main", "--state", str(tmp_path / "st")]
    argv += ["--json", str(tmp_path / "r.json"), "--no-arms"]
    reports = []
    for _ in range(2):
        proc = subprocess.run(
            bisectbot_argv(*argv), capture_output=True, text=True, timeout=900, env=subprocess_env(CI="1")
        )
        assert proc.returncode == 0, proc.stderr
        reports.append(json.loads((tmp_path / "r.json").read_text()))
    first, again = reports
    assert first["first_bad"] == again["first_bad"] == small_demo.culprit
    assert first["runs_executed"] > 100 and again["runs_executed"] == 0, (first["runs_executed"], again)
    # the wrapper did write it, once per run executed (a run killed before its wrapper wrote, on a
    # loaded machine a timeout, counts as executed and failed)
    failed = sum(sum(v["failures"].values()) for v in first["verdicts"])
    assert first["runs_executed"] - failed <= len(log.read_text().splitlines()) <= first["runs_executed"]


@pytest.mark.heavy  # three bisects of the demo, about 45 s: after the default suite (README: Tests)
def test_run_inputs_names_the_files_that_key_the_runs(small_demo: DemoHistory, tmp_path: Path) -> None:
    """`run.inputs` says which argv files are inputs: editing one of those reruns, editing a
    file the argv names but the list leaves out does not."""
    model, notes = tmp_path / "model.txt", tmp_path / "notes.txt"
    model.write_text("v1")
    notes.write_text("n1")
    data = yaml.safe_load(small_demo.config.read_text())
    data["repo"]["path"] = str(small_demo.repo)
    count = tmp_path / "count"  # inside the script text: not a file the argv names
    data["run"]["argv"] = ["sh", "-c", f'echo >> {count}; shift 2; exec "$@"', "sh", str(model), str(notes)]
    data["run"]["argv"] += yaml.safe_load(small_demo.config.read_text())["run"]["argv"]
    data["run"]["inputs"] = [str(model)]
    cfg = tmp_path / "inputs.yaml"
    cfg.write_text(yaml.safe_dump(data))
    argv = ["test", str(cfg), "--commit", small_demo.good, "--state", str(tmp_path / "st"), "--json", "-"]

    def lines() -> int:
        return len(count.read_text().splitlines()) if count.exists() else 0

    def executed() -> int:
        before = lines()
        proc = subprocess.run(
            bisectbot_argv(*argv), capture_output=True, text=True, timeout=600, env=subprocess_env(CI="1")
        )
        assert proc.returncode == 0, proc.stderr
        return lines() - before

    assert executed() > 0
    notes.write_text("n2")
    assert executed() == 0
    model.write_text("v2")
    assert executed() > 0


def test_leftovers_that_leave_their_session_later_or_spread_wide_are_killed_too() -> None:
    """Cases the jail was not written around: a child that waits before leaving the session
    (it is still in the run's group when the program exits, and setsid only afterwards would
    escape a group kill), and eight nested trees that each left the session at once."""
    late = run(["sh", "-c", "(sleep 0.3; setsid sleep 1005.75) >/dev/null 2>&1 & echo x"], timeout=60, cap=CAP)
    wide = run(
        ["sh", "-c", 'for i in 1 2 3 4 5 6 7 8; do setsid sh -c "sleep 1005.5 & sleep 1005.5" & done; echo y'],
        timeout=60,
        cap=CAP,
    )
    assert (late.returncode, late.stdout, wide.returncode, wide.stdout) == (0, "x\n", 0, "y\n")
    time.sleep(0.6)  # past the moment the late child would have left its session
    assert alive("1005.75") == [] and alive("1005.5") == []
