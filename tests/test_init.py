"""`bisectbot init`: a config from a repository, a target and a command line, validated by
testing the good commit GOOD with it (real cmake builds of bench/choice.py histories)."""

from __future__ import annotations

import json
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import yaml

from bench.choice import Step, write_choice_history
from bench.pickprojects import PickHistory, write_pick_history
from bisectbot.config import load_config
from bisectbot.config.sections import ParseConfig
from bisectbot.demo import _git, _git_env
from bisectbot.errors import ConfigError
from bisectbot.judge.parse import parse_output
from bisectbot.newconfig.proposal import WHOLE, propose
from bisectbot.newconfig.write import programs

from conftest import TOOLCHAIN, bisectbot_argv, require, subprocess_env


def test_outputs_propose_how_they_are_read() -> None:
    letters = propose(["a\n", "b\n", "a\n"])  # one letter a run is a word, not a stream
    assert letters.parse == {"split": "whitespace", "expect_tokens": 1} and letters.outcomes == {"a": 2, "b": 1}
    echoed = propose(["bcdbc f e g\n", "bcdbc f g h\n", "bcdbc e h\n"], position=1)
    # tokens in a varying number: at least enough for the outcome (not the fewest seen: longer
    # outputs would not have matched it)
    assert echoed.parse == {"prefix": "bcdbc ", "split": "whitespace", "min_tokens": 2}
    assert echoed.statistic == {"outcome": {"position": 1}} and echoed.outcomes == {"e": 1, "g": 1, "h": 1}
    assert echoed.what == "token 1 after 'bcdbc '" and not echoed.notes
    with pytest.raises(ConfigError, match="--position 3, but some output has only 2 token"):
        propose(["x y\n", "w y z\n"], position=3)
    with pytest.raises(ConfigError, match="printed nothing"):
        propose(["\n", ""])


PICKS = ["red", "green", "red", "blue", "yellow", "red", "green"]


def test_a_word_after_what_every_output_starts_with_is_the_outcome() -> None:
    """Issue 48: `pick: WORD` is the word after `pick: `, whatever its length (read as
    characters, every word but a three-letter one was an unreadable run)."""
    words = propose([f"pick: {w}\n" for w in PICKS])
    assert words.parse == {"prefix": "pick: ", "split": "whitespace", "expect_tokens": 1}
    assert words.line() == "the word after 'pick: ' — red ×3, green ×2, blue ×1, yellow ×1" and not words.notes
    assert propose([f"{w}\n" for w in PICKS]).line().startswith("the word — red ×3")
    # many words, some seen once: still words (a token stream seldom repeats; these do)
    colours = "red green blue yellow cyan magenta black white orange purple brown grey".split()
    many = propose([f"pick: {colours[i * 7 % 12]}" for i in range(20)])
    assert many.parse["split"] == "whitespace" and len(many.outcomes) == 12


def test_a_number_is_the_outcome_a_small_count_stays_categories_and_a_measure_gets_its_mean() -> None:
    """A count of a few whole values (17, 18, 20) is read as outcomes; a number that takes many
    values (a score) is judged by its mean (statistic.kind mean, init writes it), with bounds
    when the output shows them (a fraction, a percentage), and no note that values never repeat;
    values that never repeat and are no number are still pointed out."""
    steps = propose([f"steps: {n}\n" for n in (17, 18, 17, 20, 17, 18, 18, 17)])
    assert steps.parse == {"prefix": "steps: ", "split": "whitespace", "expect_tokens": 1}
    assert steps.line() == "the number after 'steps: ' — 17 ×4, 18 ×3, 20 ×1" and not steps.notes
    assert not steps.numeric
    scores = propose([f"score {0.1 + i / 97:.4f}\n" for i in range(20)])
    assert scores.what == "the number after 'score '" and scores.line().endswith(", 12 more")
    assert scores.numeric and not scores.notes
    assert scores.as_mean().statistic == {"kind": "mean", "outcome": {"position": 0}, "bounds": [0.0, 1.0]}
    rates = propose([f"rate {60 + i}%\n" for i in range(20)], position=0)
    assert rates.numeric and rates.as_mean().statistic.get("bounds") == [0.0, 100.0]
    lines = propose([f"answer: item {'ab'[i % 2] * (i + 1)} here\n" for i in range(12)])  # never the same twice
    assert lines.notes and lines.notes[0].startswith("12 different outcomes in 12 runs")


