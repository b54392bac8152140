"""Everyday use: the up-front estimate, --max-builds / --deadline with a resumable partial result,
`bisectbot gc` and the state directory's size caps, and the culprit's runs beside its parent's.

The pure parts (core.estimate, core.retention, bisecting.budget) are tested on their own; the rest
on one small demo history through the real CLI, one state directory carried from test to test
(stopped → resumed → collected → bisected again), so the real builds are made once."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from bisectbot.bisecting.budget import Budget, BudgetLimits, BudgetSpent
from bisectbot.core.estimate import Timings, estimate, format_duration, parse_duration, search_builds
from bisectbot.demo import DemoHistory, generate_demo
from bisectbot.jobs.retention import BINARIES, BUILD_DIR, LOG, Caps, Item, parse_size, to_remove
from bisectbot.records.reports import BisectReport
from bisectbot.report.markdown import bisect_markdown

from conftest import bisectbot_argv, subprocess_env


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        bisectbot_argv(*args), capture_output=True, text=True, timeout=600, env=subprocess_env(CI="1")
    )


def built(stderr: str) -> set[str]:
    """The commits a run built, from its progress lines ('  built 7a8a3ea8a164 in 0.3 s')."""
    return set(re.findall(r"^  built ([0-9a-f]{12}) in", stderr, re.M))


# -- pure: durations, estimate, retention, budget ------------------------------------------------
@pytest.mark.parametrize(
    "text, seconds",
    [("90m", 5400), ("2h", 7200), ("1h30m", 5400), ("45s", 45), ("3600", 3600), ("1.5h", 5400), (" 10M ", 600)],
)
def test_durations_parse(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "10x", "0", "-5", "5m3", "m", "inf"])
def test_bad_durations_are_refused_with_the_text(text: str) -> None:
    with pytest.raises(ValueError, match=re.escape(repr(text))):
        parse_duration(text)


def test_estimate_without_history_says_so() -> None:
    est = estimate(9000, Timings())
    assert est.builds == search_builds(9000) == 14 + 2 and est.seconds is None
    assert "~16 builds" in est.text() and "no timings yet" in est.text()


def test_estimate_from_what_the_state_has_seen() -> None:
    timings = Timings(build_seconds=(100.0, 126.0, 300.0), runs_per_commit=(200, 400), run_seconds=(0.4, 0.4, 0.5))
    est = estimate(1571, timings, parallel=2, stored=3)
    # 12 builds (⌈log2 1570⌉ = 11, + 2 ends) of which 3 stored, 14 commit tests at 300 runs of 0.4 s, 2 at once
    assert est.builds == 13 and est.tests == 15
    assert est.seconds == pytest.approx((13 - 3) * 126.0 + 15 * 300 * 0.4 / 2)
    text = est.text()
    assert "~13 builds" in text and "3 already built" in text and "median build" in text
    assert "300 runs/commit at 0.40 s, 2 at once" in text and format_duration(est.seconds) in text


def test_estimate_never_counts_more_builds_than_commits() -> None:
    assert estimate(2, Timings()).builds == 2


def test_sizes_parse() -> None:
    assert parse_size("500M") == 500 << 20 and parse_size("10G") == 10 << 30
    assert parse_size("1.5GB") == int(1.5 * (1 << 30)) and parse_size("2GiB") == 2 << 30
    assert parse_size("800k") == 800 << 10 and parse_size("1048576") == 1 << 20
    for bad in ("", "10x", "G", "1.2.3M"):
        with pytest.raises(ValueError, match="not a size"):
            parse_size(bad)


def _items() -> list[Item]:
    return [
        Item(BINARIES, "kept/k/a", 10, used=1.0),
        Item(BINARIES, "kept/k/b", 10, used=3.0),
        Item(BINARIES, "kept/k/c", 10, used=2.0),
        Item(BUILD_DIR, "build-x", 100, used=1.5),
        Item(BUILD_DIR, "build-y", 100, used=4.0, held=True),
        Item(LOG, "logs/1", 5, used=0.5),
        Item(LOG, "logs/2", 5, used=2.5),
        Item(LOG, "logs/3", 5, used=3.5),
    ]


def test_retention_keeps_the_most_recently_used_within_each_cap() -> None:
    gone = to_remove(_items(), Caps(max_binaries=1, max_log_bytes=10))
    assert [i.path for i in gone] == ["logs/1", "kept/k/a", "kept/k/c"]  # least recently used first
    assert to_remove(_items(), Caps()) == []
    assert to_remove(_items(), Caps(max_binaries=3, max_log_bytes=15)) == []


def test_retention_never_removes_a_held_build_directory() -> None:
    gone = to_remove(_items(), Caps(max_build_dirs=0))
    assert [i.path for i in gone] == ["build-x"]  # build-y is held (a build still running)


def test_retention_total_size_goes_least_recently_used_first_across_kinds() -> None:
    items = _items()
    total = sum(i.size for i in items)  # 245
    gone = to_remove(items, Caps(max_bytes=total - 20))
    assert [i.path for i in gone] == ["logs/1", "kept/k/a", "build-x"]
    gone = to_remove(items, Caps(max_bytes=0))
    assert "build-y" not in {i.path for i in gone} and len(gone) == len(items) - 1


def test_budget_counts_builds_and_time() -> None:
    now = [0.0]
    builds = [0]
    budget = Budget(
        BudgetLimits(max_builds=2, deadline=60.0, deadline_text="1m"), lambda: builds[0], clock=lambda: now[0]
    )
    budget.before_build()
    builds[0] = 2
    budget.before_step()  # a verdict of a built commit needs no build
    with pytest.raises(BudgetSpent, match="--max-builds 2 reached") as stop:
        budget.before_build()
    assert stop.value.by == "max-builds"
    now[0] = 61.0
    with pytest.raises(BudgetSpent, match="--deadline 1m reached") as stop:
        budget.before_step()
    assert stop.value.by == "deadline"


# -- on a demo history, through the CLI ----------------------------------------------------------
@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoHistory:
    """The demo with a wider tolerance (0.3 instead of 0.1): its planted defect is gross, and a
    GOOD verdict then takes some hundred runs instead of thousands, so each bisect takes seconds."""
    history = generate_demo(tmp_path_factory.mktemp("everyday"), n_commits=8, culprit_index=5, break_index=2, seed=4)
    text = history.config.read_text()
    assert "tolerance: 0.1}" in text
    fast = history.config.with_name("fast.yaml")
    fast.write_text(text.replace("tolerance: 0.1}", "tolerance: 0.3}"))
    return replace(history, config=fast)


@pytest.fixture(scope="module")
def state(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("everyday-state")


def bisect(demo: DemoHistory, state: Path, *extra: str) -> tuple[subprocess.CompletedProcess[str], dict]:
    out = state.parent / f"{state.name}.json"
    proc = cli(
        "bisect",
        str(demo.config),
        "--good",
        demo.good,
        "--bad",
        "main",
        "--state",
        str(state),
        "--json",
        str(out),
        "--html",
        str(out.with_suffix(".html")),
        *extra,
    )
    return proc, json.loads(out.read_text()) if out.exists() and proc.returncode in (0, 3) else {}


@pytest.fixture(scope="module")
def stopped(demo: DemoHistory, state: Path) -> tuple[subprocess.CompletedProcess[str], dict]:
    return bisect(demo, state, "--max-builds", "3")


@pytest.fixture(scope="module")
def finished(demo: DemoHistory, state: Path, stopped: tuple) -> tuple[subprocess.CompletedProcess[str], dict]:
    return bisect(demo, state)


def test_max_builds_stops_with_a_range_that_holds_the_culprit(stopped: tuple, demo: DemoHistory) -> None:
    proc, report = stopped
    assert proc.returncode == 3, proc.stderr
    assert len(built(proc.stderr)) == 3
    assert report["status"] == "stopped" and report["first_bad"] is None
    stop = report["stopped"]
    assert stop["by"] == "max-builds" and "--max-builds 3" in stop["reason"]
    assert demo.culprit in report["candidates"] and stop["commits_left"] == len(report["candidates"])
    line = list(demo.commits)
    assert line.index(stop["last_good"]) < line.index(demo.culprit) <= line.index(stop["first_bad"])
    assert report["last_good"] == stop["last_good"]
    assert len(report["candidates"]) < len(line) - 1  # the search got somewhere before it stopped
    # the message says how to go on, on stderr even with --json
    assert "run the same command again" in proc.stderr
    # the estimate came first, and this state had seen nothing yet
    assert "estimate: ~" in proc.stderr and "no timings yet" in proc.stderr


def test_the_same_command_without_the_limit_finishes_and_rebuilds_nothing(
    stopped: tuple, finished: tuple, demo: DemoHistory
) -> None:
    first, _ = stopped
    proc, report = finished
    assert proc.returncode == 0, proc.stderr
    assert report["status"] == "found" and report["first_bad"] == demo.culprit and report["stopped"] is None
    assert built(proc.stderr).isdisjoint(built(first.stderr)), "a build of the stopped run was made again"
    assert "from what this state has seen" in proc.stderr and "3 already built" in proc.stderr


def test_the_html_page_is_written_beside_the_json(finished: tuple, state: Path, demo: DemoHistory) -> None:
    page = state.parent.joinpath(f"{state.name}.html").read_text()
    assert page.startswith("<!doctype html>") and '<svg class="chart"' in page and "<script" not in page
    along = finished[1]["along"]  # the distance series the charts draw: by place in the history
    assert [a["position"] for a in along] == sorted({demo.commits.index(a["commit"]) for a in along})
    culprit = next(a for a in along if a["commit"] == demo.culprit)
    assert culprit["tv"] > finished[1]["tolerance"] and culprit["verdict"] in ("bad", "changed")


def test_the_culprits_and_parents_runs_and_a_command_for_one_seed(finished: tuple, demo: DemoHistory) -> None:
    proc, report = finished
    out = report["outputs"]
    assert out["culprit"] == demo.culprit and out["parent"] == report["last_good"]
    assert len(out["rows"]) == 6
    confirms = {v["role"]: v for v in report["verdicts"] if v["role"].startswith("confirm-")}
    for row, i in zip(out["rows"], range(6)):
        assert row["culprit_seed"] == confirms["confirm-culprit"]["seeds"][0] + i
        assert row["parent_seed"] == confirms["confirm-parent"]["seeds"][0] + i
        for side in ("culprit", "parent"):
            assert re.fullmatch(r"[a-f]{4}", row[side]), row  # the demo generates 4 letters after "ab"
    again = out["rerun"]
    assert again["seed"] == out["rows"][0]["culprit_seed"]
    assert Path(again["argv"][0]) == Path(again["binaries"]["binary"]) and Path(again["argv"][0]).is_file()
    # the printed command runs that seed by hand, and prints what the stored run generated
    assert shlex.split(again["command"].split(" && ", 1)[1]) == again["argv"]
    by_hand = subprocess.run(again["argv"], cwd=again["cwd"], capture_output=True, text=True, timeout=30)
    assert by_hand.stdout.strip() == "ab" + out["rows"][0]["culprit"]
    # and the Markdown shows both, the runs collapsed
    md = bisect_markdown(BisectReport.from_json(report))
    assert "<details><summary>First runs of the parent and the first bad commit" in md
    assert again["command"] in md and f"| 1 | {out['rows'][0]['parent_seed']} | `{out['rows'][0]['parent']}`" in md


def _kept(state: Path) -> list[Path]:
    return sorted(state.glob("kept/*/*"), key=lambda p: p.stat().st_mtime)


def test_gc_dry_run_removes_nothing(finished: tuple, demo: DemoHistory, state: Path) -> None:
    before = sorted(p for p in state.rglob("*"))
    proc = cli("gc", str(demo.config), "--state", str(state), "--keep-binaries", "0", "--max-size", "0", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert "would remove" in proc.stdout and "would free" in proc.stdout
    assert sorted(p for p in state.rglob("*")) == before


@pytest.mark.heavy  # whole bisects or builds, 3-8 s: after the default suite (README: Tests)
def test_gc_keeps_the_most_recently_used_binaries_and_a_later_bisect_rebuilds(
    finished: tuple, demo: DemoHistory, state: Path
) -> None:
    kept = _kept(state)
    assert len(kept) >= 4
    newest = kept[-2:]
    proc = cli("gc", str(demo.config), "--state", str(state), "--keep-binaries", "2")
    assert proc.returncode == 0, proc.stderr
    assert _kept(state) == newest, "gc did not keep the two most recently used binaries"
    assert f"removed {len(kept) - 2} kept binaries" in proc.stdout and "freed" in proc.stdout
    for gone in kept[:-2]:
        assert f"removed kept binaries {gone.relative_to(state)}" in proc.stdout
    again = cli("gc", str(demo.config), "--state", str(state), "--keep-binaries", "2")
    assert "nothing to remove" in again.stdout
    # The database still has every build: the next bisect finds the binaries gone and rebuilds
    # them, replaying every stored run (the rebuilt binaries are the same). Its config caps the
    # state directory (storage: is no part of the experiment: the same job, the same runs), and
    # the caps are applied once it is done.
    capped = replace(demo, config=demo.config.with_name("capped.yaml"))
    data = yaml.safe_load(demo.config.read_text())
    data["storage"].update(max_binaries=1, max_log_mb=0)  # a key given twice is an error (issue 46)
    capped.config.write_text(yaml.safe_dump(data, sort_keys=False))
    proc, report = bisect(capped, state)
    assert proc.returncode == 0, proc.stderr
    assert report["first_bad"] == demo.culprit
    assert {p.name[:12] for p in kept[:-2]} & built(proc.stderr), "no removed binary was rebuilt"
    assert report["runs_executed"] == 0 and report["job"] == finished[1]["job"]
    assert "[gc] removed" in proc.stderr
    assert len(_kept(state)) == 1 and not list(state.glob("logs/*"))
    # a build log gc removed is named as gone, one line, exit 2
    log = cli("build-log", str(demo.config), "--commit", demo.good, "--state", str(state))
    assert log.returncode == 2 and "is gone (removed by `bisectbot gc`" in log.stderr


def test_deadline_stops_before_anything_is_built(demo: DemoHistory, tmp_path: Path) -> None:
    proc, report = bisect(demo, tmp_path / "st", "--deadline", "0.001")
    assert proc.returncode == 3, proc.stderr
    assert report["status"] == "stopped" and report["stopped"]["by"] == "deadline"
    assert report["builds"] == 0 and not built(proc.stderr)
    assert report["candidates"][-1] == demo.bad and demo.culprit in report["candidates"]


@pytest.mark.parametrize(
    "args, what", [(("--deadline", "soon"), "--deadline"), (("--max-builds", "-1"), "--max-builds")]
)
def test_bad_limits_are_refused(demo: DemoHistory, tmp_path: Path, args: tuple[str, ...], what: str) -> None:
    proc = cli("bisect", str(demo.config), "--good", demo.good, "--bad", "main", "--state", str(tmp_path / "st"), *args)
    assert proc.returncode == 2 and what in proc.stderr
    assert not (tmp_path / "st").exists()


def test_gc_of_a_missing_state_directory_is_one_line(demo: DemoHistory, tmp_path: Path) -> None:
    proc = cli("gc", str(demo.config), "--state", str(tmp_path / "none"), "--keep-binaries", "1")
    assert proc.returncode == 2
    assert (
        proc.stderr.strip()
        == f"bisectbot: error: state directory {tmp_path / 'none'} does not exist: nothing to collect"
    )


@pytest.mark.heavy  # whole bisects or builds, 3-8 s: after the default suite (README: Tests)
def test_log_finds_the_state_the_bisect_used_and_names_a_missing_one(demo: DemoHistory) -> None:
    """No --state anywhere: the config's storage.state_dir (the demo's: ./state beside the
    config) is where the bisect writes and where `log` and `build-log` read; before anything
    ran, they say which directory they looked in, and create nothing."""
    where = demo.config.parent / "state"
    assert "state_dir: ./state" in demo.config.read_text()
    missing = cli("log", str(demo.config))
    assert missing.returncode == 2 and str(where) in missing.stderr and "nothing has run there" in missing.stderr
    assert not where.exists()  # a read-only command made nothing
    assert cli("build-log", str(demo.config), "--commit", "main").returncode == 2 and not where.exists()
    proc = cli("bisect", str(demo.config), "--good", demo.good, "--bad", "main", "-q")
    assert proc.returncode == 0, proc.stderr
    assert (where / "state.sqlite3").is_file()
    log = cli("log", str(demo.config), "--json", "-")
    assert log.returncode == 0, log.stderr
    data = json.loads(log.stdout)
    assert data["state"] == str(where) and [j["kind"] for j in data["jobs"]] == ["bisect"]
