"""The demo target: exact reference numbers, the generated history, and real builds and runs.

The build tests compile the generated C++ with cmake (about 1.5 s per build) and run it over a
fixed seed range, so their chi-square p-values are deterministic, not flaky.
"""

from __future__ import annotations

import io
import json
import math
import random
import re
import subprocess
import tarfile
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml
from scipy.stats import chisquare

import coherence
from bisectbot import demo
from bisectbot.demo import (
    CONDITION_TOKEN,
    DRAFT_PROBS,
    PROMPT,
    TARGET_PROBS,
    VOCAB,
    _argmax,
    _index,
    _residual,
    condition_prob,
    generate_demo,
    reference_probs,
    render_tables_h,
)

from conftest import TOOLCHAIN, bisectbot_argv, needs, needs_toolchain, require, subprocess_env

SEEDS = range(1, 2001)
DRAFT_MAX = 3  # specdemo's --draft-max when not given (src/main.cpp), as the config runs it


# --- helpers --------------------------------------------------------------------------------


def total_variation(p: dict[str, float], q: dict[str, float]) -> float:
    """Total-variation distance between two distributions over the same letters."""
    return 0.5 * sum(abs(p.get(k, 0.0) - q.get(k, 0.0)) for k in set(p) | set(q))


def simulate(prompt: str, n: int, rng: random.Random, *, draft_max: int = DRAFT_MAX, defect: bool = False) -> str:
    """Python mirror of the C++ algorithm (not its RNG stream); checks the exact numbers of the demo module."""

    def sample(weights: list[float] | tuple[float, ...]) -> int:
        return rng.choices(range(len(weights)), weights=weights)[0]

    out: list[int] = []
    prev = _index(prompt[-1])
    while len(out) < n:
        draft, ctx = [], prev
        for _ in range(min(draft_max, n - len(out))):
            tok = _argmax(DRAFT_PROBS[ctx]) if defect else sample(DRAFT_PROBS[ctx])
            draft.append(tok)
            ctx = tok
        ctx, all_accepted = prev, True
        for tok in draft:
            p, q = TARGET_PROBS[ctx], DRAFT_PROBS[ctx]
            if rng.random() * q[tok] < p[tok]:
                out.append(tok)
                ctx = tok
                continue
            ctx = sample(_residual(ctx))
            out.append(ctx)
            all_accepted = False
            break
        if all_accepted and len(out) < n:
            ctx = sample(TARGET_PROBS[ctx])
            out.append(ctx)
        prev = ctx
    return prompt + "".join(VOCAB[t] for t in out)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout


def build(repo: Path, sha: str, where: Path) -> subprocess.CompletedProcess[str] | Path:
    """Build one commit out of tree; the binary's path on success, the failed process otherwise."""
    src, bld = where / "src", where / "build"
    src.mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(repo), "archive", sha], capture_output=True, check=True).stdout
    tarfile.open(fileobj=io.BytesIO(archive)).extractall(src, filter="data")
    for cmd in (
        ["cmake", "-S", str(src), "-B", str(bld), "-DCMAKE_BUILD_TYPE=Release"],
        ["cmake", "--build", str(bld), "-j2", "--target", "specdemo"],
    ):
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            return proc
    return bld / "specdemo"


