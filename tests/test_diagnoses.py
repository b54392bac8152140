"""Diagnoses a user can act on (issue 53): each history of a small seeded C program (bench/choice.py,
built for real with cmake) is bisected through the real CLI, and the line that says what went
wrong is checked word for word, with the exit code: ends that print the same seed for seed end
clean (nothing changed); a crash rate that rose names `statistic.failures: outcome`; a program
whose output differs on the same seed is named, places nothing by seed identity and stays within
the builds bound + 2; a good end unlike the commits after it (`reference: good`) is named, with
another --good to try."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
from pathlib import Path
from typing import Any, Sequence

import pytest
import yaml

from bench.choice import ChoiceHistory, Step, write_choice_history
from bisectbot.core.ends import find_unusual
from bisectbot.records.commits import CommitVerdict
from bisectbot.statistics.outcome import Verdict
from bisectbot.statistics.skips import failure_shift

from conftest import TOOLCHAIN, bisectbot_argv, needs, subprocess_env

REF = (0.35, 0.45, 0.20)


def history(dest: Path, steps: Sequence[Step], **config: Any) -> tuple[ChoiceHistory, Path]:
    """The history of `steps` and its config: the exact reference REF (or `reference`), the
    default test levels; other keys merged into their sections."""
    h = write_choice_history(dest, steps)
    data: dict[str, Any] = {
        "name": "diag",
        "repo": {"path": str(h.repo)},
        "build": {
            "cmake_args": ["-DCMAKE_BUILD_TYPE=Release"],
            "targets": ["prog"],
            "binaries": {"binary": ["bin/prog"]},
            "timeout": 300,
        },
        "run": {"argv": ["{binary}", "{seed}"], "max_runs": 4000, "timeout": 10, "jobs": 0},
        "parse": {"split": "chars", "expect_tokens": 1},
        "statistic": {"outcome": {"position": 0}},
        "reference": {"probs": dict(zip("abc", REF))},
    }
    for key, value in config.items():
        data[key] = value if key == "reference" else {**data.get(key, {}), **value}
    path = dest / "diag.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return h, path


def bisect(config: Path, h: ChoiceHistory, good: str | None = None) -> tuple[subprocess.CompletedProcess[str], dict]:
    """`bisectbot bisect CONFIG --good FIRST --bad LAST --json FILE` (or `--good good`), in the
    config's directory's state: the process and its report."""
    out = config.parent / "report.json"
    out.unlink(missing_ok=True)
    ends = ["--good", good or h.commits[0], "--bad", h.commits[-1]]
    args = ["bisect", str(config), *ends, "--json", str(out), "--state", str(config.parent / "state")]
    proc = subprocess.run(
        bisectbot_argv(*args), capture_output=True, text=True, timeout=600, env=subprocess_env(CI="1")
    )
    return proc, json.loads(out.read_text()) if out.exists() else {}


def error_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The one `bisectbot: error:` line on stderr (there is exactly one)."""
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("bisectbot: error: ")]
    assert len(lines) == 1, proc.stderr[-3000:]
    return lines[0].removeprefix("bisectbot: error: ")


# -- a crash rate that rose ----------------------------------------------------------------------
def test_a_crash_rate_is_compared_seed_for_seed() -> None:
    """Only what the broken end fails more often counts; the seeds where both fail tell nothing."""
    working = {s: s % 50 == 0 for s in range(400)}  # 2%
    broken = {s: s % 50 == 0 or s % 10 == 3 for s in range(400)}  # 12%
    shift = failure_shift(working, broken, 5e-4)
    assert shift is not None and (shift.only_after, shift.only_before, shift.shared) == (40, 0, 400)
    assert shift.before == 0.02 and shift.after == 0.12
    assert failure_shift(broken, working, 5e-4) is None  # the other way round: not a rise
    assert failure_shift(working, {s: s % 10 == 3 for s in range(40)}, 5e-4) is None  # 4 seeds: not shown


CRASHING = [Step("first", REF), *[Step("src") for _ in range(5)], Step("change", crash=0.3), Step("src")]


