"""A bisect's report, assembled from what it reached (pure).

The search and its confirmation (core.walkback) end in a `Departure` (status, message, the
boundary, the change points crossed); the report adds what the answer rests on: the named commit
and its parent's counts, the confidence as a union bound over every claim (each GOOD/BAD against
the reference, each change found), the assumptions behind it, the blocks of commits that could
not be tested, what a found commit proves and which untested stretches could hide an earlier
departure, the forecast the strategy was chosen by beside what the bisect took, and the command
that reproduces it. What only the bisect's own side can know (subjects, dates, the runs side by
side) comes in as `Facts`, gathered first (bisecting.summary): nothing here tests a commit, reads
git or runs anything, so deciding and explaining do not mix.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence

import numpy as np

from bisectbot.core import policy
from bisectbot.core.builds import build_stages, builds_bound
from bisectbot.core.diagnose import distance_along, distance_name
from bisectbot.core.ends import repeatability_text
from bisectbot.core.ledger import Ledger
from bisectbot.core.plan import BisectPlan, Departure, ReportContext
from bisectbot.core.search import SearchResult, untested_stretches
from bisectbot.records.commits import CommitVerdict, distinct_runs
from bisectbot.records.reports import (
    Actual,
    BisectReport,
    BisectStatus,
    ChangePointRow,
    Cost,
    ForecastRow,
    NumericReference,
    Outputs,
    Proved,
    ReferenceSummary,
    Repeatability,
    SkipBlockRow,
    Stopped,
    Stretch,
    Units,
)
from bisectbot.statistics import stats
from bisectbot.statistics.outcome import Find, Verdict


@dataclass(frozen=True)
class Facts:
    """What the report needs that only the bisect's own side knows: subjects of the commits it
    names, the skip blocks as the report lists them, the reference as the tests saw it (a
    control sample grows as tests ask), the runs of the culprit and its parent side by side."""

    eta: float
    tolerance: float
    reference: stats.Reference  # what the tests judged against
    summary: ReferenceSummary  # the same, as the report shows it (a control grown to its final size)
    subjects: Mapping[str, str | None]  # of the culprit and of every change point
    skip_blocks: Sequence[SkipBlockRow]  # the search's blocks of alike skips, as reported
    control_runs: int | None = None  # a control sample's runs no test of the control commit counts
    control_executed: int = 0  # the control's runs this invocation executed (in runs_executed)
    outputs: Outputs | None = None  # the culprit's and its parent's first runs (bisecting.outputs)
    width: int = 1  # commits tested at once (a cluster's workers)
    repeatability: Repeatability | None = None  # the working end's seeds run twice (bisecting.endpoints)


def candidates(plan: BisectPlan, result: SearchResult) -> list[str]:
    """The possible culprits of a search result, with the commits skipped as equivalent among them."""
    found = [plan.line[p] for p in result.candidates]
    if plan.narrowed is not None and len(found) > 1:
        found = plan.narrowed.expand(found[0], found[-2]) + [found[-1]]
    return found


def culprit_of(plan: BisectPlan, dep: Departure) -> str | None:
    """The commit named, when one is."""
    return plan.line[dep.found.result.first_bad] if dep.status is BisectStatus.FOUND else None


def assemble(ledger: Ledger, dep: Departure, context: ReportContext, facts: Facts) -> BisectReport:
    """The bisect's report: the answer, what it rests on and its confidence, what it cost."""
    plan, verdicts, found = ledger.plan, ledger.verdicts, dep.found
    culprit = culprit_of(plan, dep)
    narrowed = plan.narrowed
    possible = candidates(plan, found.result)
    # What is reported rests on its claims (tests against the reference, the change test):
    # a wrong answer needs one of them to be wrong, so the bound is their summed error
    # levels (a control sample's tests are two-sample tests at the same levels).
    # a pooled control's bound on what its buckets hide may be wrong once, for every GOOD at once
    doubt = ledger.doubt() + (facts.reference.pooling.level if facts.reference.pooling else 0.0)
    strategy = dep.strategies[0] if dep.strategies else found.strategy
    what = proved(ledger, dep, facts, 1.0 - doubt)
    return BisectReport(
        job=plan.job,
        status=dep.status,
        find=plan.find,
        first_bad=culprit,
        first_bad_subject=facts.subjects.get(culprit) if culprit else None,
        last_good=ledger.parent_of(found.result.first_bad) if culprit else plan.line[found.result.last_good],
        candidates=possible,
        good=plan.good,
        bad=plan.bad,
        good_ref=plan.good_ref,
        bad_ref=plan.bad_ref,
        commits=plan.total,
        builds=len({v.sha for v in verdicts if v.arm == "main"}),
        builds_bound=builds_bound(plan.n),
        runs=distinct_runs(verdicts),
        runs_executed=facts.control_executed
        + sum(v.executed for v in verdicts)
        + (facts.repeatability["runs_executed"] if facts.repeatability else 0),
        retried=sum(v.retried for v in verdicts),
        confidence=max(0.0, 1.0 - doubt) if dep.status in (BisectStatus.FOUND, BisectStatus.CLEAN) else 0.0,
        step_alpha=plan.level,
        message=dep.message,
        verdicts=list(verdicts),
        reference=facts.summary,
        config=context.config,
        environment=context.environment,
        strategy=strategy,
        extra={"strategy_requested": plan.strategy, "strategies": dep.strategies},
        skip_blocks=list(facts.skip_blocks),
        reproduce=reproduce_line(plan, strategy),
        change_points=change_points(ledger, dep, facts.subjects),
        assumptions=assumptions(ledger, dep, facts),
        posterior=found.posterior,
        eta=facts.eta,
        tolerance=facts.tolerance,
        control_runs=facts.control_runs,
        along=distance_along(
            verdicts,
            {sha: i for i, sha in enumerate(narrowed.full if narrowed is not None else plan.line)},
            facts.summary.categories,
            facts.summary.category_probs,
            facts.summary.numeric,
        ),
        searched=plan.n,
        skipped_equivalent=plan.total - plan.n,
        boundary_skipped=list(narrowed.stands_for.get(plan.line[found.result.last_good], ())) if narrowed else [],
        rounds=ledger.rounds,
        workers=facts.width,
        input_rule=narrowed.rule if narrowed is not None else "",
        stopped=_stopped(plan, dep, len(possible)),
        outputs=facts.outputs,
        user_skipped=[sha for sha in (narrowed.full if narrowed else plan.line) if sha in plan.user_skipped],
        cost=cost(ledger),
        build_stages=[stage.to_json() for stage in build_stages(verdicts, plan.find)],
        proved=what.proved,
        untested_before=what.untested_before,
        scan_command=what.scan_command,
        repeatability=facts.repeatability,
    )


