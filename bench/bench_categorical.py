"""The categorical tests without the power set, against the power-set tests of a baseline revision,
side by side on the same draws, at K = 3 … 8 outcomes (issue 53).

    python bench/bench_categorical.py --baseline 51acbe9        # ~10 minutes on 2 cores
    python bench/bench_categorical.py --baseline 51acbe9 --quick

Exact reference (`sequential`, vectorised through bench/simulate.py): GOOD of a commit that is
the reference (share GOOD within the budget, mean runs), and false GOOD exactly at the
tolerance, at alpha = beta = 5e-3 so that errors are frequent enough to count. Control sample
(`control_sample.paired_evidence`, alpha = beta = 5e-4 as in a bisect): a commit that is the
control's own distribution with its runs tied to the control's seed for seed, half reshuffled,
or independent (runs to GOOD), one TV 0.15 away (runs to BAD), and false GOOD at the tolerance
(alpha = beta = 0.05). The references: #29975's (three outcomes, the condition) and Zipf(1)
over K outcomes. The baseline's statistics are read with `git show` into a package of their own.
Every rate has its count and a one-sided 95% Clopper–Pearson bound.
"""

from __future__ import annotations

import argparse
import importlib
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench import simulate as sim  # noqa: E402
from bench.statcases import rate_down, rate_up, table  # noqa: E402
from bisectbot.statistics import control_sample, sequential  # noqa: E402
from bisectbot.statistics import stats as S  # noqa: E402

MODULES = ("outcome", "stats", "sequential", "control_sample")
CHUNK = 10  # paths evaluated at once


