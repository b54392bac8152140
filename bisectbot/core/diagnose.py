"""What a commit's runs looked like, and which config mistake they point at (pure).

Why: a config mistake surfaces as a verdict. One misspelt outcome name in `reference.probs` makes
the good end test BAD with `E_bad = 1e+04 ≥ 1/alpha`, and nothing said that 42% of the runs gave
an outcome the reference does not have. An endpoint that tests the wrong way (or cannot decide)
therefore shows its observed distribution against the reference and, when the runs look like a
config problem rather than a real departure, says which key to look at:

* outcomes the reference does not list (with the reference name each one is close to);
* a condition met far less often than the reference says (or, without `condition_prob`, far
  less often than at another commit: `condition_shift`);
* runs that mostly could not be read (the parse section);
* an undecided test: whether more runs can decide it, and about how many.
"""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from bisectbot.records.commits import CommitVerdict
from bisectbot.statistics.stats import FAILED, MISSED, OTHER, Reference

OTHER_LABEL = "other"  # how OTHER is written in reports
FAILED_LABEL = "failed"
MISSED_LABEL = "missed"
OTHER_SHARE = 0.05  # outcomes the reference lacks: worth a word from this share of the runs on
FAILED_SHARE = 0.2  # runs that could not be read or failed: from this share on
CONDITION_FACTOR = 3.0  # condition met this many times less often than the reference says


def short_p(x: float) -> str:
    """0.25 → '.25', 1.0 → '1', 0 → '0': two digits in little room."""
    if x >= 0.995:
        return "1"
    if x < 0.005:
        return "0"
    return f"{x:.2f}".lstrip("0")


@dataclass(frozen=True)
class Cell:
    """One outcome of a commit's runs beside the reference: among the runs that met the condition."""

    label: str  # the outcome, OTHER, FAILED and MISSED written as 'other', 'failed' and 'missed'
    count: int
    freq: float | None  # observed share (None: no run met the condition)
    ref: float  # the reference's share


LABELS = {OTHER: OTHER_LABEL, FAILED: FAILED_LABEL, MISSED: MISSED_LABEL}


def observed_cells(counts: Mapping[str, int], categories: Sequence[str], probs: Sequence[float]) -> list[Cell]:
    """The one computation behind every observed-vs-reference rendering (terminal, Markdown,
    comments, error messages), in the reference's order; OTHER and FAILED only when seen, MISSED
    apart."""
    prob_of = dict(zip(categories, probs))
    names = [n for n in categories if n != MISSED]
    met = sum(counts.get(n, 0) for n in names)
    p_met = sum(prob_of[n] for n in names) or 1.0
    return [
        Cell(LABELS.get(n, n), counts.get(n, 0), counts.get(n, 0) / met if met else None, prob_of[n] / p_met)
        for n in names
        if not (n in (OTHER, FAILED) and counts.get(n, 0) == 0)
    ]


def tv_from_reference(counts: Mapping[str, int], categories: Sequence[str], probs: Sequence[float]) -> float | None:
    """Total variation between a commit's observed shares and the reference's, among the runs
    that met the condition (None: no such run). What the distance charts plot."""
    cells = observed_cells(counts, categories, probs)
    if not any(c.count for c in cells):
        return None
    seen = {c.label for c in cells}
    missing = sum(p for n, p in zip(categories, probs) if LABELS.get(n, n) not in seen and n != MISSED)
    return 0.5 * (sum(abs((c.freq or 0.0) - c.ref) for c in cells) + missing)


def distance_along(
    verdicts: Sequence[CommitVerdict], positions: Mapping[str, int], categories: Sequence[str], probs: Sequence[float]
) -> list[dict[str, object]]:
    """Where the distribution moved: each tested commit on the line once (its longest main-arm
    test), in history order, with its TV from the reference and its verdict — the series the
    distance charts draw, kept in the report so renderers only read it."""
    best: dict[str, CommitVerdict] = {}
    for v in verdicts:
        if v.arm == "main" and v.sha in positions and v.counts and v.runs >= best.get(v.sha, v).runs:
            best[v.sha] = v
    out = []
    for sha, v in best.items():
        tv = tv_from_reference(v.counts, categories, probs)
        if tv is not None:
            out.append({"commit": sha, "position": positions[sha], "tv": round(tv, 4), "verdict": v.verdict.value})
    return sorted(out, key=lambda row: int(str(row["position"])))


def observed_pairs(counts: Mapping[str, int], categories: Sequence[str], probs: Sequence[float]) -> str:
    """'b .67/.20 d .25/.30 …': observed share / reference share, the largest departures first
    (so a cut drops the least telling); 'missed N' when no run met the condition."""
    cells = observed_cells(counts, categories, probs)
    if not any(c.count for c in cells):
        return f"{MISSED_LABEL} {counts.get(MISSED, 0)}" if counts.get(MISSED) else ""
    cells.sort(key=lambda c: -abs((c.freq or 0.0) - c.ref))
    return " ".join(f"{c.label} {short_p(c.freq or 0.0)}/{short_p(c.ref)}" for c in cells)


