"""Config validation: every bad input becomes one line naming the file and the key path."""

from __future__ import annotations

import copy
import re
import typing
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import BaseModel

from bisectbot.config import Config, load_config
from bisectbot.demo import demo_config
from bisectbot.errors import ConfigError

REPO = Path(__file__).resolve().parents[1]
GOOD = {
    "name": "t",
    "repo": {"path": "./repo"},
    "build": {"targets": ["prog"], "binaries": {"binary": ["prog"]}},
    "run": {"argv": ["{binary}", "--seed", "{seed}"]},
    "statistic": {"condition": {"position": 0, "token": "c"}, "outcome": {"position": 1}},
    "reference": {"probs": {"a": 0.5, "b": 0.5}},
}


def write(tmp_path: Path, data: object) -> Path:
    path = tmp_path / "cfg.yaml"
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def error_of(tmp_path: Path, data: object) -> str:
    with pytest.raises(ConfigError) as exc:
        load_config(write(tmp_path, data))
    message = str(exc.value)
    assert "\n" not in message
    assert str(tmp_path / "cfg.yaml") in message
    return message


def test_valid_config_resolves_paths_relative_to_the_file(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, GOOD))
    assert cfg.repo_source == str(tmp_path / "repo")
    assert cfg.run.max_runs == 4000 and cfg.test.alpha == 5e-4 and cfg.test.indifference == pytest.approx(0.03)


def test_malformed_yaml_names_line(tmp_path: Path) -> None:
    msg = error_of(tmp_path, "name: t\nbuild: [unclosed\n")
    assert "malformed YAML" in msg and "line" in msg


def test_unknown_key_names_its_path(tmp_path: Path) -> None:
    msg = error_of(tmp_path, {**GOOD, "run": {**GOOD["run"], "timeot": 3}})
    assert "run.timeot: unknown key" in msg


def test_a_removed_key_is_one_line_that_points_at_the_upgrading_notes(tmp_path: Path) -> None:
    for key, value in (("delta", 0.001), ("ratio", 2)):
        msg = error_of(tmp_path, {**GOOD, "reference": {"control": {"commit": "v1", key: value}}})
        assert f"reference.control.{key}: removed in bisectbot 0.2.0 (" in msg and "see docs/upgrading.md)" in msg
    # told first, whatever else is wrong; the same word elsewhere is just unknown
    data = {**GOOD, "run": {"argv": ["{binary}"], "timeot": 3}, "reference": {"control": {"commit": "v1", "ratio": 2}}}
    assert "reference.control.ratio: removed in bisectbot 0.2.0" in error_of(tmp_path, data)
    assert "test.delta: unknown key" in error_of(tmp_path, {**GOOD, "test": {"delta": 0.1}})
    assert (REPO / "docs" / "upgrading.md").is_file()


def test_missing_key_names_its_path(tmp_path: Path) -> None:
    data = {**GOOD, "build": {"targets": ["prog"]}}
    assert "build: build.targets and build.binaries go together" in error_of(tmp_path, data)


def test_wrong_type(tmp_path: Path) -> None:
    msg = error_of(tmp_path, {**GOOD, "run": {**GOOD["run"], "timeout": "soon"}})
    assert "run.timeout" in msg


def test_unknown_placeholder(tmp_path: Path) -> None:
    msg = error_of(tmp_path, {**GOOD, "run": {"argv": ["{binary}", "{sed}"]}})
    assert "run.argv[1]: unknown placeholder {sed}" in msg


def test_probabilities_must_sum_to_one(tmp_path: Path) -> None:
    msg = error_of(tmp_path, {**GOOD, "reference": {"probs": {"a": 0.5, "b": 0.6}}})
    assert "reference.probs" in msg and "sum" in msg


def test_not_a_mapping(tmp_path: Path) -> None:
    assert "mapping" in error_of(tmp_path, "- a\n- b\n")


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "nope.yaml")