def test_several_words_after_the_common_start_are_one_outcome_the_rest_of_the_line() -> None:
    answers = ["light blue", "red", "dark green", "red", "light blue"]
    line = propose([f"answer: {a}\n" for a in answers])
    assert line.parse == {"prefix": "answer: ", "split": "regex", "pattern": WHOLE}
    assert line.outcomes == {"light blue": 2, "red": 2, "dark green": 1}
    assert line.line() == "the rest of the line after 'answer: ' — 'light blue' ×2, red ×2, 'dark green' ×1"
    # several words in every output, as many each: word `position` of them
    pairs = propose([f"pick: {w} {len(w)}\n" for w in PICKS], position=1)
    assert pairs.parse == {"prefix": "pick: ", "split": "whitespace", "expect_tokens": 2}
    assert pairs.outcomes == {"3": 3, "5": 2, "4": 1, "6": 1}


def test_a_program_that_prints_its_text_on_stderr_is_read_there() -> None:
    """Stdout empty on every seed (llama-simple's 2024 era, a logger's only stream): the proposal
    comes from stderr and says so; text on stdout wins over anything on stderr."""
    errors = [f"build: 1234\nresult: {w}\n" for w in PICKS]
    there = propose(["\n"] * len(PICKS), errors=errors)
    assert there.parse == {
        "stream": "stderr", "extract": r"(?m)^[ \t]*result:[ \t]*(.*)$", "split": "whitespace", "expect_tokens": 1
    }  # fmt: skip
    assert there.line().startswith("the word after 'result:' on its line (the other lines ignored) on stderr")
    assert ParseConfig.model_validate(there.parse).stream == "stderr"
    assert "stream" not in propose([f"pick: {w}\n" for w in PICKS], errors=errors).parse
    with pytest.raises(ConfigError, match="nothing on stdout or stderr"):
        propose(["", "\n"], errors=["", " "])


def test_the_labelled_line_among_log_lines_is_the_outcome() -> None:
    """A program that logs around its answer: the line whose label every output prints once with
    a value that varies (the fewest values: the answer, not the timing), read with extract."""
    outputs = [
        f"loading table v2\nseed: {i}\nnote: a\nnote: b\nresult: {w}\ndone in {0.01 * i:.3f} s\n"
        for i, w in enumerate(PICKS)
    ]
    found = propose(outputs)
    assert found.parse == {"extract": r"(?m)^[ \t]*result:[ \t]*(.*)$", "split": "whitespace", "expect_tokens": 1}
    assert found.line().startswith("the word after 'result:' on its line (the other lines ignored) — red ×3")
    assert ParseConfig.model_validate(found.parse)  # a valid parse section


def test_json_output_is_read_by_the_field_that_varies_least_while_varying() -> None:
    flat = propose([json.dumps({"seed": i, "pick": w, "ok": True}) + "\n" for i, w in enumerate(PICKS)])
    assert flat.parse == {"json_field": "pick", "split": "whitespace", "expect_tokens": 1}
    assert flat.line() == "the JSON field 'pick' — red ×3, green ×2, blue ×1, yellow ×1"
    nested = propose([json.dumps({"result": {"pick": w, "steps": 9 if w == "red" else 12}}) for w in PICKS])
    assert nested.parse["json_field"] == "result.steps" and nested.what == "the JSON field 'result.steps' (a number)"
    assert nested.outcomes == {"12": 4, "9": 3}


def test_characters_only_when_the_outputs_are_a_token_stream() -> None:
    """llama's output: the prompt echoed, then one-letter tokens without blanks, almost every
    output different: characters after the echoed prompt. Spaced tokens are whitespace tokens."""
    streams = ["bcdbcfegh", "bcdbcgghe", "bcdbcfhh", "bcdbceefg", "bcdbchgf", "bcdbcgeef"]
    chars = propose([f"\n\n{s}\n\n\n\n" for s in streams])
    assert chars.parse == {"prefix": "bcdbc", "split": "chars"}
    assert chars.what == "character 0 after 'bcdbc' (the output reads as a stream of one-character tokens)"
    assert chars.outcomes == {"f": 2, "g": 2, "e": 1, "h": 1}
    fixed = propose([s[:8] for s in streams], position=2)
    assert fixed.parse == {"prefix": "bcdbc", "split": "chars", "expect_tokens": 3}
    spaced = propose([" ".join(s) for s in streams])
    assert spaced.parse == {"prefix": "b c d b c ", "split": "whitespace"}
    assert spaced.what == "token 0 after 'b c d b c '"


