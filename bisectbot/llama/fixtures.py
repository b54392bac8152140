"""Tiny GGUF fixtures for llama.cpp checks: a random 2-layer F32 Llama (target) and a noisy copy
(draft) that every llama.cpp program from early 2024 on loads, over gpt2's whole byte-level
vocabulary (``a``..``h`` first, ids 0..7, then the other 248 bytes) and 5 control tokens.

What can be sampled is set by the output rows: a constant channel (dimension 0 of the residual
stream) holds every other token's logit down, by at least :func:`margin` in every context (an
exact bound). Default: the letters only, EOS ``h``. ``open_vocab``: the 94 printable ASCII bytes
``!``..``~`` (each prints as itself, no whitespace, control or non-ASCII byte: one character a
token), EOS ``</s>``. ``write_tiny_llama(out_dir, seed, open_vocab)``: byte-identical per seed.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from bisectbot.llama.forward import byte_symbols
from bisectbot.state.files import file_sha256

__all__ = [
    "VOCAB",
    "LETTERS",
    "BYTE_SYMBOLS",
    "SPECIAL_TOKENS",
    "EOS_ID",
    "BOS_ID",
    "N_EMBD",
    "N_FF",
    "N_HEAD",
    "N_LAYER",
    "DEFAULT_SEED",
    "DRAFT_NOISE",
    "byte_symbols",
    "make_weights",
    "margin",
    "write_gguf",
    "write_tiny_llama",
    "seed_quality",
    "PRINTABLE",
    "OPEN_IDS",
    "OPEN_EOS_ID",
    "OPEN_SEED",
    "OPEN_TOP_K",
    "samplable_ids",
    "open_seed_quality",
]


BYTE_SYMBOLS = byte_symbols()
LETTERS = list("abcdefgh")  # ids 0..7: what prompts and outputs are made of
# Every other byte symbol (ids 8..255), then the special tokens (ids 256..).
OTHER_BYTES = [s for s in BYTE_SYMBOLS if s not in LETTERS]
SPECIAL_TOKENS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<s>", "</s>"]
VOCAB = LETTERS + OTHER_BYTES + SPECIAL_TOKENS
EOS_ID = 7  # 'h'
# An in-vocabulary BOS with add_bos_token=false: older trees (before upstream 4df29be) crash
# without one, and none is ever inserted. `<s>`, a control token, as chat templates expect.
BOS_ID = VOCAB.index("<s>")
# gguf-py refuses an empty merges list and some loaders need the key: one merge of two control
# bytes (NUL, SOH) that no prompt contains, so tokenizing is one token per byte.
MERGES = [f"{BYTE_SYMBOLS[0]} {BYTE_SYMBOLS[1]}"]
N_EMBD, N_FF, N_HEAD, N_LAYER = 16, 32, 4, 2
CTX_TRAIN = 256
RMS_EPS = 1e-5
ROPE_BASE = 10000.0
DRAFT_NOISE = 0.15  # std of the noise added to every draft tensor, relative to its std
# The constant channel: every embedding holds CONSTANT in dimension 0 and no layer writes it, so
# after the final RMS norm it is positive in every context; every held-down token's output row is
# -OTHER_WEIGHT along it (plus a little noise, so no two tie): `margin` bounds how far down they stay.
CONSTANT = 3.0
OTHER_WEIGHT = 1000.0
DEFAULT_SEED = 879  # chosen with seed_quality(): see fixtures/MANIFEST.json

# The open-vocabulary variant: the 94 printable ASCII bytes '!'..'~' can be sampled, each its own
# gpt2 symbol, printed as one character. Held down with the specials: space and the other control
# bytes (whitespace or invisible: an output would not read one token a character), and the 128
# bytes >= 0x80 (alone, not UTF-8: a program prints a replacement or a broken string).
PRINTABLE = [chr(b) for b in range(0x21, 0x7F)]
OPEN_IDS = [VOCAB.index(s) for s in PRINTABLE]
OPEN_EOS_ID = VOCAB.index("</s>")  # a control token, never sampled: no sampled token ends a run
OPEN_SCALE = 0.25  # std of the printable tokens' output rows: logits of std ~1 across them
OPEN_TOP_K = 40
OPEN_SEED = 40  # chosen with open_seed_quality(): see fixtures/open-vocab/MANIFEST.json

TARGET_NAME = "target.gguf"
DRAFT_NAME = "draft.gguf"

# token types (gguf.TokenType): letters and bytes NORMAL, the specials CONTROL
_NORMAL, _CONTROL = 1, 3


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


def samplable_ids(open_vocab: bool = False) -> list[int]:
    """The ids the output rows leave free to be sampled: the letters (ids 0..7), or with
    `open_vocab` the 94 printable ASCII bytes (`PRINTABLE`); every other token is held down."""
    return list(OPEN_IDS) if open_vocab else list(range(len(LETTERS)))


def make_weights(seed: int, open_vocab: bool = False) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(target, draft) weights in numpy layout ((out, in) for matrices), float32. With
    `open_vocab` the printable ASCII bytes' output rows are free (std `OPEN_SCALE`), not the
    letters'."""
    rng = np.random.default_rng(seed)
    free = np.zeros(len(VOCAB), dtype=bool)
    free[samplable_ids(open_vocab)] = True
    target: dict[str, np.ndarray] = {}
    for name, shape in _tensor_shapes():
        if len(shape) == 1:  # norm weights around 1
            arr = 1.0 + 0.1 * rng.standard_normal(shape)
        elif name == "token_embd.weight":
            arr = rng.standard_normal(shape)
        elif name == "output.weight":
            arr = (OPEN_SCALE if open_vocab else 0.5) * rng.standard_normal(shape)
            # every other token: against the constant channel, with a little noise so none tie
            held = ~free
            arr[held] = (0.01 / OPEN_SCALE if open_vocab else 0.01) * arr[held]
            arr[held, 0] = -OTHER_WEIGHT
        else:
            arr = rng.standard_normal(shape) / np.sqrt(shape[1])
        target[name] = arr.astype(np.float64)
    draft: dict[str, np.ndarray] = {}
    for name, arr in target.items():
        scale = float(np.std(arr)) if arr.ndim > 1 else 0.1
        if name == "output.weight":  # the free rows get noise (of their scale); the others stay
            noisy = arr.copy()
            scale = float(np.std(arr[free]))
            noisy[free] += DRAFT_NOISE * scale * rng.standard_normal(noisy[free].shape)
            draft[name] = noisy
        else:
            draft[name] = arr + DRAFT_NOISE * scale * rng.standard_normal(arr.shape)
    return _constant_channel(target), _constant_channel(draft)


