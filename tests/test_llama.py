"""The exact references of llama.cpp #29975: the numpy forward pass + sampler chain
(`llama.forward`), and the llama-server client (`llama.server`) against a fake server (a real one
is used only when BISECTBOT_LLAMA_SERVER names a binary). Also an analytic model of what
llama-speculative shows with and without the #29975 defects, checked against the manifest."""

from __future__ import annotations

import json
import math
import os
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gguf")

from bisectbot.errors import BisectbotError  # noqa: E402
from bisectbot.llama import forward as ref  # noqa: E402
from bisectbot.llama import server as srv  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
TARGET = REPO / "fixtures" / "target.gguf"
DRAFT = REPO / "fixtures" / "draft.gguf"
MANIFEST = json.loads((REPO / "fixtures" / "MANIFEST.json").read_text())
PROMPT = [1, 2, 3, 1, 2]  # "bcdbc"
VOCAB = list("abcdefgh")  # the letters; the model has every other byte and 5 specials after them
MODEL_VOCAB = __import__("bisectbot.llama.fixtures", fromlist=["VOCAB"]).VOCAB


def test_tokenization_facts():
    m = ref.load_gguf(TARGET)
    assert m.vocab == MODEL_VOCAB  # its EOS (h, 7): tests/test_fixtures.py
    assert ref.tokenize(m, "bcdbc") == PROMPT
    assert ref.tokenize(m, "bcdbcf") == PROMPT + [5]
    # byte-level: every byte its symbol's token, as llama.cpp's gpt2 tokenizer gives with no merge
    assert [m.vocab[i] for i in ref.tokenize(m, "a b\n")] == ["a", "Ġ", "b", "Ċ"]
    assert len(ref.tokenize(m, "é")) == 2  # two UTF-8 bytes
    with pytest.raises(BisectbotError, match="merge"):
        ref.tokenize(m, "\x00\x01")


def test_loaded_weights_round_trip():
    from bisectbot.llama.fixtures import make_weights

    target, _ = make_weights(MANIFEST["seed"])
    m = ref.load_gguf(TARGET)
    assert m.weights.keys() == target.keys()
    for k, v in target.items():
        np.testing.assert_array_equal(m.weights[k], v)


@pytest.mark.parametrize("prefix", [PROMPT, PROMPT + [5], PROMPT + [5, 3, 7]])
def test_probs_sum_to_one_and_top_k_3_leaves_3(prefix):
    p = ref.next_token_probs(TARGET, prefix, top_k=3, top_p=1.0, min_p=0.0, temp=1.0)
    assert set(p) == set(MODEL_VOCAB)
    assert math.isclose(sum(p.values()), 1.0, abs_tol=1e-12)
    assert sum(v > 0 for v in p.values()) == 3
    full = ref.next_token_probs(TARGET, prefix, top_k=0)
    assert all(full[t] > 0 for t in VOCAB)  # the letters; every other token is far below
    # top-k renormalises the 3 largest of the full distribution
    top3 = sorted(full, key=full.get, reverse=True)[:3]
    s = sum(full[t] for t in top3)
    for t in top3:
        assert math.isclose(p[t], full[t] / s, rel_tol=1e-9)


def test_manifest_reference_matches():
    r = MANIFEST["reference"]
    p = ref.next_token_probs(TARGET, PROMPT + [5], 3, 1.0, 0.0, 1.0)
    for t, v in r["probs_after_bcdbcf"].items():
        assert abs(p[t] - v) < 1e-9
    assert abs(ref.condition_prob(TARGET, PROMPT, "f", 3, 1.0, 0.0, 1.0) - r["condition_prob_f"]) < 1e-9
    assert ref.condition_prob(TARGET, PROMPT, "f") == ref.condition_prob(TARGET, PROMPT, 5)


def test_repeat_penalty_as_llama_cpp_applies_it():
    logits = np.array([2.0, -1.0, 0.5, 3.0])
    out = ref.repeat_penalty(logits, [0, 1, 1, 3], 2.0, 3)  # the last 3: tokens 1 and 3
    np.testing.assert_allclose(out, [2.0, -2.0, 0.5, 1.5])
    np.testing.assert_allclose(ref.repeat_penalty(logits, [0, 1], 1.0, 64), logits)
    np.testing.assert_allclose(ref.repeat_penalty(logits, [0, 1], 2.0, 0), logits)
    np.testing.assert_allclose(ref.repeat_penalty(logits, [0, 2, 3], 2.0, -1), [1.0, -1.0, 0.25, 1.5])
    # llama-cli's defaults before and after mid-2024 (1.1, 1.0) differ after a prompt with repeats
    ids = ref.tokenize(ref.load_gguf(TARGET), "adde")
    a = ref.next_token_probs(TARGET, ids, 40, 0.95, 0.05, 0.8, 1.0)
    b = ref.next_token_probs(TARGET, ids, 40, 0.95, 0.05, 0.8, 1.1)
    assert 0.5 * sum(abs(a[t] - b[t]) for t in a) > 0.1