def test_a_prompt_echoed_in_words_is_the_prefix() -> None:
    story = ["fox ran", "dog slept", "fox slept", "cat ran", "fox ran"]
    echoed = propose([f"Once upon a time the {s}.\n" for s in story])
    assert echoed.parse == {"prefix": "Once upon a time the ", "split": "whitespace", "expect_tokens": 2}
    assert echoed.outcomes == {"fox": 3, "dog": 1, "cat": 1}


def test_every_proposal_reads_the_samples_it_came_from() -> None:
    """The counts shown are the proposed parse's own reading of the samples (judge.parse)."""
    outputs = [f"pick: {w}\n" for w in PICKS]
    proposal = propose(outputs)
    cfg = ParseConfig.model_validate(proposal.parse)
    assert Counter(parse_output(o, "", cfg)[0] for o in outputs) == proposal.outcomes


def test_cmake_lists_programs_not_its_own_targets() -> None:
    help_text = "The following are some of the valid targets for this Makefile:\n... all (the default)\n"
    help_text += "... clean\n... depend\n... edit_cache\n... rebuild_cache\n... prog\n... tool\n... src/main.o\n"
    assert programs(help_text) == ["prog", "tool"]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    require(*TOOLCHAIN)
    dest = tmp_path_factory.mktemp("init")
    steps = [Step("first", (0.3, 0.45, 0.25)), Step("src"), Step("change", (0.38, 0.4, 0.22)), Step("docs")]
    h = write_choice_history(dest, steps)
    return h.repo, h.commits[0]


def init(where: Path, repo: Path, good: str, *args: str) -> subprocess.CompletedProcess[str]:
    argv = bisectbot_argv("init", str(repo), "--good", good, "-q", *args, "--", "{binary}", "{seed}")
    return subprocess.run(argv, capture_output=True, text=True, cwd=where, timeout=600, env=subprocess_env(CI="1"))


def test_init_writes_a_config_that_tests_the_good_commit_good(project: tuple[Path, str], tmp_path: Path) -> None:
    repo, good = project
    proc = init(tmp_path, repo, good, "--name", "choice")  # one program: no --target needed
    assert proc.returncode == 0, proc.stderr
    assert f"wrote choice.yaml: {good} tests GOOD with it" in proc.stdout
    cfg = load_config(tmp_path / "choice.yaml")
    assert cfg.build.targets == ["prog"] and cfg.reference.control is not None
    assert cfg.reference.control.commit == good and cfg.parse.split == "whitespace" and cfg.parse.expect_tokens == 1
    head = (tmp_path / "choice.yaml").read_text().splitlines()[:3]
    assert "20 sample runs; outcome: the word — " in head[1]  # what it saw, written down
    assert (tmp_path / "choice-state" / "state.sqlite3").is_file()  # where the bisect will find it


@pytest.mark.heavy  # more cmake builds (README: Tests)
def test_init_takes_an_exact_reference_and_refuses_one_that_is_wrong(project: tuple[Path, str], tmp_path: Path) -> None:
    repo, good = project
    proc = init(tmp_path, repo, good, "--probs", "a=0.3,b=0.45,c=0.25", "-o", "exact.yaml")
    assert proc.returncode == 0, proc.stderr
    assert yaml.safe_load((tmp_path / "exact.yaml").read_text())["reference"] == {
        "probs": {"a": 0.3, "b": 0.45, "c": 0.25}
    }
    wrong = init(tmp_path, repo, good, "--probs", "a=0.6,b=0.2,c=0.2", "-o", "wrong.yaml")
    assert wrong.returncode == 2 and "tests BAD with it" in wrong.stderr, wrong.stderr


