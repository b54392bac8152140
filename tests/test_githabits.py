"""The habits of `git bisect`: skipping commits by hand, the log of what a state directory
tested, replaying stored runs into a new range, `git bisect run` with bisectbot as its script,
and role names that follow what the user typed with --find fixed. On a real demo history
(real git, cmake, g++ and processes), through the real CLI. The tests that need the full
bisect without skips (and the exit-code walk) are in the heavy tier (`-m heavy`)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
from pathlib import Path

import pytest
import yaml

from bisectbot.building.inputs import narrow
from bisectbot.core.search import bisect_search
from bisectbot.demo import DemoHistory, generate_demo
from bisectbot.statistics.outcome import Verdict

from conftest import TOOLCHAIN, bisectbot_argv, require, subprocess_env

# 10 commits: the build breaks at 1 (fixed at 2), the defect comes at 6. With --all-commits and
# plain bisection the search probes 4, then 6, then 5: deterministic, so a test can skip a
# commit the search would otherwise have built.
CULPRIT, BREAK, N = 6, 1, 10


def cli(*args: str, cwd: Path | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        bisectbot_argv(*args), capture_output=True, text=True, timeout=timeout, env=subprocess_env(CI="1"), cwd=cwd
    )


def one_line_error(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("bisectbot: error:")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def built_commits(state: Path) -> set[str]:
    """The commits the state database holds a build of (any outcome)."""
    with sqlite3.connect(state / "state.sqlite3") as db:
        return {row[0] for row in db.execute("SELECT sha FROM builds")}


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> DemoHistory:
    require(*TOOLCHAIN)
    return generate_demo(
        tmp_path_factory.mktemp("habits"), n_commits=N, culprit_index=CULPRIT, break_index=BREAK, seed=3
    )


def bisect_json(
    history: DemoHistory, state: Path, *args: str, config: Path | None = None
) -> tuple[subprocess.CompletedProcess[str], dict]:
    proc = cli("bisect", str(config or history.config), "--state", str(state), "--json", "-", *args)
    return proc, (json.loads(proc.stdout) if proc.stdout.strip() else {})


@pytest.fixture(scope="module")
def loose(history: DemoHistory) -> Path:
    """The demo's config with per-verdict levels above what the bisect's confidence allows a
    step, so that the per-step level follows the range's length (stats.step_level)."""
    data = yaml.safe_load(history.config.read_text())
    data["test"] = {**(data.get("test") or {}), "alpha": 0.01, "beta": 0.01}
    path = history.config.with_name("loose.yaml")
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def plain(history: DemoHistory, loose: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """The bisect without skips: which commits it builds."""
    state = tmp_path_factory.mktemp("plain-state")
    proc, report = bisect_json(
        history, state, "--good", history.good, "--bad", "main", "--all-commits", "--strategy", "plain", config=loose
    )
    assert proc.returncode == 0, proc.stderr
    return state, report


# -- --skip / --exclude --------------------------------------------------------------------------
def test_search_never_asks_a_skipped_position() -> None:
    asked: list[int] = []

    def oracle(pos: int) -> Verdict:
        asked.append(pos)
        return Verdict.BAD if pos >= 6 else Verdict.GOOD

    found = bisect_search(10, oracle, skip=[4])
    assert 4 not in asked and found.exact and found.first_bad == 6
    around = bisect_search(10, oracle, skip=[6])
    assert 6 not in asked[-len(around.asked) :]
    assert not around.exact and list(around.candidates) == [6, 7]


def test_narrowing_keeps_a_skipped_commit_that_cannot_change_the_binary() -> None:
    line = ["g", "x", "y", "b"]
    # no change of x or y touches a path the restriction keeps: both would stand for g
    changes: dict = {"x": [], "y": [], "b": []}
    assert narrow(line, changes, None, ("src",)).line == ("g", "b")
    kept = narrow(line, changes, None, ("src",), keep={"y"})
    assert kept.line == ("g", "y", "b") and kept.why["y"] == "skipped by the user"


@pytest.mark.longest  # the longest tier: by hand, not in CI (README: Tests)
def test_skip_an_unrelated_commit_still_finds_the_culprit(
    history: DemoHistory, plain: tuple[Path, dict], tmp_path: Path
) -> None:
    plain_state, first = plain
    probed = history.commits[4]
    assert probed in built_commits(plain_state)  # without --skip the search builds it
    proc, report = bisect_json(
        history,
        tmp_path / "st",
        "--good",
        history.good,
        "--bad",
        "main",
        "--all-commits",
        "--strategy",
        "plain",
        "--skip",
        probed[:10],
    )
    assert proc.returncode == 0, proc.stderr
    assert report["status"] == "found" and report["first_bad"] == history.culprit
    assert report["user_skipped"] == [probed]
    assert probed not in built_commits(tmp_path / "st")
    assert probed not in {v["commit"] for v in report["verdicts"]}
    assert f"--skip {probed[:12]}" in report["reproduce"]
    assert first["user_skipped"] == []


@pytest.mark.heavy  # whole bisects or builds, 3-8 s: after the default suite (README: Tests)
def test_skip_the_culprit_leaves_a_range_containing_it(history: DemoHistory, tmp_path: Path) -> None:
    md = tmp_path / "r.md"
    proc, report = bisect_json(
        history,
        tmp_path / "st",
        "--good",
        history.good,
        "--bad",
        "main",
        "--all-commits",
        "--strategy",
        "plain",
        "--exclude",
        history.culprit,
        "--markdown",
        str(md),
    )
    assert proc.returncode == 3, proc.stderr
    assert report["status"] == "ambiguous" and report["first_bad"] is None
    assert history.culprit in report["candidates"] and len(report["candidates"]) >= 2
    assert "skipped by the user" in report["message"] and history.culprit[:12] in report["message"]
    assert report["user_skipped"] == [history.culprit]
    assert history.culprit not in built_commits(tmp_path / "st")
    assert all(v["commit"] != history.culprit for v in report["verdicts"])
    assert f"Skipped by the user (--skip/--exclude; never built or tested): `{history.culprit[:12]}`" in md.read_text()


@pytest.mark.parametrize("option", ["--skip", "--exclude"])
@pytest.mark.parametrize(
    "skip, expected",
    [
        ("no-such-ref", "'no-such-ref' does not resolve"),
        ("main", "{option} main includes the --bad end"),
        ("HEAD~9", "{option} HEAD~9 includes the --good end"),
        ("HEAD~2..HEAD~5", "{option} HEAD~2..HEAD~5: HEAD~2 is not before"),
    ],
)
def test_bad_skips_are_one_line_errors(
    history: DemoHistory, tmp_path: Path, option: str, skip: str, expected: str
) -> None:
    proc = cli(
        "bisect",
        str(history.config),
        "--good",
        history.good,
        "--bad",
        "main",
        "--state",
        str(tmp_path / "st"),
        option,
        skip,
    )
    assert proc.returncode == 2, proc.stderr
    assert expected.format(option=option) in one_line_error(proc)  # names the option as typed
    assert not (tmp_path / "st" / "state.sqlite3").exists() or not built_commits(tmp_path / "st")


# -- git bisect run --------------------------------------------------------------------------------
def git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        timeout=900,
        env=subprocess_env(GIT_TERMINAL_PROMPT="0", CI="1"),
        check=False,
    )


