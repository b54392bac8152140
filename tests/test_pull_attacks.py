"""A pull request that attacks the bot, row by row (issue 21's table), through the real CLI on a
demo repository: its cmake configure runs an attack script in the sandbox and reports what got
through in its error message (the one channel back), then the bot's state is inspected from
outside. Every attack must be blocked, and a trusted test afterwards must give the verdict a
state directory the pull request never touched gives.

The same script run as trusted code (no sandbox) against a decoy state directory lands every
attack: the test can tell a sandbox from none."""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from bisectbot.demo import DemoHistory, generate_demo

from conftest import TOOLCHAIN, needs, require
from test_bot import cli
from test_untrusted import _git

pytestmark = needs("bwrap", "prlimit", "ps", *TOOLCHAIN)

KEY_TEXT = "bisectbot-webhook-key-8c1f0e77"  # a key file of the bot's user (row 6)
TOKEN = "ghp_" + "A1b2C3d4" * 5  # the bot's token, in its environment (row 9)
SLEEPER = "3171"  # `sleep 3171`: the process that must not outlive the check (row 10)
DECOYS = {
    "AWS_ACCESS_KEY_ID": "AKIAEXAMPLE",
    "DATABASE_URL": "postgres://bot:pw@db/bot",
    "HF_TOKEN": "hf_x",
    "SSH_AUTH_SOCK": "/run/ssh-agent.sock",
}  # row 11

# What the pull request runs at configure time. Each probe prints LANDED or blocked.
ATTACK = r"""
S='{state}'; KEY='{key}'; H='{home}'; CC='{ccache}'; SHA='{sha}'; MARK='{marks}'
p() {{ if sh -c "$1" >/dev/null 2>&1; then printf 'LANDED '; else printf 'blocked '; fi; }}
printf 'r1='; p "test -d $S/src/.git && mkdir -p $S/src/.git/hooks && printf '#!/bin/sh\ntouch $MARK/hook-ran\n' > $S/src/.git/hooks/post-checkout && chmod +x $S/src/.git/hooks/post-checkout"
printf 'r2='; p "git -C $S/src tag pr-published $SHA"
printf 'r3='; p "test -d $CC && mkdir -p $CC/f && printf 'poison' > $CC/f/poisoned && printf '#!/bin/sh\ntouch $MARK/trojan-ran\nexec \"\$@\"\n' > $CC/prefix.sh && chmod +x $CC/prefix.sh && printf 'prefix_command = $CC/prefix.sh\nrecache = true\n' >> $CC/ccache.conf"
printf 'r4='; p "ls -d $S/build-*/ && for d in $S/build-*/; do printf trojan > \$d/sampling.cpp.o && touch -d 2030-01-01 \$d/sampling.cpp.o || exit 1; done"
printf 'r5='; p "ls $S/kept/*/*/specdemo && for f in $S/kept/*/*/specdemo; do printf '#!/bin/sh\ntouch $MARK/kept-ran\n' > \$f || exit 1; done"
printf 'r6=%s ' "$(cat "$KEY" 2>/dev/null || echo blocked)"
printf 'r7='; p "python3 -c \"import sqlite3; c = sqlite3.connect('file:$S/state.sqlite3?mode=rw', uri=True); c.execute('INSERT INTO last_good (config, sha, ref, date) VALUES (?,?,?,?)', ('demo', '$SHA', 'forged', 'now')); c.commit()\""
printf 'r8='; p "test -d $H && touch $H/pwned"
printf 'r9='; p "grep -l -s '{token}' /proc/*/environ | grep -q ."
printf 'r10='; (setsid sleep {sleeper} >/dev/null 2>&1 &); printf 'started '
printf 'r11=%s ' "$(env | cut -d= -f1 | grep -E 'AWS|DATABASE|HF_|SSH|GITHUB|TOKEN|SECRET' | tr '\n' ',' || true)"
printf 'home=%s' "$HOME"
"""

CMAKE_TAIL = """
execute_process(COMMAND sh ${CMAKE_SOURCE_DIR}/attack.sh OUTPUT_VARIABLE REPORT OUTPUT_STRIP_TRAILING_WHITESPACE)
message(FATAL_ERROR "attack report: ${REPORT}")
"""


@dataclass
class Attacked:
    demo: DemoHistory
    config: Path
    state: Path
    home: Path
    ccache: Path
    marks: Path
    key: Path
    pr: str
    check: subprocess.CompletedProcess[str]
    before: dict[str, object]
    env: dict[str, str]


