"""Reports (pure data): what `bisect` and `test` produce, typed, with their JSON form.

The JSON is a contract other tools rely on (fields listed in README.md, schema version 1): new
fields may be added freely, a breaking change bumps `SCHEMA_VERSION`. Renderers (terminal,
Markdown, GitHub comments) take these objects, never hand-built dicts; `from_json` reads back
what the jobs table stored, including results written before a field existed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from enum import Enum
from typing import Any, Mapping, NotRequired, TypedDict, Union

from bisectbot.records.commits import CommitVerdict
from bisectbot.statistics.outcome import Find, Verdict

SCHEMA_VERSION = 1
JSONObject = dict[str, object]  # what to_json gives: a JSON object, its values plain data


def _known(cls: type, data: Mapping[str, Any]) -> dict[str, Any]:
    names = {f.name for f in fields(cls)}
    return {k: v for k, v in data.items() if k in names}


# -- the parts of a report, as its JSON holds them (typed: the keys are the contract) ------------
class Condition(TypedDict):
    position: int
    token: str


class OutcomeAt(TypedDict):
    position: int


class NumericReference(TypedDict):
    """A numeric statistic's reference as reports show it: what θ is, its value at the reference,
    the bands of GOOD and BAD (θ's units), and how exact the tests are."""

    kind: str  # mean | time
    scale: str  # mean | difference | ratio | log-ratio (statistics.means.Scale)
    mean: float | None  # the exact reference mean, or the control's mean over its first runs
    tolerance: float
    eta: float
    relative: bool
    bounds: list[float] | None
    good: list[float]  # θ within (good[0], good[1]) is GOOD
    bad: list[float]  # θ outside [bad[0], bad[1]] is BAD
    exact: bool  # bounded values: exact at any number of runs; else a normal approximation
    wall_time: NotRequired[bool]  # kind time: the run's wall time is the number (no outcome read)


class SkipBlockRow(TypedDict):
    """Consecutive commits that failed alike (tried, or presumed between two alike failures)."""

    first: str
    last: str
    commits: int
    tried: int
    signature: str
    text: str


class ChangePointRow(TypedDict):
    """A boundary crossed: the first departure first; counts on fresh seeds before and after."""

    commit: str
    subject: str | None
    first: bool
    before: dict[str, int]
    after: dict[str, int]
    text: str


class AlongRow(TypedDict):
    """A tested commit's distance from the reference at its position (core.diagnose.distance_along);
    for a number, `tv` is its distance in the tolerance's units and θ comes with its interval."""

    commit: str
    position: int
    tv: float
    verdict: str
    value: NotRequired[float]  # a number: θ's estimate (statistics.means.Scale)
    low: NotRequired[float]  # and the interval its test left
    high: NotRequired[float]


class Stopped(TypedDict):
    """Status `stopped`: which limit, the range left, how to go on."""

    by: str  # max-builds | deadline
    reason: str
    last_good: str
    first_bad: str
    commits_left: int
    resume: str


class Repeatability(TypedDict):
    """The working end's first seeds run a second time: whether the program is deterministic per seed."""

    commit: str
    seeds: int  # compared (counted both times)
    differ: int  # of them, seeds that printed another outcome the second time
    deterministic: bool  # none did
    runs_executed: int  # runs this invocation executed for the check (0 when replayed; in the report's runs_executed)


class OutputRow(TypedDict):
    """Run i of the parent and of the culprit, each under its own fresh seed."""

    run: int
    culprit_seed: int
    culprit: str
    culprit_outcome: str | None
    parent_seed: int
    parent: str
    parent_outcome: str | None


class Rerun(TypedDict):
    """One seed of the culprit by hand, on its kept binary."""

    seed: int
    argv: list[str]
    cwd: str
    env: dict[str, str]
    binaries: dict[str, str]
    build_dir: str
    command: str


class Outputs(TypedDict):
    """Status `found`: the first runs of the parent and the culprit side by side (bisecting.outputs)."""

    culprit: str
    parent: str
    culprit_label: str
    rows: list[OutputRow]
    rerun: Rerun | None


def output_side(row: OutputRow, side: str) -> tuple[int, str, str | None]:
    """(seed, output, outcome) of the parent's or the culprit's run in a row."""
    if side == "parent":
        return row["parent_seed"], row["parent"], row["parent_outcome"]
    return row["culprit_seed"], row["culprit"], row["culprit_outcome"]


class Units(TypedDict):
    build_seconds: float
    run_seconds: float
    measured_builds: int
    measured_runs: int


class ForecastRow(TypedDict):
    strategy: str
    builds: float
    runs: int
    seconds: float


class Actual(TypedDict):
    builds: int
    runs: int
    seconds: float
    build_seconds: float


class Cost(TypedDict, total=False):
    """The forecast the strategy was chosen by and what the bisect took, in the same units; `time`:
    where this invocation's wall time went (wall, building, running, other)."""

    unit: Units
    estimate: ForecastRow | None
    alternatives: list[ForecastRow]
    actual: Actual
    text: str
    time: dict[str, float]


class BuildStageRow(TypedDict):
    """Where the builds went (core.builds.BuildStage), in the order the stages began."""

    stage: str  # ends | search | confirmation | zone-check
    number: int
    commits: list[str]
    skipped: int
    why: str
    builds: int


class Proved(TypedDict):
    """Status `found`: what the answer proves, exactly."""

    change: str  # "GOOD→BAD", or "BAD→GOOD" with find=fixed
    commit: str
    parent: str
    first_departure: bool  # no untested commit before it could hide an earlier one
    text: str
    placed: bool  # some commit before it was only placed on its side (GOOD-SIDE), not tested


class Stretch(TypedDict):
    """A stretch before the named commit where nothing was tested, between two commits shown on
    the parent's side (`after`, `before`), with the command that tests each commit of it."""

    after: str
    before: str
    first: str
    last: str
    commits: int
    skipped: int  # of them, tried and could not be built or run
    scan: str | None


class ReportExtra(TypedDict, total=False):
    strategy_requested: str
    strategies: list[str]


@dataclass(frozen=True)
class ReferenceSummary:
    """The reference as reports show it: its probabilities, source, and the test's categories;
    for a number (statistic.kind mean or time), what its tests judge (`numeric`)."""

    probs: dict[str, float]
    condition_prob: float | None
    source: str
    categories: list[str]
    category_probs: list[float]
    condition: Condition | None  # {"position": 0, "token": "f"} or None
    outcome: OutcomeAt  # {"position": 1}
    numeric: NumericReference | None = None
    # the tail pooled into buckets (statistic.max_categories): `buckets` (name → outcomes), `kept`,
    # `hidden` (the mass GOOD leaves for them), `bound` (how it was bounded), `good_tolerance`
    pooling: dict[str, Any] | None = None

    @property
    def prob_of(self) -> dict[str, float]:
        return dict(zip(self.categories, self.category_probs))

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ReferenceSummary":
        return cls(**_known(cls, data))


@dataclass(frozen=True)
class ConfigSummary:
    name: str
    digest: str
    path: str
    experiment: str | None = None

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "ConfigSummary":
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
    # what builds a commit when it is not cmake: "command: make -j{jobs}" or "none: …"
    # ("": cmake, as in every report before build kinds)
    build: str = ""

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "Environment":
        values = {f.name: data.get(f.name, "unknown") for f in fields(cls)}
        values["cmake_args"] = list(data.get("cmake_args", []))
        values["build"] = str(data.get("build", ""))
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
    extra: ReportExtra = field(default_factory=lambda: ReportExtra())
    skip_blocks: list[SkipBlockRow] = field(default_factory=list)
    change_points: list[ChangePointRow] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)  # what `confidence` rests on, as seen
    posterior: float | None = None  # the sticky search's posterior (not a bound)
    eta: float | None = None  # BAD: departs by more than this (total variation)
    tolerance: float | None = None  # GOOD: within this
    control_runs: int | None = None  # runs of the control commit (reference.control), not in `runs`
    along: list[AlongRow] = field(default_factory=list)
    # the commits that can change the binary (the search ran over these), the others skipped as
    # equivalent to their parent, those of them between last_good and first_bad, and the rule
    searched: int | None = None
    skipped_equivalent: int = 0
    boundary_skipped: list[str] = field(default_factory=list)
    input_rule: str = ""
    rounds: int | None = None  # search rounds: steps, sticky visits, or on a cluster K commits at once
    workers: int = 1  # commits built and tested at once (Dask workers)
    stopped: Stopped | None = None
    outputs: Outputs | None = None
    user_skipped: list[str] = field(default_factory=list)  # --skip / --exclude: never built nor tested
    cost: Cost | None = None
    build_stages: list[BuildStageRow] = field(default_factory=list)
    proved: Proved | None = None  # status `found`, else None
    untested_before: list[Stretch] = field(default_factory=list)  # status `found`, else empty
    scan_command: str | None = None  # one --scan over all of them (None: none, or find=fixed)
    repeatability: Repeatability | None = None  # None: not checked (a cluster, or no end tested)
    schema_version: int = SCHEMA_VERSION
    kind: str = "bisect"

    def subject_of(self, sha: str | None) -> str | None:
        return next((v.subject for v in self.verdicts if v.sha == sha), None)

    def to_json(self) -> JSONObject:
        data: JSONObject = {f.name: getattr(self, f.name) for f in fields(self)}
        data["status"] = self.status.value
        data["find"] = self.find.value
        # `label`: the role as people read it (with --find fixed, by the option the user typed)
        data["verdicts"] = [{**v.to_json(), "label": self.find.role_label(v.role)} for v in self.verdicts]
        data["verdict_words"] = self.find.verdict_words
        for name in ("reference", "config", "environment"):
            data[name] = asdict(getattr(self, name))
        # the documented order: schema_version and kind first
        return {"schema_version": self.schema_version, "kind": self.kind, **data}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "BisectReport":
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

    def to_json(self) -> JSONObject:
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
    def from_json(cls, data: Mapping[str, Any]) -> "CommitReport":
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

    def to_json(self) -> JSONObject:
        out: JSONObject = {"status": self.status, "message": self.message}
        if self.by is not None:
            out["by"] = self.by
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "JobStop":
        return cls(str(data.get("status", "failed")), str(data.get("message", "")), data.get("by"))


JobResult = Union[BisectReport, CommitReport, JobStop]


def load_result(kind: str, status: str, data: Mapping[str, Any] | None) -> JobResult | None:
    """A stored job result, typed: the report of a finished job, or why it stopped."""
    if data is None:
        return None
    if status != "done":
        return JobStop.from_json({"status": status, **data})
    return BisectReport.from_json(data) if kind == "bisect" else CommitReport.from_json(data)
