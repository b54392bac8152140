"""Which config mistake a commit's runs point at, and what an undecided test needs (pure).

Why: a config mistake surfaces as a verdict. One misspelt outcome name in `reference.probs` makes
the good end test BAD with `E_bad = 1e+04 ≥ 1/alpha`, and nothing said that 42% of the runs gave
an outcome the reference does not have. An endpoint that tests the wrong way (or cannot decide)
therefore shows its observed distribution against the reference (core.diagnose) and, when the
runs look like a config problem rather than a real departure, says which key to look at:

* outcomes the reference does not list (with the reference name each one is close to);
* a condition met far less often than the reference says (or, without `condition_prob`, far
  less often than at another commit: statistics.condition);
* runs whose output the parse could not read (the parse section), apart from runs that failed
  (the program itself), and a crash rate that rose while failed runs are no observation;
* an undecided test: whether more runs can decide it, and about how many.
"""

from __future__ import annotations

import difflib
import math
from typing import Mapping

from bisectbot.core.diagnose import band_knobs
from bisectbot.records.commits import UNREADABLE
from bisectbot.statistics.skips import FailureShift
from bisectbot.statistics.stats import MISSED, OTHER, Reference

OTHER_SHARE = 0.05  # outcomes the reference lacks: worth a word from this share of the runs on
FAILED_SHARE = 0.2  # runs that could not be read or failed: from this share on
CONDITION_FACTOR = 3.0  # condition met this many times less often than the reference says


def likely_causes(
    counts: Mapping[str, int],
    failures: Mapping[str, int],
    others: Mapping[str, int],
    reference: Reference,
    *,
    last_unreadable: str = "",
    last_failed: str = "",
) -> list[str]:
    """Config mistakes the runs point at, each one sentence (none: the runs look like a real
    departure). `others` counts the outcomes that fell in OTHER, by their text; `last_unreadable`
    and `last_failed` say what the last run of each kind showed (CommitVerdict)."""
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
    return causes + _failure_causes(failures, met + counts.get(MISSED, 0), last_unreadable, last_failed)


def _failure_causes(failures: Mapping[str, int], read: int, last_unreadable: str, last_failed: str) -> list[str]:
    """Runs whose output the parse could not read, and runs that failed, each kind a cause of
    its own from FAILED_SHARE of the runs on (`read`: the runs that were read)."""
    unread = {k: n for k, n in failures.items() if k in UNREADABLE}
    failed = {k: n for k, n in failures.items() if k not in UNREADABLE}
    runs = read + sum(failures.values())
    causes = []
    for kinds, what, last, fix in (
        (
            unread,
            "do not match parse",
            last_unreadable,
            "check the parse: section (prefix, split, expect_tokens) against it, or run `bisectbot init` "
            "again to propose one",
        ),
        (failed, "failed", last_failed, "the program itself fails there: run it on one seed to see why"),
    ):
        n = sum(kinds.values())
        if not runs or n / runs < FAILED_SHARE:
            continue
        how = ", ".join(f"{kind} {k}" for kind, k in sorted(kinds.items(), key=lambda kv: -kv[1]))
        causes.append(
            f"{n} of {runs} runs ({n / runs:.0%}) {what} ({how})" + (f"; the last: {last}" if last else "") + f": {fix}"
        )
    return causes


