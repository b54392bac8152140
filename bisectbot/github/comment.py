"""Result comments for GitHub issues (pure rendering of typed reports).

Why a separate renderer from `report.bisect_markdown`: an issue comment is read by people who did
not run the tool, so it leads with the culprit as a link (commit and PR), keeps the verdict table
always visible (it is the fallback when the chart does not render), puts the chart in a
collapsed `<details>`, and ends with everything needed to reproduce the result elsewhere.

A comment is built as a `Document` of blocks (Markdown text, fenced `Code`, `Collapsed`
`<details>`), not as one string: GitHub refuses bodies over 65,536 characters, and
`Document.fit` cuts the collapsed parts first, then the end, always at line ends and with the
fences and `<details>` tags written around what is left, so a cut never breaks the Markdown.
The job marker (`<!-- bisectbot:job=... -->`) is added by the client, not here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Mapping, Sequence, Union

from bisectbot import __version__
from bisectbot.inert import block as fenced
from bisectbot.inert import code, one_line, prose, visible
from bisectbot.records.commits import CommitVerdict
from bisectbot.records.jobargs import BisectArgs, JobArgs
from bisectbot.records.reports import BisectReport, BisectStatus, CommitReport, ReferenceSummary
from bisectbot.report.markdown import (
    assumption_lines,
    bisect_headline,
    bound_text,
    build_and_run_notes,
    change_point_lines,
    count_of,
    distance_chart,
    glossary,
    observed_cell,
    proved_text,
    reference_line,
    skip_block_lines,
    verdict_table,
)
from bisectbot.report.terms import bound_gloss, condition_gloss, confidence_gloss, zone_gloss
from bisectbot.statistics.outcome import Find, Verdict
from bisectbot.statistics.stats import MISSED

BODY_LIMIT = 65_536  # GitHub rejects longer issue comment bodies with 422
MARKER_ROOM = 200  # what the client's hidden marker line may take of it
PR_RE = re.compile(r"\(#(\d+)\)\s*$")  # "(#123)" at the end of a commit subject


# -- documents -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Code:
    """A fenced code block; the fence is written when rendering, around whatever text is left."""

    text: str
    language: str = ""

    def render(self) -> str:
        return fenced(self.text, self.language)  # a fence no line of the text can close


Unit = Union[str, Code]  # a str is Markdown that opens no fence


@dataclass(frozen=True)
class Collapsed:
    """A `<details>` block: its summary always shows; its units are cut first when too long."""

    summary: str
    units: tuple[Unit, ...]

    def render(self) -> str:
        inner = "\n\n".join(_render(u) for u in self.units)
        return f"<details><summary>{self.summary}</summary>\n\n{inner}\n\n</details>"


Block = Union[Unit, Collapsed]


def _render(block: Block) -> str:
    return block if isinstance(block, str) else block.render()


def _cut_note(removed: int) -> str:
    return f"*… {removed:,} characters cut to fit GitHub's 65,536-character comment limit …*"


def _shorten(unit: Unit, by: int) -> Unit:
    """The unit at least `by` characters shorter (cut at a line end, with a note), or just the
    note when that is all there is room for."""
    text = unit if isinstance(unit, str) else unit.text
    keep = max(0, len(text) - by - len(_cut_note(len(text))) - 1)
    line_end = text.rfind("\n", 0, keep)
    if line_end > keep // 2:
        keep = line_end
    removed = len(text) - keep
    cut = (text[:keep] + "\n" if keep else "") + _cut_note(removed)
    return cut if isinstance(unit, str) else Code(cut, unit.language)


@dataclass(frozen=True)
class Document:
    blocks: tuple[Block, ...]

    def text(self) -> str:
        return "\n\n".join(_render(b) for b in self.blocks) + "\n"

    def fit(self, limit: int = BODY_LIMIT - MARKER_ROOM) -> str:
        """The text, at most `limit` characters: the largest collapsed units are cut first
        (ties: the last), then top-level units from the end; the head stays as long as it can."""
        doc = self
        while len(text := doc.text()) > limit:
            excess = len(text) - limit
            place = doc._largest_collapsed_unit()
            if place is not None:
                doc = doc._replace_unit(place, excess)
                continue
            last = doc._last_cuttable()
            if last is None:  # nothing left to cut: drop trailing blocks
                if len(doc.blocks) == 1:
                    return text[: limit - 1] + "\n"
                doc = Document(doc.blocks[:-1])
                continue
            unit = doc.blocks[last]
            assert not isinstance(unit, Collapsed)
            doc = Document(doc.blocks[:last] + (_shorten(unit, excess),) + doc.blocks[last + 1 :])
        return text

    def _largest_collapsed_unit(self) -> tuple[int, int] | None:
        """(block, unit) of the longest collapsed unit that can still shrink."""
        best: tuple[int, int, int] | None = None
        for b, block in enumerate(self.blocks):
            if not isinstance(block, Collapsed):
                continue
            for u, unit in enumerate(block.units):
                size = len(_render(unit))
                if _can_shrink(unit) and (best is None or size >= best[0]):
                    best = (size, b, u)
        return None if best is None else (best[1], best[2])

    def _replace_unit(self, place: tuple[int, int], excess: int) -> "Document":
        b, u = place
        block = self.blocks[b]
        assert isinstance(block, Collapsed)
        units = block.units[:u] + (_shorten(block.units[u], excess),) + block.units[u + 1 :]
        return Document(self.blocks[:b] + (replace(block, units=units),) + self.blocks[b + 1 :])

    def _last_cuttable(self) -> int | None:
        for b in range(len(self.blocks) - 1, -1, -1):
            block = self.blocks[b]
            if not isinstance(block, Collapsed) and _can_shrink(block):
                return b
        return None


def _can_shrink(unit: Unit) -> bool:
    text = unit if isinstance(unit, str) else unit.text
    return len(text) > len(_cut_note(len(text))) + 1


# -- pieces ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class CommentContext:
    """What a comment needs besides the report: where links point and how to reproduce."""

    repo: str  # owner/name
    html_url: str = "https://github.com"
    fixtures: dict[str, str] = field(default_factory=dict)  # relative path -> sha256
    first_seed: int = 1
    max_runs: int = 0
    version: str = __version__

    def commit_url(self, sha: str) -> str:
        return f"{self.html_url.rstrip('/')}/{self.repo}/commit/{sha}"

    def pr_url(self, number: str) -> str:
        return f"{self.html_url.rstrip('/')}/{self.repo}/pull/{number}"

    @property
    def link(self) -> str:
        """The `verdict_table` link template."""
        return self.commit_url("{sha}")


def neutral(text: str) -> str:
    """A whole body's last guard (the renderers made each field inert already): every control or
    invisible character but line ends and tabs shown as its escape (``\\u202e``): Trojan Source,
    CVE-2021-42574, and terminal escapes, whichever renderer let one through."""
    return visible(text, keep="\n\t")


def commit_ref(sha: str, subject: str | None, ctx: CommentContext) -> str:
    """'[`abc123def456`](link) subject ([#123](pr link))': the subject is the commit author's
    text (`inert.prose`); only a trailing "(#123)", GitHub's own squash-merge suffix, is linked,
    to this repository's pull request."""
    out = f"[`{sha[:12]}`]({ctx.commit_url(sha)})"
    if subject:
        clean = one_line(subject)
        m = PR_RE.search(clean)
        if m:
            clean = clean[: m.start()].rstrip()
            out += f" {prose(clean, table=True)} ([#{m.group(1)}]({ctx.pr_url(m.group(1))}))"
        else:
            out += f" {prose(clean, table=True)}"
    return out


