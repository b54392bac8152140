"""Commit range and checkout stages: the bot's own clone, ref resolution, the first-parent line.

The user's working tree is never touched: the bot clones the project (a local path or a URL)
into its state directory and checks commits out there. Refs are passed to git as single argv
elements after `--end-of-options`, so no ref can become an option or reach a shell.

A pull request's head (`pull/<N>/head`, `records.refs`) is not in a clone: it is fetched from the
source as `refs/pull/<N>/head` into the clone's `refs/bisectbot/pull/<N>` each time it is
resolved (the head moves with every push). Any other spelling in those namespaces is refused.
Untrusted code never sees the clone: it gets an `Export` (`git archive`, no `.git`).

Every git command of the bot runs with hooks off (`core.hooksPath` is the null device) and no
fsmonitor, so nothing written into a repository can make git run it. Whether a commit is
trusted code ("published") is asked of the source itself (`git ls-remote`), not read from refs
of the clone, which anything that once wrote into it could have added.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

# gitpython refuses to be imported when no git is installed (a traceback before any command
# runs); quiet, `bisectbot doctor` and the pre-flight of each command name the missing tool.
os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")
import git  # noqa: E402

from bisectbot.building.inputs import Change
from bisectbot.errors import GitError, RefError
from bisectbot.records.refs import local_pull_ref, pull_number, pull_ref_problem, source_pull_ref

_SHA = re.compile(r"^[0-9a-f]{40}$")
# Set on every git command the bot runs: no hook and no fsmonitor program is ever started.
SAFE_GIT_ENV = {
    "GIT_CONFIG_COUNT": "2",
    "GIT_CONFIG_KEY_0": "core.hooksPath",
    "GIT_CONFIG_VALUE_0": os.devnull,
    "GIT_CONFIG_KEY_1": "core.fsmonitor",
    "GIT_CONFIG_VALUE_1": "false",
}


def open_repo(path: Path | str) -> git.Repo:
    """A repository whose every git command runs with SAFE_GIT_ENV."""
    repo = git.Repo(path)
    repo.git.update_environment(**SAFE_GIT_ENV)
    return repo


@dataclass(frozen=True)
class CommitInfo:
    sha: str
    subject: str
    author: str
    date: str  # ISO 8601


def _check_ref_text(ref: str) -> None:
    """Refuse refs that could be read as options or carry control characters, before git sees them."""
    if not ref or ref.startswith("-") or any(ord(c) < 32 or c == "\x7f" for c in ref):
        raise RefError(f"refusing ref {ref!r}: not a valid git revision")


class Workspace:
    """The bot's clone of the project, under `root`, updated from `source` on `sync()`."""

    def __init__(self, source: str, root: Path):
        self.source = source
        self.root = root
        self._repo: git.Repo | None = None

    @property
    def source_is_local(self) -> bool:
        return Path(self.source).exists()

    @property
    def repo(self) -> git.Repo:
        if self._repo is None:
            self.sync()
        assert self._repo is not None
        return self._repo

    def sync(self) -> None:
        """Clone on first use, fetch afterwards; stale locks from a killed run are removed."""
        try:
            if not (self.root / ".git").exists():
                self.root.parent.mkdir(parents=True, exist_ok=True)
                git.Repo.clone_from(self.source, self.root, no_checkout=True, env=SAFE_GIT_ENV)
            repo = open_repo(self.root)
            self._adopt(repo)
            for lock in (self.root / ".git").glob("*.lock"):
                lock.unlink()  # we hold the state-dir lock: no other git process is ours
            repo.git.fetch(
                "--quiet",
                "--force",
                "--tags",
                "origin",
                "+refs/heads/*:refs/remotes/origin/*",
            )
        except (git.GitCommandError, git.InvalidGitRepositoryError, git.NoSuchPathError) as exc:
            problem = _local_problem(self.source)  # the source's fault: no need to name the clone
            where = "" if problem else f" into {self.root}"
            raise GitError(f"cannot clone or fetch {self.source}{where}: {problem or _git_message(exc)}") from None
        except OSError as exc:  # the clone's directory, or a stale lock, in the state directory
            what = f"{exc.filename}: " if exc.filename else ""
            raise GitError(
                f"cannot clone or fetch {self.source} into {self.root}: {what}{exc.strerror or exc}"
            ) from None
        self._repo = repo

    def _adopt(self, repo: git.Repo) -> None:
        """The clone's origin is spelt otherwise than this config's repository: the same project
        moved (a checkout at a new path, a CI runner's new workspace, a state directory restored
        from a cache) is adopted, and fetched from where it is now; another project (no root
        commit in common) is refused, since two configs sharing a state directory (the same
        `name` in one folder) would otherwise fail later with git's "reference is not a tree"."""
        origin = _clone_of(self.root)
        if origin is None or _same_source(origin, self.source):
            return
        ours = _roots(repo, "--all")
        if ours and not ours & _source_roots(repo, self.source):
            raise GitError(
                f"{self.root} is a clone of {origin}, which shares no commit with {self.source}: its state "
                f"directory belongs to another project; give this config its own storage.state_dir (or "
                f"--state-dir), or remove {self.root}"
            )
        repo.git.remote("set-url", "origin", self.source)

    # -- refs ---------------------------------------------------------------------------------
    def resolve(self, ref: str) -> str:
        """Full sha of `ref`, as the user means it (in their repo when it is local); a pull
        request's head as the source has it now."""
        _check_ref_text(ref)
        if why := pull_ref_problem(ref):
            raise RefError(f"refusing ref {ref!r}: {why}")
        if (number := pull_number(ref)) is not None:
            return self.fetch_pull(number)
        sha = None
        if self.source_is_local:
            try:
                sha = _rev_parse(open_repo(self.source), ref)
            except (git.InvalidGitRepositoryError, git.NoSuchPathError, OSError):
                pass  # not a repository git can read: the clone below says why
        if sha is None:
            for candidate in (ref, f"origin/{ref}", f"refs/tags/{ref}"):
                sha = _rev_parse(self.repo, candidate)
                if sha:
                    break
        if sha is None:
            raise RefError(f"ref {ref!r} does not resolve to a commit in {self.source}", unresolved=ref)
        self._ensure_present(sha)
        if not self._published(sha):
            raise RefError(
                f"refusing ref {ref!r}: commit {sha[:12]} is on no branch or tag of {self.source}, "
                "so it may be a pull request's code; a pull request's head is checked as "
                "`pull/<N>/head`, in the sandbox",
                unresolved=ref,
            )
        return sha

    def _published(self, sha: str) -> bool:
        """Whether `sha` is trusted code: reachable from a branch or tag the source has now (its
        own answer, `git ls-remote`: a ref written into the clone does not count), or, for a
        local source, from its HEAD or any of its refs outside the pull-request namespaces. A
        commit reachable only from `refs/pull/*` (GitHub serves such shas when asked by name) is
        a pull request's code and must not run unsandboxed."""
        upstream = self._upstream_refs()
        # branches first: few refs, and most commits are on one (llama.cpp has thousands of tags)
        for namespace in ("refs/remotes/origin", "refs/tags"):
            for name, target in _containing(self.repo, sha, namespace):
                if namespace == "refs/remotes/origin":
                    name = "refs/heads/" + name[len("refs/remotes/origin/") :]
                if target in upstream.get(name, ()):
                    return True
        if not self.source_is_local:
            return False
        try:
            mine = open_repo(self.source)
            if _contained(mine, sha, ["refs/heads", "refs/tags", "refs/remotes", "refs/bisect"]):
                return True
            mine.git.merge_base("--is-ancestor", sha, "HEAD")
            return True
        except (git.GitCommandError, git.InvalidGitRepositoryError, git.NoSuchPathError, OSError, ValueError):
            return False

    def _upstream_refs(self) -> dict[str, set[str]]:
        """The source's branches and tags as it lists them: ref name → the shas it names (a tag
        object and the commit it peels to)."""
        try:
            out = str(self.repo.git.ls_remote("--heads", "--tags", "origin"))
        except git.GitCommandError as exc:
            raise GitError(f"cannot list the branches and tags of {self.source}: {_git_message(exc)}") from None
        refs: dict[str, set[str]] = {}
        for line in out.splitlines():
            target, _, name = line.partition("\t")
            refs.setdefault(name.removesuffix("^{}"), set()).add(target.strip())
        return refs

    def export(self, sha: str, dest: Path, budget: "ExportBudget | None" = None) -> Path:
        """The tree of `sha` as plain files in `dest` (made afresh), without `.git`: what
        untrusted code builds. Links that would point outside `dest` are refused (tarfile's
        `data` filter), so nothing of the tree can name a path of the bot's.

        With `budget`, a tree with more files or bytes than it allows is refused before
        anything is written (ExportRefused, naming the cap), from `git ls-tree` alone; the
        archive is then streamed, never held whole, and stopped where what it unpacks (grown by
        export-subst, say) passes the budget."""
        if not _SHA.match(sha):
            raise RefError(f"export wants a full sha, got {sha!r}")
        if budget is not None:
            budget.check(*self._tree_size(sha), sha)
        if dest.is_symlink():  # a link where the tree goes (left by untrusted code): the link goes
            dest.unlink()
        shutil.rmtree(dest, ignore_errors=True)
        dest.mkdir(parents=True)
        try:
            proc = self.repo.git.archive("--format=tar", sha, as_process=True)
        except git.GitCommandError as exc:
            raise GitError(f"cannot export {sha[:12]} from {self.root}: {_git_message(exc)}") from None
        try:
            with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
                members = budget.members(tar, sha) if budget is not None else tar
                tar.extractall(dest, members=members, filter="data")
            proc.wait()  # git's own failure, if any
        except git.GitCommandError as exc:
            raise GitError(f"cannot export {sha[:12]} from {self.root}: {_git_message(exc)}") from None
        except (tarfile.TarError, OSError) as exc:
            raise GitError(f"cannot export {sha[:12]} into {dest}: {exc}") from None
        finally:
            if proc.proc is not None and proc.proc.poll() is None:  # stopped early: refused
                proc.proc.kill()
                proc.proc.wait()
        return dest

    def _tree_size(self, sha: str) -> tuple[int, int]:
        """(files, bytes) of the tree of `sha`, from the object database (nothing read whole)."""
        try:
            out = self.repo.git.ls_tree("-r", "-l", "-z", "--full-tree", sha, stdout_as_string=False)
        except git.GitCommandError as exc:
            raise GitError(f"cannot list {sha[:12]} in {self.root}: {_git_message(exc)}") from None
        files = size = 0
        for entry in out.split(b"\0"):
            meta = entry.split(b"\t", 1)[0].split()
            if len(meta) == 4:
                files += 1
                size += int(meta[3]) if meta[3].isdigit() else 0
        return files, size

    def fetch_pull(self, number: int) -> str:
        """Fetch pull request `number`'s head from the source into `refs/bisectbot/pull/<N>`
        (forced: a force-push moves it) and return its sha. The refspec is built from the
        number alone."""
        local = local_pull_ref(number)
        try:
            self.repo.git.fetch("--quiet", "--force", "--no-tags", "origin", f"+{source_pull_ref(number)}:{local}")
        except git.GitCommandError as exc:
            message = _git_message(exc)
            if "couldn't find remote ref" in message:
                raise RefError(
                    f"pull request #{number} has no head in {self.source} (no {source_pull_ref(number)})",
                    unresolved=f"pull/{number}/head",
                ) from None
            raise GitError(f"cannot fetch pull request #{number} from {self.source}: {message}") from None
        sha = _rev_parse(self.repo, local)
        if sha is None:
            raise RefError(f"pull request #{number}'s head is not a commit", unresolved=f"pull/{number}/head")
        return sha

    def _ensure_present(self, sha: str) -> None:
        if _rev_parse(self.repo, sha) is None:
            try:
                self.repo.git.fetch("--quiet", "origin", sha)
            except git.GitCommandError as exc:
                raise GitError(f"cannot fetch {sha} from {self.source}: {_git_message(exc)}") from None

    def is_ancestor(self, older: str, newer: str) -> bool:
        try:
            self.repo.git.merge_base("--is-ancestor", older, newer)
            return True
        except git.GitCommandError:
            return False

    def first_parent_line(self, good: str, bad: str) -> list[str]:
        """Commits from good to bad inclusive, oldest first, following first parents.

        Raises RefError when good is not an ancestor of bad on that line.
        """
        if good == bad:
            raise RefError(f"good and bad are the same commit {good[:12]}")
        if not self.is_ancestor(good, bad):
            if self.is_ancestor(bad, good):
                raise RefError(
                    f"good {good[:12]} is not an ancestor of bad {bad[:12]}, but bad is an ancestor of good: "
                    "--good and --bad swapped? --good is the older end (with --find fixed too)"
                )
            raise RefError(f"good {good[:12]} is not an ancestor of bad {bad[:12]} (they are on different branches)")
        line = self.repo.git.rev_list("--first-parent", "--reverse", f"{good}..{bad}").split()
        # good must sit on bad's first-parent line, else the range is not a line to bisect.
        parent = self.repo.git.rev_parse(f"{line[0]}^1") if line else None
        if parent != good:
            raise RefError(f"good {good[:12]} is an ancestor of bad {bad[:12]} but not on its first-parent line")
        return [good, *line]

    def changes(self, good: str, bad: str) -> dict[str, list[Change]]:
        """Each first-parent commit after good up to bad, with the paths it changed against its
        first parent (a merge too; renames as a delete and an add; submodules marked)."""
        for sha in (good, bad):
            if not _SHA.match(sha):
                raise RefError(f"changes want full shas, got {sha!r}")
        try:
            out = self.repo.git.log(
                "--first-parent",
                "--diff-merges=first-parent",
                "--raw",
                "--no-renames",
                "--no-abbrev",
                "-z",
                "--format=%x01%H",
                f"{good}..{bad}",
                strip_newline_in_stdout=False,
            )  # -z: paths verbatim, never quoted
        except git.GitCommandError as exc:
            raise GitError(f"cannot list the changes {good[:12]}..{bad[:12]}: {_git_message(exc)}") from None
        found: dict[str, list[Change]] = {}
        for chunk in out.split("\x01")[1:]:
            parts = chunk.split("\0")
            sha, rest = parts[0].strip(), parts[1:]
            changed: list[Change] = []
            for meta, path in zip(rest[::2], rest[1::2]):
                fields = meta.strip().lstrip(":").split()
                if len(fields) < 5:
                    continue
                changed.append(Change(path, fields[4][0], "160000" in (fields[0], fields[1])))
            found[sha] = changed
        return found

    def info(self, sha: str) -> CommitInfo:
        commit = self.repo.commit(sha)
        return CommitInfo(
            sha=commit.hexsha,
            subject=commit.summary if isinstance(commit.summary, str) else commit.summary.decode(),
            author=commit.author.name or "",
            date=commit.committed_datetime.isoformat(),
        )

    # -- checkout -----------------------------------------------------------------------------
    def checkout(self, sha: str, *, clean: bool = True) -> Path:
        """Put the bot's work tree at `sha` (only changed files are rewritten: builds stay
        incremental). `clean`: every file git does not track (a build command's outputs) is
        removed too; without it they stay for the next build."""
        if not _SHA.match(sha):
            raise RefError(f"checkout wants a full sha, got {sha!r}")
        try:
            self.repo.git.checkout("--force", "--detach", "--quiet", sha)
            if clean:
                self.repo.git.clean("-ffdxq")
        except git.GitCommandError as exc:
            raise GitError(f"cannot check out {sha[:12]} in {self.root}: {_git_message(exc)}") from None
        return self.root


