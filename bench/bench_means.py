"""Calibration of the numeric tests (bisectbot.statistics.means), by simulation.

    python bench/bench_means.py            # the table: false GOOD, false BAD, power, runs
    python bench/bench_means.py --quick    # a fifth of the sequences

Each case draws many run sequences from a distribution whose mean sits at a chosen place
relative to the reference (at the eta boundary: the BAD test's hardest null; at the tolerance
boundary: the GOOD test's hardest null; at 0, 0.5×, 1× and 2× the tolerance), runs the same
`one_sided` e-processes the pipeline runs, after every run, and reports how often each verdict
came and after how many runs. Rates carry their count and a one-sided 95% Clopper–Pearson
bound. tests/test_means.py runs smaller versions of the same cases with fixed seeds.
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np
from scipy.stats import beta as beta_dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bisectbot.statistics.means import Band, Scale, one_sided  # noqa: E402

Draw = Callable[[np.random.Generator, tuple[int, int]], np.ndarray]


@dataclass(frozen=True)
class Shape:
    """A distribution of one run's value with a known mean and spread, shifted to any mean."""

    name: str
    draw: Draw  # standardised: mean 0, sd 1
    bounds: tuple[float, float] | None  # declared bounds, for bounded shapes (then `draw` is in them)
    mean: float  # the mean of `draw` for bounded shapes (unbounded: 0)


def _beta(a: float, b: float) -> Draw:
    return lambda rng, size: rng.beta(a, b, size)


SHAPES = {
    "normal": Shape("normal", lambda rng, size: rng.standard_normal(size), None, 0.0),
    "lognormal(σ=1)": Shape(
        "lognormal(σ=1)",
        lambda rng, size: (rng.lognormal(0, 1, size) - math.exp(0.5)) / math.sqrt((math.e - 1) * math.e),
        None,
        0.0,
    ),
    "exponential": Shape("exponential", lambda rng, size: rng.exponential(1, size) - 1, None, 0.0),
    "t(3)": Shape("t(3)", lambda rng, size: rng.standard_t(3, size) / math.sqrt(3), None, 0.0),
    "beta(2,1) in [0,1]": Shape("beta(2,1) in [0,1]", _beta(2, 1), (0.0, 1.0), 2 / 3),
    "bernoulli(0.3) in [0,1]": Shape(
        "bernoulli(0.3) in [0,1]", lambda rng, size: (rng.random(size) < 0.3).astype(float), (0.0, 1.0), 0.3
    ),
}


def decisions(
    values: np.ndarray, scale: Scale, band: Band, floor: float, alpha: float, beta: float
) -> tuple[np.ndarray, np.ndarray]:
    """For each sequence (rows of `values`): its first decision (+1 BAD, −1 GOOD, 0 none) and
    the run it came at (1-based; the length when none), with E_bad and E_good computed after
    every run as the pipeline computes them."""
    x = values
    level = min(alpha / 2, beta)
    w = lambda theta: scale.contrast(x, None, theta)  # noqa: E731
    rng_of = scale.contrast_range
    up_bad = one_sided(w(band.bad_hi), +1, rng_of(band.bad_hi), floor, level)
    down_bad = one_sided(w(band.bad_lo), -1, rng_of(band.bad_lo), floor, level)
    log_bad = np.logaddexp(up_bad, down_bad) - math.log(2)
    log_good = np.minimum(
        one_sided(w(band.good_hi), -1, rng_of(band.good_hi), floor, level),
        one_sided(w(band.good_lo), +1, rng_of(band.good_lo), floor, level),
    )
    bad_at = _first(log_bad >= math.log(1 / alpha))
    good_at = _first(log_good >= math.log(1 / beta))
    n = values.shape[-1]
    out = np.where(bad_at <= good_at, np.where(bad_at < n, 1, 0), -1)
    return out, np.minimum(np.minimum(bad_at, good_at) + 1, n)


def _first(hit: np.ndarray) -> np.ndarray:
    """The index of the first True per row, or the row length when none."""
    n = hit.shape[-1]
    return np.where(hit.any(axis=-1), hit.argmax(axis=-1), n)


