"""Events: what the pipeline tells its observers, typed; cancellation, the other way.

The pipeline never formats progress for a particular screen and never calls GitHub: it emits
events, and each observer takes what it needs (the terminal prints `text()`, the job records
verdicts, the GitHub comment tracks the phase from the event types). A `/cancel` reaches the
pipeline as a `CancelToken` that it checks between verdicts and between runs, so a job stops
at a point where everything finished is stored.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, ClassVar, Iterator

from bisectbot.core.ends import not_deterministic
from bisectbot.records.commits import CommitVerdict
from bisectbot.statistics.two_sample import SeedForSeed


@dataclass(frozen=True)
class Event:
    # A transient event is a status update (a terminal overwrites it); the others are lines worth keeping.
    transient: ClassVar[bool] = False

    def text(self) -> str:
        raise NotImplementedError


@dataclass(frozen=True)
class Syncing(Event):
    source: str

    def text(self) -> str:
        return f"syncing {self.source} …"


@dataclass(frozen=True)
class Note(Event):
    """A line a command says as it goes, e.g. what `init` proposes and the defaults it keeps."""

    line: str

    def text(self) -> str:
        return self.line


@dataclass(frozen=True)
class CommitTestStarted(Event):
    ref: str
    sha: str

    def text(self) -> str:
        return f"testing {self.ref} = {self.sha[:12]}"


@dataclass(frozen=True)
class BisectStarted(Event):
    commits: int
    good: str
    bad: str
    find: str
    level: float
    steps: int  # ⌈log2(commits − 1)⌉: how many search steps plain bisection needs

    def text(self) -> str:
        return (
            f"bisecting {self.commits} commits {self.good[:12]}..{self.bad[:12]} "
            f"(find first {self.find}; per-step error ≤ {self.level:.1e})"
        )


@dataclass(frozen=True)
class LineNarrowed(Event):
    kept: int
    total: int
    known: bool  # the inputs were known at both ends

    def text(self) -> str:
        unknown = "" if self.known else " (inputs unknown at an end: no dependency files)"
        return (
            f"searching {self.kept} of {self.total} commits: {self.total - self.kept} cannot change the binary{unknown}"
        )


@dataclass(frozen=True)
class WorkerDone(Event):
    sha: str
    worker: str
    verdict: str
    built: bool

    def text(self) -> str:
        how = "built and tested" if self.built else "tested"
        return f"  {how} {self.sha[:12]} on worker {self.worker}: {self.verdict.upper()}"


@dataclass(frozen=True)
class RoundStarted(Event):
    round: int
    shas: tuple[str, ...]

    def text(self) -> str:
        return f"[round {self.round}] {len(self.shas)} commits at once: " + ", ".join(s[:12] for s in self.shas)


@dataclass(frozen=True)
class EndpointStarted(Event):
    name: str  # good | bad, as the user called the ref
    ref: str
    sha: str

    def text(self) -> str:
        return f"[endpoint] testing {self.name} {self.ref} = {self.sha[:12]}"


@dataclass(frozen=True)
class Answered(Event):
    """The search and its confirmation are over: the answer, before any cross-check arm runs."""

    status: str  # BisectStatus value
    message: str
    arms: tuple[str, ...]  # the cross-check arms still to run
    at: tuple[str, ...]  # where they run (roles: culprit, parent, or the ends)

    def text(self) -> str:
        line = f"[answer] {self.status}: {self.message}"
        if self.arms:
            line += f"; now the cross-check arm(s) {', '.join(self.arms)} at the {' and the '.join(self.at)}"
        return line


@dataclass(frozen=True)
class ArmStarted(Event):
    arm: str
    sha: str

    def text(self) -> str:
        return f"[arm {self.arm}] testing {self.sha[:12]}"


@dataclass(frozen=True)
class StrategyChosen(Event):
    strategy: str
    why: str  # the forecast that chose it (core.policy.Choice.text), or "as asked"

    def text(self) -> str:
        return (
            f"[strategy] {self.why}"
            if self.why.startswith(self.strategy)
            else f"[strategy] {self.strategy} steps: {self.why}"
        )


@dataclass(frozen=True)
class StepStarted(Event):
    number: int
    estimate: int
    sha: str
    position: int
    last: int
    halved_nothing: int = 0  # steps so far that placed nothing (not built or run): why the estimate is passed

    def text(self) -> str:
        if self.number <= self.estimate:
            of = f"/~{self.estimate}"
        else:
            why = (
                f": {self.halved_nothing} step{'s' if self.halved_nothing > 1 else ''} at a commit that could not "
                "be built or run halved nothing"
                if self.halved_nothing
                else ""
            )
            of = f", past the ~{self.estimate} estimated{why}"
        return f"[step {self.number}{of}] {self.sha[:12]} (position {self.position} of {self.last})"


@dataclass(frozen=True)
class StickyVisit(Event):
    sha: str
    position: int
    last: int

    def text(self) -> str:
        return f"[sticky] {self.sha[:12]} (position {self.position} of {self.last})"


@dataclass(frozen=True)
class StickySkip(Event):
    sha: str
    reason: str

    def text(self) -> str:
        return f"[sticky] skipping {self.sha[:12]}: {self.reason}"


@dataclass(frozen=True)
class Confirming(Event):
    sha: str
    parent: str = ""

    def text(self) -> str:
        parent = f" and its parent {self.parent[:12]}" if self.parent else " and its parent"
        return f"[confirm] {self.sha[:12]}{parent} on fresh seeds: did the distribution change there?"


@dataclass(frozen=True)
class WalkingBack(Event):
    """A confirmation ruled the boundary out: the search goes on in a narrower range."""

    why: str
    lo: str
    hi: str
    commits: int

    def text(self) -> str:
        return (
            f"[walk back] {self.why}; searching on between {self.lo[:12]} and {self.hi[:12]} "
            f"({self.commits} commits, what is known kept)"
        )


@dataclass(frozen=True)
class Building(Event):
    sha: str
    targets: tuple[str, ...]

    def text(self) -> str:
        return f"  building {', '.join(self.targets)} at {self.sha[:12]} …"


@dataclass(frozen=True)
class BuildPhase(Event):
    transient: ClassVar[bool] = True
    sha: str
    phase: str  # configure | build

    def text(self) -> str:
        return f"  {self.phase} {self.sha[:12]}"


@dataclass(frozen=True)
class Scanned(Event):
    """A commit's compile inputs found without building it (a broken end tested last)."""

    sha: str
    files: int | None  # None: the scan failed (the commit is built instead)
    seconds: float

    def text(self) -> str:
        if self.files is None:
            return f"[build] {self.sha[:12]} inputs could not be scanned ({self.seconds:.1f} s): building it instead"
        return (
            f"[build] {self.sha[:12]} inputs scanned without building: {self.files} files in {self.seconds:.1f} s "
            f"(it is tested only if the answer rests on it)"
        )


