"""Messages that keep their cause, and bad input refused before anything runs.

* git's reason for refusing a repository owned by another user, with the safe.directory
  commands that trust it (followed here: the clone then works);
* cmake's first error with the lines under it that say why, and the `bisectbot build-log`
  command that shows the whole log (run here: it prints the log);
* `--json` / `--markdown` paths checked before a command starts (exit 2, one line, no state
  directory made);
* every bad argument one line and exit 2; `demo --json -` writes JSON alone to stdout;
* a warning when the local checkout has uncommitted changes, which are never tested.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from bisectbot.building.cmake import cmake_error
from bisectbot.building.workspace import Workspace, uncommitted_changes
from bisectbot.cli import main
from bisectbot.demo import DemoHistory, generate_demo
from bisectbot.errors import GitError
from bisectbot.jobs import lifecycle as jobs
from bisectbot.state.outfiles import output_problem
from sample_reports import bisect_report

from conftest import TOOLCHAIN, bisectbot_argv, require, subprocess_env


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoHistory:
    require(*TOOLCHAIN)
    return generate_demo(tmp_path_factory.mktemp("messages"), n_commits=6, culprit_index=3, break_index=1, seed=1)


def cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        bisectbot_argv(*args),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
        env=subprocess_env(CI="1", **(env or {})),
    )


def one_error_line(stderr: str) -> str:
    lines = stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("bisectbot: error: "), stderr
    return lines[0]


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


# -- 1. git's reason, and a hint that works ------------------------------------------------------
def test_dubious_ownership_names_gits_reason_and_the_commands_that_trust_it(
    demo: DemoHistory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = tmp_path / "their-repo"
    shutil.copytree(demo.repo, repo)
    git(repo, "checkout", "-q", "--detach")
    git(repo, "commit", "-q", "--allow-empty", "-m", "on no branch: only the source itself knows it")
    detached = git(repo, "rev-parse", "HEAD").strip()
    if os.geteuid() == 0:
        for path in [repo, *repo.rglob("*")]:
            os.lchown(path, 12345, 12345)
    else:  # git ≥ 2.36 treats every repository as someone else's under this variable
        monkeypatch.setenv("GIT_TEST_ASSUME_DIFFERENT_OWNER", "1")
    gitconfig = tmp_path / "gitconfig"
    gitconfig.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(gitconfig))  # no safe.directory of this machine
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")

    with pytest.raises(GitError) as caught:
        Workspace(str(repo), tmp_path / "clone").sync()
    message = str(caught.value)
    assert message.startswith(f"cannot clone or fetch {repo}") and "dubious ownership" in message
    commands = re.findall(r"git config --global --add safe\.directory \S+", message)
    assert {c.split()[-1] for c in commands} == {str(repo), str(repo / ".git")}, message
    assert "in a container" in message and "--user" in message

    dot_git = next(c for c in commands if c.endswith("/.git"))
    subprocess.run(shlex.split(dot_git), check=True)  # half the hint: the clone works, the source is unread
    half = Workspace(str(repo), tmp_path / "clone2")
    half.sync()
    with pytest.raises(GitError, match=f"cannot read {re.escape(str(repo))}: detected dubious ownership"):
        half.resolve("HEAD")  # never the clone's HEAD in silence

    for command in commands:  # the whole hint, as written: then git trusts the repository
        subprocess.run(shlex.split(command), check=True)
    assert f"directory = {repo}\n" in gitconfig.read_text()  # written where git reads it
    assert Workspace(str(repo), tmp_path / "clone3").resolve("HEAD") == detached  # read in the source


# -- 2. cmake's reason, and the whole log one command away ----------------------------------------
# What cmake 3.25 prints (between the lines the build log keeps before and after).
CMAKE_OUTPUTS = {
    "compiler not found": (
        """-- The CXX compiler identification is unknown
CMake Error at CMakeLists.txt:2 (project):
  No CMAKE_CXX_COMPILER could be found.

  Tell CMake where to find the compiler by setting either the environment
  variable "CXX" or the CMake cache entry CMAKE_CXX_COMPILER to the full path
  to the compiler, or to the compiler name if it is in the PATH.


-- Configuring incomplete, errors occurred!
""",
        "CMake Error at CMakeLists.txt:2 (project): No CMAKE_CXX_COMPILER could be found.",
    ),
    "compiler not a path": (
        """CMake Error at CMakeLists.txt:2 (project):
  The CMAKE_CXX_COMPILER:

    nosuchcxx

  is not a full path and was not found in the PATH.

  Tell CMake where to find the compiler by setting either the environment
""",
        "CMake Error at CMakeLists.txt:2 (project): The CMAKE_CXX_COMPILER: nosuchcxx is not a full path "
        "and was not found in the PATH.",
    ),
    "fatal error with a call stack": (
        """CMake Warning: an error-free warning
