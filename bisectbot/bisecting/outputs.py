"""What the culprit and its parent actually printed, and how to run one seed by hand.

A verdict table says "b 0.63 vs 0.20"; a person checking a bisect wants to see the runs. The
confirmation's runs of the culprit and its parent (fresh seeds) are stored seed by seed, so the
report shows their first runs side by side (run i of each: its seed, the generated tokens and the outcome the statistic
read) and gives the exact command that reruns one of the culprit's seeds on its kept binary:
the argv of the command variant it ran with, seed filled in, shell-quoted for display only
(bisectbot itself never runs a shell), with the working directory and the config's run
environment.

Fresh seeds belong to commits (`RunConfig.commit_seeds`, block 1): the parent and the culprit never run the
same seed, so the rows pair run i with run i, each under its own seed.
"""

from __future__ import annotations

import shlex

from bisectbot.config.seeds import SEED_BLOCK
from bisectbot.judge.runner import Prepared
from bisectbot.judge.sweep import ProgramExecutor, render_argv
from bisectbot.judge.verdict import CommitTester
from bisectbot.records.commits import CommitVerdict, RunRecord
from bisectbot.records.reports import OutputRow, Outputs, Rerun
from bisectbot.statistics.outcome import Find

ROWS = 6  # runs shown per commit


def run_text(rec: RunRecord | None, split: str) -> str:
    """The generated tokens as they read (chars joined, other tokens space-separated), or why
    the run has none ('crash: killed by SIGSEGV')."""
    if rec is None:
        return "(not run)"
    if not rec.ok or rec.tokens is None:
        return f"{rec.status}: {rec.detail}" if rec.detail else rec.status
    return ("" if split == "chars" else " ").join(rec.tokens)


def side_by_side(tester: CommitTester, find: Find, verdicts: list[CommitVerdict], rows: int = ROWS) -> Outputs | None:
    """The first `rows` runs of the confirmation of the culprit and of its parent (bisecting.confirm),
    and the command that reruns the culprit's first one by hand; None when there is no
    confirmation or either commit cannot be run from the state (its build gone and not rebuildable)."""
    last = {v.role: v for v in verdicts if v.arm == "main"}
    culprit, parent = last.get("confirm-culprit"), last.get("confirm-parent")
    if culprit is None or parent is None:
        return None
    runner = tester.runner
    sides: dict[str, tuple[Prepared, list[int], dict[int, RunRecord]]] = {}
    for name, v in (("culprit", culprit), ("parent", parent)):
        prepared = runner.prepare(v.sha)
        if prepared.executor is None:
            return None
        first = v.seeds[0] if v.seeds else 0
        every = runner.seed_block(v.sha, v.block, SEED_BLOCK)
        at = every.index(first) if first in every else 0
        seeds = every[at : at + rows]
        sides[name] = (prepared, seeds, runner.stored_runs(prepared))

    def run_of(name: str, i: int) -> tuple[int, str, str | None]:
        """Seed, output and outcome of the i-th run of one side."""
        prepared, seeds, stored = sides[name]
        rec = stored.get(seeds[i])
        category = tester.category(rec) if rec is not None else None
        text = run_text(rec, tester.cfg.parse_for(prepared.variant or 0).split)
        if tester.numbers is not None:  # the output is the number: no category to name beside it
            return seeds[i], text, None
        return seeds[i], text, tester.reference.names[category] if category is not None else None

    table = []
    for i in range(rows):
        (c_seed, c_text, c_outcome), (p_seed, p_text, p_outcome) = run_of("culprit", i), run_of("parent", i)
        table.append(
            OutputRow(
                run=i + 1,
                culprit_seed=c_seed,
                culprit=c_text,
                culprit_outcome=c_outcome,
                parent_seed=p_seed,
                parent=p_text,
                parent_outcome=p_outcome,
            )
        )
    prepared, seeds, _ = sides["culprit"]
    return Outputs(
        culprit=culprit.sha,
        parent=parent.sha,
        culprit_label=find.what,
        rows=table,
        rerun=rerun(tester, prepared, seeds[0]),
    )


def rerun(tester: CommitTester, prepared: Prepared, seed: int) -> Rerun | None:
    """The exact argv that runs `seed` on the prepared commit's kept binary, where and with
    which environment, and one shell line for people (None for a program not run by argv)."""
    executor = prepared.executor
    if not isinstance(executor, ProgramExecutor):
        return None
    argv = render_argv(executor.argv, {**executor.values, "seed": str(seed)})
    env = dict(tester.cfg.run.env)
    if tester.cfg.build.keep:  # kept libraries beside the binary: found through LD_LIBRARY_PATH
        env["LD_LIBRARY_PATH"] = executor.env.get("LD_LIBRARY_PATH", "")
    cwd = str(executor.workdir)
    words = ["env", *(f"{k}={v}" for k, v in env.items()), *argv] if env else argv
    build_dir = tester.runner.builder.build_dir(tester.cfg.build, prepared.build.variant)
    return Rerun(
        seed=seed,
        argv=argv,
        cwd=cwd,
        env=env,
        binaries=dict(prepared.build.binaries),
        build_dir=str(build_dir),
        command=f"cd {shlex.quote(cwd)} && {shlex.join(words)}",
    )