def run(binary: Path, seed: int) -> str:
    proc = subprocess.run(
        [str(binary), "--seed", str(seed), "--prompt", PROMPT, "-n", "4"], capture_output=True, text=True, timeout=10
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def sweep(binary: Path, seeds: range = SEEDS) -> list[str]:
    with ThreadPoolExecutor(max_workers=4) as pool:
        return list(pool.map(lambda s: run(binary, s), seeds))


def conditional_counts(outputs: list[str]) -> tuple[Counter[str], int]:
    """Counts of token 1 among outputs whose token 0 is the condition token, and that total."""
    tokens = [out.removesuffix("\n").removeprefix(PROMPT) for out in outputs]
    assert all(len(t) == 4 and set(t) <= set(VOCAB) for t in tokens), tokens[:5]
    hits = [t[1] for t in tokens if t[0] == CONDITION_TOKEN]
    return Counter(hits), len(hits)


def chi2_pvalue(counts: Counter[str], n: int, probs: dict[str, float]) -> float:
    support = [k for k in VOCAB if probs[k] > 0]
    assert sum(counts[k] for k in VOCAB if probs[k] == 0) == 0, "hit a zero-probability token"
    return chisquare([counts[k] for k in support], [n * probs[k] for k in support]).pvalue


def empirical(counts: Counter[str], n: int) -> dict[str, float]:
    return {k: counts[k] / n for k in VOCAB}


# --- exact numbers --------------------------------------------------------------------------


def test_tables_are_distributions() -> None:
    for table in (TARGET_PROBS, DRAFT_PROBS):
        assert len(table) == len(VOCAB)
        for row in table:
            assert len(row) == len(VOCAB) and min(row) >= 0 and math.isclose(sum(row), 1.0)
    # a noisy copy: the draft's argmax differs from the target's in several rows
    assert sum(demo._argmax(p) != demo._argmax(q) for p, q in zip(TARGET_PROBS, DRAFT_PROBS)) >= 3


def test_reference_numbers_are_usable() -> None:
    ref, bad = reference_probs(CONDITION_TOKEN), reference_probs(CONDITION_TOKEN, defect=True)
    assert ref == {"a": 0.1, "b": 0.2, "c": 0.05, "d": 0.3, "e": 0.25, "f": 0.1}
    assert math.isclose(sum(bad.values()), 1.0)
    assert condition_prob(CONDITION_TOKEN) == 0.4
    assert condition_prob(CONDITION_TOKEN, defect=True) >= 0.3  # the buggy binary still hits the condition
    assert max(ref.values()) <= 0.3 and sum(v > 0 for v in ref.values()) == 6  # spread
    assert total_variation(ref, bad) >= 0.4


def test_python_simulation_matches_exact_numbers() -> None:
    """Simulating the algorithm (correct and defective) reproduces the exact formulas, TV >= 0.3."""
    rng = random.Random(12345)
    results = {}
    for defect in (False, True):
        outputs = [simulate(PROMPT, 4, rng, defect=defect) for _ in range(30000)]
        counts, n = conditional_counts(outputs)
        assert abs(n / len(outputs) - condition_prob(CONDITION_TOKEN, defect=defect)) < 0.015
        exact = reference_probs(CONDITION_TOKEN, defect=defect)
        assert chi2_pvalue(counts, n, exact) > 1e-4
        results[defect] = empirical(counts, n)
    assert total_variation(results[False], results[True]) >= 0.3


def test_simulation_is_target_chain_for_any_draft_max() -> None:
    """Correct speculative sampling emits the target chain whatever the draft length."""
    rng = random.Random(7)
    for draft_max in (0, 1, 2, 5):
        outs = [simulate("a", 2, rng, draft_max=draft_max) for _ in range(6000)]
        second = Counter(o[2] for o in outs if o[1] == "b")
        n = sum(second.values())
        assert chi2_pvalue(second, n, {k: TARGET_PROBS[1][i] for i, k in enumerate(VOCAB)}) > 1e-4


# --- the generated history ------------------------------------------------------------------


@needs("git")
def test_generate_is_deterministic(tmp_path: Path) -> None:
    args = dict(n_commits=10, culprit_index=6, break_index=2, seed=3)
    h1 = generate_demo(tmp_path / "one", **args)
    h2 = generate_demo(tmp_path / "two", **args)
    assert h1.commits == h2.commits and h1.culprit == h2.culprit and h1.build_break == h2.build_break
    h3 = generate_demo(tmp_path / "three", **{**args, "seed": 4})
    assert h3.bad != h1.bad
    with pytest.raises(FileExistsError):
        generate_demo(tmp_path / "one", **args)


@needs("git")
def test_history_shape_and_config(tmp_path: Path) -> None:
    h = generate_demo(tmp_path / "d", n_commits=12, culprit_index=7, break_index=3, seed=1)
    assert len(h.commits) == 12 and h.good == h.commits[0] and h.bad == h.commits[-1]
    assert git(h.repo, "rev-list", "--first-parent", "--reverse", "HEAD").split() == list(h.commits)
    assert h.culprit == h.commits[7] and h.build_break == h.commits[3]
    assert "take top draft candidate" in git(h.repo, "log", "-1", "--format=%s", h.culprit)
    assert git(h.repo, "diff", "--name-only", f"{h.culprit}^", h.culprit).split() == ["src/speculative.cpp"]
    assert git(h.repo, "diff", "--name-only", f"{h.build_break}^", h.build_break).split() == ["src/util.cpp"]
    assert git(h.repo, "status", "--porcelain") == ""
    # every commit changes something; most ordinary ones touch compiled code
    touched = [git(h.repo, "diff", "--name-only", f"{c}^", c).split() for c in h.commits[1:]]
    assert all(touched) and sum(any(f.startswith("src/") for f in t) for t in touched) >= 5
    assert (h.repo / "src/tables.h").read_text() == render_tables_h() + "\n"

    cfg = yaml.safe_load(h.config.read_text())
    assert h.config.parent == h.repo.parent and (h.config.parent / cfg["repo"]["path"]).resolve() == h.repo
    assert list(cfg) == ["name", "repo", "build", "run", "parse", "statistic", "reference", "test", "storage"]
    assert cfg["storage"] == {"state_dir": "./state"}  # beside the config: `bisectbot log` finds it
    assert cfg["run"]["argv"] == ["{binary}", "--seed", "{seed}", "--prompt", "ab", "-n", "4"]
    assert cfg["statistic"] == {"condition": {"position": 0, "token": "c"}, "outcome": {"position": 1}}
    assert cfg["reference"] == {"probs": reference_probs("c"), "condition_prob": 0.4}
    assert cfg["build"]["binaries"] == {"binary": ["specdemo", "bin/specdemo"]}


def test_drawn_positions_avoid_ends_and_collisions() -> None:
    for seed in range(300):
        n = 5 + seed % 40
        culprit, brk = demo._pick_positions(n, random.Random(seed), None, None, None, None)
        assert 2 <= culprit <= n - 2 and 1 <= brk <= n - 2 and culprit not in (brk, brk + 1)
    culprit, brk = demo._pick_positions(8, random.Random(0), None, None, 3, 5)
    assert {culprit, brk, brk + 1}.isdisjoint({3, 5})


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(n_commits=4),
        dict(n_commits=10, culprit_index=0),
        dict(n_commits=10, break_index=9),
        dict(n_commits=10, culprit_index=5, break_index=4),
        dict(n_commits=10, culprit_index=5, crash_index=5),
    ],
)
def test_bad_positions_are_rejected(tmp_path: Path, kwargs: dict) -> None:
    with pytest.raises(ValueError):
        generate_demo(tmp_path, **kwargs)


