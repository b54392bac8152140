"""The non-speculative llama-server as a reference: post-sampling probabilities of one token.

``/completion`` with ``n_probs``, ``post_sampling_probs: true`` and ``n_predict: 1`` gives the
distribution the sampler chain leaves, which is what llama-speculative must reproduce. Returns
``{token_text: probability}`` over the tokens the samplers kept (cut tokens are absent).
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NotRequired

from bisectbot.errors import BisectbotError
from bisectbot.llama.forward import Sampling
from bisectbot.processes import localhttp
from bisectbot.processes.procs import Server, ServerError, clean_env, free_port

__all__ = ["parse_completion_probs", "server_reference"]


def parse_completion_probs(body: dict) -> dict[str, float]:
    """``{token_text: prob}`` of the first generated position of a /completion response made with
    ``post_sampling_probs: true`` (entries ``completion_probabilities[0].top_probs``)."""
    try:
        first = body["completion_probabilities"][0]
        entries = first["top_probs"]
    except (KeyError, IndexError, TypeError) as exc:
        raise BisectbotError(
            f"llama-server response has no completion_probabilities[0].top_probs: {json.dumps(body)[:300]}"
        ) from exc
    out: dict[str, float] = {}
    for e in entries:
        key = "prob" if "prob" in e else "probability"
        out[e["token"]] = float(e[key])
    return out


class ServerSampling(Sampling):
    """What `server_reference` is asked with besides the binary, model and prompt: the sampler
    chain's settings, its sampler order, a timeout, the server's environment, and how many
    probabilities to ask for (at least the tokens top-k keeps)."""

    samplers: str
    timeout: float
    env: dict[str, str]
    n_probs: NotRequired[int]


def server_reference(
    server_binary: Path,
    model: Path,
    prompt: str,
    n_probs: int = 8,
    *,
    top_k: int = 3,
    top_p: float = 1.0,
    min_p: float = 0.0,
    temp: float = 1.0,
    samplers: str = "penalties;top_k;top_p;min_p;temperature",
    repeat_penalty: float = 1.0,
    repeat_last_n: int = 64,
    ctx_size: int = 64,
    timeout: float = 120.0,
    seed: int = 1,
    extra_args: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, float]:
    """Start ``llama-server`` on 127.0.0.1 (free port), wait for /health, ask /completion for the
    post-sampling probabilities of the token after ``prompt``; always stops the server.

    ``extra_args`` replaces the default ``--cache-type-k f32 --cache-type-v f32 -fa off`` (trees
    before llama-cpp-python 0.3.18 take ``-fa`` as a bare switch: pass ``[]`` there). ``env`` is
    the server's environment (default: this one without credentials)."""
    port = free_port()
    if extra_args is None:
        extra_args = ["--cache-type-k", "f32", "--cache-type-v", "f32", "-fa", "off"]
    argv = [
        str(server_binary),
        "-m",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-c",
        str(ctx_size),
        "-t",
        "1",
        "-np",
        "1",
        *extra_args,
    ]
    payload = {
        "prompt": prompt,
        "n_predict": 1,
        "n_probs": n_probs,
        "post_sampling_probs": True,
        "samplers": samplers.split(";"),
        "temperature": temp,
        "top_k": top_k,
        "top_p": top_p,
        "min_p": min_p,
        "repeat_penalty": repeat_penalty,
        "repeat_last_n": repeat_last_n,
        "seed": seed,
        "cache_prompt": False,
    }
    deadline = time.monotonic() + timeout
    with tempfile.TemporaryDirectory() as tmp:
        server = Server(
            argv,
            port=port,
            health="/health",
            startup_timeout=timeout,
            env=clean_env() if env is None else env,
            log=Path(tmp) / "server.log",
        )
        try:
            with server:
                reply = localhttp.request(
                    server.base_url + "/completion", payload, timeout=max(1.0, deadline - time.monotonic())
                )
        except (ServerError, localhttp.HttpFailure) as exc:
            raise BisectbotError(f"llama-server: {exc}") from None
    if reply.status != 200:
        raise BisectbotError(f"llama-server /completion returned HTTP {reply.status}: {reply.body[:300]!r}")
    try:
        return parse_completion_probs(reply.json())
    except ValueError:
        raise BisectbotError(f"llama-server /completion answered with no JSON: {reply.body[:300]!r}") from None