def _stopped(plan: BisectPlan, dep: Departure, left: int) -> Stopped | None:
    """A bisect stopped by its budget: which limit, the range left and how to go on."""
    if dep.stop is None:
        return None
    result = dep.found.result
    return Stopped(
        by=dep.stop.by,
        reason=dep.stop.reason,
        last_good=plan.line[result.last_good],
        first_bad=plan.line[result.first_bad],
        commits_left=left,
        resume="run the same command again (it resumes from the state directory)",
    )


@dataclass(frozen=True)
class WhatItProves:
    """The report's `proved`, `untested_before` and `scan_command`."""

    proved: Proved | None = None
    untested_before: list[Stretch] = field(default_factory=list)
    scan_command: str | None = None


def proved(ledger: Ledger, dep: Departure, facts: Facts, confidence: float) -> WhatItProves:
    """What a found commit proves, exactly (the report's `proved`, `untested_before` and
    `scan_command`): its parent is on the working side of the reference, it is on the other,
    and their runs differ: a GOOD→BAD change there. That it is the *first* departure holds only
    if no commit before it departed and came back; the stretches where nothing was tested
    (between two commits shown on the working side: core.search.untested_stretches) are where
    such a departure could hide, and `bisect --scan` tests every one of them."""
    if dep.status is not BisectStatus.FOUND:
        return WhatItProves()
    plan, find = ledger.plan, ledger.plan.find
    c = dep.found.result.first_bad
    culprit, parent = plan.line[c], ledger.parent_of(c)
    where = ledger.positions()
    main = [v for v in ledger.verdicts if v.arm == "main" and v.sha in where]
    sides = {
        where[v.sha]: v.verdict
        for v in main
        if where[v.sha] < c and find.search_verdict(v.verdict).side is Verdict.GOOD
    }
    stretches = untested_stretches(set(sides), c)
    was, now = find.parent_verdict.value.upper(), find.culprit_verdict.value.upper()
    how = {Verdict.GOOD: f"within tolerance {facts.tolerance:g}", Verdict.BAD: f"farther than eta {facts.eta:g}"}
    text = (
        f"a {was}→{now} change at {culprit[:12]}: its parent {parent[:12]} tests {was} ({how[find.parent_verdict]} "
        f"from the reference), {culprit[:12]} tests {now} ({how[find.culprit_verdict]}), and their runs differ on "
        f"fresh seeds; all at confidence ≥ {max(0.0, confidence):.2%}"
    )
    skipped = {where[v.sha] for v in main if v.verdict is Verdict.SKIP}
    rows = [
        Stretch(
            after=plan.line[after],
            before=plan.line[before],
            first=plan.line[after + 1],
            last=plan.line[before - 1],
            commits=before - after - 1,
            skipped=sum(after < p < before for p in skipped),  # of them, tried and could not be built or run
            scan=scan_line(plan, plan.line[after], plan.line[before]) if find is Find.BAD else None,
        )
        for after, before in stretches
    ]
    return WhatItProves(
        Proved(
            change=f"{was}→{now}",
            commit=culprit,
            parent=parent,
            first_departure=not stretches,
            text=text,
            # some commit before it was only placed on its side (GOOD-SIDE), not tested
            placed=any(v is not Verdict.GOOD and v is not Verdict.BAD for v in sides.values()),
        ),
        rows,
        scan_line(plan, rows[0]["after"], rows[-1]["before"]) if rows and find is Find.BAD else None,
    )


