"""The one run path, with a real flaky program: cut-short and empty outputs are rerun, never
counted; crashes and timeouts are recorded; runs come out in seed order whatever finishes
first; stored runs are replayed without executing anything; runs in flight are kept."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from bisectbot.config import Config
from bisectbot.judge import sweep
from bisectbot.judge.sweep import ProgramExecutor, RunStream
from bisectbot.processes.procs import clean_env, run
from bisectbot.records.commits import RunRecord

# Prints like llama-speculative: "\n\nbcdbc<tokens>\n\n\n\n". Per seed, the first attempts are
# cut short (empty, or missing the tail), as its logging thread does at exit with status 0.
FLAKY = textwrap.dedent("""
    import pathlib, sys, time
    seed = int(sys.argv[1]); tries = pathlib.Path(sys.argv[2]) / f"{seed}.tries"
    n = int(tries.read_text()) + 1 if tries.exists() else 1
    tries.write_text(str(n))
    full = "\\n\\nbcdbc" + "fegab"[seed % 3:] [:2] + "ab" + "\\n\\n\\n\\n"
    if seed % 10 == 9:             # always cut: never becomes an outcome
        sys.stdout.write(full[:7]); sys.exit(0)
    if seed % 10 == 8:
        sys.exit(3)                # a crash
    if seed % 10 == 7:
        time.sleep(30)             # a hang
    if seed % 3 == 0 and n == 1:
        sys.exit(0)                # empty stdout, exit 0
    if seed % 3 == 1 and n <= 2:
        sys.stdout.write(full[:-3]); sys.exit(0)   # cut tail
    sys.stdout.write(full)