def _frequencies(counts: Mapping[str, int], names: Sequence[str]) -> list[float]:
    met = sum(counts.get(n, 0) for n in names)
    return [round(counts.get(n, 0) / met, 4) if met else 0.0 for n in names]


def distribution_chart(series: Sequence[tuple[str, Mapping[str, int]]], reference: ReferenceSummary) -> Collapsed:
    """A mermaid xychart-beta: reference as bars, each observed commit as a line, collapsed.

    xychart-beta has no legend, so the summary line names the series in order.
    """
    names = [n for n in reference.categories if n != MISSED]
    probs = reference.prob_of
    p_met = sum(probs[n] for n in names) or 1.0
    ref = [round(probs[n] / p_met, 4) for n in names]
    labels = ", ".join('"' + one_line(n, 40).replace('"', "'") + '"' for n in names)
    lines = [
        "xychart-beta",
        '    title "observed vs reference"',
        f"    x-axis [{labels}]",
        '    y-axis "frequency" 0 --> 1',
        f"    bar [{', '.join(map(str, ref))}]",
    ]
    legend = ["bars: reference"]
    for label, counts in series:
        lines.append(f"    line [{', '.join(map(str, _frequencies(counts, names)))}]")
        legend.append(f"line {len(legend)}: {label}")
    return Collapsed(
        "Chart: observed vs reference distribution (" + "; ".join(legend) + ")", (Code("\n".join(lines), "mermaid"),)
    )


