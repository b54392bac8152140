"""The bot's own clone: ref resolution, refusals, the first-parent line, and hands off the user's tree."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bisectbot.building.workspace import Workspace
from bisectbot.errors import GitError, RefError

from conftest import needs

pytestmark = needs("git")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture()
def upstream(tmp_path: Path) -> Path:
    repo = tmp_path / "up"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "t@example.com")
    git(repo, "config", "user.name", "t")
    for i in range(5):
        (repo / "f.txt").write_text(f"{i}\n")
        git(repo, "add", "f.txt")
        git(repo, "commit", "-qm", f"c{i}")
    git(repo, "tag", "v0", "HEAD~4")
    # a side branch merged back: its commits are not on the first-parent line
    git(repo, "checkout", "-qb", "side", "HEAD~2")
    (repo / "g.txt").write_text("side\n")
    git(repo, "add", "g.txt")
    git(repo, "commit", "-qm", "side")
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "-m", "merge side", "side")
    return repo


def test_resolve_and_line(upstream: Path, tmp_path: Path) -> None:
    ws = Workspace(str(upstream), tmp_path / "state" / "src")
    good, bad = ws.resolve("v0"), ws.resolve("main")
    assert len(good) == 40 and bad == git(upstream, "rev-parse", "main")
    line = ws.first_parent_line(good, bad)
    subjects = [ws.info(s).subject for s in line]
    assert subjects == ["c0", "c1", "c2", "c3", "c4", "merge side"]


def test_a_moved_checkout_is_adopted_and_another_project_refused_by_name(upstream: Path, tmp_path: Path) -> None:
    """The state's clone was made from a path the project is no longer at (a checkout moved, a CI
    runner's new workspace, a state directory restored from a cache): fetched from where it is now.
    A project sharing no commit with it (two configs named alike in one folder) is refused with
    the knob, instead of git's "reference is not a tree" at its first checkout."""
    src = tmp_path / "state" / "src"
    Workspace(str(upstream), src).sync()
    Workspace(str(upstream) + "/", src).sync()  # the same repository, spelt otherwise
    moved = tmp_path / "moved"
    subprocess.run(["git", "clone", "-q", str(upstream), str(moved)], check=True)
    git(moved, "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "new")
    ws = Workspace(str(moved), src)
    assert ws.resolve("main") == git(moved, "rev-parse", "main")  # fetched from where it is now
    assert git(src, "config", "--get", "remote.origin.url") == str(moved)
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q", "-b", "main")
    git(other, "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "x")
    with pytest.raises(GitError) as err:
        Workspace(str(other), src).sync()
    message = str(err.value)
    assert "\n" not in message and f"is a clone of {moved}, which shares no commit with {other}" in message
    assert "storage.state_dir" in message
    assert git(src, "config", "--get", "remote.origin.url") == str(moved)  # left as it was
    with pytest.raises(GitError, match="shares no commit with file://"):  # a URL: its roots fetched to a probe
        Workspace(f"file://{other}", src).sync()
    assert git(src, "for-each-ref", "refs/bisectbot-probe") == ""  # and dropped
    Workspace(f"file://{moved}", src).sync()  # the same project by URL: adopted
    assert git(src, "config", "--get", "remote.origin.url") == f"file://{moved}"


def test_user_tree_is_untouched(upstream: Path, tmp_path: Path) -> None:
    (upstream / "f.txt").write_text("user edit\n")
    before = git(upstream, "status", "--porcelain")
    ws = Workspace(str(upstream), tmp_path / "state" / "src")
    ws.checkout(ws.resolve("v0"))
    assert (tmp_path / "state" / "src" / "f.txt").read_text() == "0\n"
    assert git(upstream, "status", "--porcelain") == before
    assert (upstream / "f.txt").read_text() == "user edit\n"


@pytest.mark.parametrize("ref", ["nope", "$(touch x)", "--upload-pack=touch x", "-h", "a\nb", ""])
def test_refs_that_do_not_resolve_are_refused(upstream: Path, tmp_path: Path, ref: str) -> None:
    ws = Workspace(str(upstream), tmp_path / "state" / "src")
    with pytest.raises(RefError):
        ws.resolve(ref)
    assert not (tmp_path / "x").exists() and not Path("x").exists()


def test_good_not_ancestor_of_bad(upstream: Path, tmp_path: Path) -> None:
    ws = Workspace(str(upstream), tmp_path / "state" / "src")
    with pytest.raises(RefError, match="not an ancestor.*--good and --bad swapped"):
        ws.first_parent_line(ws.resolve("main"), ws.resolve("v0"))
    with pytest.raises(RefError, match="first-parent"):
        ws.first_parent_line(ws.resolve("side"), ws.resolve("main"))
    with pytest.raises(RefError, match="different branches"):  # neither holds the other
        ws.first_parent_line(ws.resolve("side"), ws.resolve("main~1"))


def test_new_upstream_commits_are_fetched(upstream: Path, tmp_path: Path) -> None:
    ws = Workspace(str(upstream), tmp_path / "state" / "src")
    ws.sync()
    (upstream / "f.txt").write_text("new\n")
    git(upstream, "commit", "-qam", "new")
    again = Workspace(str(upstream), tmp_path / "state" / "src")
    assert again.info(again.resolve("main")).subject == "new"


def _pull_head(repo: Path, number: int, text: str) -> str:
    """A commit only a pull request ref points at (as GitHub keeps a fork's head), not on a branch."""
    git(repo, "checkout", "-q", "--detach", "main")
    (repo / "pr.txt").write_text(text)
    git(repo, "add", "pr.txt")
    git(repo, "commit", "-qm", f"pr {number}: {text}")
    sha = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "main")
    git(repo, "update-ref", f"refs/pull/{number}/head", sha)
    return sha


def test_pull_request_head_is_fetched_into_its_own_namespace(upstream: Path, tmp_path: Path) -> None:
    first = _pull_head(upstream, 7, "one")
    ws = Workspace(str(upstream), tmp_path / "state" / "src")
    assert ws.resolve("pull/7/head") == first
    assert git(ws.root, "rev-parse", "refs/bisectbot/pull/7") == first
    assert ws.info(first).subject == "pr 7: one"
    # the author force-pushes: the next resolve sees the new head
    second = _pull_head(upstream, 7, "two")
    assert ws.resolve("pull/7/head") == second != first
    # no branch of the clone names it
    assert git(ws.root, "branch", "-r", "--contains", second) == ""


def test_missing_pull_request_and_other_spellings_are_refused(upstream: Path, tmp_path: Path) -> None:
    _pull_head(upstream, 7, "one")
    ws = Workspace(str(upstream), tmp_path / "state" / "src")
    with pytest.raises(RefError, match="no refs/pull/8/head") as missing:
        ws.resolve("pull/8/head")
    assert missing.value.unresolved == "pull/8/head"
    ws.resolve("pull/7/head")  # now refs/bisectbot/pull/7 exists in the clone
    for ref in (
        "refs/pull/7/head",
        "pull/7/head~1",
        "pull/7/head^{commit}",
        "pull/7/merge",
        "bisectbot/pull/7",
        "refs/bisectbot/pull/7",
        "pull/0/head",
    ):
        with pytest.raises(RefError, match="only as pull/<N>/head"):
            ws.resolve(ref)