CMake Error at cmake/check.cmake:3 (message):
  this tree needs
  a newer toolchain
Call Stack (most recent call first):
  CMakeLists.txt:4 (include)


-- Configuring incomplete, errors occurred!
""",
        "CMake Error at cmake/check.cmake:3 (message): this tree needs a newer toolchain",
    ),
    "one line": (
        """CMake Error: The source directory "/x" does not exist.
Specify --help for usage, or press the help button on the CMake GUI.
""",
        'CMake Error: The source directory "/x" does not exist.',
    ),
}


@pytest.mark.parametrize("case", sorted(CMAKE_OUTPUTS))
def test_cmake_error_keeps_the_lines_that_say_why(case: str) -> None:
    text, want = CMAKE_OUTPUTS[case]
    assert cmake_error(text) == want


def test_cmake_error_is_none_without_one() -> None:
    assert cmake_error("util.cpp:38:5: error: expected ';'\nmake: *** [all] Error 2\n") is None


def bad_compiler_config(demo: DemoHistory, where: Path) -> Path:
    data = yaml.safe_load(demo.config.read_text())
    data["repo"] = {"path": str(demo.repo)}
    data["build"]["cmake_args"] = [*data["build"]["cmake_args"], "-DCMAKE_CXX_COMPILER=/nonexistent/c++"]
    where.mkdir(parents=True, exist_ok=True)
    path = where / "nocxx.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_failed_configure_says_why_and_names_the_build_log_command(demo: DemoHistory, tmp_path: Path) -> None:
    config = bad_compiler_config(demo, tmp_path / "conf")
    state = tmp_path / "st"
    proc = cli("bisect", str(config), "--good", demo.good, "--bad", demo.bad, "--state", str(state))
    assert proc.returncode == 4, proc.stderr
    why = "The CMAKE_CXX_COMPILER: /nonexistent/c++ is not a full path to an existing compiler tool."
    error = proc.stderr.splitlines()[-1]
    assert error.startswith("bisectbot: error: ") and f"CMake Error at CMakeLists.txt:2 (project): {why}" in error
    command = f"bisectbot build-log {config} --commit {demo.bad} --state {state}"
    assert error.endswith(f"the whole build log: {command}"), error
    assert any(
        ln.startswith("  build failed: ") and why in ln and command in ln  # the progress line too
        for ln in proc.stderr.splitlines()
    ), proc.stderr

    shown = cli(*shlex.split(command)[1:])  # the command as printed, from another directory
    assert shown.returncode == 0, shown.stderr
    assert f"# {demo.bad} build failed" in shown.stdout
    assert "Tell CMake where to find the compiler" in shown.stdout  # what the reason left out


def test_the_bot_names_no_local_command_in_what_it_posts(demo: DemoHistory, tmp_path: Path) -> None:
    """Event lines and failure reasons end up in the bot's comments: no host paths there."""
    from bisectbot.bot.bot import Bot
    from bisectbot.config import load_config
    from bisectbot.state.statedir import StateDir

    cfg = load_config(demo.config)
    with StateDir(tmp_path / "st") as state:
        mine = jobs.Session(cfg, state, config_path="my.yaml")
        assert (
            mine.runner.builder.log_command(demo.bad)
            == f"bisectbot build-log my.yaml --commit {demo.bad} --state {tmp_path / 'st'}"
        )
        bot = Bot(cfg, str(demo.config), state, client=None)  # type: ignore[arg-type]  # no call reaches it
        assert bot.session(cfg, str(demo.config)).runner.builder.log_command(demo.bad) == ""


# -- 3. output files, checked before anything runs -----------------------------------------------
def output_cases(demo: DemoHistory, tmp: Path) -> list[tuple[list[str], Path]]:
    """Each command that writes --json / --markdown, with the directory it would make first."""
    state = tmp / "st"
    return [
        (["bisect", str(demo.config), "--good", demo.good, "--bad", demo.bad, "--state", str(state)], state),
        (["test", str(demo.config), "--commit", demo.good, "--state", str(state)], state),
        (["demo", "--commits", "5", "--dir", str(tmp / "demo")], tmp / "demo"),
        (["check", str(demo.config), "--ref", demo.good, "--state", str(state)], state),
        (["reference", str(demo.config), "--state", str(state)], state),
    ]


OUTPUT_OPTIONS = {
    "bisect": ("--json", "--markdown", "--html"),
    "test": ("--json", "--markdown", "--html"),
    "demo": ("--json", "--markdown", "--html"),
    "check": ("--json",),
    "reference": ("--json",),
}