# --- real builds and runs -------------------------------------------------------------------


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("demo")
    h = generate_demo(base / "hist", n_commits=12, culprit_index=7, break_index=3, seed=1)
    out: dict[str, Path] = {}
    for name, sha in (("good", h.good), ("before", h.commits[6]), ("culprit", h.culprit), ("bad", h.bad)):
        result = build(h.repo, sha, base / name)
        assert isinstance(result, Path), result.stderr + result.stdout
        out[name] = result
    broken = build(h.repo, h.build_break, base / "break")
    assert not isinstance(broken, Path), "the build-break commit built"
    assert "util.cpp" in broken.stdout + broken.stderr
    return out


@pytest.mark.heavy  # whole bisects or long simulations, 4 s or more: after the default suite (README: Tests)
@needs_toolchain
def test_correct_binary_matches_reference(built: dict[str, Path]) -> None:
    outputs = sweep(built["good"])
    counts, n = conditional_counts(outputs)
    z = (n - len(SEEDS) * 0.4) / math.sqrt(len(SEEDS) * 0.4 * 0.6)
    assert abs(z) < 4.5, f"P(token0 = c) off: {n}/{len(SEEDS)}"
    assert chi2_pvalue(counts, n, reference_probs(CONDITION_TOKEN)) > 1e-4
    # behaviour-preserving commits really preserve behaviour, seed for seed
    assert sweep(built["before"], range(1, 201)) == outputs[:200]