def scan_line(plan: BisectPlan, good: str, bad: str) -> str:
    """The command that scans the commits after `good` up to `bad` (--scan: each one that can
    change the binary tested against the reference until one departs), narrowed as this bisect
    was, with the user's skips that lie between."""
    how = plan.narrowing
    extra = "".join(f" --paths {shlex.quote(p)}" for p in how.paths)
    extra += "".join(f" --also {shlex.quote(p)}" for p in how.also)
    extra += "" if how.enabled else " --all-commits"
    full = list(plan.narrowed.full if plan.narrowed is not None else plan.line)
    lo, hi = full.index(good), full.index(bad)
    extra += "".join(f" --skip {sha[:12]}" for sha in plan.user_skipped if lo < full.index(sha) < hi)
    return f"bisectbot bisect {plan.config_path} --good {good} --bad {bad}{extra} --scan"


def with_time(report: BisectReport, wall: float, building: float, running: float | None) -> BisectReport:
    """The report with where this invocation's wall time went (`cost.time`): building (every
    build it made, the ends' and the arms' too), running the program (where runs were executed,
    not replayed; None on a cluster, whose workers run them), and the rest (the reference,
    checkouts, servers starting, waiting). A resumed bisect counts only its own invocation."""
    spent = {"wall": round(wall, 1), "building": round(building, 1)}
    if running is not None:
        spent |= {"running": round(running, 1), "other": round(max(wall - building - running, 0.0), 1)}
    return replace(report, cost={**(report.cost or {}), "time": spent})


def cost(ledger: Ledger) -> Cost | None:
    """The forecast the strategy was chosen by, and what the bisect took, in the same units
    (builds, runs, seconds at the measured unit costs)."""
    if not ledger.choices:
        return None
    first = ledger.choices[0]
    units = first.costs
    main = [v for v in ledger.verdicts if v.arm == "main"]
    ends = [v for v in main if v.role.endswith("-endpoint")]
    end_builds, end_runs = len({v.sha for v in ends}), distinct_runs(ends)
    builds = len({v.sha for v in main})
    runs = distinct_runs(main)
    built = {v.sha: v.build_seconds for v in main if v.build == "ok"}

    def whole(f: policy.Forecast) -> ForecastRow:  # the forecast with the ends' builds and runs
        return ForecastRow(
            strategy=f.strategy,
            builds=round(f.builds + end_builds, 1),
            runs=round(f.runs + end_runs),
            seconds=round(units.seconds(f.builds + end_builds, f.runs + end_runs), 1),
        )

    chosen = first.forecast()
    return Cost(
        unit=Units(
            build_seconds=units.build,
            run_seconds=units.run,
            measured_builds=units.builds,
            measured_runs=units.runs,
        ),
        estimate=whole(chosen) if chosen is not None else None,
        alternatives=[whole(f) for f in first.forecasts if f.strategy != first.strategy],
        actual=Actual(
            builds=builds,
            runs=runs,
            seconds=round(units.seconds(builds, runs), 1),
            build_seconds=round(sum(built.values()), 1),
        ),
        text=first.text(),
    )