class ExportRefused(GitError):
    """A tree larger than the box may take (files or bytes): refused before it is written."""


@dataclass(frozen=True)
class ExportBudget:
    """What one exported tree may hold (untrusted.max_files, untrusted.disk_mb)."""

    max_files: int
    max_bytes: int

    def check(self, files: int, size: int, sha: str) -> None:
        if files > self.max_files:
            raise ExportRefused(
                f"refused: the tree of {sha[:12]} has {files:,} files, more than untrusted.max_files "
                f"({self.max_files:,}) allows"
            )
        if size > self.max_bytes:
            raise ExportRefused(
                f"refused: the tree of {sha[:12]} holds {_mb(size)}, more than untrusted.disk_mb "
                f"({_mb(self.max_bytes)}) allows"
            )

    def members(self, tar: tarfile.TarFile, sha: str) -> Iterator[tarfile.TarInfo]:
        """The archive's members, stopped (ExportRefused) once they pass the budget."""
        files = size = 0
        for member in tar:
            files += 0 if member.isdir() else 1  # as ls-tree counts: directories are not files
            size += max(0, member.size)
            self.check(files, size, sha)
            yield member


def _mb(size: int) -> str:
    return f"{size / (1 << 20):,.0f} MB"


class Export:
    """What untrusted code builds from: each checkout is a fresh `git archive` of the commit
    from the bot's clone into `root` (in the sandbox's box), so it never sees a `.git`; a tree
    past `budget` is refused before anything is written."""

    def __init__(
        self,
        clone: Workspace,
        root: Path,
        after: Callable[[Path], None] = lambda _: None,
        budget: ExportBudget | None = None,
    ):
        self.clone, self.root, self.after, self.budget = clone, root, after, budget

    def checkout(self, sha: str, *, clean: bool = True) -> Path:
        """A fresh export of `sha` (so clean whatever `clean` says: nothing of another build stays)."""
        tree = self.clone.export(sha, self.root, self.budget)
        self.after(tree)  # e.g. handed over to the sandbox's uid
        return tree

    def export(self, sha: str, dest: Path) -> Path:
        """The tree of `sha` in `dest`, within the budget (kept as exported: not handed over)."""
        return self.clone.export(sha, dest, self.budget)

    def info(self, sha: str) -> CommitInfo:
        return self.clone.info(sha)

    def resolve(self, ref: str) -> str:
        return self.clone.resolve(ref)