def test_experiment_digest_ignores_test_levels_but_not_the_command(tmp_path: Path) -> None:
    base = load_config(write(tmp_path, GOOD))
    other_alpha = load_config(write(tmp_path, {**GOOD, "test": {"alpha": 0.01}}))
    other_cmd = load_config(write(tmp_path, {**GOOD, "run": {"argv": ["{binary}", "-s", "{seed}"]}}))
    assert base.experiment_digest() == other_alpha.experiment_digest()
    assert base.experiment_digest() != other_cmd.experiment_digest()
    assert base.digest() != other_alpha.digest()


def test_shipped_configs_load() -> None:
    for path in sorted((Path(__file__).parent.parent / "configs").glob("*.yaml")):
        load_config(path)


def test_hashed_seeds_are_distinct_and_scattered() -> None:
    from bisectbot.config.sections import RunConfig
    from bisectbot.config.seeds import mix31

    run = RunConfig(argv=["x"], seeds="hashed")
    seeds = [run.seed(i) for i in range(1, 20001)]
    assert len(set(seeds)) == len(seeds)
    assert all(0 <= s < 2**31 for s in seeds)
    assert abs(seeds[1] - seeds[0]) > 1000  # neighbours land far apart
    assert RunConfig(argv=["x"]).seed(7) == 7
    # bijective on a small exhaustive check of the low bits' images
    assert len({mix31(i) for i in range(1 << 16)}) == 1 << 16


@pytest.mark.parametrize(
    "section, key, hint",
    [
        ("github", {"repo": "o/r", "isue": 3}, "github.isue: unknown key (did you mean issue?)"),
        (
            "arms",
            {"srv": {"targets": ["s"], "binaries": {"s": ["s"]}, "serv": ["{s}"], "body": {}}},
            "arms.srv.serv: unknown key (did you mean serve?)",
        ),
        ("run", {"variants": [{"agrv": ["{binary}"]}]}, "run.variants[0].agrv: unknown key (did you mean argv?)"),
    ],
)
def test_misspelt_keys_get_a_hint_in_optional_sections_dicts_and_lists(
    tmp_path: Path, section: str, key: dict, hint: str
) -> None:
    assert f": {hint}" in error_of(tmp_path, dict(GOOD, **{section: key}))


def test_secrets_a_config_names_are_known_to_it(tmp_path: Path) -> None:
    cfg = load_config(
        write(tmp_path, dict(GOOD, github={"repo": "o/r", "token_env": "BOT_PAT", "webhook_secret_env": "HOOK"}))
    )
    assert cfg.secret_env_names == ("BOT_PAT", "HOOK")
    assert load_config(write(tmp_path, GOOD)).secret_env_names == ()


def test_build_variants_shape_errors_name_their_keys(tmp_path: Path) -> None:
    variant = {"targets": ["prog"], "binaries": {"binary": ["bin/prog"]}}
    both = {**GOOD, "build": {**GOOD["build"], "variants": [variant]}}
    assert "give build.targets and build.binaries, or build.variants" in error_of(tmp_path, both)
    other_names = {**GOOD, "build": {"variants": [variant, {**variant, "binaries": {"other": ["bin/x"]}}]}}
    assert "every build variant must name the same binaries" in error_of(tmp_path, other_names)
    arm = {
        "targets": ["srv"],
        "binaries": {"server": ["bin/srv"]},
        "build_variants": [variant],
        "serve": ["{server}", "{port}"],
        "body": {"seed": "{seed}"},
    }
    assert "give targets and binaries, or build_variants" in error_of(tmp_path, {**GOOD, "arms": {"a": arm}})


def test_eta_must_leave_an_indifference_zone_below_tolerance(tmp_path: Path) -> None:
    msg = error_of(tmp_path, {**GOOD, "test": {"tolerance": 0.1, "eta": 0.1}})
    assert "test: " in msg and "eta (0.1) must be below tolerance (0.1)" in msg
    cfg = load_config(write(tmp_path, {**GOOD, "test": {"tolerance": 0.2}}))
    assert cfg.test.indifference == pytest.approx(0.06)  # 0.3 × tolerance unless set
    assert load_config(write(tmp_path, {**GOOD, "test": {"eta": 0.0}})).test.indifference == 0.0


