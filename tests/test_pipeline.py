"""The whole pipeline on real things: a generated git history, real cmake + g++ builds, real
processes, the real CLI. No mock of git, cmake or subprocess."""

from __future__ import annotations

import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from bisectbot.config.seeds import commit_seed_index
from bisectbot.demo import DemoHistory

from conftest import bisectbot_argv, subprocess_env


def cli(*args: str, timeout: float = 600, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        bisectbot_argv(*args), capture_output=True, text=True, timeout=timeout, env=subprocess_env(CI="1"), cwd=cwd
    )


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("bisectbot: error:")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.fixture(scope="module")
def bisected(small_demo: DemoHistory, tmp_path_factory: pytest.TempPathFactory) -> dict:
    state = tmp_path_factory.mktemp("state-full")
    out = state / "report.json"
    proc = cli(
        "bisect",
        str(small_demo.config),
        "--good",
        small_demo.good,
        "--bad",
        "main",
        "--state",
        str(state),
        "--json",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(out.read_text())
    report["_stdout"] = proc.stdout
    return report


@pytest.mark.heavy  # whole bisects or long simulations, 4 s or more: after the default suite (README: Tests)
def test_bisect_names_the_planted_commit(bisected: dict, small_demo: DemoHistory) -> None:
    assert bisected["status"] == "found"
    assert bisected["first_bad"] == small_demo.culprit
    n = len(small_demo.commits)
    assert bisected["commits"] == n
    assert bisected["builds"] <= math.ceil(math.log2(n)) + 3
    assert bisected["confidence"] >= 0.99
    for v in bisected["verdicts"]:
        assert {"commit", "verdict", "runs"} <= set(v)
        assert v["commit"] == v["sha"] and len(v["commit"]) == 40
    roles = [v["role"] for v in bisected["verdicts"]]
    assert roles[:2] == ["bad-endpoint", "good-endpoint"]
    assert roles[-2:] == ["confirm-culprit", "confirm-parent"]  # the change test, on fresh seeds
    assert isinstance(bisected["runs"], int) and bisected["runs"] > 0
    # the summary names the culprit, the builds used and how to reproduce
    out = bisected["_stdout"]
    assert small_demo.culprit[:12] in out and "builds" in out and "bisectbot bisect" in out


def test_build_break_is_skipped_not_guessed(small_demo: DemoHistory, tmp_path: Path) -> None:
    out = tmp_path / "t.json"
    proc = cli(
        "test",
        str(small_demo.config),
        "--commit",
        small_demo.build_break,
        "--state",
        str(tmp_path / "st"),
        "--json",
        str(out),
    )
    assert proc.returncode == 4, proc.stderr
    result = json.loads(out.read_text())
    assert result["verdict"] == "skip" and "build failed" in result["reason"]
    log = cli("build-log", str(small_demo.config), "--commit", small_demo.build_break, "--state", str(tmp_path / "st"))
    assert log.returncode == 0 and "error" in log.stdout.lower()


@pytest.mark.heavy  # whole bisects or long simulations, 4 s or more: after the default suite (README: Tests)
def test_test_command_good_and_bad(small_demo: DemoHistory, tmp_path: Path) -> None:
    state = str(tmp_path / "st")
    good = cli("test", str(small_demo.config), "--commit", small_demo.good, "--state", state, "--json", "-")
    assert good.returncode == 0, good.stderr
    result = json.loads(good.stdout)
    assert result["verdict"] == "good" and result["commit"] == small_demo.good
    assert set(result["counts"]) >= {"a", "b", "c"}
    # every run consumed is counted once: in a category (missed included) or as a failure,
    # and the demo's sequential seeds are exactly the span the verdict reports
    detail = result["detail"]
    assert sum(result["counts"].values()) + sum(result["failures"].values()) == result["runs"]
    first = commit_seed_index(small_demo.good, 0, 0)  # the commit's own seeds
    assert detail["seeds"] == [first, first + result["runs"] - 1]
    bad = cli("test", str(small_demo.config), "--commit", "main", "--state", state, "--json", "-")
    assert bad.returncode == 1, bad.stderr
    result = json.loads(bad.stdout)
    assert result["verdict"] == "bad" and result["runs"] < 100
    # testing again replays the database: no new build, no new run
    again = cli("test", str(small_demo.config), "--commit", "main", "--state", state, "--json", "-")
    assert json.loads(again.stdout)["detail"]["executed"] == 0
    assert json.loads(again.stdout)["builds"] == 0


@pytest.mark.parametrize(
    "args, expected",
    [
        (("--good", "no-such-ref", "--bad", "main"), "'no-such-ref' does not resolve"),
        (("--good", "main", "--bad", "main~3"), "--good and --bad swapped?"),
        (("--good", "$(touch pwned)", "--bad", "main"), "does not resolve"),
        (("--good", "--upload-pack=touch pwned", "--bad", "main"), "refusing ref"),
    ],
)
def test_bad_refs_are_one_line_errors(small_demo: DemoHistory, tmp_path: Path, args: tuple, expected: str) -> None:
    proc = cli("bisect", str(small_demo.config), *args, "--state", str(tmp_path / "st"))
    assert proc.returncode == 2
    assert expected in one_line_error(proc)
    assert not Path("pwned").exists()


def test_good_that_tests_bad_is_refused(small_demo: DemoHistory, tmp_path: Path) -> None:
    after_culprit = small_demo.commits[small_demo.commits.index(small_demo.culprit) + 1]
    proc = cli(
        "bisect", str(small_demo.config), "--good", after_culprit, "--bad", "main", "--state", str(tmp_path / "st")
    )
    assert proc.returncode == 4
    line = one_line_error(proc)
    assert "good ref" in line and "tests BAD" in line


def test_malformed_config_is_one_line_error(tmp_path: Path, small_demo: DemoHistory) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(small_demo.config.read_text().replace("targets:", "targts:"))
    proc = cli("bisect", str(bad), "--good", "a", "--bad", "b", "--state", str(tmp_path / "st"))
    assert proc.returncode == 2
    assert "build.targts: unknown key" in one_line_error(proc)


def _config_with(history: DemoHistory, tmp_path: Path, **run: object) -> Path:
    data = yaml.safe_load(history.config.read_text())
    data["repo"]["path"] = str(history.repo)
    data["run"].update(run)
    path = tmp_path / "cfg.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_crashing_binary_is_skipped_with_reason(crash_demo: DemoHistory, tmp_path: Path) -> None:
    assert crash_demo.crash
    proc = cli(
        "test", str(crash_demo.config), "--commit", crash_demo.crash, "--state", str(tmp_path / "st"), "--json", "-"
    )
    assert proc.returncode == 4, proc.stderr
    result = json.loads(proc.stdout)
    assert result["verdict"] == "skip" and "crash" in result["reason"]
    assert result["failures"]["crash"] >= 5


def test_with_failures_an_outcome_a_crashing_binary_tests_bad(crash_demo: DemoHistory, tmp_path: Path) -> None:
    """statistic.failures: outcome: the same crashes are data (FAILED, which the reference never
    gives), so the commit is BAD, not skipped; the commit before the crash still tests as before."""
    data = yaml.safe_load(crash_demo.config.read_text())
    data["repo"]["path"] = str(crash_demo.repo)
    data["statistic"]["failures"] = "outcome"
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(yaml.safe_dump(data))
    proc = cli("test", str(cfg), "--commit", crash_demo.crash, "--state", str(tmp_path / "st"), "--json", "-")
    assert proc.returncode == 1, proc.stderr
    result = json.loads(proc.stdout)
    assert result["verdict"] == "bad" and result["counts"]["<failed>"] == result["runs"] == result["failures"]["crash"]
    assert "<failed>" in result["reference"]["categories"]


@pytest.mark.heavy  # whole bisects or long simulations, 4 s or more: after the default suite (README: Tests)
def test_hanging_binary_is_bounded_by_its_timeout(hang_demo: DemoHistory, tmp_path: Path) -> None:
    assert hang_demo.hang
    cfg = _config_with(hang_demo, tmp_path, timeout=0.5)
    proc = cli(
        "test", str(cfg), "--commit", hang_demo.hang, "--state", str(tmp_path / "st"), "--json", "-", timeout=120
    )
    assert proc.returncode == 4, proc.stderr
    result = json.loads(proc.stdout)
    assert result["verdict"] == "skip" and result["failures"]["timeout"] >= 5
    assert "timeout" in result["reason"]


def _snapshot(db: Path) -> tuple[dict, dict]:
    con = sqlite3.connect(db)
    try:
        builds = {r[0]: r[1] for r in con.execute("SELECT sha, created FROM builds")}
        runs = {(r[0], r[1]): r[2] for r in con.execute("SELECT sha, seed, created FROM runs")}
    finally:
        con.close()
    return builds, runs


@pytest.mark.heavy  # after the default suite (README: Tests)
def test_sigkill_mid_bisect_resumes_without_redoing_work(
    small_demo: DemoHistory, bisected: dict, tmp_path: Path
) -> None:
    state = tmp_path / "st"
    db = state / "state.sqlite3"
    args = [
        "bisect",
        str(small_demo.config),
        "--good",
        small_demo.good,
        "--bad",
        "main",
        "--state",
        str(state),
        "--json",
        str(tmp_path / "r.json"),
    ]
    proc = subprocess.Popen(
        bisectbot_argv(*args), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=subprocess_env(CI="1")
    )
    deadline = time.monotonic() + 300
    # kill once the endpoints are done and the search has started building
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            builds, runs = _snapshot(db) if db.exists() else ({}, {})
        except sqlite3.OperationalError:  # the schema is not created yet
            builds, runs = {}, {}
        if len(builds) >= 3 and len(runs) > 0:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "bisect finished before it could be killed"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before_builds, before_runs = _snapshot(db)

    resumed = cli("bisect", *args[1:])
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    after_builds, after_runs = _snapshot(db)
    # nothing finished before the kill was done again: same rows, same timestamps
    assert all(after_builds[sha] == t for sha, t in before_builds.items())
    assert all(after_runs[key] == t for key, t in before_runs.items())
    assert len(after_builds) == report["builds"]
    # the same answer as the uninterrupted bisect, with the same work in total
    assert report["first_bad"] == bisected["first_bad"] == small_demo.culprit
    assert report["runs"] == bisected["runs"]
    assert report["runs_executed"] < report["runs"]


def _config_with_variants(history: DemoHistory, tmp_path: Path, variants: list) -> Path:
    data = yaml.safe_load(history.config.read_text())
    data["repo"]["path"] = str(history.repo)
    data["run"].pop("argv")
    data["run"]["variants"] = variants
    path = tmp_path / "variants.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_command_variant_is_picked_from_help(small_demo: DemoHistory, tmp_path: Path) -> None:
    tail = ["--seed", "{seed}", "--prompt", "ab", "-n", "4"]
    cfg = _config_with_variants(
        small_demo,
        tmp_path,
        [
            {"argv": ["{binary}", "--spec-draft-n-max", "3", *tail]},  # a newer spelling: not in --help
            {"argv": ["{binary}", "--draft-max", "3", *tail]},
        ],
    )
    proc = cli("test", str(cfg), "--commit", "main", "--state", str(tmp_path / "st"), "--json", "-")
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)["detail"]["variant"] == 1