def crash_rate_cause(shift: FailureShift, broken: str, working: str, kinds: Mapping[str, int], last: str) -> str:
    """A crash rate that rose from the working end to the broken one, while failed runs are no
    observation (`statistic.failures: skip`): the tests judged only the runs that did not fail,
    so the change they cannot see is named with the knob that makes them see it. `kinds`: the
    broken end's failures by kind; `last`: how its last failed run ended."""
    how = ", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items(), key=lambda kv: -kv[1]))
    ended = f"; the last: {last}" if last else ""
    return (
        f"the {broken} end's runs fail in {shift.after:.0%} of runs ({shift.after_failed} of {shift.after_runs}: "
        f"{how}{ended}), the {working} end's in {shift.before:.0%} ({shift.before_failed} of {shift.before_runs}; "
        f"on the {shift.shared} seeds both ran, {shift.only_after} failed at the {broken} end alone and "
        f"{shift.only_before} at the {working} end alone): failed runs are no observation (statistic.failures: "
        f"skip), so the tests judged only the runs that did not fail; to bisect the crash rate, set "
        f"statistic.failures: outcome"
    )


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
    sample's two-sample test, each run paired with one control run: at most 2). Without
    `condition_prob` only the runs meeting the condition count (`counts[MISSED]` the others):
    the runs asked for are all runs, what run.max_runs counts."""
    names = list(reference.names)
    total = sum(counts.get(n, 0) for n in names)
    if not total:
        return "no run was counted: see the causes above, or raise run.max_runs"
    # run.max_runs counts every run; without condition_prob only those meeting the condition count
    met = total / (total + counts.get(MISSED, 0)) if MISSED not in names else 1.0
    q = [counts.get(n, 0) / total for n in names]
    p = list(reference.probs)
    # The plug-in TV of n runs of the reference itself is about ½·Σ√(2p(1−p)/(πn)), not 0 (0.045
    # after 150 runs of #29975's reference): only what stands above that is taken as departure.
    noise = 0.5 * sum(math.sqrt(2 * b * (1 - b) / (math.pi * total)) for b in p)
    tv = max(0.0, 0.5 * sum(abs(a - b) for a, b in zip(q, p)) - noise)
    k = sum(1 for b in p if b > 0)

    def raise_to(n: int, what: str, knobs: str) -> str:
        n = max(
            math.ceil(n * slower), math.ceil(1.5 * total)
        )  # the plug-in rate says "decided by now": noise; half again
        n = math.ceil(n / met)  # runs in all, of which a share `met` meet the condition and count
        if n > cap:
            return (
                f"{what} would need about {n:,} runs, more than run.max_runs can be ({cap:,}, one seed block): {knobs}"
            )
        return f"{what} needs about {n:,} runs: raise run.max_runs to {min(cap, math.ceil(n * 1.25)):,}"

    if tv > eta:  # BAD's null is the eta-ball around p: each run adds at least 2·(TV − eta)² nats
        kl = sum(a * math.log(a / b) for a, b in zip(q, p) if a > 0 and b > 0)
        rate = 2 * (tv - eta) ** 2 if eta > 0 else kl
        if rate > 0:
            # BAD comes sooner the farther the runs are beyond eta (which follows the tolerance)
            knobs = "loosen test.alpha, or lower test.eta (or test.tolerance, which sets its default)"
            band = (
                f"it is between test.eta {eta:g} and test.tolerance {tolerance:g}, where it may be called either "
                f"way: {band_knobs()}; or make this commit the reference"
            )
            knobs = band if tv < tolerance else knobs
            said = f"observed TV {tv:.3f} from the reference: BAD " + raise_to(
                _mixture_runs(rate, math.log(1 / alpha), k, total), "x", knobs
            ).removeprefix("x ")
            return said if knobs != band or said.endswith(band) else f"{said} ({band})"
    gap = max(tolerance - tv, 1e-9)  # GOOD's null is TV ≥ tolerance: at least 2·gap² nats per run
    return f"observed TV {tv:.3f} from the reference: GOOD " + raise_to(
        _mixture_runs(2 * gap * gap, math.log(1 / beta), k, total), "x", "loosen test.beta or widen test.tolerance"
    ).removeprefix("x ")


def undecided_number_hint(
    values: Mapping[str, float], *, tolerance: float, eta: float, cap: int, timed: bool = False
) -> str:
    """What to change when a numeric test stopped undecided: from its estimate's distance and
    its interval (CommitVerdict.values), the runs BAD or GOOD would need at the rate the
    interval narrows (as 1/√n), or that the commit sits between eta and the tolerance; for
    skewed unbounded values, the runs the normal approximation waits for."""
    n = int(values.get("n", 0))
    if not n or "estimate" not in values:
        return "no run gave a number: see the causes above"
    waits = int(values.get("waits", 0))
    if waits > n:
        return (
            f"its values are skewed: the normal approximation decides from run {waits:,} on, after {n:,} here: raise "
            f"run.max_runs to {min(cap, waits + waits // 4):,}, or give statistic.bounds (then the test is exact)"
        )
    half = abs(values["high"] - values["low"]) / 2
    est = values["estimate"]
    # the distance and interval are in θ's units; a ratio's distance is |θ − 1| and a mean's |θ − reference|:
    # both move with θ one for one, which is all the runs estimate needs
    away = values.get("distance", math.nan)
    if not math.isfinite(away) or not math.isfinite(half) or half <= 0:
        return "raise run.max_runs"

    def needs(gap: float) -> int:
        return max(n + 1, math.ceil(n * (half / max(gap, 1e-12)) ** 2))

    if away > eta:
        what, runs, knobs = "BAD", needs(away - eta), "loosen test.alpha, or lower test.eta"
        if away < tolerance:
            return (
                f"its mean sits {away:.3g} from the reference, between test.eta {eta:g} and test.tolerance "
                f"{tolerance:g}, where it may be called either way: {band_knobs()}"
            )
    else:
        what, runs, knobs = "GOOD", needs(tolerance - away), "loosen test.beta or widen test.tolerance"
    said = f"its mean sits {away:.3g} from the reference (estimate {est:.4g}, interval ±{half:.3g}): {what}"
    if timed:  # the figure a timing hinges on: how much one pair varies on this machine now
        noise = values.get("noise", math.nan)
        said = (
            f"its time sits {away:.1%} from the control's with a noise of {noise:.1%} a pair (sd of the log of a "
            f"pair's time ratio, on this machine as it was): {what}"
        )
        knobs += "; or run where less else runs (the noise), or widen test.tolerance"
    if runs > cap:
        return f"{said} would need about {runs:,} runs, more than run.max_runs can be ({cap:,}): {knobs}"
    return f"{said} needs about {runs:,} runs: raise run.max_runs to {min(cap, math.ceil(runs * 1.25)):,}"
