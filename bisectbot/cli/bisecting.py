"""The commands that judge commits of a project: `bisect` (GOOD..BAD to the first bad or first
fixed commit), `test` (one commit's verdict, also as the script of `git bisect run`) and
`reference` (the distribution they are judged against). Each is one call into jobs/lifecycle.py."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Callable

import click

from bisectbot.bisecting.budget import BudgetLimits
from bisectbot.cli.guard import BISECT_EXIT, TEST_EXIT, guard
from bisectbot.cli.options import (
    arms_option,
    color_option,
    html_option,
    json_option,
    markdown_option,
    quiet_option,
    reference_option,
    repo_option,
    state_option,
)
from bisectbot.cli.terminal import Terminal, summary_width
from bisectbot.cli.wiring import (
    announce_state,
    dask_client,
    load,
    one_stdout,
    preflight,
    replayed_builds,
    state_of,
    warn_uncommitted,
    write_bisect_outputs,
    write_json,
    write_outputs,
)
from bisectbot.core.estimate import parse_duration
from bisectbot.core.plan import Narrowing
from bisectbot.errors import BisectbotError
from bisectbot.events import Events
from bisectbot.jobs import lifecycle as jobs
from bisectbot.records.reports import BisectStatus
from bisectbot.report.text import replayed_line
from bisectbot.statistics.outcome import Find, Verdict


def _duration(value: str | None) -> tuple[float, str] | None:
    """--deadline: (seconds, as written), or a click error naming the value."""
    if value is None:
        return None
    try:
        return parse_duration(value), value
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--deadline") from None


@click.command()
@click.argument("config", type=click.Path())
@click.option("--good", required=True, help="A commit (ref) where the property holds.")
@click.option("--bad", required=True, help="A later commit (ref) where it does not.")
@click.option(
    "--find",
    type=click.Choice(["bad", "fixed"]),
    default="bad",
    show_default=True,
    help="Find the first bad commit, or (fixed) the first commit where a bug went away: "
    "then --good is the old broken ref and --bad the new working one.",
)
@click.option(
    "--strategy",
    type=click.Choice(["auto", "reference", "plain", "sticky"]),
    default="auto",
    show_default=True,
    help="reference: binary search, each step a test against the reference (GOOD = within "
    "tolerance of it). plain: quick steps, BAD against the reference or GOOD-SIDE once a "
    "commit is unlike the bad end (cheap when builds are cheap; a milder form of the bug "
    "makes the search walk back). sticky: Bayesian bisection that stays on a commit until "
    "its side is clear. auto: reference or plain, whichever the build and run times this "
    "state directory measured make faster.",
)
@click.option(
    "--paths",
    multiple=True,
    metavar="PATH",
    help="Search only commits touching these paths (a file, a directory or a glob; "
    "repeatable), as `git bisect start -- <paths>`.",
)
@click.option(
    "--also",
    multiple=True,
    metavar="PATH",
    help="Paths that always count as inputs of the binary (e.g. data the program reads from the tree); repeatable.",
)
@click.option(
    "--all-commits", is_flag=True, help="Search every commit, also those whose changes cannot reach the binary."
)
@click.option(
    "--skip",
    "skip",
    multiple=True,
    metavar="REF",
    help="Never build or test this commit (or A..B: the commits after A up to B), as "
    "`git bisect skip`; a boundary next to it stays a range. Repeatable.",
)
@click.option(
    "--exclude",
    "exclude",
    multiple=True,
    metavar="REF",
    help="The same as --skip (mozregression's name for it). Repeatable.",
)
@click.option(
    "--scan",
    is_flag=True,
    help="Look for a departure hidden between --good and --bad when both may test GOOD (a defect that came "
    "and went, which halving can step over): every commit between that can change the binary is tested "
    "against the reference, the middle first, until one departs; the bisect then goes on below it (status "
    "clean, exit 1, when none does). A found commit's report gives the --scan command for the commits before "
    "it that were not tested.",
)
@click.option(
    "--workers",
    type=click.IntRange(min=1),
    help="Build and test this many commits at once on a local Dask cluster (worker processes).",
)
@click.option(
    "--scheduler", metavar="ADDRESS", help="Build and test on the workers of this Dask scheduler (tcp://host:8786)."
)
@click.option(
    "--worker-state",
    type=click.Path(file_okay=False),
    help="Where workers keep their clones and builds (default: <state>/workers; with "
    "--scheduler, a path every worker can write).",
)
@click.option(
    "--max-builds",
    type=click.IntRange(min=0),
    metavar="N",
    help="Build at most N commits in this run, then stop between steps with the range so far "
    "(status stopped, exit 3); the same command again resumes and may build N more.",
)
@click.option(
    "--deadline",
    metavar="DURATION",
    callback=lambda _c, _p, v: _duration(v),
    help="Stop between steps once this much time has passed (90m, 2h, 1h30m, 45s or seconds), "
    "with the range so far (status stopped, exit 3); the same command again resumes.",
)
@reference_option
@repo_option
@json_option
@state_option
@markdown_option
@html_option
@arms_option
@quiet_option
@color_option
def bisect(
    config: str,
    good: str,
    bad: str,
    find: str,
    strategy: str,
    paths: tuple[str, ...],
    also: tuple[str, ...],
    all_commits: bool,
    skip: tuple[str, ...],
    exclude: tuple[str, ...],
    scan: bool,
    workers: int | None,
    scheduler: str | None,
    worker_state: str | None,
    max_builds: int | None,
    deadline: tuple[float, str] | None,
    reference_how: str,
    repo: str | None,
    json_path: str | None,
    state_dir: str | None,
    md_path: str | None,
    html_path: str | None,
    arms: bool,
    quiet: bool,
    color: str,
) -> None:
    """Bisect the first-parent line GOOD..BAD for the first bad (or first fixed) commit.

    Both endpoints are tested first; the culprit is confirmed against its parent on fresh seeds.
    When both test GOOD and print the same outcomes seed for seed, nothing changed between them:
    the range is clean (exit 1). Killed or interrupted? Run the same command again: it resumes
    from the state database.
    """

    started = time.monotonic()  # --deadline counts from here

    def body() -> int:
        cfg = load(config, repo, arms).with_reference(reference_how)
        warn_uncommitted(cfg)
        preflight(cfg)
        if workers and scheduler:
            raise click.UsageError("give --workers (a local cluster) or --scheduler (an existing one), not both")
        if scan and find == "fixed":
            raise click.UsageError("--scan looks for a departure between two GOOD commits: give it with --find bad")
        one_stdout(json_path, md_path)
        terminal = Terminal(quiet=quiet, color=color)
        with state_of(cfg, state_dir) as state, dask_client(workers, scheduler) as client:
            session = jobs.Session(
                cfg,
                state,
                Events(terminal),
                config_path=config,
                cluster=client,
                worker_root=Path(worker_state).resolve() if worker_state else None,
            )
            how = Narrowing(enabled=not all_commits, paths=tuple(paths), also=tuple(also))
            plan = jobs.plan_bisect(
                session,
                good,
                bad,
                find=Find(find),
                strategy=strategy,
                narrowing=how,
                skip=skip,
                exclude=exclude,
                scan=scan,
            )
            stored = announce_state(terminal, session, plan.line)
            seconds, written = deadline or (None, "")
            limits = BudgetLimits(max_builds, seconds, written, since=started)
            report = jobs.run_bisect(session, plan, limits=limits)
            tested = {v.sha for v in report.verdicts if v.arm == "main"}
            executed = sum(v.executed for v in report.verdicts)  # of report.runs (not the control's, nor reruns)
            if line := replayed_line(report.runs, executed, report.builds, replayed_builds(session, stored, tested)):
                terminal.line(line)
        write_bisect_outputs(terminal, report, json_path, md_path, color, html_path)
        if report.status is BisectStatus.STOPPED:
            click.echo(f"bisectbot: {report.message}", err=True)
        return BISECT_EXIT[report.status]

    guard(body)


# `git bisect run` reads 0 as good, 125 as skip, 1..127 as bad and anything else as "stop".
GIT_BISECT_EXIT = {
    Verdict.GOOD: 0,
    Verdict.BAD: 1,
    Verdict.SKIP: 125,
    Verdict.INCONCLUSIVE: 125,
    Verdict.NOT_APPLICABLE: 125,
}
GIT_BISECT_ABORT = 128  # bad input or an internal error: git bisect run stops instead of marking BAD


class GitBisectCommand(click.Command):
    """A command whose argument errors exit 128 under --git-bisect: click's usual 2 would read
    as BAD to `git bisect run`, which must stop instead."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        given = list(args)  # click's parser consumes the list it is handed
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            if "--git-bisect" in given:
                exc.exit_code = GIT_BISECT_ABORT  # type: ignore[misc]  # a ClassVar in click 8.5
            raise