def _rev_parse(repo: git.Repo, ref: str) -> str | None:
    """The commit `ref` names in `repo`, or None. A repository git refuses to read (another
    user's) is an error, not "no such ref": the answer would silently come from elsewhere."""
    try:
        out = repo.git.rev_parse("--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}")
    except git.GitCommandError as exc:
        if "dubious ownership" in str(exc.stderr):
            raise GitError(f"cannot read {repo.working_dir}: {_git_message(exc)}") from None
        return None
    return out.strip() if _SHA.match(out.strip()) else None


# git's fatal lines that only follow the one that says why
_GENERIC = ("could not read from remote repository", "the remote end hung up unexpectedly")


def _containing(repo: git.Repo, sha: str, namespace: str) -> list[tuple[str, str]]:
    """(ref name, the sha it points to) of each ref under `namespace` with `sha` in its history."""
    try:
        out = repo.git.for_each_ref("--format=%(refname) %(objectname)", f"--contains={sha}", namespace)
    except git.GitCommandError:
        return []
    return [tuple(line.rsplit(" ", 1)) for line in out.splitlines() if " " in line]  # type: ignore[misc]


def _contained(repo: git.Repo, sha: str, namespaces: list[str]) -> bool:
    """Whether any ref under `namespaces` has `sha` in its history."""
    try:
        return bool(repo.git.for_each_ref("--count=1", "--format=%(refname)", f"--contains={sha}", *namespaces))
    except git.GitCommandError:
        return False


