"""Records (pure data): a build, a run, one commit's tally of runs, and its verdict.

Every stage hands these on; storage writes them, reports carry them. `CommitVerdict.of` is the
only way a verdict is made, whether the commit was tested, skipped or judged by the sticky
search, so every verdict in a report has the same shape.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Mapping, Sequence

from bisectbot.statistics import skips
from bisectbot.statistics.outcome import Verdict
from bisectbot.statistics.stats import FAILED, OTHER


@dataclass(frozen=True)
class BuildRecord:
    sha: str
    status: str  # ok | failed | timeout | no-binary | unsupported | checkout-failed
    binaries: dict[str, str]  # placeholder -> kept path
    log: str  # path of the build log
    seconds: float
    reason: str = ""
    variant: int = 0  # which build variant was built (or tried last)
    notes: str = ""  # e.g. built in a clean directory after a failure in the reused one
    inputs: tuple[str, ...] | None = None  # repository files the targets were compiled from (None: unknown)
    host: str = ""  # the machine that built it
    compiler: str = ""  # and its toolchain (buildkeys.toolchain_identity)
    hashes: dict[str, str] = field(default_factory=dict)  # kept path -> sha256 when it was built

    @property
    def ok(self) -> bool:
        return self.status == "ok"


# The statuses of runs that ran to the end but whose output the parse could not read (after
# their reruns, for output cut short): told apart from runs that failed (crash, timeout,
# output-too-large) wherever runs are counted or reported, as they call for another fix (the
# parse section, not the program).
UNREADABLE = frozenset({"unparsable", "incomplete"})


@dataclass(frozen=True)
class RunRecord:
    seed: int
    status: str  # ok | incomplete | crash | timeout | unparsable | output-too-large
    tokens: tuple[str, ...] | None
    exit_code: int | None
    seconds: float
    attempts: int = 1  # 1 + reruns of a cut-short output
    variant: int = 0
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def unreadable(self) -> bool:
        """It ran to the end, but the parse could not read its output (UNREADABLE)."""
        return self.status in UNREADABLE


@dataclass
class Tally:
    """One commit's runs, counted in seed order: categories, failures, reruns, seed span."""

    names: tuple[str, ...]
    counts: list[int] = field(init=False)
    failures: Counter[str] = field(default_factory=Counter)
    consumed: int = 0  # runs fed, failures included
    retried: int = 0  # reruns of cut-short outputs
    first: int | None = None  # first and last seed fed
    last: int | None = None
    last_category: int | None = None  # category of the last run (None: failed or not counted)
    last_failure: RunRecord | None = None
    last_unreadable: RunRecord | None = None  # the last run whose output the parse could not read
    last_failed: RunRecord | None = None  # the last run that failed (crash, timeout, output-too-large)
    others: Counter[str] = field(default_factory=Counter)  # outcomes the reference lacks, by their text
    values: list[float] = field(default_factory=list)  # the runs' numbers (statistic.kind mean or time)
    no_number: int = 0  # runs that printed `nan` or `inf` where the number goes (no observation)

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.names)

    def add(self, rec: RunRecord, category: int | None, outcome: str | None = None, value: float | None = None) -> None:
        """Count one run; `category` is its index in `names` (None: not counted, e.g. a failed
        run when failures are not an outcome); `outcome`, the run's outcome text, is kept when
        the category is OTHER (what a misspelt reference name looks like); `value`, its number
        for a numeric statistic. A failed run is also counted among `failures`, by status,
        whether or not it is a category (FAILED)."""
        if value is not None:
            self.values.append(value)
        self.consumed += 1
        self.first = rec.seed if self.first is None else self.first
        self.last = rec.seed
        self.retried += rec.attempts - 1
        self.last_category = category
        if not rec.ok:
            self.failures[rec.status] += 1
            self.last_failure = rec
            if rec.unreadable:
                self.last_unreadable = rec
            else:
                self.last_failed = rec
        if category is not None:
            self.counts[category] += 1
            if rec.ok and outcome is not None and self.names[category] == OTHER:
                self.others[outcome] += 1

    @property
    def mostly_failed(self) -> bool:
        """Evidence that more than half of the commit's runs fail (a sequential test at level
        skips.SKIP_LEVEL, so the evidence needed grows as the failure rate nears one half): the
        commit is skipped. Every run failing: 7 runs; 10% of runs failing: never, in practice.
        Never when failed runs are an outcome (FAILED among the categories): they are data,
        and a commit that mostly fails tests BAD."""
        if FAILED in self.names:
            return False
        failed = sum(self.failures.values())
        return failed > 0 and skips.mostly_failing(failed, self.consumed - failed)

    def failure_signature(self, variant: int | None) -> str:
        """What the failures look like, the same at every commit that fails the same way: for
        output the parse cannot read, the key it fails (not the output, which differs from
        commit to commit); for failed runs, how the last one ended."""
        status = self.failures.most_common(1)[0][0] if self.failures else "none"
        which = f", command variant {variant}" if variant is not None else ""
        if status in UNREADABLE and (last := self.last_unreadable) is not None:
            _, said, why = last.detail.partition(" does not match parse ")
            return masked(f"runs do not match parse {why if said else '(' + (last.detail or status) + ')'}{which}")
        last = self.last_failure
        detail = (last.detail or last.status) if last is not None else ""
        return masked(f"runs {status}: {detail}{which}")

    def failure_reason(self, variant: int | None = None) -> str:
        """One line: how many runs failed or could not be read and how (by status), and the
        last one's reason of each kind: for a failed run its signal or exit status and the
        program's error line; for a run the parse could not read, its output quoted and the key
        it fails. With `variant`, the command variant they ran."""
        unread = sum(n for status, n in self.failures.items() if status in UNREADABLE)
        failed = sum(self.failures.values()) - unread
        what = " or ".join(w for w, n in (("fail", failed), ("do not match parse", unread)) if n) or "fail"
        parts = ", ".join(f"{n} {status}" for status, n in self.failures.most_common())
        which = f"; command variant {variant}" if variant is not None else ""
        return f"runs mostly {what} ({parts} of {self.consumed}); {self.last_reasons()}{which}"

    def last_reasons(self) -> str:
        """'last: …' (one kind of failure), or 'last failed: …; last unreadable: …' (both)."""
        lasts = [
            (f"last {kind}", rec) for kind, rec in (("failed", self.last_failed), ("unreadable", self.last_unreadable))
        ]
        shown = [(label, rec.detail or rec.status) for label, rec in lasts if rec is not None]
        if len(shown) == 1:
            return f"last: {shown[0][1]}"
        return "; ".join(f"{label}: {detail}" for label, detail in shown) or "last: none"

    def by_name(self) -> dict[str, int]:
        return dict(zip(self.names, self.counts))

    def short(self) -> str:
        """'a=3 c=12': the nonzero counts, for progress lines ('mean 0.243 of 37' for numbers)."""
        if self.values:
            return f"mean {sum(self.values) / len(self.values):.4g} of {len(self.values)}"
        return " ".join(f"{n}={c}" for n, c in zip(self.names, self.counts) if c)

    def numbers(self, judged: Mapping[str, float] | None = None) -> dict[str, float] | None:
        """The runs' numbers summarised for a verdict (`CommitVerdict.values`), with what its test
        made of them (`judged`: θ's estimate, the interval its runs leave, and the runs a normal
        approximation waits for: statistics.means); None when the statistic is not a number."""
        if not self.values:
            return None
        v = self.values
        mean = sum(v) / len(v)
        sd = (sum((x - mean) ** 2 for x in v) / (len(v) - 1)) ** 0.5 if len(v) > 1 else 0.0
        out = {"n": float(len(v)), "mean": mean, "sd": sd, "min": min(v), "max": max(v)}
        if self.no_number:
            out["no_number"] = float(self.no_number)
        if judged is not None:
            out.update(judged)
        return out

    @property
    def seeds(self) -> tuple[int, int] | None:
        return (self.first, self.last) if self.first is not None and self.last is not None else None