@pytest.mark.heavy  # a whole git bisect run of the demo: 8 s (README: Tests)
def test_git_bisect_run_names_the_planted_culprit(history: DemoHistory, tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    assert subprocess.run(["git", "clone", "-q", str(history.repo), str(clone)], capture_output=True).returncode == 0
    assert git(clone, "bisect", "start", "main", history.good).returncode == 0
    script = [
        *bisectbot_argv("test", str(history.config), "--state", str(tmp_path / "st"), "--git-bisect", "-q", "--no-arms")
    ]
    run = git(clone, "bisect", "run", *script)
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"{history.culprit} is the first bad commit" in run.stdout, run.stdout
    # git checked out each commit it asked about, and bisectbot tested exactly that one
    tested = {
        json.loads(r)["commit"]
        for (r,) in sqlite3.connect(tmp_path / "st" / "state.sqlite3").execute(
            "SELECT result FROM jobs WHERE kind='test' AND status='done'"
        )
    }
    assert history.culprit in tested and tested <= set(history.commits)
    # -q: one line per step on stdout (its verdict), not the whole summary
    said = [ln for ln in run.stdout.splitlines() if ln.startswith("bisectbot: ")]
    assert len(said) == len(tested) and "reproduce:" not in run.stdout, run.stdout


@pytest.mark.heavy
def test_git_bisect_exit_codes(history: DemoHistory, tmp_path: Path) -> None:
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(history.repo), str(clone)], capture_output=True, check=True)
    state = str(tmp_path / "st")

    def run_at(sha: str, *extra: str) -> int:
        assert git(clone, "checkout", "-q", "--detach", sha).returncode == 0
        return cli("test", str(history.config), "--state", state, "--git-bisect", "-q", *extra, cwd=clone).returncode

    assert run_at(history.good) == 0
    assert run_at(history.bad) == 1
    assert run_at(history.build_break) == 125  # cannot be built: git bisect skips it
    assert run_at(history.good, "--commit", "no-such-ref") == 128  # bad input: git bisect stops
    assert run_at(history.good, "--no-such-option") == 128
    assert cli("test", str(history.config), "--no-such-option").returncode == 2  # without it: as ever


