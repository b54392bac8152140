"""Stage 6 of a bisect: the facts its report needs from the bisect's own side, then the report.

The report itself is assembled by a pure function (core.assembly.assemble) from the ledger and
the search's `Departure`; what it cannot know from them is gathered here first, as `Facts`: the
named commits' subjects, the dates that say where a block of skipped commits lies, the reference
as the tests saw it (a control sample grows while tests ask), and the runs of the culprit and its
parent side by side (bisecting.outputs). Nothing here decides anything.
"""

from __future__ import annotations

from bisectbot.bisecting.bisection import Bisection
from bisectbot.bisecting.outputs import side_by_side
from bisectbot.core.assembly import Facts, assemble, candidates, culprit_of, reproduce_line, scan_line, with_time
from bisectbot.core.plan import Departure, ReportContext
from bisectbot.core.search import SkipBlock
from bisectbot.records.reports import BisectReport, BisectStatus, Repeatability, SkipBlockRow

__all__ = ["block_text", "candidates", "report", "reproduce_line", "scan_line", "skip_block_summaries", "with_time"]


def block_text(b: Bisection, block: SkipBlock) -> str:
    """'12 commits 2024-06-01 … 2024-10-21 (3 tried): runs crash: …'."""
    first, last = (b.tester.runner.workspace.info(b.plan.line[p]).date[:10] for p in (block.first, block.last))
    span = f"{block.commits} commits {first} … {last}" if block.commits > 1 else f"1 commit {first}"
    return f"{span} ({len(block.tested)} tried): {block.signature}"


def skip_block_summaries(b: Bisection, blocks: tuple[SkipBlock, ...]) -> list[SkipBlockRow]:
    """The blocks of commits that could not be tested, as the report lists them."""
    line = b.plan.line
    return [
        SkipBlockRow(
            first=line[blk.first],
            last=line[blk.last],
            commits=blk.commits,
            tried=len(blk.tested),
            signature=blk.signature,
            text=block_text(b, blk),
        )
        for blk in blocks
    ]


def facts(b: Bisection, dep: Departure, context: ReportContext) -> Facts:
    """What core.assembly needs from this bisect's tester and clone (see the module)."""
    plan, tester = b.plan, b.tester
    culprit = culprit_of(plan, dep)
    named = ([culprit] if culprit else []) + [plan.line[cp.position] for cp in dep.crossed]
    return Facts(
        eta=tester.cfg.test.indifference,
        tolerance=tester.cfg.test.tolerance,
        reference=tester.reference,
        summary=tester.grown_reference(context.reference),
        subjects={sha: tester.subject(sha) for sha in named},
        skip_blocks=skip_block_summaries(b, dep.found.result.blocks),
        control_runs=tester.control_runs(b.ledger.verdicts),
        control_executed=tester.runner.control_executed,
        # the culprit's and its parent's first runs (here, not on a cluster: it would build locally)
        outputs=side_by_side(tester, plan.find, b.ledger.verdicts)
        if dep.status is BisectStatus.FOUND and b.width == 1
        else None,
        width=b.width,
        repeatability=None
        if b.reran is None
        else Repeatability(
            commit=plan.line[plan.working_pos],
            seeds=b.reran.shared,
            differ=b.reran.differ,
            deterministic=b.deterministic,
            runs_executed=b.reran_executed,
        ),
    )


def report(b: Bisection, dep: Departure, context: ReportContext) -> BisectReport:
    """The bisect's report: the answer, what it rests on and its confidence, what it cost."""
    return assemble(b.ledger, dep, context, facts(b, dep, context))