@needs_toolchain
def test_defective_binary_is_far_off(built: dict[str, Path]) -> None:
    for name in ("culprit", "bad"):
        counts, n = conditional_counts(sweep(built[name]))
        ref = reference_probs(CONDITION_TOKEN)
        assert total_variation(empirical(counts, n), ref) > 0.3
        assert chisquare([counts[k] for k in VOCAB], [n * ref[k] for k in VOCAB]).pvalue < 1e-12
        # and it is the defect we describe, not some other breakage
        assert chi2_pvalue(counts, n, reference_probs(CONDITION_TOKEN, defect=True)) > 1e-4


@needs_toolchain
def test_output_is_deterministic_per_seed(built: dict[str, Path]) -> None:
    for name in ("good", "bad"):
        first = sweep(built[name], range(1, 41))
        assert sweep(built[name], range(1, 41)) == first
        assert len(set(first)) > 10
        assert all(o.startswith(PROMPT) and o.endswith("\n") and len(o) == len(PROMPT) + 5 for o in first)


@needs_toolchain
def test_cli_rejects_bad_arguments(built: dict[str, Path]) -> None:
    binary = str(built["good"])
    for argv in (["--seed", "x"], ["--prompt", "az"], ["--bogus", "1"], ["--seed"]):
        assert subprocess.run([binary, *argv], capture_output=True, timeout=10).returncode == 2
    out = subprocess.run(
        [binary, "--seed", "5", "--prompt", "f", "-n", "9", "--draft-max", "0"], capture_output=True, text=True
    )
    assert out.returncode == 0 and len(out.stdout.strip()) == 10


@needs_toolchain
def test_crash_and_hang_commits(tmp_path: Path) -> None:
    h = generate_demo(tmp_path / "crash", n_commits=6, culprit_index=2, break_index=3, crash_index=1)
    binary = build(h.repo, h.bad, tmp_path / "crash_build")
    assert isinstance(binary, Path)
    proc = subprocess.run([str(binary), "--seed", "1", "--prompt", "ab", "-n", "4"], capture_output=True, timeout=10)
    assert proc.returncode < 0 and proc.stdout == b""

    h = generate_demo(tmp_path / "hang", n_commits=6, culprit_index=2, break_index=3, hang_index=5)
    assert h.hang == h.bad
    binary = build(h.repo, h.bad, tmp_path / "hang_build")
    assert isinstance(binary, Path)
    with pytest.raises(subprocess.TimeoutExpired):
        subprocess.run([str(binary), "--seed", "1", "--prompt", "ab", "-n", "4"], capture_output=True, timeout=1)


# --- issue 48: what the demo prints agrees with itself ---------------------------------------


