"""Presets for llama.cpp's programs (configs/llama/*.yaml) and what `init --llama` makes of them.

A preset is a working config for one program across llama.cpp's history (its build targets,
flag spellings and output formats per era), plus a `preset:` section saying what a user may
change: the prompt, the run of sampling arguments every command variant carries, the
statistic and the reference. `customise` is pure: preset data in, config data out; the CLI
(`bisectbot init --llama`) writes it and checks it at the good commit (newconfig.write).
"""

from __future__ import annotations

import copy
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, NotRequired, Sequence, TypedDict

import yaml

from bisectbot.config import parse_yaml, read_config_text
from bisectbot.config.sections import repo_entry
from bisectbot.errors import ConfigError

__all__ = ["Customisation", "customise", "preset_dir", "preset_names", "load_preset"]


def preset_dir() -> Path:
    """Where the presets are: $BISECTBOT_PRESETS, else configs/llama of this source tree."""
    env = os.environ.get("BISECTBOT_PRESETS")
    return Path(env) if env else Path(__file__).resolve().parents[2] / "configs" / "llama"


def preset_names(where: Path | None = None) -> dict[str, Path]:
    """Every name a preset answers to (its program and aliases) → its file."""
    out: dict[str, Path] = {}
    for path in sorted((where or preset_dir()).glob("*.yaml")):
        data = parse_yaml(read_config_text(path), path) or {}
        info = data.get("preset") or {}
        for name in [info.get("program"), *(info.get("aliases") or [])]:
            if name:
                out[str(name)] = path
    return out


def load_preset(program: str, where: Path | None = None) -> tuple[dict[str, Any], Path]:
    """The preset's YAML data and its path; ConfigError naming the known programs."""
    folder = where or preset_dir()
    if not folder.is_dir():
        raise ConfigError(
            f"init --llama: no preset directory {folder}: set $BISECTBOT_PRESETS to the configs/llama "
            "directory of a bisectbot checkout"
        )
    names = preset_names(folder)
    if program not in names:
        known = ", ".join(sorted(names)) or f"none in {where or preset_dir()}"
        raise ConfigError(f"init --llama: no preset for {program!r} (known: {known})")
    path = names[program]
    return parse_yaml(read_config_text(path), path), path


class PresetSection(TypedDict):
    """A preset's `preset:` section: what `init --llama` may change in it."""

    program: str
    aliases: NotRequired[list[str]]
    prompt: str
    args: NotRequired[list[str]]  # the run of sampling arguments every command variant carries
    body_args: NotRequired[list[str]]  # a server's: the request's sampling fields


class Position(TypedDict):
    position: int
    token: NotRequired[str]


class StatisticSection(TypedDict):
    outcome: Position
    condition: NotRequired[Position]


@dataclass(frozen=True)
class Customisation:
    """What the user asked `init --llama` for (None: as the preset has it)."""

    repo: str | None = None  # a local checkout's path, or a clone URL
    name: str | None = None
    prompt: str | None = None
    args: Sequence[str] | None = None  # replaces the preset's sampling arguments ([]: none)
    condition: str | None = None  # a token, or "none"
    position: int | None = None  # the outcome's position
    reference: str = "good"  # good | exact | a ref
    tolerance: float | None = None  # test.tolerance: the smallest change that matters
    eta: float | None = None  # test.eta (unset with a new tolerance: 0.3 × it)
    statistic: str | None = None  # mean | time: judge a number the program prints (preset.numbers)
    number: str | None = None  # which of preset.numbers (default: the first of that kind)


