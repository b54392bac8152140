"""Report rendering (pure): Markdown summaries of typed reports, for people.

The JSON form is the reports' own (`records.reports`); here is what a person reads: the culprit
first, then the table of tested commits with observed counts against the reference, then how to
reproduce and on what machine. The GitHub comment (`github.comment`) reuses the pieces.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

from bisectbot.core.builds import BuildStage, over_bound_text
from bisectbot.core.diagnose import LABELS, distance_name, observed_cells, observed_number
from bisectbot.core.ends import NO_SEARCH
from bisectbot.inert import block, code, prose
from bisectbot.records.commits import UNREADABLE, CommitVerdict
from bisectbot.records.reports import (
    BisectReport,
    BisectStatus,
    CommitReport,
    Environment,
    NumericReference,
    ReferenceSummary,
    SkipBlockRow,
    Stretch,
    output_side,
)
from bisectbot.report.terms import (
    PLACEMENTS,
    bound_gloss,
    condition_gloss,
    confidence_gloss,
    placements_note,
    strategy_gloss,
    table_terms,
    verdict_note,
    zone_gloss,
)
from bisectbot.statistics.outcome import Find, Verdict
from bisectbot.statistics.stats import FAILED, MISSED, OTHER


def count_of(n: int, word: str) -> str:
    """'1 build', '6 builds', '1,460 runs': a count with its noun, singular when it is one."""
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


def bound_text(r: BisectReport) -> str:
    """The build bound, and when the bisect went past it, why: which stage needed the extra
    builds (core.builds; never exceeded silently)."""
    if r.builds <= r.builds_bound:
        return f"bound {r.builds_bound}"
    if r.build_stages:
        return f"bound {r.builds_bound}, " + over_bound_text(
            [BuildStage.from_json(s) for s in r.build_stages], r.builds_bound
        )
    # a report stored before build_stages: what its verdicts alone tell
    skipped = len({v.sha for v in r.verdicts if v.arm == "main" and v.verdict is Verdict.SKIP})
    walked = sum(1 for cp in r.change_points if not cp.get("first"))
    why = [
        *([f"{count_of(skipped, 'commit')} that could not be built or run (each costs a build)"] if skipped else []),
        *([f"{count_of(walked, 'walk-back')} past a boundary whose parent departs"] if walked else []),
    ]
    return f"bound {r.builds_bound}, exceeded by {r.builds - r.builds_bound}: " + (
        "; ".join(why) or "re-tests of commits around the culprit"
    )


def fmt_e(log_e: float) -> str:
    """An e-value from its log, compactly: 3.2e4, 0.41, ∞."""
    if math.isinf(log_e) and log_e > 0:
        return "∞"
    if log_e > 700:
        return f"e^{log_e:.0f}"
    value = math.exp(log_e)
    return f"{value:.2g}" if 1e-2 <= value < 1e3 else f"{value:.1e}"


def observed_vs_reference(counts: dict[str, int], reference: ReferenceSummary, *, table: bool = False) -> str:
    """'e 14 (1.00 vs 0.35) · g 0 (0 vs 0.45)': outcome frequencies among runs meeting the
    condition, in Markdown (an outcome's name is what a program printed: `inert.prose`)."""
    parts = [
        f"{prose(c.label, table=table)} {c.count} ({f'{c.freq:.2f}' if c.freq is not None else '–'} vs {c.ref:.2f})"
        for c in observed_cells(counts, reference.categories, reference.category_probs)
    ]
    if missed := counts.get(MISSED):
        parts.append(f"missed {missed}")
    return " · ".join(parts)


def observed_cell(v: CommitVerdict, reference: ReferenceSummary, *, table: bool = False) -> str:
    """What a verdict's runs showed beside the reference: outcome counts, or for a number its
    mean and θ with the interval its test left (core.diagnose.observed_number)."""
    if reference.numeric is not None and v.values:
        return observed_number(v.values, reference.numeric)
    return observed_vs_reference(v.counts, reference, table=table) if v.counts else "–"


def evidence_cell(v: CommitVerdict) -> str:
    """The evidence column, in Markdown for a table cell (a SKIP's reason quotes a build error)."""
    if v.verdict is Verdict.SKIP:
        return prose(v.reason, table=True, limit=120)
    if v.mode == "bad-model":  # no test: the broken end measured further (its verdict is its earlier row's)
        return "measured, not tested"
    if (note := verdict_note(v)) is not None:  # a placement, or one side of the change test
        change = f"E_change {fmt_e(v.log_e_bad)}: " if v.mode == "change" else ""
        return change + prose(note, table=True, limit=160)
    return f"E_bad {fmt_e(v.log_e_bad)}, E_good {fmt_e(v.log_e_good)}"


def glossary(
    eta: float | None,
    tolerance: float | None,
    verdicts: Sequence[CommitVerdict],
    *,
    missed: bool = False,
    numeric: NumericReference | None = None,
) -> list[str]:
    """What the figures beside the verdicts mean, one line each: said where they appear (the
    terminal summary and the Markdown), for a reader who has not read the design."""
    alpha = min((v.alpha for v in verdicts if v.alpha), default=None)
    beta = min((v.beta for v in verdicts if v.beta), default=None)
    eta_s = f" {eta:g}" if eta is not None else ""
    tol_s = f" {tolerance:g}" if tolerance is not None else ""
    if numeric is not None:
        return [*number_glossary(numeric, eta_s, tol_s, alpha, beta), *table_terms(verdicts)]
    lines = [
        "TV (total variation): half the summed differences between observed and reference shares; "
        "0 = the same distribution, 1 = nothing in common.",
        f"BAD: farther than eta{eta_s} in TV from the reference, said when the evidence E_bad reaches "
        f"1/alpha{f' = {1 / alpha:,.0f}' if alpha else ''}: a commit within eta is called BAD with "
        "probability at most alpha.",
        f"GOOD: within the tolerance{tol_s} in TV, said when E_good reaches 1/beta"
        f"{f' = {1 / beta:,.0f}' if beta else ''}: a commit farther than the tolerance is called GOOD "
        "with probability at most beta. Between eta and the tolerance either verdict may come: the tolerance "
        "is the smallest change that matters (test.tolerance, or bisectbot init --tolerance).",
        "observed/reference: each outcome's share of the runs that met the condition, then the reference's"
        + ("; other = outcomes the reference does not list" if any(v.counts.get(OTHER) for v in verdicts) else "")
        + (
            "; failed = runs that failed (crash, timeout, nonzero exit, output the parse cannot read), counted as an "
            "outcome the reference never gives (statistic.failures: outcome)"
            if any(v.counts.get(FAILED) for v in verdicts)
            else ""
        )
        + ("; missed = runs that did not meet the condition" if missed else "")
        + ".",
        "runs: seeds run for that verdict; commits share their first seeds (compared run by run), "
        "re-tests on fresh seeds take new ones.",
        *table_terms(verdicts),
    ]
    return lines


def number_glossary(
    numeric: NumericReference, eta_s: str, tol_s: str, alpha: float | None, beta: float | None
) -> list[str]:
    """The glossary's lines for a numeric statistic (statistic.kind mean or time)."""
    dist = distance_name(numeric)
    exact = (
        "exact at any number of runs, the values being bounded (statistic.bounds)"
        if numeric["exact"]
        else "a normal approximation, used only once it holds at the test's level (at least 100 runs, more "
        "for skewed values); statistic.bounds makes it exact"
    )
    return [
        f"distance: {dist}, in the units of test.tolerance; a test's interval is the range of it its runs do not "
        f"rule out at its level ({exact}).",
        f"BAD: farther than eta{eta_s} from the reference, said when the evidence E_bad reaches "
        f"1/alpha{f' = {1 / alpha:,.0f}' if alpha else ''}: a commit within eta is called BAD with probability at "
        "most alpha; its interval then lies beyond eta.",
        f"GOOD: within the tolerance{tol_s}, said when E_good reaches 1/beta{f' = {1 / beta:,.0f}' if beta else ''}: "
        "a commit farther than the tolerance is called GOOD with probability at most beta; its interval then lies "
        "within the tolerance. Between eta and the tolerance either verdict may come (test.tolerance, test.eta).",
        "observed/reference: the runs' mean, spread and count; then "
        + ("the mean with its interval and its distance from the reference." if numeric["scale"] == "mean" else "")
        + (
            "the difference from the control's runs on the same seeds, its interval and distance."
            if numeric["scale"] == "difference"
            else ""
        )
        + (
            "the ratio to the control's runs on the same seeds, its interval and distance."
            if numeric["scale"] == "ratio"
            else ""
        )
        + (
            "the median ratio of its time to the control's over pairs of runs made one right after the other "
            "(robust to the odd run a busy machine delays), its interval, distance and the pairs' noise."
            if numeric["scale"] == "median-ratio"
            else ""
        ),
        "runs: seeds run for that verdict; commits share their first seeds (compared run by run), "
        "re-tests on fresh seeds take new ones.",
    ]


def role_label(v: CommitVerdict, find: Find = Find.BAD) -> str:
    """The role column: with --find fixed the ends are named by the option the user typed."""
    role = find.role_label(v.role)
    return role if v.arm == "main" else f"{role} [{v.arm}]"


def verdict_table(
    verdicts: Sequence[CommitVerdict], reference: ReferenceSummary, link: str | None = None, find: Find = Find.BAD
) -> str:
    rows = [
        "| commit | subject | role | verdict | runs | observed (vs reference) | evidence |",
        "|---|---|---|---|---|---|---|",
    ]
    for v in verdicts:
        sha = f"[`{v.sha[:12]}`]({link.format(sha=v.sha)})" if link else f"`{v.sha[:12]}`"
        observed = observed_cell(v, reference, table=True)
        runs = f"{v.runs} ({v.cut_rate:.0%} cut)" if v.retried else f"{v.runs}"
        rows.append(
            f"| {sha} | {prose(v.subject, table=True, limit=70)} | {role_label(v, find)} | "
            f"**{v.verdict.value.upper()}** | {runs} | {observed} | {evidence_cell(v)} |"
        )
    return "\n".join(rows)


def build_and_run_notes(verdicts: Sequence[CommitVerdict]) -> list[str]:
    """One line per commit that was not built and run the plainest way: which build and command
    variant its era needed, and e.g. a build that only succeeded in a clean directory. Empty when
    every commit used variant 0 and nothing is worth a note."""
    lines, seen = [], set()
    for v in verdicts:
        if v.arm != "main" or v.sha in seen:
            continue
        seen.add(v.sha)
        parts = []
        if v.build_variant:
            parts.append(f"build variant {v.build_variant}")
        if v.variant:
            parts.append(f"command variant {v.variant}")
        if v.build_notes:
            parts.append(prose(v.build_notes))
        if parts:
            lines.append(f"- `{v.sha[:12]}`: " + "; ".join(parts))
    return lines


def skip_block_lines(blocks: Sequence[SkipBlockRow]) -> list[str]:
    """'- 12 commits 2024-06-01 … 2024-10-21 (3 tried): runs crash: …' per block of alike skips."""
    return [f"- {prose(b['text'])}" for b in blocks]


def change_point_lines(r: BisectReport) -> list[str]:
    """One line per change point the bisect crossed (the first departure first), with the
    observed outcomes on fresh seeds before (at the parent) and after; empty when there was only one."""
    if len(r.change_points) < 2:
        return []
    out = []
    for cp in r.change_points:
        mark = "**first departure**" if cp.get("first") else "later change point"
        subject = f" {prose(cp['subject'])}" if cp["subject"] else ""
        out.append(
            f"- `{cp['commit'][:12]}`{subject} — {mark}: before "
            f"{observed_vs_reference(cp.get('before', {}), r.reference) or '–'}; after "
            f"{observed_vs_reference(cp.get('after', {}), r.reference) or '–'}"
        )
    return out


def assumption_lines(r: BisectReport) -> list[str]:
    """What the stated confidence rests on (from the report), one bullet each."""
    zone = (
        (
            f"- BAD means farther than eta {r.eta:g} from the reference, GOOD within tolerance "
            f"{r.tolerance:g} ({distance_name(r.reference.numeric)}); a change in between may be called either way "
            "(test.eta, test.tolerance)"
        )
        if r.eta is not None and r.tolerance is not None
        else None
    )
    return [*([zone] if zone else []), *(f"- {a}" for a in r.assumptions)]


def reference_line(reference: ReferenceSummary, *, markdown: bool = True) -> str:
    """'token 1 given token 0 = `f`: e 0.3450, …': in Markdown (names made inert: a measured
    reference's outcomes are what a program printed), or plain for the terminal."""
    say, quote = (prose, code) if markdown else (str, lambda t: t)
    if (numeric := reference.numeric) is not None:
        return number_reference_line(reference, numeric, say)
    pool = reference.pooling
    shown = list(reference.probs.items())
    if pool:  # the categories the tests count: the kept outcomes and the buckets (among met runs)
        met = sum(v for k, v in reference.prob_of.items() if k != MISSED)
        shown = [(k, v / met) for k, v in reference.prob_of.items() if k not in (OTHER, FAILED, MISSED)]
    probs = ", ".join(f"{say(k)} {v:.4f}" for k, v in shown)
    cond = reference.condition
    where = f" given token {cond['position']} = {quote(cond['token'])}" if cond else ""
    pc = reference.condition_prob
    tail = f"; P(condition) {pc:.4f}" if pc else ""
    source = f" (from {say(reference.source)})" if reference.source else ""
    pooled = ""
    if pool:
        outcomes = sum(len(v) for v in pool["buckets"].values())
        pooled = (
            f"; {outcomes:,} of {outcomes + pool['kept']:,} outcomes pooled into {len(pool['buckets'])} tail "
            f"buckets: reference mass {pool['hidden']:.4f} they can hide ({say(pool['bound'])}); GOOD tested at "
            f"tolerance {pool['good_tolerance']:.3g}"
        )
    return f"token {reference.outcome['position']}{where}: {probs}{tail}{source}{pooled}"


def number_reference_line(reference: ReferenceSummary, numeric: NumericReference, say: Callable[[str], str]) -> str:
    """'the number at token 0: mean 0.64 (config); GOOD within 0.05 of it, BAD beyond 0.015
    (|mean − reference|); exact (values in [0, 1])': what a numeric statistic is judged against."""
    wall = numeric.get("wall_time", False)
    what = "the run's wall time" if wall else f"the number at token {reference.outcome['position']}"
    mean = numeric.get("mean")
    source = say(reference.source) if reference.source else ""
    if numeric["scale"] == "mean":
        at = f"mean {mean:.4g}" + (f" ({source})" if source else "")
    else:
        at = (source or "a control's runs on the same seeds") + (f" (its mean {mean:.4g})" if mean is not None else "")
    units = " of the reference's mean" if numeric.get("relative") else ""
    band = f"GOOD within {numeric['tolerance']:g}{units}, BAD beyond {numeric['eta']:g}"
    bounds = numeric.get("bounds")
    how = (
        f"exact (values in [{bounds[0]:g}, {bounds[1]:g}])" if numeric["exact"] and bounds else "a normal approximation"
    )
    return f"{what}: {at}; {band} ({distance_name(numeric)}); {how}"


def environment_lines(env: Environment) -> list[str]:
    return [
        f"- compiler: {env.compiler}",
        f"- build: {env.build}"
        if env.build
        else f"- cmake: {env.cmake}; arguments: `{' '.join(env.cmake_args) or '(none)'}`",
        f"- host: {env.host} ({env.platform}), Python {env.python}, bisectbot {env.bisectbot}",
    ]


def searched_text(r: BisectReport) -> str:
    """' (N' = 412 can change the binary)' when commits were skipped as equivalent."""
    return f" (N' = {r.searched} can change the binary)" if r.skipped_equivalent else ""


def cost_line(r: BisectReport) -> str | None:
    """'cost: 11 builds + 4,094 runs ≈ 17 min at this state's measured costs; forecast with
    reference steps 16 min (plain 19 min)': the forecast the strategy was chosen by and what
    the bisect took, in the same units; None for reports without one."""
    cost = r.cost
    if not cost or not cost.get("actual"):
        return None
    actual, unit = cost["actual"], cost["unit"]
    text = (
        f"cost: {count_of(actual['builds'], 'build')} + {actual['runs']:,} runs ≈ {_duration(actual['seconds'])} at "
        f"{_duration(unit['build_seconds'])} a build and {unit['run_seconds']:.3g} s a run"
    )
    estimate = cost.get("estimate")
    if estimate:
        others = ", ".join(f"{a['strategy']} {_duration(a['seconds'])}" for a in cost.get("alternatives", []))
        text += (
            f"; forecast with {estimate['strategy']} steps: {estimate['builds']:.0f} builds + "
            f"{estimate['runs']:,} runs ≈ {_duration(estimate['seconds'])}" + (f" ({others})" if others else "")
        )
    return text


def time_line(r: BisectReport) -> str | None:
    """'time here: 29 min: building 27 min (93%), runs 1.7 min, the rest 0.3 min': where the
    wall time of the invocation that finished the bisect went; None when not recorded."""
    spent = (r.cost or {}).get("time")
    if not spent or not spent.get("wall"):
        return None
    wall = spent["wall"]
    parts = [f"building {_duration(spent['building'])} ({spent['building'] / wall:.0%})"]
    if "running" in spent:
        servers = ", the cross-check arms' servers" if any(v.arm != "main" for v in r.verdicts) else ""
        parts += [
            f"runs {_duration(spent['running'])}",
            f"the rest {_duration(spent['other'])} (reference, checkouts{servers})",
        ]
    return f"time here: {_duration(wall)}: " + ", ".join(parts)


def _duration(seconds: float) -> str:
    if seconds < 10:
        return f"{seconds:.2g} s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 5400 else f"{seconds / 3600:.1f} h"


def outputs_lines(r: BisectReport) -> list[str]:
    """The culprit's and its parent's first confirmation runs side by side, collapsed (each run under
    its own commit's fresh seed)."""
    out = r.outputs
    if not out or not out.get("rows"):
        return []
    label = out.get("culprit_label", r.find.what)
    lines = [
        "",
        f"<details><summary>First runs of the parent and the {label} commit (fresh seeds)</summary>",
        "",
        f"| run | parent `{out['parent'][:12]}`: seed | output | outcome | {label} `{out['culprit'][:12]}`: seed "
        "| output | outcome |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in out["rows"]:
        cells = [str(row["run"])]
        for side in ("parent", "culprit"):
            seed, output, outcome = output_side(row, side)
            cells += [
                str(seed),
                code(output, table=True) if output else "–",
                prose(LABELS.get(outcome, outcome), table=True) if outcome else "–",
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, "", "</details>"]


def rerun_lines(r: BisectReport) -> list[str]:
    """The command that reruns one of the culprit's seeds by hand on its kept binary."""
    out = r.outputs
    again = out["rerun"] if out else None
    if not out or not again:
        return []
    binaries = ", ".join(code(p) for p in again["binaries"].values())
    return [
        "",
        f"One seed ({again['seed']}) of the {out.get('culprit_label', r.find.what)} commit by hand, "
        f"on its kept binary {binaries} (build directory {code(again['build_dir'])}):",
        block(again["command"]),
    ]


def bisect_headline(r: BisectReport, quote: Callable[[str], str] = str, say: Callable[[str], str] = str) -> str:
    """The one-line answer of a bisect, the same in the Markdown and on the terminal (`quote`
    marks the sha up, e.g. as code; `say` renders the commit's subject, e.g. `inert.prose`)."""
    what = r.find.what
    if r.status is BisectStatus.FOUND:
        return f"bisectbot: {what} commit is {quote((r.first_bad or '')[:12])} — {say(r.first_bad_subject or '')}"
    if r.status is BisectStatus.UNCONFIRMED:
        return f"bisectbot: {what} commit not confirmed"
    if r.status is BisectStatus.STOPPED:
        return f"bisectbot: stopped early — {what} commit is one of {len(r.candidates)} so far"
    if r.status is BisectStatus.CLEAN and r.strategy == NO_SEARCH:
        return f"bisectbot: nothing changed between the ends of {r.commits} commits"
    if r.status is BisectStatus.CLEAN:
        return f"bisectbot: no departure from the reference in {r.commits} commits (--scan)"
    return f"bisectbot: {what} commit is one of {len(r.candidates)}"


def _stretch(s: Stretch, quote: Callable[[str], str]) -> str:
    """'8400bf75414e..038d5c192e66 (51 commits)', one commit alone, and how many could not be built or run."""
    where = quote(s["first"][:12]) if s["first"] == s["last"] else f"{quote(s['first'][:12])}..{quote(s['last'][:12])}"
    skipped = int(s.get("skipped", 0))
    tried = (
        ""
        if not skipped
        else ", which could not be built or run"
        if skipped == int(s["commits"]) == 1
        else f", {skipped} of them could not be built or run"
    )
    return f"{where} ({count_of(int(s['commits']), 'commit')}{tried})"


def proved_text(r: BisectReport, quote: Callable[[str], str] = str) -> tuple[str, str, str | None] | None:
    """What a found commit proves, what it does not, and the command that tests the rest, the
    same in every summary (`quote` marks shas up): None unless found. A GOOD→BAD change at the
    commit is proved; that it is the first departure only when nothing before it went untested:
    otherwise the stretches where a departure could have come and gone unseen are named."""
    p = r.proved
    if r.status is not BisectStatus.FOUND or not p:
        return None
    proved = f"Proved: {p['text']}."
    side = r.find.parent_verdict.value.upper()
    if p.get("first_departure"):
        beside = " or placed beside a commit that did" if p.get("placed") else ""
        return (
            proved,
            f"It is the first departure: every commit before it that can change the binary tested {side}{beside}.",
            None,
        )
    rows = r.untested_before
    total = sum(int(s["commits"]) for s in rows)
    listing = ", ".join(_stretch(s, quote) for s in rows)
    where = "stretch" if len(rows) == 1 else f"{len(rows)} stretches"
    not_proved = (
        f"Not proved: that it is the first departure. {count_of(total, 'commit')} before it that can change the "
        f"binary {'was' if total == 1 else 'were'} not tested, in {where} between commits found on the {side} side: "
        f"{listing}; "
        f"a departure that began and ended inside one would not show (a defect fixed, then re-introduced)."
    )
    if r.scan_command:
        return proved, not_proved + " To test every commit of them:", r.scan_command
    return proved, not_proved + " (--scan, which tests every one of them, works with --find bad only.)", None


def distance_rows(r: BisectReport) -> list[tuple[int, str, float, Verdict]]:
    """(position on the line, sha, TV from the reference, verdict) of every tested commit on the
    line, in history order (the report's `along`): where the distribution moved. Placements
    (GOOD-SIDE, BAD-SIDE) are left out: they have no distance of their own (`placements_note`
    says which and why)."""
    rows = [(int(a["position"]), str(a["commit"]), float(a["tv"]), Verdict(a["verdict"])) for a in r.along]
    return [row for row in rows if row[3] not in PLACEMENTS]


def distance_chart(r: BisectReport) -> tuple[str, str] | None:
    """The distance from the reference along the history as a Mermaid xychart (Markdown,
    comments): one bar per tested commit in history order, eta and the tolerance as lines.
    Returns (what the chart shows, its Mermaid source), or None with fewer than two commits."""
    rows = distance_rows(r)
    if len(rows) < 2:
        return None
    labels = ", ".join(f'"{pos}"' for pos, *_ in rows)
    top = max(0.2, min(1.0, max(tv for _, _, tv, _ in rows) * 1.1))
    name = distance_name(r.reference.numeric)
    top = top if r.reference.numeric is None else max(top, max(tv for _, _, tv, _ in rows) * 1.1)
    lines = [
        "xychart-beta",
        f'    title "distance from the reference along the history ({name})"',
        f'    x-axis "commit position" [{labels}]',
        f'    y-axis "{name}" 0 --> {top:.3g}',
        f"    bar [{', '.join(f'{tv:.3f}' for _, _, tv, _ in rows)}]",
    ]
    legend = f"bars: each tested commit's {name}"
    for name, level in (("eta", r.eta), ("tolerance", r.tolerance)):
        if level is not None:
            lines.append(f"    line [{', '.join(f'{level:g}' for _ in rows)}]")
            legend += f"; line: {name} {level:g}"
    if (note := placements_note(r)) is not None:
        legend += f"; {note}"
    return f"Chart: distance from the reference along the history ({legend})", "\n".join(lines)


def _chart_block(chart: tuple[str, str] | None) -> list[str]:
    """A chart folded away in Markdown, its Mermaid source in a fenced block."""
    if chart is None:
        return []
    summary, source = chart
    return ["", f"<details><summary>{summary}</summary>", "", "```mermaid", source, "```", "", "</details>"]


def _glossary_block(lines: list[str]) -> list[str]:
    """The glossary folded away in Markdown (GitHub shows the summary line)."""
    return ["<details><summary>How to read this</summary>", "", *[f"- {line}" for line in lines], "", "</details>"]


def gloss_block(glosses: Sequence[str | None]) -> list[str]:
    """Terms glossed where they are first met (`report.terms`): a quote under the paragraph
    that uses them, each 'term: meaning' with its term in italics; nothing when none applies."""
    out: list[str] = []
    for text in (g for g in glosses if g):
        term, _, meaning = text.partition(": ")
        out += [">", f"> *{term}*: {meaning}"]
    return ["", *out[1:]] if out else []


def figures_glosses(r: BisectReport) -> list[str | None]:
    """What the figures line needs glossed: the bound, and the confidence when no Proved line
    (which glosses it) came before."""
    return [bound_gloss(r), confidence_gloss(r) if proved_text(r) is None else None]


def bisect_markdown(r: BisectReport, *, link: str | None = None) -> str:
    """The human summary of a bisect: the answer, the figures and the table, then the notes on
    what was skipped and crossed, what the confidence rests on, and how to reproduce it. Each
    term is glossed where it is first met (`report.terms`)."""
    lines = [*_answer_lines(r), "", _figures_line(r), *gloss_block(figures_glosses(r))]
    if line := cost_line(r):
        lines += ["", line[0].upper() + line[1:], *gloss_block([strategy_gloss(r)])]
    lines += [*(["", line[0].upper() + line[1:]] if (line := time_line(r)) else [])]
    lines += [
        "",
        f"Reference: {reference_line(r.reference)}",
        *gloss_block([condition_gloss(r.reference, code)]),
        "",
        verdict_table(r.verdicts, r.reference, link, r.find),
        "",
        *_glossary_block(
            glossary(
                r.eta,
                r.tolerance,
                r.verdicts,
                missed=r.reference.condition_prob is not None,
                numeric=r.reference.numeric,
            )
        ),
        *_chart_block(distance_chart(r)),
        *_skip_lines(r),
    ]
    if changes := change_point_lines(r):
        lines += ["", "### Change points crossed", *changes]
    if r.assumptions:
        lines += ["", "### What the confidence rests on", *assumption_lines(r)]
        if r.posterior is not None:
            lines.append(f"- sticky search posterior P(culprit) = {r.posterior:.4f} (Bayesian, not part of the bound)")
    lines += outputs_lines(r)
    lines += [
        "",
        "### Reproduce",
        block(r.reproduce),
        *rerun_lines(r),
        "",
        "### Environment",
        *environment_lines(r.environment),
        f"- config: {r.config.name} (digest {r.config.digest})",
    ]
    return "\n".join(lines) + "\n"


def _answer_lines(r: BisectReport) -> list[str]:
    """The headline, the commit named and what it proves, or why none was named."""
    lines = ["## " + bisect_headline(r, lambda sha: f"`{sha}`", prose), ""]
    if r.status is BisectStatus.FOUND:
        lines.append(f"First {r.find.value}: `{r.first_bad}`  ")
        lines.append(f"Last {'good' if r.find is Find.BAD else 'still bad'}: `{r.last_good}`")
        if (said := proved_text(r, lambda sha: f"`{sha}`")) is not None:
            proved, not_proved, command = said
            lines += ["", f"**{proved.replace(': ', ':** ', 1)}", *gloss_block([zone_gloss(r), confidence_gloss(r)])]
            lines += ["", f"**{not_proved.replace(': ', ':** ', 1)}"]
            lines += [block(command)] if command else []
    else:
        lines.append(prose(r.message))
        if r.candidates:
            lines += ["", "Candidates: " + ", ".join(f"`{c[:12]}`" for c in r.candidates)]
    return lines


def _figures_line(r: BisectReport) -> str:
    """Status, range, builds against their bound, runs and confidence, on one line."""
    return (
        f"**{r.status.value}** · {r.commits} commits between `{r.good[:12]}` ({code(r.good_ref)}) and "
        f"`{r.bad[:12]}` ({code(r.bad_ref)}){searched_text(r)} · **{count_of(r.builds, 'build')}** "
        f"({bound_text(r)}) · **{count_of(r.runs, 'run')}** "
        f"({r.retried} reruns of incomplete output) · confidence ≥ {r.confidence:.2%} "
        f"(per-step error ≤ {r.step_alpha:.1e})"
    )


def _skip_lines(r: BisectReport) -> list[str]:
    """How commits were built and run, and which were skipped: in blocks, by the user, or as
    unable to change the binary."""
    lines: list[str] = []
    if r.find is Find.FIXED:
        lines += ["", f"Verdicts: {r.find.verdict_words}."]
    if notes := build_and_run_notes(r.verdicts):
        lines += ["", "How commits were built and run (variants for their era):", *notes]
    if r.skip_blocks:
        lines += ["", "Skipped in blocks (commits that fail the same way):", *skip_block_lines(r.skip_blocks)]
    if r.user_skipped:
        lines += [
            "",
            "Skipped by the user (--skip/--exclude; never built or tested): "
            + ", ".join(f"`{c[:12]}`" for c in r.user_skipped),
        ]
    if r.skipped_equivalent:
        lines += [
            "",
            f"Commits that cannot change the binary ({r.input_rule}): {r.skipped_equivalent} skipped as "
            f"equivalent to their parent, N' = {r.searched} searched.",
        ]
        if r.boundary_skipped:
            lines.append(
                f"Skipped between the last good and the {r.find.value} commit (presumed to build the last "
                f"good commit's binary): " + ", ".join(f"`{c[:12]}`" for c in r.boundary_skipped)
            )
    return lines


def failure_lines(v: CommitVerdict) -> list[tuple[str, str]]:
    """The runs that failed and the runs whose output the parse could not read, apart (they call
    for different fixes), by status, each with its last run's reason: (label, plain text that
    the renderer makes inert)."""
    out = []
    for label, last, kinds in (
        ("failed runs", v.last_failed, {k: n for k, n in v.failures.items() if k not in UNREADABLE}),
        ("runs that do not match parse", v.last_unreadable, {k: n for k, n in v.failures.items() if k in UNREADABLE}),
    ):
        if kinds:
            out.append((label, ", ".join(f"{k} {n}" for k, n in kinds.items()) + (f" (last: {last})" if last else "")))
    return out


def commit_markdown(r: CommitReport) -> str:
    """The human summary of `bisectbot test` (one commit's verdict)."""
    v = r.detail
    lines = [
        f"## bisectbot: `{r.commit[:12]}` is **{v.verdict.value.upper()}** after {v.runs} runs",
        "",
        prose(v.subject),
        "",
        f"Reference: {reference_line(r.reference)}",
        "",
        verdict_table([v], r.reference),
        "",
        f"Why: {prose(v.reason)}",
        "",
        *_glossary_block(
            glossary(
                r.eta,
                r.tolerance,
                [v, *r.arms.values()],
                missed=r.reference.condition_prob is not None,
                numeric=r.reference.numeric,
            )
        ),
    ]
    for name, av in r.arms.items():
        lines += [
            "",
            f"Arm **{name}**: **{av.verdict.value.upper()}** after {av.runs} runs — {prose(av.reason)}",
            "",
            verdict_table([av], r.reference),
        ]
    lines += [f"{label.capitalize()}: {prose(said)}" for label, said in failure_lines(v)]
    if v.retried:
        lines.append(f"Reruns of incomplete output: {v.retried}")
    if notes := build_and_run_notes([v]):
        lines += ["", "Built and run with:", *notes]
    lines += ["", "### Reproduce", block(r.reproduce), "", "### Environment", *environment_lines(r.environment)]
    return "\n".join(lines) + "\n"