def _git_message(exc: Exception) -> str:
    """git's reason, in one line: the first fatal/error line that says something (with the
    safe.directory command when git refused a repository owned by another user)."""
    text = str(getattr(exc, "stderr", "") or "").strip()
    if text.startswith("stderr:"):
        text = text.removeprefix("stderr:").strip()
        if len(text) >= 2 and text[0] == text[-1] == "'":
            text = text[1:-1]
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if not lines:
        if isinstance(exc, git.NoSuchPathError):
            return f"no such directory: {exc}"
        if isinstance(exc, git.InvalidGitRepositoryError):
            return f"not a git repository: {exc}"
        status = getattr(exc, "status", None)
        return f"git exited with status {status} and said nothing" if status is not None else str(exc)
    said = [ln for ln in lines if ln.lower().startswith(("fatal:", "error:"))]
    telling = [ln for ln in said if not any(g in ln.lower() for g in _GENERIC)]
    if telling:
        line = telling[0]
    else:  # e.g. ssh's "Permission denied (publickey)." before git's generic fatal line
        first = lines.index(said[0]) if said else len(lines)
        before = [ln for ln in lines[:first] if not ln.lower().startswith(("cloning into", "hint:"))]
        line = before[-1] if before else lines[-1]
    line = re.sub(r"^(fatal|error):\s*", "", line, flags=re.IGNORECASE)
    if "dubious ownership" in line:
        hinted = next((ln.split("safe.directory", 1)[1].strip() for ln in lines if "--add safe.directory" in ln), None)
        named = re.findall(r"'([^']+)'", line)
        line = f"{line}; {safe_directory_hint(hinted or (named[0] if named else ''))}"
    return line


