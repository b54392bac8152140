"""Reports (pure data): what `bisect` and `test` produce, typed, with their JSON form.

The JSON is a contract other tools rely on (fields listed in README.md, schema version 1): new
fields may be added freely, a breaking change bumps `SCHEMA_VERSION`. Renderers (terminal,
Markdown, GitHub comments) take these objects, never hand-built dicts; `from_json` reads back
what the jobs table stored, including results written before a field existed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from typing import Any, Union

from bisectbot.records.commits import CommitVerdict
from bisectbot.statistics.outcome import Find, Verdict

SCHEMA_VERSION = 1


def _known(cls: type, data: dict[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


@dataclass(frozen=True)
class ReferenceSummary:
    """The reference as reports show it: its probabilities, source, and the test's categories."""

    probs: dict[str, float]
    condition_prob: float | None
    source: str
    categories: list[str]
    category_probs: list[float]
    condition: dict[str, Any] | None  # {"position": 0, "token": "f"} or None
    outcome: dict[str, Any]  # {"position": 1}

    @property
    def prob_of(self) -> dict[str, float]:
        return dict(zip(self.categories, self.category_probs))

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ReferenceSummary":
        return cls(**_known(cls, data))


@dataclass(frozen=True)
class ConfigSummary:
    name: str
    digest: str
    path: str
    experiment: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ConfigSummary":
        return cls(**_known(cls, data))


@dataclass(frozen=True)
class Environment:
    """Where the verdicts were measured (the toolchain probe fills it in)."""

    compiler: str
    cmake: str
    cmake_args: list[str]
    host: str
    platform: str
    python: str
    bisectbot: str

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Environment":
        values = {f.name: data.get(f.name, "unknown") for f in fields(cls)}
        values["cmake_args"] = list(data.get("cmake_args", []))
        return cls(**values)


class BisectStatus(str, Enum):
    FOUND = "found"  # culprit named: parent GOOD, culprit BAD, and a change shown on fresh seeds
    AMBIGUOUS = "ambiguous"  # undecidable commits leave a range of candidates
    UNCONFIRMED = "unconfirmed"  # the re-test disagreed, or the sticky posterior fell short
    STOPPED = "stopped"  # --max-builds or --deadline reached: the range so far; rerun to resume
    CLEAN = "clean"  # --scan: every commit it tested is within tolerance of the reference (none departs)


