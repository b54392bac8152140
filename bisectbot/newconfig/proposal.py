"""`bisectbot init`'s reading of what a program prints: the `parse` and `statistic` proposed from
a few sample outputs, with the outcomes they show.

Why (issue 48): a maintainer's program prints a word (`pick: red`), a number, a line or JSON, not
llama's stream of one-letter tokens; read as characters, `pick: yellow` is six tokens and every
word of another length an unreadable run. So the outcome is a whole thing by default:

* JSON output (every sample one JSON object): a field of it (`json_field`), the one whose values
  vary least while still varying (`pick`, not `seed`);
* one line (after what every sample starts with, word for word: `pick: `, an echoed prompt): the
  word after it, a number, or the rest of the line when it is several words;
* several lines: the line whose label (`result:`) every sample prints once with a value that
  varies, read with `extract`; else every word of the output, in order;
* characters only when the samples look like a token stream: after the common start, each one
  word, nine in ten of them different, three letters or more (llama's `bcdbcfegh`).

The proposal is checked by parsing every sample with it (`judge.parse`, as every run is read),
and the counts it shows are those of that reading.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, NotRequired, Sequence, TypedDict

from bisectbot.config.sections import ParseConfig
from bisectbot.errors import ConfigError
from bisectbot.inert import one_line
from bisectbot.judge.parse import Incomplete, Unparsable, parse_output

# A count (whole numbers) that takes at most this many values in the samples is read as categories
# (each value an outcome); more values, or any fraction, and the number's mean is judged.
MAX_COUNT_VALUES = 8
# One token from the first character that is not blank to the last: the whole text (a line, or
# a JSON string of several words) as the outcome.
WHOLE = r"(?s)\S(?:.*\S)?"
# A labelled line of a multi-line output: `result: red`, `pick = red` (the label short, no blanks
# before its colon or equals sign).
LABELLED = re.compile(r"^([^\s:=][^:=]{0,40}?[:=])[ \t]*(\S.*)$")


class ParseDraft(TypedDict):
    """The `parse` section init writes (config.sections.ParseConfig)."""

    stream: NotRequired[str]  # stderr, when the text is there
    extract: NotRequired[str]
    json_field: NotRequired[str]
    prefix: NotRequired[str]
    split: str  # whitespace | chars | regex
    pattern: NotRequired[str]
    expect_tokens: NotRequired[int]
    min_tokens: NotRequired[int]


class CountDraft(TypedDict, total=False):
    """How many tokens an output has: exactly, or at least (part of a ParseDraft)."""

    expect_tokens: int
    min_tokens: int


class PositionDraft(TypedDict):
    position: int


class StatisticDraft(TypedDict):
    outcome: PositionDraft
    kind: NotRequired[str]  # mean: the outcome is a number whose mean is tested
    bounds: NotRequired[list[float]]  # mean: the range every value lies in, when the output says it


@dataclass(frozen=True)
class Proposal:
    """What the sample runs suggest: how output is read (`parse`), where the outcome is, what it
    is in words (`what`), the outcomes the samples show read that way, and notes worth a look
    (samples the parse cannot read, values that never repeat)."""

    parse: ParseDraft
    statistic: StatisticDraft
    outcomes: Counter[str] = field(default_factory=Counter)
    what: str = ""
    notes: tuple[str, ...] = ()
    numbers: tuple[float, ...] = ()  # the outcomes read as numbers, when every one is a number
    percent: bool = False  # each number is followed by '%' in the output

    @property
    def numeric(self) -> bool:
        """The samples print one number per run, not a few categories: judge its mean (a count
        that takes at most MAX_COUNT_VALUES whole values stays categorical)."""
        if not self.numbers:
            return False
        whole = all(float(v).is_integer() for v in self.numbers)
        return not (whole and len(set(self.numbers)) <= MAX_COUNT_VALUES)

    def as_mean(self) -> "Proposal":
        """This reading with the outcome judged as a number: statistic.kind mean, and bounds when
        the output shows them (a percentage: [0, 100]; values all in [0, 1] with a fraction among
        them: a rate, [0, 1])."""
        if not self.numbers:
            raise ConfigError(f"init: --statistic mean, but the outcome is not a number in every sample ({self.what})")
        stat: StatisticDraft = {"kind": "mean", "outcome": self.statistic["outcome"]}
        lo, hi = min(self.numbers), max(self.numbers)
        fraction = any(not float(v).is_integer() for v in self.numbers)
        if self.percent and 0 <= lo and hi <= 100:
            stat["bounds"] = [0.0, 100.0]
        elif fraction and 0 <= lo and hi <= 1:
            stat["bounds"] = [0.0, 1.0]
        return replace(self, statistic=stat)

    def line(self, most: int = 8) -> str:
        """'the word after 'pick: ' — red ×9, green ×5, blue ×4, yellow ×2' (the `most` most
        frequent outcomes, and how many more there were)."""
        top = self.outcomes.most_common()
        seen = ", ".join(f"{shown(o)} ×{n}" for o, n in top[:most])
        more = f", {len(top) - most} more" if len(top) > most else ""
        return f"{self.what} — {seen or 'none read'}{more}"


def shown(outcome: str) -> str:
    """An outcome as the header and the terminal show it: a plain word as it is, anything else
    quoted (its repr: blanks and control characters seen for what they are)."""
    return outcome if re.fullmatch(r"[\w.+\-]+", outcome) else repr(outcome)


def propose(outputs: Sequence[str], position: int = 0, errors: Sequence[str] = ()) -> Proposal:
    """`parse` and `statistic` for these outputs (stdout), outcome `position` of what is read
    (see the module's docstring); from `errors` (stderr, `stream: stderr`) when every stdout is
    empty, as with a program that prints its text there. ConfigError when no output shows
    anything or some output has fewer than position + 1 tokens."""
    texts = [o.strip() for o in outputs]
    if not any(texts) and any(e.strip() for e in errors):
        got = propose(errors, position)
        parse: ParseDraft = {"stream": "stderr", **got.parse}
        return replace(got, parse=parse, what=f"{got.what} on stderr (stdout was empty)")
    if not texts or not any(texts):
        raise ConfigError("init: the command printed nothing on stdout or stderr for any seed")
    one_line_each = all(sum(1 for ln in t.splitlines() if ln.strip()) <= 1 for t in texts)
    parse, what = (
        _json_shape(texts, position)
        or _lines_shape(texts, position)
        or _words_shape(texts, position, lines=one_line_each)
    )
    return _checked(outputs, parse, position, what)


def _checked(outputs: Sequence[str], parse: ParseDraft, position: int, what: str) -> Proposal:
    """The proposal, its outcomes counted by reading every sample with it as runs are read."""
    cfg = ParseConfig.model_validate(parse)
    read: list[tuple[str, ...]] = []
    texts: list[str] = []  # the outputs read, beside `read`
    unread: list[str] = []
    for out in outputs:
        try:
            read.append(parse_output(out, "", cfg))
            texts.append(out)
        except (Incomplete, Unparsable) as exc:
            unread.append(str(exc))
    if read and min(len(t) for t in read) <= position:
        raise _too_few(position, read)
    seen = Counter(t[position] for t in read)
    # `nan` and `inf` (a number the program could not compute) are no observation, as runs read them
    numbers = tuple(v for o in seen.elements() if math.isfinite(v := float(o))) if seen and _numbers(list(seen)) else ()
    percent = bool(numbers) and all(re.search(rf"{re.escape(t[position])}\s*%", out) for t, out in zip(read, texts))
    notes = []
    if unread:
        notes.append(f"{len(unread)} of {len(outputs)} sample outputs do not match it: {one_line(unread[-1], 200)}")
    if len(seen) > 1 and len(seen) * 4 > len(outputs) * 3 and len(outputs) >= 8 and not numbers:
        notes.append(
            f"{len(seen)} different outcomes in {len(outputs)} runs: each value is a category of its own, "
            "and a test needs values that repeat (print fewer, e.g. rounded, or give --position)"
        )
    return Proposal(parse, {"outcome": {"position": position}}, seen, what, tuple(notes), numbers, percent)


def _json_shape(texts: Sequence[str], position: int) -> tuple[ParseDraft, str] | None:
    """Every output one JSON object: the field whose values vary least while varying."""
    flat = []
    for text in texts:
        try:
            value = json.loads(text)
        except ValueError:
            return None
        if not isinstance(value, dict):
            return None
        flat.append(_leaves(value))
    common = [k for k in flat[0] if all(k in f for f in flat)]
    if not common:
        return None
    distinct = {k: len({f[k] for f in flat}) for k in common}
    varying = [k for k in common if distinct[k] > 1]
    key = min(varying, key=lambda k: distinct[k]) if varying else common[0]
    draft, what = _value_reading([f[key] for f in flat], position)
    field = f"the JSON field {key!r}"
    how = {"the word": field, "the number": f"{field} (a number)", "the whole text": f"{field} (its whole text)"}
    return {"json_field": key, **draft}, how.get(what, f"{what} of {field}")


def _leaves(value: dict[str, Any], under: str = "") -> dict[str, str]:
    """The strings, numbers and true/false of nested JSON objects by their dotted paths, as
    parse.json_field reads them."""
    out: dict[str, str] = {}
    for name, item in value.items():
        path = f"{under}{name}"
        if isinstance(item, dict):
            out.update(_leaves(item, path + "."))
        elif isinstance(item, str):
            out[path] = item
        elif isinstance(item, (bool, int, float)):
            out[path] = json.dumps(item)
    return out


def _value_reading(values: Sequence[str], position: int) -> tuple[ParseDraft, str]:
    """How a value (a JSON field, a labelled line's rest) is read: one word, a number, the whole
    value when it is several words, or word `position` of it."""
    words = [v.split() for v in values]
    if position == 0 and all(len(w) == 1 for w in words):
        return {"split": "whitespace", "expect_tokens": 1}, "the number" if _numbers(values) else "the word"
    if position == 0:
        return {"split": "regex", "pattern": WHOLE}, "the whole text"
    return {"split": "whitespace", **_count_key(words, position)}, f"word {position}"


def _lines_shape(texts: Sequence[str], position: int) -> tuple[ParseDraft, str] | None:
    """Outputs of several lines: the labelled line every output prints once, with a value that
    varies (the fewest distinct values; the last such line on a tie), read with `extract`."""
    lines = [[ln.strip() for ln in t.splitlines() if ln.strip()] for t in texts]
    if all(len(ls) <= 1 for ls in lines):
        return None
    found: list[dict[str, str]] = []
    for ls in lines:
        labelled = [m.groups() for ln in ls if (m := LABELLED.match(ln))]
        counts = Counter(label for label, _ in labelled)
        found.append({label: value for label, value in labelled if counts[label] == 1})
    order = list(found[0])
    common = [k for k in order if all(k in f for f in found)]
    distinct = {k: len({f[k] for f in found}) for k in common}
    varying = [k for k in common if distinct[k] > 1]
    if not varying:
        return None
    label = min(reversed(varying), key=lambda k: distinct[k])
    draft, what = _value_reading([f[label] for f in found], position)
    extract = rf"(?m)^[ \t]*{re.escape(label)}[ \t]*(.*)$"
    return {"extract": extract, **draft}, f"{what} after {label!r} on its line (the other lines ignored)"


def _words_shape(texts: Sequence[str], position: int, *, lines: bool) -> tuple[ParseDraft, str]:
    """The words of the output after the words every output starts with (an echoed prompt, a
    label): one word, a number, the rest of the line, word `position`, or, when the outputs
    look like a token stream, characters (see the module's docstring)."""
    words = [t.split() for t in texts]
    k = _common_words(words)
    prefix = _prefix_text(texts, k)
    rests = [w[k:] for w in words]
    after = f" after {prefix!r}" if prefix else ""
    if _char_stream(rests):
        return _chars_shape(texts, prefix, position)
    if min(len(r) for r in rests) <= position:
        raise _too_few(position, rests)
    if position == 0 and all(len(r) == 1 for r in rests):
        what = "the number" if _numbers([r[0] for r in rests]) else "the word"
        return _with_prefix(prefix, {"split": "whitespace", "expect_tokens": 1}), f"{what}{after}"
    spaced = all(len(tok) == 1 for r in rests for tok in r)
    if position == 0 and lines and not spaced and len({len(r) for r in rests}) > 1:
        return _with_prefix(prefix, {"split": "regex", "pattern": WHOLE}), f"the rest of the line{after}"
    kind = "token" if spaced else "word"
    return _with_prefix(prefix, {"split": "whitespace", **_count_key(rests, position)}), f"{kind} {position}{after}"


def _chars_shape(texts: Sequence[str], word_prefix: str, position: int) -> tuple[ParseDraft, str]:
    """A stream of one-character tokens after the common start (characters included: a prompt
    echoed right before the generated text, `bcdbc` in `bcdbcfegh`)."""
    prefix = word_prefix + os.path.commonprefix([t[len(word_prefix) :] for t in texts])
    rests = [list(t[len(prefix) :].strip()) for t in texts]
    if min(len(r) for r in rests) <= position:
        raise _too_few(position, rests)
    after = f" after {prefix!r}" if prefix else ""
    draft: ParseDraft = _with_prefix(prefix, {"split": "chars", **_count_key(rests, position)})
    return draft, f"character {position}{after} (the output reads as a stream of one-character tokens)"


def _common_words(words: Sequence[Sequence[str]]) -> int:
    """How many leading words every output shares (one less when the outputs are all the same:
    the last word is then the outcome)."""
    shortest = min(len(w) for w in words)
    k = 0
    while k < shortest and all(w[k] == words[0][k] for w in words):
        k += 1
    if k == shortest and all(len(w) == k for w in words):
        k = max(0, k - 1)
    return k


def _prefix_text(texts: Sequence[str], k: int) -> str:
    """The text of the first k words as every output starts with it: with the blank after them
    when every output has the same one there (`pick: `), else up to the k-th word's end."""
    if k == 0:
        return ""
    first = texts[0]
    spans = [m.span() for m in re.finditer(r"\S+", first)]
    with_blank = first[: spans[k][0]] if len(spans) > k else first[: spans[k - 1][1]]
    if all(t.startswith(with_blank) for t in texts):
        return with_blank
    return first[: spans[k - 1][1]]


def _char_stream(rests: Sequence[Sequence[str]]) -> bool:
    """Do these outputs look like a stream of one-character tokens written without blanks: each
    one word, three characters or more on average, and (of five outputs or more) nine in ten
    different at least — an outcome of a few values repeats (20 samples of 12 words equally
    likely show about 10), a stream of tokens seldom does — and not numbers?"""
    if len(rests) < 5 or not all(len(r) == 1 for r in rests):
        return False
    words = [r[0] for r in rests]
    mean = sum(len(w) for w in words) / len(words)
    return mean >= 3 and len(set(words)) * 10 >= len(words) * 9 and not _numbers(words)


def _numbers(values: Sequence[str]) -> bool:
    try:
        [float(v) for v in values]
    except ValueError:
        return False
    return True


def _count_key(tokens: Sequence[Sequence[Any]], position: int) -> CountDraft:
    """expect_tokens when every output had the same number of tokens, else min_tokens (enough
    for the outcome) when that is more than one."""
    lengths = {len(t) for t in tokens}
    if len(lengths) == 1:
        return {"expect_tokens": lengths.pop()}
    return {"min_tokens": position + 1} if position > 0 else {}


def _with_prefix(prefix: str, draft: ParseDraft) -> ParseDraft:
    return {"prefix": prefix, **draft} if prefix else draft


def _too_few(position: int, rests: Sequence[Sequence[str]]) -> ConfigError:
    fewest = min(len(r) for r in rests)
    shortest = next(" ".join(r) for r in rests if len(r) == fewest)
    return ConfigError(
        f"init: --position {position}, but some output has only {fewest} token(s) after what every output "
        f"starts with: {one_line(repr(shortest), 120)}"
    )
