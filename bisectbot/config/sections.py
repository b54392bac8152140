"""The sections of a config file (repo, build, run, parse, statistic, reference, test, arms,
github, untrusted, storage), as frozen pydantic models that validate themselves.

Each section checks what it can see alone (one of two shapes, known placeholders, probabilities
that sum to 1); checks across sections are the root's (`bisectbot.config.Config`). Unknown keys
are refused (`extra="forbid"`), so a misspelt key is an error, never a silent default.
"""

from __future__ import annotations

import math
import re
import string
from collections.abc import Sequence
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from bisectbot.config.seeds import SEED_BLOCK, commit_seed_index, mix31

# Placeholders every argv template may use; `binaries` adds one per named binary.
BASE_PLACEHOLDERS = frozenset({"seed", "fixtures", "config_dir", "source", "build"})


class Strict(BaseModel):
    """The base of every section (and of the root): unknown keys are errors, values frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=False)


class RepoConfig(Strict):
    """Where the project lives: a local checkout (`path`) or a clone URL (`url`)."""

    path: str | None = None
    url: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> "RepoConfig":
        if bool(self.path) == bool(self.url):
            raise ValueError("give exactly one of repo.path or repo.url")
        return self


def repo_entry(text: str) -> dict[str, str]:
    """The `repo` section for what a user typed: a clone URL (`https://…`, `file://…`,
    `git@host:owner/name`) as `url`, anything else as a local checkout's absolute `path`."""
    if "://" in text or re.match(r"^[\w.-]+@[\w.-]+:", text):
        return {"url": text}
    return {"path": str(Path(text).resolve())}


def _check_binaries(value: dict[str, list[str]] | None) -> dict[str, list[str]] | None:
    for name, candidates in (value or {}).items():
        if not name.isidentifier():
            raise ValueError(f"binary name {name!r} is not a valid placeholder name")
        if name in BASE_PLACEHOLDERS:
            raise ValueError(f"binary name {name!r} clashes with the built-in placeholder")
        if not candidates:
            raise ValueError(f"binary {name!r} has no candidate paths")
    return value


MODEL_RUNS = 4000  # test.model_runs default
SEARCH_RUNS = 40000  # test.search_runs default


# What a build is: cmake's configure + build of targets (`cmake`), a command run in the commit's
# tree that leaves the binaries there (`command`: make, meson + ninja, cargo, a script), or no
# build at all (`none`: an interpreted program, run from the commit's own tree as `{source}`).
BuildKind = Literal["cmake", "command", "none"]
# Placeholders of a build command (`build.command`, a variant's `command`): the tree it runs in,
# the parallel jobs (build.jobs, or the core count), the config's directory and the fixtures.
COMMAND_PLACEHOLDERS = frozenset({"source", "jobs", "config_dir", "fixtures"})


class BuildVariant(Strict):
    """One way to build the program, for a span of the project's history: its cmake targets (or
    its build command), where their binaries land, and the cmake options only that span
    understands (targets and options get renamed: `speculative` → `llama-speculative`,
    `LLAMA_NATIVE` → `GGML_NATIVE`)."""

    targets: list[str] | None = Field(default=None, min_length=1)  # cmake: the targets built
    # placeholder name -> candidate paths under the build dir (build.kind command: under the
    # tree the command ran in); the first this build made is used.
    binaries: dict[str, list[str]] = Field(min_length=1)
    cmake_args: list[str] = Field(default_factory=list)  # after build.cmake_args
    command: list[str] | None = Field(default=None, min_length=1)  # build.kind command: instead of build.command
    # paths the tree must have for this variant to fit it (e.g. meson.build, Makefile)
    needs: list[str] = Field(default_factory=list)

    _names = field_validator("binaries")(classmethod(lambda cls, v: _check_binaries(v)))

    @field_validator("needs")
    @classmethod
    def _relative(cls, value: list[str]) -> list[str]:
        for path in value:
            if not path or path.startswith("/") or ".." in path.split("/"):
                raise ValueError(f"{path!r} is not a path inside the tree")
        return value

    @property
    def defines(self) -> list[str]:
        """The names this variant sets with -D: the tree must use every one of them."""
        return [a[2:].split("=", 1)[0].split(":", 1)[0] for a in self.cmake_args if a.startswith("-D")]

    def key(self) -> dict[str, Any]:
        """Its part of a build key: the keys added after build keys were first stored left out
        at their defaults (`VARIANT_ADDED`), so stored builds keep their keys."""
        dump = self.model_dump(mode="json")
        for name, default in VARIANT_ADDED.items():
            if dump.get(name) == default:
                dump.pop(name)
        return dump


# Keys added to a build variant after build keys and config digests were first stored, at their
# defaults: command and needs (2026-12-08, issue 48). `targets` became optional then too (a build
# command has none): left out while None.
VARIANT_ADDED: dict[str, Any] = {"targets": None, "command": None, "needs": []}


