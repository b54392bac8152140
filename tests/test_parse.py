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
    with pytest.raises(Unparsable, match="does not match parse \\(fullmatch"):
        parse_tokens("\n\nbcdbcgehg\n\n\n\n", old)
    with pytest.raises(Unparsable, match="does not match parse \\(prefix 'bcdbc'\\)"):
        parse_tokens("gehg\n\n\n\n", new)


def test_the_generated_text_can_be_one_line_of_stderr() -> None:
    cfg = ParseConfig(stream="stderr", extract=r"(?m)^bcdbc([a-h]*)$", min_tokens=3)
    err = "llm_load_print_meta: x\n\nbcdbcfcf\n\nmain: decoded 3 tokens\n"
    assert parse_output("ignored stdout", err, cfg) == ("f", "c", "f")
    with pytest.raises(Unparsable, match="does not match parse \\(extract .*: no match in stderr\\)"):
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
    assert ParseConfig(json_field="pick").key()["json_field"] == "pick"


def test_an_output_the_parse_cannot_read_is_quoted_with_the_key_it_fails() -> None:
    """Issue 48: `pick: WORD` read as characters with expect_tokens 3 (what init once proposed)
    fails on every word that is not three letters long, and the message says so, quoting the
    output; the words read as words fail the other way round."""
    chars = ParseConfig(prefix="pick: ", split="chars", expect_tokens=3)
    assert parse_tokens("pick: red\n", chars) == ("r", "e", "d")
    with pytest.raises(Unparsable) as longer:
        parse_tokens("pick: yellow\n", chars)
    assert str(longer.value) == "'pick: yellow' does not match parse (expect_tokens 3: got 6 tokens)"
    words = ParseConfig(prefix="pick: ", split="whitespace", expect_tokens=3)
    with pytest.raises(Incomplete) as shorter:  # fewer tokens than expected: cut short, rerun
        parse_tokens("pick: yellow\n", words)
    assert str(shorter.value) == "'pick: yellow' does not match parse (expect_tokens 3: got 1 token)"
    with pytest.raises(Unparsable) as other:
        parse_tokens("choice: red\n", words)
    assert str(other.value) == "'choice: red' does not match parse (prefix 'pick: ')"
    with pytest.raises(Incomplete, match="^an empty output does not match parse"):
        parse_tokens("\n", words)


def test_a_quoted_output_is_inert_and_cut() -> None:
    """What a program printed is untrusted: escape sequences and bidirectional overrides are
    shown escaped, never written to the terminal as they are; a long output is cut."""
    cfg = ParseConfig(prefix="pick: ", split="whitespace", expect_tokens=1)
    with pytest.raises(Unparsable) as hostile:
        parse_tokens("\x1b]8;;http://x\x07pick\u202e: red", cfg)
    text = str(hostile.value)
    assert "\x1b" not in text and "\u202e" not in text and "\\x1b" in text and "\\u202e" in text
    with pytest.raises(Unparsable) as long:
        parse_tokens("x" * 500, cfg)
    assert len(str(long.value)) < 120 and "…' does not match parse" in str(long.value)


@pytest.mark.parametrize(
    ("stdout", "field", "tokens"),
    [
        ('{"pick": "red", "seed": 3}\n', "pick", ("red",)),
        ('{"result": {"pick": "blue"}}', "result.pick", ("blue",)),
        ('{"steps": 17}', "steps", ("17",)),
        ('{"score": 0.25}', "score", ("0.25",)),
        ('{"ok": true}', "ok", ("true",)),
    ],
)
def test_an_outcome_can_be_a_field_of_json_output(stdout: str, field: str, tokens: tuple[str, ...]) -> None:
    cfg = ParseConfig(json_field=field, split="whitespace", expect_tokens=1)
    assert parse_output(stdout, "", cfg) == tokens


@pytest.mark.parametrize(
    ("stdout", "error", "why"),
    [
        ('{"colour": "red"}', Unparsable, "json_field 'pick': no field 'pick'"),
        ("pick: red", Unparsable, "json_field 'pick': not JSON (Expecting value)"),
        ('{"pick": ["red"]}', Unparsable, "json_field 'pick': array, not a string or a number"),
        ('{"pick": null}', Unparsable, "json_field 'pick': null, not a string or a number"),
        ('{"pick": "red"', Incomplete, "json_field 'pick': the JSON stops short"),
        ('{"pick": "re', Incomplete, "json_field 'pick': the JSON stops short"),
        ("", Incomplete, "json_field 'pick': no JSON"),
    ],
)
def test_json_output_without_the_field_is_unparsable_and_cut_json_incomplete(
    stdout: str, error: type[Exception], why: str
) -> None:
    with pytest.raises(error) as raised:
        parse_output(stdout, "", ParseConfig(json_field="pick", split="whitespace", expect_tokens=1))
    assert str(raised.value).endswith(f"does not match parse ({why})")


def test_json_field_is_a_name_or_a_dotted_path() -> None:
    assert ParseConfig(json_field="a.b").json_field == "a.b"
    with pytest.raises(ValueError, match="json_field 'a..b': a field name, or names joined by dots"):
        ParseConfig(json_field="a..b")
