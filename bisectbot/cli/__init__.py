"""Command line: thin click commands over the library; wiring only, no logic of its own.

`main` is the command group (the `bisectbot` script, `python -m bisectbot.cli`); the commands live
by who uses them: bisecting.py (bisect, test, reference), state.py (log, build-log, gc),
starting.py (demo, init, doctor, fixtures; init's work is bisectbot/newconfig/),
serving.py (the GitHub bot's watch, serve, check, publish).
Under them: guard.py (exit codes, every error one line), options.py (the shared options) and
wiring.py (config and state directory opened, summary and JSON written).

Exit codes (documented in README.md, relied on by scripts):
  0  bisect: culprit found and confirmed · test: GOOD
  1  test: BAD · bisect: clean (--scan found no departure, or nothing changed between the ends)
  2  bad input: config, ref, git, state directory (one line on stderr says what and where)
  3  bisect: ambiguous or unconfirmed · test: INCONCLUSIVE
  4  bisect: an endpoint does not test as given · test: SKIP (cannot build or run)
  5  GitHub: publishing failed after retries (the result stays in the state database)
  130 interrupted (Ctrl-C); rerun the same command to resume
  143, 129 stopped by SIGTERM, SIGHUP: the same way out as Ctrl-C (cli/guard.py)
"""

from __future__ import annotations

import click

from bisectbot import __version__
from bisectbot.cli.bisecting import bisect, reference, test
from bisectbot.cli.guard import OneLineGroup
from bisectbot.cli.serving import check, publish, serve, watch
from bisectbot.cli.starting import demo, doctor_command, fixtures, init
from bisectbot.cli.state import build_log, gc, log_command


@click.group(
    cls=OneLineGroup,
    commands=[
        bisect,
        test,
        reference,
        log_command,
        build_log,
        gc,
        demo,
        init,
        doctor_command,
        fixtures,
        watch,
        serve,
        check,
        publish,
    ],
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(__version__, prog_name="bisectbot")
def main() -> None:
    """Find the commit that changed a sampled distribution, with sequential tests."""
