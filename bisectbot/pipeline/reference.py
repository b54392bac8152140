"""Reference stage: the distribution a correct build must produce, written down or computed.

Four ways, chosen in the config:
  (a) `reference.probs` (+ `condition_prob`): numbers written in the config;
  (b) `reference.compute.method: server`: the non-speculative `llama-server` built at a given
      commit, queried on 127.0.0.1 for post-sampling probabilities, then stopped;
  (c) `reference.compute.method: numpy`: a forward pass of the tiny GGUF model in numpy plus the
      sampler chain — independent of any llama.cpp build;
  (d) `reference.control`: no exact reference, but a known-good commit: its counts over seeds
      disjoint from every test (stats.test_against_control pays δ once for their uncertainty).
Computed references are cached in the state database by (method, commit, model sha256, prompt,
sampler settings), so a bisect computes its reference once.

Outcome probabilities are P(outcome | prompt + condition token); the condition probability is
P(first generated token = condition token | prompt). Outcomes the reference gives probability 0
are left out: seeing one proves BAD.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

from bisectbot.core import stats
from bisectbot.config import ComputedReference, Config
from bisectbot.errors import BisectbotError
from bisectbot.edges.storage import BuildRecord, State


@dataclass(frozen=True)
class ResolvedReference:
    probs: dict[str, float]
    condition_prob: float | None
    source: str  # human-readable: where the numbers come from
    control: dict[str, int] | None = None  # the control sample's counts, when it is one
    delta: float = 0.0

    def stats_reference(self) -> stats.Reference:
        if self.control is not None:
            return stats.Reference.from_control(self.control, self.delta)
        return stats.Reference.from_probs(self.probs, self.condition_prob)


class Builder(Protocol):
    """What a server reference needs from the pipeline: a build of another target at a commit."""

    state: State

    def build_target(self, ref: str, target: str, binaries: list[str]) -> tuple[str, BuildRecord]: ...

    def control_counts(self, ref: str, runs: int) -> tuple[str, dict[str, int]]: ...


def resolve_reference(cfg: Config, builder: Builder | None = None) -> ResolvedReference:
    ref = cfg.reference
    if ref.probs is not None:
        return ResolvedReference(dict(ref.probs), ref.condition_prob, "config")
    if ref.control is not None:
        if builder is None:
            raise BisectbotError("reference.control needs runs of the control commit")
        sha, counts = builder.control_counts(ref.control.commit, ref.control.runs)
        total = sum(counts.values())
        return ResolvedReference({k: v / total for k, v in counts.items()}, None,
                                 f"control sample of {total} runs at {sha[:12]} (δ = {ref.control.delta:g})",
                                 counts, ref.control.delta)
    comp = ref.compute
    assert comp is not None
    model = cfg.resolve(comp.model)
    if not model.is_file():
        raise BisectbotError(f"reference.compute.model: {model} does not exist")
    cond = cfg.statistic.condition.token if cfg.statistic.condition else None
    key_parts = {"method": comp.method, "model": _sha256(model), "prompt": comp.prompt,
                 "cond": cond, "sampling": [comp.top_k, comp.top_p, comp.min_p, comp.temp, comp.samplers]}
    if comp.method == "numpy":
        return _cached(builder, key_parts, lambda: _numpy(comp, model, cond))
    if builder is None:
        raise BisectbotError("reference.compute.method server needs a build of llama-server")
    sha, build = builder.build_target(str(comp.commit), comp.target, comp.binary)
    if not build.ok:
        raise BisectbotError(f"reference: cannot build {comp.target} at {sha[:12]}: {build.reason}")
    key_parts["commit"] = sha
    binary = Path(next(iter(build.binaries.values())))
    return _cached(builder, key_parts, lambda: _server(comp, binary, model, cond, sha))


def _cached(builder: Builder | None, parts: dict, compute) -> ResolvedReference:
    key = "reference:" + hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]
    state = builder.state if builder is not None else None
    if state is not None and (hit := state.get_kv(key)):
        return ResolvedReference(**json.loads(hit))
    resolved = compute()
    if state is not None:
        state.put_kv(key, json.dumps(asdict(resolved)))
    return resolved


def _support(probs: dict[str, float]) -> dict[str, float]:
    """Drop zero (cut) tokens and renormalise the rest exactly."""
    kept = {k: v for k, v in probs.items() if v > 1e-12}
    total = sum(kept.values())
    return {k: v / total for k, v in kept.items()}


def _numpy(comp: ComputedReference, model: Path, cond: str | None) -> ResolvedReference:
    from bisectbot.llama import reference as llama_ref

    tiny = llama_ref.load_gguf(model)
    ids = llama_ref.tokenize(tiny, comp.prompt)
    kw = dict(top_k=comp.top_k, top_p=comp.top_p, min_p=comp.min_p, temp=comp.temp)
    if cond is None:
        return ResolvedReference(_support(llama_ref.next_token_probs(model, ids, **kw)), None,
                                 f"numpy forward pass of {model.name}")
    cond_p = llama_ref.condition_prob(model, ids, cond, **kw)
    if cond_p <= 0:
        raise BisectbotError(f"reference: the condition token {cond!r} has probability 0 after "
                             f"{comp.prompt!r}: no run could ever meet it")
    probs = llama_ref.next_token_probs(model, ids + [tiny.vocab.index(cond)], **kw)
    return ResolvedReference(_support(probs), cond_p, f"numpy forward pass of {model.name}")


def _server(comp: ComputedReference, binary: Path, model: Path, cond: str | None,
            sha: str) -> ResolvedReference:
    from bisectbot.llama import reference as llama_ref

    kw = dict(top_k=comp.top_k, top_p=comp.top_p, min_p=comp.min_p, temp=comp.temp,
              samplers=comp.samplers, timeout=comp.timeout)
    first = llama_ref.server_reference(binary, model, comp.prompt, **kw)
    source = f"llama-server at {sha[:12]} (post-sampling probabilities)"
    if cond is None:
        return ResolvedReference(_support(first), None, source)
    if first.get(cond, 0.0) <= 0:
        raise BisectbotError(f"reference: llama-server gives the condition token {cond!r} probability 0")
    probs = llama_ref.server_reference(binary, model, comp.prompt + cond, **kw)
    return ResolvedReference(_support(probs), first[cond], source)


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
