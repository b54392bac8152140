"""Tiny GGUF fixtures for the llama.cpp #29975 check: a random 2-layer F32 Llama (target) and a
noisy copy of it (draft), vocabulary ``a``..``h`` plus two tokens that let every llama.cpp tree
from early 2024 on load the model.

Deterministic: the same seed gives byte-identical files (numpy ``default_rng(seed)``; the GGUF
writer adds no timestamps). ``write_tiny_llama(out_dir, seed)`` is the entry point.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from bisectbot.edges.files import file_sha256

__all__ = [
    "VOCAB",
    "LETTERS",
    "EXTRA_TOKENS",
    "EOS_ID",
    "BOS_ID",
    "N_EMBD",
    "N_FF",
    "N_HEAD",
    "N_LAYER",
    "DEFAULT_SEED",
    "DRAFT_NOISE",
    "make_weights",
    "write_gguf",
    "write_tiny_llama",
    "seed_quality",
]

LETTERS = list("abcdefgh")  # ids 0..7: what prompts and outputs are made of
# Trees up to late 2024 look up the newline token by tokenizing "\u010A" ('Ċ', gpt2's byte-level
# newline). Its UTF-8 bytes 0xC4 0x8A byte-encode to the symbols "Ä" and "Ĭ"; without them the
# loader throws "byte not found in vocab" (trees up to mid-2024) or asserts "model vocab missing
# newline token" (mid-2024 to Sep 2024). Their output rows give them logit -20 where the
# statistic reads (after the prompt and after prompt + condition), in the target and the draft,
# so they never enter the top-3 there and the reference is exactly that of the 8 letters.
EXTRA_TOKENS = ["Ä", "Ĭ"]  # ids 8, 9
VOCAB = LETTERS + EXTRA_TOKENS
UNREACHABLE_LOGIT = -20.0
READ_AT = ("bcdbc", "bcdbcf")  # the contexts whose next-token distributions the statistic reads
EOS_ID = 7  # 'h'
# Older trees (before upstream 4df29be) crash without a BOS id: the gpt2 default (11) is outside an
# 8-token vocabulary. An in-vocabulary id with add_bos_token=false is never inserted.
BOS_ID = 0  # 'a'
N_EMBD, N_FF, N_HEAD, N_LAYER = 16, 32, 4, 2
CTX_TRAIN = 128
RMS_EPS = 1e-5
ROPE_BASE = 10000.0
DRAFT_NOISE = 0.15  # std of the noise added to every draft tensor, relative to its std
DEFAULT_SEED = 132  # chosen with seed_quality(): see fixtures/MANIFEST.json

TARGET_NAME = "target.gguf"
DRAFT_NAME = "draft.gguf"


def _tensor_shapes(n_vocab: int = len(VOCAB)) -> list[tuple[str, tuple[int, ...]]]:
    shapes: list[tuple[str, tuple[int, ...]]] = [("token_embd.weight", (n_vocab, N_EMBD))]
    for il in range(N_LAYER):
        p = f"blk.{il}."
        shapes += [
            (p + "attn_norm.weight", (N_EMBD,)),
            (p + "attn_q.weight", (N_EMBD, N_EMBD)),
            (p + "attn_k.weight", (N_EMBD, N_EMBD)),
            (p + "attn_v.weight", (N_EMBD, N_EMBD)),
            (p + "attn_output.weight", (N_EMBD, N_EMBD)),
            (p + "ffn_norm.weight", (N_EMBD,)),
            (p + "ffn_gate.weight", (N_FF, N_EMBD)),
            (p + "ffn_up.weight", (N_FF, N_EMBD)),
            (p + "ffn_down.weight", (N_EMBD, N_FF)),
        ]
    shapes += [("output_norm.weight", (N_EMBD,)), ("output.weight", (n_vocab, N_EMBD))]
    return shapes


def make_weights(seed: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(target, draft) weights in numpy layout ((out, in) for matrices), float32: the letters'
    weights drawn from `seed`, then the rows of the extra tokens appended."""
    target, draft = _letter_weights(seed)
    return _with_extra_tokens(target), _with_extra_tokens(draft)