def safe_directory_hint(where: str) -> str:
    """What to run when git refuses a repository owned by another user. A clone reads the
    source through its `.git` directory and bisectbot also asks the work tree itself, and git
    matches safe.directory against each exactly, so both are named."""
    path = Path(where)
    dirs = [path.parent, path] if path.name == ".git" else [path, path / ".git"] if (path / ".git").is_dir() else [path]
    commands = " && ".join(f"git config --global --add safe.directory {shlex.quote(str(d))}" for d in dirs)
    return (
        f"if you trust it: {commands} (in a container, a bind-mounted checkout belongs to the host's "
        'user: run the container as that user, e.g. docker run --user "$(id -u):$(id -g)")'
    )


def uncommitted_changes(source: str) -> list[str]:
    """Tracked files of a local checkout whose content differs from its HEAD (staged or not).
    The bot clones committed history only, so such edits are never built; the caller warns.
    Untracked files are left out (build directories would drown the rest). Empty for a URL,
    a bare repository, or one git cannot read (the clone then says why)."""
    if not os.path.isabs(source) or not os.path.isdir(source):
        return []
    try:
        out = open_repo(source).git.status(
            "--porcelain=v1", "-z", "--untracked-files=no", strip_newline_in_stdout=False
        )
    except (git.GitCommandError, git.InvalidGitRepositoryError, git.NoSuchPathError, OSError):
        return []
    paths: list[str] = []
    entries = iter(out.split("\0"))
    for entry in entries:
        if len(entry) < 4:
            continue
        paths.append(entry[3:])
        if "R" in entry[:2] or "C" in entry[:2]:
            next(entries, None)  # a rename's or copy's source path follows: one change
    return paths