# -- replay into a new range, and the log -------------------------------------------------------------
@pytest.fixture(scope="module")
def replayed(history: DemoHistory, loose: Path, plain: tuple[Path, dict]) -> dict:
    """A second bisect in the first one's state, over a narrower range whose ends it tested."""
    state, _ = plain
    proc, report = bisect_json(
        history,
        state,
        "--good",
        history.commits[4],
        "--bad",
        "main",
        "--all-commits",
        "--strategy",
        "plain",
        config=loose,
    )
    assert proc.returncode == 0, proc.stderr
    return report


@pytest.mark.heavy
def test_a_narrower_range_replays_stored_runs_at_its_own_levels(
    history: DemoHistory, plain: tuple[Path, dict], replayed: dict
) -> None:
    _, first = plain
    assert replayed["first_bad"] == history.culprit and replayed["commits"] == N - 4
    # fewer steps: a looser per-step level, and every step and confirmation asked at it
    assert replayed["step_alpha"] > first["step_alpha"]
    for v in replayed["verdicts"]:
        if v["role"] in ("step", "retest-culprit", "retest-parent", "confirm-culprit", "confirm-parent"):
            assert v["alpha"] == replayed["step_alpha"]
    # the commits the first bisect sampled enough run nothing again: only the new good end,
    # which the first bisect asked only a quick step, needs runs of its own
    new_end = history.commits[4]
    assert all(v["executed"] == 0 for v in replayed["verdicts"] if v["commit"] != new_end), replayed["verdicts"]
    reran = replayed["repeatability"]["runs_executed"] if replayed["repeatability"] else 0  # the new end's second runs
    assert replayed["runs_executed"] == reran + sum(
        v["executed"] for v in replayed["verdicts"] if v["commit"] == new_end
    )
    assert replayed["runs_executed"] < first["runs_executed"]
    assert replayed["builds"] > 0 and built_commits(plain[0]) >= {v["commit"] for v in replayed["verdicts"]}