@needs(*TOOLCHAIN)
def test_a_crash_rate_that_rose_names_statistic_failures_outcome(tmp_path: Path) -> None:
    """30% of seeds crash from one commit on, the outcome among the others unchanged: the bad end
    tests GOOD, and the error says the crash rate rose and which knob bisects it (it never
    mentioned it: 0 of 30 in the audit)."""
    h, config = history(tmp_path, CRASHING)
    proc, _ = bisect(config, h)
    assert proc.returncode == 4, proc.stderr[-3000:]
    said = error_line(proc)
    assert said.startswith(f"bad ref {h.commits[-1]} ({h.commits[-1][:12]}) tests GOOD, expected BAD: "), said
    cause = re.search(
        r"; likely cause: the bad end's runs fail in (\d+)% of runs \(\d+ of \d+: crash \d+; the last: killed by "
        r"SIGABRT\), the good end's in 0% \(0 of \d+; on the \d+ seeds both ran, \d+ failed at the bad end alone and "
        r"0 at the good end alone\): failed runs are no observation \(statistic.failures: skip\), so the tests judged "
        r"only the runs that did not fail; to bisect the crash rate, set statistic.failures: outcome$",
        said,
    )
    assert cause is not None and 20 <= int(cause.group(1)) <= 40, said
    assert "program itself fails" not in said and "lower test.tolerance" not in said  # not said twice, no band advice


@needs(*TOOLCHAIN)
def test_commits_skipped_for_crashing_name_statistic_failures_outcome(tmp_path: Path) -> None:
    """80% of seeds crash from one commit on, and the bad end is tested last: every commit after
    it is skipped (its runs mostly fail), and the ambiguous range says the knob for a crash."""
    steps = [Step("first", REF), *[Step("src") for _ in range(3)], Step("change", crash=0.8), Step("src")]
    h, config = history(tmp_path, [*steps, Step("src")], test={"broken_end": "last"})
    proc, report = bisect(config, h)
    assert proc.returncode == 3 and report["status"] == "ambiguous", proc.stderr[-3000:]
    assert h.first("change") in report["candidates"]
    assert re.search(
        r": runs crash: killed by SIGABRT, command variant #; commits whose runs mostly fail are skipped, as failed "
        r"runs are no observation \(statistic.failures: skip\): if the crash is the bug, set statistic.failures: "
        r"outcome to bisect it$",
        report["message"],
    ), report["message"]


@pytest.mark.heavy  # a whole bisect: ~4 s (~15 s on a busy host)
@needs(*TOOLCHAIN)
def test_with_the_knob_it_names_the_crash_rate_is_bisected(tmp_path: Path) -> None:
    h, config = history(tmp_path, CRASHING, statistic={"failures": "outcome"})
    proc, report = bisect(config, h)
    assert proc.returncode == 0 and report["first_bad"] == h.first("change"), proc.stderr[-3000:]


# -- nothing changed between the ends -------------------------------------------------------------
@needs(*TOOLCHAIN)
def test_ends_that_print_the_same_seed_for_seed_end_clean_saying_nothing_changed(tmp_path: Path) -> None:
    """A history where nothing changes (the bad end is GOOD like the good end, the reference
    their own runs): not band advice (lower test.tolerance / raise test.eta, 89 of 89 in the
    audit), but that nothing changed, with the seeds, and the exit of a clean range."""
    h, config = history(tmp_path, [Step("first", REF), *[Step("src") for _ in range(9)]], reference="good")
    proc, report = bisect(config, h)
    assert proc.returncode == 1, proc.stderr[-3000:]  # as a --scan that finds no departure (status clean)
    good, bad = h.commits[0][:12], h.commits[-1][:12]
    assert proc.stdout.startswith("bisectbot: nothing changed between the ends of 10 commits\n"), proc.stdout[:500]
    assert report["status"] == "clean" and report["strategy"] == "none" and report["builds"] == 2
    said = re.fullmatch(
        rf"nothing changed between the ends: the bad end {bad} printed what the good end {good} printed on (\d+) of "
        r"(\d+) seeds both ran \(total variation below 0.05 between them\), and both test GOOD against the "
        r"reference: there is no departure to bisect; give a --bad where the bug shows, or rerun with --scan to "
        r"test every commit between them \(a change that came and went\)",
        report["message"],
    )
    assert said is not None and said.group(1) == said.group(2) and int(said.group(1)) >= 119, report["message"]
    assert f"[answer] clean: {report['message']}" in proc.stderr and "tolerance" not in report["message"]
    assert report["reproduce"].endswith("--strategy auto")  # a strategy the CLI takes


@needs(*TOOLCHAIN)
def test_ends_that_differ_within_the_band_keep_the_band_advice(tmp_path: Path) -> None:
    """The bad end moved, but by less than the tolerance: it tests GOOD, its outputs differ from
    the good end's on some seeds, and the error says what to set for a change that small."""
    moved = (0.30, 0.50, 0.20)  # TV 0.05: between eta 0.03 and tolerance 0.1
    steps = [Step("first", REF), *[Step("src") for _ in range(3)], Step("change", moved)]
    h, config = history(tmp_path, steps, reference="good")  # 5% of seeds print another outcome there
    proc, report = bisect(config, h)
    assert proc.returncode == 4 and report == {}, proc.stderr[-3000:]
    said = error_line(proc)
    assert said.startswith(f"bad ref {h.commits[-1]} ({h.commits[-1][:12]}) tests GOOD, expected BAD: "), said
    assert said.endswith(
        "; a change between eta 0.03 and tolerance 0.1 (total variation) from the reference may be called either "
        "way: if a change this small matters, lower test.tolerance to it (bisectbot init --tolerance); if it does "
        "not, raise test.eta above it"
    ), said
    assert "nothing changed" not in said


