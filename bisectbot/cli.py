"""Command line: thin click commands over the library; wiring only, no logic of its own.

Exit codes (documented in README.md, relied on by scripts):
  0  bisect: culprit found and confirmed · test: GOOD
  1  test: BAD
  2  bad input: config, ref, git, state directory (one line on stderr says what and where)
  3  bisect: ambiguous or unconfirmed · test: INCONCLUSIVE or UNLIKE
  4  bisect: an endpoint does not test as given · test: SKIP (cannot build or run)
  5  GitHub: publishing failed after retries (the result stays in the state database)
  130 interrupted (Ctrl-C); rerun the same command to resume
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import click

from bisectbot import __version__, doctor
from bisectbot.config import Config, load_config
from bisectbot.core.estimate import parse_duration
from bisectbot.core.outcome import Find, Verdict
from bisectbot.core.reports import BisectStatus
from bisectbot.core.retention import parse_size
from bisectbot.demo import MIN_COMMITS as DEMO_MIN_COMMITS
from bisectbot.edges.outfiles import output_problem
from bisectbot.edges.storage import StateDir
from bisectbot.edges.workspace import uncommitted_changes
from bisectbot.errors import BisectbotError, one_line
from bisectbot.pipeline import jobs
from bisectbot.pipeline.bisect import Narrowing
from bisectbot.pipeline.budget import BudgetLimits
from bisectbot.pipeline.events import Events
from bisectbot.pipeline.terminal import COLOR_MODES, Terminal, print_summary, summary_width
from bisectbot.report_text import replayed_line, state_line

EXIT_OK, EXIT_BAD, EXIT_INPUT, EXIT_UNDECIDED, EXIT_ENDPOINT, EXIT_GITHUB = 0, 1, 2, 3, 4, 5
TEST_EXIT = {
    Verdict.GOOD: EXIT_OK,
    Verdict.BAD: EXIT_BAD,
    Verdict.INCONCLUSIVE: EXIT_UNDECIDED,
    Verdict.UNLIKE: EXIT_UNDECIDED,
    Verdict.SKIP: EXIT_ENDPOINT,
}
BISECT_EXIT = {
    BisectStatus.FOUND: EXIT_OK,
    BisectStatus.AMBIGUOUS: EXIT_UNDECIDED,
    BisectStatus.UNCONFIRMED: EXIT_UNDECIDED,
    BisectStatus.STOPPED: EXIT_UNDECIDED,
}


def default_state_dir(cfg: Config) -> Path:
    """Deterministic per (config name, repository), so rerunning a command resumes it."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "bisectbot"
    tag = hashlib.sha256(cfg.repo_source.encode()).hexdigest()[:8]
    return base / f"{cfg.name}-{tag}"


def _load(config: str, repo: str | None, arms: bool = True) -> Config:
    cfg = load_config(config)
    cfg = cfg.with_repo_path(repo) if repo else cfg
    return cfg if arms else cfg.without_arms()


def _preflight(cfg: Config) -> None:
    """Before a command that builds touches anything: every program it needs is on PATH."""
    doctor.preflight(doctor.cmake_args_of(cfg.build))


def _warn_uncommitted(cfg: Config) -> None:
    """One kept line when the local checkout has uncommitted edits: the bot clones committed
    history, so a user who edited the tree and tests HEAD would otherwise think the edits ran."""
    if changed := uncommitted_changes(cfg.repo_source):
        shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
        click.echo(
            f"bisectbot: warning: {cfg.repo_source} has uncommitted changes ({shown}): they are not "
            "tested, only committed commits are (HEAD as committed); commit them to test them",
            err=True,
        )