def likely_causes(
    counts: Mapping[str, int],
    failures: Mapping[str, int],
    others: Mapping[str, int],
    reference: Reference,
) -> list[str]:
    """Config mistakes the runs point at, each one sentence (none: the runs look like a real
    departure). `others` counts the outcomes that fell in OTHER, by their text."""
    causes: list[str] = []
    prob_of = dict(zip(reference.names, reference.probs))
    support = [n for n in reference.names if n not in (OTHER, MISSED)]
    met = sum(counts.get(n, 0) for n in reference.names if n != MISSED)
    n_other = counts.get(OTHER, 0)
    if met and n_other / met >= OTHER_SHARE and prob_of.get(OTHER, 0.0) == 0.0:
        top = sorted(others.items(), key=lambda kv: (-kv[1], kv[0]))[:3]
        seen = ", ".join(f"{name!r} ×{n}" for name, n in top)
        unseen = [n for n in support if not counts.get(n)]
        close = [(name, m[0]) for name, _ in top if (m := difflib.get_close_matches(name, unseen or support, 1, 0.5))]
        hint = "; ".join(f"{name!r} looks like the reference's {ref!r}" for name, ref in close)
        causes.append(
            f"{n_other} of {met} runs ({n_other / met:.0%}) gave outcomes reference.probs does not list"
            + (f" (most often {seen})" if seen else "")
            + (f": {hint}, misspelt there?" if hint else ": is reference.probs complete, and statistic.outcome right?")
        )
    if reference.condition_prob is not None:
        total = met + counts.get(MISSED, 0)
        rate = met / total if total else 0.0
        if total >= 20 and rate * CONDITION_FACTOR < reference.condition_prob:
            causes.append(
                f"the condition was met in {rate:.0%} of runs, the reference says {reference.condition_prob:.0%}: "
                "check statistic.condition (token, position) and reference.condition_prob"
            )
    if reference.failed is not None:  # failed runs are an outcome: a crash rate is data, not a config mistake
        return causes
    failed = sum(failures.values())
    runs = failed + met + counts.get(MISSED, 0)
    if runs and failed / runs >= FAILED_SHARE:
        kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(failures.items(), key=lambda kv: -kv[1]))
        causes.append(
            f"{failed} of {runs} runs ({failed / runs:.0%}) failed or could not be read ({kinds}): "
            "check the parse: section (prefix, split, expect_tokens) against one run's output"
        )
    return causes


def _mixture_runs(rate: float, target: float, k: int, floor: int) -> int:
    """n with n·rate − ((k−1)/2)·log n ≥ target: the runs a Dirichlet-mixture e-process needs
    to reach `target` when each run adds `rate` nats on average (a fixed point, rounded up)."""
    n = max(float(floor), 2.0)
    for _ in range(200):
        n_next = (target + 0.5 * (k - 1) * math.log(max(n, 2.0))) / rate
        if abs(n_next - n) < 1:
            break
        n = n_next
    return max(int(math.ceil(n)), floor + 1)