def test_sampler_chain_semantics():
    logits = np.log(np.array([0.1, 0.2, 0.3, 0.4]))
    np.testing.assert_allclose(ref.apply_sampler_chain(logits, 0, 1.0, 0.0, 1.0), [0.1, 0.2, 0.3, 0.4])
    np.testing.assert_allclose(ref.apply_sampler_chain(logits, 2, 1.0, 0.0, 1.0), [0, 0, 3 / 7, 4 / 7])
    # top-p keeps the shortest prefix reaching p (0.4 + 0.3 >= 0.6)
    np.testing.assert_allclose(ref.apply_sampler_chain(logits, 0, 0.6, 0.0, 1.0), [0, 0, 3 / 7, 4 / 7])
    # min-p keeps p >= 0.6 * p_max (0.24)
    np.testing.assert_allclose(ref.apply_sampler_chain(logits, 0, 1.0, 0.6, 1.0), [0, 0, 3 / 7, 4 / 7])
    # temperature after truncation; temp <= 0 keeps the arg-max only
    t2 = ref.apply_sampler_chain(logits, 2, 1.0, 0.0, 2.0)
    np.testing.assert_allclose(t2[2:], np.sqrt([0.3, 0.4]) / np.sqrt([0.3, 0.4]).sum())
    np.testing.assert_allclose(ref.apply_sampler_chain(logits, 0, 1.0, 0.0, 0.0), [0, 0, 0, 1])


def speculative_outcome_probs(
    p_tgt: dict[str, float],
    p_dft: dict[str, float],
    *,
    vocab: list[str],
    draft_top: bool = False,
    residual_by_position: bool = False,
) -> dict[str, float]:
    """Distribution of a token that ``llama-speculative -np 1`` verifies against one drafted token,
    from the target's and draft's post-sampler distributions at that position.

    ``draft_top`` models defect 1 (the draft proposes its top candidate instead of a sample, yet
    the acceptance ratio still divides by its draft probability); ``residual_by_position`` models
    defect 2 (after a rejection, candidates sorted by id are subtracted position by position).
    With both False the result equals ``p_tgt`` (the speculative-sampling identity)."""
    p = np.array([p_tgt.get(t, 0.0) for t in vocab], dtype=np.float64)
    q = np.array([p_dft.get(t, 0.0) for t in vocab], dtype=np.float64)
    w = q
    if draft_top:
        w = np.zeros_like(q)
        w[int(np.argmax(q))] = 1.0
    if residual_by_position:
        t_ids = [i for i in range(len(vocab)) if p[i] > 0]  # ascending ids = the sorted arrays
        d_ids = [i for i in range(len(vocab)) if q[i] > 0]
        res = np.zeros_like(p)
        for k, ti in enumerate(t_ids):
            res[ti] = max(0.0, p[ti] - (q[d_ids[k]] if k < len(d_ids) else 0.0))
    else:
        res = np.maximum(0.0, p - q)
    res = res / res.sum() if res.sum() > 0 else p
    out = np.zeros_like(p)
    for x in range(len(vocab)):
        if w[x] == 0.0:
            continue
        a = min(1.0, p[x] / q[x])
        out[x] += w[x] * a
        out += w[x] * (1.0 - a) * res
    return {t: float(out[i]) for i, t in enumerate(vocab)}


def test_manifest_expectations_follow_from_the_analytic_model():
    """The manifest's expected outcome distributions (with and without each defect) are what
    the analytic model gives from its target and draft distributions."""
    r = MANIFEST["reference"]
    p, q = r["probs_after_bcdbcf"], r["draft_probs_after_bcdbcf"]
    expected = MANIFEST["expected_token1_given_f"]
    cases = {
        "fixed": {},
        "reintroduce_draft_top": {"draft_top": True},
        "reintroduce_residual_by_position": {"residual_by_position": True},
        "unpatched_0.3.36": {"draft_top": True, "residual_by_position": True},
    }
    for name, flags in cases.items():
        got = speculative_outcome_probs(p, q, vocab=VOCAB, **flags)
        for t, v in expected[name].items():  # the manifest rounds to 4 or 10 decimals
            assert abs(got[t] - v) < 6e-5, (name, t, got[t], v)
        assert sum(got.values()) == pytest.approx(1.0)