def test_the_new_test_keys_left_at_their_defaults_keep_a_config_s_digest(tmp_path: Path) -> None:
    """Job ids hash the config: a config written before test.eta, model_runs and search_runs
    existed keeps its job ids (a killed bisect resumes), unless it sets them."""
    base = load_config(write(tmp_path, GOOD)).digest()
    same = {**GOOD, "test": {"model_runs": 4000, "search_runs": 40000}}
    assert load_config(write(tmp_path, same)).digest() == base
    assert load_config(write(tmp_path, {**GOOD, "test": {"eta": 0.02}})).digest() != base


def test_statistic_failures_is_skip_or_outcome_and_its_default_keeps_the_digest(tmp_path: Path) -> None:
    base = load_config(write(tmp_path, GOOD))
    assert base.statistic.failures == "skip" and not base.statistic.failures_counted
    statistic = {**GOOD["statistic"], "failures": "outcome"}  # type: ignore[dict-item]
    counted = load_config(write(tmp_path, {**GOOD, "statistic": statistic}))
    assert counted.statistic.failures_counted
    assert counted.digest() != base.digest() and counted.experiment_digest() != base.experiment_digest()
    same = {**GOOD, "statistic": {**statistic, "failures": "skip"}}
    assert load_config(write(tmp_path, same)).digest() == base.digest()  # job ids of older configs stay
    msg = error_of(tmp_path, {**GOOD, "statistic": {**statistic, "failures": "count"}})
    assert "statistic.failures: " in msg and "'skip' or 'outcome'" in msg


EXAMPLE = Path(__file__).resolve().parents[1] / "configs" / "example.yaml"


