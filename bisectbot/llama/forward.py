"""The exact next-token distribution of a tiny Llama, in numpy (llama.cpp #29975 reference).

:func:`next_token_probs` runs a forward pass of the model read from its GGUF
(``gguf.GGUFReader``) and then the sampler chain exactly as llama.cpp applies
``penalties;top_k;top_p;min_p;temperature`` + ``dist`` (repeat penalty 1.0 is a no-op).
It returns ``{token_text: probability}`` over the vocabulary, 0.0 for tokens the samplers cut.
Independent of any llama.cpp build; `llama.server` asks a real llama-server for the same
numbers, and the two agree to 1e-7 on the committed fixtures.

The repeat penalty (llama.cpp's `penalties` sampler, and `llama_sample_repetition_penalties`
before September 2024) is applied as llama.cpp does: every distinct token among the last
`repeat_last_n` of the context has its logit divided by the penalty when positive and multiplied
by it otherwise. llama-cli/main's defaults were 1.1 until mid-2024 and are 1.0 since.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence, TypedDict

import numpy as np

from bisectbot.errors import BisectbotError

__all__ = [
    "TinyLlama",
    "load_gguf",
    "forward_logits",
    "final_hidden",
    "apply_sampler_chain",
    "next_token_probs",
    "condition_prob",
    "tokenize",
]


@dataclass
class TinyLlama:
    """Hyperparameters, vocabulary and F32 weights of a (tiny) llama-architecture model."""

    n_embd: int
    n_head: int
    n_head_kv: int
    n_layer: int
    n_rot: int
    eps: float
    rope_base: float
    vocab: list[str]
    weights: dict[str, np.ndarray]  # numpy layout: (out, in) for matrices, (n_vocab, n_embd) for embeddings
    merges: tuple[str, ...] = ()  # the BPE merges, "left right" (tokenize refuses a text one would apply to)


def _field_value(reader, key: str):
    field = reader.fields.get(key)
    if field is None:
        return None
    return field.contents()


def load_gguf(path: Path) -> TinyLlama:
    """Read a llama-architecture GGUF with F32 tensors into a :class:`TinyLlama`."""
    from gguf import GGUFReader  # optional dependency (extra "llama")

    path = Path(path)
    try:
        reader = GGUFReader(str(path))
    except (OSError, ValueError) as exc:
        raise BisectbotError(f"{path}: cannot read GGUF: {exc}") from exc
    arch = _field_value(reader, "general.architecture")
    if arch != "llama":
        raise BisectbotError(f"{path}: general.architecture is {arch!r}, only 'llama' is supported")

    def hp(key, default=None):
        val = _field_value(reader, f"llama.{key}")
        if val is None:
            if default is None:
                raise BisectbotError(f"{path}: missing key llama.{key}")
            return default
        return val

    n_embd = int(hp("embedding_length"))
    n_head = int(hp("attention.head_count"))
    weights: dict[str, np.ndarray] = {}
    for t in reader.tensors:
        if t.tensor_type.name != "F32":
            raise BisectbotError(f"{path}: tensor {t.name} is {t.tensor_type.name}, only F32 is supported")
        shape = tuple(int(x) for x in reversed(list(t.shape)))  # GGUF ne order -> numpy order
        weights[t.name] = np.asarray(t.data, dtype=np.float32).reshape(shape)
    return TinyLlama(
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=int(hp("attention.head_count_kv", n_head)),
        n_layer=int(hp("block_count")),
        n_rot=int(hp("rope.dimension_count", n_embd // n_head)),
        eps=float(hp("attention.layer_norm_rms_epsilon")),
        rope_base=float(hp("rope.freq_base", 10000.0)),
        vocab=[str(x) for x in _field_value(reader, "tokenizer.ggml.tokens")],
        weights=weights,
        merges=tuple(str(m) for m in (_field_value(reader, "tokenizer.ggml.merges") or ())),
    )


def byte_symbols() -> list[str]:
    """gpt2's byte-level alphabet: the symbol of byte b at index b (printable Latin-1 bytes are
    themselves; the others are U+0100 onward, in byte order)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    table, n = {}, 0
    for b in range(256):
        if b in printable:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + n)
            n += 1
    return [table[b] for b in range(256)]


BYTE_SYMBOLS = byte_symbols()