def _attack_script(state: Path, key: Path, home: Path, ccache: Path, sha: str, marks: Path) -> str:
    return ATTACK.format(
        state=state, key=key, home=home, ccache=ccache, sha=sha, marks=marks, token=TOKEN, sleeper=SLEEPER
    )


def _snapshot(state: Path) -> dict[str, object]:
    """What the attacks would change, read from outside."""
    kept = {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in state.glob("kept/*/*/specdemo")}
    with sqlite3.connect(state / "state.sqlite3") as db:
        last_good = db.execute("SELECT config, sha, ref FROM last_good ORDER BY ref").fetchall()
    return {
        "kept": kept,
        "last_good": last_good,
        "tags": _git(state / "src", "tag", "--list"),
        "hooks": sorted(p.name for p in (state / "src" / ".git" / "hooks").iterdir() if not p.name.endswith(".sample")),
        "objects": sorted(str(p.relative_to(state)) for p in state.glob("build-*/**/*.o")),
    }


def _verdict(proc: subprocess.CompletedProcess[str]) -> str:
    found = re.search(r"\b(GOOD|BAD|SKIP|INCONCLUSIVE)\b", proc.stdout)
    assert found, proc.stdout + proc.stderr
    return found.group(1)


@pytest.fixture(scope="module")
def attacked(tmp_path_factory: pytest.TempPathFactory) -> Attacked:
    require(*TOOLCHAIN)
    root = tmp_path_factory.mktemp("attack")
    demo = generate_demo(root / "demo", n_commits=6, culprit_index=3, break_index=1, seed=1)
    state, home, ccache, marks = root / "st", root / "home", root / "ccache", root / "marks"
    for d in (home, ccache, marks):
        d.mkdir()
    key = home / "webhook.key"
    key.write_text(KEY_TEXT)
    key.chmod(0o600)
    env = {"GITHUB_TOKEN": TOKEN, "HOME": str(home), "CCACHE_DIR": str(ccache), **DECOYS}

    # the pull request: on the good commit, an attack script its configure runs
    _git(demo.repo, "checkout", "-q", "--detach", demo.good)
    (demo.repo / "CMakeLists.txt").write_text((demo.repo / "CMakeLists.txt").read_text() + CMAKE_TAIL)
    (demo.repo / "attack.sh").write_text("")  # filled below, once its own sha is known: the tag needs one
    _git(demo.repo, "add", "attack.sh")
    _git(demo.repo, "commit", "-qam", "build: speed up sampling (#9)")
    base = _git(demo.repo, "rev-parse", "HEAD")
    (demo.repo / "attack.sh").write_text(_attack_script(state, key, home, ccache, base, marks))
    _git(demo.repo, "commit", "-qam", "build: cache the vocabulary (#9)")
    pr = _git(demo.repo, "rev-parse", "HEAD")
    _git(demo.repo, "checkout", "-q", "main")
    _git(demo.repo, "update-ref", "refs/pull/9/head", pr)

    # the bot's state before: a trusted check (last known good), a trusted test (build dir, kept binary, ccache)
    assert cli("check", str(demo.config), "--ref", demo.good, "--state", str(state), env=env).returncode == 0
    assert _verdict(cli("test", str(demo.config), "--commit", demo.bad, "--state", str(state), env=env)) == "BAD"
    before = _snapshot(state)
    assert before["kept"] and before["last_good"] and before["objects"]

    check = cli("check", str(demo.config), "--ref", "pull/9/head", "--state", str(state), env=env)
    return Attacked(demo, demo.config, state, home, ccache, marks, key, pr, check, before, env)


def _report(a: Attacked) -> dict[str, str]:
    text = a.check.stdout + a.check.stderr
    found = re.findall(r"attack report: (.*)", text)
    assert found, text  # the attack ran, in the sandbox, and its report came back as the build's error
    return dict(re.findall(r"(r\d+|home)=(\S*)", max(found, key=len)))  # the whole line, not a table's cut


@pytest.mark.heavy  # whole bisects or long simulations, 4 s or more: after the default suite (README: Tests)
def test_the_attack_ran_and_the_check_says_skip(attacked: Attacked) -> None:
    assert attacked.check.returncode == 4, attacked.check.stdout + attacked.check.stderr  # SKIP: cannot build
    report = _report(attacked)
    assert set(report) >= {f"r{i}" for i in range(1, 12)} | {"home"}, report
    assert report["home"].startswith("/") and "bisectbot-untrusted-" in report["home"]  # HOME in the box


def test_row1_a_hook_written_into_the_clone(attacked: Attacked) -> None:
    assert _report(attacked)["r1"] == "blocked"
    assert _snapshot(attacked.state)["hooks"] == attacked.before["hooks"]
    cli("test", str(attacked.config), "--commit", attacked.demo.good, "--state", str(attacked.state), env=attacked.env)
    assert not (attacked.marks / "hook-ran").exists()


