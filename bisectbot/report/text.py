"""Plain-text summaries (pure) for the terminal: aligned columns that fit a given width.

The Markdown of `report` is for GitHub and `--markdown FILE`: its table rows run to ~300
characters, which a terminal wraps into noise. Here every line fits `width` columns: prose is
wrapped, table cells are cut with an ellipsis (the full values are in the JSON and Markdown),
and the reproduce command is broken between arguments with shell continuations, so it still
pastes as one command.
"""

from __future__ import annotations

import textwrap
from typing import Sequence

from bisectbot.core.diagnose import LABELS, distance_name, observed_number, observed_pairs
from bisectbot.core.ends import repeatability_text
from bisectbot.records.commits import CommitVerdict
from bisectbot.records.reports import (
    BisectReport,
    BisectStatus,
    CommitReport,
    Environment,
    Outputs,
    ReferenceSummary,
    output_side,
)
from bisectbot.report.markdown import (
    bisect_headline,
    bound_text,
    cost_line,
    count_of,
    distance_rows,
    failure_lines,
    figures_glosses,
    glossary,
    proved_text,
    reference_line,
    role_label,
    time_line,
)
from bisectbot.report.terms import (
    condition_gloss,
    confidence_gloss,
    placed_beside,
    placements_note,
    strategy_gloss,
    verdict_note,
    zone_gloss,
)
from bisectbot.statistics.outcome import Find

MIN_WIDTH = 50  # narrower than this, lines are laid out as for 50 columns (a 40-hex sha and ` \` fit)
INDENT = "    "


def cut(text: str, width: int) -> str:
    """`text` on one line of at most `width` characters, an ellipsis marking a cut (its spacing,
    which may align columns, is kept)."""
    text = text.replace("\r", " ").replace("\n", " ").replace("\t", " ")
    return text if len(text) <= width else text[: max(0, width - 1)].rstrip() + "…"


def wrap(text: str, width: int, indent: str = "") -> list[str]:
    """Prose wrapped to `width` (continuation lines indented by `indent`)."""
    return textwrap.wrap(" ".join(text.split()), width, subsequent_indent=indent, break_on_hyphens=False) or [""]


def shell_lines(command: str, width: int) -> list[str]:
    """A shell command broken between arguments with ` \\` so that it still pastes as one. A word
    too long for a line is split with a bare `\\` at its end (the shell's line continuation
    joins the pieces without a space), its rest starting in column 0."""
    lines: list[str] = []
    cur = ""
    for word in command.split(" "):
        if not cur and not lines:
            cur = word
        elif cur and len(cur) + 1 + len(word) + 2 <= width:
            cur += " " + word
            continue
        else:
            lines.append(cur + " \\")
            cur = INDENT + word
        while len(cur) + 2 > width:  # a word no line holds: split it
            lines.append(cur[: width - 1] + "\\")
            cur = cur[width - 1 :]
    return [*lines, cur]


def short_observed(counts: dict[str, int], reference: ReferenceSummary) -> str:
    """'b .67/.20 d .25/.30 …' (`core.diagnose.observed_pairs`, the largest departures first)."""
    return observed_pairs(counts, reference.categories, reference.category_probs)


GLOSS = "  · "  # how a gloss line starts: a term's meaning, under the line that first uses it


def gloss_lines(glosses: Sequence[str | None], width: int) -> list[str]:
    """Terms glossed where they are first met (`report.terms`), one indented item each."""
    out = []
    for text in (g for g in glosses if g):
        first, *rest = wrap(text, width - len(GLOSS))
        out += [GLOSS + first, *(INDENT + line for line in rest)]
    return out