@dataclass(frozen=True)
class BisectReport:
    """`bisectbot bisect --json`: the schema documented in README.md."""

    job: str
    status: BisectStatus
    find: Find
    first_bad: str | None  # the culprit (first bad, or first fixed with find=fixed)
    first_bad_subject: str | None
    last_good: str | None
    candidates: list[str]  # possible culprits (one when found)
    good: str
    bad: str
    good_ref: str
    bad_ref: str
    commits: int  # commits on the first-parent line, good and bad included
    builds: int
    builds_bound: int  # ceil(log2 searched) + 3
    runs: int
    runs_executed: int  # runs executed by this invocation (0 when fully replayed)
    retried: int
    confidence: float
    step_alpha: float
    message: str
    verdicts: list[CommitVerdict]
    reference: ReferenceSummary
    config: ConfigSummary
    environment: Environment
    reproduce: str
    strategy: str = "plain"  # reference | plain | sticky (the first used; `auto` picks by cost)
    extra: dict[str, Any] = field(default_factory=dict)
    # consecutive commits that failed alike (tried, or presumed between two alike failures):
    # {first, last, commits, tried, signature, text}
    skip_blocks: list[dict[str, Any]] = field(default_factory=list)
    # boundaries crossed, the first departure first: {commit, subject, first, before, after, text}
    change_points: list[dict[str, Any]] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)  # what `confidence` rests on, as seen
    posterior: float | None = None  # the sticky search's posterior (not a bound)
    eta: float | None = None  # BAD: departs by more than this (total variation)
    tolerance: float | None = None  # GOOD: within this
    control_runs: int | None = None  # runs of the control commit (reference.control), not in `runs`
    along: list[dict[str, Any]] = field(default_factory=list)  # core.diagnose.distance_along: TV by position
    # the commits that can change the binary (the search ran over these), the others skipped as
    # equivalent to their parent, those of them between last_good and first_bad, and the rule
    searched: int | None = None
    skipped_equivalent: int = 0
    boundary_skipped: list[str] = field(default_factory=list)
    input_rule: str = ""
    rounds: int | None = None  # search rounds: steps, sticky visits, or on a cluster K commits at once
    workers: int = 1  # commits built and tested at once (Dask workers)
    # status `stopped`: {by (max-builds | deadline), reason, last_good, first_bad (known so far),
    # commits_left, resume (the command that goes on)}; None otherwise
    stopped: dict[str, Any] | None = None
    # status `found`: the first runs of the culprit's parent and of the culprit side by side, and
    # the command that reruns one seed by hand (bisecting.outputs); None otherwise
    outputs: dict[str, Any] | None = None
    user_skipped: list[str] = field(default_factory=list)  # --skip / --exclude: never built nor tested
    # the forecast the strategy was chosen by and what the bisect took, in the same units:
    # {unit: {build_seconds, run_seconds, measured_builds, measured_runs}, estimate: {strategy,
    # builds, runs, seconds}, alternatives: [...], actual: {builds, runs, seconds, build_seconds}, text}
    cost: dict[str, Any] | None = None
    # where the builds went (core.builds.BuildStage): {stage (ends | search | confirmation |
    # zone-check), number, commits, builds, skipped, why}, in the order the stages began
    build_stages: list[dict[str, Any]] = field(default_factory=list)
    # status `found`: what the answer proves, exactly: {change ("GOOD→BAD", or "BAD→GOOD" with
    # find=fixed), commit, parent, first_departure (no untested commit before it could hide an
    # earlier one), text}; None otherwise
    proved: dict[str, Any] | None = None
    # status `found`: the stretches before the named commit where nothing was tested, between
    # two commits shown on the parent's side: {after, before (those two), first, last, commits
    # (that can change the binary), scan (the command that tests each of them: --scan)}
    untested_before: list[dict[str, Any]] = field(default_factory=list)
    scan_command: str | None = None  # one --scan over all of them (None: none, or find=fixed)
    schema_version: int = SCHEMA_VERSION
    kind: str = "bisect"

    def subject_of(self, sha: str | None) -> str | None:
        return next((v.subject for v in self.verdicts if v.sha == sha), None)

    def to_json(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["status"] = self.status.value
        data["find"] = self.find.value
        # `label`: the role as people read it (with --find fixed, by the option the user typed)
        data["verdicts"] = [{**v.to_json(), "label": self.find.role_label(v.role)} for v in self.verdicts]
        data["verdict_words"] = self.find.verdict_words
        for name in ("reference", "config", "environment"):
            data[name] = asdict(data[name])
        # the documented order: schema_version and kind first
        return {"schema_version": self.schema_version, "kind": self.kind, **data}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "BisectReport":
        values = _known(cls, data)
        values["status"] = BisectStatus(data["status"])
        values["find"] = Find(data.get("find", "bad"))
        values["verdicts"] = [CommitVerdict.from_json(v) for v in data.get("verdicts", [])]
        values["reference"] = ReferenceSummary.from_json(data["reference"])
        values["config"] = ConfigSummary.from_json(data["config"])
        values["environment"] = Environment.from_json(data.get("environment", {}))
        return cls(**values)


@dataclass(frozen=True)
class CommitReport:
    """`bisectbot test --json`: one commit's verdict with the generic test, and its arms."""

    job: str
    commit: str
    ref: str
    detail: CommitVerdict
    arms: dict[str, CommitVerdict]
    builds: int  # built by this invocation
    reference: ReferenceSummary
    config: ConfigSummary
    environment: Environment
    reproduce: str
    schema_version: int = SCHEMA_VERSION
    kind: str = "test"
    eta: float | None = None  # BAD: departs by more than this (total variation)
    tolerance: float | None = None  # GOOD: within this
    control_runs: int | None = None  # runs of the control commit (reference.control), not in `runs`

    @property
    def verdict(self) -> Verdict:
        return self.detail.verdict

    def to_json(self) -> dict[str, Any]:
        v = self.detail
        return {
            "schema_version": self.schema_version,
            "kind": self.kind,
            "job": self.job,
            "commit": self.commit,
            "ref": self.ref,
            "verdict": v.verdict.value,
            "runs": v.runs,
            "counts": v.counts,
            "retried": v.retried,
            "failures": v.failures,
            "reason": v.reason,
            "builds": self.builds,
            "detail": v.to_json(),
            "arms": {name: av.to_json() for name, av in self.arms.items()},
            "reference": asdict(self.reference),
            "config": asdict(self.config),
            "environment": asdict(self.environment),
            "reproduce": self.reproduce,
            "eta": self.eta,
            "tolerance": self.tolerance,
            "control_runs": self.control_runs,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "CommitReport":
        return cls(
            job=data["job"],
            commit=data["commit"],
            ref=data["ref"],
            detail=CommitVerdict.from_json(data["detail"]),
            arms={k: CommitVerdict.from_json(v) for k, v in data.get("arms", {}).items()},
            builds=int(data.get("builds", 0)),
            reference=ReferenceSummary.from_json(data["reference"]),
            config=ConfigSummary.from_json(data["config"]),
            environment=Environment.from_json(data.get("environment", {})),
            reproduce=data.get("reproduce", ""),
            eta=data.get("eta"),
            tolerance=data.get("tolerance"),
            control_runs=data.get("control_runs"),
            schema_version=data.get("schema_version", 1),
        )


@dataclass(frozen=True)
class JobStop:
    """A job that ended without a report: failed (with why) or cancelled (by whom)."""

    status: str  # failed | cancelled
    message: str = ""
    by: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"status": self.status, "message": self.message}
        if self.by is not None:
            out["by"] = self.by
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "JobStop":
        return cls(str(data.get("status", "failed")), str(data.get("message", "")), data.get("by"))


JobResult = Union[BisectReport, CommitReport, JobStop]


def load_result(kind: str, status: str, data: dict[str, Any] | None) -> JobResult | None:
    """A stored job result, typed: the report of a finished job, or why it stopped."""
    if data is None:
        return None
    if status != "done":
        return JobStop.from_json({"status": status, **data})
    return BisectReport.from_json(data) if kind == "bisect" else CommitReport.from_json(data)
