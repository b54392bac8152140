"""`watch` and `serve`: how commands reach the bot — polling an issue, or webhooks over HTTP.

Both hand each claimed command to `Bot.handle_claimed` on one worker (jobs run one at a time)
and post whatever results are still owed (`Bot.publish_pending`) on every round.
"""

from __future__ import annotations

import logging
import queue
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from bisectbot.bot.bot import Bot
from bisectbot.bot.memory import BotMemory
from bisectbot.config import Config
from bisectbot.errors import GitHubError
from bisectbot.events import Observer
from bisectbot.github.commands import CancelCommand, parse_comment
from bisectbot.github.issueclient import IssueClient
from bisectbot.state.statedir import StateDir

if TYPE_CHECKING:  # the webhook server (uvicorn) is imported only by a server that starts one
    from bisectbot.bot.webhook import CommentEvent

log = logging.getLogger(__name__)


def watch(bot: Bot, issue: int, *, once: bool, interval: float, stop: threading.Event | None = None) -> None:
    """Poll `issue` for commands: resume claimed ones, post pending results, handle new ones."""
    stop = stop or threading.Event()
    bot.poll_cancels = True
    bot.resume_interrupted()
    while True:
        bot.publish_pending()
        try:
            bot.poll(issue)
        except GitHubError as exc:
            if once:
                bot.settle(bot.gh.retry_give_up_after)
                raise
            log.error("polling #%s failed, trying again in %.0f s: %s", issue, interval, exc)
        if once:
            _, owed = bot.settle(bot.gh.retry_give_up_after)
            if owed:
                log.warning("%d comment(s) still owed to GitHub: posted by the next watch or `bisectbot publish`", owed)
            return
        if stop.wait(interval):
            return


class BotServer:
    """`bisectbot serve`: webhooks in on HTTP threads, jobs run one at a time on a worker thread.

    The HTTP thread verifies, de-duplicates (delivery ids in the state database), claims the
    command and queues its comment id; `/cancel` also reaches the running job at once. On start
    the worker first resumes commands a previous server had claimed.
    """

    def __init__(
        self,
        cfg: Config,
        config_path: str,
        state_dir: Path,
        client: IssueClient,
        secret: bytes,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        terminal: Observer = lambda event: None,
    ):
        from bisectbot.bot.webhook import make_webhook_server

        self.cfg = cfg
        self.state = StateDir(state_dir)
        self.bot = Bot(cfg, config_path, self.state, client, terminal)
        self.jobs: queue.Queue[int | None] = queue.Queue()
        self.error: BaseException | None = None
        self.httpd = make_webhook_server(host, port, secret, self.on_command, BotMemory(self.state.store))
        self._threads: list[threading.Thread] = []

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def on_command(self, event: CommentEvent) -> None:
        """HTTP thread: claim and queue (answer GitHub fast); `/cancel` also flags the job."""
        gh = self.cfg.github
        if gh is not None and event.repo and event.repo.lower() != gh.repo.lower():
            return  # a webhook for another repository
        own = self.bot.is_own(event.login, event.user_type, event.body)
        if isinstance(parse_comment(event.body, event.association, event.login), CancelCommand) and not own:
            self.bot.request_cancel(event.issue, event.login)
        if self.bot.claim(event.comment_id, event.issue, event.login, event.association, event.body, event.user_type):
            self.jobs.put(event.comment_id)

    def _work(self) -> None:
        try:
            self.bot.resume_interrupted()
            self.bot.publish_pending()
            while (item := self.jobs.get()) is not None:
                self.bot.handle_claimed(item)  # ends every command, whatever it raises
                self.bot.publish_pending()
        except BaseException as exc:  # the database itself failed: surfaced by `serve`
            self.error = exc
            log.exception("bisectbot worker stopped")

    def start(self) -> "BotServer":
        worker = threading.Thread(target=self._work, name="bisectbot-worker", daemon=True)
        http = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
        self._threads = [worker, http]
        worker.start()
        http.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.jobs.put(None)
        self._threads[0].join(timeout=600)
        self.bot.outbox.flush(5.0)
        self.bot.outbox.close()
        self.state.close()