def test_no_fitting_variant_skips_with_reason(small_demo: DemoHistory, tmp_path: Path) -> None:
    cfg = _config_with_variants(
        small_demo,
        tmp_path,
        [
            {"argv": ["{binary}", "--spec-draft-n-max", "3", "--seed", "{seed}"]},
            {"argv": ["{binary}", "--draft", "3", "--seed", "{seed}"], "help_contains": ["[on|off]"]},
        ],
    )
    proc = cli("test", str(cfg), "--commit", "main", "--state", str(tmp_path / "st"), "--json", "-")
    assert proc.returncode == 4, proc.stderr
    reason = json.loads(proc.stdout)["reason"]
    assert "variant 0 lacks --spec-draft-n-max" in reason and "variant 1 lacks --draft" in reason


# A tiny HTTP front for the demo binary: the cross-check arm's "server", started per commit.
ARM_SERVER = """
import json, subprocess, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
binary, port = sys.argv[1], int(sys.argv[2])
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code); self.send_header("Content-Length", str(len(data))); self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        self.reply(200 if self.path == "/health" else 404, {"status": "ok"})
    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        out = subprocess.run([binary, "--seed", str(req["seed"]), "--prompt", req["prompt"], "-n", "4"],
                             capture_output=True, text=True).stdout
        self.reply(200, {"content": out.strip()[len(req["prompt"]):]})
ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
"""