def _build_choices(
    targets: list[str] | None,
    binaries: dict[str, list[str]] | None,
    variants: list[BuildVariant] | None,
    *names: str,
    kind: BuildKind = "cmake",
) -> list[BuildVariant]:
    """The build variants of a section that gives one `targets` + `binaries` (a build command:
    `binaries` alone) or a `variants` list. With `names` (the keys as the section spells them)
    also checks that shape: one way, not both, and the same binary placeholders in every variant."""
    if kind == "none":
        return []
    single = targets is not None or binaries is not None
    if names:
        t, b, v = names
        one = f"{b}" if kind == "command" else f"{t} and {b}"
        if single == (variants is not None):
            raise ValueError(f"give {one}, or {v}")
        if kind == "cmake" and single and (targets is None or binaries is None):
            raise ValueError(f"{t} and {b} go together")
        if kind == "command" and targets is not None:
            raise ValueError(f"{t} is for build.kind cmake (a build command builds what it builds)")
    choices = variants if variants is not None else [BuildVariant(targets=targets, binaries=binaries or {})]
    if names:
        for i, choice in enumerate(choices):
            if kind == "cmake" and (choice.targets is None or choice.command is not None):
                raise ValueError(f"{v}[{i}]: build.kind cmake builds targets: give targets, not command")
            if kind == "command" and (choice.targets is not None or choice.cmake_args):
                raise ValueError(f"{v}[{i}]: build.kind command runs a command: no targets or cmake_args")
        if len({frozenset(c.binaries) for c in choices}) != 1:
            raise ValueError("every build variant must name the same binaries (placeholders)")
    return choices


class BuildConfig(Strict):
    """How a commit becomes the program under test (`kind`).

    `cmake` (the default): a CPU-only cmake configure + build. Give `targets` and `binaries`, or
    `variants`: then per commit the first variant the tree supports is built (its targets exist,
    cmake uses its -D options) and recorded. `command`: `command` (an argv, e.g. make -j{jobs})
    run in the commit's tree, which leaves the `binaries` there (or `variants`, each with its own
    command and the files the tree `needs` for it). `none`: nothing is built; a run's `{source}`
    is the commit's own tree, exported once per commit and kept."""

    kind: BuildKind = "cmake"
    cmake_args: list[str] = Field(default_factory=list)
    targets: list[str] | None = Field(default=None, min_length=1)
    binaries: dict[str, list[str]] | None = Field(default=None, min_length=1)
    variants: list[BuildVariant] | None = Field(default=None, min_length=1)
    # build.kind command: the argv run in the commit's tree (placeholders COMMAND_PLACEHOLDERS)
    command: list[str] | None = Field(default=None, min_length=1)
    # build.kind command: the outputs of one commit's build stay for the next (only what changed
    # is rewritten: make rebuilds what its rules say depends on it). Off: every build starts
    # from a tree as the commit has it, all outputs removed (a Makefile that lists no headers
    # cannot build a stale binary); ccache, where installed, keeps that cheap for C and C++.
    incremental: bool = False
    keep: list[str] = Field(default_factory=list)  # extra globs (e.g. shared libs) kept per commit
    timeout: float = Field(default=1800, gt=0)
    jobs: int = Field(default=0, ge=0)  # 0 = number of cores
    # cmake's generator: `auto` is Ninja when `ninja` is on PATH (0.85x and 0.96x the cold
    # build of a llama.cpp tree with Makefiles in two runs, docs/benchmarks.md), else cmake's
    # default; a `-G` in cmake_args wins. It changes the build directory, not what is compiled.
    generator: Literal["auto", "ninja", "make"] = "auto"
    # The build sees no git repository (its GIT_DIR points at nothing). A project that stamps
    # its commit into the binary (llama.cpp's build-info) then compiles the same bytes at
    # commits that change no code, and those share verdicts as the same program
    # (runner.program_identity). Changes what is compiled (the stamp reads "unknown"), so it is
    # part of the build key.
    hide_git: bool = False

    _names = field_validator("binaries")(classmethod(lambda cls, v: _check_binaries(v)))

    @model_validator(mode="after")
    def _one_way(self) -> "BuildConfig":
        if self.kind == "none":
            given = [k for k in NONE_REFUSES if getattr(self, k) != _default(k)]
            if given:
                raise ValueError(f"build.kind none builds nothing: remove build.{given[0]}")
            return self
        if self.kind == "cmake" and (self.command is not None or self.incremental):
            what = "command" if self.command is not None else "incremental"
            raise ValueError(f"build.{what} goes with build.kind command (cmake builds targets)")
        if self.kind == "command":
            if self.cmake_args or self.generator != "auto":
                what = "cmake_args" if self.cmake_args else "generator"
                raise ValueError(f"build.{what} is for build.kind cmake")
            if self.command is None and (self.variants is None or any(v.command is None for v in self.variants)):
                raise ValueError("build.kind command needs build.command (or a command in every variant)")
        _build_choices(
            self.targets,
            self.binaries,
            self.variants,
            "build.targets",
            "build.binaries",
            "build.variants",
            kind=self.kind,
        )
        for i, argv in enumerate(self.commands):
            where = (
                "build.command"
                if self.variants is None or self.variants[i].command is None
                else f"build.variants[{i}].command"
            )
            check_placeholders(argv, where, COMMAND_PLACEHOLDERS)
        return self

    @property
    def choices(self) -> list[BuildVariant]:
        """The build variants in order of preference (one when targets/binaries are given; none
        for build.kind none)."""
        return _build_choices(self.targets, self.binaries, self.variants, kind=self.kind)

    @property
    def commands(self) -> list[list[str]]:
        """build.kind command: each variant's build command (its own, else build.command)."""
        if self.kind != "command":
            return []
        return [list(v.command or self.command or []) for v in self.choices]

    @property
    def binary_names(self) -> list[str]:
        choices = self.choices
        return list(choices[0].binaries) if choices else []


