"""The llama.cpp presets (configs/llama/) and what `init --llama` makes of them (pure: no build)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from bisectbot.config import Config, load_config
from bisectbot.errors import ConfigError
from bisectbot.llama.presets import Customisation, customise, load_preset, preset_dir, preset_names

REPO = Path(__file__).resolve().parents[1]
PRESETS = sorted((REPO / "configs" / "llama").glob("*.yaml"))


def test_the_presets_are_found_by_program_and_alias() -> None:
    assert preset_dir() == REPO / "configs" / "llama"
    names = preset_names()
    for program in (
        "llama-speculative",
        "llama-cli",
        "llama-simple",
        "llama-server",
        "main",
        "llama-completion",
        "simple",
        "server",
    ):
        assert program in names, program
    assert names["main"] == names["llama-cli"] == names["llama-completion"]
    with pytest.raises(ConfigError, match=r"no preset for 'llama-nope' \(known: .*llama-cli"):
        load_preset("llama-nope")


@pytest.mark.parametrize("path", PRESETS, ids=[p.stem for p in PRESETS])
def test_every_preset_is_a_working_config_as_it_is(path: Path) -> None:
    cfg = load_config(path)
    assert cfg.preset is not None and cfg.name == path.stem
    assert cfg.fixtures_dir == REPO / "fixtures"
    # the sampling arguments init replaces are in every command variant
    if cfg.preset.args:
        n = len(cfg.preset.args)
        for v in cfg.run.templates:
            assert any(v.argv[i : i + n] == cfg.preset.args for i in range(len(v.argv))), v.argv
    # no --help heading decides an era: what a binary prints does (docs/llama.md, Presets)
    assert all(not v.help_contains and not v.help_lacks for v in cfg.run.templates)


@pytest.mark.parametrize("path", PRESETS, ids=[p.stem for p in PRESETS])
def test_init_llama_writes_a_loadable_config_from_every_preset(path: Path, tmp_path: Path) -> None:
    data = yaml.safe_load(path.read_text())
    out = customise(data, path, Customisation(repo=str(tmp_path), reference="good"))
    written = tmp_path / "c.yaml"
    written.write_text(yaml.safe_dump(out))
    cfg = load_config(written)  # elsewhere than the preset: fixtures and repo are absolute
    assert cfg.fixtures_dir == REPO / "fixtures" and cfg.repo.path == str(tmp_path.resolve())
    assert cfg.preset is None and cfg.reference.control is not None and cfg.reference.control.unbound


def _cli(**how: object) -> Config:
    data, path = load_preset("llama-cli")
    out = customise(data, path, Customisation(repo="/src/llama.cpp", **how))  # type: ignore[arg-type]
    return Config.model_validate(out)


def test_prompt_sampling_arguments_and_statistic_are_replaced_in_every_variant() -> None:
    cfg = _cli(prompt="adde", args=[], condition="none", position=0)
    for i, v in enumerate(cfg.run.templates):
        assert v.argv[v.argv.index("-p") + 1] == "adde"
        assert "--top-k" not in v.argv and "--temp" not in v.argv  # the program's own defaults
        assert v.argv[-2:] == ["-s", "{seed}"]
        parse = cfg.parse_for(i)
        assert parse.prefix == "adde"
        assert parse.fullmatch is None or parse.fullmatch.startswith("adde")
    assert cfg.statistic.condition is None and cfg.statistic.outcome.position == 0
    assert cfg.reference.control is not None and cfg.reference.control.unbound  # like the good end
    mine = _cli(args=["--top-k", "5", "--temp", "0.7"])
    assert all(v.argv[-6:-2] == ["--top-k", "5", "--temp", "0.7"] for v in mine.run.templates)


def test_the_exact_reference_only_where_it_models_the_command() -> None:
    exact = _cli(reference="exact", prompt="bcdb")
    assert exact.reference.compute is not None and exact.reference.compute.prompt == "bcdb"
    with pytest.raises(ConfigError, match="models the preset's own sampling arguments"):
        _cli(reference="exact", args=["--top-k", "5"])
    at = _cli(reference="b3000")
    assert at.reference.control is not None and at.reference.control.commit == "b3000"
    data, path = load_preset("llama-simple")
    with pytest.raises(ConfigError, match="no exact reference"):
        customise(data, path, Customisation(reference="exact"))


def test_the_smallest_change_that_matters_is_the_user_s_with_a_preset_too() -> None:
    """init --llama --tolerance / --eta: the preset's alpha and beta stay, its eta goes with its
    tolerance (0.3 × the new one), and an eta at or above the tolerance is refused by the config."""
    preset = _cli()
    finer = _cli(tolerance=0.05)
    assert finer.test.tolerance == 0.05 and finer.test.indifference == pytest.approx(0.015)
    assert (finer.test.alpha, finer.test.beta) == (preset.test.alpha, preset.test.beta)
    both = _cli(tolerance=0.2, eta=0.1)
    assert (both.test.tolerance, both.test.indifference) == (0.2, 0.1)
    assert _cli(eta=0.05).test.tolerance == preset.test.tolerance  # eta alone keeps the preset's tolerance
    with pytest.raises(ValueError, match="must be below tolerance"):
        _cli(eta=0.2)


def test_an_outcome_before_its_condition_is_refused() -> None:
    with pytest.raises(ConfigError, match="must come after the condition"):
        _cli(position=0)


def test_the_29975_config_is_the_speculative_preset() -> None:
    """#29975's shipped config is one preset among several: the same builds, commands, output
    formats and statistic as configs/llama/llama-speculative.yaml (plus its issue's arm and
    GitHub section)."""
    shipped = load_config(REPO / "configs" / "llama-cpp-29975.yaml")
    preset = load_config(REPO / "configs" / "llama" / "llama-speculative.yaml")
    for section in ("build", "run", "parse", "statistic", "reference", "test"):
        assert getattr(shipped, section) == getattr(preset, section), section


def test_the_open_vocabulary_config_is_the_llama_cli_preset_at_top_k_40() -> None:
    """configs/llama-open-vocab.yaml: llama-cli's builds and commands, one token (-n 1) at top-k 40
    on the open-vocabulary fixtures, its first token the outcome; the old format's parse reads
    any printable ASCII character."""
    mine = load_config(REPO / "configs" / "llama-open-vocab.yaml")
    preset = load_config(REPO / "configs" / "llama" / "llama-cli.yaml")
    assert mine.build == preset.build
    swap = {("-n", "2"): "1", ("--top-k", "3"): "40"}
    for ours, theirs in zip(mine.run.templates, preset.run.templates, strict=True):
        want = [swap.get((a, b), b) for a, b in zip(["", *theirs.argv], theirs.argv)]
        assert ours.argv == want
    assert mine.run.templates[1].parse is not None and mine.run.templates[1].parse.fullmatch == "bcdbc[!-~]"
    assert mine.reference.compute is not None and mine.reference.compute.top_k == 40
    assert mine.statistic.condition is None and mine.statistic.position == 0
    assert Path(mine.resolve("{fixtures}")) == REPO / "fixtures" / "open-vocab"


def _server(**how: object) -> Config:
    data, path = load_preset("llama-server")
    out = customise(data, path, Customisation(repo="/src/llama.cpp", **how))  # type: ignore[arg-type]
    return Config.model_validate(out)


def test_a_server_preset_takes_the_prompt_and_sampling_fields_in_its_request() -> None:
    plain = _server(prompt="adde", reference="exact")
    assert plain.run.serve is not None and plain.run.serve.body["prompt"] == "adde"
    assert plain.run.serve.body["seed"] == "{seed}" and plain.run.serve.body["top_k"] == 3
    assert plain.reference.compute is not None and plain.reference.compute.prompt == "adde"
    assert all("adde" not in v.argv for v in plain.run.templates)  # the command starts the server only
    mine = _server(args=["top_k=40", "temperature=0.8", "samplers=[top_k, temperature]"])
    assert mine.run.serve is not None
    body = mine.run.serve.body
    assert body["top_k"] == 40 and body["temperature"] == 0.8 and body["samplers"] == ["top_k", "temperature"]
    assert "min_p" not in body and "repeat_penalty" not in body  # the preset's other sampling fields go
    assert body["n_predict"] == 2 and body["cache_prompt"] is False  # what is not sampling stays
    defaults = _server(args=[])
    assert defaults.run.serve is not None and "top_k" not in defaults.run.serve.body
    for bad, error in (
        (["--top-k", "40"], "request fields after `--`, as KEY=VALUE"),
        (["seed=4"], "the seed is set by bisectbot"),
        (["top_k=[1"], "the value is not YAML"),
    ):
        with pytest.raises(ConfigError, match=error):
            _server(args=bad)
    with pytest.raises(ConfigError, match="models the preset's own sampling arguments"):
        _server(reference="exact", args=["top_k=5"])


def test_a_missing_preset_directory_says_how_to_point_at_one(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no preset directory .*nope: set \$BISECTBOT_PRESETS"):
        load_preset("llama-cli", tmp_path / "nope")


def _speculative(**how: object) -> Config:
    data, path = load_preset("llama-speculative")
    out = customise(data, path, Customisation(repo="/src/llama.cpp", **how))  # type: ignore[arg-type]
    return Config.model_validate(out)


def test_a_number_the_program_prints_is_judged_with_statistic_mean_or_time() -> None:
    """`init --llama llama-speculative --statistic mean` judges the acceptance rate (the preset's
    first number of that kind) like the good end, read from its `accept` line on stderr in every
    command variant, bounded in [0, 100], tolerance 5 points; --statistic time the decoding speed;
    an unknown --number, an exact reference or a condition are one line each."""
    cfg = _speculative(statistic="mean")
    assert cfg.statistic.kind == "mean" and cfg.statistic.bounds == (0.0, 100.0)
    assert cfg.reference.control is not None and cfg.reference.control.unbound
    assert cfg.test.tolerance == 5 and cfg.name == "llama-speculative-accept"
    for i in range(len(cfg.run.templates)):
        parse = cfg.parse_for(i)
        assert parse.stream == "stderr" and parse.extract is not None and "accept" in parse.extract
    import re

    extract = cfg.parse_for(0).extract or ""
    for line, want in (
        ("accept    = 76.316%", "76.316"),
        ("accept    = -nan%", "-nan"),
        ("0.00.058.752 I accept    = 16.667%", "16.667"),
    ):
        found = re.search(extract, f"n_accept  = 3\n{line}\n")
        assert found is not None and found.group(1) == want, line
    timed = _speculative(statistic="time")
    assert timed.statistic.kind == "time" and timed.test.tolerance == 0.1 and "speed" in (timed.parse.extract or "")
    speed = re.search(timed.parse.extract or "", "decoded    4 tokens in    0.010 seconds, speed:  400.000 t/s")
    assert speed is not None and speed.group(1) == "400.000"
    with pytest.raises(
        ConfigError, match=r"has no number 'tps' of kind mean \(it has: accept \(mean\), speed \(time\)\)"
    ):
        _speculative(statistic="mean", number="tps")
    with pytest.raises(ConfigError, match="use --reference good"):
        _speculative(statistic="mean", reference="exact")
    with pytest.raises(ConfigError, match="not a number the program prints"):
        _speculative(statistic="mean", condition="f")
    with pytest.raises(ConfigError, match="prints no number of kind mean"):
        _cli(statistic="mean")
