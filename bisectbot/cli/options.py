"""The options many commands share (--state, --reset-state, --repo, --json, --markdown, --quiet,
--color, --arms), defined once so that every command spells, documents and checks them alike."""

from __future__ import annotations

from typing import Any, Callable

import click

from bisectbot.cli.terminal import COLOR_MODES


def reset_state_given() -> bool:
    """Whether --reset-state was given (it is shared by every command that takes --state)."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.meta.get("bisectbot.reset_state"))


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
quiet_option = click.option("--quiet", "-q", is_flag=True, help="No progress output (`test`: its summary in one line).")
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
html_option = click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False),
    help="Also write one self-contained HTML page with the report and its charts (SVG, no script).",
)
reference_option = click.option(
    "--reference",
    "reference_how",
    metavar="config|good|REF",
    default="config",
    show_default=True,
    help="What the commits are judged against: the config's reference, `good` (like the good end: a "
    "control sample measured at --good, or at --bad with --find fixed), or REF (like that commit).",
)
arms_option = click.option(
    "--arms/--no-arms",
    default=True,
    show_default=True,
    help="Also test the config's cross-check arms (each builds and starts a server).",
)


# Parameters naming a file a command writes its output to: checked before the command starts.
OUTPUT_PARAMS = ("json_path", "md_path", "html_path")