def _letter_weights(seed: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The weights of the 8-letter model (the random draws of the original fixtures)."""
    rng = np.random.default_rng(seed)
    target: dict[str, np.ndarray] = {}
    for name, shape in _tensor_shapes(len(LETTERS)):
        if len(shape) == 1:  # norm weights around 1
            arr = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name == "token_embd.weight":
            arr = rng.standard_normal(shape)
        elif name == "output.weight":
            arr = 0.5 * rng.standard_normal(shape)
        else:
            arr = rng.standard_normal(shape) / np.sqrt(shape[1])
        target[name] = arr.astype(np.float32)
    draft: dict[str, np.ndarray] = {}
    for name, arr in target.items():
        scale = float(np.std(arr)) if arr.ndim > 1 else 0.1
        draft[name] = (arr + DRAFT_NOISE * scale * rng.standard_normal(arr.shape)).astype(np.float32)
    return target, draft


def _with_extra_tokens(weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Append the extra tokens: embeddings of zero (they are never an input) and one output row,
    the least-norm solution of row · h = UNREACHABLE_LOGIT at every context of READ_AT."""
    from bisectbot.llama.forward import final_hidden

    letters = _model(weights, LETTERS)
    hidden = np.stack([final_hidden(letters, [LETTERS.index(c) for c in ctx]) for ctx in READ_AT])
    row = np.linalg.lstsq(hidden, np.full(len(READ_AT), UNREACHABLE_LOGIT), rcond=None)[0]
    out = dict(weights)
    n = len(EXTRA_TOKENS)
    out["token_embd.weight"] = np.vstack([weights["token_embd.weight"], np.zeros((n, N_EMBD))]).astype(np.float32)
    out["output.weight"] = np.vstack([weights["output.weight"], np.tile(row, (n, 1))]).astype(np.float32)
    return out


def _model(weights: dict[str, np.ndarray], vocab: list[str]):
    from bisectbot.llama.forward import TinyLlama

    return TinyLlama(
        n_embd=N_EMBD,
        n_head=N_HEAD,
        n_head_kv=N_HEAD,
        n_layer=N_LAYER,
        n_rot=N_EMBD // N_HEAD,
        eps=RMS_EPS,
        rope_base=ROPE_BASE,
        vocab=vocab,
        eos_id=EOS_ID,
        weights=weights,
    )


def write_gguf(path: Path, weights: dict[str, np.ndarray], name: str) -> None:
    """Write one tiny llama GGUF (atomically: ``path.tmp`` then rename)."""
    import gguf  # optional dependency (extra "llama")

    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    w = gguf.GGUFWriter(str(tmp), "llama")
    w.add_name(name)
    w.add_context_length(CTX_TRAIN)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(N_FF)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD)
    w.add_layer_norm_rms_eps(RMS_EPS)
    w.add_rope_freq_base(ROPE_BASE)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(VOCAB)
    w.add_token_types([gguf.TokenType.NORMAL] * len(VOCAB))
    # gguf-py refuses an empty merges list and the loader needs the key: one merge that never
    # applies to the prompts used here.
    w.add_token_merges(["h h"])
    w.add_bos_token_id(BOS_ID)
    w.add_eos_token_id(EOS_ID)
    w.add_add_bos_token(False)
    # No llama.vocab_size / tokenizer.ggml.add_eos_token: derived / default false.
    for tname, _shape in _tensor_shapes():
        w.add_tensor(tname, np.ascontiguousarray(weights[tname], dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, path)


def write_tiny_llama(out_dir: Path, seed: int) -> dict[str, str]:
    """Write ``target.gguf`` and ``draft.gguf`` for ``seed`` into ``out_dir``; returns
    ``{file name: sha256}``."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    target, draft = make_weights(seed)
    write_gguf(out_dir / TARGET_NAME, target, f"bisectbot-tiny-llama-target-{seed}")
    write_gguf(out_dir / DRAFT_NAME, draft, f"bisectbot-tiny-llama-draft-{seed}")
    return {n: file_sha256(out_dir / n) for n in (TARGET_NAME, DRAFT_NAME)}


def seed_quality(seed: int, prompt: str = "bcdbc", cond: str = "f", top_k: int = 3) -> dict:
    """Figures used to choose the generator seed (numpy reference, no file written):
    P(first token = cond), the target's and draft's distributions after prompt+cond."""
    from bisectbot.llama.forward import apply_sampler_chain, forward_logits

    target, draft = make_weights(seed)
    ids = [VOCAB.index(c) for c in prompt]
    mt, md = _model(target, VOCAB), _model(draft, VOCAB)
    p0 = apply_sampler_chain(forward_logits(mt, ids), top_k, 1.0, 0.0, 1.0)
    ids1 = ids + [VOCAB.index(cond)]
    pt = apply_sampler_chain(forward_logits(mt, ids1), top_k, 1.0, 0.0, 1.0)
    pd = apply_sampler_chain(forward_logits(md, ids1), top_k, 1.0, 0.0, 1.0)
    nz = pt[pt > 0]
    return {
        "seed": seed,
        "p_cond": float(p0[VOCAB.index(cond)]),
        "target": {VOCAB[i]: float(pt[i]) for i in range(len(VOCAB)) if pt[i] > 0},
        "draft": {VOCAB[i]: float(pd[i]) for i in range(len(VOCAB)) if pd[i] > 0},
        "min_target": float(nz.min()),
        "top_differs": int(np.argmax(pt)) != int(np.argmax(pd)),
        "ok": bool(
            float(p0[VOCAB.index(cond)]) >= 0.3
            and nz.min() >= 0.1
            and len(nz) == 3
            and int(np.argmax(pt)) != int(np.argmax(pd))
        ),
    }
