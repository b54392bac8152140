"""A number per run (statistic.kind mean) through the real CLI, on generated histories of a C
program printing an acceptance rate (bench/numberhist.py): a mean that drops past the tolerance is
found and named, against the good end's runs or an exact value; one that never changes names
nothing; the config mistakes of a number are one line each."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bench.numberhist import NumberHistory, Step, write_number_history
from bisectbot.config import load_config
from bisectbot.errors import ConfigError

from conftest import TOOLCHAIN, bisectbot_argv, needs, subprocess_env

CONFIG = """\
name: rate
repo: {{path: {repo}}}
build: {{targets: [prog], binaries: {{prog: [bin/prog]}}}}
run:
  argv: ["{{prog}}", "{{seed}}"]
parse: {{extract: 'accept = (\\S+)', split: whitespace}}
statistic:
  kind: mean
{statistic}reference: {reference}
test:
  tolerance: 0.05
"""


def cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        bisectbot_argv(*args), capture_output=True, text=True, timeout=timeout, env=subprocess_env(CI="1")
    )


def history(tmp_path: Path, *, drop: float | None = 0.50, nan: float = 0.0) -> NumberHistory:
    """16 commits: the rate's mean is 0.64, then `drop` from the commit 'change' on (None: never);
    a share `nan` of seeds prints `accept = -nan` at every commit."""
    steps = [Step("first", mean=0.64, nan=nan)] + [Step("src") for _ in range(6)]
    steps += [Step("change", mean=drop) if drop is not None else Step("src")]
    steps += [Step("src") for _ in range(3)] + [Step("break", broken=True), Step("repair")] + [Step("docs")] * 3
    return write_number_history(tmp_path, steps)


def write(
    tmp_path: Path, hist: NumberHistory, *, statistic: str = "  bounds: [0, 1]\n", reference: str = "good"
) -> Path:
    path = tmp_path / "rate.yaml"
    path.write_text(CONFIG.format(repo=hist.repo, statistic=statistic, reference=reference))
    return path


def bisect(config: Path, hist: NumberHistory, tmp_path: Path) -> tuple[subprocess.CompletedProcess[str], dict]:
    out = tmp_path / "report.json"
    done = cli(
        "bisect",
        str(config),
        "--good",
        hist.commits[0],
        "--bad",
        hist.commits[-1],
        "--json",
        str(out),
        "--state",
        str(tmp_path / "state"),
    )
    return done, json.loads(out.read_text()) if out.exists() else {}


@pytest.mark.heavy  # whole bisects or long simulations, 4 s or more: after the default suite (README: Tests)
@needs(*TOOLCHAIN)
def test_a_mean_that_drops_past_the_tolerance_is_found_against_the_good_end(tmp_path: Path) -> None:
    """The rate's mean 0.64 → 0.50 at one commit, judged like the good end (each run paired with
    the good end's run on its seed), a quarter of the seeds printing `accept = -nan` (no rate):
    that commit is named, its report gives each verdict's mean and the difference's interval, the
    interval of every GOOD lies within the tolerance, and the `nan` runs are no observation."""
    hist = history(tmp_path, nan=0.25)
    done, report = bisect(write(tmp_path, hist), hist, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert report["status"] == "found" and report["first_bad"] == hist.first("change")
    # a quarter of the runs print `-nan`: no observation, neither a failure nor a rerun
    assert all(not v["failures"] for v in report["verdicts"])
    assert any(v.get("values", {}).get("no_number", 0) > 0 for v in report["verdicts"] if v.get("values"))
    shown = [v for v in report["verdicts"] if v["verdict"] in ("good", "bad") and v.get("values", {}).get("no_number")]
    assert ("printed no number (nan)" in done.stdout) == bool(shown)  # a placement's row shows no numbers
    numeric = report["reference"]["numeric"]
    assert numeric["scale"] == "difference" and numeric["exact"] and numeric["good"] == [-0.05, 0.05]
    for v in report["verdicts"]:
        values = v.get("values")
        if v["verdict"] == "good" and values:
            assert -0.05 <= values["low"] <= values["high"] <= 0.05, v
        if v["verdict"] == "bad" and values:
            assert values["high"] < -0.015 or values["low"] > 0.015, v
    assert "− control's" in done.stdout and "|mean − control's|" in done.stdout
    assert "mean 0.64" in done.stdout or "mean 0.63" in done.stdout


@pytest.mark.heavy  # whole bisects or long simulations, 4 s or more: after the default suite (README: Tests)
@needs(*TOOLCHAIN)
def test_a_mean_against_an_exact_value_without_bounds_is_found(tmp_path: Path) -> None:
    """reference.mean and no bounds: the normal approximation (decisions from run 100 on) still
    names the commit, and the report says which method judged it."""
    hist = history(tmp_path)
    config = write(tmp_path, hist, statistic="", reference="{mean: 0.64}")
    done, report = bisect(config, hist, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert report["first_bad"] == hist.first("change")
    assert report["reference"]["numeric"]["exact"] is False
    assert "a normal approximation" in done.stdout
    tested = [v for v in report["verdicts"] if v["verdict"] in ("good", "bad") and v.get("values")]
    assert tested and all(v["runs"] >= 100 for v in tested)


@pytest.mark.heavy  # whole bisects or long simulations, 4 s or more: after the default suite (README: Tests)
@needs(*TOOLCHAIN)
def test_a_mean_that_never_changes_names_nothing(tmp_path: Path) -> None:
    """The same rate at every commit: no commit is named; the ends print the same number seed for
    seed, so the range ends clean (exit 1) saying nothing changed, with the seed-for-seed count;
    where the numbers are not the same seed for seed (a reference value, the bad end tested
    against it), the bad end tests GOOD and the message shows its mean beside the reference."""
    hist = history(tmp_path, drop=None)
    done, report = bisect(write(tmp_path, hist), hist, tmp_path)
    assert done.returncode == 1, done.stderr[-2000:]
    assert not report.get("first_bad") and report["status"] == "clean"
    assert "nothing changed between the ends" in report["message"]
    assert "printed what the good end" in report["message"] and "seeds both ran" in report["message"]


@pytest.mark.parametrize(
    ("statistic", "reference", "test", "said"),
    [
        ("kind: mean", "probs: {a: 1.0}", "tolerance: 0.05", "statistic.kind mean judges a number"),
        ("kind: mean", "mean: 0.6", "eta: 0.01", "give test.tolerance (the number's units)"),
        ("kind: time", "mean: 0.6", "tolerance: 0.05", "statistic.kind time judges a timing against the control"),
        ("kind: mean\n  failures: outcome", "good", "tolerance: 0.05", "a failed run has no number"),
        ("kind: mean\n  bounds: [1, 0]", "good", "tolerance: 0.05", "statistic.bounds: give [lo, hi] with lo < hi"),
        ("outcome: {position: 0}", "mean: 0.6", "tolerance: 0.05", "reference.mean is for a number"),
        ("kind: time", "good", "tolerance: 2", "is a fraction of the reference here, below 1"),
    ],
)
def test_a_numbers_config_mistakes_are_one_line_each(tmp_path: Path, statistic, reference, test, said) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "name: c\nrepo: {path: .}\nbuild: {targets: [p], binaries: {p: [bin/p]}}\nrun: {argv: ['{p}', '{seed}']}\n"
        f"statistic:\n  {statistic}\nreference:\n  {reference}\ntest:\n  {test}\n"
    )
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert said in message and "\n" not in message, message


@pytest.mark.heavy  # whole bisects or long simulations, 4 s or more: after the default suite (README: Tests)
@needs(*TOOLCHAIN)
def test_init_proposes_a_mean_for_a_program_that_prints_a_number_and_the_bisect_finds_it(tmp_path: Path) -> None:
    """`init` on the rate program (given only the good commit and the command line) writes
    statistic.kind mean with bounds [0, 1] (every value a fraction in [0, 1]) and a tolerance of a
    tenth of the samples' mean, says so in the header, and `bisect` with it names the commit; a
    tenth of the runs print `accept = -nan` (read as no observation)."""
    hist = history(tmp_path, nan=0.1)
    config = tmp_path / "rate.yaml"
    made = cli(
        "init",
        str(hist.repo),
        "--good",
        hist.commits[0],
        "--name",
        "rate",
        "-o",
        str(config),
        "--",
        "{binary}",
        "{seed}",
    )
    assert made.returncode == 0, made.stderr[-3000:]
    text = config.read_text()
    assert "kind: mean" in text and "- 0.0\n  - 1.0" in text
    assert "# statistic.kind mean, every sample printed a number" in text
    assert "is a tenth of the samples' mean" in text and "a change of the mean (in its units)" in text
    done, report = bisect(config, hist, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert report["first_bad"] == hist.first("change")
    asked = tmp_path / "cat.yaml"
    made = cli(
        "init",
        str(hist.repo),
        "--good",
        hist.commits[0],
        "--name",
        "cat",
        "-o",
        str(asked),
        "--statistic",
        "categorical",
        "--",
        "{binary}",
        "{seed}",
    )
    assert made.returncode == 0, made.stderr[-3000:]
    assert "kind: mean" not in asked.read_text()


TIME_CONFIG = """\
name: speed
repo: {{path: {repo}}}
build: {{targets: [prog], binaries: {{prog: [bin/prog]}}}}
run:
  argv: ["{{prog}}", "{{seed}}"]
  max_runs: 2000