def masked(text: str) -> str:
    """`text` with its digits masked, so line numbers and counts do not tell apart failures that
    are the same (a build error at util.cpp:38 and at util.cpp:41)."""
    return text.translate(_DIGITS)


_DIGITS = str.maketrans("0123456789", "##########")


@dataclass(frozen=True)
class Ask:
    """The question put to one commit: in which role, by which test, at which error levels."""

    role: str  # good-endpoint | bad-endpoint | bad-model | step | probe | sticky | retest-… | confirm-… | test
    alpha: float
    beta: float
    mode: str = "reference"  # reference | quick | depart | change | bad-model | sticky
    q_bad: tuple[float, ...] | None = None  # the broken end's smoothed distribution (quick steps; BAD bets on it)
    block: int = 0  # seed block: 0 common to every commit (tests, the search), 1 the commit's own (fresh seeds)
    arm: str = "main"  # "main", or a cross-check arm's name
    budget: int | None = None  # runs before INCONCLUSIVE (default: run.max_runs)
    start: int = 0  # the first seed of the block to read (later ones are fresh)
    # ends to compare with seed for seed: (GOOD or BAD: the side it stands for, its sha,
    # ((seed, category or −1 for an uncounted run), …)); a commit like one is placed beside it
    alike: tuple[tuple[str, str, tuple[tuple[int, int], ...]], ...] = ()