def reproduction_footer(report: Union[BisectReport, CommitReport], ctx: CommentContext, range_text: str) -> Collapsed:
    env, cfg = report.environment, report.config
    verdicts = report.verdicts if isinstance(report, BisectReport) else [report.detail]
    seeds = []
    for v in verdicts:
        span = f"seeds {v.seeds[0]}–{v.seeds[1]}" if v.seeds else "no seeds"
        seeds.append(f"`{v.sha[:12]}` {v.role}: {span}, {v.runs} runs")
    fixtures = ", ".join(f"`{name}` sha256 `{digest}`" for name, digest in ctx.fixtures.items()) or "(none)"
    facts = "\n".join(
        [
            f"- repository: {ctx.repo}; range: {range_text}",
            f"- config: {cfg.name} (digest `{cfg.digest}`)",
            f"- build: {code(env.build)}"
            if env.build
            else f"- cmake arguments: {code(' '.join(env.cmake_args) or '(none)')}",
            f"- compiler: {env.compiler}" if env.build else f"- compiler: {env.compiler}; {env.cmake}",
            f"- fixtures: {fixtures}",
            f"- seeds: each commit's own (first_seed {ctx.first_seed} + an offset from its sha), at most "
            f"{ctx.max_runs} runs per commit and test; " + ("; ".join(seeds) or "none"),
            f"- bisectbot {ctx.version}",
        ]
    )
    return Collapsed("Reproduce", (facts, Code(report.reproduce)))


# -- whole comments ------------------------------------------------------------------------------
def render_bisect(report: BisectReport, ctx: CommentContext) -> Document:
    """The result comment of a bisect job."""
    what = report.find.what
    if report.status is BisectStatus.FOUND:
        assert report.first_bad is not None
        head = f"### bisectbot: {what} commit is {commit_ref(report.first_bad, report.first_bad_subject, ctx)}"
        parent = report.last_good or ""
        body: tuple[Unit, ...] = (
            f"The commit before it, {commit_ref(parent, report.subject_of(parent), ctx)}, "
            f"tests {report.find.parent_verdict.value.upper()} against the reference, and on fresh seeds the two "
            f"commits' runs differ (a change test).",
        )
        if (said := proved_text(report, lambda sha: f"`{sha}`")) is not None:
            body += (said[1],) + ((Code(said[2]),) if said[2] else ())
    elif report.status is BisectStatus.UNCONFIRMED:
        head = f"### bisectbot: {what} commit not confirmed"
        body = (prose(report.message),)
    elif report.status is BisectStatus.CLEAN:
        head = f"### {bisect_headline(report)}"
        body = (prose(report.message),)
    else:
        head = f"### bisectbot: {what} commit is one of {len(report.candidates)}"
        body = (
            prose(report.message),
            "Candidates: " + ", ".join(commit_ref(c, report.subject_of(c), ctx) for c in report.candidates),
        )
    range_text = (
        f"`{report.good[:12]}` ({code(report.good_ref)}) .. "
        f"`{report.bad[:12]}` ({code(report.bad_ref)}), {report.commits} commits"
    )
    series = _chart_series(report) if report.reference.numeric is None else []  # a number has no distribution chart
    chart: tuple[Block, ...] = (distribution_chart(series, report.reference),) if series else ()
    if (along := distance_chart(report)) is not None:
        chart += (Collapsed(along[0], (Code(along[1], "mermaid"),)),)
    return Document(
        (
            head,
            *body,
            f"**{report.status.value}** · {range_text} · {count_of(report.builds, 'build')} "
            f"({bound_text(report)}) · {count_of(report.runs, 'run')} · "
            f"confidence ≥ {report.confidence:.2%}",
            f"Reference: {reference_line(report.reference)}",
            verdict_table(report.verdicts, report.reference, ctx.link, report.find),
            how_to_read(report),
            *_era_notes(report),
            *chart,
            *(
                (Collapsed("What the confidence rests on", ("\n".join(assumption_lines(report)),)),)
                if report.assumptions
                else ()
            ),
            reproduction_footer(report, ctx, range_text),
        )
    )


