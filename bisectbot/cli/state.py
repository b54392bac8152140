"""The commands that read or trim what a state directory keeps: `log` (the jobs and their
verdicts, as `git bisect log`), `build-log` (a commit's kept build log) and `gc` (kept binaries,
builds and logs beyond the size caps)."""

from __future__ import annotations

from pathlib import Path

import click

from bisectbot.cli.guard import EXIT_OK, guard
from bisectbot.cli.options import json_option, repo_option, state_option
from bisectbot.cli.terminal import summary_width
from bisectbot.cli.wiring import default_state_dir, load, open_state, state_of, write_json
from bisectbot.config import load_config
from bisectbot.errors import BisectbotError
from bisectbot.inert import one_line, visible
from bisectbot.jobs import lifecycle as jobs
from bisectbot.jobs.retention import parse_size


def _size(value: str | None) -> int | None:
    """--max-size: bytes, or a click error naming the value."""
    if value is None:
        return None
    try:
        return parse_size(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--max-size") from None


@click.command("log")
@click.argument("config", type=click.Path())
@state_option
@json_option
def log_command(config: str, state_dir: str | None, json_path: str | None) -> None:
    """What was tested in the state directory, as `git bisect log`: each job (bisect GOOD..BAD
    or test), oldest first, with one line per commit: verdict, runs and when."""

    from bisectbot.jobs.history import job_log
    from bisectbot.records.joblog import log_text

    def body() -> int:
        cfg = load_config(config)
        with state_of(cfg, state_dir, existing=True) as state:
            entries = job_log(state.store)
            root = state.root
        if json_path != "-":
            click.echo(log_text(entries, summary_width(), where=str(root)), nl=False)
        write_json(json_path, {"state": str(root), "jobs": [e.to_json() for e in entries]})
        return EXIT_OK

    guard(body)


@click.command("build-log")
@click.argument("config", type=click.Path())
@click.option("--commit", "ref", required=True, help="The commit (ref) whose build log to show.")
@repo_option
@state_option
def build_log(config: str, ref: str, repo: str | None, state_dir: str | None) -> None:
    """Print the kept build log of a commit (e.g. one the bisect skipped)."""
    from bisectbot.jobs.history import build_log_text, kept_build

    def body() -> int:
        cfg = load(config, repo)
        with state_of(cfg, state_dir, existing=True) as state:
            sha, rec = kept_build(jobs.Session(cfg, state, config_path=config), ref)
            notes = f" ({rec.notes})" if rec.notes else ""
            click.echo(
                f"# {sha} build {rec.status} (build variant {rec.variant}) in {rec.seconds:.1f} s "
                f"{one_line(rec.reason + notes)}".rstrip()
            )
            click.echo(visible(build_log_text(sha, rec), keep="\n\t"))  # what the build printed, escapes shown
        return 0

    guard(body)


@click.command()
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
    from bisectbot.jobs.gc import collect, describe, storage_caps

    def body() -> int:
        cfg = load_config(config)
        root = Path(state_dir) if state_dir else default_state_dir(cfg)
        if not root.is_dir():
            raise BisectbotError(f"state directory {root} does not exist: nothing to collect")
        caps = storage_caps(cfg, keep_binaries=keep_binaries, max_bytes=max_size)
        with open_state(root) as state:
            result = collect(state, caps, dry_run=dry_run)
        for item in result.removed:
            click.echo(f"{'would remove' if dry_run else 'removed'} {describe(item)}")
        if not caps.any:
            click.echo(f"no caps: give --keep-binaries or --max-size, or set storage: in {config}", err=True)
        click.echo(f"{root}: {result.summary()}")
        return 0

    guard(body)