@dataclass(frozen=True)
class CommitVerdict:
    sha: str
    subject: str
    role: str
    verdict: Verdict
    runs: int  # runs consumed by the test (every seed, failures included)
    counts: dict[str, int]  # category -> runs
    failures: dict[str, int]  # crash / timeout / incomplete / unparsable / output-too-large -> runs
    retried: int  # reruns of incomplete outputs
    log_e_bad: float
    log_e_good: float
    reason: str
    mode: str
    alpha: float
    beta: float
    seeds: tuple[int, int] | None  # first and last seed consumed
    build: str  # build status
    build_seconds: float
    executed: int = 0  # runs executed by this call (0 when replayed)
    build_log: str | None = None
    binaries: dict[str, str] = field(default_factory=dict)
    variant: int | None = None  # which run.variants entry was used (0 with plain argv)
    arm: str = "main"
    block: int = 0
    build_variant: int | None = None  # which build.variants entry was built
    build_notes: str = ""  # e.g. built in a clean directory after the reused one failed
    signature: str = ""  # skips: what the failure looks like (the same at commits failing alike)
    # the last run whose output the parse could not read (its output quoted, the key it fails),
    # and the last run that failed (its signal or exit status, its error line); "" none
    last_unreadable: str = ""
    last_failed: str = ""
    others: dict[str, int] = field(default_factory=dict)  # the most frequent outcomes the reference lacks
    # what identifies the program it ran (judge.runner.program_identity: the run key and
    # self-contained binaries): two commits with the same one run the same program ("" unknown)
    program: str = ""
    # a numeric statistic (kind mean or time): n, mean, sd, min, max of the runs' numbers, and
    # θ's estimate with the interval its test left (low, high; statistics.means), else None
    values: dict[str, float] | None = None

    @classmethod
    def of(
        cls,
        sha: str,
        subject: str,
        ask: Ask,
        build: BuildRecord,
        tally: Tally | None,
        verdict: Verdict,
        reason: str,
        *,
        evidence: tuple[float, float] = (0.0, 0.0),
        executed: int = 0,
        variant: int | None = None,
        signature: str = "",
        program: str = "",
        judged: Mapping[str, float] | None = None,
    ) -> "CommitVerdict":
        """The one constructor: what was asked, how the commit built, what its runs showed
        (`judged`: what a numeric test made of the runs, Tally.numbers)."""
        return cls(
            sha=sha,
            subject=subject,
            role=ask.role,
            verdict=Verdict(verdict),
            runs=tally.consumed if tally else 0,
            counts=tally.by_name() if tally else {},
            failures=dict(tally.failures) if tally else {},
            retried=tally.retried if tally else 0,
            log_e_bad=evidence[0],
            log_e_good=evidence[1],
            reason=reason,
            mode=ask.mode,
            alpha=ask.alpha,
            beta=ask.beta,
            seeds=tally.seeds if tally else None,
            build=build.status,
            build_seconds=build.seconds,
            executed=executed,
            build_log=build.log,
            binaries=dict(build.binaries),
            variant=variant,
            arm=ask.arm,
            block=ask.block,
            build_variant=build.variant if build.log else None,
            build_notes=build.notes,
            signature=signature,
            others=dict(tally.others.most_common(5)) if tally else {},
            last_unreadable=_detail(tally.last_unreadable) if tally else "",
            last_failed=_detail(tally.last_failed) if tally else "",
            program=program,
            values=tally.numbers(judged) if tally else None,
        )

    @property
    def cut_rate(self) -> float:
        """The share of attempts whose output was cut short (rerun with the same seed, never counted)."""
        return self.retried / (self.runs + self.retried) if self.runs + self.retried else 0.0

    @property
    def key(self) -> str:
        """How a job stores it: its role, and the arm for cross-check arms."""
        return self.role if self.arm == "main" else f"{self.role}@{self.arm}"

    def to_json(self) -> dict[str, object]:
        """The JSON form: `commit` (the contract's name) first, then every field."""
        data = asdict(self)
        data["verdict"] = self.verdict.value
        data["seeds"] = list(self.seeds) if self.seeds else None
        return {"commit": self.sha, **data}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "CommitVerdict":
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["verdict"] = Verdict(values["verdict"])
        values["seeds"] = tuple(values["seeds"]) if values.get("seeds") else None
        return cls(**values)


def _detail(rec: RunRecord | None) -> str:
    return (rec.detail or rec.status)[:300] if rec is not None else ""


def distinct_runs(verdicts: Sequence[CommitVerdict]) -> int:
    """Runs spent, each counted once: verdicts on the same commit, arm, seed block and first
    seed read the same seeds (the bad-endpoint model extends the bad endpoint's test, the
    confirmation's tests share their fresh runs); a later confirmation starts where an earlier
    one stopped, so its runs are new."""
    longest: dict[tuple[str, str, int, int | None], int] = {}
    for v in verdicts:
        key = (v.sha, v.arm, v.block, v.seeds[0] if v.seeds else None)
        longest[key] = max(longest.get(key, 0), v.runs)
    return sum(longest.values())