@dataclass(frozen=True)
class Built(Event):
    sha: str
    status: str
    seconds: float
    reason: str
    variant: int = 0
    notes: str = ""
    log_command: str = ""  # a failed build: the command that prints its whole log

    def text(self) -> str:
        which = f" (build variant {self.variant})" if self.variant else ""
        notes = f"; {self.notes}" if self.notes else ""
        if self.status == "ok":
            return f"  built {self.sha[:12]} in {self.seconds:.1f} s{which}{notes}"
        log = f"; the whole log: {self.log_command}" if self.log_command else ""
        return f"  build {self.status}: {self.reason}{notes}{log}"


@dataclass(frozen=True)
class VariantChosen(Event):
    sha: str
    index: int

    def text(self) -> str:
        return f"  {self.sha[:12]} uses command variant {self.index}"


@dataclass(frozen=True)
class VariantFailed(Event):
    sha: str
    variant: int
    reason: str
    next: int | None

    def text(self) -> str:
        then = f"trying variant {self.next}" if self.next is not None else "no other variant fits"
        return f"  {self.sha[:12]}: command variant {self.variant} fails at run time ({self.reason}); {then}"


@dataclass(frozen=True)
class BlockOfSkips(Event):
    first: str
    last: str
    commits: int
    signature: str

    def text(self) -> str:
        return f"[skip] {self.commits} commits {self.first[:12]} … {self.last[:12]} fail the same way: {self.signature}"


