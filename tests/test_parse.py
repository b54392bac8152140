"""stdout → tokens → observation, including the cut-short outputs that must be rerun."""

from __future__ import annotations

import pytest

from bisectbot.config.sections import Condition, Outcome, ParseConfig, StatisticConfig
from bisectbot.judge.parse import Incomplete, Unparsable, observe, parse_output, parse_tokens

LLAMA = ParseConfig(prefix="bcdbc", split="chars", expect_tokens=4, eos="h")


def test_complete_output() -> None:
    assert parse_tokens("bcdbcfega\n", LLAMA) == ("f", "e", "g", "a")


def test_eos_ends_early() -> None:
    assert parse_tokens("bcdbcfh\n", LLAMA) == ("f", "h")


@pytest.mark.parametrize("stdout", ["", "\n", "bcd", "bcdbc", "bcdbcfe"])
def test_cut_short_is_incomplete(stdout: str) -> None:
    with pytest.raises(Incomplete):
        parse_tokens(stdout, LLAMA)


def test_garbage_is_unparsable() -> None:
    with pytest.raises(Unparsable):
        parse_tokens("error: model not found\n", LLAMA)
    with pytest.raises(Unparsable):
        parse_tokens("bcdbcabcdefg\n", LLAMA)


def test_regex_and_whitespace_splits() -> None:
    assert parse_tokens("tok: 1 2 3", ParseConfig(prefix="tok:", split="whitespace")) == ("1", "2", "3")
    cfg = ParseConfig(split="regex", pattern=r"<(\w+)>")
    assert parse_tokens("<a><bb> <c>", cfg) == ("a", "bb", "c")


def test_observe_condition_and_outcome() -> None:
    stat = StatisticConfig(condition=Condition(position=0, token="f"), outcome=Outcome(position=1))
    assert observe(("f", "e", "a", "b"), stat).outcome == "e"
    assert not observe(("g", "e"), stat).met_condition
    assert observe(("f",), stat).outcome is None


SPEC = ParseConfig(prefix="bcdbc", split="chars", min_tokens=2, eos="h", complete_suffix="\n\n\n\n")


def test_llama_speculative_complete_output_has_the_trailing_newlines() -> None:
    # measured on llama.cpp 0.3.36: "\n\nbcdbc<generated>\n\n\n\n"; -n 4 prints 4..8 tokens
    assert parse_tokens("\n\nbcdbcfdgea\n\n\n\n", SPEC) == ("f", "d", "g", "e", "a")
    assert parse_tokens("\n\nbcdbcfdhgf\n\n\n\n", SPEC) == ("f", "d", "h")


@pytest.mark.parametrize("stdout", ["", "\n\n", "\n\nbcdbcfdge", "\n\nbcdbcfdgea\n\n", "\n\nbcdbcf\n\n\n\n"])
def test_llama_speculative_cut_outputs_are_incomplete(stdout: str) -> None:
    with pytest.raises(Incomplete):
        parse_tokens(stdout, SPEC)


READ_CUT = SPEC.model_copy(update={"cut_output": "read"})
STAT = StatisticConfig(condition=Condition(position=0, token="f"), outcome=Outcome(position=1))


@pytest.mark.parametrize(
    ("stdout", "tokens"),
    [
        ("\n\nbcdbcfdgea\n\n\n\n", ("f", "d", "g", "e", "a")),  # complete: read whole
        ("\n\nbcdbcfdgea\n\n", ("f", "d", "g", "e")),  # cut: the last token may be split, dropped
        ("\n\nbcdbcfdg", ("f", "d")),  # two whole tokens are enough (min_tokens)
        ("\n\nbcdbcfh", ("f", "h")),  # the EOS, one character: whole, generation over
        ("\n\nbcdbch", ("h",)),
        ("\n\nbcdbcfdh", ("f", "d", "h")),
    ],
)
def test_a_cut_output_that_shows_enough_is_read(stdout: str, tokens: tuple[str, ...]) -> None:
    """cut_output: read: what a cut output shows for sure (its start, less a last token the cut
    may have split) is read when it is enough; the observation is the complete output's."""
    assert parse_tokens(stdout, READ_CUT) == tokens
    full = parse_tokens("\n\nbcdbcfdgea\n\n\n\n", SPEC)
    if tokens[:2] == ("f", "d"):
        assert observe(tokens, STAT) == observe(full, STAT)


@pytest.mark.parametrize("stdout", ["", "\n\n", "\n\nbcd", "\n\nbcdbc", "\n\nbcdbcf", "\n\nbcdbcfd", "\n\nbcdbcfd\n"])
def test_a_cut_output_that_shows_too_little_is_still_rerun(stdout: str) -> None:
    with pytest.raises(Incomplete):
        parse_tokens(stdout, READ_CUT)


def test_reading_cut_output_needs_to_know_cut_and_enough() -> None:
    with pytest.raises(ValueError, match="cut_output: read needs complete_suffix"):
        ParseConfig(prefix="bcdbc", min_tokens=2, cut_output="read")
    with pytest.raises(ValueError, match="cut_output: read needs"):
        ParseConfig(prefix="bcdbc", complete_suffix="\n", expect_tokens=2, cut_output="read")


def test_fullmatch_tells_one_output_format_from_another() -> None:
    """An old-format parse (tokens alone) refuses the new format's echoed prompt and newlines,
    and the new one refuses the old: a variant made for the other era's output gives way."""
    old = ParseConfig(fullmatch="[a-h]+", min_tokens=2, eos="h")
    new = ParseConfig(prefix="bcdbc", min_tokens=2, eos="h", complete_suffix="\n\n\n\n")
    assert parse_tokens("gehg", old) == ("g", "e", "h")
    with pytest.raises(Unparsable, match="not of the form"):
        parse_tokens("\n\nbcdbcgehg\n\n\n\n", old)
    with pytest.raises(Unparsable, match="does not start with the prompt"):
        parse_tokens("gehg\n\n\n\n", new)


def test_the_generated_text_can_be_one_line_of_stderr() -> None:
    cfg = ParseConfig(stream="stderr", extract=r"(?m)^bcdbc([a-h]*)$", min_tokens=3)
    err = "llm_load_print_meta: x\n\nbcdbcfcf\n\nmain: decoded 3 tokens\n"
    assert parse_output("ignored stdout", err, cfg) == ("f", "c", "f")
    with pytest.raises(Unparsable, match="no match of parse.extract"):
        parse_output("bcdbcfcf", "no such line", cfg)
    with pytest.raises(ValueError, match="not a regular expression"):
        ParseConfig(extract="(")


def test_new_parse_keys_at_their_defaults_keep_old_run_keys() -> None:
    assert set(ParseConfig().key()) == {
        "prefix",
        "split",
        "pattern",
        "expect_tokens",
        "min_tokens",
        "eos",
        "complete_suffix",
    }
    assert ParseConfig(stream="stderr").key()["stream"] == "stderr"