def _git_bisect_guard(fn: Callable[[], int]) -> None:
    """`guard` with the exit codes of a `git bisect run` script: the body's 0 / 1 / 125 pass,
    every error (bad input, a traceback) becomes 128 so git aborts, an interrupt stays 130."""
    import traceback

    def body() -> int:
        try:
            return fn()
        except (BisectbotError, OSError, KeyboardInterrupt):
            raise
        except click.ClickException as exc:
            exc.exit_code = GIT_BISECT_ABORT  # type: ignore[misc]  # a ClassVar in click 8.5
            raise
        except Exception:  # noqa: BLE001  a bug must stop git bisect, not mark the commit BAD
            traceback.print_exc()
            return GIT_BISECT_ABORT

    try:
        guard(body)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else GIT_BISECT_ABORT
        sys.exit(code if code in (0, 1, 125, 130) or code >= GIT_BISECT_ABORT else GIT_BISECT_ABORT)


@click.command(cls=GitBisectCommand)
@click.argument("config", type=click.Path())
@click.option("--commit", "ref", help="The commit (ref) to test (required; HEAD with --git-bisect).")
@click.option(
    "--reference",
    "reference_how",
    metavar="config|REF",
    default="config",
    show_default=True,
    help="What the commit is judged against: the config's reference, or REF (like that commit: a "
    "control sample measured there; the config's `reference: good` needs one).",
)
@repo_option
@json_option
@markdown_option
@html_option
@state_option
@arms_option
@quiet_option
@color_option
@click.option(
    "--git-bisect",
    "git_bisect",
    is_flag=True,
    help="Be the script of `git bisect run`: test HEAD of the checkout in the current "
    "directory (unless --commit / --repo say otherwise) and exit 0 GOOD, 1 BAD, 125 "
    "SKIP / INCONCLUSIVE (git skips it), 128 on bad input or an error (git stops).",
)
def test(
    config: str,
    ref: str | None,
    reference_how: str,
    repo: str | None,
    json_path: str | None,
    md_path: str | None,
    html_path: str | None,
    state_dir: str | None,
    arms: bool,
    quiet: bool,
    color: str,
    git_bisect: bool,
) -> None:
    """Build one commit and give its verdict: GOOD, BAD, INCONCLUSIVE or SKIP."""
    from bisectbot.report.html import report_html
    from bisectbot.report.markdown import commit_markdown
    from bisectbot.report.text import commit_text

    if ref is None and not git_bisect:
        raise click.UsageError("Missing option '--commit'.")
    if git_bisect:  # git bisect run runs its script at the top of the work tree it checked out
        ref, repo = ref or "HEAD", repo or os.getcwd()

    def body() -> int:
        assert ref is not None
        if reference_how == "good":
            raise click.BadParameter(
                "one commit has no good end: give the commit to measure the reference at", param_hint="--reference"
            )
        cfg = load(config, repo, arms).with_reference(reference_how)
        warn_uncommitted(cfg)
        preflight(cfg)
        one_stdout(json_path, md_path)
        terminal = Terminal(quiet=quiet, color=color)
        with state_of(cfg, state_dir) as state:
            session = jobs.Session(cfg, state, Events(terminal), config_path=config)
            plan = jobs.plan_test(session, ref)
            stored = announce_state(terminal, session, [plan.sha])
            report = jobs.run_test(session, plan)
            verdicts = [report.detail, *report.arms.values()]
            if line := replayed_line(
                sum(v.runs for v in verdicts),
                sum(v.executed for v in verdicts),
                1,
                replayed_builds(session, stored, [plan.sha]),
            ):
                terminal.line(line)
        text = commit_text(report, summary_width())
        if quiet:  # one line per commit (under `git bisect run`, one per step); --json/--markdown stay whole
            text = text.splitlines(keepends=True)[0]
        write_outputs(
            terminal,
            text,
            commit_markdown(report),
            report.to_json(),
            json_path,
            md_path,
            color,
            html_path,
            lambda: report_html(report),
        )
        return GIT_BISECT_EXIT[report.verdict] if git_bisect else TEST_EXIT[report.verdict]

    (_git_bisect_guard if git_bisect else guard)(body)