def row_details(v: CommitVerdict, reference: ReferenceSummary) -> list[str]:
    """What goes under a verdict row: why it was skipped; for a placement, what placed it (beside
    a tested commit, its runs are that commit's: no shares of its own); for the change test's
    rows, which commit it differs from, then its sample beside the reference; else its observed
    shares beside the reference."""
    if not v.counts or v.verdict.value == "skip":
        return [v.reason] if v.reason else []
    note = verdict_note(v)
    if placed_beside(v):  # its runs are the tested commit's, seed for seed
        return [note or v.reason]
    if reference.numeric is not None and v.values:
        pairs = observed_number(v.values, reference.numeric)
    else:
        pairs = short_observed(v.counts, reference)
    if note is not None:
        return [note, f"{'change-test runs' if v.mode == 'change' else 'observed'}/reference: {pairs}"]
    return [f"observed/reference: {pairs}"]


def _ref(sha: str, ref: str) -> str:
    """'d48abffb1f06 (main)', or the sha alone when the ref was (a prefix of) it."""
    return sha[:12] if sha.startswith(ref) else f"{sha[:12]} ({ref})"


def verdict_rows(
    verdicts: Sequence[CommitVerdict], reference: ReferenceSummary, width: int, find: Find = Find.BAD
) -> list[str]:
    """The tested commits as aligned columns: commit, role, verdict, runs, subject; under each
    row, indented, the observed frequencies vs the reference (or why it was skipped)."""
    roles = [role_label(v, find) for v in verdicts]
    role_w = max([4, *(len(r) for r in roles)])
    runs = [f"{v.runs}" + (f" ({v.retried} rerun)" if v.retried else "") for v in verdicts]
    runs_w = max([4, *(len(r) for r in runs)])
    verdict_w = max([7, *(len(v.verdict.value) for v in verdicts)])
    head = f"{'commit':<12}  {'role':<{role_w}}  {'verdict':<{verdict_w}}  {'runs':>{runs_w}}  subject"
    lines = [cut(head, width)]
    for v, role, n in zip(verdicts, roles, runs):
        left = f"{v.sha[:12]:<12}  {role:<{role_w}}  {v.verdict.value.upper():<{verdict_w}}  {n:>{runs_w}}  "
        lines.append(
            left + cut(v.subject, max(8, width - len(left))) if len(left) < width - 8 else cut(left + v.subject, width)
        )
        lines += [INDENT + cut(detail, width - len(INDENT)) for detail in row_details(v, reference)]
    return lines


def environment_text(env: Environment, width: int) -> list[str]:
    return [
        cut(f"compiler: {env.compiler}", width),
        cut(
            f"build: {env.build}"
            if env.build
            else f"cmake: {env.cmake}; arguments: {' '.join(env.cmake_args) or '(none)'}",
            width,
        ),
        cut(f"host: {env.host} ({env.platform}), Python {env.python}, bisectbot {env.bisectbot}", width),
    ]


def glossary_text(lines: list[str], width: int) -> list[str]:
    """The glossary under the verdict rows: what TV, BAD, GOOD and the columns mean."""
    return ["", "how to read it:", *[ln for line in lines for ln in wrap(f"- {line}", width, "  ")]]


def distance_bars(r: BisectReport, width: int) -> list[str]:
    """The distance from the reference along the history, one bar per tested commit (in
    history order), eta and the tolerance marked: where the distribution moved."""
    rows = distance_rows(r)
    if len(rows) < 2:
        return []
    room = max(10, min(width, 100) - 36)
    floor = 0.2 if r.reference.numeric is None else 1.5 * (r.tolerance or 0.0)
    scale = room / max(floor, max(tv for _, _, tv, _ in rows), 1e-12)
    levels = [
        (name, level, sym) for name, level, sym in (("eta", r.eta, "┆"), ("tolerance", r.tolerance, "│")) if level
    ]
    marks = {round(level * scale): sym for _, level, sym in levels}
    legend = ", ".join(f"{name} {level:g} {sym}" for name, level, sym in levels)
    out = ["", f"distance from the reference along the history ({distance_name(r.reference.numeric)}; {legend}):"]
    for pos, sha, tv, verdict in rows:
        n = round(tv * scale)
        bar = "".join("█" if i < n else marks.get(i, " ") for i in range(max(n, max(marks, default=0) + 1)))
        out.append(cut(f"{pos:>5} {sha[:12]} {bar} {tv:.3f} {verdict.value.upper()}", width))
    if (note := placements_note(r)) is not None:
        out += wrap(note, width, INDENT)
    return out