def test_every_output_option_is_covered() -> None:
    for command, options in OUTPUT_OPTIONS.items():
        have = {
            p.opts[0]
            for p in main.commands[command].params
            if p.opts and p.opts[0] in ("--json", "--markdown", "--html")
        }
        assert have == set(options), command


@pytest.mark.parametrize("where", ["missing directory", "a directory", "under a file"])
@pytest.mark.parametrize("command, option", [(c, o) for c, opts in OUTPUT_OPTIONS.items() for o in opts])
def test_a_bad_output_path_is_one_line_before_anything_runs(
    demo: DemoHistory, tmp_path: Path, command: str, option: str, where: str
) -> None:
    argv, made = next((a, m) for a, m in output_cases(demo, tmp_path) if a[0] == command)
    (tmp_path / "file").write_text("")
    path = {
        "missing directory": tmp_path / "nowhere" / "out",
        "a directory": tmp_path,
        "under a file": tmp_path / "file" / "out",
    }[where]
    res = CliRunner().invoke(main, [*argv, option, str(path)])
    assert res.exit_code == 2, (res.output, res.exception)
    line = one_error_line(res.stderr)
    assert str(path) in line and option in line
    assert not made.exists()  # refused before the state directory (or the demo) was made


@pytest.mark.parametrize(
    "path, problem",
    [
        ("-", None),
        ("{tmp}/new.json", None),
        ("{tmp}/old.json", None),
        ("{tmp}/nowhere/x.json", "directory {tmp}/nowhere does not exist"),
        ("{tmp}", "is a directory"),
        ("{tmp}/new/", "is a directory"),
        ("", "an empty path"),
    ],
)
def test_output_problem(tmp_path: Path, path: str, problem: str | None) -> None:
    (tmp_path / "old.json").write_text("{}")
    found = output_problem(path.format(tmp=tmp_path))
    assert found == problem if problem is None else problem.format(tmp=tmp_path) in (found or "")