@pytest.mark.heavy  # more cmake builds (README: Tests)
def test_init_names_the_programs_when_the_target_is_wrong(project: tuple[Path, str], tmp_path: Path) -> None:
    repo, good = project
    proc = init(tmp_path, repo, good, "--target", "nope")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        f"bisectbot: error: init: no target 'nope' at {good[:12]}: the programs cmake lists are prog"
    )
    assert not list(tmp_path.iterdir())  # nothing written


# -- issue 48: a program that prints a word (bench/pickprojects.py), end to end ------------------


@pytest.fixture(scope="module")
def pick(tmp_path_factory: pytest.TempPathFactory) -> PickHistory:
    require(*TOOLCHAIN)
    return write_pick_history(tmp_path_factory.mktemp("pick"), "cmake", n_commits=12, culprit=8, broken=4)


def run_cli(where: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = bisectbot_argv(*args)
    return subprocess.run(argv, capture_output=True, text=True, cwd=where, timeout=600, env=subprocess_env(CI="1"))


def test_init_reads_the_word_a_program_prints_and_says_so(pick: PickHistory, tmp_path: Path) -> None:
    """`pick: red|green|blue|yellow`: the proposal is the word after `pick: ` (issue 48 got
    characters, expect_tokens 3, and a control that mostly "failed"); it is said on stderr and in
    the header with the counts seen, with the default eta and tolerance and what they mean."""
    proc = run_cli(
        tmp_path, "init", str(pick.repo), "--good", "v1.0", "--name", "pick", "-o", "pick.yaml", "--", *pick.command
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("wrote pick.yaml: v1.0 tests GOOD with it after ")
    cfg = load_config(tmp_path / "pick.yaml")
    assert (cfg.parse.prefix, cfg.parse.split, cfg.parse.expect_tokens) == ("pick: ", "whitespace", 1)
    assert parse_output("pick: yellow\n", "", cfg.parse) == ("yellow",)  # a word of any length
    said = re.search(r"^init: 20 sample runs; outcome: the word after 'pick: ' — (.*)\.$", proc.stderr, re.M)
    assert said is not None, proc.stderr
    seen = dict(part.split(" ×") for part in said.group(1).split(", "))
    assert set(seen) == {"red", "green", "blue", "yellow"} and sum(map(int, seen.values())) == 20
    assert "init: parse: {prefix: 'pick: ', split: whitespace, expect_tokens: 1}" in proc.stderr
    assert (
        "init: test.tolerance 0.1, test.eta 0.03 (the defaults; give init --tolerance T for the smallest change "
        "that matters): a change of total variation below eta 0.03 is never called BAD, above tolerance 0.1 "
        "never GOOD; in between either verdict is allowed"
    ) in proc.stderr
    text = (tmp_path / "pick.yaml").read_text()
    assert text.splitlines()[1] == f"# 20 sample runs; outcome: the word after 'pick: ' — {said.group(1)}."
    assert (
        "# test: the tolerance is the smallest change that matters: a change of total variation below eta 0.03 "
        "is never called BAD, above tolerance 0.1 never GOOD; in between either verdict is allowed; eta is "
        "0.3 × tolerance unless set.\ntest:\n  tolerance: 0.1\n"
    ) in text


def test_init_writes_the_tolerance_given_and_what_it_means(pick: PickHistory, tmp_path: Path) -> None:
    args = ("init", str(pick.repo), "--good", "v1.0", "--name", "pick")
    proc = run_cli(tmp_path, *args, "--tolerance", "0.2", "--eta", "0.05", "-o", "band.yaml", "--", *pick.command)
    assert proc.returncode == 0, proc.stderr
    data = yaml.safe_load((tmp_path / "band.yaml").read_text())
    assert data["test"] == {"tolerance": 0.2, "eta": 0.05}
    assert (
        "# test: the tolerance is the smallest change that matters: a change of total variation below eta 0.05 "
        "is never called BAD, above tolerance 0.2 never GOOD; in between either verdict is allowed.\ntest:\n"
    ) in (tmp_path / "band.yaml").read_text()
    assert "init: test.tolerance 0.2, test.eta 0.05 (as given): a change of total variation below" in proc.stderr
    refused = run_cli(tmp_path, *args, "--tolerance", "0.05", "--eta", "0.05", "-o", "x.yaml", "--", *pick.command)
    assert refused.returncode == 2 and "--eta" in refused.stderr and "is not below the tolerance 0.05" in refused.stderr
    assert not (tmp_path / "x.yaml").exists()


def test_a_parse_that_cannot_read_the_output_says_so_never_failed(pick: PickHistory, tmp_path: Path) -> None:
    """The config issue 48's init wrote (characters, expect_tokens 3), through the real CLI: the
    control's runs are reported as not matching parse, one quoted, never as failed runs."""
    config = {
        "name": "pick",
        "repo": {"path": str(pick.repo)},
        "build": {"targets": ["pick"], "binaries": {"binary": ["pick", "bin/pick"]}},
        "run": {"argv": pick.command},
        "parse": {"prefix": "pick: ", "split": "chars", "expect_tokens": 3},
        "statistic": {"outcome": {"position": 0}},
        "reference": {"control": {"commit": pick.good}},
        "storage": {"state_dir": "st"},
    }
    (tmp_path / "pick.yaml").write_text(yaml.safe_dump(config))
    proc = run_cli(tmp_path, "test", "pick.yaml", "--commit", pick.good, "-q")
    assert proc.returncode == 2, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    said = re.fullmatch(
        rf"bisectbot: error: reference\.control: (\d+) of 200 runs at {pick.good[:12]} do not match parse with "
        r"command variant 0; last: 'pick: (\w+)' does not match parse \(expect_tokens 3: got (\d) tokens\)",
        line,
    )
    assert said is not None, line
    assert len(said.group(2)) == int(said.group(3)) != 3 and int(said.group(1)) > 100  # green, blue, yellow
    assert "fail" not in line


def test_init_says_how_the_command_failed(tmp_path: Path) -> None:
    """A command that fails while init samples it: its exit status and its error line."""
    require(*TOOLCHAIN)
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.16)\nproject(t C)\nadd_executable(t src/t.c)\n"
    )
    (repo / "src" / "t.c").write_text(
        '#include <stdio.h>\nint main(void) {\n    fprintf(stderr, "loading table.txt\\nerror: cannot open table.txt\\n");'
        "\n    return 3;\n}\n"
    )
    env = _git_env()
    _git(repo, "init", "-q", "--template=", "-b", "main", env=env)
    _git(repo, "add", "--all", ".", env=env)
    _git(
        repo,
        "commit",
        "-q",
        "--no-verify",
        "-m",
        "first",
        env={
            **env,
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@t",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@t",
        },
    )
    proc = run_cli(tmp_path, "init", str(repo), "--good", "main", "-q", "--", "{binary}", "--seed", "{seed}")
    assert proc.returncode == 2
    assert proc.stderr.startswith(
        "bisectbot: error: init: the command failed on seed 1 (exit status 3: error: cannot open table.txt): "
    ), proc.stderr