def _default(key: str) -> Any:
    return BuildConfig.model_fields[key].get_default(call_default_factory=True)


# What build.kind none refuses: every key that says how to build.
NONE_REFUSES = (
    "targets",
    "binaries",
    "variants",
    "command",
    "cmake_args",
    "keep",
    "incremental",
    "generator",
    "hide_git",
)


class Variant(Strict):
    """One spelling of the command, for a span of the project's history (flags get renamed, the
    output format changes): its argv, what its --help must show, and how its output is read."""

    argv: list[str] = Field(min_length=1)
    # Besides every flag in argv, text the binary's --help must show for this variant to fit
    # (e.g. "[on|off|auto]" when -fa started taking a value).
    help_contains: list[str] = Field(default_factory=list)
    # Text the binary's --help must NOT show: how a variant for an older output format stays off
    # newer binaries whose flags it would also fit.
    help_lacks: list[str] = Field(default_factory=list)
    parse: "ParseConfig | None" = None  # this variant's output format (default: the config's parse)


class ServeConfig(Strict):
    """The program under test is a server (llama-server): `run.argv` (each variant) starts it on
    127.0.0.1:{port}, once per commit when a seed must run; each seed is one HTTP request, its
    `body` with the string "{seed}" replaced by the seed, and the text in `field` of the JSON
    answer is parsed like a program's stdout. run.timeout is per request, run.jobs the requests
    in flight. A server that does not start fails every run of its variant (with its exit
    status and last log line), so the next variant is tried as for a program that crashes."""

    health: str = "/health"  # answers 200 once the model is loaded
    startup_timeout: float = Field(default=180, gt=0)
    path: str = "/completion"
    body: dict[str, Any] = Field(min_length=1)  # the JSON request
    field: str = "content"  # the generated text in the JSON answer


class RunConfig(Strict):
    """How to run one seed. `argv` is a list: nothing is ever passed through a shell.

    Give `argv`, or `variants`: then per commit the first variant whose flags the built binary's
    `--help` shows is used (and recorded); a commit where none fits is skipped.
    """

    argv: list[str] | None = Field(default=None, min_length=1)
    variants: list[Variant] | None = Field(default=None, min_length=1)
    help_args: list[str] = Field(default_factory=lambda: ["--help"])
    first_seed: int = Field(default=1, ge=0, le=10**8)
    # sequential: seed i is first_seed + i. hashed: a bijective 31-bit mix of it, for programs
    # whose RNG makes consecutive seeds correlated (llama-speculative's minstd_rand0 does).
    seeds: Literal["sequential", "hashed"] = "sequential"
    max_runs: int = Field(default=4000, gt=0, le=SEED_BLOCK)
    timeout: float = Field(default=60, gt=0)
    # N runs at once, or 0: start at the core count and back off while the reruns of cut output
    # cost more than running more at once gains (core.parallel)
    jobs: int = Field(default=0, ge=0)
    retries: int = Field(default=3, ge=0)  # reruns of a seed whose output was incomplete
    env: dict[str, str] = Field(default_factory=dict)
    # stdout and stderr are each read up to this; past it the run is stopped and recorded as
    # `output-too-large` (never parsed), so a runaway program cannot fill the bot's memory
    max_output_mb: int = Field(default=16, gt=0, le=4096)
    # the argv elements (as written, e.g. "{fixtures}/target.gguf") naming files the program
    # reads: their contents key the stored runs. Unset: every file the argv names, except those
    # a run was seen writing (a log file), which key the runs by their first-seen content only
    inputs: list[str] | None = None
    # set: the command starts a server, asked once per seed (ServeConfig)
    serve: ServeConfig | None = None

    @model_validator(mode="after")
    def _one_command(self) -> "RunConfig":
        if (self.argv is None) == (self.variants is None):
            raise ValueError("give exactly one of run.argv or run.variants")
        if self.serve is not None:
            for v, variant in enumerate(self.templates):
                where = "run.argv" if self.argv is not None else f"run.variants[{v}].argv"
                used = {name for arg in variant.argv for name in placeholders_in(arg, where)}
                if "port" not in used:
                    raise ValueError(f"{where}: run.serve needs {{port}} in the command (where the server listens)")
                if "seed" in used:
                    raise ValueError(f"{where}: with run.serve the seed goes in run.serve.body, not the command")
        return self

    def seed(self, index: int) -> int:
        """The seed passed to the program for the index-th run of a sequence."""
        return index if self.seeds == "sequential" else mix31(index)

    def commit_seeds(self, sha: str, block: int, count: int) -> list[int]:
        """The seeds of one block of runs at one commit (see `commit_seed_index`)."""
        return [self.seed(commit_seed_index(sha, block, i, self.first_seed)) for i in range(count)]

    @property
    def templates(self) -> list[Variant]:
        """The command variants in order of preference (one when `argv` is given)."""
        return self.variants if self.variants is not None else [Variant(argv=self.argv or [])]


