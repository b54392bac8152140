"""Pull request refs (pure): `pull/<N>/head` names the head of pull request N, untrusted code.

That exact form (N a positive number written without leading zeros) is the only way a pull
request is named: its head is fetched from the source repository as `refs/pull/<N>/head` into
the clone's own `refs/bisectbot/pull/<N>`, and built and run only in the sandbox
(`processes.procs.Sandbox`). Every other name in those namespaces (`pull/7/merge`,
`refs/pull/7/head`, `pull/7/head~1`, `bisectbot/pull/7`) is refused, so no spelling of a pull
request's commits reaches a trusted build.
"""

from __future__ import annotations

import re

PULL_HEAD = re.compile(r"pull/([1-9][0-9]{0,9})/head")
_PULL_NAMESPACE = re.compile(r"(refs/)?(pull|bisectbot)/", re.IGNORECASE)
PULL_FORM = "pull/<N>/head (N a positive number)"


def pull_number(ref: str) -> int | None:
    """N when `ref` is exactly `pull/<N>/head`, else None."""
    m = PULL_HEAD.fullmatch(ref)
    return int(m.group(1)) if m else None


def pull_ref_problem(ref: str) -> str | None:
    """Why `ref` is refused as a pull request ref (another spelling in the pull or bisectbot
    namespace), or None: it is `pull/<N>/head` or names no pull request at all."""
    if pull_number(ref) is None and _PULL_NAMESPACE.match(ref):
        return f"pull request refs are accepted only as {PULL_FORM}"
    return None


def source_pull_ref(number: int) -> str:
    """Where GitHub (and a test's repository) keeps a pull request's head."""
    return f"refs/pull/{number}/head"


def local_pull_ref(number: int) -> str:
    """Where the bot's clone keeps the fetched head (outside refs/heads and refs/remotes)."""
    return f"refs/bisectbot/pull/{number}"