def baseline_modules(rev: str, where: Path) -> dict[str, Any]:
    """The statistics of `rev`, importable as the package `basestats` (their imports rewritten)."""
    pkg = where / "basestats"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name in MODULES:
        text = subprocess.run(
            ["git", "-C", str(ROOT), "show", f"{rev}:bisectbot/statistics/{name}.py"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        (pkg / f"{name}.py").write_text(text.replace("bisectbot.statistics.", "basestats."))
    sys.path.insert(0, str(where))
    return {name: importlib.import_module(f"basestats.{name}") for name in MODULES}


def zipf(k: int) -> dict[str, float]:
    w = 1.0 / np.arange(1, k + 1)
    return {f"o{i}": float(x) for i, x in enumerate(w / w.sum())}


def first_passage(values: np.ndarray, level: float) -> np.ndarray:
    return sim.first_true(values >= math.log(1 / level))


def exact_rows(old: dict[str, Any], paths: int, seed: int) -> list[tuple[str, ...]]:
    rows = []
    shapes = [("#29975 (3 outcomes, condition)", sim.P_29975, sim.CONDITION_29975)]
    shapes += [(f"Zipf(1), K = {k}", zipf(k), None) for k in range(4, 9)]
    level, tol, eta = 5e-3, 0.1, 0.03
    for label, probs, cond in shapes:
        new_ref = S.Reference.from_probs(probs, cond)
        old_ref = old["stats"].Reference.from_probs(probs, cond)
        rng = np.random.default_rng(seed)
        at_tol = sim.hardest_tv_shift(list(probs.values()), tol)
        q_tol = sim.joint(at_tol, cond)
        for what, q, budget in (("GOOD at q = p", new_ref.p, 4000), ("false GOOD at TV = tolerance", q_tol, 3000)):
            counts = sim.draw_counts(rng, np.asarray(q), paths, budget).astype(float)
            out = []
            for mod, ref in ((old["sequential"], old_ref), (sequential, new_ref)):
                t0 = time.process_time()
                good, bad = np.empty(paths, int), np.empty(paths, int)
                for at in range(0, paths, CHUNK):  # the power-set version holds (paths, runs, 2^K) at once
                    part = counts[at : at + CHUNK]
                    good[at : at + CHUNK] = first_passage(mod.log_e_good_many(part, ref, tol, eta=eta), level)
                    bad[at : at + CHUNK] = first_passage(mod.log_e_depart_many(part, ref, eta), level)
                seconds = time.process_time() - t0
                won = (good >= 0) & ((bad < 0) | (good < bad))
                runs = np.where(won, good + 1, budget)
                out.append((int(won.sum()), float(runs[won].mean()) if won.any() else math.nan, seconds))
            (k0, r0, s0), (k1, r1, s1) = out
            rate = rate_down if what.startswith("GOOD") else rate_up
            rows.append(
                (
                    label,
                    what,
                    rate(k0, paths),
                    rate(k1, paths),
                    f"{r0:,.0f}" if what.startswith("GOOD") else "",
                    f"{r1:,.0f} ({r1 / r0:.3f}×)" if what.startswith("GOOD") else "",
                    f"{s0:.1f} / {s1:.1f}",
                )
            )
            print(f"  {label}: {what} done", flush=True)
    return rows


def pairs(rng: np.random.Generator, q: np.ndarray, p: np.ndarray, runs: int, reshuffled: float) -> tuple[list, list]:
    """One seed's uniform through each inverse CDF (a change that moves thresholds); on a share
    `reshuffled` of the seeds the tested run draws afresh."""
    u = rng.random(runs)
    fresh = np.where(rng.random(runs) < reshuffled, rng.random(runs), u)
    tested = np.minimum(np.searchsorted(np.cumsum(q), fresh, side="right"), q.size - 1)
    control = np.minimum(np.searchsorted(np.cumsum(p), u, side="right"), p.size - 1)
    return tested.tolist(), control.tolist()


def control_rows(old: dict[str, Any], paths: int, seed: int) -> list[tuple[str, ...]]:
    rows = []
    shapes = [("issue 23 (0.30, 0.45, 0.25)", [0.30, 0.45, 0.25])]
    shapes += [(f"Zipf(1), K = {k}", list(zipf(k).values())) for k in range(4, 9)]
    for label, probs in shapes:
        p = np.append(probs, 0.0)  # and OTHER, as a control's categories have it
        k = p.size
        cases = [
            ("GOOD, tied seed for seed", p, 0.0, 5e-4, 4000),
            ("GOOD, half reshuffled", p, 0.5, 5e-4, 4000),
            ("GOOD, independent", p, 1.0, 5e-4, 6000),
            ("BAD at TV 0.15, independent", np.append(sim.hardest_tv_shift(probs, 0.15), 0.0), 1.0, 5e-4, 6000),
            ("false GOOD at TV 0.1, tied", np.append(sim.hardest_tv_shift(probs, 0.1), 0.0), 0.0, 0.05, 3000),
            ("false GOOD at TV 0.1, independent", np.append(sim.hardest_tv_shift(probs, 0.1), 0.0), 1.0, 0.05, 3000),
        ]
        for what, q, reshuffled, level, budget in cases:
            rng = np.random.default_rng(seed)
            draws = [pairs(rng, q, p, budget, reshuffled) for _ in range(paths)]
            want = "bad" if what.startswith("BAD") else "good"
            out = []
            for mod, extra in ((old["control_sample"], {"ratio": 1}), (control_sample, {})):
                t0 = time.process_time()
                evs = [
                    mod.paired_evidence(
                        t, c, k, alpha=level, beta=level, tolerance=0.1, eta=0.03, max_runs=budget, **extra
                    )
                    for t, c in draws
                ]
                seconds = time.process_time() - t0
                hit = [ev for ev in evs if ev.decision is not None and ev.decision.value == want]
                out.append((len(hit), float(np.mean([ev.n for ev in hit])) if hit else math.nan, seconds))
            (k0, r0, s0), (k1, r1, s1) = out
            rate = rate_up if what.startswith("false") else rate_down
            rows.append(
                (
                    label,
                    what,
                    rate(k0, paths),
                    rate(k1, paths),
                    "" if what.startswith("false") else f"{r0:,.0f}",
                    "" if what.startswith("false") else f"{r1:,.0f} ({r1 / r0:.3f}×)",
                    f"{s0:.1f} / {s1:.1f}",
                )
            )
            print(f"  {label}: {what} done", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", default="main", help="the revision whose power-set tests to compare with")
    ap.add_argument("--quick", action="store_true", help="a quarter of the paths")
    args = ap.parse_args()
    scale = 0.25 if args.quick else 1.0
    header = ("reference", "case", "then (rate)", "now (rate)", "then runs", "now runs", "CPU s then / now")
    with tempfile.TemporaryDirectory() as tmp:
        old = baseline_modules(args.baseline, Path(tmp))
        print(f"# exact reference: {args.baseline} (then) and this tree (now), the same draws\n", flush=True)
        exact = exact_rows(old, int(400 * scale), 5301)
        print(table(header, exact), flush=True)
        print(f"\n# control sample, paired seed for seed: {args.baseline} (then) and this tree (now)\n", flush=True)
        print(table(header, control_rows(old, int(80 * scale), 5302)))


if __name__ == "__main__":
    main()
