"""Build kinds (issue 48): a plain Makefile project built by its own command (build.kind
command), a Python script run from each commit's own tree with no build (build.kind none), and
cmake as before. Real git histories (bench/pickprojects.py), real make, cc and python3, real
processes; `init` detecting which kind a project is."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from bench.pickprojects import PickHistory, write_pick_history
from bisectbot.bisecting.narrow import rule_text
from bisectbot.building import buildkeys
from bisectbot.building.builder import Builder
from bisectbot.building.inputs import Change, InputRule, narrow
from bisectbot.building.workspace import Export, Workspace
from bisectbot.config import Config, load_config
from bisectbot.config.sections import BuildConfig, BuildVariant, repo_entry
from bisectbot.core.plan import Narrowing
from bisectbot.errors import ConfigError
from bisectbot.events import Events
from bisectbot.judge.runner import CommitRunner
from bisectbot.newconfig.detect import BuildWish, choose_kind, find_binary
from bisectbot.newconfig.write import write_config
from bisectbot.processes.procs import stop_drivers
from bisectbot.processes.sandbox import BoxState, Scratch, sandbox
from bisectbot.records.reports import Environment
from bisectbot.report.markdown import environment_lines
from bisectbot.report.text import environment_text
from bisectbot.state.statedir import StateDir
from bisectbot.statistics.outcome import Verdict

from conftest import bisectbot_argv, needs, require, subprocess_env
from test_untrusted import LIMITS, SYS_PY, Listener, listener  # noqa: F401 (a fixture)

REFERENCE = {"red": 0.40, "green": 0.25, "blue": 0.20, "yellow": 0.15}
MAKE = {"kind": "command", "command": ["make", "-j{jobs}"], "binaries": {"binary": ["pick"]}}
NONE = {"kind": "none"}
# -S: no `site` import, about half of python's start-up, which is most of a run here
FAST_PY = ["python3", "-S", "{source}/pick.py", "--seed", "{seed}"]


def write_cfg(
    where: Path, hist: PickHistory, build: dict[str, Any], argv: list[str] | None = None, **more: Any
) -> Path:
    data: dict[str, Any] = {
        "name": more.pop("name", f"pick-{hist.kind}"),
        "repo": {"path": str(hist.repo)},
        "build": build,
        "run": {"argv": argv or hist.command},
        "parse": {"prefix": "pick: ", "split": "whitespace"},
        "statistic": {"outcome": {"position": 0}},
        "reference": {"probs": REFERENCE},
        **more,
    }
    path = where / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def cli(*args: str, cwd: Path | None = None, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        bisectbot_argv(*args), capture_output=True, text=True, cwd=cwd, timeout=timeout, env=subprocess_env(CI="1")
    )


@pytest.fixture(scope="module")
def make_hist(tmp_path_factory: pytest.TempPathFactory) -> PickHistory:
    require("git", "make", "cc")
    # the binary search's first step lands on the broken build (position 5 of 11)
    return write_pick_history(tmp_path_factory.mktemp("make"), "make", n_commits=12, culprit=8, broken=5)


@pytest.fixture(scope="module")
def py_hist(tmp_path_factory: pytest.TempPathFactory) -> PickHistory:
    require("git")
    return write_pick_history(tmp_path_factory.mktemp("python"), "python", n_commits=8, culprit=5, broken=None)


# -- the config ------------------------------------------------------------------------------------
def _load(tmp_path: Path, build: dict[str, Any], argv: list[str] | None = None, **more: Any) -> Config:
    data: dict[str, Any] = {
        "name": "k",
        "repo": {"path": "."},
        "build": build,
        "run": {"argv": argv or ["{binary}", "{seed}"]},
        "statistic": {"outcome": {"position": 0}},
        "reference": {"probs": {"a": 1.0}},
        **more,
    }
    path = tmp_path / "k.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_config(path)


@pytest.mark.parametrize(
    ("build", "argv", "error"),
    [
        ({"kind": "command", "binaries": {"binary": ["pick"]}}, None, "build.kind command needs build.command"),
        ({**MAKE, "targets": ["pick"]}, None, "build.targets is for build.kind cmake"),
        ({**MAKE, "cmake_args": ["-DX=1"]}, None, "build.cmake_args is for build.kind cmake"),
        ({**MAKE, "command": ["make", "-j{job}"]}, None, "build.command[1]: unknown placeholder {job}"),
        (
            {"targets": ["t"], "binaries": {"binary": ["t"]}, "command": ["make"]},
            None,
            "build.command goes with build.kind command",
        ),
        (
            {"kind": "none", "targets": ["t"]},
            ["python3", "{source}/x.py", "{seed}"],
            "build.kind none builds nothing: remove build.targets",
        ),
        (
            NONE,
            ["python3", "x.py", "{seed}"],
            "with build.kind none the program is the commit's own tree: name it with {source}",
        ),
        (NONE, ["{binary}", "{source}/x", "{seed}"], "unknown placeholder {binary}"),
        (
            NONE,
            ["python3", "{source}/x.py", "{build}", "{seed}"],
            "build.kind none builds nothing, so there is no {build}",
        ),
        (
            {**MAKE, "variants": [{"command": ["make"], "binaries": {"binary": ["p"]}, "needs": ["Makefile"]}]},
            None,
            "give build.binaries, or build.variants",
        ),
        (
            {"kind": "command", "variants": [{"command": ["make"], "binaries": {"binary": ["p"]}, "needs": ["../M"]}]},
            None,
            "is not a path inside the tree",
        ),
    ],
)
def test_a_build_kind_s_config_mistakes_are_one_line_naming_the_key(
    tmp_path: Path, build: dict[str, Any], argv: list[str] | None, error: str
) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, build, argv)
    assert error in str(info.value) and "\n" not in str(info.value)


def test_build_kinds_load_and_leave_cmake_configs_and_their_keys_as_they_were(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    made = _load(tmp_path, MAKE).build
    assert made.kind == "command" and made.commands == [["make", "-j{jobs}"]] and made.binary_names == ["binary"]
    variants = _load(
        tmp_path,
        {
            "kind": "command",
            "command": ["make"],
            "variants": [
                {"command": ["ninja", "-C", "out"], "needs": ["build.ninja"], "binaries": {"binary": ["out/pick"]}},
                {"binaries": {"binary": ["pick"]}},
            ],
        },
    ).build
    assert variants.commands == [["ninja", "-C", "out"], ["make"]]  # a variant without one: build.command
    none = _load(tmp_path, NONE, ["python3", "{source}/pick.py", "{seed}"])
    assert none.build.choices == [] and none.build.binary_names == []
    with pytest.raises(ConfigError, match="arms: cross-check arms are cmake targets"):
        arm = {
            "targets": ["s"],
            "binaries": {"server": ["s"]},
            "serve": ["{server}", "{port}"],
            "body": {"s": "{seed}"},
        }
        _load(tmp_path, MAKE, arms={"srv": arm})

    # cmake: `kind: cmake` said or not, the same digest; build keys as stored before build kinds
    # (computed by 5c34278 with this toolchain identity)
    cmake = {"cmake_args": ["-DX=1"], "targets": ["t"], "binaries": {"binary": ["t"]}}
    assert _load(tmp_path, cmake).digest() == _load(tmp_path, {**cmake, "kind": "cmake"}).digest()
    monkeypatch.setattr(buildkeys, "toolchain_identity", lambda: "cc 1 | cmake 3")
    single = BuildConfig(cmake_args=["-DX=1"], targets=["t"], binaries={"binary": ["t"]})
    variant = BuildConfig(
        cmake_args=["-DX=1"],
        variants=[
            BuildVariant(targets=["t"], binaries={"binary": ["bin/t"]}, cmake_args=["-DY=ON"]),
            BuildVariant(targets=["u"], binaries={"binary": ["u"]}),
        ],
        keep=["*.so"],
        hide_git=True,
    )
    assert (buildkeys.build_key(single), buildkeys.build_key(variant)) == ("4a4a8976c428", "aafc4bbb83b6")
    keys = {buildkeys.build_key(c) for c in (single, made, variants, none.build)}
    assert len(keys) == 4  # every kind keyed apart


# -- build.kind command ----------------------------------------------------------------------------
@needs("git", "make", "cc")
def test_a_make_project_is_built_by_its_own_command_in_a_pristine_tree(make_hist: PickHistory, tmp_path: Path) -> None:
    cfg = load_config(write_cfg(tmp_path, make_hist, MAKE))
    good, broken = make_hist.good, make_hist.broken
    assert broken is not None
    with StateDir(tmp_path / "st") as state:
        ws = Workspace(cfg.repo_source, state.clone_dir)
        builder = Builder(state, ws, Events())
        rec = builder.ensure(good, cfg.build)
        assert rec.ok and rec.inputs is None, rec.reason  # a build command leaves no dependency files
        kept = Path(rec.binaries["binary"])
        assert kept.parent == state.kept_dir(builder.key(cfg.build), good) and rec.hashes[str(kept)]
        said = subprocess.run([str(kept), "--seed", "7"], capture_output=True, text=True, check=True).stdout
        assert said.startswith("pick: ")
        assert builder.ensure(good, cfg.build) == rec and builder.built == [good]  # stored: not built again

        (ws.root / "stray.o").write_text("left by another build")
        failed = builder.ensure(broken, cfg.build)  # its draw.c does not compile: a skip, with why
        assert failed.status == "failed" and failed.reason.startswith("build command `make` failed (exit 2):")
        assert "error" in failed.reason and not (ws.root / "stray.o").exists()  # pristine: untracked files gone

        incremental = cfg.build.model_copy(update={"incremental": True})
        (ws.root / "stray.o").write_text("an output a build left")
        assert builder.ensure(make_hist.commits[1], incremental).ok
        assert (ws.root / "stray.o").exists()  # incremental: outputs stay for the next build
        (ws.root / "pick").unlink()
        (ws.root / "pick").mkdir()  # an output in the way: the build on top of it fails, then a pristine one
        rec = builder.ensure(make_hist.commits[2], incremental)
        assert rec.ok and rec.notes.startswith("built in a pristine tree after the build on earlier outputs failed")


@needs("git", "make", "cc")
def test_build_command_variants_fit_by_the_files_a_tree_has(make_hist: PickHistory, tmp_path: Path) -> None:
    build = {
        "kind": "command",
        "variants": [
            {"command": ["ninja", "-C", "out"], "needs": ["meson.build"], "binaries": {"binary": ["out/pick"]}},
            {"command": ["make", "pick"], "needs": ["Makefile"], "binaries": {"binary": ["pick"]}},
        ],
    }
    cfg = load_config(write_cfg(tmp_path, make_hist, build))
    with StateDir(tmp_path / "st") as state:
        rec = Builder(state, Workspace(cfg.repo_source, state.clone_dir), Events()).ensure(make_hist.good, cfg.build)
    assert rec.ok and rec.variant == 1, rec.reason
    nothing = {"kind": "command", "variants": [build["variants"][0]]}  # type: ignore[index]
    cfg = load_config(write_cfg(tmp_path, make_hist, nothing, name="none-fits"))
    with StateDir(tmp_path / "st2") as state:
        rec = Builder(state, Workspace(cfg.repo_source, state.clone_dir), Events()).ensure(make_hist.good, cfg.build)
    assert rec.status == "unsupported" and "variant 0: the tree has no meson.build" in rec.reason


@needs("git", "make", "cc")
def test_source_in_a_run_is_the_commit_s_own_kept_tree_never_the_moving_clone(
    make_hist: PickHistory, tmp_path: Path
) -> None:
    argv = ["{binary}", "--seed", "{seed}", "--notes", "{source}/README.md"]  # pick ignores the notes
    cfg = load_config(write_cfg(tmp_path, make_hist, MAKE, argv))
    first, later = make_hist.commits[0], make_hist.commits[-1]
    with StateDir(tmp_path / "st") as state:
        runner = CommitRunner(cfg, state, Workspace(cfg.repo_source, state.clone_dir), Events())
        a = runner.prepare(first)
        b = runner.prepare(later)  # the clone is now at `later`; `first`'s runs still read its own tree
        readme = {p.sha: Path(p.executor.values["source"]) / "README.md" for p in (a, b)}  # type: ignore[union-attr]
        assert readme[first].read_text() == _git_show(make_hist, first, "README.md")
        assert readme[later].read_text() == _git_show(make_hist, later, "README.md") != readme[first].read_text()
        assert a.run_key != b.run_key and runner.prepare(first).run_key == a.run_key
        assert not readme[first].is_relative_to(state.clone_dir)


def _git_show(hist: PickHistory, sha: str, path: str) -> str:
    return subprocess.run(
        ["git", "-C", str(hist.repo), "show", f"{sha}:{path}"], capture_output=True, text=True, check=True
    ).stdout


# -- build.kind none -------------------------------------------------------------------------------
@needs("git")
def test_no_build_runs_each_commit_from_its_tree_kept_checked_and_keying_its_runs(
    py_hist: PickHistory, tmp_path: Path
) -> None:
    cfg = load_config(write_cfg(tmp_path, py_hist, NONE, FAST_PY))
    before, after = py_hist.commits[py_hist.commits.index(py_hist.culprit) - 1], py_hist.culprit
    with StateDir(tmp_path / "st") as state:
        runner = CommitRunner(cfg, state, Workspace(cfg.repo_source, state.clone_dir), Events())
        a, b = runner.prepare(before), runner.prepare(after)
        assert a.build.ok and a.build.binaries == {} and runner.builder.built == []  # an export is no build
        tree = {p.sha: Path(p.executor.values["source"]) for p in (a, b)}  # type: ignore[union-attr]
        assert (tree[after] / "table.py").read_text() == _git_show(py_hist, after, "table.py")
        assert (tree[before] / "table.py").read_text() == _git_show(py_hist, before, "table.py")
        assert a.run_key != b.run_key  # table.py differs: pick.py (the file argv names) does not
        assert a.program == ""  # the tree, not a binary's bytes, is the program

        runs = list(runner.runs(a, [1, 2, 3]))
        assert all(r.ok and r.tokens and r.tokens[0] in REFERENCE for r in runs), runs
        (tree[before] / "__pycache__").mkdir(exist_ok=True)  # what a run adds is not the commit's
        assert runner.prepare(before).run_key == a.run_key
        (tree[before] / "table.py").write_text("WORDS = ['red']\nPROBS = [1.0]\n")  # a run that edits it
        again = runner.prepare(before)  # exported afresh: the commit's own files, the same key
        assert again.run_key == a.run_key
        assert (tree[before] / "table.py").read_text() == _git_show(py_hist, before, "table.py")


def test_without_dependency_information_every_commit_that_changes_a_file_stays_on_the_line() -> None:
    full = ["g", "docs", "empty", "code", "b"]
    changes = {
        "docs": [Change("README.md", "M")],
        "empty": [],  # its tree is its parent's: the same program
        "code": [Change("table.py", "M")],
        "b": [Change("README.md", "M")],
    }
    rule = InputRule(frozenset(), whole_tree=True)
    narrowed = narrow(full, changes, rule)
    assert narrowed.line == ("g", "docs", "code", "b") and narrowed.stands_for == {"docs": ("empty",)}
    assert narrowed.why["docs"] == "README.md: a file of the tree (no dependency information)"
    assert narrow(full, changes, rule, restrict=["table.py"]).line == ("g", "code", "b")  # --paths
    text = rule_text(rule, Narrowing(), "command")
    assert text.startswith("build.kind command: no dependency information") and "--paths" in text


# -- whole bisects ---------------------------------------------------------------------------------
@pytest.mark.heavy  # whole bisects or builds, 3-8 s: after the default suite (README: Tests)
@needs("git", "make", "cc")
def test_bisect_of_a_make_project_names_the_culprit_and_skips_the_broken_build(
    make_hist: PickHistory, tmp_path: Path
) -> None:
    config = write_cfg(tmp_path, make_hist, MAKE, storage={"state_dir": str(tmp_path / "st")})
    out = tmp_path / "report.json"
    proc = cli("bisect", str(config), "--good", make_hist.good, "--bad", make_hist.commits[-1], "--json", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    assert report["status"] == "found" and report["first_bad"] == make_hist.culprit
    assert report["input_rule"].startswith("build.kind command: no dependency information")
    assert report["environment"]["build"] == "command: make -j{jobs}"
    verdicts = {v["commit"]: v for v in report["verdicts"]}
    if make_hist.broken in verdicts:  # the search went there: skipped, with the compiler's error
        assert verdicts[make_hist.broken]["verdict"] == "skip" and verdicts[make_hist.broken]["build"] == "failed"
    # tested alone, the broken commit is a skip (exit 4) that says why, not a crash
    alone = cli("test", str(config), "--commit", str(make_hist.broken))
    assert alone.returncode == 4, alone.stdout + alone.stderr
    assert "build command `make` failed (exit 2)" in alone.stdout and "Traceback" not in alone.stderr


@pytest.mark.longest  # the longest tier: by hand, not in CI (README: Tests)
@needs("git")
def test_bisect_of_a_python_script_with_no_build_names_the_culprit(py_hist: PickHistory, tmp_path: Path) -> None:
    config = write_cfg(tmp_path, py_hist, NONE, FAST_PY, storage={"state_dir": str(tmp_path / "st")})
    out = tmp_path / "report.json"
    proc = cli("bisect", str(config), "--good", py_hist.good, "--bad", py_hist.commits[-1], "--json", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(out.read_text())
    assert report["status"] == "found" and report["first_bad"] == py_hist.culprit
    assert report["input_rule"].startswith("build.kind none: no dependency information")


# -- init ------------------------------------------------------------------------------------------
def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / "tree"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def test_init_tells_the_build_kind_from_the_tree_and_the_command_line(tmp_path: Path) -> None:
    binary, script = ["{binary}", "--seed", "{seed}"], ["python3", "{source}/pick.py", "--seed", "{seed}"]
    cmake = _tree(tmp_path / "c", {"CMakeLists.txt": "", "Makefile": ""})
    make = _tree(tmp_path / "m", {"GNUmakefile": "", "pick.py": ""})
    bare = _tree(tmp_path / "b", {"pick.py": ""})
    sha, none = "a" * 40, BuildWish()
    assert choose_kind(cmake, binary, none, sha) == "cmake"
    assert choose_kind(make, binary, none, sha) == "command"
    assert choose_kind(make, script, none, sha) == "none"  # nothing built is run: no build
    assert choose_kind(bare, script, none, sha) == "none"
    assert choose_kind(cmake, binary, BuildWish.of(None, "make pick", None), sha) == "command"
    assert choose_kind(bare, binary, BuildWish.of("command", "cargo build", "target/x"), sha) == "command"
    for tree, argv, wish, error in (
        (bare, binary, none, f"init: {sha[:12]} has no CMakeLists.txt and no Makefile: give --build-command"),
        (make, ["python3", "pick.py", "{seed}"], none, "init: the command names neither {binary}"),
        (make, binary, BuildWish.of("none", None, None), "init: {binary} in the command: with build kind none"),
        (cmake, binary, BuildWish.of("cmake", None, "pick"), "init: --build-command and --binary go with a build"),
        (make, script, BuildWish.of(None, "make", None), "init: --build-command: with build kind none"),
    ):
        with pytest.raises(ConfigError) as info:
            choose_kind(tree, argv, wish, sha)
        assert str(info.value).startswith(error) and "\n" not in str(info.value), info.value
    with pytest.raises(ConfigError, match="--build-command 'make \"pick': No closing quotation"):
        BuildWish.of(None, 'make "pick', None)
    with pytest.raises(ConfigError, match=r"init: --build-command\[1\]: unknown placeholder \{job\} \(known: "):
        BuildWish.of(None, "make -j{job}", None)


@needs("make", "cc")
def test_init_finds_the_one_program_a_build_command_makes(tmp_path: Path) -> None:
    main = "int main(void) { return 0; }\n"
    rules = "all: prog\nprog: main.c\n\tcc -o prog main.c\n\tcc -shared -fPIC -o libx.so main.c\n"
    one = _tree(tmp_path / "one", {"Makefile": rules, "main.c": main, "run.sh": "#!/bin/sh\n"})
    os.chmod(one / "run.sh", 0o755)  # an executable already there is not what the build made
    assert find_binary(one, ["make", "-j{jobs}"], None, "a" * 40) == "prog"  # libx.so is a library

    two = _tree(
        tmp_path / "two",
        {
            "Makefile": rules.replace("all: prog", "all: prog tool") + "tool: main.c\n\tcc -o tool main.c\n",
            "main.c": main,
        },
    )
    with pytest.raises(ConfigError) as info:
        find_binary(two, ["make"], None, "a" * 40)
    assert str(info.value) == (
        "init: `make` at aaaaaaaaaaaa made 2 executables (prog, tool): give --binary PATH, the program "
        "{binary} stands for (relative to the tree)"
    )
    assert find_binary(two, ["make"], "tool", "a" * 40) == "tool"
    with pytest.raises(
        ConfigError, match=r"init: `make` at aaaaaaaaaaaa left no executable nope in the tree \(--binary\)"
    ):
        find_binary(two, ["make"], "nope", "a" * 40)
    broken = _tree(tmp_path / "broken", {"Makefile": "all:\n\tcc -o prog missing.c\n"})
    with pytest.raises(ConfigError, match=r"init: `make` failed at aaaaaaaaaaaa \(exit 2\): "):
        find_binary(broken, ["make"], None, "a" * 40)


@needs("git", "make", "cc")
def test_init_writes_a_working_config_for_a_make_project(make_hist: PickHistory, tmp_path: Path) -> None:
    out, report = write_config(
        str(make_hist.repo), "v1.0", make_hist.command, out=tmp_path / "mk.yaml", target=None, name="mk",
        probs=REFERENCE, position=0, state_dir=tmp_path / "st",
    )  # fmt: skip
    assert report.verdict is Verdict.GOOD
    written = yaml.safe_load(out.read_text())
    assert written["build"] == {"kind": "command", "command": ["make", "-j{jobs}"], "binaries": {"binary": ["pick"]}}
    assert written["parse"]["split"] == "whitespace" and written["parse"]["prefix"] == "pick: "
    assert "for pick at" in out.read_text().splitlines()[0]


@needs("git", "make", "cc")
def test_init_takes_a_clone_url_as_well_as_a_checkout(make_hist: PickHistory, tmp_path: Path) -> None:
    """A maintainer may give the project's URL: it is written as repo.url (cloned into the state
    directory), not resolved as a path under the current directory."""
    url = f"file://{make_hist.repo}"
    out, report = write_config(
        url, "v1.0", make_hist.command, out=tmp_path / "u.yaml", target=None, name="u", probs=REFERENCE, position=0
    )
    assert report.verdict is Verdict.GOOD and yaml.safe_load(out.read_text())["repo"] == {"url": url}
    assert repo_entry("git@github.com:ggml-org/llama.cpp.git") == {"url": "git@github.com:ggml-org/llama.cpp.git"}
    assert repo_entry("src/x") == {"path": str(Path("src/x").resolve())}
    missing = cli("init", str(tmp_path / "nowhere"), "--good", "v1.0", "--", "{binary}", "--seed", "{seed}")
    assert missing.returncode == 2 and len(missing.stderr.strip().splitlines()) == 1
    assert "nowhere: no such directory (give a local checkout or a clone URL)" in missing.stderr


@needs("git", "make", "cc")
def test_init_gives_a_second_project_of_the_same_name_its_own_state_directory(
    make_hist: PickHistory, tmp_path: Path
) -> None:
    """Two projects named alike, configs in one folder: the second's state directory is not the
    first's clone (which would fail at its first checkout), and bisect there says why if forced.
    The other project: the same files at v1.0, but a history of its own (no commit in common)."""
    other = tmp_path / "other"
    other.mkdir()
    tree = subprocess.run(["git", "-C", str(make_hist.repo), "archive", "v1.0"], check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(other)], input=tree.stdout, check=True)
    who = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
    for step in (
        ["init", "-q", "-b", "main"],
        ["add", "-A"],
        [*who, "commit", "-qm", "its own first"],
        ["tag", "v1.0"],
    ):
        subprocess.run(["git", "-C", str(other), *step], check=True)
    common = {"target": None, "name": "mk", "probs": REFERENCE, "position": 0}
    first, _ = write_config(str(make_hist.repo), "v1.0", make_hist.command, out=tmp_path / "a.yaml", **common)
    again, _ = write_config(str(make_hist.repo), "v1.0", make_hist.command, out=tmp_path / "b.yaml", **common)
    second, report = write_config(str(other), "v1.0", make_hist.command, out=tmp_path / "c.yaml", **common)
    dirs = [yaml.safe_load(p.read_text())["storage"]["state_dir"] for p in (first, again, second)]
    assert dirs == ["./mk-state", "./mk-state", "./mk-state-2"] and report.verdict is Verdict.GOOD
    forced = tmp_path / "d.yaml"
    forced.write_text(second.read_text().replace("./mk-state-2", "./mk-state"))
    proc = cli("bisect", str(forced), "--good", "v1.0", "--bad", "main", "-q", cwd=tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert f"is a clone of {make_hist.repo}, which shares no commit with {other}" in proc.stderr
    assert "storage.state_dir" in proc.stderr


@pytest.mark.longest  # the longest tier: by hand, not in CI (README: Tests)
@needs("git")
def test_init_writes_a_working_config_for_a_python_script(py_hist: PickHistory, tmp_path: Path) -> None:
    out, report = write_config(
        str(py_hist.repo), "v1.0", FAST_PY, out=tmp_path / "py.yaml", target=None, name="py",
        probs=REFERENCE, position=0, state_dir=tmp_path / "st",
    )  # fmt: skip
    assert report.verdict is Verdict.GOOD
    assert yaml.safe_load(out.read_text())["build"] == {"kind": "none"}


@needs("git")
def test_init_of_a_tree_it_cannot_build_is_one_line(py_hist: PickHistory, tmp_path: Path) -> None:
    proc = cli("init", str(py_hist.repo), "--good", "v1.0", "-q", "--", "{binary}", "--seed", "{seed}", cwd=tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "has no CMakeLists.txt and no Makefile: give --build-command" in proc.stderr
    wrong = cli("init", str(py_hist.repo), "--good", "v1.0", "-q", "--target", "pick", "--", *FAST_PY, cwd=tmp_path)
    assert wrong.returncode == 2 and "--target names a cmake target" in wrong.stderr, wrong.stderr


# -- untrusted code --------------------------------------------------------------------------------
PROBE = "\t-{python} -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 5).close()\"\n"


def _make_pull_request(hist: PickHistory, number: int, port: int) -> str:
    """A commit on the good end whose Makefile reaches for the network before compiling,
    published only as refs/pull/<N>/head."""
    git = ["git", "-C", str(hist.repo), "-c", "user.name=Pat", "-c", "user.email=pat@example.com"]
    subprocess.run([*git, "checkout", "-q", "--detach", hist.good], check=True)
    makefile = hist.repo / "Makefile"
    rules = makefile.read_text()
    makefile.write_text(rules.replace("\t$(CC)", PROBE.format(python=SYS_PY, port=port) + "\t$(CC)", 1))
    subprocess.run([*git, "commit", "-qam", f"build: fetch the word list first (#{number})"], check=True)
    sha = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    subprocess.run([*git, "checkout", "-q", "main"], check=True)
    subprocess.run([*git, "update-ref", f"refs/pull/{number}/head", sha], check=True)
    return sha


@needs("bwrap", "prlimit", "git", "make", "cc")
def test_a_pull_request_s_build_command_runs_in_the_sandbox(listener: Listener, tmp_path: Path) -> None:
    hist = write_pick_history(tmp_path / "pr", "make", n_commits=3, culprit=2, broken=None)
    head = _make_pull_request(hist, 7, listener.port)
    config = write_cfg(tmp_path, hist, MAKE)
    before = listener.accepted
    state = tmp_path / "st"
    proc = cli("check", str(config), "--ref", "pull/7/head", "--state", str(state))
    assert proc.returncode == 0, proc.stdout + proc.stderr  # GOOD: the good end plus a build step
    assert f"pull/7/head = {head[:12]} (built and run in the sandbox: bubblewrap: no network" in proc.stdout
    assert listener.accepted == before  # its make reached for the host's server and could not
    assert not list(state.glob("kept/*")) and not list(state.glob("logs/build-*"))  # nothing of it kept

    # the same build as trusted code reaches the server: the test can tell a sandbox from none
    cfg = load_config(config)
    with StateDir(tmp_path / "trusted") as trusted:
        ws = Workspace(cfg.repo_source, trusted.clone_dir)
        ws.fetch_pull(7)
        assert Builder(trusted, ws, Events()).ensure(head, cfg.build).ok
    assert listener.wait_for(before + 1) > before


@needs("bwrap", "prlimit", "git")
def test_untrusted_code_with_no_build_runs_its_tree_from_its_box(py_hist: PickHistory, tmp_path: Path) -> None:
    cfg = load_config(write_cfg(tmp_path, py_hist, NONE, FAST_PY))
    with Scratch() as scratch, StateDir(tmp_path / "trusted") as trusted:
        jail = sandbox(LIMITS, scratch.box)
        scratch.hand_over(jail)
        box = BoxState(scratch)
        try:
            export = Export(Workspace(cfg.repo_source, trusted.clone_dir), box.clone_dir, after=jail.hand_over_tree)
            runner = CommitRunner(cfg, box, export, Events(), sandbox=jail)
            prepared = runner.prepare(py_hist.good)
            source = Path(prepared.executor.values["source"])  # type: ignore[union-attr]
            assert source.is_relative_to(scratch.box) and (source / "pick.py").is_file()
            runs = list(runner.runs(prepared, [1, 2, 3]))
            assert all(r.ok and r.tokens and r.tokens[0] in REFERENCE for r in runs), runs
        finally:
            stop_drivers(jail)
            box.close()


def test_reports_say_what_built_the_commits_when_it_was_not_cmake() -> None:
    made = Environment("cc 12", "cmake 3.25", [], "host", "Linux", "3.11", "0.2.0", build="command: make -j{jobs}")
    assert "build: command: make -j{jobs}" in environment_text(made, 100) and "- build: command: make -j{jobs}" in (
        environment_lines(made)
    )
    assert not any("cmake" in line for line in [*environment_text(made, 100), *environment_lines(made)])
    old = Environment.from_json({"compiler": "cc", "cmake": "cmake 3.25", "cmake_args": ["-DX=1"]})  # before kinds
    assert old.build == "" and environment_text(old, 100)[1] == "cmake: cmake 3.25; arguments: -DX=1"