def _clone_of(root: Path) -> str | None:
    """The repository a clone at `root` was made from (its origin), or None."""
    if not (root / ".git").exists():
        return None
    try:
        return str(open_repo(root).git.config("--get", "remote.origin.url"))
    except (git.GitCommandError, git.InvalidGitRepositoryError):
        return None


def same_project(root: Path, source: str) -> bool:
    """Whether the clone at `root` (if any) is of the project `source` names: no clone, the same
    spelling, or a root commit in common."""
    origin = _clone_of(root)
    if origin is None or _same_source(origin, source):
        return True
    repo = open_repo(root)
    ours = _roots(repo, "--all")
    return not ours or bool(ours & _source_roots(repo, source))


def _roots(repo: git.Repo, *revs: str) -> set[str]:
    """The root commits (no parent) reachable from `revs`."""
    return set(str(repo.git.rev_list("--max-parents=0", *revs)).split()) if revs else set()


def _source_roots(repo: git.Repo, source: str) -> set[str]:
    """The root commits of `source`'s branches: read in place when it is a local repository,
    else fetched into a probe namespace of the clone `repo` and dropped again."""
    if Path(source).exists():
        return _roots(open_repo(source), "--all")
    repo.git.fetch("--quiet", "--no-tags", source, "+refs/heads/*:refs/bisectbot-probe/*")
    probe = str(repo.git.for_each_ref("--format=%(refname)", "refs/bisectbot-probe")).split()
    try:
        return _roots(repo, *probe)
    finally:
        for ref in probe:
            repo.git.update_ref("-d", ref)


def _same_source(a: str, b: str) -> bool:
    """Whether two spellings name one repository: a local path by where it really is, a URL
    without a trailing slash or `.git`."""

    def norm(s: str) -> str:
        if os.path.isabs(s):
            return os.path.realpath(s)
        s = s.rstrip("/")
        return s[: -len(".git")] if s.endswith(".git") else s

    return norm(a) == norm(b)


def _local_problem(source: str) -> str | None:
    """Why a local path cannot be cloned, when git's answer would not say it plainly (it calls a
    missing directory, a plain directory and an unreadable one alike "does not exist")."""
    if not os.path.isabs(source):
        return None  # a URL
    try:
        info = os.stat(source)
    except FileNotFoundError:
        return "no such file or directory"
    except OSError as exc:
        return exc.strerror or str(exc)
    if not stat.S_ISDIR(info.st_mode):
        return None  # a bundle, perhaps: git says
    try:
        names = set(os.listdir(source))
    except OSError as exc:
        return f"cannot read it: {exc.strerror}"
    if ".git" not in names and not {"HEAD", "objects", "refs"} <= names:
        return "not a git repository (no .git in it)"
    return None
