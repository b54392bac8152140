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
    assert path.stat().st_size == MANIFEST["model"]["bytes"] == 59936
    r = gguf.GGUFReader(str(path))
    assert _field(r, "general.architecture") == "llama"
    assert _field(r, "llama.block_count") == 2
    assert _field(r, "llama.embedding_length") == 16
    assert _field(r, "llama.feed_forward_length") == 32
    assert _field(r, "llama.attention.head_count") == 4
    assert _field(r, "tokenizer.ggml.model") == "gpt2"
    assert _field(r, "tokenizer.ggml.pre") == "default"
    tokens = list(_field(r, "tokenizer.ggml.tokens"))
    assert tokens[:8] == list("abcdefgh")
    # every byte has its byte-level symbol (any text tokenizes), each once; then the specials
    assert sorted(tokens[:256]) == sorted(fx.byte_symbols()) and len(set(tokens)) == len(tokens)
    assert tokens[256:] == ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<s>", "</s>"]
    types = list(_field(r, "tokenizer.ggml.token_type"))
    assert types[:256] == [1] * 256 and types[256:] == [3] * 5  # NORMAL bytes, CONTROL specials
    assert list(_field(r, "tokenizer.ggml.merges")) == ["Ā ā"]  # NUL SOH: no prompt has it
    assert _field(r, "tokenizer.ggml.eos_token_id") == 7
    # in the vocabulary (older trees crash on gpt2's default BOS id 11 of a small vocabulary)
    assert tokens[_field(r, "tokenizer.ggml.bos_token_id")] == "<s>"
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


def test_byte_symbols_are_gpt2s():
    sym = fx.byte_symbols()
    assert len(sym) == 256 and len(set(sym)) == 256
    assert sym[ord("a")] == "a" and sym[ord("\n")] == "Ċ" and sym[ord(" ")] == "Ġ" and sym[0xC4] == "Ä"


@pytest.mark.parametrize("name", ["target.gguf", "draft.gguf"])
def test_only_letters_can_be_sampled(name):
    """The proven margin holds: every non-letter token's logit is more than 30 below the best
    letter's, in every context; checked here on contexts of every length up to 40 (letters, and
    text with bytes and specials as programs feed it), and the bound is below what they show."""
    from bisectbot.llama import forward

    m = forward.load_gguf(FIXTURES / name)
    bound = fx.margin(m.weights)
    assert bound >= 30
    rng = np.random.default_rng(5)
    contexts = [
        forward.tokenize(m, "bcdbc"),
        forward.tokenize(m, "bcdbcf"),
        forward.tokenize(m, "\n\n### Instruction:\n\n"),
    ]
    contexts += [list(rng.integers(0, 8, n)) for n in range(1, 41)]
    contexts += [list(rng.integers(0, len(m.vocab), n)) for n in range(1, 41)]
    for ids in contexts:
        logits = forward.forward_logits(m, [int(i) for i in ids])
        gap = logits[:8].max() - logits[8:].max()
        assert gap >= bound, (ids, gap, bound)


def test_margin_notices_a_token_that_can_compete():
    target, _ = fx.make_weights(fx.DEFAULT_SEED)
    broken = {k: v.copy() for k, v in target.items()}
    broken["output.weight"][100, 0] = -1.0  # no longer held down by the constant channel
    assert fx.margin(broken) < 0


def test_the_constant_channel_is_constant():
    """Dimension 0 of the residual stream stays at CONSTANT through every layer (no output
    matrix writes it), which is what the margin's proof rests on."""
    target, draft = fx.make_weights(fx.DEFAULT_SEED)
    for w in (target, draft):
        assert np.all(w["token_embd.weight"][:, 0] == np.float32(fx.CONSTANT))
        for il in range(fx.N_LAYER):
            assert not w[f"blk.{il}.attn_output.weight"][0].any()
            assert not w[f"blk.{il}.ffn_down.weight"][0].any()


# --- the open-vocabulary variant (fixtures/open-vocab/) ---------------------------------------------

OPEN = FIXTURES / "open-vocab"
OPEN_MANIFEST = json.loads((OPEN / "MANIFEST.json").read_text())


def test_open_variant_is_deterministic_and_its_committed_files_reproduce(tmp_path):
    a = fx.write_tiny_llama(tmp_path / "a", fx.OPEN_SEED, open_vocab=True)
    b = fx.write_tiny_llama(tmp_path / "b", fx.OPEN_SEED, open_vocab=True)
    assert a == b == OPEN_MANIFEST["files"] and OPEN_MANIFEST["seed"] == fx.OPEN_SEED
    for name, sha in OPEN_MANIFEST["files"].items():
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
        assert hashlib.sha256((OPEN / name).read_bytes()).hexdigest() == sha
    assert a != fx.write_tiny_llama(tmp_path / "closed", fx.OPEN_SEED)


def test_open_variant_gguf_facts():
    r = gguf.GGUFReader(str(OPEN / "target.gguf"))
    tokens = list(_field(r, "tokenizer.ggml.tokens"))
    assert tokens == fx.VOCAB  # the same vocabulary and ids as the default fixtures
    assert tokens[_field(r, "tokenizer.ggml.eos_token_id")] == "</s>"  # a control token: never sampled
    assert _field(r, "tokenizer.ggml.add_bos_token") is False
    # the samplable symbols are the printable ASCII bytes, each printed as itself
    assert len(fx.PRINTABLE) == 94 and [tokens[i] for i in fx.OPEN_IDS] == fx.PRINTABLE
    assert all(c.isprintable() and not c.isspace() and c.isascii() for c in fx.PRINTABLE)