# -- a program whose output differs on the same seed ---------------------------------------------
NOISY = "the program is not deterministic per seed: "


def noisy_said(report: dict[str, Any], text: str) -> None:
    """The report names the program as not deterministic per seed, from the good end's reruns,
    in its JSON, its assumptions and the summary `text`; and no commit was placed by seed identity."""
    again = report["repeatability"]
    assert again["commit"] == report["good"] and 60 <= again["seeds"] <= 64 and not again["deterministic"], again
    said = (  # the seeds whose two runs both counted: 64 unless a run failed
        f"{NOISY}{again['differ']} of {again['seeds']} seeds of the good end {report['good'][:12]} printed another outcome when run "
        "a second time, so no commit is placed beside another for printing the same outcomes seed for seed; the "
        "tests stay valid (two runs on one seed are then independent draws as far as the program's own noise "
        "goes, as the tests allow) but take more runs"
    )
    assert said in report["assumptions"] and again["differ"] > 0
    assert "program: " + said in " ".join(text.split())  # the summary, unwrapped
    assert not [v for v in report["verdicts"] if v["verdict"] in ("good-side", "bad-side")]


@pytest.mark.heavy  # whole bisects or long simulations, 4 s or more: after the default suite (README: Tests)
@needs(*TOOLCHAIN)
def test_a_program_that_prints_otherwise_on_the_same_seed_is_named(tmp_path: Path) -> None:
    """Half the runs mix in the clock: the good end's first seeds, run again, print otherwise on
    some, and the bisect says so (and places nothing by seed identity) while naming the commit."""
    steps = [Step("first", REF, noise=0.5), Step("src"), Step("change", (1.0, 0.0, 0.0)), Step("src")]
    h, config = history(tmp_path, steps)
    proc, report = bisect(config, h)
    assert proc.returncode == 0 and report["first_bad"] == h.first("change"), proc.stderr[-3000:]
    noisy_said(report, proc.stdout)
    assert f"[reruns] {NOISY}" in proc.stderr
    assert report["builds"] <= report["builds_bound"] + 2
    # the second runs are stored apart from the first (a key of their own), and a resume replays them
    db = sqlite3.connect(tmp_path / "state" / "state.sqlite3")
    keys = db.execute("SELECT COUNT(*) FROM runs WHERE sha=? GROUP BY run_key", (report["good"],)).fetchall()
    db.close()
    assert sorted(n for (n,) in keys)[0] == 64 and len(keys) == 2, keys
    again, resumed = bisect(config, h)
    assert again.returncode == 0 and resumed["runs_executed"] == 0, again.stderr[-3000:]
    assert report["repeatability"]["runs_executed"] >= 64  # the second runs, counted in runs_executed
    assert resumed["repeatability"] == {**report["repeatability"], "runs_executed": 0}  # replayed, not run again


@pytest.mark.heavy  # 16 commits, the reference the good end's own runs: ~10 s (~25 s on a busy host)
@needs(*TOOLCHAIN)
def test_a_noisy_program_against_the_good_ends_own_runs_stays_within_the_bound(tmp_path: Path) -> None:
    """With `reference: good` the good end's test against its own runs passed after ~120 runs on
    no evidence, the steps' budgets followed it, undecided steps went to the bad side and the
    search wandered (13 builds against a bound of 7 on this history, 23 against 9 in simulation):
    its test now reads its reruns, and the bisect names the commit within the bound + 2."""
    shifted = (0.25, 0.55, 0.20)  # TV 0.1 from REF
    steps = [Step("first", REF, noise=0.5), *[Step("src") for _ in range(9)], Step("change", shifted)]
    h, config = history(tmp_path, [*steps, *[Step("src") for _ in range(5)]], reference="good")
    proc, report = bisect(config, h)
    assert proc.returncode == 0 and report["first_bad"] == h.first("change"), proc.stderr[-3000:]
    noisy_said(report, proc.stdout)
    assert report["builds"] <= report["builds_bound"] + 2, (report["builds"], report["builds_bound"])
    good = next(v for v in report["verdicts"] if v["role"] == "good-endpoint")
    assert good["verdict"] == "good" and good["reason"].endswith("(on its seeds run a second time)")
    assert good["runs"] > 200  # a test on evidence, not ~120 runs of its own first runs


