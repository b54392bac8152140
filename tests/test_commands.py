"""bisectbot.commands: pure parsing, validation and authorisation of comment commands."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bisectbot.github.commands import (
    BisectCommand,
    CancelCommand,
    CheckCommand,
    Refusal,
    find_command_line,
    parse_comment,
    validate_config_name,
    validate_ref,
)


@pytest.mark.parametrize(
    "body, expected",
    [
        ("/bisect good=b4000 bad=b4100", BisectCommand("b4000", "b4100")),
        ("/bisect bad=master good=v1.2.3 config=cpu-q4_0.yaml", BisectCommand("v1.2.3", "master", "cpu-q4_0.yaml")),
        (
            "Please try this:\n\n  /bisect good=0123abcd bad=origin/master\n\nthanks",
            BisectCommand("0123abcd", "origin/master"),
        ),
        ("/BISECT GOOD=a1b2c3d BAD=refs/tags/b5000", BisectCommand("a1b2c3d", "refs/tags/b5000")),
        (
            "/bisect good=b4000 bad=b4100 reference=good",
            BisectCommand("b4000", "b4100", None, "good"),
        ),
        ("/bisect good=b4000 bad=b4100 reference=b3990", BisectCommand("b4000", "b4100", None, "b3990")),
        ("/check", CheckCommand()),
        ("/check ref=feature/sampler+fix", CheckCommand("feature/sampler+fix")),
        ("/cancel", CancelCommand()),
    ],
)
def test_accepted_commands(body: str, expected: object) -> None:
    assert parse_comment(body, "COLLABORATOR") == expected


@pytest.mark.parametrize("association", ["OWNER", "MEMBER", "COLLABORATOR", "member"])
def test_authorised_associations(association: str) -> None:
    assert parse_comment("/cancel", association) == CancelCommand()


@pytest.mark.parametrize(
    "association", ["CONTRIBUTOR", "FIRST_TIMER", "FIRST_TIME_CONTRIBUTOR", "MANNEQUIN", "NONE", "", None]
)
def test_unauthorised_author_is_refused_politely(association: str | None) -> None:
    got = parse_comment("/bisect good=$(touch x) bad=b2", association, author="stranger")
    assert isinstance(got, Refusal)
    assert got.reason.startswith("Sorry @stranger") and "owners, members and collaborators" in got.reason
    assert "\n" not in got.reason and "$" not in got.reason  # validation details are not leaked


def test_refusal_does_not_ping_odd_logins() -> None:
    got = parse_comment("/cancel", "NONE", author="x y @everyone")
    assert isinstance(got, Refusal) and "@" not in got.reason


@pytest.mark.parametrize(
    "body",
    [
        "no command here",
        "I ran /bisect good=a bad=b yesterday",  # not at the start of a line
        "> /bisect good=a bad=b",  # quoted
        "```\n/bisect good=a bad=b\n```",  # code block
        "/bisecting is fun",
        "",
    ],
)
def test_no_command(body: str) -> None:
    assert parse_comment(body, "OWNER") is None
    assert find_command_line(body) is None


@pytest.mark.parametrize(
    "body, fragment",
    [
        ("/bisect good=$(touch x) bad=b2", "contains '$'"),
        ("/bisect good=--upload-pack=touch${IFS}x bad=b2", "starts with '-'"),
        ("/bisect good=b1 bad=--upload-pack=/tmp/x", "starts with '-'"),
        ("/check ref=-x", "starts with '-'"),
        ("/check ref=`id`", "backtick"),
        ("/check ref=a;rm", "';'"),
        ("/check ref=a|b", "'|'"),
        ("/check ref=a&&b", "'&'"),
        ("/check ref=a..b", "'..'"),
        ("/check ref=abc123..def456", "'..'"),  # ranges make no sense for a single ref
        ("/check ref=a\x07b", "control character"),
        ("/check ref=.hidden", "starts with '.'"),
        ("/check ref=x/.y", "starts with '.'"),
        ("/check ref=main.lock", "'.lock'"),
        ("/check ref=main.", "ends with '.'"),
        ("/check ref=a//b", "empty path component"),
        ("/check ref=/a", "empty path component"),
        ("/check ref=HEAD~1", "'~'"),
        ("/check ref=v1^", "'^'"),
        ("/check ref=a:b", "':'"),
        ("/check ref=@{-1}", "'@'"),
        ("/check ref=", "empty ref"),
        ("/check ref=" + "a" * 300, "longer than"),
        ("/bisect good=a bad=a", "same ref"),
        ("/bisect good=a", "bad= missing"),
        ("/bisect good=a bad=b config=../etc/passwd", "config name"),
        ("/bisect good=a bad=b config=..", "config name"),
        ("/bisect good=a bad=b extra", "don't understand"),
        ("/bisect good=a good=b bad=c", "twice"),
        ("/cancel now", "takes no arguments"),
    ],
)
def test_refused_commands(body: str, fragment: str) -> None:
    got = parse_comment(body, "OWNER")
    assert isinstance(got, Refusal), got
    assert fragment in got.reason
    assert got.reason.startswith("Sorry") and "\n" not in got.reason


@pytest.mark.parametrize("ref", ["a\u00a0b", "a b", "a\tb", "a\u2003b"])
def test_whitespace_in_refs(ref: str) -> None:
    assert "whitespace" in (validate_ref(ref) or "")


def test_refusal_quotes_input_safely() -> None:
    got = parse_comment("/check ref=`@team`", "OWNER")
    assert isinstance(got, Refusal)
    inner = re.findall(r"`([^`]*)`", got.reason)
    assert inner and all("`" not in s for s in inner)


def test_sha_range_only_where_allowed() -> None:
    assert validate_ref("abc1234..def5678", allow_range=True) is None
    assert validate_ref("abc1234...def5678", allow_range=True) is None
    assert validate_ref("main..dev", allow_range=True) is not None
    assert validate_ref("abc1234..def5678") is not None


@pytest.mark.parametrize(
    "ref",
    [
        "b4567",
        "master",
        "origin/master",
        "refs/tags/v1.0",
        "0" * 40,
        "a" * 64,
        "release/2024.05",
        "user-branch_1",
        "pr/123/head",
    ],
)
def test_valid_refs(ref: str) -> None:
    assert validate_ref(ref) is None


@pytest.mark.parametrize("name", ["cpu", "cuda-q4_0", "a.b.c", "X_1"])
def test_valid_config_names(name: str) -> None:
    assert validate_config_name(name) is None


@pytest.mark.parametrize("name", ["", "a/b", "..", ".", "a b", "$(x)", "ü"])
def test_invalid_config_names(name: str) -> None:
    assert validate_config_name(name) is not None


def _git_accepts(ref: str) -> bool:
    if re.fullmatch(r"[0-9a-fA-F]{4,64}", ref):
        return True
    r = subprocess.run(["git", "check-ref-format", "--allow-onelevel", ref], capture_output=True)
    return r.returncode == 0


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab09/.-_+@{}~^:?*[\\ $`;|&()'\"\n\t\x00x")), min_size=1, max_size=12))
def test_every_accepted_ref_is_a_safe_git_ref(ref: str) -> None:
    """Whatever we accept, git accepts too, and it can never look like an option or shell."""
    if validate_ref(ref) is None:
        assert _git_accepts(ref), ref
        assert not ref.startswith("-")
        assert not set(ref) & set("$`;|&() \t\n'\"\\")


def test_hostile_refs_never_reach_a_shell(tmp_path: Path) -> None:
    """The classic payloads are refused before anything could run them."""
    marker = tmp_path / "pwned"
    for payload in [f"$(touch {marker})", f"`touch {marker}`", f"--upload-pack=touch {marker}", f"x;touch {marker}"]:
        got = parse_comment(f"/bisect good={payload} bad=b2", "OWNER")
        assert isinstance(got, Refusal), payload
    assert not marker.exists()


# -- pull requests: only pull/<N>/head --------------------------------------------------------------
def test_check_pull_request_head_is_accepted() -> None:
    assert parse_comment("/check ref=pull/7/head", "MEMBER") == CheckCommand("pull/7/head")
    assert parse_comment("/check ref=pull/1234567890/head", "OWNER") == CheckCommand("pull/1234567890/head")


@pytest.mark.parametrize(
    "ref, fragment",
    [
        ("pull/0/head", "only as pull/<N>/head"),
        ("pull/07/head", "only as pull/<N>/head"),
        ("pull/7/merge", "only as pull/<N>/head"),
        ("pull/x/head", "only as pull/<N>/head"),
        ("pull/7", "only as pull/<N>/head"),
        ("pull/7/head/x", "only as pull/<N>/head"),
        ("pull/12345678901/head", "only as pull/<N>/head"),
        ("refs/pull/7/head", "only as pull/<N>/head"),
        ("Pull/7/head", "only as pull/<N>/head"),
        ("bisectbot/pull/7", "only as pull/<N>/head"),
        ("refs/bisectbot/pull/7", "only as pull/<N>/head"),
        ("pull/7/head;rm", "';'"),
        ("pull/7/head~1", "'~'"),
        ("pull/-7/head", "only as pull/<N>/head"),
    ],
)
def test_other_pull_request_spellings_are_refused(ref: str, fragment: str) -> None:
    got = parse_comment(f"/check ref={ref}", "OWNER")
    assert isinstance(got, Refusal), got
    assert fragment in got.reason and got.reason.startswith("Sorry") and "\n" not in got.reason
    # the same rule for /bisect: a pull request's commits are never bisected as trusted code
    got = parse_comment(f"/bisect good=main bad={ref}", "OWNER")
    assert isinstance(got, Refusal) and fragment in got.reason


def test_outsider_check_of_a_pull_request_is_refused() -> None:
    got = parse_comment("/check ref=pull/7/head", "CONTRIBUTOR", author="stranger")
    assert isinstance(got, Refusal) and "owners, members and collaborators" in got.reason


def test_pull_request_heads_are_not_bisected() -> None:
    for body in ("/bisect good=main bad=pull/7/head", "/bisect good=pull/7/head bad=main"):
        got = parse_comment(body, "OWNER")
        assert isinstance(got, Refusal) and "/check ref=pull/<N>/head" in got.reason


@pytest.mark.parametrize(
    "body, why",
    [
        ("/bisect good=a1b2c3d bad=main reference=--upload-pack=x", "not allowed"),
        ("/bisect good=a1b2c3d bad=main reference=pull/7/head", "untrusted code"),
        ("/bisect good=a1b2c3d bad=main reference=good reference=config", "given twice"),
    ],
)
def test_a_bad_reference_is_refused_in_one_line(body: str, why: str) -> None:
    got = parse_comment(body, "OWNER")
    assert isinstance(got, Refusal) and why in got.reason and "\n" not in got.reason