def test_row2_a_tag_on_its_own_commit_does_not_make_it_trusted(attacked: Attacked) -> None:
    assert _report(attacked)["r2"] == "blocked"
    assert _snapshot(attacked.state)["tags"] == attacked.before["tags"]
    proc = cli("test", str(attacked.config), "--commit", attacked.pr, "--state", str(attacked.state), env=attacked.env)
    assert proc.returncode == 2 and "on no branch or tag" in proc.stderr, proc.stdout + proc.stderr


def test_row3_the_trusted_ccache_is_not_poisoned(attacked: Attacked) -> None:
    assert _report(attacked)["r3"] == "blocked"
    assert not (attacked.ccache / "f" / "poisoned").exists() and not (attacked.ccache / "prefix.sh").exists()


def test_row4_no_object_file_dropped_into_a_trusted_build_directory(attacked: Attacked) -> None:
    assert _report(attacked)["r4"] == "blocked"
    assert _snapshot(attacked.state)["objects"] == attacked.before["objects"]


def test_row5_kept_binaries_untouched(attacked: Attacked) -> None:
    assert _report(attacked)["r5"] == "blocked"
    assert _snapshot(attacked.state)["kept"] == attacked.before["kept"]


def test_row6_a_key_file_never_reaches_the_output(attacked: Attacked) -> None:
    assert _report(attacked)["r6"] == "blocked"
    assert KEY_TEXT not in attacked.check.stdout + attacked.check.stderr


def test_row7_the_state_database_cannot_be_opened(attacked: Attacked) -> None:
    assert _report(attacked)["r7"] == "blocked"
    assert _snapshot(attacked.state)["last_good"] == attacked.before["last_good"]


def test_row8_the_bots_home_is_not_writable(attacked: Attacked) -> None:
    assert _report(attacked)["r8"] == "blocked"
    assert not (attacked.home / "pwned").exists() and not Path("/root/pwned").exists()


def test_row9_no_process_of_the_bot_is_visible(attacked: Attacked) -> None:
    assert _report(attacked)["r9"] == "blocked"


def test_row10_nothing_it_starts_outlives_the_check(attacked: Attacked) -> None:
    assert _report(attacked)["r10"] == "started"
    for _ in range(50):  # its PID namespace died with the check; the kernel reaps what was in it
        left = [
            ln
            for ln in subprocess.run(["ps", "-e", "-o", "stat=,args="], capture_output=True, text=True).stdout.split(
                "\n"
            )
            if f"sleep {SLEEPER}" in ln and not ln.strip().startswith("Z")
        ]
        if not left:
            break
        time.sleep(0.1)
    assert left == [], left  # `sleep 3171` would still be running for the rest of the hour


def test_row11_only_an_allow_listed_environment(attacked: Attacked) -> None:
    assert _report(attacked)["r11"] == ""
    assert TOKEN not in attacked.check.stdout + attacked.check.stderr


@pytest.mark.heavy  # whole bisects or builds, 3-8 s: after the default suite (README: Tests)
def test_afterwards_trusted_tests_agree_with_an_untouched_state(attacked: Attacked, tmp_path: Path) -> None:
    """The trusted tests after the attack give what a state directory the pull request never
    touched gives (sharing the same ccache directory, the attack's target), and nothing the
    attack planted ever ran."""
    fresh = tmp_path / "fresh"
    for sha in (attacked.demo.good, attacked.demo.bad):
        here = cli("test", str(attacked.config), "--commit", sha, "--state", str(attacked.state), env=attacked.env)
        there = cli("test", str(attacked.config), "--commit", sha, "--state", str(fresh), env=attacked.env)
        assert _verdict(here) == _verdict(there), (here.stdout, there.stdout)
    assert sorted(p.name for p in attacked.marks.iterdir()) == []