def test_open_seed_meets_the_requirements():
    q = fx.open_seed_quality(fx.OPEN_SEED)
    assert q["ok"] and q["margin"] >= 30
    for side in ("target", "draft"):
        assert q[side]["outcomes"] == fx.OPEN_TOP_K == 40 and q[side]["printable"]
        assert q[side]["cut_gap"] >= 0.01  # a float32 build cuts top-k at the same token
    assert q["target"]["tv_half_top_k"] >= 0.25  # what a top-k of 20 moves: far beyond tolerance 0.1


@pytest.mark.parametrize("name", ["target.gguf", "draft.gguf"])
def test_open_variant_samples_40_printable_tokens_and_holds_the_rest_down(name):
    """At top-k 40, 40 printable tokens in every context (numpy forward pass); the proven margin
    holds: every held-down token's logit is below every printable token's by at least the bound,
    on contexts of every length to 40 (printable text, and any tokens as programs feed them)."""
    from bisectbot.llama import forward

    m = forward.load_gguf(OPEN / name)
    bound = fx.margin(m.weights, open_vocab=True)
    assert bound >= 30 and round(bound, 3) == OPEN_MANIFEST["model"]["margin"][name.split(".")[0]]
    held = np.ones(len(m.vocab), dtype=bool)
    held[fx.OPEN_IDS] = False
    rng = np.random.default_rng(11)
    contexts = [forward.tokenize(m, "bcdbc"), forward.tokenize(m, "\n\n### Instruction:\n\n")]
    contexts += [[int(i) for i in rng.choice(fx.OPEN_IDS, n)] for n in range(1, 41)]
    contexts += [[int(i) for i in rng.integers(0, len(m.vocab), n)] for n in range(1, 41)]
    for ids in contexts:
        logits = forward.forward_logits(m, ids)
        assert logits[~held].min() - logits[held].max() >= bound, ids
        p = forward.apply_sampler_chain(logits, 40, 1.0, 0.0, 1.0)
        kept = np.flatnonzero(p)
        assert len(kept) == 40 and not held[kept].any()


def test_open_reference_is_the_manifest_s():
    from bisectbot.llama import forward

    p = forward.next_token_probs(OPEN / "target.gguf", [1, 2, 3, 1, 2], top_k=40)
    want = OPEN_MANIFEST["reference"]["probs_after_bcdbc"]
    assert {k for k, v in p.items() if v > 0} == set(want) and len(want) == 40
    assert max(abs(p[k] - v) for k, v in want.items()) < 1e-9


def test_open_margin_notices_a_held_token_that_can_compete():
    target, _ = fx.make_weights(fx.OPEN_SEED, open_vocab=True)
    broken = {k: v.copy() for k, v in target.items()}
    broken["output.weight"][fx.VOCAB.index("Ġ"), 0] = -1.0  # space, no longer held down
    assert fx.margin(broken, open_vocab=True) < 0
    assert fx.margin(target, open_vocab=True) > 30


def test_the_cli_writes_either_variant_with_its_own_default_seed(tmp_path):
    from click.testing import CliRunner

    from bisectbot.cli import main

    res = CliRunner().invoke(main, ["fixtures", "tiny-llama", "--out", str(tmp_path / "o"), "--open-vocab"])
    assert res.exit_code == 0, res.output
    assert f"{OPEN_MANIFEST['files']['target.gguf']}  {tmp_path / 'o' / 'target.gguf'}" in res.output
    res = CliRunner().invoke(main, ["fixtures", "tiny-llama", "--out", str(tmp_path / "c")])
    assert res.exit_code == 0 and MANIFEST["files"]["draft.gguf"] in res.output


def test_the_open_vocabulary_config_s_numpy_reference_has_its_40_outcomes():
    """reference.compute.method numpy on configs/llama-open-vocab.yaml: P(first token after bcdbc)
    at top-k 40 over the whole vocabulary, the manifest's 40 printable tokens."""
    from bisectbot.config import load_config
    from bisectbot.judge.reference import resolve_reference

    ref = resolve_reference(load_config(REPO / "configs" / "llama-open-vocab.yaml"))
    want = OPEN_MANIFEST["reference"]["probs_after_bcdbc"]
    assert ref.condition_prob is None and len(ref.probs) == 40 and set(ref.probs) <= set(fx.PRINTABLE)
    assert max(abs(ref.probs[k] - v) for k, v in want.items()) < 1e-9


def test_the_planted_top_k_change_moves_the_open_reference_far():
    """fixtures/llama-cpp-top-k-halved.patch makes top-k 40 keep 20: the manifest's expected
    distribution is numpy's at top-k 20, a total variation of 0.33 from the reference."""
    from bisectbot.llama import forward

    p = forward.next_token_probs(OPEN / "target.gguf", [1, 2, 3, 1, 2], top_k=20)
    half = OPEN_MANIFEST["expected_with_top_k_halved"]
    assert {k for k, v in p.items() if v > 0} == set(half["probs_after_bcdbc"])
    ref = OPEN_MANIFEST["reference"]["probs_after_bcdbc"]
    tv = 0.5 * sum(abs(p[k] - ref.get(k, 0.0)) for k in p)
    assert abs(tv - half["tv_from_reference"]) < 1e-9 and tv > 0.3
    patch = (FIXTURES / "llama-cpp-top-k-halved.patch").read_text()
    assert "+    llama_sampler_top_k_impl(cur_p, ctx->k / 2);" in patch