def how_to_read(report: BisectReport) -> Collapsed:
    """The terms the comment uses, in the words of the summaries (`report.terms`): eta and the
    tolerance, the confidence, the builds bound, P(condition), then the table's words."""
    said = [
        zone_gloss(report),
        confidence_gloss(report),
        bound_gloss(report),
        condition_gloss(report.reference, code),
        *glossary(
            report.eta,
            report.tolerance,
            report.verdicts,
            missed=report.reference.condition_prob is not None,
            numeric=report.reference.numeric,
        ),
    ]
    return Collapsed("How to read this", ("\n".join(f"- {line}" for line in said if line),))


def _era_notes(report: BisectReport) -> tuple[str, ...]:
    """Which variants commits needed, and blocks of alike skips: one short block each, if any."""
    blocks = []
    if notes := build_and_run_notes(report.verdicts):
        blocks.append("How commits were built and run (variants for their era):\n" + "\n".join(notes))
    if report.skip_blocks:
        blocks.append(
            "Skipped in blocks (commits that fail the same way):\n" + "\n".join(skip_block_lines(report.skip_blocks))
        )
    if changes := change_point_lines(report):
        blocks.append("Change points crossed (the distribution changed more than once):\n" + "\n".join(changes))
    return tuple(blocks)


def _chart_series(report: BisectReport) -> list[tuple[str, Mapping[str, int]]]:
    """Two observed distributions worth charting: the best-observed commit on each side.

    Each commit's counts are summed over its distinct runs (its search's and its fresh ones; the
    verdicts that share runs counted once); on the bad side the culprit or the bad endpoint, on
    the good side its parent or the good endpoint, whichever has more runs meeting the condition
    (a line over 3 observations says little).
    """
    names = [n for n in report.reference.categories if n != MISSED]
    longest: dict[tuple[str, str, int, int | None], CommitVerdict] = {}
    for v in report.verdicts:
        if v.arm != "main":
            continue
        key = (v.sha, v.arm, v.block, v.seeds[0] if v.seeds else None)
        if key not in longest or v.runs > longest[key].runs:
            longest[key] = v
    totals: dict[str, dict[str, int]] = {}
    for (sha, *_), v in longest.items():
        acc = totals.setdefault(sha, {})
        for k, c in v.counts.items():
            acc[k] = acc.get(k, 0) + c
    met = {sha: sum(c.get(n, 0) for n in names) for sha, c in totals.items()}
    broken_end, working_end = (report.bad, report.good) if report.find is Find.BAD else (report.good, report.bad)
    sides = [("bad", [report.first_bad, broken_end]), ("good", [report.last_good, working_end])]
    out: list[tuple[str, Mapping[str, int]]] = []
    for side, shas in sides:
        present = [s for s in shas if s and met.get(s)]
        if present:
            best = max(present, key=lambda s: met[s])
            out.append((f"{side} side `{best[:12]}` (n={met[best]})", totals[best]))
    return out


def render_failed(args: JobArgs, message: str, ctx: CommentContext) -> Document:
    """A job that ended without an answer (an endpoint did not test as given, git failed, …)."""
    what = ""
    if isinstance(args, BisectArgs):
        what = f" {code(args.good, limit=40)}..{code(args.bad, limit=40)}"
    return Document(
        (
            f"### bisectbot: {args.kind}{what} stopped without an answer",
            prose(message),
            f"<sub>bisectbot {ctx.version}</sub>",
        )
    )


def render_progress(title: str, phase: str, lines: Sequence[str], ctx: CommentContext) -> Document:
    """The job comment while it runs: what is happening now, the last step lines collapsed."""
    tail = "\n".join(one_line(line) for line in lines[-25:])
    log: tuple[Block, ...] = (Collapsed("Progress", (Code(tail),)),) if tail else ()
    return Document(
        (
            f"### bisectbot: {title}",
            f"⏳ {phase}",
            *log,
            f"<sub>bisectbot {ctx.version} · this comment is updated in place</sub>",
        )
    )


def bisect_title(good: str, bad: str, good_ref: str, bad_ref: str) -> str:
    """A bisect's job comment names its ends, as resolved and as the user gave them."""
    return f"bisecting `{good[:12]}`..`{bad[:12]}` ({good_ref}..{bad_ref})"