parse: {{extract: 'speed = (\\S+)', split: whitespace}}
statistic:
  kind: time
{outcome}reference: good
test:
  tolerance: 0.05
"""


@pytest.mark.heavy  # a timing bisect: ~1,000 pairs of runs of ~10 ms each, one at a time (1-3 min)
@pytest.mark.timeout(1200)  # twice, one run at a time: slow when other work shares the machine
@needs(*TOOLCHAIN)
@pytest.mark.parametrize("outcome", ["  outcome: {position: 0}\n", ""], ids=["tokens-per-second", "wall-time"])
def test_a_planted_slowdown_is_found_by_timing_runs_beside_the_good_end(tmp_path: Path, outcome: str) -> None:
    """statistic.kind time on a cmake history where one commit makes every run do 10% more work:
    timed beside the good end's runs (the speed the program prints, or the run's wall time), that
    commit is named, each verdict says its noise, and the timed pairs are replayed on a resume
    (a second bisect runs nothing)."""
    steps = [Step("first", work=6)] + [Step("src") for _ in range(4)] + [Step("change", work=7)]
    steps += [Step("src") for _ in range(3)]
    hist = write_number_history(tmp_path, steps, name="speed")
    config = tmp_path / "speed.yaml"
    config.write_text(TIME_CONFIG.format(repo=hist.repo, outcome=outcome))
    done, report = bisect(config, hist, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert report["first_bad"] == hist.first("change")
    assert report["reference"]["numeric"]["scale"] == "median-ratio"
    assert "a pair" in done.stdout and "noise" in done.stdout
    assert report["control_runs"] > 0
    again, second = bisect(config, hist, tmp_path)
    assert again.returncode == 0 and second["first_bad"] == report["first_bad"]
    assert sum(v["executed"] for v in second["verdicts"]) == 0


@pytest.mark.heavy  # a timing bisect's ends: a few hundred pairs of ~10 ms runs (1-2 min)
@pytest.mark.timeout(1200)
@needs(*TOOLCHAIN)
def test_a_history_whose_speed_never_changes_names_nothing(tmp_path: Path) -> None:
    """The same history without the slowdown: the bad end's time is within the tolerance of the
    good end's, so no commit is named (the bad end tests GOOD) and the message says its time
    ratio beside the reference."""
    steps = [Step("first", work=6)] + [Step("src") for _ in range(8)]
    hist = write_number_history(tmp_path, steps, name="speed")
    config = tmp_path / "speed.yaml"
    config.write_text(TIME_CONFIG.format(repo=hist.repo, outcome="  outcome: {position: 0}\n"))
    done, report = bisect(config, hist, tmp_path)
    assert done.returncode != 0 and not report.get("first_bad")
    assert "tests GOOD, expected BAD" in done.stderr or "nothing changed" in done.stderr
    assert "/ control's ×" in done.stderr
    if "tests GOOD, expected BAD" in done.stderr:  # the band is said in the timing's own terms
        assert "(time ratio to the control's − 1, either way) from the reference may be called" in done.stderr
        assert "(total variation)" not in done.stderr