def test_speculative_identity_and_defects():
    r = MANIFEST["reference"]
    p, q = r["probs_after_bcdbcf"], r["draft_probs_after_bcdbcf"]
    ok = speculative_outcome_probs(p, q, vocab=VOCAB)
    for t in VOCAB:
        assert abs(ok[t] - p.get(t, 0.0)) < 1e-8  # manifest figures are rounded to 1e-10
    for flags in (
        {"draft_top": True},
        {"residual_by_position": True},
        {"draft_top": True, "residual_by_position": True},
    ):
        bad = speculative_outcome_probs(p, q, vocab=VOCAB, **flags)
        assert math.isclose(sum(bad.values()), 1.0)
        assert max(abs(bad[t] - p.get(t, 0.0)) for t in VOCAB) > 0.1, flags
    rng = np.random.default_rng(0)
    for _ in range(20):  # the identity holds for any pair of distributions
        pv, qv = rng.dirichlet(np.ones(8)), rng.dirichlet(np.ones(8))
        out = speculative_outcome_probs(dict(zip(VOCAB, pv)), dict(zip(VOCAB, qv)), vocab=VOCAB)
        np.testing.assert_allclose([out[t] for t in VOCAB], pv, atol=1e-12)


def test_rope_is_identity_at_position_zero():
    x = np.random.default_rng(1).standard_normal((1, 4, 4))
    np.testing.assert_allclose(ref._rope_norm(x, 4, 10000.0), x)


def test_parse_completion_probs():
    body = {
        "completion_probabilities": [
            {
                "id": 6,
                "token": "g",
                "prob": 0.5,
                "top_probs": [
                    {"id": 6, "token": "g", "prob": 0.5},
                    {"id": 3, "token": "d", "prob": 0.3},
                    {"id": 4, "token": "e", "prob": 0.2},
                ],
            }
        ]
    }
    assert srv.parse_completion_probs(body) == {"g": 0.5, "d": 0.3, "e": 0.2}
    with pytest.raises(BisectbotError):
        srv.parse_completion_probs({"content": "g"})


FAKE_SERVER = textwrap.dedent("""\
    #!{python}
    import json, sys
    from http.server import BaseHTTPRequestHandler, HTTPServer
    argv = sys.argv[1:]
    port = int(argv[argv.index("--port") + 1])
    record = {record!r}
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass
        def _send(self, obj):
            data = json.dumps(obj).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        def do_GET(self):
            self._send({{"status": "ok"}})
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            open(record, "w").write(json.dumps({{"argv": argv, "body": body}}))
            self._send({{"completion_probabilities": [{{"top_probs": [
                {{"token": "g", "prob": 0.6}}, {{"token": "d", "prob": 0.4}}]}}]}})
    HTTPServer(("127.0.0.1", port), H).serve_forever()
""")


def test_server_reference_against_fake_server(tmp_path):
    record = tmp_path / "record.json"
    server = tmp_path / "llama-server"
    server.write_text(FAKE_SERVER.format(python=sys.executable, record=str(record)))
    server.chmod(0o755)
    probs = srv.server_reference(server, TARGET, "bcdbcf", 8, top_k=3, timeout=30)
    assert probs == {"g": 0.6, "d": 0.4}
    seen = json.loads(record.read_text())
    assert seen["argv"][seen["argv"].index("-m") + 1] == str(TARGET)
    assert seen["argv"][seen["argv"].index("--host") + 1] == "127.0.0.1"
    body = seen["body"]
    assert body["prompt"] == "bcdbcf" and body["n_probs"] == 8 and body["n_predict"] == 1
    assert body["post_sampling_probs"] is True and body["top_k"] == 3
    assert body["samplers"] == ["penalties", "top_k", "top_p", "min_p", "temperature"]


def test_server_reference_reports_a_dead_server(tmp_path):
    server = tmp_path / "llama-server"
    server.write_text(f"#!{sys.executable}\nimport sys\nprint('boom', file=sys.stderr)\nsys.exit(3)\n")
    server.chmod(0o755)
    with pytest.raises(BisectbotError, match=r"ended \(exit status 3\).*boom"):
        srv.server_reference(server, TARGET, "bcdbcf", 8, timeout=30)


@pytest.mark.skipif(
    not os.environ.get("BISECTBOT_LLAMA_SERVER"), reason="set BISECTBOT_LLAMA_SERVER to a llama-server binary"
)
@pytest.mark.slow
def test_server_agrees_with_numpy():
    server = Path(os.environ["BISECTBOT_LLAMA_SERVER"])
    for prompt, ids in (("bcdbcf", PROMPT + [5]), ("bcdbc", PROMPT)):
        got = srv.server_reference(server, TARGET, prompt, 8, top_k=3)
        want = ref.next_token_probs(TARGET, ids, 3, 1.0, 0.0, 1.0)
        assert max(abs(got.get(t, 0.0) - v) for t, v in want.items()) < 1e-3