""")


def make_config(tmp_path: Path) -> tuple[Config, ProgramExecutor]:
    script = tmp_path / "flaky.py"
    script.write_text(FLAKY)
    (tmp_path / "tries").mkdir()
    cfg = Config.model_validate(
        {
            "name": "flaky",
            "repo": {"path": str(tmp_path)},
            "build": {"targets": ["x"], "binaries": {"binary": ["x"]}},
            "run": {
                "argv": [sys.executable, str(script), "{seed}", str(tmp_path / "tries")],
                "timeout": 1.0,
                "retries": 3,
                "jobs": 4,
            },
            "parse": {"prefix": "bcdbc", "min_tokens": 2, "eos": "h", "complete_suffix": "\n\n\n\n"},
            "statistic": {"condition": {"position": 0, "token": "f"}, "outcome": {"position": 1}},
            "reference": {"probs": {"e": 0.5, "g": 0.5}},
        }
    )
    executor = ProgramExecutor(
        cfg.run.argv or [], {}, run_cfg=cfg.run, parse_cfg=cfg.parse, workdir=tmp_path, env=clean_env()
    )
    return cfg, executor


class Refuse:
    """An executor that must not be asked: every run is stored already."""

    def run(self, seed: int) -> RunRecord:
        pytest.fail(f"seed {seed} executed again")

    def close(self) -> None:
        pass


def test_cut_and_empty_outputs_are_rerun_not_counted(tmp_path: Path) -> None:
    cfg, executor = make_config(tmp_path)
    records = {s: executor.run(s) for s in range(1, 11)}
    # seed 3, 6: empty once, then complete; seed 1, 4, 10: cut twice, then complete
    assert records[3].status == "ok" and records[3].attempts == 2
    assert records[4].status == "ok" and records[4].attempts == 3
    assert records[2].status == "ok" and records[2].attempts == 1
    assert records[1].tokens is not None and records[1].tokens[:2] == tuple("eg")
    # seed 9: cut every time → incomplete after 1 + retries attempts, no tokens
    assert records[9].status == "incomplete" and records[9].attempts == 4 and records[9].tokens is None
    assert records[8].status == "crash" and records[8].exit_code == 3
    assert records[7].status == "timeout"


def test_a_cut_output_that_shows_enough_is_read_with_cut_output_read(tmp_path: Path) -> None:
    """parse.cut_output: read: a cut tail that still shows the two tokens the statistic reads is
    not run again, and gives the same observation as the seed's complete output; an empty one,
    or one that shows too little, is still rerun."""
    cfg, strict = make_config(tmp_path)
    reading = ProgramExecutor(
        cfg.run.argv or [],
        {},
        run_cfg=cfg.run,
        parse_cfg=cfg.parse.model_copy(update={"cut_output": "read"}),
        workdir=tmp_path,
        env=clean_env(),
    )
    read = {s: reading.run(s) for s in (1, 3, 4, 9)}
    (tmp_path / "tries").mkdir(exist_ok=True)
    for tries in (tmp_path / "tries").iterdir():
        tries.unlink()
    complete = {s: strict.run(s) for s in (1, 4)}
    assert read[1].attempts == 1 and read[4].attempts == 1  # "…fegab"[:4] cut: "eg" + "ab" shown
    for seed in (1, 4):
        assert read[seed].tokens is not None and complete[seed].tokens is not None
        assert read[seed].tokens[:2] == complete[seed].tokens[:2] and complete[seed].attempts == 3
    assert read[3].status == "ok" and read[3].attempts == 2  # empty: rerun
    assert read[9].status == "incomplete"  # "\n\nbcdbc" shows no token at all


def test_runs_come_in_seed_order_and_everything_is_stored(tmp_path: Path) -> None:
    cfg, executor = make_config(tmp_path)
    stored: dict[int, RunRecord] = {}
    consumed: list[int] = []
    with RunStream(range(1, 100), {}, executor, lambda rs: stored.update({r.seed: r for r in rs}), jobs=4) as stream:
        for rec in stream:
            consumed.append(rec.seed)
            if len(consumed) == 15:
                break
    assert consumed == list(range(1, 16))
    assert set(range(1, 16)) <= set(stored)  # in-flight runs are kept, not dropped
    assert stream.executed == len(stored) and stream.executed < 15 + 4
    assert stream.retried == sum(r.attempts - 1 for r in stored.values()) > 0
    # replay: everything comes from storage, nothing is executed, the same sequence
    replayed: list[RunRecord] = []
    with RunStream(range(1, 100), stored, Refuse(), lambda r: pytest.fail("stored again"), jobs=4) as again:
        for rec in again:
            replayed.append(rec)
            if len(replayed) == 15:
                break
    assert [r.seed for r in replayed] == consumed and again.executed == 0
    assert all(r is stored[r.seed] for r in replayed)


def test_a_partly_stored_sequence_resumes_where_storage_ends(tmp_path: Path) -> None:
    cfg, executor = make_config(tmp_path)
    first: dict[int, RunRecord] = {}
    with RunStream(range(1, 7), {}, executor, lambda rs: first.update({r.seed: r for r in rs}), jobs=1) as stream:
        assert [r.seed for r in stream] == [1, 2, 3, 4, 5, 6]
    stored = {s: first[s] for s in (1, 2, 3)}  # as if killed after seed 3
    ran: list[int] = []
    with RunStream(range(1, 7), stored, executor, lambda rs: ran.extend(r.seed for r in rs), jobs=2) as stream:
        assert [r.seed for r in stream] == [1, 2, 3, 4, 5, 6]
    assert sorted(ran) == [4, 5, 6] and stream.executed == 3


class Instant:
    """An executor whose runs finish at once: every seed `ok`."""

    def run(self, seed: int) -> RunRecord:
        return RunRecord(seed, "ok", ("e",), 0, 0.001, 1, 0, "")

    def close(self) -> None:
        pass


def test_runs_are_stored_in_batches_and_all_of_them_by_the_end(monkeypatch: pytest.MonkeyPatch) -> None:
    """One storage transaction per batch, not per run (issue 26), and leaving the stream
    stores the rest: even a consumer that stops early leaves nothing it was handed unstored."""
    monkeypatch.setattr(sweep, "FLUSH_SECONDS", 3600.0)  # batches by count only: deterministic
    batches: list[list[int]] = []
    with RunStream(range(1, 1001), {}, Instant(), lambda rs: batches.append([r.seed for r in rs]), jobs=2) as stream:
        handed = [r.seed for r in stream]
    stored = [s for b in batches for s in b]
    assert handed == list(range(1, 1001)) and stream.executed == 1000
    assert sorted(stored) == sorted(set(stored)) == handed
    assert all(len(b) <= sweep.FLUSH_RUNS + 2 for b in batches)  # a batch is stored once it has FLUSH_RUNS
    assert len(batches) <= stream.executed // sweep.FLUSH_RUNS + 2


def test_a_consumer_that_stops_leaves_its_runs_stored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sweep, "FLUSH_SECONDS", 3600.0)
    batches: list[list[int]] = []
    with RunStream(range(1, 1001), {}, Instant(), lambda rs: batches.append([r.seed for r in rs]), jobs=2) as stream:
        for rec in stream:
            if rec.seed == 45:  # mid-batch: 32 stored, 13 handed out and not stored yet
                break
    stored = sorted(s for b in batches for s in b)
    assert stored[:45] == list(range(1, 46)) and stored == list(range(1, stream.executed + 1))


def test_runs_wait_at_most_flush_seconds_to_be_stored(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sweep, "FLUSH_SECONDS", 0.0)  # every run is older than that: stored each time
    batches: list[list[int]] = []
    with RunStream(range(1, 21), {}, Instant(), lambda rs: batches.append([r.seed for r in rs]), jobs=1) as stream:
        for rec in stream:
            assert rec.seed in {s for b in batches for s in b}  # stored before it is handed out
    assert all(len(b) == 1 for b in batches)


def test_children_never_see_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_secret1")
    monkeypatch.setenv("BISECTBOT_APP_PRIVATE_KEY", "secret2")
    monkeypatch.setenv("GH_ENTERPRISE_TOKEN", "secret3")
    res = run([sys.executable, "-c", "import os; print(sorted(os.environ.items()))"], env=clean_env(), timeout=30)
    assert "secret" not in res.stdout and "PATH" in res.stdout


def test_secrets_named_by_the_config_are_dropped_whatever_their_name(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cfg, _ = make_config(tmp_path)
    cfg = Config.model_validate(
        {**cfg.model_dump(), "github": {"repo": "o/r", "token_env": "LLAMA_BOT_PAT", "webhook_secret_env": "HOOK_WORD"}}
    )
    monkeypatch.setenv("LLAMA_BOT_PAT", "ghp_plainname")
    monkeypatch.setenv("HOOK_WORD", "plain")
    assert {"LLAMA_BOT_PAT", "HOOK_WORD"} <= set(clean_env())  # nothing in the names says "secret" ...
    kept = clean_env(drop=cfg.secret_env_names)
    assert "LLAMA_BOT_PAT" not in kept and "HOOK_WORD" not in kept  # ... but the config said so
    assert "PATH" in kept
