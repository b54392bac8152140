"""What a job was asked (pure data): the arguments the jobs table keeps beside each job, typed.

A job is planned (jobs.lifecycle), registered with these arguments, and ends with its result;
whoever reads a job back (`bisectbot log`, the bot rendering a result after a restart) reads
them here. The refs are the ones the user gave (a job runs on their shas): the arguments are
their only stored home. The JSON form is the one every schema of the jobs table has stored
(`paths`, `also`, `all_commits` and `skip` only when set), so old rows read as they are.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import ClassVar, NotRequired, TypedDict, Union

from bisectbot.statistics.outcome import Find


class TestArgsJson(TypedDict):
    commit: str
    ref: str
    config: str


class BisectArgsJson(TypedDict):
    good: str
    bad: str
    good_ref: str
    bad_ref: str
    find: str
    strategy: str
    config: str
    paths: NotRequired[list[str]]
    also: NotRequired[list[str]]
    all_commits: NotRequired[bool]
    skip: NotRequired[list[str]]


@dataclass(frozen=True)
class TestArgs:
    """A test of one commit (`bisectbot test`, a check of a ref or of a pull request's head)."""

    kind: ClassVar[str] = "test"
    __test__: ClassVar[bool] = False  # not a pytest class, whatever its name

    commit: str
    ref: str  # as the user gave it
    config: str  # the config's path, as the command named it

    def to_json(self) -> TestArgsJson:
        return {"commit": self.commit, "ref": self.ref, "config": self.config}

    @classmethod
    def from_json(cls, data: TestArgsJson) -> TestArgs:
        return cls(str(data["commit"]), str(data["ref"]), str(data["config"]))


@dataclass(frozen=True)
class BisectArgs:
    """A bisect between two commits, with the refs the user gave for them."""

    kind: ClassVar[str] = "bisect"

    good: str
    bad: str
    good_ref: str
    bad_ref: str
    find: Find
    strategy: str  # auto | plain | sticky, as asked
    config: str
    paths: tuple[str, ...] = ()  # --paths
    also: tuple[str, ...] = ()  # --also-inputs
    all_commits: bool = False  # --all-commits: the line is not narrowed
    skip: tuple[str, ...] = ()  # --skip / --exclude, resolved

    def to_json(self) -> BisectArgsJson:
        out: BisectArgsJson = {
            "good": self.good,
            "bad": self.bad,
            "good_ref": self.good_ref,
            "bad_ref": self.bad_ref,
            "find": self.find.value,
            "strategy": self.strategy,
            "config": self.config,
        }
        if self.paths:
            out["paths"] = list(self.paths)
        if self.also:
            out["also"] = list(self.also)
        if self.all_commits:
            out["all_commits"] = True
        if self.skip:
            out["skip"] = list(self.skip)
        return out

    @classmethod
    def from_json(cls, data: BisectArgsJson) -> BisectArgs:
        return cls(
            good=str(data["good"]),
            bad=str(data["bad"]),
            good_ref=str(data["good_ref"]),
            bad_ref=str(data["bad_ref"]),
            find=Find(data["find"]),
            strategy=str(data["strategy"]),
            config=str(data["config"]),
            paths=tuple(data.get("paths", ())),
            also=tuple(data.get("also", ())),
            all_commits=bool(data.get("all_commits", False)),
            skip=tuple(data.get("skip", ())),
        )


JobArgs = Union[TestArgs, BisectArgs]


def load_args(kind: str, text: str) -> JobArgs:
    """A jobs-table row's arguments (their JSON text), typed by the job's kind; KeyError,
    ValueError or TypeError when they do not decode (a damaged row)."""
    if kind == BisectArgs.kind:
        return BisectArgs.from_json(json.loads(text))
    if kind == TestArgs.kind:
        return TestArgs.from_json(json.loads(text))
    raise ValueError(f"a job of unknown kind {kind!r}")