def tokenize(model: TinyLlama, text: str) -> list[int]:
    """Tokenize as llama.cpp's gpt2 (byte-level BPE) tokenizer does for the fixture vocabulary:
    each byte of the text's UTF-8 becomes its byte-level symbol, one token each, because no
    merge of the vocabulary applies (a text that a merge would apply to is refused, as is a
    byte whose symbol the vocabulary lacks)."""
    index = {tok: i for i, tok in enumerate(model.vocab)}
    symbols = [BYTE_SYMBOLS[b] for b in text.encode("utf-8")]
    pairs = {f"{a} {b}" for a, b in zip(symbols, symbols[1:])}
    if used := sorted(pairs & set(model.merges)):
        raise BisectbotError(f"prompt {text!r}: the merge {used[0]!r} would apply; not supported by the reference")
    try:
        return [index[sym] for sym in symbols]
    except KeyError as exc:
        raise BisectbotError(f"prompt {text!r}: the byte symbol {exc.args[0]!r} is not in the vocabulary") from None


# --- forward pass -------------------------------------------------------------------------------


def _rms_norm(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def _rope_norm(x: np.ndarray, n_rot: int, base: float) -> np.ndarray:
    """ggml RoPE, mode NORM (LLM_ARCH_LLAMA): rotate adjacent pairs (2i, 2i+1) of each head.
    x: (n_tokens, n_head, head_dim); positions are 0..n_tokens-1."""
    out = x.copy()
    pos = np.arange(x.shape[0], dtype=np.float64)[:, None]
    i0 = np.arange(0, n_rot, 2, dtype=np.float64)[None, :]
    theta = pos * base ** (-i0 / n_rot)  # (n_tokens, n_rot/2)
    cos = np.cos(theta)[:, None, :]
    sin = np.sin(theta)[:, None, :]
    x0 = x[..., 0:n_rot:2].astype(np.float64)
    x1 = x[..., 1:n_rot:2].astype(np.float64)
    out[..., 0:n_rot:2] = x0 * cos - x1 * sin
    out[..., 1:n_rot:2] = x0 * sin + x1 * cos
    return out


def forward_logits(model: TinyLlama, ids: list[int]) -> np.ndarray:
    """Logits (n_vocab,) for the token following ``ids`` (float64 arithmetic)."""
    w = model.weights
    out_w = w.get("output.weight", w["token_embd.weight"]).astype(np.float64)
    return out_w @ final_hidden(model, ids)


def final_hidden(model: TinyLlama, ids: list[int]) -> np.ndarray:
    """The normed hidden state (n_embd,) the output matrix turns into the next token's logits."""
    if not ids:
        raise BisectbotError("forward_logits: empty prefix")
    w = {k: v.astype(np.float64) for k, v in model.weights.items()}
    n_tok = len(ids)
    hd = model.n_embd // model.n_head
    x = w["token_embd.weight"][np.asarray(ids)]  # (n_tok, n_embd)
    mask = np.triu(np.full((n_tok, n_tok), -np.inf), k=1)
    group = model.n_head // model.n_head_kv
    for il in range(model.n_layer):
        p = f"blk.{il}."
        h = _rms_norm(x, w[p + "attn_norm.weight"], model.eps)
        q = (h @ w[p + "attn_q.weight"].T).reshape(n_tok, model.n_head, hd)
        k = (h @ w[p + "attn_k.weight"].T).reshape(n_tok, model.n_head_kv, hd)
        v = (h @ w[p + "attn_v.weight"].T).reshape(n_tok, model.n_head_kv, hd)
        q = _rope_norm(q, model.n_rot, model.rope_base)
        k = _rope_norm(k, model.n_rot, model.rope_base)
        heads = []
        for ih in range(model.n_head):
            ik = ih // group
            s = (q[:, ih, :] @ k[:, ik, :].T) / math.sqrt(hd) + mask
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            s /= s.sum(axis=-1, keepdims=True)
            heads.append(s @ v[:, ik, :])
        attn = np.concatenate(heads, axis=-1) @ w[p + "attn_output.weight"].T
        x = x + attn
        h = _rms_norm(x, w[p + "ffn_norm.weight"], model.eps)
        g = h @ w[p + "ffn_gate.weight"].T
        u = h @ w[p + "ffn_up.weight"].T
        x = x + ((g / (1.0 + np.exp(-g))) * u) @ w[p + "ffn_down.weight"].T
    return _rms_norm(x[-1], w["output_norm.weight"], model.eps)


# --- sampler chain ------------------------------------------------------------------------------


def repeat_penalty(logits: np.ndarray, history: Sequence[int], penalty: float, last_n: int) -> np.ndarray:
    """llama.cpp's repeat penalty: each distinct token of the last `last_n` of `history` (0: none,
    -1: all) has its logit divided by `penalty` if positive, multiplied by it otherwise."""
    out = np.asarray(logits, dtype=np.float64).copy()
    if penalty == 1.0 or last_n == 0:
        return out
    window = list(history) if last_n < 0 else list(history)[-last_n:]
    for tok in set(window):
        out[tok] = out[tok] / penalty if out[tok] > 0 else out[tok] * penalty
    return out


def apply_sampler_chain(
    logits: np.ndarray, top_k: int, top_p: float, min_p: float, temp: float, min_keep: int = 0
) -> np.ndarray:
    """Probabilities after ``penalties;top_k;top_p;min_p;temperature`` + ``dist`` as in llama.cpp
    (src/llama-sampler.cpp): penalties with repeat 1.0 / freq 0 / presence 0 are the identity;
    top-k keeps the k largest logits; top-p takes a softmax of the *current* logits (before the
    temperature) and keeps the shortest prefix whose cumulative sum reaches p; min-p keeps logits
    >= max + log(min_p); temperature divides logits (temp <= 0: only the arg-max survives);
    dist takes the softmax. Cut tokens get probability 0."""
    logits = np.asarray(logits, dtype=np.float64)
    order = np.argsort(-logits, kind="stable")  # llama.cpp sorts descending; ties are not expected
    cand = order
    if top_k > 0:
        cand = cand[: min(top_k, len(cand))]
    if top_p < 1.0:
        z = logits[cand]
        pr = np.exp(z - z.max())
        pr /= pr.sum()
        cum = np.cumsum(pr)
        last = len(cand)
        for i in range(len(cand)):
            if cum[i] >= top_p and i + 1 >= min_keep:
                last = i + 1
                break
        cand = cand[:last]
    if min_p > 0.0:
        z = logits[cand]
        keep = z >= z.max() + math.log(min_p)
        if keep.sum() >= max(1, min_keep):
            cand = cand[keep]
    z = logits[cand]
    if temp <= 0.0:
        probs = np.zeros_like(logits)
        probs[cand[int(np.argmax(z))]] = 1.0
        return probs
    z = z / temp
    pr = np.exp(z - z.max())
    pr /= pr.sum()
    probs = np.zeros_like(logits)
    probs[cand] = pr
    return probs


def _probs_for(
    model: TinyLlama, ids: list[int], top_k, top_p, min_p, temp, penalty: float = 1.0, last_n: int = 64
) -> np.ndarray:
    logits = repeat_penalty(forward_logits(model, ids), ids, penalty, last_n)
    return apply_sampler_chain(logits, top_k, top_p, min_p, temp)


class Sampling(TypedDict):
    """The sampler chain's settings, as `next_token_probs` and `condition_prob` take them."""

    top_k: int
    top_p: float
    min_p: float
    temp: float
    repeat_penalty: float
    repeat_last_n: int


def next_token_probs(
    target_gguf: Path,
    prefix_ids: list[int],
    top_k: int = 3,
    top_p: float = 1.0,
    min_p: float = 0.0,
    temp: float = 1.0,
    repeat_penalty: float = 1.0,
    repeat_last_n: int = 64,
) -> dict[str, float]:
    """Exact distribution of the token after ``prefix_ids`` under the sampler chain,
    ``{token_text: p}`` over the whole vocabulary (0.0 for cut tokens)."""
    model = load_gguf(Path(target_gguf))
    probs = _probs_for(model, list(prefix_ids), top_k, top_p, min_p, temp, repeat_penalty, repeat_last_n)
    return {tok: float(probs[i]) for i, tok in enumerate(model.vocab)}


def condition_prob(
    target_gguf: Path,
    prompt_ids: list[int],
    token: str | int,
    top_k: int = 3,
    top_p: float = 1.0,
    min_p: float = 0.0,
    temp: float = 1.0,
    repeat_penalty: float = 1.0,
    repeat_last_n: int = 64,
) -> float:
    """P(first generated token after the prompt == token)."""
    model = load_gguf(Path(target_gguf))
    tid = model.vocab.index(token) if isinstance(token, str) else int(token)
    probs = _probs_for(model, list(prompt_ids), top_k, top_p, min_p, temp, repeat_penalty, repeat_last_n)
    return float(probs[tid])
