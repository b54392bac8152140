"""The sandbox's edges (issue 46): what the bot itself does on the host before and after a pull
request's code ran in its box. Each test is a pull request doing exactly the attack, checked
through the real `bisectbot check --ref pull/N/head` with real builds and processes:

* its configure plants links in the box where the bot will copy or delete afterwards;
* its tree holds one 3 GiB file (which used to be read whole into the bot's memory);
* its tree holds 150,000 files (which used to stall the export and the box's deletion);
* its subject, its configure error and its runs' stderr carry HTML, mentions, references and
  terminal escapes (which used to reach the posted comment and the terminal raw).
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from pathlib import Path

import pytest
import yaml

from bisectbot.demo import DemoHistory, generate_demo

from conftest import TOOLCHAIN, needs, require
from ghserver import ISSUE, GitHubStandIn, gh_server  # noqa: F401
from test_bot import bot_comments, cli, write_config
from test_untrusted import _git

pytestmark = needs("bwrap", "prlimit", *TOOLCHAIN)

# Configure time, in the sandbox: the box is $HOME's parent; the build directory is cmake's.
PLANT_KEPT = """
execute_process(COMMAND sh -c "ln -s '{host}' \\"$(dirname \\"$HOME\\")/kept\\"")
"""
PLANT_BIN = """
execute_process(COMMAND sh -c "rm -rf '${{CMAKE_BINARY_DIR}}/bin' && ln -s '{host}' '${{CMAKE_BINARY_DIR}}/bin'")
"""


def _publish(repo: Path, number: int, subject: str) -> str:
    _git(repo, "commit", "-qam", subject)
    sha = _git(repo, "rev-parse", "HEAD")
    _git(repo, "checkout", "-q", "main")
    _git(repo, "update-ref", f"refs/pull/{number}/head", sha)
    return sha


def _cmake_pull(demo: DemoHistory, number: int, tail: str) -> str:
    """A pull request on the good commit whose CMakeLists.txt ends with `tail`."""
    _git(demo.repo, "checkout", "-q", "--detach", demo.good)
    cmake = demo.repo / "CMakeLists.txt"
    cmake.write_text(cmake.read_text() + tail)
    return _publish(demo.repo, number, f"build: tidy up (#{number})")


def _config(demo: DemoHistory, tmp_path: Path, **untrusted: int) -> Path:
    data = yaml.safe_load(demo.config.read_text())
    data["repo"]["path"] = str(demo.repo)
    data["untrusted"] = {"scratch": tempfile.gettempdir(), **untrusted}
    path = tmp_path / "pr.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _check(config: Path, number: int, state: Path) -> subprocess.CompletedProcess[str]:
    return cli("check", str(config), "--ref", f"pull/{number}/head", "--state", str(state))


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoHistory:
    require(*TOOLCHAIN)
    return generate_demo(tmp_path_factory.mktemp("edges"), n_commits=6, culprit_index=3, break_index=1, seed=1)


def _host_dir(tmp_path: Path, name: str) -> Path:
    """A directory of the host's that the sandbox's uid could reach by name if links were followed."""
    host = tmp_path / name
    host.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chmod(host, 0o777)
    return host


def test_a_link_planted_where_the_binaries_are_kept_is_refused_not_followed(demo: DemoHistory, tmp_path: Path) -> None:
    host = _host_dir(tmp_path, "host-kept")
    _cmake_pull(demo, 21, PLANT_KEPT.format(host=host))
    proc = _check(_config(demo, tmp_path), 21, tmp_path / "st")
    out = proc.stdout + proc.stderr
    assert list(host.iterdir()) == [], "the bot followed the pull request's link onto the host"
    assert "refused: the pull request replaced kept (in its box) with a link" in out, out
    assert proc.returncode == 4, out  # SKIP: it could not be built as asked


def test_a_link_planted_where_stale_binaries_are_removed_is_not_followed(demo: DemoHistory, tmp_path: Path) -> None:
    host = _host_dir(tmp_path, "host-bin")
    victim = host / "specdemo"  # what removing the stale `bin/specdemo` through the link would delete
    victim.write_text("the host's own file")
    _cmake_pull(demo, 22, PLANT_BIN.format(host=host))
    proc = _check(_config(demo, tmp_path), 22, tmp_path / "st")
    out = proc.stdout + proc.stderr
    assert victim.read_text() == "the host's own file" and sorted(p.name for p in host.iterdir()) == ["specdemo"], out
    assert proc.returncode in (0, 1, 4), out  # a verdict, not a crash of the bot


def _big_file_pull(demo: DemoHistory, number: int, size: int) -> str:
    """A pull request adding one `size`-byte file of zeros (written by git from a sparse file)."""
    _git(demo.repo, "checkout", "-q", "--detach", demo.good)
    zeros = demo.repo / "weights.bin"
    with open(zeros, "wb") as f:
        f.truncate(size)
    _git(demo.repo, "add", "weights.bin")
    sha = _publish(demo.repo, number, f"models: add the weights (#{number})")
    return sha


@pytest.mark.heavy  # git compresses 3 GiB of zeros to make the pull request (README: Tests)
def test_a_3_gib_file_is_refused_before_it_is_read_and_the_bot_stays_small(demo: DemoHistory, tmp_path: Path) -> None:
    sha = _big_file_pull(demo, 23, 3 << 30)
    config = _config(demo, tmp_path, disk_mb=1024)
    timed = subprocess.run(
        ["/usr/bin/time", "-f", "maxrss_kb=%M", *_check_argv(config, 23, tmp_path / "st")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = timed.stdout + timed.stderr
    assert f"refused: the tree of {sha[:12]} holds 3,072 MB, more than untrusted.disk_mb (1,024 MB) allows" in out, out
    rss_mb = int(re.findall(r"maxrss_kb=(\d+)", timed.stderr)[-1]) / 1024
    assert rss_mb <= 300, f"the bot's peak RSS was {rss_mb:.0f} MB"


def _check_argv(config: Path, number: int, state: Path) -> list[str]:
    from conftest import bisectbot_argv

    return bisectbot_argv("check", str(config), "--ref", f"pull/{number}/head", "--state", str(state))


def _many_files_pull(demo: DemoHistory, number: int, count: int) -> str:
    """A pull request adding `count` one-byte files in one directory (made with git's plumbing)."""
    blob = subprocess.run(
        ["git", "-C", str(demo.repo), "hash-object", "-w", "--stdin"], input="x", capture_output=True, text=True
    ).stdout.strip()
    listing = "".join(f"100644 blob {blob}\tf{i:06d}\n" for i in range(count))
    many = subprocess.run(
        ["git", "-C", str(demo.repo), "mktree"], input=listing, capture_output=True, text=True, check=True
    ).stdout.strip()
    base_tree = _git(demo.repo, "rev-parse", f"{demo.good}^{{tree}}")
    entries = _git(demo.repo, "ls-tree", base_tree) + f"\n040000 tree {many}\tmany\n"
    tree = subprocess.run(
        ["git", "-C", str(demo.repo), "mktree"], input=entries, capture_output=True, text=True, check=True
    ).stdout.strip()
    sha = _git(demo.repo, "commit-tree", tree, "-p", demo.good, "-m", f"data: the test vectors (#{number})")
    _git(demo.repo, "update-ref", f"refs/pull/{number}/head", sha)
    return sha


@pytest.mark.heavy  # whole bisects or long simulations, 4 s or more: after the default suite (README: Tests)
def test_a_tree_of_150000_files_is_refused_before_anything_is_written(demo: DemoHistory, tmp_path: Path) -> None:
    sha = _many_files_pull(demo, 24, 150_000)
    boxes = set(Path(tempfile.gettempdir()).glob("bisectbot-untrusted-*"))
    proc = _check(_config(demo, tmp_path), 24, tmp_path / "st")
    out = proc.stdout + proc.stderr
    # the demo's own files and the 150,000
    assert re.search(
        rf"refused: the tree of {sha[:12]} has 150,0\d\d files, more than untrusted.max_files \(100,000\) allows", out
    ), out
    assert set(Path(tempfile.gettempdir()).glob("bisectbot-untrusted-*")) <= boxes  # its box is gone


@pytest.mark.longest  # the longest tier: by hand, not in CI (README: Tests)
def test_a_tree_of_150000_files_under_a_raised_cap_is_streamed_and_checked(demo: DemoHistory, tmp_path: Path) -> None:
    _many_files_pull(demo, 25, 150_000)
    raised = _check(_config(demo, tmp_path, max_files=200_000), 25, tmp_path / "st2")
    assert "refused" not in raised.stdout + raised.stderr and raised.returncode in (0, 1), raised.stdout + raised.stderr


# -- what a pull request wrote, in the comment and on the terminal ------------------------------
# Every construct issue 46 found reaching the comment raw, in one line a pull request controls.
ATTACK = (
    "</details> <details open><summary>pwned</summary> <img src=http://attacker.example/p.png> "
    "<a href=http://attacker.example/x>click</a> @org/team ping @someone see owner/repo#123 and GH-9 "
    "${ESC}[2J ${ESC}]8;;http://attacker.example${BEL}link${ESC}]8;;${BEL} \u202eevil\u202c"
)
# what must not be left outside code in the rendered comment, whatever the attack's wording
OUTSIDE_CODE = ("@org", "@someone", "owner/repo#", "GH-9", "attacker.example", "<img", "<details", "</details")


def _text_pull(demo: DemoHistory, number: int, tail: str) -> str:
    """A pull request whose subject is the attack and whose CMakeLists.txt ends with `tail`."""
    _git(demo.repo, "checkout", "-q", "--detach", demo.good)
    cmake = demo.repo / "CMakeLists.txt"
    cmake.write_text(cmake.read_text() + "string(ASCII 27 ESC)\nstring(ASCII 7 BEL)\n" + tail)
    subject = ATTACK.replace("${ESC}", "\x1b").replace("${BEL}", "\x07")
    return _publish(demo.repo, number, f"{subject} (#{number})")


def _outside_code(markdown: str) -> tuple[str, list[tuple[str, dict[str, str | None]]]]:
    """The text of the rendered comment outside code, pre and links (where GitHub looks for
    mentions and references), and every tag, rendered by GitHub's own engine."""
    from html.parser import HTMLParser

    cmarkgfm = pytest.importorskip("cmarkgfm")
    from cmarkgfm.cmark import Options

    class Walk(HTMLParser):
        def __init__(self) -> None:
            super().__init__(convert_charrefs=True)
            self.depth, self.text, self.tags = 0, [], []

        def handle_starttag(self, tag: str, attrs: list) -> None:
            self.tags.append((tag, dict(attrs)))
            self.depth += tag in ("code", "pre", "a")

        def handle_endtag(self, tag: str) -> None:
            self.depth -= tag in ("code", "pre", "a")

        def handle_data(self, data: str) -> None:
            if not self.depth:
                self.text.append(data)

    walk = Walk()
    walk.feed(cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE))
    return "".join(walk.text), walk.tags


