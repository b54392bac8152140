"""One exception hierarchy, so the CLI can print a one-line message a user can act on.

Every error says *what* went wrong and *where* (file and key, ref, commit, seed, URL).
"""

from __future__ import annotations

from bisectbot.inert import one_line

__all__ = ["one_line"]  # how every error is shown: one line, its control characters visible


class BisectbotError(Exception):
    """Base for every error that is the user's input or environment, not a bug."""

    exit_code = 2


class ConfigError(BisectbotError):
    """The YAML config is malformed or invalid (names the file and key path)."""


class RefError(BisectbotError):
    """A git ref does not resolve, or good is not an ancestor of bad.

    `unresolved` names the ref when the problem is that it does not resolve."""

    def __init__(self, message: str, *, unresolved: str | None = None):
        super().__init__(message)
        self.unresolved = unresolved


class GitError(BisectbotError):
    """A git operation (clone, fetch, checkout) failed."""


class EndpointError(BisectbotError):
    """The given good endpoint does not test good, or the bad endpoint does not test bad."""

    exit_code = 4


class GitHubError(BisectbotError):
    """The GitHub API refused a call or stayed unreachable after retries.

    `status` is the HTTP status of the last answer (None without one); `retry_after` the
    seconds GitHub asked to wait when that was longer than the call could (come back then)."""

    exit_code = 5
    status: int | None = None
    retry_after: float | None = None


class StateError(BisectbotError):
    """The state directory or database cannot be used."""


class ClusterError(BisectbotError):
    """The Dask cluster cannot be used as asked (unreachable, no workers, a worker with another
    compiler than the coordinator's)."""


class ToolError(BisectbotError):
    """A program the command needs (cmake, make, a compiler, git) is not installed: named with the
    package that provides it, before anything is cloned or built (`bisectbot doctor` lists all)."""
