"""The tiny GGUF fixtures: deterministic, the committed files are what the generator makes, and the
facts the llama.cpp loaders of every tree need hold."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from bisectbot.llama import fixtures as fx  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "fixtures"
MANIFEST = json.loads((FIXTURES / "MANIFEST.json").read_text())


def _field(reader, key):
    f = reader.fields.get(key)
    return None if f is None else f.contents()


def test_same_seed_gives_byte_identical_files(tmp_path):
    a = fx.write_tiny_llama(tmp_path / "a", 7)
    b = fx.write_tiny_llama(tmp_path / "b", 7)
    assert a == b
    for name in ("target.gguf", "draft.gguf"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
        assert a[name] == hashlib.sha256((tmp_path / "a" / name).read_bytes()).hexdigest()
    assert not list((tmp_path / "a").glob("*.tmp"))


def test_different_seeds_differ(tmp_path):
    assert fx.write_tiny_llama(tmp_path / "a", 1) != fx.write_tiny_llama(tmp_path / "b", 2)


def test_committed_fixtures_are_reproducible(tmp_path):
    shas = fx.write_tiny_llama(tmp_path, MANIFEST["seed"])
    assert shas == MANIFEST["files"]
    for name, sha in MANIFEST["files"].items():
        assert hashlib.sha256((FIXTURES / name).read_bytes()).hexdigest() == sha
    assert MANIFEST["seed"] == fx.DEFAULT_SEED


@pytest.mark.parametrize("name", ["target.gguf", "draft.gguf"])
def test_gguf_facts(name):
    path = FIXTURES / name
    assert path.stat().st_size == MANIFEST["model"]["bytes"] == 24352
    r = gguf.GGUFReader(str(path))
    assert _field(r, "general.architecture") == "llama"
    assert _field(r, "llama.block_count") == 2
    assert _field(r, "llama.embedding_length") == 16
    assert _field(r, "llama.feed_forward_length") == 32
    assert _field(r, "llama.attention.head_count") == 4
    assert _field(r, "tokenizer.ggml.model") == "gpt2"
    assert _field(r, "tokenizer.ggml.pre") == "default"
    assert list(_field(r, "tokenizer.ggml.tokens")) == list("abcdefgh") + ["Ä", "Ĭ"]
    assert list(_field(r, "tokenizer.ggml.merges")) == ["h h"]
    assert _field(r, "tokenizer.ggml.eos_token_id") == 7
    bos = _field(r, "tokenizer.ggml.bos_token_id")
    assert bos is not None and 0 <= bos < 10  # older trees crash on the gpt2 default BOS id 11
    assert _field(r, "tokenizer.ggml.add_bos_token") is False
    assert all(t.tensor_type.name == "F32" for t in r.tensors)
    assert len(r.tensors) == 3 + 2 * 9


def test_draft_is_a_noisy_copy_of_target():
    target, draft = fx.make_weights(fx.DEFAULT_SEED)
    assert target.keys() == draft.keys()
    for name in target:
        diff = draft[name] - target[name]
        assert np.any(diff != 0), name
        # noise is small relative to the weights
        assert np.std(diff) <= 0.5 * max(np.std(target[name]), 0.1), name


def test_chosen_seed_meets_the_requirements():
    q = fx.seed_quality(fx.DEFAULT_SEED)
    assert q["ok"]
    assert q["p_cond"] >= 0.3
    assert len(q["target"]) == 3 and min(q["target"].values()) >= 0.1
    assert q["top_differs"]
    # the draft's candidate set differs from the target's, so the residual-by-position defect bites
    assert set(q["target"]) != set(q["draft"])


@pytest.mark.parametrize("name", ["target.gguf", "draft.gguf"])
def test_extra_tokens_never_compete_where_the_statistic_reads(name):
    """The two entries older loaders need are unreachable after the prompt and after prompt + 'f':
    logit -20 there, far below the letters, so top-k 3 keeps letters only and the reference is that
    of the original 8-token model."""
    from bisectbot.llama import forward

    m = forward.load_gguf(FIXTURES / name)
    letters = fx._model(fx._letter_weights(fx.DEFAULT_SEED)[name == "draft.gguf"], fx.LETTERS)
    for ctx in fx.READ_AT:
        ids = forward.tokenize(m, ctx)
        full = forward.forward_logits(m, ids)
        assert full[8:] == pytest.approx([fx.UNREACHABLE_LOGIT] * 2, abs=1e-3)
        assert np.sort(full[:8])[-3] > fx.UNREACHABLE_LOGIT + 10
        np.testing.assert_allclose(full[:8], forward.forward_logits(letters, ids), atol=1e-5)