def _models_in(annotation: object, suffix: str = "") -> list[tuple[type[BaseModel], str]]:
    """The section models an annotation holds (through optional, union, list and dict types),
    each with how its keys' path goes on: `[]` for a list item, `.<name>` for a dict value."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [(annotation, suffix)]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is dict:
        return _models_in(args[1], suffix + ".<name>")
    if origin is list:
        return _models_in(args[0], suffix + "[]")
    return [found for arg in args for found in _models_in(arg, suffix)]


def _schema_keys() -> list[tuple[str, str, str]]:
    """(top-level section, key, key path) of every key of the config schema, breadth first. A
    section model met again deeper (`run.variants[].parse` is a ParseConfig, like `parse`) has
    its keys listed once, where it is met first."""
    keys: list[tuple[str, str, str]] = []
    seen: set[type[BaseModel]] = {Config}
    queue: list[tuple[type[BaseModel], str, str]] = [(Config, "", "")]
    while queue:
        model, path, section = queue.pop(0)
        hints = typing.get_type_hints(model)  # resolves forward references (Variant.parse)
        for name, field in model.model_fields.items():
            if model is Config and name == "source_path":  # filled in by load_config
                continue
            key = field.alias or name
            here = f"{path}.{key}" if path else key
            keys.append((section or key, key, here))
            for sub, suffix in _models_in(hints[name]):
                if sub not in seen:
                    seen.add(sub)
                    queue.append((sub, here + suffix, section or key))
    return keys


def test_the_example_config_shows_every_key_of_the_schema() -> None:
    """configs/example.yaml is the reference of every key: each key of the schema is in it, live
    or commented out (`# key:`), within its top-level section; and the file loads."""
    load_config(EXAMPLE)
    text = EXAMPLE.read_text()
    keys = _schema_keys()
    assert {"run.variants[].help_lacks", "arms.<name>.serve_variants", "github.call_deadline"} <= {
        path for _, _, path in keys
    }  # the walk reaches optional, list and dict sections
    top = "|".join(re.escape(name) for name in Config.model_fields)
    # A top-level key, live or commented, at the start of a line opens its section.
    starts = [(m.group(1), m.start()) for m in re.finditer(rf"^#? ?({top}):", text, re.M)]
    ends = [at for _, at in starts[1:]] + [len(text)]
    sections = {name: text[at:end] for (name, at), end in zip(starts, ends)}
    missing = []
    for section, key, path in keys:
        where = sections.get(section, "")
        if not re.search(rf"(^[ \t]*(#[ \t]*)*(- )?|[{{,][ \t]*){re.escape(key)}:", where, re.M):
            missing.append(path)
    assert not missing, f"{EXAMPLE.name} does not show these keys of the config schema: {', '.join(missing)}"


def _cli_error(path: Path) -> tuple[int, list[str]]:
    """The real CLI on a config (doctor loads it first, before any build): exit status, stderr lines."""
    import subprocess

    from conftest import bisectbot_argv, subprocess_env

    proc = subprocess.run(
        bisectbot_argv("doctor", str(path)), capture_output=True, text=True, timeout=60, env=subprocess_env(CI="1")
    )
    return proc.returncode, proc.stderr.splitlines()


def test_a_key_given_twice_is_an_error_naming_it_and_both_lines(tmp_path: Path) -> None:
    text = yaml.safe_dump(GOOD) + "name: t2\n"
    msg = error_of(tmp_path, text)
    assert re.search(r"line \d+, column 1: duplicate key 'name' \(first on line \d+\)", msg), msg
    nested = (
        yaml.safe_dump({**GOOD, "run": {**GOOD["run"]}})
        .replace("  timeout", "  timeout")
        .replace("run:\n", "run:\n  jobs: 1\n  jobs: 2\n")
    )
    assert "duplicate key 'jobs'" in error_of(tmp_path, nested)
    code, lines = _cli_error(write(tmp_path, text))
    assert code == 2 and len(lines) == 1 and "duplicate key 'name'" in lines[0], lines


def test_yaml_nested_200000_deep_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    path = write(tmp_path, "name: " + "[" * 200_000)
    code, lines = _cli_error(path)
    assert code == 2 and len(lines) == 1, lines[:5]
    assert "malformed YAML: line 1" in lines[0] and "nested deeper than 64 levels" in lines[0], lines


@pytest.mark.parametrize(
    ("change", "error"),
    [
        (
            {"statistic": {"outcome": {"position": 10**30}}},
            "statistic.outcome.position: Input should be less than or equal to 100000",
        ),
        (
            {"parse": {"expect_tokens": 4}, "statistic": {"outcome": {"position": 4}}},
            "statistic.outcome.position: 4 cannot exist: parse.expect_tokens is 4, so positions 0..3",
        ),
        (
            {"run": {"argv": ["{binary}", "-n", "1", "--seed", "{seed}"]}},
            "statistic.outcome.position: 1 cannot exist: run.argv generates at most 1 token(s)",
        ),
    ],
)
def test_a_position_no_run_can_reach_is_refused(tmp_path: Path, change: dict, error: str) -> None:
    assert error in error_of(tmp_path, {**GOOD, **change})


def test_positions_the_run_can_reach_are_accepted(tmp_path: Path) -> None:
    data = {**GOOD, "parse": {"expect_tokens": 2}, "run": {"argv": ["{binary}", "-n", "2", "--seed", "{seed}"]}}
    assert load_config(write(tmp_path, data)).statistic.outcome.position == 1


# Config digests name jobs (a killed bisect resumes under its job id), so every change to the
# config's schema must leave them alone: these are the digests bisectbot 0.1.0 (4fd5644) computed.
# The demo's variations set every key added after digests were first stored, and variants, arms
# and control references, so that each rule of config/history.py is exercised.
def _demo(**changes: Any) -> dict[str, Any]:
    data = demo_config()
    for where, value in changes.items():
        node = data
        *parents, last = where.split("__")
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    return data


_DIGEST_ARM = {
    "build_variants": [{"targets": ["srv"], "binaries": {"server": ["bin/srv"]}}],
    "serve_variants": [
        {"argv": ["{server}", "--port", "{port}", "--new"], "help_contains": ["--new"], "help_lacks": ["--old"]},
        {"argv": ["{server}", "--port", "{port}"], "parse": {"prefix": "ab", "split": "chars", "fullmatch": "[a-f]+"}},
    ],
    "help_args": ["-h"],
    "body": {"prompt": "ab", "seed": "{seed}"},
    "parse": {"prefix": "ab", "split": "chars", "stream": "stderr"},
}
DIGEST_CASES: dict[str, dict[str, Any]] = {
    "demo": _demo(),
    "demo, reference: good": _demo(reference="good"),
    "demo, reference.control": _demo(reference={"control": {"commit": "v1", "runs": 300, "max_runs": 2000}}),
    "demo, every later key set": _demo(
        build__generator="ninja",
        build__hide_git=True,
        run__max_output_mb=32,
        run__inputs=["{fixtures}/x"],
        parse={
            "prefix": "ab",
            "split": "chars",
            "min_tokens": 2,
            "complete_suffix": "\n",
            "cut_output": "read",
            "stream": "stderr",
            "extract": "(.*)",
            "fullmatch": "[a-f]+",
        },
        statistic__failures="outcome",
        test={"eta": 0.02, "model_runs": 100, "search_runs": 1000, "broken_end": "first", "retest_runs": 500},
    ),
    "demo, variants and arms": _demo(
        run={k: v for k, v in demo_config()["run"].items() if k != "argv"},
        run__variants=[
            {"argv": ["{binary}", "--seed", "{seed}", "-n", "4", "--new"], "help_lacks": ["--old"]},
            {
                "argv": ["{binary}", "--seed", "{seed}", "-n", "4"],
                "parse": {"prefix": "ab", "split": "chars", "cut_output": "rerun"},
            },
        ],
        arms={
            "server": _DIGEST_ARM,
            "plain": {
                "targets": ["srv"],
                "binaries": {"server": ["bin/srv"]},
                "serve": ["{server}", "{port}"],
                "body": {"seed": "{seed}"},
            },
        },
    ),
}


def _digests(cfg: Config) -> dict[str, str]:
    return {
        "": cfg.digest(),
        " experiment": cfg.experiment_digest(),
        " --reference good": cfg.with_reference("good").digest(),
        " --reference good, bound": cfg.with_reference("good").with_good_end("a" * 40).digest(),
        " --reference v1": cfg.with_reference("v1").digest(),
    }


def _all_digests(tmp: Path) -> dict[str, str]:
    out = {}
    shipped = {key.split(" ")[0] for key in DIGESTS_OF_0_1_0}  # a config added since has no 0.1.0 digest
    for path in sorted([*(REPO / "configs").glob("*.yaml"), *(REPO / "configs" / "llama").glob("*.yaml")]):
        if (name := path.relative_to(REPO).as_posix()) in shipped:
            out.update({name + k: v for k, v in _digests(load_config(path)).items()})
    for name, data in DIGEST_CASES.items():
        f = tmp / "specdemo.yaml"
        f.write_text(yaml.safe_dump(copy.deepcopy(data), sort_keys=False))
        out.update({name + k: v for k, v in _digests(load_config(f)).items()})
    return out


DIGESTS_OF_0_1_0 = {
    "configs/example.yaml": "15663a187177547c",
    "configs/example.yaml experiment": "0353c8fffd4bad80",
    "configs/example.yaml --reference good": "0e5b9c396542d8b1",
    "configs/example.yaml --reference good, bound": "eb6998deb9e23c04",
    "configs/example.yaml --reference v1": "40d674f675b05fcf",
    "configs/llama/llama-cli.yaml": "5b3f3c5ec46f8a59",
    "configs/llama/llama-cli.yaml experiment": "9c4972e58e88fcc7",
    "configs/llama/llama-cli.yaml --reference good": "0067d3cfc45b1746",
    "configs/llama/llama-cli.yaml --reference good, bound": "6ac8d203c9c3555a",
    "configs/llama/llama-cli.yaml --reference v1": "2a4b27f3638e0f95",
    "configs/llama/llama-server.yaml": "cd845014315f4d23",
    "configs/llama/llama-server.yaml experiment": "2902f3855e908dd0",
    "configs/llama/llama-server.yaml --reference good": "59972d38e4816912",
    "configs/llama/llama-server.yaml --reference good, bound": "743ee384652c0d3b",
    "configs/llama/llama-server.yaml --reference v1": "3dbf5ef02e317e2c",
    "configs/llama/llama-simple.yaml": "647f8078d94ca953",
    "configs/llama/llama-simple.yaml experiment": "5c83c16504c8f6a2",
    "configs/llama/llama-simple.yaml --reference good": "647f8078d94ca953",
    "configs/llama/llama-simple.yaml --reference good, bound": "b7f59e97357a8b1b",
    "configs/llama/llama-simple.yaml --reference v1": "1128f844acd979ba",
    "configs/llama/llama-speculative.yaml": "574d25acd507f866",
    "configs/llama/llama-speculative.yaml experiment": "9221bb7398ec4d53",
    "configs/llama/llama-speculative.yaml --reference good": "11d21cd1af051d41",
    "configs/llama/llama-speculative.yaml --reference good, bound": "934df0591510e7bf",
    "configs/llama/llama-speculative.yaml --reference v1": "e8b76a11dc6eef7f",
    "configs/llama-cpp-29975.yaml": "a60116dd05189241",
    "configs/llama-cpp-29975.yaml experiment": "9221bb7398ec4d53",
    "configs/llama-cpp-29975.yaml --reference good": "d273d7f16cbf98ae",
    "configs/llama-cpp-29975.yaml --reference good, bound": "9d90295433649d74",
    "configs/llama-cpp-29975.yaml --reference v1": "5f214f05b6b72ea7",
    "demo": "cbfd9b3afd7db120",
    "demo experiment": "491fd0f4833f246d",
    "demo --reference good": "6b220afe0b148e7e",
    "demo --reference good, bound": "58f0edd55ee8b009",
    "demo --reference v1": "cde01d5c7455a295",
    "demo, reference: good": "6b220afe0b148e7e",
    "demo, reference: good experiment": "491fd0f4833f246d",
    "demo, reference: good --reference good": "6b220afe0b148e7e",
    "demo, reference: good --reference good, bound": "58f0edd55ee8b009",
    "demo, reference: good --reference v1": "cde01d5c7455a295",
    "demo, reference.control": "9ae81830533491c1",
    "demo, reference.control experiment": "491fd0f4833f246d",
    "demo, reference.control --reference good": "c84426a1e63f9642",
    "demo, reference.control --reference good, bound": "43bcdd5921dc87d8",
    "demo, reference.control --reference v1": "9ae81830533491c1",
    "demo, every later key set": "88556e79d84342fd",
    "demo, every later key set experiment": "c91818313c67533b",
    "demo, every later key set --reference good": "61ee32dd5ae7abe8",
    "demo, every later key set --reference good, bound": "8b8c28c85aa6d638",
    "demo, every later key set --reference v1": "3e841f45f9628349",
    "demo, variants and arms": "963bf0e77cd27da9",
    "demo, variants and arms experiment": "48b56e3fffd29bbc",
    "demo, variants and arms --reference good": "c81ba06de7bb9811",
    "demo, variants and arms --reference good, bound": "b915c1ddcc55302d",
    "demo, variants and arms --reference v1": "0cad75f90859f1e8",
}


def test_the_digests_of_the_shipped_configs_and_the_demo_s_are_those_of_0_1_0(tmp_path: Path) -> None:
    assert _all_digests(tmp_path) == DIGESTS_OF_0_1_0