def change_points(ledger: Ledger, dep: Departure, subjects: Mapping[str, str | None]) -> list[ChangePointRow]:
    """The first departure (when found), then every boundary the bisect stopped at on the
    way whose parent already departed, in line order; `before`/`after` are the counts on
    fresh seeds at the parent and at the commit."""
    line = ledger.plan.line
    out = []
    for cp in sorted(dep.crossed, key=lambda c: c.position):
        out.append(
            ChangePointRow(
                commit=line[cp.position],
                subject=subjects.get(line[cp.position]),
                first=False,
                before=dict(cp.parent.counts),
                after=dict(cp.culprit.counts),
                text=f"{line[cp.position][:12]}: a boundary the search stopped at, but its parent "
                f"{cp.parent.sha[:12]} already departs from the reference "
                f"({cp.parent.verdict.value.upper()} after {cp.parent.runs} runs on fresh seeds), so "
                f"the search walked back below it",
            )
        )
    culprit = culprit_of(ledger.plan, dep)
    if culprit is not None:
        last = {v.role: v for v in ledger.verdicts if v.arm == "main"}
        parent, again = last.get("confirm-parent"), last.get("confirm-culprit")
        out.insert(
            0,
            ChangePointRow(
                commit=culprit,
                subject=subjects.get(culprit),
                first=True,
                before=dict(parent.counts) if parent else {},
                after=dict(again.counts) if again else {},
                text=f"{culprit[:12]}: the first departure from the reference",
            ),
        )
    return out


def assumptions(ledger: Ledger, dep: Departure, facts: Facts) -> list[str]:
    """What the stated confidence rests on, from what this bisect saw."""
    claims = ledger.decisive()
    changes = sum(1 for v in claims if v.role == "confirm-culprit")
    out = [
        f"the bound counts the {len(claims) - changes} GOOD/BAD verdicts of tests against the reference "
        f"and the {changes} change test(s) this bisect made, each at error ≤ {ledger.plan.level:.1e}; "
        f"placements without such a test (GOOD-SIDE, BAD-SIDE) only steer",
        "the named commit's runs differ from its parent's on fresh seeds (the change test): this holds "
        "whatever the history looks like",
        "once a commit departs from the reference, every later commit on the line departs too "
        "(no commit in between returns to it): for the named commit to be the first departure; where one "
        "that came back could hide is listed in untested_before, and bisect --scan tests it",
        f"commits whose distribution is between eta {facts.eta:g} and tolerance "
        f"{facts.tolerance:g} ({_band_distance(facts.summary.numeric)}) from the reference may be called either way (test.eta, "
        "test.tolerance: the smallest change that matters)",
    ]
    out += _untested_ends(ledger)
    out += [
        f"{sha[:12]} was not tested against the reference itself: it runs the same program as "
        f"{twin.sha[:12]} (byte-identical self-contained binaries, the same command and input files), "
        f"whose test gave {twin.verdict.value.upper()} after {twin.runs} runs"
        for sha, twin in ledger.stand_ins.items()
    ]
    if dep.crossed:
        out.append(
            f"{len(dep.crossed)} boundary(ies) ruled out on the way (their parent departs): listed in change_points"
        )
    if (noisy := repeatability_text(ledger.plan.find.working_ref_name, facts.repeatability)) is not None:
        out.append(noisy)
    return out + _about_the_reference(ledger, dep, facts)


