"""Sweeps with a real flaky program: cut-short and empty outputs are rerun, never counted;
crashes and timeouts are recorded; seeds are consumed in order whatever finishes first."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from bisectbot.config import Config
from bisectbot.edges.procs import clean_env, run
from bisectbot.edges.storage import RunRecord
from bisectbot.pipeline.sweep import run_seed, sweep

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


def make_config(tmp_path: Path) -> tuple[Config, list[str]]:
    script = tmp_path / "flaky.py"
    script.write_text(FLAKY)
    (tmp_path / "tries").mkdir()
    cfg = Config.model_validate({
        "name": "flaky",
        "repo": {"path": str(tmp_path)},
        "build": {"targets": ["x"], "binaries": {"binary": ["x"]}},
        "run": {"argv": [sys.executable, str(script), "{seed}", str(tmp_path / "tries")],
                "timeout": 1.0, "retries": 3, "jobs": 4},
        "parse": {"prefix": "bcdbc", "min_tokens": 2, "eos": "h", "complete_suffix": "\n\n\n\n"},
        "statistic": {"condition": {"position": 0, "token": "f"}, "outcome": {"position": 1}},
        "reference": {"probs": {"e": 0.5, "g": 0.5}},
    })
    return cfg, cfg.run.argv


def test_cut_and_empty_outputs_are_rerun_not_counted(tmp_path: Path) -> None:
    cfg, argv = make_config(tmp_path)
    records = {s: run_seed(cfg, argv, {}, s, tmp_path, clean_env()) for s in range(1, 11)}
    # seed 3, 6: empty once, then complete; seed 1, 4, 10: cut twice, then complete
    assert records[3].status == "ok" and records[3].attempts == 2
    assert records[4].status == "ok" and records[4].attempts == 3
    assert records[2].status == "ok" and records[2].attempts == 1
    assert records[1].tokens is not None and records[1].tokens[:2] == tuple("eg")
    # seed 9: cut every time → incomplete after 1 + retries attempts, no tokens
    assert records[9].status == "incomplete" and records[9].attempts == 4 and records[9].tokens is None
    assert records[8].status == "crash" and records[8].exit_code == 3
    assert records[7].status == "timeout"


def test_sweep_consumes_in_seed_order_and_stores_everything(tmp_path: Path) -> None:
    cfg, argv = make_config(tmp_path)
    stored: dict[int, RunRecord] = {}
    consumed: list[int] = []

    def consume(rec: RunRecord) -> bool:
        consumed.append(rec.seed)
        return len(consumed) == 15

    out = sweep(range(1, 100), {}, lambda s: run_seed(cfg, argv, {}, s, tmp_path, clean_env()),
                consume, lambda r: stored.__setitem__(r.seed, r), jobs=4)
    assert consumed == list(range(1, 16))
    assert out.stopped and out.consumed == 15
    assert set(range(1, 16)) <= set(stored)          # in-flight runs are kept, not dropped
    assert out.retried == sum(r.attempts - 1 for r in stored.values())
    # replay: everything comes from `done`, nothing is executed
    replayed: list[int] = []
    out2 = sweep(range(1, 100), stored, lambda s: pytest.fail(f"seed {s} executed again"),
                 lambda r: replayed.append(r.seed) or len(replayed) == 15, lambda r: None, jobs=4)
    assert replayed == consumed and out2.executed == 0


def test_children_never_see_credentials(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_secret1")
    monkeypatch.setenv("BISECTBOT_APP_PRIVATE_KEY", "secret2")
    monkeypatch.setenv("GH_ENTERPRISE_TOKEN", "secret3")
    res = run([sys.executable, "-c", "import os; print(sorted(os.environ.items()))"],
              env=clean_env(), timeout=30)
    assert "secret" not in res.stdout and "PATH" in res.stdout


def test_secrets_named_by_the_config_are_dropped_whatever_their_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from bisectbot.github.client import GitHubSettings, make_publisher

    monkeypatch.setenv("LLAMA_BOT_PAT", "ghp_plainname")
    assert "LLAMA_BOT_PAT" in clean_env()  # nothing in the name says it is a credential ...
    make_publisher(GitHubSettings(repo="o/r", token_env="LLAMA_BOT_PAT"))
    assert "LLAMA_BOT_PAT" not in clean_env()  # ... but the config said so