def case(
    shape: Shape,
    at: float,
    *,
    tolerance: float,
    eta: float,
    sd: float,
    runs: int,
    sequences: int,
    alpha: float,
    beta: float,
    seed: int,
    bounded: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Sequences whose mean is the reference + `at` (in the value's units), judged against an
    exact reference value with the given tolerance and eta. Unbounded shapes are scaled to
    spread `sd`; bounded ones keep their own spread and move by shifting the reference instead
    (the reference is their mean − `at`)."""
    rng = np.random.default_rng(seed)
    raw = shape.draw(rng, (sequences, runs))
    if shape.bounds is None:
        ref = 0.0
        values = raw * sd + at
    else:
        ref = shape.mean - at
        values = raw
    band = Band(ref - tolerance, ref + tolerance, ref - eta, ref + eta)
    scale = Scale("mean", shape.bounds if bounded else None)
    return decisions(values, scale, band, tolerance / 4, alpha, beta)


def clopper_upper(k: int, n: int, level: float = 0.95) -> float:
    return 1.0 if k >= n else float(beta_dist.ppf(level, k + 1, n - k))


def clopper_lower(k: int, n: int, level: float = 0.95) -> float:
    return 0.0 if k == 0 else float(beta_dist.ppf(1 - level, k, n - k + 1))


def rate(k: int, n: int) -> str:
    return f"{k / n:.2%} ({k}/{n}; ≤ {clopper_upper(k, n):.2%})"


# (label, mean − reference in tolerances or etas, the wrong verdict there: +1 BAD, −1 GOOD, 0 none)
PLACES = (
    ("0", 0.0, 0),
    ("+eta (false BAD ≤ alpha)", "+eta", 1),
    ("−eta (false BAD ≤ alpha)", "-eta", 1),
    ("0.5 × tolerance", 0.5, 0),
    ("+tolerance (false GOOD ≤ beta)", 1.0, -1),
    ("−tolerance (false GOOD ≤ beta)", -1.0, -1),
    ("2 × tolerance", 2.0, 0),
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument(
        "--alpha", type=float, default=5e-4, help="per-test level (alpha = beta), the pipeline's default"
    )
    parser.add_argument("--sequences", type=int, default=0, help="per case (default 12,000; --quick 2,000)")
    args = parser.parse_args(argv)
    sequences = args.sequences or (2000 if args.quick else 12000)
    tol, eta = 0.1, 0.03
    alpha = beta = args.alpha
    print(f"alpha = beta = {alpha:g}, tolerance {tol}, eta {eta}, {sequences:,} sequences of up to 3,000 runs a case;")
    print("unbounded shapes have spread 0.2 (2 × the tolerance); bounded ones their own, the reference moved")
    print()
    print("| shape | mean − reference | BAD | GOOD | undecided | mean runs |")
    print("|---|---|---|---|---|---|")
    failures = 0
    for s, shape in enumerate(SHAPES.values()):
        for p, (label, where, wrong) in enumerate(PLACES):
            at = {"+eta": eta, "-eta": -eta}.get(str(where), float(where) * tol if isinstance(where, float) else 0.0)
            dec_parts, when_parts = [], []
            for chunk in range(0, sequences, 2000):
                dec, when = case(
                    shape,
                    at,
                    tolerance=tol,
                    eta=eta,
                    sd=0.2,
                    runs=3000,
                    sequences=min(2000, sequences - chunk),
                    alpha=alpha,
                    beta=beta,
                    seed=1000 * s + 10 * p + chunk,
                )
                dec_parts.append(dec)
                when_parts.append(when)
            dec, when = np.concatenate(dec_parts), np.concatenate(when_parts)
            bad, good = int((dec == 1).sum()), int((dec == -1).sum())
            print(
                f"| {shape.name} | {label} | {rate(bad, sequences)} | {rate(good, sequences)} | "
                f"{rate(int((dec == 0).sum()), sequences)} | {when.mean():.0f} |",
                flush=True,
            )
            wrong_count = bad if wrong == 1 else good if wrong == -1 else 0
            if wrong and clopper_lower(wrong_count, sequences) > alpha:  # over the level, at 95% confidence
                failures += 1
                print(f"FAIL: {shape.name} at {label}: {wrong_count} of {sequences}")
    print("calibration:", "held" if not failures else f"{failures} case(s) over their level")
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
