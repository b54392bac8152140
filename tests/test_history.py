"""A project's history changes under a bisect: targets and options renamed, the output format,
flags that crash for months, build directories that go stale. Real git, real cmake builds, the
real CLI; each test is one of the ways a bisect of llama.cpp went wrong before."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from eras import NEW_PARSE, OLD_PARSE, Era, both_targets, command, config, write_history

from conftest import TOOLCHAIN, bisectbot_argv, needs, subprocess_env

pytestmark = needs(*TOOLCHAIN)  # every test builds a generated history

OLD = Era(target="oldprog", option="OLD_FAST")
NEW = Era()


def cli(*args: str, timeout: float = 600) -> tuple[int, dict, str]:
    proc = subprocess.run(
        bisectbot_argv(*args, "--json", "-"),
        capture_output=True,
        text=True,
        timeout=timeout,
        env=subprocess_env(CI="1"),
    )
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        data = {}
    return proc.returncode, data, proc.stderr


def run_test(cfg: Path, ref: str, state: Path) -> tuple[int, dict, str]:
    return cli("test", str(cfg), "--commit", ref, "--state", str(state))


# -- 1, 3: renamed targets and options, and the binary each commit really built -----------------
@pytest.mark.heavy  # whole bisects or long simulations, 4 s or more: after the default suite (README: Tests)
def test_a_renamed_target_is_built_with_its_own_variant_and_never_a_stale_binary(tmp_path: Path) -> None:
    hist = write_history(tmp_path, [OLD, OLD, NEW, NEW.__class__(defect=True)])
    # both variants list both binaries: only provenance keeps the newer, BAD binary away
    build = both_targets()
    for v in build["variants"]:
        v["binaries"] = {"binary": ["bin/prog", "bin/oldprog"]}
        v["cmake_args"] = []
    cfg = config(hist, tmp_path, build=build, run={"argv": command()})
    state = tmp_path / "st"
    code, bad, err = run_test(cfg, hist.commits[3], state)
    assert code == 1 and bad["detail"]["build_variant"] == 0, err
    code, old, err = run_test(cfg, hist.commits[0], state)  # same build directory, bin/prog still there
    assert code == 0, err
    detail = old["detail"]
    assert detail["build_variant"] == 1 and Path(detail["binaries"]["binary"]).name == "oldprog"


@pytest.mark.heavy  # whole bisects or builds, 3-8 s: after the default suite (README: Tests)
def test_a_misspelt_or_retired_option_moves_on_to_the_next_variant(tmp_path: Path) -> None:
    hist = write_history(tmp_path, [OLD, NEW])
    typo = both_targets(new_option="NEW_FASST")  # cmake would ignore it in silence
    typo["variants"].insert(
        1, {"targets": ["prog"], "binaries": {"binary": ["bin/prog"]}, "cmake_args": ["-DNEW_FAST=ON"]}
    )
    cfg = config(hist, tmp_path, build=typo, run={"argv": command()})
    state = tmp_path / "st"
    code, new, err = run_test(cfg, hist.commits[1], state)
    assert code == 0 and new["detail"]["build_variant"] == 1, err
    code, old, err = run_test(cfg, hist.commits[0], state)  # the new option is not used by the old tree
    assert code == 0 and old["detail"]["build_variant"] == 2, err
    log = subprocess.run(
        bisectbot_argv("build-log", str(cfg), "--commit", hist.commits[0], "--state", str(state)),
        capture_output=True,
        text=True,
        env=subprocess_env(CI="1"),
    )
    assert "(build variant 2)" in log.stdout.splitlines()[0]


def test_a_tree_no_variant_fits_is_skipped_with_every_reason(tmp_path: Path) -> None:
    hist = write_history(tmp_path, [Era(target="other", option="OTHER")])
    cfg = config(hist, tmp_path, build=both_targets(), run={"argv": command()})
    code, out, err = run_test(cfg, hist.commits[0], tmp_path / "st")
    assert code == 4 and out["detail"]["build"] == "unsupported", err
    reason = out["reason"]
    assert "variant 0: cmake does not use -DNEW_FAST" in reason and "variant 1: cmake does not use -DOLD_FAST" in reason


# -- 2: stored results never outlive their inputs ---------------------------------------------------
@pytest.mark.heavy  # whole bisects or builds, 3-8 s: after the default suite (README: Tests)
def test_changing_a_fixture_or_a_file_named_in_cmake_args_is_never_replayed(tmp_path: Path) -> None:
    hist = write_history(tmp_path, [NEW])
    fixture = tmp_path / "model.txt"
    fixture.write_text("weights v1\n")
    include = tmp_path / "extra.cmake"
    include.write_text('message(STATUS "extra v1")\n')
    cfg = config(
        hist,
        tmp_path,
        build={
            "targets": ["prog"],
            "binaries": {"binary": ["bin/prog"]},
            "cmake_args": ["-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_PROJECT_INCLUDE={config_dir}/extra.cmake"],
        },
        run={"argv": command("--draft-max", "--cache", "{config_dir}/model.txt")},
    )
    state = tmp_path / "st"
    assert run_test(cfg, "main", state)[0] == 0
    code, again, _ = run_test(cfg, "main", state)
    assert code == 0 and again["detail"]["executed"] == 0 and again["builds"] == 0  # everything replayed
    fixture.write_text("weights v2\n")
    code, changed, _ = run_test(cfg, "main", state)
    assert code == 0 and changed["detail"]["executed"] >= changed["runs"] > 0 and changed["builds"] == 0
    include.write_text('message(STATUS "extra v2")\n')  # same compiled code
    code, rebuilt, _ = run_test(cfg, "main", state)
    assert code == 0 and rebuilt["builds"] == 1  # built again: an input of the build changed ...
    assert rebuilt["detail"]["executed"] == 0  # ... into the same binary: its runs still count
    include.write_text('set(CMAKE_CXX_FLAGS_RELEASE "-O1")\n')  # different compiled code
    code, recompiled, _ = run_test(cfg, "main", state)
    assert code == 0 and recompiled["builds"] == 1 and recompiled["detail"]["executed"] > 0


# -- 4, 5, 6: runs that crash or do not parse -----------------------------------------------------
def test_a_crash_names_its_signal_and_first_error_line(tmp_path: Path) -> None:
    hist = write_history(tmp_path, [Era(crash=True)])
    cfg = config(
        hist, tmp_path, build={"targets": ["prog"], "binaries": {"binary": ["bin/prog"]}}, run={"argv": command()}
    )
    code, out, err = run_test(cfg, "main", tmp_path / "st")
    assert code == 4, err
    assert "killed by SIGSEGV: error: V cache quantization requires flash_attn" in out["reason"]
    # the first error leads (the cause); where the program's stderr ended follows, labelled
    assert out["reason"].index("V cache quantization") < out["reason"].index("last stderr line: backtrace follows")
    assert out["reason"].endswith("command variant 0")  # which command
    assert out["detail"]["signature"].startswith("runs crash: killed by SIGSEGV")


@pytest.mark.heavy  # whole bisects or long simulations, 4 s or more: after the default suite (README: Tests)
def test_a_variant_whose_output_does_not_parse_gives_way_to_one_with_its_own_parse(tmp_path: Path) -> None:
    hist = write_history(tmp_path, [Era(output="old"), Era(output="new")])
    run = {"variants": [{"argv": command(), "parse": NEW_PARSE}, {"argv": command(), "parse": OLD_PARSE}]}
    cfg = config(hist, tmp_path, build={"targets": ["prog"], "binaries": {"binary": ["bin/prog"]}}, run=run)
    state = tmp_path / "st"
    code, new, err = run_test(cfg, hist.commits[1], state)
    assert code == 0 and new["detail"]["variant"] == 0, err
    code, old, err = run_test(cfg, hist.commits[0], state)
    assert code == 0 and old["detail"]["variant"] == 1, err
    assert "command variant 0 fails at run time" in err
    code, again, _ = run_test(cfg, hist.commits[0], state)  # remembered for that binary: no retry
    assert again["detail"]["variant"] == 1 and again["detail"]["executed"] == 0


def test_a_variant_that_crashes_at_run_time_gives_way_to_the_next(tmp_path: Path) -> None:
    hist = write_history(tmp_path, [Era(crash_on_cache_f32=True)])
    run = {"variants": [{"argv": command("--draft-max", "--cache", "f32")}, {"argv": command()}]}
    cfg = config(hist, tmp_path, build={"targets": ["prog"], "binaries": {"binary": ["bin/prog"]}}, run=run)
    code, out, err = run_test(cfg, "main", tmp_path / "st")
    assert code == 0 and out["detail"]["variant"] == 1, err
    # said, not hidden, in words (not the digit-masked signature the skip logic compares)
    assert "command variant 0 fails at run time (runs mostly fail (" in err and "killed by SIGSEGV" in err
    assert "variant #" not in err


# -- 7: blocks of skips ----------------------------------------------------------------------------
@pytest.mark.heavy  # whole bisects or builds, 3-8 s: after the default suite (README: Tests)
def test_a_block_of_commits_that_crash_alike_is_jumped_and_reported(tmp_path: Path) -> None:
    eras = [NEW] * 5 + [Era(crash=True)] * 14 + [NEW] * 4 + [Era(defect=True)] * 5
    hist = write_history(tmp_path, eras)
    cfg = config(
        hist, tmp_path, build={"targets": ["prog"], "binaries": {"binary": ["bin/prog"]}}, run={"argv": command()}
    )
    code, report, err = cli(
        "bisect", str(cfg), "--good", hist.commits[0], "--bad", "main", "--state", str(tmp_path / "st")
    )
    assert code == 0, err
    assert report["first_bad"] == hist.first(defect=True)
    tried_in_block = [v for v in report["verdicts"] if v["verdict"] == "skip"]
    assert 1 <= len(tried_in_block) <= 6  # walking neighbour by neighbour would take 14
    block = next(b for b in report["skip_blocks"] if b["commits"] > 1)
    assert block["first"] in hist.commits[5:19] and block["last"] in hist.commits[5:19]
    assert block["signature"].startswith("runs crash: killed by SIGSEGV")
    assert "fail the same way" in err


@pytest.mark.heavy  # whole bisects or builds, 3-8 s: after the default suite (README: Tests)
def test_an_answer_at_a_block_names_the_block(tmp_path: Path) -> None:
    eras = [NEW] * 4 + [Era(crash=True)] * 8 + [Era(defect=True)] * 4
    hist = write_history(tmp_path, eras)
    cfg = config(
        hist, tmp_path, build={"targets": ["prog"], "binaries": {"binary": ["bin/prog"]}}, run={"argv": command()}
    )
    code, report, err = cli(
        "bisect", str(cfg), "--good", hist.commits[0], "--bad", "main", "--state", str(tmp_path / "st")
    )
    assert code == 3 and report["status"] == "ambiguous", err
    assert hist.first(defect=True) in report["candidates"]
    assert "commits 2024-03-" in report["message"] and "runs crash: killed by SIGSEGV" in report["message"]


# -- 8: checkout and build directories ------------------------------------------------------------
def test_a_commit_that_cannot_be_checked_out_is_skipped_with_git_s_reason(tmp_path: Path) -> None:
    hist = write_history(tmp_path, [NEW, Era(option="X_FAST")])
    cfg = config(
        hist, tmp_path, build={"targets": ["prog"], "binaries": {"binary": ["bin/prog"]}}, run={"argv": command()}
    )
    state = tmp_path / "st"
    assert run_test(cfg, hist.commits[0], state)[0] == 0
    # the bot's clone loses the object of a file only the second commit has
    blob = subprocess.run(
        ["git", "-C", str(hist.repo), "rev-parse", f"{hist.commits[1]}:CMakeLists.txt"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    obj = state / "src" / ".git" / "objects" / blob[:2] / blob[2:]
    assert obj.is_file()
    obj.unlink()
    code, out, err = run_test(cfg, hist.commits[1], state)
    assert code == 4 and out["detail"]["build"] == "checkout-failed", err
    assert "cannot check out" in out["reason"] and blob[:7] in out["reason"]


def test_a_build_that_fails_in_the_reused_directory_is_retried_clean(tmp_path: Path) -> None:
    hist = write_history(tmp_path, [Era(reads_cache=True), Era(writes_cache=True)])
    cfg = config(
        hist, tmp_path, build={"targets": ["prog"], "binaries": {"binary": ["bin/prog"]}}, run={"argv": command()}
    )
    state = tmp_path / "st"
    assert run_test(cfg, hist.commits[1], state)[0] == 0  # the newer tree leaves its cache behind
    code, out, err = run_test(cfg, hist.commits[0], state)
    assert code == 0, err
    assert out["detail"]["build"] == "ok"
    assert "built in a clean directory after the reused one failed" in out["detail"]["build_notes"]
    assert "extra.cpp" in out["detail"]["build_notes"]


# -- a culprit is confirmed against the reference ------------------------------------------------
@pytest.mark.heavy  # after the default suite (README: Tests)
def test_a_later_gross_change_is_never_named_over_an_earlier_mild_one(tmp_path: Path) -> None:
    """Real histories change more than once (#29975's defects entered mild in mid-2024 and took
    other shapes later). Quick steps ("unlike the bad end?") put the mild commits on the good
    side; the confirmation finds the candidate's parent departing from the reference, and the
    search walks back below it, keeping what passed, until the boundary is GOOD | BAD against
    the reference with a change between: the mild commit is named. Reference steps (`auto`
    here, and at llama.cpp's costs) are never fooled: one search, no boundary ruled out."""
    eras = [NEW] * 4 + [Era(mild_defect=True)] * 4 + [Era(defect=True)] * 4
    hist = write_history(tmp_path, eras)
    cfg = config(
        hist, tmp_path, build={"targets": ["prog"], "binaries": {"binary": ["bin/prog"]}}, run={"argv": command()}
    )
    mild = hist.first(mild_defect=True)
    code, out, err = cli(
        "bisect",
        str(cfg),
        "--good",
        hist.commits[0],
        "--bad",
        "main",
        "--strategy",
        "plain",
        "--state",
        str(tmp_path / "st"),
    )
    assert code == 0 and out["status"] == "found" and out["first_bad"] == mild, err
    first, *later = out["change_points"]
    assert first["commit"] == mild and first["first"] and later, out["change_points"]
    assert all(hist.commits.index(c["commit"]) > hist.commits.index(mild) for c in later)
    assert any("ruled out on the way" in a for a in out["assumptions"])
    assert out["extra"]["strategies"] == ["plain"] * (len(later) + 1)  # walked back, never restarted
    assert all(v["mode"] == "reference" for v in out["verdicts"] if v["verdict"] == "good")
    code, again, err = cli(
        "bisect",
        str(cfg),
        "--good",
        hist.commits[0],
        "--bad",
        "main",
        "--strategy",
        "reference",
        "--state",
        str(tmp_path / "st2"),
    )
    assert code == 0 and again["first_bad"] == mild and len(again["change_points"]) == 1, err
    assert again["extra"]["strategies"] == ["reference"]


@pytest.mark.heavy  # whole bisects or builds, 3-8 s: after the default suite (README: Tests)
def test_a_stray_token_on_every_commit_is_inside_the_indifference_zone(tmp_path: Path) -> None:
    """A program that prints a token outside the reference in 2% of runs, at every commit: with
    the default eta (0.3 × tolerance) a good commit is GOOD and the bisect names the culprit;
    with eta 0 (the point null) the same good commit is BAD."""
    eras = [Era(glitch=True)] * 5 + [Era(glitch=True, defect=True)] * 4
    hist = write_history(tmp_path, eras)
    build = {"targets": ["prog"], "binaries": {"binary": ["bin/prog"]}}
    cfg = config(hist, tmp_path, build=build, run={"argv": command()})
    state = tmp_path / "st"
    code, good, err = run_test(cfg, hist.commits[0], state)
    assert code == 0 and good["verdict"] == "good", err
    assert good["counts"]["<other>"] > 0  # the glitch was seen, and tolerated
    code, out, err = cli("bisect", str(cfg), "--good", hist.commits[0], "--bad", "main", "--state", str(state))
    assert code == 0 and out["first_bad"] == hist.first(defect=True), err
    assert any("stray outcome" in a for a in out["assumptions"])
    strict = config(
        hist,
        tmp_path,
        build=build,
        run={"argv": command()},
        name="strict.yaml",
        test={"alpha": 0.0005, "beta": 0.0005, "tolerance": 0.3, "eta": 0.0},
    )
    code, bad, err = run_test(strict, hist.commits[0], state)
    assert code == 1 and "reference probability 0" in bad["reason"], err
