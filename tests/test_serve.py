"""The program under test as a server (run.serve: llama-server's /completion): started once per
commit, one HTTP request per seed, its answer's text parsed like stdout; a server that does not
start fails its variant's runs with the reason, so the next variant is tried. Real builds of the
demo history, a real HTTP server process on 127.0.0.1 in front of the demo binary."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from bisectbot.building.workspace import Workspace
from bisectbot.config import load_config
from bisectbot.demo import DemoHistory
from bisectbot.errors import ConfigError
from bisectbot.events import Events
from bisectbot.judge.runner import CommitRunner
from bisectbot.state.statedir import StateDir

from conftest import bisectbot_argv, needs, subprocess_env

# An HTTP front for the demo binary, started as `front.py BINARY PORT [break]`: /health, then
# /completion with {prompt, seed} answers {"content": what the binary generated}. With "break"
# it refuses to start, as a llama-server given a flag of another era does.
FRONT = """
import json, subprocess, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
binary, port = sys.argv[1], int(sys.argv[2])
if sys.argv[3:] == ["break"]:
    print("loading model", file=sys.stderr)
    print("error: invalid argument: break", file=sys.stderr)
    sys.exit(1)
class H(BaseHTTPRequestHandler):
    def log_message(self, *a): pass
    def reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code); self.send_header("Content-Length", str(len(data))); self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        self.reply(200 if self.path == "/health" else 404, {"status": "ok"})
    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        out = subprocess.run([binary, "--seed", str(req["seed"]), "--prompt", req["prompt"], "-n", "4"],
                             capture_output=True, text=True).stdout
        self.reply(200, {"content": out.strip()[len(req["prompt"]):]})
ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
"""


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(bisectbot_argv(*args), capture_output=True, text=True, timeout=600, env=subprocess_env())


def served_config(history: DemoHistory, tmp_path: Path, extras: list[list[str]]) -> Path:
    """The demo's config with its program behind the HTTP front: one command variant per
    `extras` (arguments after the port)."""
    front = tmp_path / "front.py"
    front.write_text(FRONT)
    data = yaml.safe_load(history.config.read_text())
    data["repo"]["path"] = str(history.repo)
    data["run"].pop("argv")
    data["run"]["variants"] = [{"argv": [sys.executable, str(front), "{binary}", "{port}", *x]} for x in extras]
    data["run"]["serve"] = {"body": {"prompt": "ab", "seed": "{seed}"}, "startup_timeout": 30}
    data["run"]["jobs"] = 2
    data["parse"] = {"split": "chars", "expect_tokens": 4}
    path = tmp_path / "served.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.heavy  # whole bisects or builds, 3-8 s: after the default suite (README: Tests)
def test_a_server_is_tested_like_a_program_and_a_server_that_does_not_start_gives_way(
    small_demo: DemoHistory, tmp_path: Path
) -> None:
    cfg = served_config(small_demo, tmp_path, [["break"], []])
    state = str(tmp_path / "st")
    good = cli("test", str(cfg), "--commit", small_demo.good, "--state", state, "--json", "-")
    assert good.returncode == 0, good.stderr
    report = json.loads(good.stdout)
    assert report["verdict"] == "good" and report["detail"]["variant"] == 1 and report["runs"] > 50
    bad = cli("test", str(cfg), "--commit", "main", "--state", state, "--json", "-")
    assert bad.returncode == 1, bad.stderr
    assert json.loads(bad.stdout)["verdict"] == "bad"
    # a replay starts no server and runs nothing
    again = cli("test", str(cfg), "--commit", "main", "--state", state, "--json", "-")
    assert json.loads(again.stdout)["detail"]["executed"] == 0


def test_a_server_that_never_starts_skips_the_commit_saying_why(small_demo: DemoHistory, tmp_path: Path) -> None:
    cfg = served_config(small_demo, tmp_path, [["break"]])
    proc = cli("test", str(cfg), "--commit", "main", "--state", str(tmp_path / "st"), "--json", "-")
    assert proc.returncode == 4, proc.stderr
    reason = json.loads(proc.stdout)["reason"]
    assert "the server did not start" in reason and "exit status 1" in reason, reason
    assert "error: invalid argument: break" in reason and "command variant 0" in reason, reason


@needs("bwrap")
def test_untrusted_code_is_never_started_as_a_server_outside_its_box(small_demo: DemoHistory, tmp_path: Path) -> None:
    """A pull request's server would have to run on the host (its box has no network): it is
    not run at all, and not even built."""
    from test_untrusted import boxed

    marker = tmp_path / "ran-on-the-host"
    path = served_config(small_demo, tmp_path, [[]])
    data = yaml.safe_load(path.read_text())
    data["run"]["variants"] = [{"argv": ["/bin/sh", "-c", f"touch {marker}", "{binary}", "{port}"]}]
    path.write_text(yaml.safe_dump(data))
    cfg = load_config(path)
    with boxed() as box, StateDir(tmp_path / "st") as state:
        workspace = Workspace(str(small_demo.repo), tmp_path / "ws")
        runner = CommitRunner(cfg, state, workspace, Events(), sandbox=box)
        prepared = runner.prepare(small_demo.culprit)
        assert prepared.executor is None and "not run for untrusted code" in prepared.why
    assert not marker.exists()
    con = sqlite3.connect(tmp_path / "st" / "state.sqlite3")
    assert con.execute("SELECT COUNT(*) FROM builds").fetchone() == (0,)
    con.close()


@pytest.mark.parametrize(
    ("argv", "error"),
    [
        (["{binary}", "--seed", "{seed}", "--port", "{port}"], "the seed goes in run.serve.body"),
        (["{binary}", "--host", "127.0.0.1"], "run.serve needs {port}"),
    ],
)
def test_a_server_command_names_its_port_and_not_the_seed(
    small_demo: DemoHistory, tmp_path: Path, argv: list[str], error: str
) -> None:
    data = yaml.safe_load(small_demo.config.read_text())
    data["run"]["argv"] = argv
    data["run"]["serve"] = {"body": {"seed": "{seed}"}}
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=error.replace("{", r"\{")):
        load_config(path)