def customise(data: dict[str, Any], path: Path, how: Customisation) -> dict[str, Any]:
    """The config data `init --llama` writes for the preset `data` (read from `path`)."""
    out = copy.deepcopy(data)
    info = out.pop("preset", None)
    if not info:
        raise ConfigError(f"{path}: not a preset (no `preset:` section)")
    old_prompt, old_args = str(info["prompt"]), [str(a) for a in info.get("args") or []]
    if how.name:
        out["name"] = how.name
    if how.repo:
        out["repo"] = repo_entry(how.repo)
    if out.get("fixtures"):
        out["fixtures"] = str((path.parent / out["fixtures"]).resolve())
    prompt = how.prompt if how.prompt is not None else old_prompt
    if not prompt:
        raise ConfigError("init --llama: --prompt is empty")
    serve = out["run"].get("serve")
    if serve is not None:  # a server: the prompt and the sampling settings are in its request
        serve["body"] = _body_with(serve["body"], info, prompt, how.args, path)
    variants = out["run"].get("variants") or [{"argv": out["run"]["argv"]}]
    for i, variant in enumerate(variants):
        argv = [prompt if a == old_prompt else str(a) for a in variant["argv"]]
        if how.args is not None and serve is None:
            argv = _replace_run(argv, old_args, list(how.args), f"{path}: run.variants[{i}]")
        variant["argv"] = argv
        if variant.get("parse"):
            variant["parse"] = _parse_with(variant["parse"], old_prompt, prompt)
    if "variants" not in out["run"]:
        out["run"]["argv"] = variants[0]["argv"]
    if out.get("parse"):
        out["parse"] = _parse_with(out["parse"], old_prompt, prompt)
    if how.statistic in ("mean", "time"):
        _judge_number(out, info, how, path)
    else:
        out["statistic"] = _statistic(out["statistic"], how)
        out["reference"] = _reference(out.get("reference"), how, prompt, old_prompt, path)
    _band(out, how)
    return out


def _band(out: dict[str, Any], how: Customisation) -> None:
    """init --tolerance and --eta into the config's `test:` (the preset's eta goes with its tolerance)."""
    if how.tolerance is None and how.eta is None:
        return
    test = dict(out.get("test") or {})
    if how.tolerance is not None:
        test["tolerance"] = how.tolerance
        test.pop("eta", None)  # the preset's eta was for its tolerance
    if how.eta is not None:
        test["eta"] = how.eta
    out["test"] = test


def number_of(info: Mapping[str, Any], how: Customisation, path: Path) -> tuple[str, dict[str, Any]]:
    """The preset number `init --llama --statistic mean|time [--number NAME]` judges: by name,
    else the first of that kind (ConfigError naming those the preset has)."""
    numbers = {str(k): dict(v) for k, v in (info.get("numbers") or {}).items()}
    kinds = {k: v for k, v in numbers.items() if v.get("kind") == how.statistic}
    known = ", ".join(f"{k} ({v.get('kind')})" for k, v in numbers.items()) or "none"
    if how.number is not None:
        if how.number not in kinds:
            raise ConfigError(
                f"init --llama: {path.name} has no number {how.number!r} of kind {how.statistic} (it has: {known})"
            )
        return how.number, kinds[how.number]
    if not kinds:
        raise ConfigError(
            f"init --llama: {path.name} prints no number of kind {how.statistic} it knows (it has: {known})"
        )
    name = next(iter(kinds))
    return name, kinds[name]


def _judge_number(out: dict[str, Any], info: Mapping[str, Any], how: Customisation, path: Path) -> None:
    """The config judges a number the program prints (preset.numbers) instead of its tokens: every
    command variant reads it with the number's extract, the statistic is its kind (bounds when it
    has them), the reference like the good end (or a ref), the tolerance the number's default."""
    name, number = number_of(info, how, path)
    if how.reference == "exact":
        raise ConfigError(
            "init --llama: --statistic mean|time is judged against the good end's runs: use --reference good"
        )
    if how.condition not in (None, "none") or how.position is not None:
        raise ConfigError(
            "init --llama: --condition and --position are for the tokens, not a number the program prints"
        )
    parse = {"stream": number.get("stream", "stdout"), "extract": number["extract"], "split": "whitespace"}
    parse["expect_tokens"] = 1
    for variant in out["run"].get("variants") or []:
        variant["parse"] = dict(parse)
    out["parse"] = dict(parse)
    stat: dict[str, Any] = {"kind": number["kind"], "outcome": {"position": 0}}
    if number.get("bounds"):
        stat["bounds"] = list(number["bounds"])
    out["statistic"] = stat
    out["reference"] = "good" if how.reference == "good" else {"control": {"commit": how.reference}}
    test = {k: v for k, v in (out.get("test") or {}).items() if k not in ("tolerance", "eta")}
    out["test"] = {**test, "tolerance": float(number["tolerance"])}
    out["name"] = how.name or f"{out['name']}-{name}"