@pytest.mark.longest  # the longest tier: by hand, not in CI (README: Tests)
def test_cross_check_arm_gets_its_own_verdict(small_demo: DemoHistory, tmp_path: Path) -> None:
    script = tmp_path / "arm_server.py"
    script.write_text(ARM_SERVER)
    data = yaml.safe_load(small_demo.config.read_text())
    data["repo"]["path"] = str(small_demo.repo)
    data["arms"] = {
        "http": {
            "targets": ["specdemo"],
            "binaries": {"front": ["specdemo", "bin/specdemo"]},
            "serve": [sys.executable, str(script), "{front}", "{port}"],
            "body": {"prompt": "ab", "seed": "{seed}"},
            "field": "content",
            "parse": {"min_tokens": 2},
            "jobs": 2,
        }
    }
    cfg = tmp_path / "arms.yaml"
    cfg.write_text(yaml.safe_dump(data))
    state = str(tmp_path / "st")
    good = cli("test", str(cfg), "--commit", small_demo.good, "--state", state, "--json", "-")
    assert good.returncode == 0, good.stderr
    arm = json.loads(good.stdout)["arms"]["http"]
    assert arm["verdict"] == "good" and arm["arm"] == "http" and arm["runs"] > 100
    bad = cli("test", str(cfg), "--commit", "main", "--state", state, "--json", "-")
    assert json.loads(bad.stdout)["arms"]["http"]["verdict"] == "bad"
    # a replay starts no server and runs nothing
    again = cli("test", str(cfg), "--commit", "main", "--state", state, "--json", "-")
    assert json.loads(again.stdout)["arms"]["http"]["executed"] == 0
    # --no-arms: the main verdict alone
    alone = cli("test", str(cfg), "--commit", "main", "--state", state, "--json", "-", "--no-arms")
    assert alone.returncode == 1 and json.loads(alone.stdout)["arms"] == {}
    # a bisect: the answer first (printed), then the arm at the commit named and its parent
    found = cli("bisect", str(cfg), "--good", small_demo.good, "--bad", "main", "--state", state, "--json", "-")
    assert found.returncode == 0, found.stderr
    report = json.loads(found.stdout)
    assert report["status"] == "found" and report["first_bad"] == small_demo.culprit
    roles = [(v["role"], v["arm"], v["sha"], v["verdict"]) for v in report["verdicts"]]
    arms = [r for r in roles if r[1] == "http"]
    assert arms == [
        ("culprit", "http", small_demo.culprit, "bad"),
        ("parent", "http", report["last_good"], "good"),
    ], roles
    assert roles[-2:] == arms  # after every verdict of the main arm
    progress = found.stderr.splitlines()
    answer = next(i for i, ln in enumerate(progress) if "[answer] found:" in ln)
    assert small_demo.culprit in progress[answer] and "at the culprit and the parent" in progress[answer]
    assert all(i > answer for i, ln in enumerate(progress) if "[arm http]" in ln), found.stderr
    # where its wall time went: the search built commits the tests above had not
    spent = report["cost"]["time"]
    assert spent["building"] > 0 and spent["running"] > 0 and spent["other"] >= 0
    assert abs(spent["wall"] - spent["building"] - spent["running"] - spent["other"]) < 0.5


