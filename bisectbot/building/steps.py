"""One build's steps: each a process whose output goes to the build's log, within what is left
of the build's timeout, and what an attempt at one variant came to.

Why apart: a cmake build (`building.builder`) and a build command (`building.command`) take the
same steps the same way: one timeout across configure, build and a retry; the first error of a
failed step as its reason; the build directory's lock held by every child.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from bisectbot.building.cmake import first_error
from bisectbot.processes.procs import run
from bisectbot.processes.sandbox import Sandbox


@dataclass(frozen=True)
class Attempt:
    status: str  # ok | unsupported | failed | timeout | no-binary | scanned | unscanned
    reason: str
    seconds: float
    binaries: dict[str, str]
    inputs: tuple[str, ...] | None = None
    hashes: dict[str, str] = field(default_factory=dict)


class Budget:
    """What is left of the build timeout, across variants and retries."""

    def __init__(self, total: float):
        self.total, self.used = total, 0.0

    @property
    def left(self) -> float:
        return self.total - self.used


def step(
    argv: list[str],
    cwd: Path,
    env: dict[str, str],
    log: Path,
    budget: Budget,
    hold: int,
    sandbox: Sandbox | None = None,
    what: str = "",
) -> tuple[str, str] | None:
    """Run one build step into the log; None when it succeeded, else (status, why). `what`
    names the step in the reason where the caller does not."""
    note(log, f"$ {' '.join(argv)}")
    named = f"{what} " if what else ""
    if budget.left <= 0:
        return "timeout", f"{named}did not start: the build timeout of {budget.total:g} s was used up"
    start = log.stat().st_size
    res = run(argv, cwd=cwd, env=env, timeout=budget.left, log=log, pass_fds=(hold,), sandbox=sandbox)
    budget.used += res.seconds
    if res.timed_out:
        return "timeout", f"{named}exceeded the build timeout of {budget.total:g} s"
    if res.stopped:
        return "failed", f"{named}{res.stopped}: {first_error(log, start)}"
    if res.returncode != 0:
        return "failed", f"{named}failed (exit {res.returncode}): {first_error(log, start)}"
    return None


def note(log: Path, line: str) -> None:
    with open(log, "a") as fh:
        fh.write(line + "\n")
