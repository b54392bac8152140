"""What command bodies share, so each stays one library call: the config loaded and the state
directory opened the one way, the machine checked before a build, and the results written out
(the kept state line, the summary on stdout, the JSON report)."""

from __future__ import annotations

import hashlib
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import click

from bisectbot import doctor
from bisectbot.building.workspace import uncommitted_changes
from bisectbot.cli.options import reset_state_given
from bisectbot.cli.terminal import Terminal, print_summary, summary_width
from bisectbot.config import Config, load_config
from bisectbot.errors import StateError
from bisectbot.inert import visible
from bisectbot.jobs import lifecycle as jobs
from bisectbot.records.reports import BisectReport
from bisectbot.report.text import state_line
from bisectbot.state.statedir import StateDir
from bisectbot.state.storage import database_path


def default_state_dir(cfg: Config) -> Path:
    """`storage.state_dir` (relative to the config file), else one per (config name,
    repository) under the cache: the same for every command, so rerunning one resumes it and
    `log`, `build-log` and `gc` read what the bisect wrote."""
    if cfg.storage.state_dir:
        return (cfg.config_dir / os.path.expanduser(cfg.storage.state_dir)).resolve()
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "bisectbot"
    tag = hashlib.sha256(cfg.repo_source.encode()).hexdigest()[:8]
    return base / f"{cfg.name}-{tag}"


def load(config: str, repo: str | None, arms: bool = True) -> Config:
    """The config, with --repo's checkout instead of its repo and without its arms under --no-arms."""
    cfg = load_config(config)
    cfg = cfg.with_repo_path(repo) if repo else cfg
    return cfg if arms else cfg.without_arms()


def preflight(cfg: Config) -> None:
    """Before a command that builds touches anything: every program it needs is on PATH."""
    doctor.preflight(doctor.config_tools(cfg.build))


def warn_uncommitted(cfg: Config) -> None:
    """One kept line when the local checkout has uncommitted edits: the bot clones committed
    history, so a user who edited the tree and tests HEAD would otherwise think the edits ran."""
    if changed := uncommitted_changes(cfg.repo_source):
        shown = ", ".join(changed[:3]) + (f" and {len(changed) - 3} more" if len(changed) > 3 else "")
        click.echo(
            f"bisectbot: warning: {cfg.repo_source} has uncommitted changes ({shown}): they are not "
            "tested, only committed commits are (HEAD as committed); commit them to test them",
            err=True,
        )


def open_state(root: Path) -> StateDir:
    """The state directory, its unusable database moved aside first when --reset-state asks:
    the one way every command opens it."""
    state = StateDir(root, reset=reset_state_given())
    if state.store.moved_aside is not None:
        click.echo(
            f"bisectbot: {state.store.path} could not be used: moved aside to "
            f"{state.store.moved_aside}; started a fresh state database",
            err=True,
        )
    return state


def state_of(cfg: Config, state_dir: str | None, *, existing: bool = False) -> StateDir:
    """The state directory --state names, or the config's default one, opened. `existing`: for
    commands that only read it, a missing directory is an error naming it, and nothing is made."""
    root = Path(state_dir) if state_dir else default_state_dir(cfg)
    if existing and not database_path(root).is_file():
        given = "--state" if state_dir else "this config's default (storage.state_dir, or give --state)"
        raise StateError(f"no state directory at {root} ({given}): nothing has run there yet")
    return open_state(root)


@contextmanager
def dask_client(workers: int | None, scheduler: str | None) -> Iterator[Any]:
    """A Dask client for --workers / --scheduler (closed afterwards), or None: serial."""
    if not workers and not scheduler:
        yield None
        return
    from bisectbot.cluster import connect

    client = connect(workers, scheduler)
    try:
        yield client
    finally:
        cluster = client.cluster
        client.close()
        if cluster is not None:
            cluster.close()


def announce_state(terminal: Terminal, session: jobs.Session, shas: Sequence[str]) -> frozenset[str]:
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


def replayed_builds(session: jobs.Session, stored: frozenset[str], tested: Iterable[str]) -> int:
    """Commits tested whose build came from the state (stored before, not rebuilt now)."""
    return len((set(tested) & stored) - set(session.runner.builder.built))


def one_stdout(json_path: str | None, md_path: str | None) -> None:
    """A usage error when both --json and --markdown want stdout."""
    if json_path == "-" and md_path == "-":
        raise click.UsageError("--json - and --markdown - both want stdout: give one of them a file")


def write_summary(terminal: Terminal, text: str, markdown: str, md_path: str | None, color: str) -> None:
    """The summary on stdout: plain text that fits the terminal, or the Markdown with
    `--markdown -`; `--markdown FILE` also writes the Markdown there."""
    terminal.close()
    if md_path and md_path != "-":
        Path(md_path).write_text(markdown)
    if md_path == "-":
        click.echo(visible(markdown, keep="\n\t"), nl=False)
    else:
        print_summary(text, color)


def write_outputs(
    terminal: Terminal,
    text: str,
    markdown: str,
    data: Mapping[str, object],
    json_path: str | None,
    md_path: str | None,
    color: str,
    html_path: str | None = None,
    html: Callable[[], str] = str,
) -> None:
    """A report's forms: the summary (or the Markdown) on stdout unless `--json -` claims stdout
    for the JSON alone; the Markdown to `--markdown FILE`; the JSON to `--json`; the page
    `html()` makes to `--html FILE`."""
    if json_path != "-":
        write_summary(terminal, text, markdown, md_path, color)
    elif md_path and md_path != "-":
        Path(md_path).write_text(markdown)
    write_json(json_path, data)
    if html_path:
        Path(html_path).write_text(html())


def write_bisect_outputs(
    terminal: Terminal,
    report: BisectReport,
    json_path: str | None,
    md_path: str | None,
    color: str,
    html_path: str | None,
) -> None:
    """A bisect's report in every form asked for (write_outputs), as `bisect` and `demo` give it."""
    from bisectbot.report.html import report_html
    from bisectbot.report.markdown import bisect_markdown
    from bisectbot.report.text import bisect_text

    text = bisect_text(report, summary_width())
    html = lambda: report_html(report)  # noqa: E731 — made only when --html asks for it
    write_outputs(terminal, text, bisect_markdown(report), report.to_json(), json_path, md_path, color, html_path, html)


def write_json(path: str | None, data: Mapping[str, object]) -> None:
    """The JSON report to --json's file, or to stdout for '-'; nothing without --json."""
    if path:
        text = json.dumps(data, indent=2, sort_keys=False) + "\n"
        if path == "-":
            click.echo(text, nl=False)
        else:
            Path(path).write_text(text)