@pytest.mark.heavy  # after the default suite (README: Tests)
def test_sticky_strategy_finds_the_culprit(small_demo: DemoHistory, tmp_path: Path) -> None:
    # also: a relative --state works (cmake runs in other directories)
    proc = cli(
        "bisect",
        str(small_demo.config),
        "--good",
        small_demo.good,
        "--bad",
        "main",
        "--strategy",
        "sticky",
        "--state",
        "st",
        "--json",
        "r.json",
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["strategy"] == "sticky" and report["first_bad"] == small_demo.culprit
    roles = {v["role"] for v in report["verdicts"]}
    assert {"sticky", "retest-culprit", "retest-parent"} <= roles
    # the build break was either never visited or skipped, never counted as a side
    assert all(v["verdict"] == "skip" for v in report["verdicts"] if v["sha"] == small_demo.build_break)
    assert report["confidence"] >= 0.99
    # the confirmation runs a side only while a question is open for it: the culprit's quick
    # tests do not keep it running alongside the parent's long GOOD (runs in flight aside)
    culprit = [v for v in report["verdicts"] if v["sha"] == small_demo.culprit and v["arm"] == "main"]
    spent = sum(max(v["runs"] for v in culprit if v["block"] == b) for b in {v["block"] for v in culprit})
    con = sqlite3.connect(tmp_path / "st" / "state.sqlite3")
    stored = con.execute("SELECT COUNT(*) FROM runs WHERE sha=?", (small_demo.culprit,)).fetchone()[0]
    con.close()
    parent = max(v["runs"] for v in report["verdicts"] if v["role"] == "retest-parent")
    assert stored <= spent + 4 * (os.cpu_count() or 1) < parent, (stored, spent, parent)


def _seeds_run(state: Path, sha: str) -> set[int]:
    con = sqlite3.connect(state / "state.sqlite3")
    try:
        return {r[0] for r in con.execute("SELECT seed FROM runs WHERE sha=?", (sha,))}
    finally:
        con.close()


@pytest.mark.heavy  # after the default suite (README: Tests)
def test_control_sample_serves_as_reference(small_demo: DemoHistory, tmp_path: Path) -> None:
    """No exact reference: a known-good commit's runs on the common seeds stand in for it, each
    tested run paired with the control's run on the same seed."""
    data = yaml.safe_load(small_demo.config.read_text())
    data["repo"]["path"] = str(small_demo.repo)
    data["reference"] = {"control": {"commit": small_demo.good, "runs": 3000}}
    cfg = tmp_path / "control.yaml"
    cfg.write_text(yaml.safe_dump(data))
    state = tmp_path / "st"
    bad = cli("test", str(cfg), "--commit", "main", "--state", str(state), "--json", "-")
    assert bad.returncode == 1, bad.stderr
    result = json.loads(bad.stdout)
    assert result["verdict"] == "bad" and "control sample of 3000 runs" in result["reference"]["source"]
    good = cli("test", str(cfg), "--commit", small_demo.commits[2], "--state", str(state), "--json", "-")
    assert json.loads(good.stdout)["verdict"] == "good", good.stderr
    # every tested seed has the control's run beside it: the same seeds
    control = _seeds_run(state, small_demo.good)
    assert len(control) == 3000
    for sha in (small_demo.bad, small_demo.commits[2]):
        assert _seeds_run(state, sha) <= control


@pytest.mark.heavy  # about a minute of builds and runs (README: Tests)
def test_a_control_sample_grows_while_a_test_needs_it(small_demo: DemoHistory, tmp_path: Path) -> None:
    """A small control sample first (the default 200 runs); each tested run is paired with the
    control's run on its seed, so a test that runs longer than the control grows it, a quick BAD
    does not; the JSON counts the control's runs apart; the control commit against itself
    (every pair alike) is GOOD within the control's first runs, which it replays."""
    data = yaml.safe_load(small_demo.config.read_text())
    data["repo"]["path"] = str(small_demo.repo)
    data["reference"] = {"control": {"commit": small_demo.good}}
    cfg = tmp_path / "control.yaml"
    cfg.write_text(yaml.safe_dump(data))
    state = str(tmp_path / "st")
    bad = cli("test", str(cfg), "--commit", "main", "--state", state, "--json", "-")
    result = json.loads(bad.stdout)
    assert result["verdict"] == "bad" and result["control_runs"] == 200, bad.stderr
    assert result["runs"] <= 200 and "control sample of 200 runs" in result["reference"]["source"]
    itself = cli("test", str(cfg), "--commit", small_demo.good, "--state", state, "--json", "-")
    result = json.loads(itself.stdout)
    assert result["verdict"] == "good" and result["runs"] < 200, itself.stderr
    assert result["control_runs"] == 200 - result["runs"]  # its runs are the control's: not counted twice
    data["reference"]["control"]["runs"] = 40
    cfg.write_text(yaml.safe_dump(data))
    state = str(tmp_path / "st2")
    good = cli("test", str(cfg), "--commit", small_demo.commits[2], "--state", state, "--json", "-")
    result = json.loads(good.stdout)
    assert result["verdict"] == "good", good.stderr
    assert result["control_runs"] >= result["runs"] > 40 and "grown as tests needed" in result["reference"]["source"]
    assert _seeds_run(Path(state), small_demo.commits[2]) <= _seeds_run(Path(state), small_demo.good)


@pytest.mark.heavy  # builds and runs (README: Tests)
def test_a_control_sample_at_its_cap_leaves_the_test_inconclusive(small_demo: DemoHistory, tmp_path: Path) -> None:
    """reference.control.max_runs caps the control: a test that needs more pairs than it allows
    stops INCONCLUSIVE (exit 3) saying so and what to raise — not a verdict on fewer pairs."""
    data = yaml.safe_load(small_demo.config.read_text())
    data["repo"]["path"] = str(small_demo.repo)
    data["reference"] = {"control": {"commit": small_demo.good, "runs": 100, "max_runs": 100}}
    cfg = tmp_path / "control.yaml"
    cfg.write_text(yaml.safe_dump(data))
    good = cli("test", str(cfg), "--commit", small_demo.commits[2], "--state", str(tmp_path / "st"), "--json", "-")
    result = json.loads(good.stdout)
    assert good.returncode == 3 and result["verdict"] == "inconclusive", good.stderr
    assert (
        "control reached its cap of 100 runs" in result["reason"] and "reference.control.max_runs" in result["reason"]
    )
    assert result["control_runs"] == 100


def test_build_timeout_is_enforced_and_skips(small_demo: DemoHistory, tmp_path: Path) -> None:
    data = yaml.safe_load(small_demo.config.read_text())
    data["repo"]["path"] = str(small_demo.repo)
    data["build"]["timeout"] = 0.05  # no cmake configure finishes this fast
    cfg = tmp_path / "slow-build.yaml"
    cfg.write_text(yaml.safe_dump(data))
    proc = cli("test", str(cfg), "--commit", "main", "--state", str(tmp_path / "st"), "--json", "-")
    assert proc.returncode == 4, proc.stderr
    result = json.loads(proc.stdout)
    assert result["verdict"] == "skip" and "build timeout" in result["reason"]
    assert result["detail"]["build"] == "timeout"
    # with a larger timeout the same state builds it again instead of replaying the skip
    data["build"]["timeout"] = 300
    cfg.write_text(yaml.safe_dump(data))
    proc = cli("test", str(cfg), "--commit", "main", "--state", str(tmp_path / "st"), "--json", "-")
    assert proc.returncode == 1 and json.loads(proc.stdout)["verdict"] == "bad", proc.stderr


@pytest.mark.parametrize(
    "strategy", [pytest.param("plain", marks=pytest.mark.heavy), pytest.param("sticky", marks=pytest.mark.heavy)]
)
def test_find_fixed_names_the_commit_that_removed_the_defect(tmp_path: Path, strategy: str) -> None:
    from bisectbot import demo

    history = demo.generate_demo(tmp_path / "d", n_commits=8, culprit_index=2, break_index=4, seed=4)
    repo = history.repo
    src = repo / "src" / "speculative.cpp"
    src.write_text(src.read_text().replace(demo._DRAFT_PICK_DEFECT, demo._DRAFT_PICK_OK))
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "commit", "-qam", "speculative: sample the draft token again"], check=True)
    fix = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    for i in range(3):
        (repo / "docs" / "NOTES.md").open("a").write(f"later note {i}\n")
        subprocess.run([*git, "commit", "-qam", f"docs: later note {i}"], check=True)
    proc = cli(
        "bisect",
        str(history.config),
        "--good",
        history.culprit,
        "--bad",
        "main",
        "--find",
        "fixed",
        "--strategy",
        strategy,
        "--state",
        str(tmp_path / "st"),
        "--json",
        str(tmp_path / "r.json"),
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["find"] == "fixed" and report["first_bad"] == fix
    assert report["strategy"] == strategy


@pytest.mark.longest  # the longest tier: by hand, not in CI (README: Tests)
def test_scan_tests_every_commit_between_two_good_ones(small_demo: DemoHistory, tmp_path: Path) -> None:
    """`bisect --scan`: the bad end may test GOOD. From the good end to the culprit's parent
    nothing departs: every commit that can change the binary tests GOOD (the one that does not
    build is skipped), status clean, exit 1 (as grep finding nothing)."""
    parent = small_demo.commits[small_demo.commits.index(small_demo.culprit) - 1]
    state = str(tmp_path / "st")
    args = ["bisect", str(small_demo.config), "--good", small_demo.good, "--bad", parent, "--scan", "--state", state]
    proc = cli(*args, "--json", "-")
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert report["status"] == "clean" and report["first_bad"] is None and report["confidence"] >= 0.99
    tested = {v["commit"]: v["verdict"] for v in report["verdicts"] if v["role"] in ("scan", "bad-endpoint")}
    assert set(tested.values()) <= {"good", "skip"} and tested[parent] == "good"
    assert small_demo.build_break not in tested or tested[small_demo.build_break] == "skip"
    assert "--scan" in report["reproduce"]
    proc = cli(*args, "--find", "fixed")
    assert proc.returncode == 2 and "--scan looks for a departure between two GOOD commits" in proc.stderr