@pytest.mark.parametrize(
    "number, tail, why",
    [
        (26, 'message(FATAL_ERROR "' + ATTACK + '")\n', "configure fails with the attack as its error"),
        (
            27,
            'file(WRITE "${CMAKE_BINARY_DIR}/said.sh" "#!/bin/sh\\necho \'' + ATTACK + "' >&2\\nexit 3\\n\")\n"
            "add_custom_command(TARGET specdemo POST_BUILD\n"
            '  COMMAND "${CMAKE_COMMAND}" -E copy "${CMAKE_BINARY_DIR}/said.sh" "$<TARGET_FILE:specdemo>"\n'
            '  COMMAND chmod +x "$<TARGET_FILE:specdemo>")\n',
            "every run prints the attack on stderr and fails",
        ),
    ],
)
def test_a_pull_requests_text_is_inert_in_the_comment_and_on_the_terminal(
    demo: DemoHistory, tmp_path: Path, gh_server: GitHubStandIn, number: int, tail: str, why: str
) -> None:
    sha = _text_pull(demo, number, tail)
    config = write_config(tmp_path, demo, gh_server)
    proc = cli(
        "check", str(config), "--ref", f"pull/{number}/head", "--issue", str(ISSUE), "--state", str(tmp_path / "st")
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode in (1, 4), out  # BAD or SKIP: a verdict, with the attack in its reason
    # on the terminal and in CI logs: no control character of theirs, shown escaped instead
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f\u202a-\u202e\u2066-\u2069]", out), out
    assert "\\x1b[2J" in out, out
    (body,) = bot_comments(gh_server)
    assert f"pull/{number}/head = [`{sha[:12]}`]" in body and "@org/team" in body, body  # quoted, not dropped
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f\u202a-\u202e\u2066-\u2069]", body), body
    text, tags = _outside_code(body)
    assert not [bad for bad in OUTSIDE_CODE if bad in text], (why, text)
    assert not [t for t, _ in tags if t in ("img", "script", "iframe")], tags
    assert all((a.get("href") or "").startswith(gh_server.html_root) for t, a in tags if t == "a"), tags
    ours = [ln for ln in body.splitlines() if ln.startswith("<details><summary>")]
    assert [a for t, a in tags if t == "details"] == [{}] * len(ours), tags  # only ours, none open