def _reset_state() -> bool:
    """Whether --reset-state was given (it is shared by every command that takes --state)."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.meta.get("bisectbot.reset_state"))


def _open_state(root: Path) -> StateDir:
    """The state directory, its unusable database moved aside first when --reset-state asks:
    the one way every command opens it."""
    state = StateDir(root, reset=_reset_state())
    if state.store.moved_aside is not None:
        click.echo(
            f"bisectbot: {state.store.path} could not be used: moved aside to "
            f"{state.store.moved_aside}; started a fresh state database",
            err=True,
        )
    return state


def _state(cfg: Config, state_dir: str | None) -> StateDir:
    return _open_state(Path(state_dir) if state_dir else default_state_dir(cfg))


@contextmanager
def _cluster(workers: int | None, scheduler: str | None) -> Iterator[Any]:
    """A Dask client for --workers / --scheduler (closed afterwards), or None: serial."""
    if not workers and not scheduler:
        yield None
        return
    from bisectbot.pipeline.cluster import connect

    client = connect(workers, scheduler)
    try:
        yield client
    finally:
        cluster = client.cluster
        client.close()
        if cluster is not None:
            cluster.close()


def _guard(fn: Callable[[], int]) -> None:
    """Run a command body: BisectbotError → one line on stderr and its exit code."""
    try:
        _check_outputs()
        code = _closing(fn)
    except BisectbotError as exc:
        click.echo(f"bisectbot: error: {one_line(str(exc))}", err=True)
        sys.exit(exc.exit_code)
    except OSError as exc:  # the file system refused something no stage foresaw: still one line
        where = f"{exc.filename}: " if exc.filename else ""
        click.echo(f"bisectbot: error: {where}{exc.strerror or exc}", err=True)
        sys.exit(EXIT_INPUT)
    except KeyboardInterrupt:
        click.echo("bisectbot: interrupted; rerun the same command to resume", err=True)
        sys.exit(130)
    sys.exit(code)


def _check_outputs() -> None:
    """Before a command body runs: every output file it was given (OUTPUT_PARAMS) can be
    written, so a bad path is one line and exit 2 before anything is built, not a traceback
    (exit 1, "test: BAD") after the whole run."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return
    for param in ctx.command.params:
        value = ctx.params.get(param.name or "")
        if param.name in OUTPUT_PARAMS and isinstance(value, str) and (problem := output_problem(value)):
            raise BisectbotError(f"{param.opts[0] if param.opts else param.name} {value}: {problem}")


def _closing(fn: Callable[[], int]) -> int:
    """Run a command body; however it ends, the live status line is erased first, so that an
    error (or the summary) starts on a clean line and the cursor is shown again."""
    try:
        return fn()
    finally:
        Terminal.close_all()


def _announce_state(terminal: Terminal, session: jobs.Session, shas: Sequence[str]) -> frozenset[str]:
    """The kept 'state: DIR (…)' line: what the state holds, and how much of it is at the job's
    commits (runs under any run key, builds under this config's build key). Returns the commits
    whose builds were stored, to tell afterwards which builds were replayed."""
    stored = session.state.store.stored(session.runner.builder.key(session.cfg.build), shas)
    terminal.line(
        state_line(
            session.state.root, stored.runs, stored.builds, stored.runs_here, len(stored.builds_here), len(set(shas))
        )
    )
    return stored.builds_here


def _replayed_builds(session: jobs.Session, stored: frozenset[str], tested: Iterable[str]) -> int:
    """Commits tested whose build came from the state (stored before, not rebuilt now)."""
    return len((set(tested) & stored) - set(session.runner.builder.built))


def _one_stdout(json_path: str | None, md_path: str | None) -> None:
    if json_path == "-" and md_path == "-":
        raise click.UsageError("--json - and --markdown - both want stdout: give one of them a file")


def _summary(terminal: Terminal, text: str, markdown: str, md_path: str | None, color: str) -> None:
    """The summary on stdout: plain text that fits the terminal, or the Markdown with
    `--markdown -`; `--markdown FILE` also writes the Markdown there."""
    terminal.close()
    if md_path and md_path != "-":
        Path(md_path).write_text(markdown)
    if md_path == "-":
        click.echo(markdown, nl=False)
    else:
        print_summary(text, color)


def _duration(value: str | None) -> tuple[float, str] | None:
    """--deadline: (seconds, as written), or a click error naming the value."""
    if value is None:
        return None
    try:
        return parse_duration(value), value
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--deadline") from None


