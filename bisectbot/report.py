"""Report stage (pure rendering, plus the environment probe): JSON and Markdown summaries.

The JSON is the contract other tools rely on (schema in README.md); the Markdown is for people:
the culprit first, then the table of tested commits with observed counts against the
reference, then how to reproduce and on what machine.
"""

from __future__ import annotations

import math
import os
import platform
import shutil
from typing import Any, Mapping, Sequence

from bisectbot import __version__
from bisectbot.config import Config
from bisectbot.edges.procs import run

OTHER_LABELS = {"<other>": "other", "<missed>": "missed"}


def compiler_version() -> str:
    """First line of the C++ compiler's --version."""
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or "c++"
    res = run([cxx, "--version"], timeout=10)
    return res.stdout.splitlines()[0] if res.returncode == 0 and res.stdout else "unknown"


def cmake_version() -> str:
    res = run(["cmake", "--version"], timeout=10)
    return res.stdout.splitlines()[0] if res.returncode == 0 and res.stdout else "unknown"


def environment(cfg: Config) -> dict[str, Any]:
    return {
        "compiler": compiler_version(),
        "cmake": cmake_version(),
        "cmake_args": list(cfg.build.cmake_args),
        "host": platform.node(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "bisectbot": __version__,
    }


def reference_json(cfg: Config, resolved: Any) -> dict[str, Any]:
    """The reference as reports show it: its probabilities, source, and the test's categories."""
    ref = resolved.stats_reference()
    return {
        "probs": dict(resolved.probs),
        "condition_prob": resolved.condition_prob,
        "source": resolved.source,
        "categories": list(ref.names),
        "category_probs": list(ref.probs),
        "condition": cfg.statistic.condition.model_dump() if cfg.statistic.condition else None,
        "outcome": cfg.statistic.outcome.model_dump(),
    }


# -- formatting helpers ---------------------------------------------------------------------------
def fmt_e(log_e: float) -> str:
    """An e-value from its log, compactly: 3.2e4, 0.41, ∞."""
    if math.isinf(log_e) and log_e > 0:
        return "∞"
    if log_e > 700:
        return f"e^{log_e:.0f}"
    value = math.exp(log_e)
    return f"{value:.2g}" if 1e-2 <= value < 1e3 else f"{value:.1e}"


def observed_vs_reference(counts: Mapping[str, int], reference: Mapping[str, Any]) -> str:
    """'e 14 (1.00 vs 0.35) · g 0 (0 vs 0.45)': outcome frequencies among runs meeting the condition."""
    names = [n for n in reference["categories"] if n != "<missed>"]
    probs = dict(zip(reference["categories"], reference["category_probs"]))
    met = sum(counts.get(n, 0) for n in names)
    p_met = sum(probs[n] for n in names) or 1.0
    parts = []
    for n in names:
        c = counts.get(n, 0)
        if n == "<other>" and c == 0:
            continue
        freq = f"{c / met:.2f}" if met else "–"
        parts.append(f"{OTHER_LABELS.get(n, n)} {c} ({freq} vs {probs[n] / p_met:.2f})")
    missed = counts.get("<missed>")
    if missed:
        parts.append(f"missed {missed}")
    return " · ".join(parts)


def evidence_cell(v: Mapping[str, Any]) -> str:
    if v["verdict"] == "skip":
        return v["reason"][:120]
    return f"E_bad {fmt_e(v['log_e_bad'])}, E_good {fmt_e(v['log_e_good'])}"


def verdict_table(verdicts: Sequence[Mapping[str, Any]], reference: Mapping[str, Any],
                  link: str | None = None) -> str:
    rows = ["| commit | subject | role | verdict | runs | observed (vs reference) | evidence |",
            "|---|---|---|---|---|---|---|"]
    for v in verdicts:
        sha = f"[`{v['sha'][:12]}`]({link.format(sha=v['sha'])})" if link else f"`{v['sha'][:12]}`"
        subject = _cell(v.get("subject", ""))[:70]
        rows.append(
            f"| {sha} | {subject} | {_role(v)} | **{v['verdict'].upper()}** | {v['runs']} | "
            f"{_cell(observed_vs_reference(v['counts'], reference)) if v['counts'] else '–'} | "
            f"{_cell(evidence_cell(v))} |"
        )
    return "\n".join(rows)


def _role(v: Mapping[str, Any]) -> str:
    arm = v.get("arm", "main")
    return v["role"] if arm == "main" else f"{v['role']} [{arm}]"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def reference_line(reference: Mapping[str, Any]) -> str:
    probs = ", ".join(f"{k} {v:.4f}" for k, v in reference["probs"].items())
    cond = reference.get("condition")
    where = f" given token {cond['position']} = `{cond['token']}`" if cond else ""
    pc = reference.get("condition_prob")
    tail = f"; P(condition) {pc:.4f}" if pc else ""
    source = f" (from {reference['source']})" if reference.get("source") else ""
    return f"token {reference['outcome']['position']}{where}: {probs}{tail}{source}"


def environment_lines(env: Mapping[str, Any]) -> list[str]:
    return [
        f"- compiler: {env.get('compiler')}",
        f"- cmake: {env.get('cmake')}; arguments: `{' '.join(env.get('cmake_args', [])) or '(none)'}`",
        f"- host: {env.get('host')} ({env.get('platform')}), Python {env.get('python')}, "
        f"bisectbot {env.get('bisectbot')}",
    ]


# -- whole reports --------------------------------------------------------------------------------
def bisect_markdown(r: Mapping[str, Any], *, link: str | None = None) -> str:
    """The human summary of a bisect report (the JSON dict)."""
    what = "first bad" if r["find"] == "bad" else "first fixed"
    if r["status"] == "found":
        head = f"## bisectbot: {what} commit is `{r['first_bad'][:12]}` — {r['first_bad_subject']}"
    elif r["status"] == "unconfirmed":
        head = f"## bisectbot: {what} commit not confirmed"
    else:
        head = f"## bisectbot: {what} commit is one of {len(r['candidates'])}"
    lines = [head, ""]
    if r["status"] == "found":
        lines.append(f"First {r['find']}: `{r['first_bad']}`  ")
        lines.append(f"Last {'good' if r['find'] == 'bad' else 'still bad'}: `{r['last_good']}`")
    else:
        lines.append(r["message"])
        if r["candidates"]:
            lines.append("")
            lines.append("Candidates: " + ", ".join(f"`{c[:12]}`" for c in r["candidates"]))
    lines += [
        "",
        f"**{r['status']}** · {r['commits']} commits between `{r['good'][:12]}` ({r['good_ref']}) and "
        f"`{r['bad'][:12]}` ({r['bad_ref']}) · **{r['builds']} builds** "
        f"(⌈log2 N⌉ + 3 = {r['builds_bound']}) · **{r['runs']} runs** "
        f"({r['retried']} reruns of incomplete output) · confidence ≥ {r['confidence']:.2%} "
        f"(per-step error ≤ {r['step_alpha']:.1e})",
        "",
        f"Reference: {reference_line(r['reference'])}",
        "",
        verdict_table(r["verdicts"], r["reference"], link),
        "",
        "### Reproduce",
        "```",
        r["reproduce"],
        "```",
        "",
        "### Environment",
        *environment_lines(r["environment"]),
        f"- config: {r['config']['name']} (digest {r['config']['digest']})",
    ]
    return "\n".join(lines) + "\n"


def test_markdown(r: Mapping[str, Any]) -> str:
    """The human summary of `bisectbot test` (one commit's verdict)."""
    v = r["detail"]
    lines = [
        f"## bisectbot: `{r['commit'][:12]}` is **{r['verdict'].upper()}** after {r['runs']} runs",
        "",
        f"{v['subject']}",
        "",
        f"Reference: {reference_line(r['reference'])}",
        "",
        verdict_table([v], r["reference"]),
        "",
        f"Why: {v['reason']}",
    ]
    for name, av in r.get("arms", {}).items():
        lines += ["", f"Arm **{name}**: **{av['verdict'].upper()}** after {av['runs']} runs — {av['reason']}",
                  "", verdict_table([av], r["reference"])]
    if v.get("failures"):
        lines.append("Failed runs: " + ", ".join(f"{k} {n}" for k, n in v["failures"].items()))
    if v.get("retried"):
        lines.append(f"Reruns of incomplete output: {v['retried']}")
    lines += ["", "### Reproduce", "```", r["reproduce"], "```", "", "### Environment",
              *environment_lines(r["environment"])]
    return "\n".join(lines) + "\n"
