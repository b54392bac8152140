"""The GitHub bot's commands: `watch` (poll an issue), `serve` (receive webhooks), `check` (a
fix still holds at a ref; alarm and bisect when not) and `publish` (post what GitHub refused).
Each wires a config, a state directory and a client into bot/bot.py."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from bisectbot.cli.guard import EXIT_GITHUB, EXIT_OK, TEST_EXIT, guard
from bisectbot.cli.options import json_option, quiet_option, state_option
from bisectbot.cli.terminal import Terminal, print_summary, summary_width
from bisectbot.cli.wiring import default_state_dir, open_state, preflight, write_json
from bisectbot.config import Config, load_config
from bisectbot.errors import BisectbotError
from bisectbot.report.text import state_line

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
    """--issue, else the config's github.issue; an error when required and neither gives one."""
    issue = issue or (cfg.github.issue if cfg.github else None)
    if issue is None and required:
        raise BisectbotError(f"{cfg.source_path}: no --issue given and no github.issue in the config")
    return issue


@click.command()
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
    from bisectbot.bot.bot import Bot
    from bisectbot.bot.serve import watch as run_watch

    def body() -> int:
        cfg, root, client, terminal = _bot(config, state_dir, quiet)
        preflight(cfg)
        if cfg.github is None:
            raise BisectbotError(f"{config}: watch needs a github: section (repo, token_env, …)")
        number = _issue(cfg, issue, required=True)
        assert number is not None
        with open_state(root) as state:
            bot = Bot(cfg, config, state, client, terminal)
            try:
                run_watch(bot, number, once=once, interval=interval or cfg.github.poll_interval)
                failed = bot.owed()
            finally:
                bot.outbox.close()  # on a stop too: the writes in flight are finished
        return EXIT_GITHUB if failed else EXIT_OK

    guard(body)


@click.command()
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

    from bisectbot.bot.serve import BotServer

    def body() -> int:
        cfg, root, client, terminal = _bot(config, state_dir, quiet)
        preflight(cfg)
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

    guard(body)


@click.command()
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
    from bisectbot.bot.bot import Bot
    from bisectbot.report.text import bisect_text, commit_text

    def body() -> int:
        cfg, root, client, terminal = _bot(config, state_dir, quiet)
        preflight(cfg)
        number = _issue(cfg, issue, required=False)
        the_ref = ref or (cfg.github.default_ref if cfg.github else "HEAD")
        with open_state(root) as state:
            held = state.store.stored("", ())  # the ref is resolved inside the check: totals only
            terminal.line(state_line(root, held.runs, held.builds))
            bot = Bot(cfg, config, state, client, terminal)
            try:
                out = bot.run_check(the_ref, number)
                # the comments go out on the outbox's threads: wait for GitHub as long as a call may
                out.published = bot.settle(cfg.github.retry_give_up_after if cfg.github else 0.0)[1] == 0
            finally:
                bot.outbox.close()
        terminal.close()
        if json_path != "-":
            if out.pull is not None:
                click.echo(f"{the_ref} = {out.test.commit[:12]} (built and run in the sandbox: {out.sandbox})")
            print_summary(commit_text(out.test, summary_width()))
            if out.bisect:
                click.echo()
                print_summary(bisect_text(out.bisect, summary_width()))
            elif out.bisect_error:
                click.echo(f"bisect from the last known good commit stopped: {out.bisect_error}")
        write_json(json_path, out.to_json())
        if not out.published:
            return EXIT_GITHUB
        return TEST_EXIT[out.test.verdict]

    guard(body)


@click.command()
@click.argument("config", type=click.Path())
@state_option
@quiet_option
def publish(config: str, state_dir: str | None, quiet: bool) -> None:
    """Post results GitHub refused earlier (kept in the state database), each in its job comment."""
    from bisectbot.bot.bot import Bot

    def body() -> int:
        cfg, root, client, terminal = _bot(config, state_dir, quiet)
        with open_state(root) as state:
            bot = Bot(cfg, config, state, client, terminal)
            try:
                posted, failed = bot.settle(cfg.github.retry_give_up_after if cfg.github else 0.0)
            finally:
                bot.outbox.close()
        click.echo(f"published {posted} result(s); {failed} still unpublished", err=True)
        return EXIT_GITHUB if failed else EXIT_OK

    guard(body)