def answer_text(r: BisectReport, width: int) -> list[str]:
    """The headline, the commit named with what it proves (eta, the tolerance and the
    confidence glossed where the Proved line first uses them), or why none was named."""
    what = r.find.what
    lines = [*wrap(bisect_headline(r), width, INDENT), ""]
    if r.status is BisectStatus.FOUND:
        last = "last good" if r.find is Find.BAD else "last still bad"
        label_w = max(len(what), len(last))
        for label, sha in ((what, r.first_bad or ""), (last, r.last_good or "")):
            one = f"{label:<{label_w}}  {sha}"  # the full sha: it is what a person copies
            lines += [one] if len(one) <= width else [f"{label}:", f"  {sha}"]
        if (said := proved_text(r)) is not None:
            proved, not_proved, command = said
            lines += ["", *wrap(proved, width, INDENT), *gloss_lines([zone_gloss(r), confidence_gloss(r)], width)]
            lines += wrap(not_proved, width, INDENT)
            lines += shell_lines(command, width) if command else []
    else:
        lines += wrap(r.message, width)
        if r.candidates:
            lines += wrap("candidates: " + " ".join(c[:12] for c in r.candidates), width, INDENT)
    return lines


def figures_text(r: BisectReport, width: int) -> list[str]:
    """Status, range, builds against their bound, runs and confidence; what it cost and the
    reference: each term glossed where first met."""
    searched = f" ({r.searched} can change the binary)" if r.skipped_equivalent else ""
    lines = wrap(
        f"{r.status.value.upper()} · {r.commits} commits {_ref(r.good, r.good_ref)} .. {_ref(r.bad, r.bad_ref)}"
        f"{searched} · {count_of(r.builds, 'build')} ({bound_text(r)}) · {count_of(r.runs, 'run')} "
        f"({r.retried} reruns of incomplete output) · confidence ≥ {r.confidence:.2%} "
        f"(per-step error ≤ {r.step_alpha:.1e})",
        width,
        INDENT,
    )
    lines += gloss_lines(figures_glosses(r), width)
    if (cost := cost_line(r)) is not None:
        lines += [*wrap(cost, width, INDENT), *gloss_lines([strategy_gloss(r)], width)]
    if (spent := time_line(r)) is not None:
        lines += wrap(spent, width, INDENT)
    lines += wrap(f"reference: {reference_line(r.reference, markdown=False)}", width, INDENT)
    lines += gloss_lines([condition_gloss(r.reference)], width)
    if (noisy := repeatability_text(r.find.working_ref_name, r.repeatability)) is not None:
        lines += wrap(f"program: {noisy}", width, INDENT)
    return lines


def bisect_text(r: BisectReport, width: int = 80) -> str:
    """The terminal summary of a bisect: every line at most `width` (≥ 50) characters."""
    width = max(MIN_WIDTH, width)
    lines = [*answer_text(r, width), "", *figures_text(r, width)]
    lines += ["", *verdict_rows(r.verdicts, r.reference, width, r.find)]
    lines += glossary_text(
        glossary(
            r.eta, r.tolerance, r.verdicts, missed=r.reference.condition_prob is not None, numeric=r.reference.numeric
        ),
        width,
    )
    lines += distance_bars(r, width)
    if r.find is Find.FIXED:
        lines += wrap(f"verdicts: {r.find.verdict_words}", width, INDENT)
    if r.skip_blocks:
        lines += ["", "skipped in blocks (commits that fail the same way):"]
        lines += [ln for b in r.skip_blocks for ln in wrap(f"- {b['text']}", width, "  ")]
    if len(r.change_points) > 1:
        lines += ["", "change points crossed:"]
        for cp in r.change_points:
            mark = "first departure" if cp.get("first") else "later change point"
            lines.append(cut(f"- {cp['commit'][:12]} {mark}: {cp.get('subject') or ''}", width))
    lines += outputs_text(r.outputs, width)
    lines += [
        "",
        "reproduce:",
        *shell_lines(r.reproduce, width),
        "",
        *environment_text(r.environment, width),
        cut(f"config: {r.config.name} (digest {r.config.digest})", width),
    ]
    return "\n".join(lines) + "\n"