def _untested_ends(ledger: Ledger) -> list[str]:
    """A broken end the answer does not rest on, and why it went untested."""
    plan = ledger.plan
    broken = plan.find.broken_ref_name
    if ledger.end_verdict(broken) is not None:
        return []
    if plan.scan:
        return [
            f"the {broken} end was not tested: the scan met a commit that departs before it (commits between "
            f"the ends are scanned first)"
        ]
    if plan.broken_last:
        return [
            f"the {broken} end was not tested (builds here are slow, and the answer does not rest on it: "
            f"the named commit and its parent are each tested against the reference); its compile inputs "
            f"were scanned without building"
        ]
    return []


def _about_the_reference(ledger: Ledger, dep: Departure, facts: Facts) -> list[str]:
    """What the bound assumes of the reference: a control sample's pairing, the sticky search's
    posterior (apart), stray outcomes at GOOD commits, a working end in the indifference zone."""
    ref, out = facts.reference, []
    if ref.control is not None:
        out.append(
            f"the reference is a control sample of {sum(ref.control)} runs, shared by every test (each run "
            f"paired with the control's run on its seed): each test holds its level for a commit chosen apart "
            f"from the control's noise, with seeds as exchangeable draws and failed runs unrelated to the "
            f"outcome; the change test naming the commit does not use the control"
        )
    if (pool := ref.pooling) is not None:
        out.append(
            f"the reference's {pool.pooled:,} least probable outcomes are pooled into {len(pool.buckets)} tail "
            f"buckets: BAD is judged on the pooled categories (pooling only lowers the distance), GOOD at "
            f"tolerance {facts.tolerance:g} − {pool.hidden:.4f}, the reference mass redistribution inside the "
            f"buckets could hide ({pool.how})"
            + (f"; that bound is wrong with probability ≤ {pool.level:.1e}, counted in the bound" if pool.level else "")
        )
    if dep.found.posterior is not None:
        out.append(
            f"the sticky search's posterior ({dep.found.posterior:.4f}) is a Bayesian probability "
            f"under its model, reported apart (posterior), not part of the bound"
        )
    stray = sum(v.counts.get(stats.OTHER, 0) for v in ledger.verdicts if v.arm == "main" and v.verdict is Verdict.GOOD)
    if stray:
        out.append(f"{stray} stray outcome(s) seen at commits judged GOOD: within the indifference zone")
    name = ledger.plan.find.working_ref_name
    working = next((v for v in ledger.verdicts if v.arm == "main" and v.role == f"{name}-endpoint"), None)
    if working is not None and (tv := observed_tv(working, ref, facts.eta)) is not None:
        out.append(
            f"the {name} end's runs sit {tv:.3f} (total variation, observed) from the reference, above eta "
            f"{facts.eta:g}: it may itself be in the indifference zone, where commits can test either way"
        )
    return out


def observed_tv(v: CommitVerdict, ref: stats.Reference, eta: float) -> float | None:
    """The total variation between a commit's observed runs and the reference when it is
    clearly above eta (by three standard errors of the runs' sampling noise), else None."""
    n = np.array([v.counts.get(name, 0) for name in ref.names], dtype=float)
    total = n.sum()
    if total < 50:
        return None
    p = np.asarray(ref.estimate, dtype=float)
    tv = 0.5 * float(np.abs(n / total - p).sum())
    noise = 0.5 * float(np.sqrt(p * (1 - p) / total).sum())
    return tv if tv - 3 * noise > eta else None


def reproduce_line(plan: BisectPlan, strategy: str) -> str:
    """The command that runs this bisect again (it resumes from the state directory)."""
    how = plan.narrowing
    extra = " --find fixed" if plan.find is Find.FIXED else ""
    extra += " --scan" if plan.scan else ""
    extra += "".join(f" --paths {shlex.quote(p)}" for p in how.paths)
    extra += "".join(f" --also {shlex.quote(p)}" for p in how.also)
    extra += "" if how.enabled else " --all-commits"
    extra += "".join(f" --skip {sha[:12]}" for sha in plan.user_skipped)
    # a scan, or ends that gave the answer alone, searched with no strategy: the one asked for
    strategy = strategy if strategy in ("reference", "plain", "sticky") else plan.strategy
    return f"bisectbot bisect {plan.config_path} --good {plan.good} --bad {plan.bad}{extra} --strategy {strategy}"


def _band_distance(numeric: NumericReference | None) -> str:
    """What the band bounds, in words: total variation for outcomes, else the number's distance."""
    return "total variation" if numeric is None else distance_name(numeric)