@dataclass(frozen=True)
class Reran(Event):
    """The working end's first seeds, run a second time, printed otherwise on some of them."""

    end: str
    sha: str
    seeds: int
    differ: int

    def text(self) -> str:
        return f"[reruns] {not_deterministic(self.end, self.sha, SeedForSeed(self.seeds - self.differ, self.seeds))}"


@dataclass(frozen=True)
class ControlStarted(Event):
    sha: str
    runs: int
    start: int = 0  # runs of the control before these (it grows while tests need it)
    fresh: bool = False  # on a test's fresh seeds (its runs are paired with these, seed for seed)

    def text(self) -> str:
        if self.fresh:
            return f"  control: {self.runs} runs at {self.sha[:12]} on the seeds of a test on fresh seeds"
        if self.start:
            return f"  control sample: {self.runs} more runs at {self.sha[:12]} ({self.start + self.runs} in all)"
        return f"  control sample: {self.runs} runs at {self.sha[:12]}"


@dataclass(frozen=True)
class RunsProgress(Event):
    transient: ClassVar[bool] = True
    sha: str
    consumed: int
    budget: int
    counts: str  # 'a=3 c=12'

    def text(self) -> str:
        return f"  {self.sha[:12]} {self.consumed} of at most {self.budget} runs: {self.counts}"


@dataclass(frozen=True)
class VerdictReached(Event):
    verdict: CommitVerdict

    def text(self) -> str:
        v = self.verdict
        arm = "" if v.arm == "main" else f" [{v.arm}]"
        return f"  {v.role}{arm} {v.sha[:12]}: {v.verdict.value.upper()} after {v.runs} runs — {v.reason}"


@dataclass(frozen=True)
class EstimateReady(Event):
    """What a bisect will cost, before it starts (core.estimate)."""

    line: str

    def text(self) -> str:
        return self.line


@dataclass(frozen=True)
class BudgetReached(Event):
    """--max-builds or --deadline ended the bisect between steps; the same command resumes it."""

    reason: str

    def text(self) -> str:
        return f"[stopped] {self.reason}"


@dataclass(frozen=True)
class StorageTrimmed(Event):
    """The state directory's size caps were applied (jobs.gc) after a job."""

    summary: str

    def text(self) -> str:
        return f"[gc] {self.summary}"


Observer = Callable[[Event], None]


class Cancelled(Exception):
    """The job was asked to stop (`/cancel`); everything finished is stored."""

    def __init__(self, who: str | None):
        super().__init__(f"cancelled by {who}" if who else "cancelled")
        self.who = who


class CancelToken:
    """Set from any thread (a webhook, a poll for `/cancel`); checked by the pipeline."""

    def __init__(self) -> None:
        self._who: str | None = None
        self._set = threading.Event()
        self._lock = threading.Lock()

    def cancel(self, who: str | None) -> None:
        with self._lock:
            if not self._set.is_set():
                self._who = who
                self._set.set()

    def check(self) -> None:
        """Raise `Cancelled` if a stop was asked for."""
        if self._set.is_set():
            raise Cancelled(self._who)


class Events:
    """The channel from the pipeline to its observers, and the cancel token it checks."""

    def __init__(self, *observers: Observer, cancel: CancelToken | None = None):
        self._observers: list[Observer] = list(observers)
        self.cancel = cancel or CancelToken()

    def emit(self, event: Event) -> None:
        for observe in list(self._observers):
            observe(event)

    def check(self) -> None:
        self.cancel.check()

    @contextmanager
    def observing(self, observer: Observer) -> Iterator[None]:
        """Add an observer for the duration of a block (a job's own recorder)."""
        self._observers.append(observer)
        try:
            yield
        finally:
            self._observers.remove(observer)