class ParseConfig(Strict):
    """How a run's output becomes the list of generated tokens."""

    # which stream holds the generated text (2024's llama-simple wrote it to stderr)
    stream: Literal["stdout", "stderr"] = "stdout"
    # the text read is the first match of this regex in the stream (group 1 if it has one), e.g.
    # one line among log lines; a stream with no match is unparsable
    extract: str | None = None
    # the text read (as it is: newlines included) must match this regex whole, or the run is
    # unparsable: what tells one output format from another, so that a command variant made for
    # another era's output gives way to the next (runner: a variant whose runs mostly fail)
    fullmatch: str | None = None
    # the text read is this field of the output read as one JSON value (a dotted path into
    # nested objects: `result.pick`), a string as it is, a number or true/false as JSON spells
    # it; output that is not JSON or lacks the field is unparsable, JSON that stops short is cut
    json_field: str | None = None
    prefix: str = ""  # the text must start with this (the echoed prompt); it is removed
    split: Literal["chars", "whitespace", "regex"] = "chars"
    pattern: str | None = None  # for split: regex, each match (group 1 if any) is a token
    expect_tokens: int | None = Field(default=None, gt=0)  # exactly this many (fewer = cut short)
    min_tokens: int | None = Field(default=None, gt=0)  # at least this many (fewer = cut short)
    eos: str | None = None  # a run that generated eos may stop early; tokens after it are dropped
    # A complete stdout ends with this (llama-speculative 0.3.36: "\n\n\n\n"); else it was cut.
    complete_suffix: str | None = None
    # A stdout without complete_suffix: run the seed again ("rerun"), or "read" what it shows when
    # that is enough: its last token dropped (the cut may have split it), still min_tokens tokens
    # or the EOS. Only where a cut takes nothing but an end off (judge.parse).
    cut_output: Literal["rerun", "read"] = "rerun"

    @model_validator(mode="after")
    def _pattern(self) -> "ParseConfig":
        for name in ("extract", "fullmatch", "pattern"):
            value = getattr(self, name)
            if value is not None:
                try:
                    re.compile(value)
                except re.error as exc:
                    raise ValueError(f"{name}: not a regular expression: {exc}") from None
        if self.json_field is not None and not all(self.json_field.split(".")):
            raise ValueError(f"json_field {self.json_field!r}: a field name, or names joined by dots")
        if self.split == "regex" and not self.pattern:
            raise ValueError("split: regex needs a pattern")
        if self.expect_tokens is not None and self.min_tokens is not None:
            raise ValueError("give expect_tokens (exact) or min_tokens (at least), not both")
        if self.cut_output == "read" and (self.complete_suffix is None or self.min_tokens is None):
            raise ValueError(
                "cut_output: read needs complete_suffix (what tells a cut output) and min_tokens "
                "(how many tokens are enough)"
            )
        return self

    def key(self) -> dict:
        """Its part of a run's key: the keys added after run keys were first stored left out at
        their defaults (`PARSE_ADDED`), so stored runs keep their keys (as config digests do:
        config.history)."""
        dump = self.model_dump(mode="json")
        for name, default in PARSE_ADDED.items():
            if dump.get(name) == default:
                dump.pop(name)
        return dump


# Keys added to `parse` after run keys and config digests were first stored, at their defaults:
# cut_output (2026-12-04, issue 26), stream, extract and fullmatch (2026-12-06, issue 45),
# json_field (2026-12-07, issue 48).
PARSE_ADDED: dict[str, Any] = {
    "cut_output": "rerun",
    "stream": "stdout",
    "extract": None,
    "fullmatch": None,
    "json_field": None,
}