def _body_with(
    body: Mapping[str, object], info: PresetSection, prompt: str, args: Sequence[str] | None, path: Path
) -> dict[str, object]:
    """A server's request for the prompt, with `args` (KEY=VALUE, each value read as YAML:
    `top_k=40`, `samplers=[top_k, temperature]`) in place of the preset's sampling fields."""
    out = {**body, "prompt": prompt} if "prompt" in body else dict(body)
    if args is None:
        return out
    sampling = [str(k) for k in info.get("body_args") or []]
    if not sampling:
        raise ConfigError(f"{path}: the preset names no sampling fields of its request to replace (preset.body_args)")
    for key in sampling:
        out.pop(key, None)
    for arg in args:
        key, eq, value = arg.partition("=")
        if not eq or not re.fullmatch(r"[A-Za-z_][\w]*", key):
            raise ConfigError(
                f"init --llama: {arg!r}: a server takes request fields after `--`, as KEY=VALUE (e.g. top_k=40)"
            )
        if key in ("prompt", "seed"):
            raise ConfigError(f"init --llama: {arg!r}: the {key} is set by bisectbot (--prompt; one seed per run)")
        try:
            out[key] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise ConfigError(f"init --llama: {arg!r}: the value is not YAML: {exc}") from None
    return out


def _replace_run(argv: list[str], old: list[str], new: list[str], where: str) -> list[str]:
    """`argv` with the run of arguments `old` replaced by `new`."""
    if not old:
        raise ConfigError(f"{where}: the preset names no sampling arguments to replace (preset.args)")
    for at in range(len(argv) - len(old) + 1):
        if argv[at : at + len(old)] == old:
            return argv[:at] + new + argv[at + len(old) :]
    raise ConfigError(f"{where}: the preset's sampling arguments {' '.join(old)!r} are not in its argv")


def _parse_with(parse: Mapping[str, object], old: str, new: str) -> dict[str, object]:
    """A parse section for the new prompt: its prefix, and the prompt inside its regexes."""
    out = dict(parse)
    if out.get("prefix") == old:
        out["prefix"] = new
    for key in ("fullmatch", "extract"):
        pattern = out.get(key)
        if isinstance(pattern, str) and old in pattern:
            out[key] = pattern.replace(re.escape(old), re.escape(new)).replace(old, re.escape(new))
    return out


def _statistic(stat: StatisticSection, how: Customisation) -> StatisticSection:
    out = copy.deepcopy(stat)
    if how.condition is not None:
        if how.condition == "none":
            out.pop("condition", None)
        else:
            out["condition"] = {"position": 0, "token": how.condition}
    if how.position is not None:
        out["outcome"] = {"position": how.position}
    cond = out.get("condition")
    if cond is not None and out["outcome"]["position"] <= cond["position"]:
        raise ConfigError(
            f"init --llama: the outcome (position {out['outcome']['position']}) must come after the condition "
            f"(position {cond['position']}): give --position, or --condition none"
        )
    return out


def _reference(ref: Any, how: Customisation, prompt: str, old_prompt: str, path: Path) -> Any:
    """good: like the good end; exact: the preset's computed reference (only where it models the
    command: the preset's own sampling arguments and a statistic it can compute); else a ref."""
    if how.reference == "good":
        return "good"
    if how.reference != "exact":
        return {"control": {"commit": how.reference}}
    compute = ref.get("compute") if isinstance(ref, dict) else None
    if compute is None:
        raise ConfigError(f"init --llama: {path.name} has no exact reference: use --reference good")
    if how.args is not None:
        raise ConfigError(
            "init --llama: the exact reference models the preset's own sampling arguments; with others "
            "use --reference good (like the good end)"
        )
    out = copy.deepcopy(ref)
    if out["compute"].get("prompt") == old_prompt:
        out["compute"]["prompt"] = prompt
    return out
