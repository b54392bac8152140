"""A job's arguments, typed: the JSON the jobs table has always stored reads back as records and
is written in the same form."""

from __future__ import annotations

import json

import pytest

from bisectbot.records.jobargs import BisectArgs, TestArgs, load_args
from bisectbot.statistics.outcome import Find

GOOD, BAD = "968be871ad7bd0ad6c3b0b31793b55238c1218f8", "9c7ae0ddfb803ad97f18f93f11c6b526b5d109ed"


@pytest.mark.parametrize(
    "args",
    [
        TestArgs(GOOD, "main", "configs/check.yaml"),
        TestArgs(GOOD, "pull/8/head", "/abs/check.yaml"),
        BisectArgs(GOOD, BAD, GOOD[:12], "main", Find.BAD, "auto", "c.yaml"),
        BisectArgs(
            GOOD,
            BAD,
            "v1",
            "v2",
            Find.FIXED,
            "sticky",
            "c.yaml",
            paths=("src/a.c", "include/"),
            also=("data/",),
            all_commits=True,
            skip=("1" * 40, "2" * 40),
        ),
    ],
)
def test_job_args_round_trip_through_their_stored_json(args: TestArgs | BisectArgs) -> None:
    text = json.dumps(args.to_json())
    assert load_args(args.kind, text) == args


def test_rows_as_every_schema_stored_them_read_back() -> None:
    """The args of tests/data/state-b6ae5a0 (the oldest schema), written by that bisectbot."""
    bisect = (
        '{"good": "968be871ad7bd0ad6c3b0b31793b55238c1218f8", "bad": "9c7ae0ddfb803ad97f18f93f11c6b526b5d109ed", '
        '"good_ref": "968be871ad7bd0ad6c3b0b31793b55238c1218f8", "bad_ref": "main", "find": "bad", '
        '"strategy": "auto", "config": "/tmp/fx/demo/specdemo.yaml"}'
    )
    assert load_args("bisect", bisect) == BisectArgs(
        GOOD, BAD, GOOD, "main", Find.BAD, "auto", "/tmp/fx/demo/specdemo.yaml"
    )
    test = f'{{"commit": "{GOOD}", "ref": "{GOOD}", "config": "/tmp/fx/demo/variants.yaml"}}'
    assert load_args("test", test) == TestArgs(GOOD, GOOD, "/tmp/fx/demo/variants.yaml")


def test_the_stored_form_is_unchanged() -> None:
    """Optional keys only when set, in the order the dict-built arguments had them."""
    plain = BisectArgs(GOOD, BAD, "v1", "main", Find.BAD, "auto", "c.yaml")
    assert list(plain.to_json()) == ["good", "bad", "good_ref", "bad_ref", "find", "strategy", "config"]
    full = BisectArgs(GOOD, BAD, "v1", "main", Find.BAD, "auto", "c.yaml", ("p",), ("a",), True, ("s",))
    assert list(full.to_json())[7:] == ["paths", "also", "all_commits", "skip"]
    assert list(TestArgs(GOOD, "main", "c.yaml").to_json()) == ["commit", "ref", "config"]


@pytest.mark.parametrize(
    "kind, text",
    [("bisect", '{"good": "a"}'), ("test", "[]"), ("gc", "{}"), ("bisect", "not json")],
)
def test_args_that_do_not_decode_raise_what_the_store_calls_damage(kind: str, text: str) -> None:
    with pytest.raises((KeyError, ValueError, TypeError)):
        load_args(kind, text)