def _size(value: str | None) -> int | None:
    """--max-size: bytes, or a click error naming the value."""
    if value is None:
        return None
    try:
        return parse_size(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--max-size") from None


def _write_json(path: str | None, data: dict[str, Any]) -> None:
    if path:
        text = json.dumps(data, indent=2, sort_keys=False) + "\n"
        if path == "-":
            click.echo(text, nl=False)
        else:
            Path(path).write_text(text)


_state_dir_option = click.option(
    "--state",
    "state_dir",
    type=click.Path(),
    metavar="DIR",
    help="State directory (database, clone, builds). Default: ~/.cache/bisectbot/<config name>-<repo hash>.",
)


def _remember_reset(ctx: click.Context, _param: click.Parameter, value: bool) -> bool:
    if value:
        ctx.meta["bisectbot.reset_state"] = True
    return value


_reset_state_option = click.option(
    "--reset-state",
    is_flag=True,
    expose_value=False,
    callback=_remember_reset,
    help="If the state database is empty, damaged, not bisectbot's or of a newer schema, move it "
    "aside (renamed <name>.bak-<time>, never deleted) and start a fresh one.",
)


def state_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--state DIR and --reset-state, on every command that keeps state."""
    return _state_dir_option(_reset_state_option(fn))


repo_option = click.option(
    "--repo",
    type=click.Path(exists=True, file_okay=False),
    help="Use this checkout or clone of the project instead of the config's repo.",
)
json_option = click.option(
    "--json",
    "json_path",
    type=click.Path(dir_okay=False, allow_dash=True),
    help="Write the JSON report here ('-' for stdout).",
)
quiet_option = click.option("--quiet", "-q", is_flag=True, help="No progress output.")
color_option = click.option(
    "--color",
    type=click.Choice(COLOR_MODES),
    default="auto",
    show_default=True,
    help="Colour the verdict words: auto (on a terminal, unless NO_COLOR is set or TERM=dumb), always or never.",
)
markdown_option = click.option(
    "--markdown",
    "md_path",
    type=click.Path(dir_okay=False, allow_dash=True),
    help="Also write the Markdown summary here ('-': on stdout instead of the plain-text summary).",
)
arms_option = click.option(
    "--arms/--no-arms",
    default=True,
    show_default=True,
    help="Also test the config's cross-check arms (each builds and starts a server).",
)


# Parameters naming a file a command writes its output to: checked before the command starts.
OUTPUT_PARAMS = ("json_path", "md_path")


class _OneLineUsage(click.ClickException):
    """A usage error as the one line (and exit 2) every bad input gets, instead of click's
    Usage/Try/Error block: `bisectbot: error: <what> (see bisectbot <command> --help)`."""

    exit_code = EXIT_INPUT

    def __init__(self, exc: click.UsageError):
        names = []
        ctx: click.Context | None = exc.ctx
        while ctx is not None:
            names.append(ctx.info_name or "")
            ctx = ctx.parent
        where = " ".join(["bisectbot", *reversed(names[:-1])])  # the root's name as typed may be a path
        super().__init__(f"{one_line(exc.format_message())} (see {where} --help)")
        # click 8.5 declares exit_code a ClassVar; click reads it from the instance all the same
        self.exit_code = exc.exit_code  # type: ignore[misc]  # 2, or 128 under --git-bisect

    def show(self, file: Any = None) -> None:
        click.echo(f"bisectbot: error: {self.format_message()}", err=True)


class _Group(click.Group):
    """The command group: every usage error (unknown option, bad value, missing argument) is
    one line with click's exit code; a group called bare still shows its help."""

    group_class = type  # subgroups (fixtures) are _Groups too

    def make_context(
        self, info_name: str | None, args: list[str], parent: click.Context | None = None, **extra: Any
    ) -> click.Context:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as exc:
            raise _OneLineUsage(exc) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.exceptions.NoArgsIsHelpError:
            raise
        except click.UsageError as exc:
            raise _OneLineUsage(exc) from None


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="bisectbot")
def main() -> None:
    """Find the commit that changed a sampled distribution, with sequential tests."""


