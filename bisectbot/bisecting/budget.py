"""A bisect's budget: --max-builds and --deadline, checked between steps.

A long bisect on a shared machine (or a CI job with a time limit) must be able to stop at a
point where everything finished is stored, say what it knows so far (the range left), and pick
up there when the same command runs again. The checks sit where `/cancel` stops a job: before a
commit is built (Builder.guard) and before each verdict (Bisection); a verdict under way is
finished, so the deadline may be passed by at most one commit's runs. `BudgetSpent` is caught
by the bisect stage and turned into a report with status `stopped`, never a failed job.

Both limits are per invocation: `--max-builds 3` builds at most three commits now, and the same
command again builds up to three more (everything before is replayed from the state).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from bisectbot.core.estimate import format_duration


class BudgetSpent(Exception):
    """A limit of this invocation was reached; `by` is `max-builds` or `deadline`."""

    def __init__(self, why: str, by: str):
        super().__init__(why)
        self.by = by


@dataclass(frozen=True)
class BudgetLimits:
    """The limits asked for (None: none)."""

    max_builds: int | None = None
    deadline: float | None = None  # seconds from the start of the invocation
    deadline_text: str = ""  # as the user wrote it, for messages
    since: float | None = None  # time.monotonic() when the command started (default: the budget's creation)

    @property
    def any(self) -> bool:
        return self.max_builds is not None or self.deadline is not None


class Budget:
    """Checks `BudgetLimits` against the builds this process made (`builds`) and the time since it
    started; raises BudgetSpent when the next step would go beyond them."""

    def __init__(
        self,
        limits: BudgetLimits,
        builds: Callable[[], int],
        *,
        clock: Callable[[], float] = time.monotonic,
        started: float | None = None,
    ):
        self.limits, self.builds, self.clock = limits, builds, clock
        self.started = started if started is not None else limits.since if limits.since is not None else clock()

    def before_build(self) -> None:
        """Called when a commit is about to be built (nothing stored can be reused)."""
        n = self.limits.max_builds
        if n is not None and self.builds() >= n:
            raise BudgetSpent(f"--max-builds {n} reached ({self.builds()} commits built by this run)", "max-builds")
        self.before_step()

    def before_step(self) -> None:
        """Called before each verdict."""
        limit = self.limits.deadline
        if limit is not None and self.clock() - self.started >= limit:
            spent = format_duration(self.clock() - self.started)
            raise BudgetSpent(
                f"--deadline {self.limits.deadline_text or format_duration(limit)} reached (ran {spent})", "deadline"
            )