@pytest.mark.heavy
def test_log_lists_each_job_with_its_commits(history: DemoHistory, plain: tuple[Path, dict], replayed: dict) -> None:
    state, first = plain
    proc = cli("log", str(history.config), "--state", str(state))  # any config: --state names the directory
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert not [line for line in lines if "…" in line]  # in a pipe nothing is cut to a width
    heads = [line for line in lines if line.startswith("bisect ")]
    assert heads == [
        f"bisect {history.good[:12]}..{history.bad[:12]} (find bad) · done: found {history.culprit[:12]}",
        f"bisect {history.commits[4][:12]}..{history.bad[:12]} (find bad) · done: found {history.culprit[:12]}",
    ]
    culprit_rows = [line for line in lines if line.startswith(f"  {history.culprit[:12]}  CHANGED")]
    assert len(culprit_rows) == 2 and all("(differs from its parent) " in row for row in culprit_rows)
    as_json = json.loads(cli("log", str(history.config), "--state", str(state), "--json", "-").stdout)
    jobs = as_json["jobs"]
    assert [j["job"] for j in jobs] == [first["job"], replayed["job"]]
    tested = {c["commit"]: c for c in jobs[0]["commits"]}
    assert set(tested) == {v["commit"] for v in first["verdicts"]}
    assert tested[history.culprit]["verdict"] == "changed" and "confirm-culprit" in tested[history.culprit]["roles"]
    assert tested[history.good]["verdict"] == "good" and tested[history.good]["runs"] > 0


# -- --find fixed: role names, and ends the other way round -------------------------------------------
@pytest.fixture(scope="module")
def fixed_repo(history: DemoHistory, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo history and one more commit that fixes the defect (the first commit's tree)."""
    clone = tmp_path_factory.mktemp("fixed") / "repo"
    subprocess.run(["git", "clone", "-q", str(history.repo), str(clone)], check=True)
    for args in (
        ["rm", "-rq", "."],
        ["checkout", history.good, "--", "."],
        ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "speculative: sample the draft again"],
    ):
        assert git(clone, *args).returncode == 0
    return clone


@pytest.mark.heavy  # after the default suite (README: Tests)
def test_ends_the_other_way_round_suggest_find_fixed(
    history: DemoHistory, fixed_repo: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    state = tmp_path_factory.getbasetemp() / "fixed-state"
    proc = cli(
        "bisect",
        str(history.config),
        "--repo",
        str(fixed_repo),
        "--state",
        str(state),
        "--good",
        "HEAD~1",
        "--bad",
        "HEAD",
    )
    assert proc.returncode == 4, proc.stderr
    line = one_line_error(proc)
    assert "--good HEAD~1" in line and "tests BAD" in line and "--bad HEAD" in line and "tests GOOD" in line
    assert "rerun with --find fixed" in line


@pytest.mark.heavy  # after the default suite (README: Tests)
def test_find_fixed_names_the_ends_by_what_was_typed(
    history: DemoHistory, fixed_repo: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    state = tmp_path_factory.getbasetemp() / "fixed-state"
    md = state.parent / "fixed.md"
    proc = cli(
        "bisect",
        str(history.config),
        "--repo",
        str(fixed_repo),
        "--state",
        str(state),
        "--good",
        "HEAD~1",
        "--bad",
        "HEAD",
        "--find",
        "fixed",
        "--json",
        "-",
        "--markdown",
        str(md),
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    fix = git(fixed_repo, "rev-parse", "HEAD").stdout.strip()
    assert report["status"] == "found" and report["first_bad"] == fix
    labels = {v["role"]: (v["label"], v["verdict"]) for v in report["verdicts"]}
    assert labels["good-endpoint"] == ("--good (old end)", "bad")
    assert labels["bad-endpoint"] == ("--bad (new end)", "good")
    assert "still shows the defect" in report["verdict_words"]
    text = md.read_text()
    assert "| --good (old end) | **BAD** |" in text and "| --bad (new end) | **GOOD** |" in text
    assert "good-endpoint" not in text
    assert "Verdicts: BAD = departs from the reference (still shows the defect)" in text
