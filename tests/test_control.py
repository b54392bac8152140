"""A reference measured at a commit ("like the good end"): it behaves like an exact one. It runs
with the same command-variant fallback as every test, says in one line why its runs fail, pairs
a test's fresh seeds with the control's runs on the same seeds, and `reference: good` /
`--reference good` need no config edit. Real git, real cmake builds of generated era histories."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from bisectbot.config import load_config
from bisectbot.config.sections import GOOD_END
from bisectbot.errors import ConfigError
from eras import Era, command, config, write_history

from conftest import TOOLCHAIN, bisectbot_argv, needs, subprocess_env

NEW = Era()
BUILD = {"targets": ["prog"], "binaries": {"binary": ["bin/prog"]}}


def cli(*args: str, timeout: float = 600) -> tuple[int, dict, str]:
    proc = subprocess.run(
        bisectbot_argv(*args), capture_output=True, text=True, timeout=timeout, env=subprocess_env(CI="1")
    )
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        data = {}
    return proc.returncode, data, proc.stderr


# -- the config: `reference: good` -----------------------------------------------------------------
def _minimal(tmp_path: Path, reference: object) -> Path:
    data = {
        "name": "x",
        "repo": {"path": str(tmp_path)},
        "build": BUILD,
        "run": {"argv": ["{binary}", "{seed}"]},
        "statistic": {"outcome": {"position": 0}},
        "reference": reference,
    }
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_reference_good_is_a_control_at_the_good_end_bound_by_the_job(tmp_path: Path) -> None:
    cfg = load_config(_minimal(tmp_path, "good"))
    control = cfg.reference.control
    assert control is not None and control.commit == GOOD_END and control.unbound
    bound = cfg.with_good_end("a" * 40)
    assert bound.reference.control is not None and bound.reference.control.commit == "a" * 40
    assert bound.reference.control.good_end and not bound.reference.control.unbound
    assert bound.digest() != cfg.digest()  # the job id names the commit measured
    assert cfg.with_good_end("b" * 40).digest() != bound.digest()
    # the long form says the same, with the control's settings
    long = load_config(_minimal(tmp_path, {"control": {"commit": "{good}", "runs": 500}}))
    assert long.reference.control is not None and long.reference.control.unbound
    assert long.with_good_end("a" * 40).reference.control.runs == 500  # type: ignore[union-attr]
    with pytest.raises(ConfigError, match="reference: 'bad' is not a reference"):
        load_config(_minimal(tmp_path, "bad"))


def test_reference_option_replaces_the_config_s_reference(tmp_path: Path) -> None:
    cfg = load_config(_minimal(tmp_path, {"probs": {"a": 0.5, "b": 0.5}}))
    assert cfg.with_reference("config") is cfg and cfg.with_reference(None) is cfg
    good = cfg.with_reference("good")
    assert good.reference.probs is None and good.reference.control is not None and good.reference.control.unbound
    at = cfg.with_reference("v1.0")
    assert at.reference.control is not None and at.reference.control.commit == "v1.0"
    # a config that already measures keeps its control settings, at the commit asked for
    measured = load_config(_minimal(tmp_path, {"control": {"commit": "v0.9", "runs": 700, "max_runs": 900}}))
    moved = measured.with_reference("good").reference.control
    assert moved is not None and (moved.commit, moved.runs, moved.max_runs) == (GOOD_END, 700, 900)


# -- real builds -------------------------------------------------------------------------------------
@pytest.mark.heavy  # whole bisects or long simulations, 4 s or more: after the default suite (README: Tests)
@needs(*TOOLCHAIN)
def test_test_of_one_commit_needs_a_commit_for_reference_good(tmp_path: Path) -> None:
    hist = write_history(tmp_path, [NEW, NEW])
    cfg = config(hist, tmp_path, build=BUILD, run={"argv": command()}, reference="good")
    code, _, err = cli("test", str(cfg), "--commit", "main", "--state", str(tmp_path / "st"))
    assert code == 2 and "only a bisect has one" in err and "--reference REF" in err, err
    code, out, err = cli(
        "test",
        str(cfg),
        "--commit",
        "main",
        "--reference",
        hist.commits[0],
        "--state",
        str(tmp_path / "st"),
        "--json",
        "-",
    )
    assert code == 0 and out["verdict"] == "good", err
    assert f"control sample of 200 runs at {hist.commits[0][:12]}" in out["reference"]["source"]


@needs(*TOOLCHAIN)
def test_the_control_falls_back_to_the_next_command_variant_like_any_test(tmp_path: Path) -> None:
    """At the control commit the first variant crashes at run time (`--cache f32`, as llama.cpp's
    `--cache-type-v f32` did for months): the control uses the next one, as a test would, and the
    test of a commit with the same behaviour is GOOD against it."""
    era = Era(crash_on_cache_f32=True)
    hist = write_history(tmp_path, [era, era])
    run = {"variants": [{"argv": command("--draft-max", "--cache", "f32")}, {"argv": command()}]}
    cfg = config(hist, tmp_path, build=BUILD, run=run)
    state = str(tmp_path / "st")
    code, out, err = cli(
        "test", str(cfg), "--commit", hist.commits[1], "--reference", hist.commits[0], "--state", state, "--json", "-"
    )
    assert code == 0 and out["verdict"] == "good", err
    assert out["detail"]["variant"] == 1
    assert "command variant 0 fails at run time" in err


@needs(*TOOLCHAIN)
def test_a_control_whose_runs_all_fail_says_why_in_one_line(tmp_path: Path) -> None:
    hist = write_history(tmp_path, [Era(crash=True), NEW])
    cfg = config(hist, tmp_path, build=BUILD, run={"argv": command()})
    code, _, err = cli(
        "test", str(cfg), "--commit", hist.commits[1], "--reference", hist.commits[0], "--state", str(tmp_path / "st")
    )
    assert code == 2, err
    line = err.strip().splitlines()[-1]
    assert line.startswith("bisectbot: error: reference.control: ")
    # how many, how (the signal), the program's own error line, which command variant
    assert f"runs at {hist.commits[0][:12]} failed" in line and "crash" in line
    assert "killed by SIGSEGV: error: V cache quantization requires flash_attn" in line
    assert "command variant 0" in line and "no other command variant fits" in line


@pytest.mark.heavy  # a whole bisect (README: Tests)
@needs(*TOOLCHAIN)
def test_bisect_with_reference_good_finds_and_confirms_a_change_from_the_good_end(tmp_path: Path) -> None:
    """No exact reference at all: the config's is replaced by `--reference good`, the good end's
    own runs; the search and the confirmation (the parent re-tested against the control on fresh
    seeds, the control run on those same seeds) name the first commit of the defect, exit 0."""
    eras = [NEW] * 6 + [Era(defect=True)] * 5
    hist = write_history(tmp_path, eras)
    cfg = config(hist, tmp_path, build=BUILD, run={"argv": command()})
    md = tmp_path / "r.md"
    code, report, err = cli(
        "bisect",
        str(cfg),
        "--good",
        hist.commits[0],
        "--bad",
        "main",
        "--reference",
        "good",
        "--state",
        str(tmp_path / "st"),
        "--markdown",
        str(md),
        "--json",
        "-",
    )
    assert code == 0 and report["status"] == "found", err
    assert report["first_bad"] == hist.first(defect=True)
    assert "like the good end" in report["reference"]["source"]
    assert "like the good end" in md.read_text()
    parent = [v for v in report["verdicts"] if v["role"] == "retest-parent"]
    assert all(v["verdict"] == "good" for v in parent)


@pytest.mark.heavy  # two bisects (README: Tests)
def test_an_undecided_confirmation_names_the_knob_and_raising_it_decides(small_demo, tmp_path: Path) -> None:
    """The parent's re-test against the good end on fresh seeds runs out of test.retest_runs:
    the bisect stops UNCONFIRMED and its message names that knob and its value; the same bisect
    with the knob raised decides, found and confirmed (exit 0)."""
    results = {}
    for runs in (20, 3000):
        data = yaml.safe_load(small_demo.config.read_text())
        data["repo"]["path"] = str(small_demo.repo)
        data.setdefault("test", {})["retest_runs"] = runs
        cfg = tmp_path / f"c{runs}.yaml"
        cfg.write_text(yaml.safe_dump(data))
        results[runs] = cli(
            "bisect", str(cfg), "--good", small_demo.good, "--bad", "main", "--reference", "good",
            "--strategy", "plain", "--state", str(tmp_path / f"st{runs}"), "--json", "-",
        )  # fmt: skip
    code, report, err = results[20]
    assert code == 3 and report["status"] == "unconfirmed", err
    assert "its budget: 20 runs, set by test.retest_runs: raise it" in report["message"]
    code, report, err = results[3000]
    assert code == 0 and report["status"] == "found" and report["first_bad"] == small_demo.culprit, err
    assert any(v["role"] == "retest-parent" and v["verdict"] == "good" for v in report["verdicts"])