def _constant_channel(weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Dimension 0 of the residual stream held at CONSTANT: every embedding has it there, and
    no attention or feed-forward output writes to it (row 0 of their output matrices is zero)."""
    out = {k: v.copy() for k, v in weights.items()}
    out["token_embd.weight"][:, 0] = CONSTANT
    for il in range(N_LAYER):
        out[f"blk.{il}.attn_output.weight"][0, :] = 0.0
        out[f"blk.{il}.ffn_down.weight"][0, :] = 0.0
    return {k: v.astype(np.float32) for k, v in out.items()}


def margin(weights: dict[str, np.ndarray], open_vocab: bool = False) -> float:
    """A lower bound, over every context, of how far below the best letter's logit every other
    token's logit lies (the gap that keeps them from being sampled); with `open_vocab`, how far
    below the *lowest* printable token's logit every held-down token's lies (so at any top-k up
    to 94 only printable tokens are kept, and without top-k the others weigh under e^-margin each).

    After each RMS norm a vector lies on the sphere of radius sqrt(n_embd), scaled by the norm's
    weights, so every layer adds at most a computable amount to the residual stream: attention
    outputs are convex combinations of V rows (‖W_o‖‖W_v‖‖g‖∞·√n), the feed-forward's silu(a)·b
    is at most max(|a|,…)·|b| per unit. That bounds the stream's other dimensions by B, so the
    constant channel's share after the last norm is u0 ≥ C/√((C² + B²)/n); a letter's logit is
    at most ‖row ⊙ g‖·√n, another token's at most its row's part along dim 0 times u0 plus the
    rest's worst case."""
    w = {k: v.astype(np.float64) for k, v in weights.items()}
    n = N_EMBD
    root = math.sqrt(n)
    emb = w["token_embd.weight"]
    bound = float(np.max(np.linalg.norm(emb[:, 1:], axis=1)))  # the embeddings' other dims
    for il in range(N_LAYER):
        p = f"blk.{il}."
        g_attn = float(np.max(np.abs(w[p + "attn_norm.weight"])))
        # each head's output is a convex combination of its V slices, each at most ‖W_v‖‖g‖∞√n
        v_max = np.linalg.norm(w[p + "attn_v.weight"], 2) * g_attn * root
        bound += float(np.linalg.norm(w[p + "attn_output.weight"], 2) * v_max * math.sqrt(N_HEAD))
        g_ffn = float(np.max(np.abs(w[p + "ffn_norm.weight"])))
        # silu(a)·b per unit, |silu(a_j)| ≤ |a_j|: at most ‖a‖∞·‖b‖, and at most ‖(|a_j|·|b_j|)_j‖
        h_max = g_ffn * root  # ‖h‖ after the norm
        gate = np.linalg.norm(w[p + "ffn_gate.weight"], axis=1) * h_max  # |a_j| ≤ this
        up = np.linalg.norm(w[p + "ffn_up.weight"], axis=1) * h_max  # |b_j| ≤ this
        by_unit = float(np.linalg.norm(gate * up))
        by_norm = float(np.max(gate) * np.linalg.norm(w[p + "ffn_up.weight"], 2) * h_max)
        hidden = min(by_unit, by_norm)
        bound += float(np.linalg.norm(w[p + "ffn_down.weight"], 2) * hidden)
    u0_min = CONSTANT / math.sqrt((CONSTANT**2 + bound**2) / n + RMS_EPS)
    g = w["output_norm.weight"]
    out = w["output.weight"]
    free = np.zeros(len(out), dtype=bool)
    free[samplable_ids(open_vocab)] = True
    # a free token's logit is at least -|row ⊙ g|·√n; the best letter's at least the highest of
    # those, the lowest printable token's (open_vocab) at least the lowest of them
    lows = -np.linalg.norm(out[free] * g, axis=1) * root
    free_low = float(np.min(lows) if open_vocab else np.max(lows))
    others = out[~free] * g
    # another token's logit: along dim 0 (negative, times u0 ≥ u0_min) + the rest at most |rest|·√n
    along = others[:, 0]
    assert np.all(along < 0), "every held-down row must point against the constant channel"
    rest = np.linalg.norm(others[:, 1:], axis=1) * root
    worst_other = float(np.max(along * u0_min + rest))
    return free_low - worst_other


def write_gguf(path: Path, weights: dict[str, np.ndarray], name: str, eos_id: int = EOS_ID) -> None:
    """Write one tiny llama GGUF (atomically: ``path.tmp`` then rename)."""
    import gguf

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
    w.add_token_types([_CONTROL if tok in SPECIAL_TOKENS else _NORMAL for tok in VOCAB])
    w.add_token_merges(MERGES)
    w.add_bos_token_id(BOS_ID)
    w.add_eos_token_id(eos_id)
    w.add_add_bos_token(False)
    # No llama.vocab_size / tokenizer.ggml.add_eos_token: derived / default false. No chat
    # template: programs run on a plain prompt (a chat template would switch llama-cli into
    # conversation mode); llama-server's default template names tokens that exist.
    for tname, _shape in _tensor_shapes():
        w.add_tensor(tname, np.ascontiguousarray(weights[tname], dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    os.replace(tmp, path)


def write_tiny_llama(out_dir: Path, seed: int, open_vocab: bool = False) -> dict[str, str]:
    """Write ``target.gguf`` and ``draft.gguf`` for ``seed`` into ``out_dir``; returns
    ``{file name: sha256}``. `open_vocab`: the variant whose 94 printable ASCII bytes can all be
    sampled (EOS ``</s>``, never sampled)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    target, draft = make_weights(seed, open_vocab)
    kind, eos = ("open-vocab-", OPEN_EOS_ID) if open_vocab else ("", EOS_ID)
    write_gguf(out_dir / TARGET_NAME, target, f"bisectbot-tiny-llama-{kind}target-{seed}", eos)
    write_gguf(out_dir / DRAFT_NAME, draft, f"bisectbot-tiny-llama-{kind}draft-{seed}", eos)
    return {n: file_sha256(out_dir / n) for n in (TARGET_NAME, DRAFT_NAME)}


def _model(weights: dict[str, np.ndarray]):
    from bisectbot.llama.forward import TinyLlama

    return TinyLlama(
        n_embd=N_EMBD,
        n_head=N_HEAD,
        n_head_kv=N_HEAD,
        n_layer=N_LAYER,
        n_rot=N_EMBD // N_HEAD,
        eps=RMS_EPS,
        rope_base=ROPE_BASE,
        vocab=VOCAB,
        weights=weights,
    )


def seed_quality(seed: int, prompt: str = "bcdbc", cond: str = "f", top_k: int = 3) -> dict:
    """Figures used to choose the generator seed (numpy reference, no file written):
    P(first token = cond), the target's and draft's distributions after prompt+cond, and the
    margin that keeps every non-letter token out."""
    from bisectbot.llama.forward import apply_sampler_chain, forward_logits

    target, draft = make_weights(seed)
    ids = [VOCAB.index(c) for c in prompt]
    mt, md = _model(target), _model(draft)
    p0 = apply_sampler_chain(forward_logits(mt, ids), top_k, 1.0, 0.0, 1.0)
    ids1 = ids + [VOCAB.index(cond)]
    pt = apply_sampler_chain(forward_logits(mt, ids1), top_k, 1.0, 0.0, 1.0)
    pd = apply_sampler_chain(forward_logits(md, ids1), top_k, 1.0, 0.0, 1.0)
    nz = pt[pt > 0]
    gap = min(margin(target), margin(draft))
    return {
        "seed": seed,
        "p_cond": float(p0[VOCAB.index(cond)]),
        "target": {VOCAB[i]: float(pt[i]) for i in range(len(VOCAB)) if pt[i] > 0},
        "draft": {VOCAB[i]: float(pd[i]) for i in range(len(VOCAB)) if pd[i] > 0},
        "min_target": float(nz.min()),
        "top_differs": int(np.argmax(pt)) != int(np.argmax(pd)),
        "margin": gap,
        "ok": bool(
            float(p0[VOCAB.index(cond)]) >= 0.3
            and nz.min() >= 0.1
            and len(nz) == 3
            and int(np.argmax(pt)) != int(np.argmax(pd))
            and gap >= 30.0
        ),
    }


def open_seed_quality(seed: int, prompt: str = "bcdbc", top_k: int = OPEN_TOP_K) -> dict:
    """Figures used to choose the open variant's seed (numpy, no file written): the target's and
    draft's distributions of the token after `prompt` at `top_k`; the total variation a top-k of
    half as many would make (what a planted change moves); the logit gap at the top-k cut (a
    float32 build must cut at the same token); and the margin."""
    from bisectbot.llama.forward import apply_sampler_chain, forward_logits

    target, draft = make_weights(seed, open_vocab=True)
    ids = [VOCAB.index(c) for c in prompt]
    out: dict = {"seed": seed, "margin": min(margin(target, True), margin(draft, True))}
    for name, weights in (("target", target), ("draft", draft)):
        logits = forward_logits(_model(weights), ids)
        p = apply_sampler_chain(logits, top_k, 1.0, 0.0, 1.0)
        half = apply_sampler_chain(logits, top_k // 2, 1.0, 0.0, 1.0)
        ranked = np.sort(logits)[::-1]
        kept = p[p > 0]
        out[name] = {
            "outcomes": int(len(kept)),
            "printable": bool(all(VOCAB[i] in PRINTABLE for i in np.flatnonzero(p))),
            "min_p": float(kept.min()),
            "max_p": float(kept.max()),
            "tv_half_top_k": float(0.5 * np.abs(p - half).sum()),
            "cut_gap": float(ranked[top_k - 1] - ranked[top_k]),
        }
    t, d = out["target"], out["draft"]
    out["ok"] = bool(
        all(x["outcomes"] == top_k and x["printable"] and x["cut_gap"] >= 0.01 for x in (t, d))
        and t["min_p"] >= 0.005
        and t["max_p"] <= 0.15
        and t["tv_half_top_k"] >= 0.25
        and out["margin"] >= 30.0
    )
    return out
