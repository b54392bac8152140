"""The bot's own clone: ref resolution, refusals, the first-parent line, and hands off the user's tree."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from bisectbot.edges.workspace import Workspace
from bisectbot.errors import RefError


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout.strip()


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
    with pytest.raises(RefError, match="not an ancestor"):
        ws.first_parent_line(ws.resolve("main"), ws.resolve("v0"))
    with pytest.raises(RefError, match="first-parent"):
        ws.first_parent_line(ws.resolve("side"), ws.resolve("main"))


def test_new_upstream_commits_are_fetched(upstream: Path, tmp_path: Path) -> None:
    ws = Workspace(str(upstream), tmp_path / "state" / "src")
    ws.sync()
    (upstream / "f.txt").write_text("new\n")
    git(upstream, "commit", "-qam", "new")
    again = Workspace(str(upstream), tmp_path / "state" / "src")
    assert again.info(again.resolve("main")).subject == "new"