@click.command()
@click.argument("config", type=click.Path())
@click.option(
    "--method",
    type=click.Choice(["config", "numpy", "server"]),
    help="Override how the reference is obtained (default: as the config says).",
)
@click.option("--commit", "ref", help="With --method server: the commit whose llama-server to build and ask.")
@repo_option
@json_option
@state_option
@quiet_option
def reference(
    config: str,
    method: str | None,
    ref: str | None,
    repo: str | None,
    json_path: str | None,
    state_dir: str | None,
    quiet: bool,
) -> None:
    """Print the reference distribution the tests compare against (computing it if configured)."""
    from dataclasses import asdict

    from bisectbot.judge.reference import with_method

    def body() -> int:
        cfg = with_method(load(config, repo), method, ref, config)
        with state_of(cfg, state_dir) as state:
            resolved = jobs.Session(cfg, state, Events(Terminal(quiet=quiet)), config_path=config).reference
        if json_path != "-":
            probs = ", ".join(f"{k} {v:.10f}" for k, v in sorted(resolved.probs.items()))
            click.echo(f"{resolved.source}: {probs}")
            if resolved.condition_prob is not None:
                click.echo(f"P(condition) {resolved.condition_prob:.10f}")
        write_json(json_path, asdict(resolved))
        return 0

    guard(body)
