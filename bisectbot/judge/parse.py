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

import re
from dataclasses import dataclass

from bisectbot.config.sections import ParseConfig, StatisticConfig


class Incomplete(ValueError):
    """The output stops before the expected number of tokens (and no EOS ended it)."""


class Unparsable(ValueError):
    """The output does not have the configured shape at all (e.g. the prompt is not echoed)."""


def parse_output(stdout: str, stderr: str, cfg: ParseConfig) -> tuple[str, ...]:
    """Generated tokens of one run from the stream the config reads (see `parse_tokens`)."""
    text = stderr if cfg.stream == "stderr" else stdout
    if cfg.extract is not None:
        found = re.search(cfg.extract, text)
        if found is None:
            raise Unparsable(f"no match of parse.extract {cfg.extract!r} in {cfg.stream}: {_show(text[-60:])}")
        text = found.group(1) if found.re.groups else found.group(0)
    return parse_tokens(text, cfg)


def parse_tokens(stdout: str, cfg: ParseConfig) -> tuple[str, ...]:
    """Generated tokens of one run; raises Incomplete or Unparsable (message says why)."""
    if cfg.fullmatch is not None and re.fullmatch(cfg.fullmatch, stdout) is None:
        raise Unparsable(f"output is not of the form {cfg.fullmatch!r}: {_show(stdout)}")
    cut = cfg.complete_suffix is not None and not stdout.endswith(cfg.complete_suffix)
    if cut and cfg.cut_output == "rerun":
        raise Incomplete(f"output does not end with {cfg.complete_suffix!r}: {_show(stdout)}")
    tokens = _tokens(stdout, cfg)
    if cut:
        # the EOS as the last character is whole (one character cannot be split); any other
        # last token may be the start of a longer one
        ended = cfg.split == "chars" and cfg.eos is not None and tokens[-1:] == (cfg.eos,)
        tokens = tokens if ended else tokens[:-1]
        assert cfg.min_tokens is not None  # ParseConfig: read needs it
        if len(tokens) < cfg.min_tokens and not ended:
            raise Incomplete(
                f"output does not end with {cfg.complete_suffix!r} and shows {len(tokens)} whole tokens "
                f"of {cfg.min_tokens}: {_show(stdout)}"
            )
    return tokens


def _tokens(stdout: str, cfg: ParseConfig) -> tuple[str, ...]:
    """The generated tokens as the output shows them (cut or not)."""
    text = stdout.strip("\r\n")
    if cfg.prefix:
        stripped = text.lstrip()
        if not stripped:
            raise Incomplete("empty output")
        if not stripped.startswith(cfg.prefix):
            if cfg.prefix.startswith(stripped):
                raise Incomplete(f"output {stripped!r} stops inside the prompt")
            raise Unparsable(f"output does not start with the prompt {cfg.prefix!r}: {_show(stripped)}")
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
    want = cfg.expect_tokens or cfg.min_tokens
    if want is not None and len(tokens) < want and not ended:
        raise Incomplete(f"{len(tokens)} of {want} tokens: {_show(text)}")
    if cfg.expect_tokens is not None and len(tokens) > cfg.expect_tokens:
        raise Unparsable(f"{len(tokens)} tokens, expected {cfg.expect_tokens}: {_show(text)}")
    if not tokens:
        raise Incomplete("no generated tokens")
    return tokens


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
    pos = stat.outcome.position
    return Observation(True, tokens[pos] if len(tokens) > pos else None)


def _show(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "…")
