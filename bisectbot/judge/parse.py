"""Parse stage (pure): a run's stdout → generated tokens → one observation for the statistic.

llama-speculative sometimes exits 0 with its stdout empty or cut short (its logging thread is
still running at exit). Such output must never be counted as it stands: `parse_tokens` raises
`Incomplete` and the sweep reruns the same seed. With `cut_output: read`, a cut output that
still shows enough is read instead: its last token is dropped (the cut may have split it) and
what is left counts when it has `min_tokens` tokens or reached the EOS. That is sound only where
a cut takes an end off and nothing else (llama.cpp's logger writes its queue in order and loses
what is left at exit: all 466 cut outputs in 1,100 runs of 0.3.36 were the start of the same
seed's complete output; `bench/bench_overhead.py --llama` counts them again); it saves the rerun.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from bisectbot.config.sections import ParseConfig, StatisticConfig


class Incomplete(ValueError):
    """The output stops before the expected number of tokens (and no EOS ended it)."""


class Unparsable(ValueError):
    """The output does not have the configured shape at all (e.g. the prompt is not echoed)."""


def mismatch(text: str, why: str, *, tail: bool = False) -> str:
    """How every output the parse cannot read is reported: the output quoted (cut, control
    characters escaped: it is the program's text, untrusted), "does not match parse" and the
    key it failed, e.g. `'pick: yellow' does not match parse (expect_tokens 3: got 1 token)`."""
    return f"{_show(text, tail=tail)} does not match parse ({why})"


def parse_output(stdout: str, stderr: str, cfg: ParseConfig) -> tuple[str, ...]:
    """Generated tokens of one run from the stream the config reads (see `parse_tokens`)."""
    text = stderr if cfg.stream == "stderr" else stdout
    if cfg.extract is not None:
        found = re.search(cfg.extract, text)
        if found is None:
            raise Unparsable(mismatch(text, f"extract {cfg.extract!r}: no match in {cfg.stream}", tail=True))
        text = found.group(1) if found.re.groups else found.group(0)
    if cfg.json_field is not None:
        text = json_field(text, cfg.json_field)
    return parse_tokens(text, cfg)


def json_field(text: str, path: str) -> str:
    """The field `path` (dotted into nested objects) of `text` read as one JSON value: a string
    as it is, a number or true/false as JSON spells it. Incomplete when the JSON stops short (a
    cut output), Unparsable when it is not JSON or has no such field."""
    body = text.strip()
    why = f"json_field {path!r}"
    if not body:
        raise Incomplete(mismatch(text, f"{why}: no JSON"))
    try:
        value: Any = json.loads(body)
    except json.JSONDecodeError as exc:
        if exc.pos >= len(body) or exc.msg.startswith("Unterminated string"):
            raise Incomplete(mismatch(text, f"{why}: the JSON stops short")) from None
        raise Unparsable(mismatch(text, f"{why}: not JSON ({exc.msg})")) from None
    for name in path.split("."):
        if not isinstance(value, dict) or name not in value:
            raise Unparsable(mismatch(text, f"{why}: no field {name!r}"))
        value = value[name]
    if isinstance(value, str):
        return value
    if isinstance(value, (bool, int, float)):
        return json.dumps(value)
    kind = "null" if value is None else type(value).__name__.replace("dict", "object").replace("list", "array")
    raise Unparsable(mismatch(text, f"{why}: {kind}, not a string or a number"))


def parse_tokens(stdout: str, cfg: ParseConfig) -> tuple[str, ...]:
    """Generated tokens of one run; raises Incomplete or Unparsable (message says why)."""
    if cfg.fullmatch is not None and re.fullmatch(cfg.fullmatch, stdout) is None:
        raise Unparsable(mismatch(stdout, f"fullmatch {cfg.fullmatch!r}"))
    cut = cfg.complete_suffix is not None and not stdout.endswith(cfg.complete_suffix)
    if cut and cfg.cut_output == "rerun":
        raise Incomplete(mismatch(stdout, f"complete_suffix {cfg.complete_suffix!r}: not at its end, cut short"))
    tokens = _tokens(stdout, cfg)
    if cut:
        # the EOS as the last character is whole (one character cannot be split); any other
        # last token may be the start of a longer one
        ended = cfg.split == "chars" and cfg.eos is not None and tokens[-1:] == (cfg.eos,)
        tokens = tokens if ended else tokens[:-1]
        assert cfg.min_tokens is not None  # ParseConfig: read needs it
        if len(tokens) < cfg.min_tokens and not ended:
            raise Incomplete(
                mismatch(
                    stdout,
                    f"complete_suffix {cfg.complete_suffix!r}: not at its end, and {_count(len(tokens), 'whole token')} "
                    f"of min_tokens {cfg.min_tokens}",
                )
            )
    return tokens


def _tokens(stdout: str, cfg: ParseConfig) -> tuple[str, ...]:
    """The generated tokens as the output shows them (cut or not)."""
    text = shown = stdout.strip("\r\n")
    if cfg.prefix:
        stripped = text.lstrip()
        if not stripped:
            raise Incomplete(mismatch(stdout, f"prefix {cfg.prefix!r}: empty output"))
        if not stripped.startswith(cfg.prefix):
            if cfg.prefix.startswith(stripped):
                raise Incomplete(mismatch(stripped, f"prefix {cfg.prefix!r}: it stops inside it"))
            raise Unparsable(mismatch(stripped, f"prefix {cfg.prefix!r}"))
        text = stripped[len(cfg.prefix) :]
    if cfg.split == "chars":
        tokens = tuple(text.strip())
    elif cfg.split == "whitespace":
        tokens = tuple(text.split())
    else:
        assert cfg.pattern is not None
        tokens = tuple(m.group(1) if m.re.groups else m.group(0) for m in re.finditer(cfg.pattern, text))
    ended = cfg.eos is not None and cfg.eos in tokens
    if ended:
        tokens = tokens[: tokens.index(cfg.eos) + 1]
    got = f"got {_count(len(tokens), 'token')}"
    if cfg.expect_tokens is not None and len(tokens) < cfg.expect_tokens and not ended:
        raise Incomplete(mismatch(shown, f"expect_tokens {cfg.expect_tokens}: {got}"))
    if cfg.min_tokens is not None and len(tokens) < cfg.min_tokens and not ended:
        raise Incomplete(mismatch(shown, f"min_tokens {cfg.min_tokens}: {got}"))
    if cfg.expect_tokens is not None and len(tokens) > cfg.expect_tokens:
        raise Unparsable(mismatch(shown, f"expect_tokens {cfg.expect_tokens}: {got}"))
    if not tokens:
        raise Incomplete(mismatch(shown, f"split {cfg.split}: no tokens"))
    return tokens


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


@dataclass(frozen=True)
class Observation:
    """What one run says about the statistic: did it meet the condition, and its outcome token."""

    met_condition: bool
    outcome: str | None  # None when the generation ended before the outcome position


def observe(tokens: tuple[str, ...], stat: StatisticConfig) -> Observation:
    if stat.condition is not None:
        pos, want = stat.condition.position, stat.condition.token
        if len(tokens) <= pos or tokens[pos] != want:
            return Observation(False, None)
    pos = stat.position
    return Observation(True, tokens[pos] if len(tokens) > pos else None)


def _show(text: str, limit: int = 60, *, tail: bool = False) -> str:
    """An output quoted: its repr (control and invisible characters escaped), its first `limit`
    characters (its last with `tail`: where a log ends), "an empty output" for none."""
    text = text.strip("\r\n")
    if not text.strip():
        return "an empty output"
    if len(text) > limit:
        text = "…" + text[-limit:] if tail else text[:limit] + "…"
    return repr(text)
