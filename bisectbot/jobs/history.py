"""What a state directory recorded, read back for the user: every job with its verdicts
(`bisectbot log`) and a commit's kept build and its log (`bisectbot build-log`).

Read only: nothing here builds, runs or writes; a missing record is one BisectbotError line."""

from __future__ import annotations

import re
from pathlib import Path

from bisectbot.errors import BisectbotError
from bisectbot.jobs.lifecycle import Session
from bisectbot.records.commits import BuildRecord
from bisectbot.records.joblog import LoggedJob, logged_job
from bisectbot.state.storage import Store


def job_log(store: Store) -> list[LoggedJob]:
    """Every job, oldest first, each with the verdicts it reached: what `bisectbot log` prints."""
    return [
        logged_job(row.id, row.status, row.args, row.result, created, updated, store.verdict_log(row.id))
        for row, created, updated in store.job_log()
    ]


def kept_build(session: Session, ref: str) -> tuple[str, BuildRecord]:
    """The commit REF names and its stored build under this config's build key.

    A full sha with a stored build needs no repository: the command a failed build prints
    works even when the checkout has moved or --repo was given."""
    store = session.state.store
    key = session.runner.builder.key(session.cfg.build)
    rec = store.build(key, ref) if re.fullmatch(r"[0-9a-f]{40}", ref) else None
    sha = ref if rec is not None else session.workspace.resolve(ref)
    rec = rec or store.build(key, sha)
    if rec is None:
        raise BisectbotError(f"no build of {sha[:12]} is recorded in {session.state.root}")
    return sha, rec


def build_log_text(sha: str, rec: BuildRecord) -> str:
    """The kept build log of a build, or an error saying it is gone and how to get a new one."""
    if not Path(rec.log).is_file():
        raise BisectbotError(
            f"the build log of {sha[:12]}, {rec.log}, is gone (removed by `bisectbot gc` "
            "or by hand); build the commit again with `bisectbot test` to get a new one"
        )
    return Path(rec.log).read_text(errors="replace")