@main.command()
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
@repo_option
@json_option
@state_option
@markdown_option
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
    workers: int | None,
    scheduler: str | None,
    worker_state: str | None,
    max_builds: int | None,
    deadline: tuple[float, str] | None,
    repo: str | None,
    json_path: str | None,
    state_dir: str | None,
    md_path: str | None,
    arms: bool,
    quiet: bool,
    color: str,
) -> None:
    """Bisect the first-parent line GOOD..BAD for the first bad (or first fixed) commit.

    Both endpoints are tested first; the culprit is confirmed against its parent on fresh seeds.
    Killed or interrupted? Run the same command again: it resumes from the state database.
    """
    from bisectbot.report import bisect_markdown
    from bisectbot.report_text import bisect_text

    started = time.monotonic()  # --deadline counts from here

    def body() -> int:
        cfg = _load(config, repo, arms)
        _warn_uncommitted(cfg)
        _preflight(cfg)
        if workers and scheduler:
            raise click.UsageError("give --workers (a local cluster) or --scheduler (an existing one), not both")
        _one_stdout(json_path, md_path)
        terminal = Terminal(quiet=quiet, color=color)
        with _state(cfg, state_dir) as state, _cluster(workers, scheduler) as client:
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
                session, good, bad, find=Find(find), strategy=strategy, narrowing=how, skip=skip, exclude=exclude
            )
            stored = _announce_state(terminal, session, plan.line)
            seconds, written = deadline or (None, "")
            limits = BudgetLimits(max_builds, seconds, written, since=started)
            report = jobs.run_bisect(session, plan, limits=limits)
            tested = {v.sha for v in report.verdicts if v.arm == "main"}
            if line := replayed_line(
                report.runs, report.runs_executed, report.builds, _replayed_builds(session, stored, tested)
            ):
                terminal.line(line)
        if json_path != "-":
            _summary(terminal, bisect_text(report, summary_width()), bisect_markdown(report), md_path, color)
        elif md_path and md_path != "-":
            Path(md_path).write_text(bisect_markdown(report))
        _write_json(json_path, report.to_json())
        if report.status is BisectStatus.STOPPED:
            click.echo(f"bisectbot: {report.message}", err=True)
        return BISECT_EXIT[report.status]

    _guard(body)