def test_the_same_script_as_trusted_code_lands_every_attack(attacked: Attacked, tmp_path: Path) -> None:
    """The control: run on the host against a decoy of the bot's layout, the script's probes
    succeed, so 'blocked' above is the sandbox's doing."""
    decoy = tmp_path / "decoy"
    (decoy / "src").mkdir(parents=True)
    _git(decoy / "src", "init", "-q")
    _git(decoy / "src", "fetch", "-q", str(attacked.demo.repo), attacked.pr)
    (decoy / "build-x").mkdir()
    (decoy / "kept" / "k" / "s").mkdir(parents=True)
    (decoy / "kept" / "k" / "s" / "specdemo").write_text("binary")
    with sqlite3.connect(decoy / "state.sqlite3") as db:
        db.execute("CREATE TABLE last_good (config TEXT, sha TEXT, ref TEXT, date TEXT)")
    home, cc, marks = tmp_path / "home", tmp_path / "cc", tmp_path / "marks"
    for d in (home, cc, marks):
        d.mkdir()
    key = home / "key"
    key.write_text(KEY_TEXT)
    script = _attack_script(decoy, key, home, cc, attacked.pr, marks)
    env = {**os.environ, "GITHUB_TOKEN": TOKEN, **DECOYS}
    out = subprocess.run(["sh", "-c", script], capture_output=True, text=True, env=env, timeout=60).stdout
    subprocess.run(["pkill", "-f", f"sleep {SLEEPER}"])  # procps, like ps
    got = dict(re.findall(r"(r\d+)=(\S*)", out))
    assert all(got[f"r{i}"] == "LANDED" for i in (1, 2, 3, 4, 5, 7, 8, 9)), out
    assert got["r6"] == KEY_TEXT and "AWS_ACCESS_KEY_ID" in got["r11"], got


# -- the trusted path, if something slipped in anyway ------------------------------------------------
@pytest.mark.heavy  # whole bisects or builds, 3-8 s: after the default suite (README: Tests)
def test_a_hook_planted_in_the_clone_never_runs(attacked: Attacked) -> None:
    hooks = attacked.state / "src" / ".git" / "hooks"
    for name in ("post-checkout", "pre-auto-gc", "reference-transaction", "fsmonitor-watchman"):
        (hooks / name).write_text(f"#!/bin/sh\ntouch {attacked.marks}/planted-{name}\n")
        (hooks / name).chmod(0o755)
    _git(attacked.state / "src", "config", "core.fsmonitor", str(hooks / "fsmonitor-watchman"))
    try:
        proc = cli(
            "test",
            str(attacked.config),
            "--commit",
            attacked.demo.commits[2],
            "--state",
            str(attacked.state),
            env=attacked.env,
        )
        assert _verdict(proc) in ("GOOD", "BAD"), proc.stdout + proc.stderr
        assert list(attacked.marks.glob("planted-*")) == []
    finally:
        _git(attacked.state / "src", "config", "--unset", "core.fsmonitor")
        for name in ("post-checkout", "pre-auto-gc", "reference-transaction", "fsmonitor-watchman"):
            (hooks / name).unlink()


def test_a_tag_planted_in_the_clone_does_not_publish_a_commit(attacked: Attacked) -> None:
    """'Published' is what the source lists (ls-remote), not a ref of the writable clone."""
    _git(attacked.state / "src", "tag", "planted", attacked.pr)
    try:
        proc = cli(
            "test", str(attacked.config), "--commit", attacked.pr, "--state", str(attacked.state), env=attacked.env
        )
        assert proc.returncode == 2 and "on no branch or tag" in proc.stderr, proc.stdout + proc.stderr
    finally:
        _git(attacked.state / "src", "tag", "-d", "planted")


def test_a_tampered_kept_binary_is_rebuilt_not_run(attacked: Attacked) -> None:
    (kept,) = attacked.state.glob(f"kept/*/{attacked.demo.bad}/specdemo")
    original = hashlib.sha256(kept.read_bytes()).hexdigest()
    kept.write_text(f"#!/bin/sh\ntouch {attacked.marks}/tampered-ran\nexec /bin/false\n")
    os.utime(kept, (kept.stat().st_atime, kept.stat().st_mtime - 3600))  # an old date changes nothing
    with sqlite3.connect(attacked.state / "state.sqlite3") as db:
        db.execute("DELETE FROM runs WHERE sha=?", (attacked.demo.bad,))  # force runs: the binary must execute
    proc = cli(
        "test", str(attacked.config), "--commit", attacked.demo.bad, "--state", str(attacked.state), env=attacked.env
    )
    assert _verdict(proc) == "BAD", proc.stdout + proc.stderr
    assert not (attacked.marks / "tampered-ran").exists()
    assert hashlib.sha256(kept.read_bytes()).hexdigest() == original  # built again


