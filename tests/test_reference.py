"""The reference stage: written, numpy-computed (cached in the state database) and its summary."""

from __future__ import annotations

from pathlib import Path

import pytest

from bisectbot.building.workspace import Workspace
from bisectbot.config import load_config
from bisectbot.errors import BisectbotError
from bisectbot.events import Events
from bisectbot.judge.reference import ResolvedReference, resolve_reference
from bisectbot.judge.runner import CommitRunner
from bisectbot.state.statedir import StateDir

pytest.importorskip("gguf")

ROOT = Path(__file__).resolve().parents[1]
LLAMA = ROOT / "configs" / "llama-cpp-29975.yaml"


def test_a_written_reference_needs_no_state() -> None:
    cfg = load_config(ROOT / "configs" / "example.yaml")
    resolved = resolve_reference(cfg)
    assert resolved.source == "config" and resolved.probs == dict(cfg.reference.probs or {})


def test_the_numpy_reference_of_29975_is_computed_once_then_cached(tmp_path: Path) -> None:
    cfg = load_config(LLAMA)
    with StateDir(tmp_path / "st") as state:
        runner = CommitRunner(cfg, state, Workspace(cfg.repo_source, state.clone_dir), Events())
        first = resolve_reference(cfg, runner)
        assert first.source == "numpy forward pass of target.gguf"
        assert first.probs == pytest.approx({"c": 0.4426, "e": 0.2769, "h": 0.2806}, abs=1e-4)
        assert first.condition_prob == pytest.approx(0.7714, abs=1e-4)
        cached = state.store.rows("SELECT key, value FROM reference_cache")
        assert len(cached) == 1
        assert resolve_reference(cfg, runner) == first  # from the cache (same numbers, same source)
    summary = first.summary(cfg)
    assert summary.categories == ["c", "e", "h", "<other>", "<missed>"]
    assert summary.condition == {"position": 0, "token": "f"} and summary.outcome == {"position": 1}
    assert sum(summary.category_probs) == pytest.approx(1.0)


def test_a_missing_model_is_a_clear_error(tmp_path: Path) -> None:
    cfg = load_config(LLAMA)
    comp = cfg.reference.compute.model_copy(update={"model": str(tmp_path / "nope.gguf")})  # type: ignore[union-attr]
    broken = cfg.model_copy(update={"reference": cfg.reference.model_copy(update={"compute": comp})})
    with pytest.raises(BisectbotError, match="nope.gguf does not exist"):
        resolve_reference(broken)


def test_a_control_sample_becomes_a_reference_with_its_counts() -> None:
    resolved = ResolvedReference({"a": 0.75, "b": 0.25}, None, "control", {"a": 3, "b": 1})
    ref = resolved.stats_reference()
    assert ref.control == (3, 1, 0) and ref.names == ("a", "b", "<other>")
    assert ref.estimate[2] > 0  # the KT estimate: a category the sample never saw is possible


def test_with_failures_an_outcome_the_reference_has_a_failed_category_it_never_gives() -> None:
    cfg = load_config(ROOT / "configs" / "example.yaml")
    counted = cfg.model_copy(update={"statistic": cfg.statistic.model_copy(update={"failures": "outcome"})})
    resolved = resolve_reference(counted)
    assert resolved.failures and resolved.probs == resolve_reference(cfg).probs  # the numbers do not change
    summary = resolved.summary(counted)
    assert summary.categories == ["e", "g", "h", "<other>", "<failed>", "<missed>"]
    assert summary.category_probs[4] == 0.0
    # a control sample's failed runs are counted like its outcomes (and FAILED is a category even when none failed)
    sample = ResolvedReference({"a": 0.6, "b": 0.2, "<failed>": 0.2}, None, "control", {"a": 3, "b": 1, "<failed>": 1})
    assert sample.stats_reference().control == (3, 1, 0, 1)
    never = ResolvedReference({"a": 0.75, "b": 0.25}, None, "control", {"a": 3, "b": 1}, failures=True)
    assert never.stats_reference().names == ("a", "b", "<other>", "<failed>")