def test_an_output_file_nobody_may_write_is_refused(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root may write any file")
    shut = tmp_path / "shut"
    shut.mkdir(mode=0o555)
    assert output_problem(str(shut / "x.json")) == f"directory {shut} is not writable"


# -- 4. every bad argument is one line, exit 2 ----------------------------------------------------
# argv, what the line must name; usage errors (all but the config's) also point to --help
BAD_INVOCATIONS = {
    "unknown option": (["test", "{config}", "--commit", "HEAD", "--bogus"], "No such option '--bogus'"),
    "bad integer": (["demo", "--commits", "many"], "'many' is not a valid integer"),
    "too few demo commits": (["demo", "--commits", "3"], "3 is not in the range x>=5"),
    "missing config file": (["test", "{tmp}/missing.yaml", "--commit", "HEAD"], "missing.yaml"),
    "bad --find": (
        ["bisect", "{config}", "--good", "a", "--bad", "b", "--find", "sideways"],
        "'sideways' is not one of 'bad', 'fixed'",
    ),
    "missing --bad": (["bisect", "{config}", "--good", "a"], "Missing option '--bad'"),
    "missing CONFIG": (["bisect"], "Missing argument 'CONFIG'"),
    "unknown command": (["bisekt"], "No such command 'bisekt'"),
    "unknown subcommand": (["fixtures", "huge-llama"], "No such command 'huge-llama'"),
    "bad --color": (["demo", "--color", "purple"], "'purple' is not one of"),
    "bad --outside": (["demo", "--outside", "2"], "2.0 is not in the range 0<=x<=1"),
}


@pytest.mark.parametrize("case", sorted(BAD_INVOCATIONS))
def test_a_bad_argument_is_one_line_and_exit_2(demo: DemoHistory, tmp_path: Path, case: str) -> None:
    args, names = BAD_INVOCATIONS[case]
    res = CliRunner().invoke(main, [a.format(config=demo.config, tmp=tmp_path) for a in args])
    assert res.exit_code == 2, (res.output, res.exception)
    line = one_error_line(res.stderr)
    assert names in line
    see = f"bisectbot {args[0]}" if args[0] in main.commands else "bisectbot"  # where the mistake was
    assert line.endswith(f"(see {see} --help)") == (case != "missing config file"), line
    assert res.stdout == ""


def test_the_real_entry_point_prints_one_line_too() -> None:
    proc = cli("bisect", "--good", "a")
    assert proc.returncode == 2
    assert one_error_line(proc.stderr) == ("bisectbot: error: Missing argument 'CONFIG'. (see bisectbot bisect --help)")


def test_a_bare_group_still_shows_its_help() -> None:
    res = CliRunner().invoke(main, ["fixtures"])
    assert "tiny-llama" in res.output and "Usage:" in res.output


# -- 4b. demo --json - : stdout is the JSON alone --------------------------------------------------
def test_demo_json_to_stdout_is_json_alone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bisect itself is replaced by a finished report (a real demo bisect takes a minute on a
    busy machine); what is checked is where the demo command writes each part of its output."""
    require(*TOOLCHAIN)
    report = bisect_report()

    def plan_bisect(session: jobs.Session, good: str, bad: str, **_: Any) -> Any:
        return SimpleNamespace(line=(good, bad))

    monkeypatch.setattr(jobs, "plan_bisect", plan_bisect)
    monkeypatch.setattr(jobs, "run_bisect", lambda session, plan, **_: report)
    res = CliRunner().invoke(main, ["demo", "--commits", "5", "--dir", str(tmp_path / "d"), "--json", "-"])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert json.loads(res.stdout) == json.loads(json.dumps(report.to_json()))
    assert "planted culprit" in res.stderr  # told, but not on stdout


# -- 5. uncommitted changes in a local checkout ---------------------------------------------------
def test_uncommitted_changes_are_named_and_warned_about(demo: DemoHistory, tmp_path: Path) -> None:
    repo = tmp_path / "mine"
    subprocess.run(["git", "clone", "-q", str(demo.repo), str(repo)], check=True)
    argv = [
        "test",
        str(demo.config),
        "--repo",
        str(repo),
        "--commit",
        "no-such-ref",
        "--state",
        str(tmp_path / "st"),
        "-q",
    ]
    clean = cli(*argv)  # a ref that does not resolve: ends right after the sync, whatever the tree
    assert clean.returncode == 2 and "warning" not in clean.stderr, clean.stderr

    (repo / "src" / "util.cpp").write_text((repo / "src" / "util.cpp").read_text() + "// edited\n")
    (repo / "notes.txt").write_text("untracked: not counted\n")
    git(repo, "mv", "CMakeLists.txt", "CMakeLists.old")
    assert sorted(uncommitted_changes(str(repo))) == ["CMakeLists.old", "src/util.cpp"]
    dirty = cli(*argv)
    assert dirty.returncode == 2
    warning, error = dirty.stderr.splitlines()
    assert warning.startswith(f"bisectbot: warning: {repo} has uncommitted changes (")
    assert "src/util.cpp" in warning and "CMakeLists.old" in warning and "notes.txt" not in warning
    assert "not tested" in warning
    assert error.startswith("bisectbot: error: ") and "no-such-ref" in error


def test_no_changes_are_reported_where_there_is_no_work_tree(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", "--bare", str(tmp_path / "bare.git")], check=True)
    assert uncommitted_changes(str(tmp_path / "bare.git")) == []
    assert uncommitted_changes("https://example.invalid/x.git") == []
    assert uncommitted_changes(str(tmp_path / "nowhere")) == []


# -- 6. an end that tests the wrong way shows its data and the likely config cause -----------------
def variant_config(demo: DemoHistory, tmp_path: Path, change: Any) -> Path:
    """The demo's config changed by `change(data)`, written beside it (its repo path still holds)."""
    data = yaml.safe_load(demo.config.read_text())
    change(data)
    path = demo.config.with_name(f"{tmp_path.name}.yaml")
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def bisect_error(config: Path, demo: DemoHistory, tmp_path: Path) -> str:
    proc = cli("bisect", str(config), "--good", demo.good, "--bad", "main", "--state", str(tmp_path / "st"), "-q")
    assert proc.returncode == 4, proc.stderr
    return one_error_line(proc.stderr)


def test_a_misspelt_outcome_is_named_with_the_observed_distribution(demo: DemoHistory, tmp_path: Path) -> None:
    def misspell(data: dict) -> None:
        probs = data["reference"]["probs"]
        data["reference"]["probs"] = {("ee" if k == "e" else k): v for k, v in probs.items()}

    line = bisect_error(variant_config(demo, tmp_path, misspell), demo, tmp_path)
    assert "good ref" in line and "tests BAD, expected GOOD" in line
    assert "observed/reference " in line and "other " in line  # the data: the unlisted outcome's share
    assert "gave outcomes reference.probs does not list (most often 'e' ×" in line
    assert "'e' looks like the reference's 'ee', misspelt there?" in line
    assert "raise test.eta" not in line  # the eta advice is for real departures, not for this


def test_an_undecided_end_says_what_to_raise_and_by_how_much(demo: DemoHistory, tmp_path: Path) -> None:
    def small_budget(data: dict) -> None:
        data["run"]["max_runs"] = 60

    line = bisect_error(variant_config(demo, tmp_path, small_budget), demo, tmp_path)
    assert "is inconclusive" in line and "undecided after" in line
    assert re.search(r"observed TV [\d.]+ from the reference: (GOOD|BAD) needs about [\d,]+ runs", line), line
    assert re.search(r"raise run.max_runs to [\d,]+", line), line
