"""Benchmark: does a GitHub write outage slow a bisect? The same `/bisect` job on the same demo
history, handled by the bot against the GitHub stand-in (tests/ghserver.py), once with GitHub up
and once while every POST/PATCH answers 502; wall times side by side and their ratio.

    python bench/bench_outage.py [--commits 24] [--reps 2]

Each job runs in a fresh state directory (so both build everything); the outage run measures the
job only, not the later posting of its result when GitHub answers again. Target: ≤ 1.2×.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from bisectbot.bot.bot import Bot  # noqa: E402
from bisectbot.config import load_config  # noqa: E402
from bisectbot.demo import generate_demo  # noqa: E402
from bisectbot.github.client import GitHubClient, RetryPolicy  # noqa: E402
from bisectbot.state.statedir import StateDir  # noqa: E402

from ghserver import BOT_LOGIN, BOT_TOKEN, FULL_NAME, ISSUE, make_standard_server  # noqa: E402

WRITES = (("POST", r".*/comments"), ("PATCH", r".*/comments/\d+"), ("POST", r".*/reactions"))


def one_job(tmp: Path, repo_config: Path, good: str, outage: bool) -> float:
    """Seconds for the bot to handle one `/bisect` command to a stored result."""
    gh = make_standard_server()
    try:
        data = yaml.safe_load(repo_config.read_text())
        data["github"] = {
            "repo": FULL_NAME,
            "api_url": gh.base_url,
            "html_url": gh.html_root,
            "token_env": "BENCH_TOKEN",
            "bot_login": BOT_LOGIN,
            "issue": ISSUE,
            "progress_interval": 0,
            "retry_give_up_after": 2,
            "retry_backoff": 0.01,
            "retry_max_wait": 0.05,
        }
        config = tmp / f"bot-{outage}.yaml"
        config.write_text(yaml.safe_dump(data, sort_keys=False))
        cfg = load_config(config)
        gh.add_comment(FULL_NAME, ISSUE, "maintainer", f"/bisect good={good} bad=main")
        if outage:
            for method, path in WRITES:
                gh.fail(method, path, "502", times=10_000_000)
        client = GitHubClient(
            FULL_NAME,
            api_url=gh.base_url,
            token=BOT_TOKEN,
            bot_login=BOT_LOGIN,
            retry=RetryPolicy(give_up_after=2, backoff_base=0.01, max_wait=0.05),
        )
        with StateDir(tmp / f"state-{outage}-{time.monotonic_ns()}") as state:
            bot = Bot(cfg, str(config), state, client)
            start = time.monotonic()
            bot.poll(ISSUE)  # the job runs on this thread
            took = time.monotonic() - start
            bot.outbox.close()
        return took
    finally:
        gh.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=24)
    parser.add_argument("--reps", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-outage-") as name:
        tmp = Path(name)
        history = generate_demo(tmp / "demo", n_commits=args.commits, seed=3)
        data = yaml.safe_load(history.config.read_text())
        data["repo"]["path"] = str(history.repo)
        repo_config = tmp / "demo.yaml"
        repo_config.write_text(yaml.safe_dump(data, sort_keys=False))
        times: dict[bool, list[float]] = {False: [], True: []}
        for _ in range(args.reps):  # interleaved, so drift on a busy machine hits both alike
            for outage in (False, True):
                times[outage].append(one_job(tmp, repo_config, history.good, outage))
    up, down = statistics.median(times[False]), statistics.median(times[True])
    print(f"one /bisect job on a {args.commits}-commit demo history, median of {args.reps} (s):")
    print(f"  GitHub up:                      {up:7.1f}  {times[False]}")
    print(f"  every POST/PATCH answering 502: {down:7.1f}  {times[True]}")
    print(f"  ratio {down / up:.2f} (target ≤ 1.2)")


if __name__ == "__main__":
    main()