# Past this many outcomes a reference's tail is pooled (statistic.max_categories; measured with
# bench/bench_stats.py --scale, docs/how-it-decides.md).
MAX_CATEGORIES = 32

# No program under test prints this many tokens per seed for a statistic to read: a larger
# position is a typo (10**30), refused on load rather than read as "never there".
MAX_POSITION = 100_000


class Condition(Strict):
    position: int = Field(ge=0, le=MAX_POSITION)
    token: str


class Outcome(Strict):
    position: int = Field(ge=0, le=MAX_POSITION)


# What a run's observation is: one outcome among categories (`categorical`), a number whose mean
# is judged (`mean`: an acceptance rate, a perplexity, a count), or a timing judged against the
# control's runs interleaved with it (`time`: the run's wall time, or a number it prints such as
# tokens/s).
StatisticKind = Literal["categorical", "mean", "time"]


class StatisticConfig(Strict):
    """Among runs meeting `condition`, the token at `outcome.position` is the observation.

    `kind`: `categorical` (the default) tests the outcome's distribution; `mean` reads that token
    as a number and tests its mean (`bounds`: the range every value lies in, when known: the
    tests are then exact at any number of runs); `time` tests the ratio of the run's wall time
    (or of the number at `outcome`, e.g. tokens/s) to the control's, runs of both interleaved
    one by one, the first `warmup` pairs of each test dropped.
    `failures`: what a failed run (a crash, a timeout, a nonzero exit, output that could not be
    read or stayed cut short after its reruns) is. `skip` (the default): not an observation; a
    commit whose runs mostly fail cannot be tested and is skipped, like one that does not
    build. `outcome`: one more category of the observation (FAILED, which the reference never
    gives), so a crash rate that rises is a departure the tests see like any other, and a commit
    whose runs mostly fail is BAD, not skipped. A build that fails is skipped either way.

    `max_categories`: a reference with more outcomes than this keeps its most probable ones as
    categories and pools the rest into a few tail buckets of similar mass (statistics.pooling);
    GOOD is then tested at tolerance − the mass the buckets can hide. null: never pooled."""

    kind: StatisticKind = "categorical"
    condition: Condition | None = None
    outcome: Outcome | None = None  # categorical: required; mean: default position 0; time: absent = wall time
    failures: Literal["skip", "outcome"] = "skip"
    bounds: tuple[float, float] | None = None  # mean: every run's value lies in [lo, hi]
    warmup: int = Field(default=2, ge=0, le=1000)  # time: pairs dropped at the start of each test
    max_categories: int | None = Field(default=MAX_CATEGORIES, ge=2)

    @model_validator(mode="after")
    def _kind(self) -> "StatisticConfig":
        if self.kind == "categorical":
            if self.outcome is None:
                raise ValueError("statistic.outcome is required (which token is the observation)")
            if self.bounds is not None:
                raise ValueError("statistic.bounds is for a number (statistic.kind: mean)")
        else:
            if self.condition is not None:
                raise ValueError(f"statistic.condition is for categorical outcomes, not statistic.kind {self.kind}")
            if self.failures == "outcome":
                raise ValueError(
                    f"statistic.failures: outcome counts failed runs as a category, and with kind {self.kind} a "
                    "failed run has no number: bisect a crash rate with a categorical statistic"
                )
        if self.bounds is not None:
            lo, hi = self.bounds
            if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
                raise ValueError(f"statistic.bounds: give [lo, hi] with lo < hi, got {list(self.bounds)}")
            if self.kind == "time":
                raise ValueError("statistic.bounds is for kind mean (a timing is judged by its ratio to the control's)")
        if self.kind != "time" and self.warmup != 2:
            raise ValueError("statistic.warmup is for kind time (pairs of timed runs dropped at the start)")
        return self

    @property
    def failures_counted(self) -> bool:
        """Failed runs are a category of the observation (`failures: outcome`)."""
        return self.failures == "outcome"

    @property
    def numeric(self) -> bool:
        """The observation is a number (kind mean or time), not a category."""
        return self.kind != "categorical"

    @property
    def position(self) -> int:
        """Where the observation is among a run's tokens (kind mean: 0 unless `outcome` says)."""
        return self.outcome.position if self.outcome is not None else 0

    @property
    def wall_time(self) -> bool:
        """Kind time without an outcome: the observation is the run's wall time."""
        return self.kind == "time" and self.outcome is None