def test_a_file_dropped_into_a_trusted_build_directory_wipes_it(attacked: Attacked) -> None:
    from bisectbot.building.builder import Builder
    from bisectbot.building.workspace import Workspace
    from bisectbot.config import load_config
    from bisectbot.events import Events
    from bisectbot.state.statedir import StateDir

    (build_dir,) = [d for d in attacked.state.glob("build-*") if d.is_dir()]
    planted = build_dir / "CMakeFiles" / "trojan.o"
    planted.write_text("trojan")
    os.utime(planted, (1_900_000_000, 1_900_000_000))  # 2030
    cfg = load_config(attacked.config)
    with StateDir(attacked.state) as state:
        rec = Builder(state, Workspace(cfg.repo_source, state.clone_dir), Events()).ensure(
            attacked.demo.commits[4], cfg.build
        )
    assert rec.ok, rec.reason
    assert not planted.exists()
    assert "is newer than the last trusted build there" in Path(rec.log).read_text()


# -- a build that links its binary to a file of the bot's ---------------------------------------------
def test_a_binary_that_is_a_link_out_of_the_build_tree_is_not_kept(attacked: Attacked, tmp_path: Path) -> None:
    """The pull request's build replaces its binary by a link to the bot's key file (a dangling
    link inside the sandbox, a real file outside): the bot does not copy it into the box."""
    repo = attacked.demo.repo
    _git(repo, "checkout", "-q", "--detach", attacked.demo.good)
    cmake = repo / "CMakeLists.txt"
    cmake.write_text(
        cmake.read_text()
        + f"""
add_custom_command(TARGET specdemo POST_BUILD COMMAND ln -sf {attacked.key} $<TARGET_FILE:specdemo>)
"""
    )
    _git(repo, "commit", "-qam", "build: link the binary (#10)")
    sha = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "-q", "main")
    _git(repo, "update-ref", "refs/pull/10/head", sha)
    proc = cli(
        "check", str(attacked.config), "--ref", "pull/10/head", "--state", str(tmp_path / "st"), env=attacked.env
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4 and "build left no binary for {binary}" in out, out
    assert "a link out of the build directory is not kept" in out and KEY_TEXT not in out


# -- pull requests that try to exhaust the machine ---------------------------------------------------
def _pull(repo: Path, base: str, number: int, cmake_tail: str) -> str:
    _git(repo, "checkout", "-q", "--detach", base)
    cmake = repo / "CMakeLists.txt"
    cmake.write_text(cmake.read_text() + cmake_tail)
    _git(repo, "commit", "-qam", f"build: tune (#{number})")
    sha = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "-q", "main")
    _git(repo, "update-ref", f"refs/pull/{number}/head", sha)
    return sha


@pytest.mark.heavy  # three checks of a minute in all: the sandbox-level tests cover the same caps quickly
@pytest.mark.parametrize(
    "number, tail, why",
    [
        (
            11,
            'execute_process(COMMAND sh -c "i=0; while true; do head -c 8000000 /dev/zero > f$i || true; i=$((i+1)); done")',
            "stopped: its files passed 200 MB on disk",
        ),
        (12, 'execute_process(COMMAND bash -c "b() { b | b & }; b")', "exceeded the build timeout of 30 s"),
        (
            13,
            'file(WRITE ${CMAKE_BINARY_DIR}/yes.sh "#!/bin/sh\\nexec yes\\n")\n'
            "add_custom_command(TARGET specdemo POST_BUILD COMMAND cp ${CMAKE_BINARY_DIR}/yes.sh $<TARGET_FILE:specdemo>)",
            "stopped: its output passed 4 MB",
        ),
    ],
    ids=["fills-the-disk", "fork-bomb", "prints-gigabytes"],
)
def test_a_pull_request_cannot_exhaust_the_machine(
    attacked: Attacked, tmp_path: Path, number: int, tail: str, why: str
) -> None:
    """Its configure fills the disk or forks without end, or its binary prints without end: the
    check stops it at the cap, says SKIP with the cap named, and leaves nothing behind."""
    import yaml

    _pull(attacked.demo.repo, attacked.demo.good, number, "\n" + tail + "\n")
    data = yaml.safe_load(attacked.config.read_text())
    data["build"]["timeout"] = 30
    data["untrusted"] = {"disk_mb": 200, "output_mb": 4, "processes": 128}
    config = attacked.config.with_name(f"tight-{number}.yaml")  # beside it: its paths are relative
    config.write_text(yaml.safe_dump(data, sort_keys=False))
    boxes = set(Path(tempfile.gettempdir()).glob("bisectbot-untrusted-*"))
    proc = cli("check", str(config), "--ref", f"pull/{number}/head", "--state", str(tmp_path / "st"), env=attacked.env)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 4 and why in out, out
    assert set(Path(tempfile.gettempdir()).glob("bisectbot-untrusted-*")) <= boxes
    if os.geteuid() == 0:  # its uid on the host is 65534: nothing of it runs any more
        from test_untrusted import _running_as

        assert _running_as(65534) == []