def job_title(args: JobArgs) -> str:
    """What a job's comment is headed with, from the job's arguments."""
    if isinstance(args, BisectArgs):
        return bisect_title(args.good, args.bad, args.good_ref, args.bad_ref)
    return f"testing `{args.commit[:12]}` ({args.ref})"


def render_cancelled(title: str, who: str | None, ctx: CommentContext) -> Document:
    by = f" by @{who}" if who and re.fullmatch(r"[A-Za-z0-9-]{1,39}", who) else ""
    return Document(
        (
            f"### bisectbot: {title}",
            f"⏹️ cancelled{by}. Finished builds and runs are kept: the same command resumes where it stopped.",
            f"<sub>bisectbot {ctx.version}</sub>",
        )
    )


def _test_summary(result: CommitReport, ctx: CommentContext) -> tuple[Block, ...]:
    v = result.detail
    return (
        f"Reference: {reference_line(result.reference)}",
        verdict_table([v], result.reference, ctx.link),
        f"Why: {prose(v.reason)}",
        reproduction_footer(result, ctx, f"`{result.commit[:12]}` ({code(result.ref)})"),
    )


def render_status(result: CommitReport, ctx: CommentContext, *, date: str, alarm: bool = False) -> Document:
    """The one status comment per issue that scheduled checks keep updating."""
    link = commit_ref(result.commit, None, ctx)
    v = result.detail
    if v.verdict is Verdict.GOOD:
        head = f"### bisectbot: ✅ still fixed at {link}, {date}"
    elif v.verdict is Verdict.BAD:
        head = f"### bisectbot: ❌ broken again at {link}, {date}" + (" — see the alarm below" if alarm else "")
    else:
        head = f"### bisectbot: ❔ check at {link} is {v.verdict.value.upper()}, {date}"
    counts, details, last = _test_parts(result, ctx)
    return Document((head, f"{code(result.ref)} after {v.runs} runs: {counts}", details, last))


def _test_parts(result: CommitReport, ctx: CommentContext) -> tuple[str, Collapsed, Block]:
    """What a check's comment shows under its head: the counts against the reference, the
    details collapsed, and the summary's last (collapsed) unit."""
    v = result.detail
    counts = observed_cell(v, result.reference)
    summary = _test_summary(result, ctx)
    return counts, Collapsed("Details", tuple(u for u in summary if not isinstance(u, Collapsed))), summary[-1]


def render_pull_check(result: CommitReport, ctx: CommentContext, *, number: int, date: str, sandbox: str) -> Document:
    """A pull request's head, checked in the sandbox: does it restore the reference distribution?"""
    v = result.detail
    tested = f"pull/{int(number)}/head = {commit_ref(result.commit, None, ctx)}"
    pr = f"[#{int(number)}]({ctx.pr_url(str(int(number)))})"
    if v.verdict is Verdict.GOOD:
        head = f"### bisectbot: ✅ {tested} restores the reference distribution"
    elif v.verdict is Verdict.BAD:
        head = f"### bisectbot: ❌ {tested} does not restore the reference distribution"
    else:
        head = f"### bisectbot: ❔ {tested} is {v.verdict.value.upper()}"
    counts, details, last = _test_parts(result, ctx)
    return Document(
        (
            head,
            f"The head of pull request {pr} after {v.runs} runs, {date}: {counts}",
            f"Built and run as untrusted code, in the sandbox: {sandbox}. Only this commit was "
            "tested: it is not recorded as known good, nothing is bisected, and cross-check "
            "arms are not run.",
            details,
            last,
        )
    )


def render_alarm(result: CommitReport, ctx: CommentContext, *, last_good: str | None, date: str) -> Document:
    """The fix no longer holds: say so loudly, and what happens next."""
    sha = result.commit
    head = f"### bisectbot: ⚠️ the fix no longer holds at {commit_ref(sha, result.detail.subject, ctx)}"
    if last_good:
        nxt = (
            f"Last commit known good: {commit_ref(last_good, None, ctx)}. Bisecting between them; "
            "the culprit is posted in a separate comment."
        )
    else:
        nxt = (
            "No commit is recorded as known good for this config, so there is nothing to bisect "
            "from: run `/bisect good=<ref> bad=" + sha[:12] + "`."
        )
    return Document((head, f"Checked {code(result.ref)} on {date}.", nxt, *_test_summary(result, ctx)))