class ComputedReference(Strict):
    """An exact reference computed from the model instead of written down.

    `numpy`: a forward pass of the (tiny) GGUF model plus the sampler chain, no build needed.
    `server`: the non-speculative llama-server built at `commit`, asked for post-sampling probs.
    """

    method: Literal["numpy", "server"]
    model: str  # path; may use {fixtures} and {config_dir}
    prompt: str
    top_k: int = 40
    top_p: float = 1.0
    min_p: float = 0.0
    temp: float = 1.0
    samplers: str = "penalties;top_k;top_p;min_p;temperature"
    # the repeat penalty over the last repeat_last_n tokens of the context, prompt included
    # (llama-cli/main's default was 1.1 until mid-2024; 1.0 is none)
    repeat_penalty: float = Field(default=1.0, gt=0)
    repeat_last_n: int = Field(default=64, ge=-1)
    commit: str | None = None  # server: the commit to build it at
    target: str = "llama-server"  # server: cmake target
    binary: list[str] = Field(default_factory=lambda: ["bin/llama-server", "bin/server"])
    timeout: float = Field(default=300, gt=0)  # server: start-up and query

    @model_validator(mode="after")
    def _server_commit(self) -> "ComputedReference":
        if self.method == "server" and not self.commit:
            raise ValueError("compute.method server needs compute.commit (where to build llama-server)")
        return self


# `reference.control.commit` (or `reference: good`): the job's good end, whatever --good says
# (the working end: --bad with --find fixed). `bisect` and `check` bind it when they start.
GOOD_END = "{good}"


class ControlReference(Strict):
    """No exact reference: run a known-good commit on the seeds every commit is tested on, and
    test each commit against its runs with a two-sample test (`statistics.control_sample`): each tested
    run is paired with the control's run on the same seed, at the same alpha, beta and eta as an
    exact reference. `runs` control runs come first (they fix the categories); the control then
    grows while a test needs more (by a tenth at least), up to run.max_runs, or `max_runs` if less."""

    commit: str  # a ref, or GOOD_END ("{good}"): the good end of the bisect that uses it
    runs: int = Field(default=200, gt=0)  # control runs before the first test
    max_runs: int | None = Field(default=None, gt=0)  # the most it runs (default run.max_runs)
    # set when GOOD_END was bound to a job's good end (reports say "like the good end")
    good_end: bool = False

    @property
    def unbound(self) -> bool:
        """`commit` is still GOOD_END: no job has said which commit its good end is."""
        return self.commit == GOOD_END


class ReferenceConfig(Strict):
    """The distribution a correct build produces: written (`probs`), computed (`compute`), or
    estimated from a control sample (`control`); for a number, its exact `mean`. `reference:
    good` is short for a control sample at the job's good end (`control: {commit: "{good}"}`):
    "like the good end"."""

    probs: dict[str, float] | None = None
    condition_prob: float | None = Field(default=None, gt=0, le=1)
    compute: ComputedReference | None = None
    control: ControlReference | None = None
    mean: float | None = None  # statistic.kind mean: the exact mean a correct build gives

    @field_validator("probs")
    @classmethod
    def _probs(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        if value is None:
            return value
        if not value:
            raise ValueError("probs is empty")
        if any(p < 0 for p in value.values()):
            raise ValueError("probabilities must be non-negative")
        total = sum(value.values())
        if abs(total - 1.0) > 1e-3:
            raise ValueError(f"probabilities sum to {total:.6f}, not 1")
        return value

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, str):
            if data.strip() != "good":
                raise ValueError(f"{data!r} is not a reference: write `good` (like the good end) or a mapping")
            return {"control": {"commit": GOOD_END}}
        return data

    @model_validator(mode="after")
    def _one_way(self) -> "ReferenceConfig":
        if sum(x is not None for x in (self.probs, self.compute, self.control, self.mean)) != 1:
            raise ValueError(
                "give exactly one of reference.probs, reference.compute, reference.control or reference.mean"
            )
        if self.mean is not None and not math.isfinite(self.mean):
            raise ValueError(f"reference.mean must be a finite number, got {self.mean!r}")
        if self.probs is None and self.condition_prob is not None:
            raise ValueError("condition_prob goes with reference.probs only (it is computed or measured otherwise)")
        return self