@pytest.fixture(scope="module")
def demo_output(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """`bisectbot demo --commits 10` as a person runs it (80 columns, coloured) with every output
    file: its summary (stdout), progress (stderr), Markdown, HTML page and JSON report."""
    require(*TOOLCHAIN)
    base = tmp_path_factory.mktemp("coherent")
    files = {name: base / f"report.{name}" for name in ("md", "html", "json")}
    argv = ["demo", "--commits", "10", "--dir", str(base / "demo"), "--color", "always"]
    argv += ["--markdown", str(files["md"]), "--html", str(files["html"]), "--json", str(files["json"])]
    env = {k: v for k, v in subprocess_env(COLUMNS="80").items() if k not in ("NO_COLOR", "CI")}
    proc = subprocess.run(bisectbot_argv(*argv), capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"stdout": proc.stdout, "stderr": proc.stderr, **{k: p.read_text() for k, p in files.items()}}


@pytest.mark.heavy  # a whole demo bisect, ~20 s idle (README: Tests); test_report.py: the same on sample reports
def test_the_demos_summary_and_charts_say_nothing_against_themselves(demo_output: dict[str, str]) -> None:
    """Issue 48's acceptance: read what the demo printed and wrote. Placements (GOOD-SIDE) are
    not drawn as distances in any chart, and each chart says which it left out and why; the
    parent's CHANGED says it differs from its child and is not red; each builds count is within
    its bound or says why; every term is glossed where it is first used."""
    summary, progress, md, page = (demo_output[k] for k in ("stdout", "stderr", "md", "html"))
    report = json.loads(demo_output["json"])
    placed = {a["commit"]: a["position"] for a in report["along"] if a["verdict"] in ("good-side", "bad-side")}
    assert placed, "the demo's search placed no commit: nothing to check the charts against"
    assert {sha[:12] for sha in placed} <= set(coherence.placement_rows(summary))
    coherence.terminal_chart_draws_no_placement(summary, placed)
    coherence.mermaid_chart_draws_no_placement(md, placed)
    coherence.html_chart_draws_no_placement(page, placed)
    assert "<script" not in page

    coherence.table_words_explained(summary)
    coherence.no_red_changed(summary, progress)
    parent = next(v for v in report["verdicts"] if v["role"] == "confirm-parent")
    said = f"confirm-parent {parent['sha'][:12]}: CHANGED after {parent['runs']} runs — differs from its child"
    assert said in flat_out(progress)
    row = next(ln for ln in md.splitlines() if "| confirm-parent |" in ln)
    assert "differs from its child" in row and "E_bad" not in row

    assert coherence.builds_within_bound_or_say_why(summary) == 2  # the figures and the planted culprit's line
    assert coherence.builds_within_bound_or_say_why(md) == 1

    coherence.terms_glossed_where_first_used(summary)
    coherence.markdown_terms_glossed_where_first_used(md)
    assert "servers" not in summary  # the demo has no cross-check arm: nothing started a server
    strategy = next(ln for ln in coherence.plain(progress).splitlines() if ln.startswith("[strategy]"))
    assert "misplaced quick step assumed" not in strategy and "quick steps, placing a commit GOOD-SIDE" in strategy
    # the confidence is the union bound over the claims the gloss counts
    m = re.search(
        r"confidence ≥ ([\d.]+)%: the union bound over the (\d+) claims .*?: 1 − \2 × ([\d.e+-]+)", flat_out(summary)
    )
    assert m, flat_out(summary)[:2000]
    assert abs(1 - int(m.group(2)) * float(m.group(3)) - float(m.group(1)) / 100) < 5e-5
    assert abs(report["confidence"] - float(m.group(1)) / 100) < 5e-5


def flat_out(text: str) -> str:
    """A summary's lines (wrapped to the terminal) read as one, colour codes left out."""
    return " ".join(coherence.plain(text).split())


@pytest.mark.heavy  # the same demo bisect as above (module fixture)
def test_the_readmes_example_glosses_are_what_the_demo_prints(demo_output: dict[str, str]) -> None:
    """The README shows the demo's summary; its gloss lines are the ones the demo prints now."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    example = readme[readme.index("## What a run looks like") :]
    example = example[example.index("```\n") + 4 : example.index("\n```", example.index("```\n") + 4)]
    glosses = [ln for ln in coherence.logical_lines(example) if ln.startswith(coherence.GLOSS)]
    assert len(glosses) >= 5
    printed = coherence.logical_lines(demo_output["stdout"])
    for gloss in glosses:
        if re.match(re.escape(coherence.GLOSS) + coherence.STEPS, gloss):
            continue  # which steps the forecast names depends on what this machine measured
        assert gloss in printed, gloss