def test_init_reads_a_program_whose_text_is_on_stderr(tmp_path: Path) -> None:
    """A script with no build that logs its answer to stderr (stdout empty): init reads it there,
    writes `stream: stderr`, shows stderr's lines in the header, and the good commit tests GOOD."""
    require("git")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "pick.sh").write_text(
        'set -- red green red blue yellow red green blue\nshift $(( $SEED % 8 ))\necho "loading" >&2\n'
        'echo "result: $1" >&2\n'
    )
    env = _git_env()
    who = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    _git(repo, "init", "-q", "--template=", "-b", "main", env=env)
    _git(repo, "add", "--all", ".", env=env)
    _git(repo, "commit", "-q", "--no-verify", "-m", "first", env={**env, **who})
    command = ["env", "SEED={seed}", "sh", "{source}/pick.sh"]
    proc = run_cli(tmp_path, "init", str(repo), "--good", "main", "--name", "st", "-o", "st.yaml", "--", *command)
    assert proc.returncode == 0, proc.stderr
    cfg = load_config(tmp_path / "st.yaml")
    assert cfg.parse.stream == "stderr" and cfg.parse.extract is not None
    assert "outcome: the word after 'result:' on its line (the other lines ignored) on stderr" in proc.stderr
    assert "# First outputs: loading result: " in (tmp_path / "st.yaml").read_text()