def outputs_text(outputs: Outputs | None, width: int) -> list[str]:
    """The culprit's and its parent's first confirmation runs, one line each side, and the command
    that reruns one seed by hand (the JSON's `outputs`; nothing when there are none)."""
    if not outputs or not outputs.get("rows"):
        return []
    lines = [
        "",
        *wrap(
            f"first runs, parent {outputs['parent'][:12]} vs {outputs['culprit_label']} {outputs['culprit'][:12]}:",
            width,
            INDENT,
        ),
    ]
    for row in outputs["rows"]:
        for side in ("parent", "culprit"):
            seed, output, named = output_side(row, side)
            outcome = f" → {LABELS.get(named, named)}" if named else ""  # as in the Markdown
            lines.append(cut(f"  {row['run']:>2} {side:<7} seed {seed}: {output}{outcome}", width))
    rerun = outputs["rerun"]
    if rerun and rerun["command"]:
        lines += [
            *wrap(f"rerun seed {rerun['seed']} of {outputs['culprit'][:12]} by hand:", width, INDENT),
            *shell_lines(rerun["command"], width),
        ]
    return lines


def commit_text(r: CommitReport, width: int = 80) -> str:
    """The terminal summary of `bisectbot test`: every line at most `width` (≥ 50) characters."""
    width = max(MIN_WIDTH, width)
    v = r.detail
    lines = [
        cut(f"bisectbot: {r.commit[:12]} is {v.verdict.value.upper()} after {v.runs} runs — {v.subject}", width),
        "",
    ]
    lines += wrap(f"why: {v.reason}", width, INDENT)
    lines += wrap(f"reference: {reference_line(r.reference, markdown=False)}", width, INDENT)
    lines += ["", *verdict_rows([v, *r.arms.values()], r.reference, width)]
    lines += glossary_text(
        glossary(
            r.eta,
            r.tolerance,
            [v, *r.arms.values()],
            missed=r.reference.condition_prob is not None,
            numeric=r.reference.numeric,
        ),
        width,
    )
    for label, said in failure_lines(v):
        lines += wrap(f"{label}: {said}", width, INDENT)
    lines += ["", "reproduce:", *shell_lines(r.reproduce, width), "", *environment_text(r.environment, width)]
    return "\n".join(lines) + "\n"


def state_line(
    root: object, runs: int, builds: int, runs_here: int = 0, builds_here: int = 0, commits: int | None = None
) -> str:
    """'state: DIR (new)', or what it holds (`runs`, `builds`) and how much of that is at the
    `commits` commits the job is about, which it can replay (None: not known yet, e.g. a check
    before it resolves its ref)."""
    if not runs and not builds:
        return f"state: {root} (new)"
    held = f"{runs:,} runs and {builds:,} builds"
    if commits is None:
        return f"state: {root} (holds {held})"
    at = f"at {'this commit' if commits == 1 else f'these {commits:,} commits'}"
    if not runs_here and not builds_here:
        return f"state: {root} (holds {held}, none {at})"
    return f"state: {root} (resuming: {runs_here:,} runs and {builds_here:,} builds stored {at}; {held} in all)"


def replayed_line(runs: int, runs_executed: int, builds: int, builds_replayed: int) -> str | None:
    """'from state: 361 of 1,571 runs and 6 of 9 builds (replayed, not run again)', or None when
    everything was run now."""
    runs_replayed = max(0, runs - runs_executed)
    if not runs_replayed and not builds_replayed:
        return None
    return (
        f"from state: {runs_replayed:,} of {runs:,} runs and {builds_replayed:,} of {builds:,} builds "
        "(replayed, not run again)"
    )
