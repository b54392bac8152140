"""Commits that run the very same program (byte-identical binaries, the same command and input
files: the same run key) share their tests against the reference: the confirmation does not test
the culprit's parent again when a commit running its program already passed. Real git, real
cmake builds, the real CLI."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from eras import Era, EraHistory, _files, command, config, write_history

from conftest import TOOLCHAIN, bisectbot_argv, needs, subprocess_env

pytestmark = pytest.mark.heavy  # real cmake bisects, ~10 s each: after the default suite (README: Tests)

BUILD = {"targets": ["prog"], "binaries": {"binary": ["bin/prog"]}}


def history(dest: Path, eras: list[Era], *, code: bool, docs_at: int | None = None) -> EraHistory:
    """One commit per era, each appending a line to util.cpp: a comment (the binary stays the
    same), or with `code` a function of its own (another binary, the same behaviour). The commit
    at `docs_at` only adds a README (the search skips it: it cannot change the binary)."""
    line = "int tidy_up_{k}() {{ return {k}; }}\n" if code else "// tidy-up {k}\n"

    def files(i: int, era: Era) -> dict[str, str]:
        out = _files(era, 0)  # version 0 throughout: only the appended lines differ
        docs = docs_at is not None and i >= docs_at
        out["src/util.cpp"] += "".join(line.format(k=k) for k in range(i - 1 if docs else i))
        if docs:
            out["README"] = "docs\n"
        return out

    return write_history(dest, eras, files=files)


def bisect(
    tmp_path: Path, eras: list[Era], *, code: bool, strategy: str = "plain", docs_at: int | None = None
) -> tuple[dict, EraHistory]:
    hist = history(tmp_path, eras, code=code, docs_at=docs_at)
    cfg = config(hist, tmp_path, build=BUILD, run={"argv": command()})
    proc = subprocess.run(
        bisectbot_argv(
            "bisect", str(cfg), "--good", hist.commits[0], "--bad", "main", "--strategy", strategy, "--no-arms"
        )
        + ["--state", str(tmp_path / "st"), "--json", "-"],
        capture_output=True,
        text=True,
        timeout=600,
        env=subprocess_env(CI="1"),
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), hist


def roles(report: dict, sha: str) -> set[str]:
    return {v["role"] for v in report["verdicts"] if v["sha"] == sha and v.get("arm", "main") == "main"}


GOOD, BAD = Era(), Era(defect=True)


@needs(*TOOLCHAIN)
@pytest.mark.parametrize("strategy", ["plain", "reference"])
def test_a_parent_running_the_good_ends_program_is_not_tested_again(tmp_path: Path, strategy: str) -> None:
    # commits 0-3 build the good end's binary (comments only), 4 adds a README (skipped by the
    # search), 5 brings the defect, 6-7 comments. Reference steps place commit 3, printing the
    # good end's outputs seed for seed, beside it (GOOD-SIDE): a placement, which must not
    # count as the same program tested the other way (it did on the naive bench)
    report, hist = bisect(tmp_path, [GOOD] * 5 + [BAD] * 3, code=False, strategy=strategy, docs_at=4)
    culprit, parent, good = hist.commits[5], hist.commits[4], hist.commits[0]
    assert report["status"] == "found" and report["first_bad"] == culprit
    # the quick steps never tested the parent against the reference; the good end's GOOD stands for it
    assert "retest-parent" not in roles(report, parent)
    assert "confirm-parent" in roles(report, parent)  # the change test still runs it on fresh seeds
    keys = {v["sha"]: v["program"] for v in report["verdicts"] if v.get("program")}
    assert keys[parent] == keys[good] != keys[culprit]
    said = " ".join(report["assumptions"])
    assert f"{parent[:12]} was not tested against the reference itself" in said and good[:12] in said
    assert report["confidence"] >= 0.99


@needs(*TOOLCHAIN)
def test_a_parent_whose_binary_differs_is_tested_on_fresh_seeds(tmp_path: Path) -> None:
    # every commit adds a function: no two binaries alike
    report, hist = bisect(tmp_path, [GOOD] * 4 + [BAD] * 4, code=True)
    culprit, parent = hist.commits[4], hist.commits[3]
    assert report["status"] == "found" and report["first_bad"] == culprit
    assert "retest-parent" in roles(report, parent)
    assert not any("was not tested against the reference itself" in a for a in report["assumptions"])