class StatTestConfig(Strict):
    """Error rates of one verdict: alpha = P(false BAD), beta = P(false GOOD beyond tolerance).

    A commit is GOOD when its distribution is within `tolerance` (total variation) of the
    reference and BAD when it departs by more than `eta`; between the two (the indifference
    zone) either answer is allowed. `eta` defaults to 0.3 × tolerance: a program that prints a
    stray token in 2% of runs is not BAD for it. For a number (statistic.kind mean) both are in
    the number's units, or fractions of the reference's mean with `relative`; for a timing
    (kind time) fractions always: 0.05 is "within 5% of the control's time"."""

    alpha: float = Field(default=5e-4, gt=0, lt=0.5)
    beta: float = Field(default=5e-4, gt=0, lt=0.5)
    tolerance: float = Field(default=0.1, gt=0)  # GOOD: TV below this (a number: its distance)
    eta: float | None = Field(default=None, ge=0)  # BAD: TV above this (default 0.3 × tolerance)
    relative: bool = False  # kind mean: tolerance and eta as fractions of the reference's mean
    confidence: float = Field(default=0.99, gt=0.5, lt=1)  # whole-bisect target
    model_runs: int = Field(default=MODEL_RUNS, gt=0, le=SEED_BLOCK)  # the bad-model stage's budget
    search_runs: int = Field(default=SEARCH_RUNS, gt=0)  # the sticky search's budget (then: ambiguous)
    # runs the confirmation's re-tests against the reference may take, each (default: the
    # parent 3 × what the working end's GOOD took, at least 200; the culprit 2 × run.max_runs)
    retest_runs: int | None = Field(default=None, gt=0, le=SEED_BLOCK)
    # when the broken end is tested: first (before the search: an early error if it does not
    # reproduce), last (only if the answer rests on it: its build saved), auto (last when the
    # working end's build took 20 s or more: core.policy.broken_end_last)
    broken_end: Literal["auto", "first", "last"] = "auto"

    @model_validator(mode="after")
    def _zone(self) -> "StatTestConfig":
        if self.indifference >= self.tolerance:
            raise ValueError(f"eta ({self.indifference:g}) must be below tolerance ({self.tolerance:g})")
        return self

    @property
    def indifference(self) -> float:
        """η: how far a commit must depart from the reference to be BAD."""
        return 0.3 * self.tolerance if self.eta is None else self.eta