# `git bisect run` reads 0 as good, 125 as skip, 1..127 as bad and anything else as "stop".
GIT_BISECT_EXIT = {
    Verdict.GOOD: 0,
    Verdict.BAD: 1,
    Verdict.SKIP: 125,
    Verdict.INCONCLUSIVE: 125,
    Verdict.UNLIKE: 125,
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
    """`_guard` with the exit codes of a `git bisect run` script: the body's 0 / 1 / 125 pass,
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
        _guard(body)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else GIT_BISECT_ABORT
        sys.exit(code if code in (0, 1, 125, 130) or code >= GIT_BISECT_ABORT else GIT_BISECT_ABORT)


@main.command(cls=GitBisectCommand)
@click.argument("config", type=click.Path())
@click.option("--commit", "ref", help="The commit (ref) to test (required; HEAD with --git-bisect).")
@repo_option
@json_option
@markdown_option
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
    "SKIP / INCONCLUSIVE / UNLIKE (git skips it), 128 on bad input or an error (git stops).",
)
def test(
    config: str,
    ref: str | None,
    repo: str | None,
    json_path: str | None,
    md_path: str | None,
    state_dir: str | None,
    arms: bool,
    quiet: bool,
    color: str,
    git_bisect: bool,
) -> None:
    """Build one commit and give its verdict: GOOD, BAD, INCONCLUSIVE or SKIP."""
    from bisectbot.report import test_markdown
    from bisectbot.report_text import test_text

    if ref is None and not git_bisect:
        raise click.UsageError("Missing option '--commit'.")
    if git_bisect:  # git bisect run runs its script at the top of the work tree it checked out
        ref, repo = ref or "HEAD", repo or os.getcwd()

    def body() -> int:
        assert ref is not None
        cfg = _load(config, repo, arms)
        _warn_uncommitted(cfg)
        _preflight(cfg)
        _one_stdout(json_path, md_path)
        terminal = Terminal(quiet=quiet, color=color)
        with _state(cfg, state_dir) as state:
            session = jobs.Session(cfg, state, Events(terminal), config_path=config)
            plan = jobs.plan_test(session, ref)
            stored = _announce_state(terminal, session, [plan.sha])
            report = jobs.run_test(session, plan)
            verdicts = [report.detail, *report.arms.values()]
            if line := replayed_line(
                sum(v.runs for v in verdicts),
                sum(v.executed for v in verdicts),
                1,
                _replayed_builds(session, stored, [plan.sha]),
            ):
                terminal.line(line)
        if json_path != "-":
            _summary(terminal, test_text(report, summary_width()), test_markdown(report), md_path, color)
        elif md_path and md_path != "-":
            Path(md_path).write_text(test_markdown(report))
        _write_json(json_path, report.to_json())
        return GIT_BISECT_EXIT[report.verdict] if git_bisect else TEST_EXIT[report.verdict]

    (_git_bisect_guard if git_bisect else _guard)(body)


@main.command("log")
@click.argument("config", type=click.Path())
@state_option
@json_option
def log_command(config: str, state_dir: str | None, json_path: str | None) -> None:
    """What was tested in the state directory, as `git bisect log`: each job (bisect GOOD..BAD
    or test), oldest first, with one line per commit: verdict, runs and when."""
    import shutil

    from bisectbot.core.joblog import log_text, logged_job

    def body() -> int:
        cfg = load_config(config)
        with _state(cfg, state_dir) as state:
            store = state.store
            entries = [
                logged_job(
                    row.id, row.kind, row.status, row.args, row.result, created, updated, store.verdict_log(row.id)
                )
                for row, created, updated in store.job_log()
            ]
            root = state.root
        if json_path != "-":
            click.echo(log_text(entries, shutil.get_terminal_size((80, 24)).columns), nl=False)
        _write_json(json_path, {"state": str(root), "jobs": [e.to_json() for e in entries]})
        return EXIT_OK

    _guard(body)


@main.command("build-log")
@click.argument("config", type=click.Path())
@click.option("--commit", "ref", required=True, help="The commit (ref) whose build log to show.")
@repo_option
@state_option
def build_log(config: str, ref: str, repo: str | None, state_dir: str | None) -> None:
    """Print the kept build log of a commit (e.g. one the bisect skipped)."""

    def body() -> int:
        cfg = _load(config, repo)
        with _state(cfg, state_dir) as state:
            session = jobs.Session(cfg, state, config_path=config)
            key = session.runner.builder.key(cfg.build)
            # a full sha with a stored build needs no repository: the command a failed build
            # prints works even when the checkout has moved or --repo was given
            rec = state.store.build(key, ref) if re.fullmatch(r"[0-9a-f]{40}", ref) else None
            sha = ref if rec is not None else session.workspace.resolve(ref)
            rec = rec or state.store.build(key, sha)
            if rec is None:
                raise BisectbotError(f"no build of {sha[:12]} is recorded in {state.root}")
            notes = f" ({rec.notes})" if rec.notes else ""
            click.echo(
                f"# {sha} build {rec.status} (build variant {rec.variant}) in {rec.seconds:.1f} s "
                f"{rec.reason}{notes}".rstrip()
            )
            if not Path(rec.log).is_file():
                raise BisectbotError(
                    f"the build log of {sha[:12]}, {rec.log}, is gone (removed by `bisectbot gc` "
                    "or by hand); build the commit again with `bisectbot test` to get a new one"
                )
            click.echo(Path(rec.log).read_text(errors="replace"))
        return 0

    _guard(body)


@main.command()
@click.argument("config", type=click.Path())
@click.option(
    "--keep-binaries",
    type=click.IntRange(min=0),
    metavar="N",
    help="Keep the N most recently used kept binaries (overrides storage.max_binaries).",
)
@click.option(
    "--max-size",
    metavar="SIZE",
    callback=lambda _c, _p, v: _size(v),
    help="Keep kept binaries, build directories and logs within SIZE in all (500M, 10G; "
    "overrides storage.max_size_mb).",
)
@click.option("--dry-run", is_flag=True, help="Only list what would be removed.")
@state_option
def gc(config: str, keep_binaries: int | None, max_size: int | None, dry_run: bool, state_dir: str | None) -> None:
    """Remove kept binaries, build directories and logs beyond the size caps, least recently used first.

    Caps come from the config's storage: section, or --keep-binaries / --max-size. The database
    (builds, runs, verdicts) is never touched: a removed binary is rebuilt when a bisect needs it.
    """
    from bisectbot.pipeline.gc import collect, describe, storage_caps

    def body() -> int:
        cfg = load_config(config)
        root = Path(state_dir) if state_dir else default_state_dir(cfg)
        if not root.is_dir():
            raise BisectbotError(f"state directory {root} does not exist: nothing to collect")
        caps = storage_caps(cfg, keep_binaries=keep_binaries, max_bytes=max_size)
        with _open_state(root) as state:
            result = collect(state, caps, dry_run=dry_run)
        for item in result.removed:
            click.echo(f"{'would remove' if dry_run else 'removed'} {describe(item)}")
        if not caps.any:
            click.echo(f"no caps: give --keep-binaries or --max-size, or set storage: in {config}", err=True)
        click.echo(f"{root}: {result.summary()}")
        return 0

    _guard(body)


@main.command()
@click.option(
    "--commits",
    default=100,
    show_default=True,
    type=click.IntRange(min=DEMO_MIN_COMMITS),
    help=f"Commits in the generated history (at least {DEMO_MIN_COMMITS}).",
)
@click.option("--seed", default=0, show_default=True, help="Seed that places the planted culprit.")
@click.option(
    "--outside",
    default=0.5,
    show_default=True,
    type=click.FloatRange(0, 1),
    help="Share of ordinary commits that touch only files the build never compiles (CI, a "
    "CUDA file, scripts, docs), as most of llama.cpp's do; the bisect skips them.",
)
@click.option(
    "--dir",
    "workdir",
    type=click.Path(file_okay=False),
    help="Where to generate the demo (default: a new temporary directory).",
)
@json_option
@markdown_option
@quiet_option
@color_option
def demo(
    commits: int,
    seed: int,
    outside: float,
    workdir: str | None,
    json_path: str | None,
    md_path: str | None,
    quiet: bool,
    color: str,
) -> None:
    """Generate a C++ speculative sampler with a planted defect in its history, and bisect it."""
    import tempfile

    from bisectbot.demo import generate_demo
    from bisectbot.report import bisect_markdown
    from bisectbot.report_text import bisect_text

    def body() -> int:
        _one_stdout(json_path, md_path)
        root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="bisectbot-demo-"))
        if workdir and root.exists() and any(root.iterdir()):
            raise BisectbotError(f"--dir {root} is not empty: give a new or empty directory")
        terminal = Terminal(quiet=quiet, color=color)
        doctor.preflight()  # git makes the history, cmake, make and c++ build it
        terminal.line(f"generating a {commits}-commit history in {root} …")
        history = generate_demo(root, n_commits=commits, seed=seed, outside=outside)
        cfg = load_config(history.config)
        with _open_state(root / "state") as state:
            session = jobs.Session(cfg, state, Events(terminal), config_path=str(history.config))
            plan = jobs.plan_bisect(session, history.good, history.bad)
            _announce_state(terminal, session, plan.line)
            report = jobs.run_bisect(session, plan)
        found = report.first_bad == history.culprit
        outcome = (
            f"planted culprit {history.culprit[:12]}: "
            f"{'found' if found else 'NOT found'} with {report.builds} builds "
            f"(bound {report.builds_bound}) and {report.runs} runs"
        )
        if json_path != "-":
            _summary(terminal, bisect_text(report, summary_width()), bisect_markdown(report), md_path, color)
            click.echo(outcome)
        else:  # stdout is the JSON's alone
            if md_path:
                Path(md_path).write_text(bisect_markdown(report))
            terminal.line(outcome)
        _write_json(json_path, report.to_json())
        return EXIT_OK if found else EXIT_UNDECIDED

    _guard(body)


@main.command("doctor")
@click.argument("config", type=click.Path(), required=False)
@click.option(
    "--repo",
    type=click.Path(file_okay=False),
    help="Also check that git can read this checkout (safe.directory, ownership).",
)
def doctor_command(config: str | None, repo: str | None) -> None:
    """Check that this machine has what bisectbot needs: cmake, make, compilers, git, ccache.

    One line per check; a missing piece names the Debian/Ubuntu package to install. With CONFIG:
    its cmake generator (make or ninja) and its local repository are checked too. Exit 0 when
    everything required is there, 2 otherwise (optional pieces only warn).
    """

    def body() -> int:
        cfg = load_config(config) if config else None
        where = Path(repo) if repo else (Path(cfg.repo_source) if cfg and cfg.repo.path else None)
        results = doctor.checks(doctor.cmake_args_of(cfg.build) if cfg else (), where)
        click.echo(doctor.platform_line())
        for check in results:
            click.echo(check.line())
        failed = [c.name for c in results if c.failed]
        if failed:
            click.echo(f"bisectbot doctor: missing {', '.join(failed)}: builds cannot run here", err=True)
            return EXIT_INPUT
        return EXIT_OK

    _guard(body)


# -- GitHub: watch, serve, check, publish -------------------------------------------------------
issue_option = click.option(
    "--issue", type=click.IntRange(min=1), help="Issue number (default: github.issue in the config)."
)


def _bot(config: str, state_dir: str | None, quiet: bool) -> tuple[Config, Path, Any, Terminal]:
    """Config, state directory, GitHub client (a dry run without credentials) and terminal."""
    from bisectbot.github.client import make_client

    cfg = load_config(config)
    root = Path(state_dir) if state_dir else default_state_dir(cfg)
    return cfg, root, make_client(cfg), Terminal(quiet=quiet)


def _issue(cfg: Config, issue: int | None, required: bool) -> int | None:
    issue = issue or (cfg.github.issue if cfg.github else None)
    if issue is None and required:
        raise BisectbotError(f"{cfg.source_path}: no --issue given and no github.issue in the config")
    return issue


@main.command()
@click.argument("config", type=click.Path())
@issue_option
@click.option("--once", is_flag=True, help="Poll once, handle what is new, and exit.")
@click.option("--interval", type=click.FloatRange(min=1), help="Seconds between polls (default: github.poll_interval).")
@state_option
@quiet_option
def watch(
    config: str, issue: int | None, once: bool, interval: float | None, state_dir: str | None, quiet: bool
) -> None:
    """Poll an issue for /bisect, /check and /cancel comments and run them, one at a time.

    The last seen comment is remembered in the state database; a command is claimed before it
    runs, so a restarted watch resumes an interrupted job instead of running it again.
    """
    from bisectbot.github.bot import Bot
    from bisectbot.github.bot import watch as run_watch

    def body() -> int:
        cfg, root, client, terminal = _bot(config, state_dir, quiet)
        _preflight(cfg)
        if cfg.github is None:
            raise BisectbotError(f"{config}: watch needs a github: section (repo, token_env, …)")
        number = _issue(cfg, issue, required=True)
        assert number is not None
        with _open_state(root) as state:
            bot = Bot(cfg, config, state, client, terminal)
            run_watch(bot, number, once=once, interval=interval or cfg.github.poll_interval)
            failed = bot.owed()
            bot.outbox.close()
        return EXIT_GITHUB if failed else EXIT_OK

    _guard(body)


@main.command()
@click.argument("config", type=click.Path())
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option(
    "--port",
    default=8080,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="Port to listen on (0: any free port, printed on start).",
)
@state_option
@quiet_option
def serve(config: str, host: str, port: int, state_dir: str | None, quiet: bool) -> None:
    """Receive GitHub issue_comment webhooks and run their commands on one worker thread.

    The webhook secret comes from the environment variable named by github.webhook_secret_env;
    unsigned or forged deliveries get 401, repeated X-GitHub-Delivery ids are ignored.
    """
    import time as _time

    from bisectbot.github.bot import BotServer

    def body() -> int:
        cfg, root, client, terminal = _bot(config, state_dir, quiet)
        _preflight(cfg)
        if cfg.github is None:
            raise BisectbotError(f"{config}: serve needs a github: section (repo, webhook_secret_env, …)")
        secret = os.environ.get(cfg.github.webhook_secret_env, "").encode()
        if not secret:
            raise BisectbotError(f"{config}: github.webhook_secret_env: ${cfg.github.webhook_secret_env} is not set")
        server = BotServer(cfg, config, root, client, secret, host=host, port=port, terminal=terminal).start()
        click.echo(f"bisectbot: listening on http://{host}:{server.port}/ (POST webhooks, GET /healthz)", err=True)
        try:
            while server.error is None:
                _time.sleep(0.5)
        finally:
            server.stop()
        raise BisectbotError(f"worker stopped: {server.error}")

    _guard(body)


@main.command()
@click.argument("config", type=click.Path())
@click.option("--ref", help="The ref to check (default: github.default_ref, else HEAD).")
@issue_option
@json_option
@state_option
@quiet_option
def check(
    config: str, ref: str | None, issue: int | None, json_path: str | None, state_dir: str | None, quiet: bool
) -> None:
    """Check that a fix still holds at REF (e.g. scheduled on master).

    GOOD: REF is recorded as the last known good commit and the issue's status comment is
    updated in place. BAD: an alarm is posted and the range from the last known good commit to
    REF is bisected, the culprit posted in its own comment. Exit codes as `test`; 5 when
    GitHub refused a comment (the result stays in the state database: `bisectbot publish`).

    --ref pull/<N>/head: the pull request's head, fetched from the repository and built and run
    as untrusted code in the sandbox (bubblewrap over a throwaway copy: nothing of the bot
    mounted, no network, limits, no credentials; refused, exit 4, where none can be made). Only its verdict is given and
    posted, in a comment of its own: it is never recorded as known good nor bisected.
    """
    from bisectbot.github.bot import Bot
    from bisectbot.report_text import bisect_text, test_text

    def body() -> int:
        cfg, root, client, terminal = _bot(config, state_dir, quiet)
        _preflight(cfg)
        number = _issue(cfg, issue, required=False)
        the_ref = ref or (cfg.github.default_ref if cfg.github else "HEAD")
        with _open_state(root) as state:
            held = state.store.stored("", ())  # the ref is resolved inside the check: totals only
            terminal.line(state_line(root, held.runs, held.builds))
            bot = Bot(cfg, config, state, client, terminal)
            out = bot.run_check(the_ref, number)
            # the comments go out on the outbox's thread: wait for GitHub as long as a call may
            out.published = bot.settle(cfg.github.retry_give_up_after if cfg.github else 0.0)[1] == 0
            bot.outbox.close()
        terminal.close()
        if json_path != "-":
            if out.pull is not None:
                click.echo(f"{the_ref} = {out.test.commit[:12]} (built and run in the sandbox: {out.sandbox})")
            print_summary(test_text(out.test, summary_width()))
            if out.bisect:
                click.echo()
                print_summary(bisect_text(out.bisect, summary_width()))
            elif out.bisect_error:
                click.echo(f"bisect from the last known good commit stopped: {out.bisect_error}")
        _write_json(json_path, out.to_json())
        if not out.published:
            return EXIT_GITHUB
        return TEST_EXIT[out.test.verdict]

    _guard(body)


@main.command()
@click.argument("config", type=click.Path())
@state_option
@quiet_option
def publish(config: str, state_dir: str | None, quiet: bool) -> None:
    """Post results GitHub refused earlier (kept in the state database), each in its job comment."""
    from bisectbot.github.bot import Bot

    def body() -> int:
        cfg, root, client, terminal = _bot(config, state_dir, quiet)
        with _open_state(root) as state:
            bot = Bot(cfg, config, state, client, terminal)
            posted, failed = bot.settle(cfg.github.retry_give_up_after if cfg.github else 0.0)
            bot.outbox.close()
        click.echo(f"published {posted} result(s); {failed} still unpublished", err=True)
        return EXIT_GITHUB if failed else EXIT_OK

    _guard(body)


@main.group()
def fixtures() -> None:
    """Generate test fixtures (the tiny GGUF models of llama.cpp #29975)."""


@fixtures.command("tiny-llama")
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Directory to write target.gguf and draft.gguf into.",
)
@click.option("--seed", default=132, show_default=True, help="Generator seed (132 made the committed files).")
def tiny_llama(out_dir: str, seed: int) -> None:
    """Write a tiny random Llama target (2 layers, F32, vocab a..h, EOS h) and a noisy draft.

    Deterministic: the same seed writes byte-identical files. Prints their sha256s.
    """
    from bisectbot.llama.fixtures import write_tiny_llama

    def body() -> int:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        for name, digest in write_tiny_llama(out, seed).items():
            click.echo(f"{digest}  {out / name}")
        return 0

    _guard(body)


@main.command()
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

    def body() -> int:
        cfg = _load(config, repo)
        if method and method != "config":
            if cfg.reference.compute is None:
                raise BisectbotError(
                    f"{config}: reference.compute is not set, so --method {method} has no model and prompt to work from"
                )
            update: dict[str, Any] = {"method": method}
            if ref:
                update["commit"] = ref
            comp = cfg.reference.compute.model_copy(update=update)
            if comp.method == "server" and not comp.commit:
                raise BisectbotError("--method server needs --commit REF")
            cfg = cfg.model_copy(update={"reference": cfg.reference.model_copy(update={"compute": comp})})
        with _state(cfg, state_dir) as state:
            resolved = jobs.Session(cfg, state, Events(Terminal(quiet=quiet)), config_path=config).reference
        if json_path != "-":
            probs = ", ".join(f"{k} {v:.10f}" for k, v in sorted(resolved.probs.items()))
            click.echo(f"{resolved.source}: {probs}")
            if resolved.condition_prob is not None:
                click.echo(f"P(condition) {resolved.condition_prob:.10f}")
        _write_json(json_path, asdict(resolved))
        return 0

    _guard(body)


if __name__ == "__main__":  # pragma: no cover
    main()