def undecided_hint(
    counts: Mapping[str, int],
    reference: Reference,
    *,
    alpha: float,
    beta: float,
    tolerance: float,
    eta: float,
    max_runs: int,
    cap: int,
    slower: float = 1.0,
) -> str:
    """What to change when a test stopped undecided at its budget, estimated from the runs it
    saw (plug-in frequencies q̂ against p, less the TV that sampling alone gives): the runs BAD needs (KL(q̂‖p) nats per run), or GOOD
    (at least 2·(tolerance − TV)² nats per run, Pinsker), or that the commit sits between eta
    and the tolerance, where more runs do not help. `cap` is the most run.max_runs can be.
    `slower`: how many times the runs an exact reference needs the test needs (a control
    sample's two-sample test, each run paired with one control run: at most 2)."""
    names = list(reference.names)
    total = sum(counts.get(n, 0) for n in names)
    if not total:
        return "no run was counted: see the causes above, or raise run.max_runs"
    q = [counts.get(n, 0) / total for n in names]
    p = list(reference.probs)
    # The plug-in TV of n runs of the reference itself is about ½·Σ√(2p(1−p)/(πn)), not 0 (0.045
    # after 150 runs of #29975's reference): only what stands above that is taken as departure.
    noise = 0.5 * sum(math.sqrt(2 * b * (1 - b) / (math.pi * total)) for b in p)
    tv = max(0.0, 0.5 * sum(abs(a - b) for a, b in zip(q, p)) - noise)
    k = sum(1 for b in p if b > 0)

    def raise_to(n: int, what: str) -> str:
        n = max(
            math.ceil(n * slower), math.ceil(1.5 * total)
        )  # the plug-in rate says "decided by now": noise; half again
        if n > cap:
            return (
                f"{what} would need about {n:,} runs, more than run.max_runs can be ({cap:,}, one seed "
                "block): loosen test.alpha/test.beta or widen test.tolerance"
            )
        return f"{what} needs about {n:,} runs: raise run.max_runs to {min(cap, math.ceil(n * 1.25)):,}"

    if tv > eta:  # BAD's null is the eta-ball around p: each run adds at least 2·(TV − eta)² nats
        kl = sum(a * math.log(a / b) for a, b in zip(q, p) if a > 0 and b > 0)
        rate = 2 * (tv - eta) ** 2 if eta > 0 else kl
        if rate > 0:
            said = f"observed TV {tv:.3f} from the reference: BAD " + raise_to(
                _mixture_runs(rate, math.log(1 / alpha), k, total), "x"
            ).removeprefix("x ")
            if tv < tolerance:
                said += (
                    f" (it is between test.eta {eta:g} and test.tolerance {tolerance:g}, where either verdict "
                    "is allowed: raise test.eta if this much is expected, or make this commit the reference)"
                )
            return said
    gap = max(tolerance - tv, 1e-9)  # GOOD's null is TV ≥ tolerance: at least 2·gap² nats per run
    return f"observed TV {tv:.3f} from the reference: GOOD " + raise_to(
        _mixture_runs(2 * gap * gap, math.log(1 / beta), k, total), "x"
    ).removeprefix("x ")


# -- the share of runs that meet the condition, when the reference does not test it ------------


@dataclass(frozen=True)
class ConditionShift:
    """The share of runs meeting the condition at two commits, compared seed for seed.

    Why: with a condition but no `reference.condition_prob`, the tests judge only the outcome
    among the runs that meet the condition; a change in how often it is met is invisible to
    them, and a bisect over it ends undecided or ambiguous, blaming the indifference zone.
    Comparing the two commits' runs on the seeds both ran says what changed instead."""

    before_met: int
    before_runs: int
    after_met: int
    after_runs: int
    down: int  # seeds whose run met the condition before and not after
    up: int  # and the reverse
    log_e: float  # against "the same share at both" (`log_e_discordant`)

    @property
    def before(self) -> float:
        return self.before_met / self.before_runs if self.before_runs else 0.0

    @property
    def after(self) -> float:
        return self.after_met / self.after_runs if self.after_runs else 0.0


def log_e_discordant(down: int, up: int) -> float:
    """log E against H0 "two commits meet the condition equally often", from their runs on
    the same seeds: under H0 each seed where they disagree is equally likely to go either way
    (seeds are exchangeable draws), so the discordant seeds are fair coin flips and a
    Krichevsky–Trofimov mixture over their bias, against ½, is a test martingale (McNemar's
    test made sequential): P(E ever ≥ 1/α) ≤ α."""
    n = down + up
    log_mix = math.lgamma(down + 0.5) + math.lgamma(up + 0.5) - math.lgamma(n + 1.0) - math.log(math.pi)
    return log_mix + n * math.log(2.0)


def condition_shift(
    before: Mapping[int, int], after: Mapping[int, int], alpha: float, skip: int | None = None
) -> ConditionShift | None:
    """The shift in the share of runs meeting the condition between two commits' runs (seed →
    category, −1: the condition was missed; `skip`: a category that tells nothing about the
    condition, FAILED), when their runs on the shared seeds show it at level `alpha`; else None."""
    mine = {s: c != -1 for s, c in before.items() if c != skip}
    theirs = {s: c != -1 for s, c in after.items() if c != skip}
    shared = [s for s in mine if s in theirs]
    down = sum(mine[s] and not theirs[s] for s in shared)
    up = sum(theirs[s] and not mine[s] for s in shared)
    log_e = log_e_discordant(down, up)
    if log_e < math.log(1 / alpha):
        return None
    return ConditionShift(sum(mine.values()), len(mine), sum(theirs.values()), len(theirs), down, up, log_e)


def share_change_between(
    shares: Sequence[tuple[int, float]], before: float, after: float
) -> tuple[int | None, int | None]:
    """Where the share changed, as far as the tested commits show: given (position, observed
    share) in line order, the last position whose share is nearer `before` ahead of the first
    whose share is nearer `after` (None where no such commit was tested)."""
    like_after = [pos for pos, share in shares if abs(share - after) < abs(share - before)]
    first_after = min(like_after, default=None)
    like_before = [
        pos
        for pos, share in shares
        if abs(share - before) <= abs(share - after) and (first_after is None or pos < first_after)
    ]
    return max(like_before, default=None), first_after