class GitHubConfig(Strict):
    """Where and how the bot talks to GitHub (optional: without it the bot only dry-runs).

    Secrets are never in the file: ``token_env`` and ``webhook_secret_env`` name environment
    variables. Paths (``configs_dir``, ``private_key``, ``dry_run_file``) are relative to the
    config file.
    """

    repo: str = Field(pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")  # owner/name of the issues
    api_url: str = "https://api.github.com"
    html_url: str = "https://github.com"  # commit/PR links: {html_url}/{repo}/commit/{sha}
    token_env: str = "GITHUB_TOKEN"
    app_id: str | None = None
    private_key: str | None = None
    installation_id: int | None = None
    bot_login: str | None = None  # whose comments are ours (default: asked from GitHub)
    webhook_secret_env: str = "BISECTBOT_WEBHOOK_SECRET"
    configs_dir: str | None = None  # `/bisect config=<name>` reads <configs_dir>/<name>.yaml
    issue: int | None = Field(default=None, gt=0)  # default issue for watch/check
    default_ref: str = "HEAD"  # what `/check` without ref= and `check` test (e.g. master)
    dry_run_file: str | None = None  # dry run writes here (default: stdout)
    progress_interval: float = Field(default=30.0, ge=0)  # min seconds between progress edits
    poll_interval: float = Field(default=60.0, gt=0)  # watch: seconds between polls
    retry_give_up_after: float = Field(default=120.0, gt=0)
    retry_backoff: float = Field(default=1.0, ge=0)
    retry_max_wait: float = Field(default=30.0, ge=0)
    call_deadline: float = Field(default=60.0, gt=0)  # one attempt: connect + the whole answer


class UntrustedConfig(Strict):
    """Limits for untrusted code (a pull request's head, `check --ref pull/<N>/head`), built and
    run under bubblewrap in a throwaway box (processes.sandbox)."""

    cpu_seconds: int = Field(default=1800, gt=0)  # CPU time per process (RLIMIT_CPU)
    memory_mb: int = Field(default=8192, gt=0)  # address space per process (RLIMIT_AS)
    file_size_mb: int = Field(default=1024, gt=0)  # largest file a process may write (RLIMIT_FSIZE)
    processes: int = Field(default=1024, gt=0)  # processes and threads of the sandbox's uid (RLIMIT_NPROC)
    disk_mb: int = Field(default=8192, gt=0)  # the whole box (tree, build, binaries, run files)
    # files in the tree exported for it (a tree past this or disk_mb is refused before it is written)
    max_files: int = Field(default=100_000, gt=0)
    output_mb: int = Field(default=16, gt=0)  # what is read back of one process's output
    scratch: Path | None = None  # where boxes are made (default: the temp directory)


class PresetNumber(Strict):
    """A number the program prints that `init --llama PROGRAM --statistic mean|time` can judge
    (`preset.numbers`): where it is (`stream`, `extract` with the number in group 1, across the
    eras the preset spans), its kind, and the test's defaults for it."""

    kind: Literal["mean", "time"]
    stream: Literal["stdout", "stderr"] = "stdout"
    extract: str
    bounds: tuple[float, float] | None = None
    tolerance: float = Field(gt=0)
    what: str = ""  # in words, for the config's header

    @field_validator("extract")
    @classmethod
    def _regex(cls, value: str) -> str:
        try:
            re.compile(value)
        except re.error as exc:
            raise ValueError(f"extract: not a regular expression: {exc}") from None
        return value


class PresetInfo(Strict):
    """What makes a config a preset (configs/llama/): the program's name and other names, the
    prompt its argv (or its server request) writes, and what `bisectbot init --llama PROGRAM …
    -- ARGS` replaces with the user's own: the run of sampling arguments in every command
    variant (`args`), or for a server the sampling fields of its request (`body_args`); the
    numbers it prints that can be judged instead of its tokens (`numbers`, by name)."""

    program: str
    aliases: list[str] = Field(default_factory=list)
    prompt: str
    args: list[str] = Field(default_factory=list)
    body_args: list[str] = Field(default_factory=list)
    numbers: dict[str, PresetNumber] = Field(default_factory=dict)


class StorageConfig(Strict):
    """Size caps of the state directory, applied after every bisect and by `bisectbot gc`: the
    least recently used kept binaries, build directories and logs beyond them are removed (a
    removed binary is rebuilt when needed; the database's builds, runs and verdicts stay).
    Unset: no cap."""

    # Where the state directory is (relative to the config file). Unset: one per config name and
    # repository under $XDG_CACHE_HOME/bisectbot (~/.cache/bisectbot). Every command finds it there.
    state_dir: str | None = None
    max_binaries: int | None = Field(default=None, ge=0)  # kept per-commit binary directories
    max_build_dirs: int | None = Field(default=None, ge=0)  # persistent cmake build directories
    max_log_mb: float | None = Field(default=None, ge=0)  # build and server logs, in all
    max_size_mb: float | None = Field(default=None, ge=0)  # binaries + build directories + logs

    @property
    def any(self) -> bool:
        return any(v is not None for v in (self.max_binaries, self.max_build_dirs, self.max_log_mb, self.max_size_mb))


class ArmConfig(Strict):
    """A second path to the same statistic at the same commit, with a verdict of its own: a
    server (llama-server -md) started once per commit and asked once per seed over HTTP.

    Like the main program it may have build variants (`build_variants`, or one `targets` +
    `binaries`) and command variants (`serve_variants`, or one `serve` argv, chosen by the
    server's --help); at a commit where none fits, the arm is "not applicable" there."""

    targets: list[str] | None = Field(default=None, min_length=1)
    binaries: dict[str, list[str]] | None = Field(default=None, min_length=1)
    build_variants: list[BuildVariant] | None = Field(default=None, min_length=1)
    # argv; placeholders: binaries, {port}, {fixtures}, {config_dir}
    serve: list[str] | None = Field(default=None, min_length=1)
    serve_variants: list[Variant] | None = Field(default=None, min_length=1)
    help_args: list[str] | None = None  # default ["--help"]
    health: str = "/health"
    startup_timeout: float = Field(default=180, gt=0)
    path: str = "/completion"
    body: dict[str, Any]  # JSON request; the string "{seed}" becomes the seed
    field: str = "content"  # the generated text in the JSON response
    parse: ParseConfig = ParseConfig()
    timeout: float = Field(default=60, gt=0)  # per request
    jobs: int = Field(default=1, ge=1)  # requests in flight

    _names = field_validator("binaries")(classmethod(lambda cls, v: _check_binaries(v)))

    @model_validator(mode="after")
    def _shape(self) -> "ArmConfig":
        _build_choices(self.targets, self.binaries, self.build_variants, "targets", "binaries", "build_variants")
        if (self.serve is None) == (self.serve_variants is None):
            raise ValueError("give serve, or serve_variants")
        known = {"port", "fixtures", "config_dir"} | set(self.build_choices[0].binaries)
        for v, variant in enumerate(self.serve_choices):
            check_placeholders(variant.argv, "serve" if self.serve is not None else f"serve_variants[{v}].argv", known)
        return self

    @property
    def build_choices(self) -> list[BuildVariant]:
        return _build_choices(self.targets, self.binaries, self.build_variants)

    @property
    def serve_choices(self) -> list[Variant]:
        return self.serve_variants if self.serve_variants is not None else [Variant(argv=self.serve or [])]


def placeholders_in(template: str, where: str = "template") -> list[str]:
    """Names of `{placeholders}` in one argv element; `{{`/`}}` are literal braces."""
    try:
        return [field for _, field, _, _ in string.Formatter().parse(template) if field is not None]
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def check_placeholders(argv: Sequence[str], where: str, known: AbstractSet[str]) -> None:
    """Every `{placeholder}` in an argv must be one the runner fills: a typo fails at load time."""
    for i, arg in enumerate(argv):
        for name in placeholders_in(arg, f"{where}[{i}]"):
            if name not in known:
                raise ValueError(f"{where}[{i}]: unknown placeholder {{{name}}} (known: {', '.join(sorted(known))})")