# -- a good end unlike the commits after it --------------------------------------------------------
def step(sha: str, verdict: Verdict) -> CommitVerdict:
    """A step's verdict against the reference on the common seeds."""
    counts = {"a": 80, "b": 110, "c": 48}
    return CommitVerdict(
        sha, "", "step", verdict, 238, counts, {}, 0, 0.0, 0.0, "", "reference", 1e-3, 1e-3, None, "ok", 0.1
    )


def test_an_unusual_end_needs_commits_that_agree_with_each_other_and_no_departure() -> None:
    """core.ends.find_unusual on seeds alone: the neighbour differs from the end on a few seeds and
    prints what a later commit prints; one of them undecided. Not when the end prints like the
    neighbour, when the neighbour stands alone, or when a commit like it departs (BAD)."""
    end = {s: s % 3 for s in range(200)}
    later = {s: (s + 1) % 3 if s % 25 == 0 else s % 3 for s in range(200)}  # 8 of 200 seeds differ
    seen = {"E": end, "N": later, "X": dict(later)}
    ref = (("a", "b", "c"), (0.35, 0.45, 0.20))
    found = find_unusual(("good", "E"), "N", [step("X", Verdict.INCONCLUSIVE)], seen, ref)
    assert found is not None and found.alike == ("X",) and (found.unlike.differ, found.unlike.shared) == (8, 200)
    assert found.tested.sha == "X" and found.tv is not None
    assert (
        find_unusual(("good", "E"), "N", [step("X", Verdict.INCONCLUSIVE)], {**seen, "N": end, "X": end}, ref) is None
    )
    assert find_unusual(("good", "E"), "N", [step("N", Verdict.INCONCLUSIVE)], {"E": end, "N": later}, ref) is None
    departs = [step("X", Verdict.INCONCLUSIVE), step("N", Verdict.BAD)]
    assert find_unusual(("good", "E"), "N", departs, seen, ref) is None


ODD = (0.31, 0.45, 0.24)  # TV 0.04 from REF, which every later commit samples until the change
UNUSUAL = [
    Step("first", ODD),
    Step("src", REF),
    *[Step("src") for _ in range(11)],
    Step("change", (1.0, 0.0, 0.0)),
    *[Step("src") for _ in range(3)],
]


@pytest.mark.heavy  # whole bisects or long simulations, 4 s or more: after the default suite (README: Tests)
@needs(*TOOLCHAIN)
def test_a_good_end_unlike_the_commits_after_it_is_named_with_another_good_to_try(tmp_path: Path) -> None:
    """The reference is the good end's own runs, and the good end is itself unusual (TV 0.04 off
    the commits after it, which agree with each other): every step after it is undecided against
    it, so the search ends next to it. The bisect stops there, within the builds bound, saying the
    good end is the problem and which --good to try (never said in the audit: no answer in 26 of
    30, over the bound in 14)."""
    h, config = history(tmp_path, UNUSUAL, reference="good")
    proc, report = bisect(config, h)
    assert proc.returncode == 4 and report == {}, proc.stderr[-3000:]
    good, child = h.commits[0][:12], h.commits[1][:12]
    said = re.fullmatch(
        rf"the good end {good} looks unlike the commits after it: {child}, the commit the search ended next to "
        rf"it, printed another outcome than it on (\d+) of (\d+) seeds both ran, while ([0-9a-f]{{12}}(, | and ))*"
        rf"[0-9a-f]{{12}} print what {child} prints seed for seed; the reference is the good end's own runs "
        r"\(a control sample\), and [0-9a-f]{12}'s test against them was undecided after \d+ runs \(observed TV "
        r"0\.0\d\d from it; eta 0.03, tolerance 0.1\), so no commit after it can be placed: try another --good, "
        rf"e.g. {child} \(or, if a change this small matters, lower test.tolerance to it\)",
        error_line(proc),
    )
    assert said is not None and 0 < int(said.group(1)) < int(said.group(2)), error_line(proc)
    built = re.findall(r"^  built ([0-9a-f]{12}) in", proc.stderr, re.M)
    assert len(built) <= 8  # the builds bound of 17 commits: ⌈log2 17⌉ + 3


@pytest.mark.heavy  # a whole bisect: ~4 s (~15 s on a busy host)
@needs(*TOOLCHAIN)
def test_with_the_good_it_names_the_change_is_found(tmp_path: Path) -> None:
    h, config = history(tmp_path, UNUSUAL, reference="good")
    proc, report = bisect(config, h, good=h.commits[1])  # the commit the search ended next to the good end
    assert proc.returncode == 0 and report["first_bad"] == h.first("change"), proc.stderr[-3000:]
