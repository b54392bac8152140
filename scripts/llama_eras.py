#!/usr/bin/env python3
"""End-to-end across llama.cpp's eras: a local history made of four real trees, judged by the
shipped config unchanged.

    python scripts/llama_eras.py history REPO      # make the history, print its commits as JSON
    python scripts/llama_eras.py e2e [--work DIR]  # make it, then test and bisect with the real CLI
    python scripts/llama_eras.py survey VERSION... # `bisectbot test` each sdist's tree (extending the span)

The trees come from llama-cpp-python sdists (each carries a whole llama.cpp tree under
``vendor/llama.cpp``), fetched once into ``${BISECTBOT_CACHE:-~/.cache/bisectbot}/sdist``:

=========  ===================  ===========================================================
sdist      upstream commit      what changes for bisectbot
=========  ===================  ===========================================================
0.2.55     9731134 2024-03-02   target ``speculative``, LLAMA_* options, old output format
                                (only the generated tokens on stdout), greedy draft: GOOD
0.2.85     398ede5 2024-07-31   target ``llama-speculative``, GGML_* options, stochastic
                                draft (#29975's defects): BAD; ``--cache-type-v f32`` crashes
0.3.2      74d73dc 2024-11-15   after the logging rewrite: prompt echoed on stdout, new --help
0.3.36     0c1e570 2026-10-01   today's flags (``--spec-draft-n-max``, ``-fa off``)
=========  ===================  ===========================================================

Between the trees: ordinary commits (a comment in examples/speculative), docs-only commits and a
commit that breaks the build (repaired by the next). The first BAD commit is the import of the
0.2.85 tree. ``e2e`` checks, with the shipped ``configs/llama-cpp-29975.yaml``, that ``bisectbot
test`` gives GOOD on the 0.2.55 tree and BAD on the three others (each with the build and command
variant its era needs), and that ``bisectbot bisect`` across the history names the 0.2.85
import (status found) with at most ⌈log2 N'⌉ + 2 builds and no walk-back: the three BAD trees
have three different distributions, and a search step that read "unlike the bad end" as GOOD
would stop at a later tree and have to come back. Exit 0 when every check holds.

Each import commit carries the upstream commit's date and short sha (read from the sdist's
``.git/modules/vendor/llama.cpp``), so the history and its reports read like the real one.

``survey``: one commit per given sdist version (oldest first, in the order given), each tested
with the shipped config (``--no-arms``); prints per tree the verdict, the build and command
variant used, and why others did not fit. How to check a new era before extending the config.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from llama_e2e import REPO_ROOT, _bisectbot, _git, cache_dir, checked, fetch_sdist  # noqa: E402

TARGET_FILE = "examples/speculative/speculative.cpp"
# (sdist version, expected verdict, the commits after its tree)
ERAS = [
    ("0.2.55", "good", ["code", "docs", "break", "repair", "code"]),
    ("0.2.85", "bad", ["docs", "code", "code"]),
    ("0.3.2", "bad", ["break", "repair", "docs"]),
    ("0.3.36", "bad", ["code", "docs"]),
]
BREAK_LINE = '#error "bisectbot eras: deliberately broken build"\n'


@dataclass(frozen=True)
class PresetHistory:
    """A history across a real change of one program's distribution, bisected with a config
    that `bisectbot init --llama PROGRAM` writes (no hand edits), against the good end."""

    eras: list[tuple[str, str, list[str]]]  # (sdist version, good|bad, commits after its tree)
    touch: str  # the program's source file the "code" and "break" commits change
    program: str
    init_args: list[str]  # options of `init --llama` (after PROGRAM REPO --good G -o FILE)
    change: str  # what the first bad tree brings, for people
    # why `e2e --history` cannot run it yet (e.g. init_args that `init --llama` does not take yet);
    # "" when it runs


PRESET_HISTORIES = {
    # llama.cpp #9294 "llama : refactor sampling v2" (df270ef74, 2024-09-07) is in 0.3.0's tree
    # and not in 0.2.90's: llama-speculative's token 1 given `f` goes from spread over the
    # letters (top-k not applied in the draft/target path) to e .81 / h .19.
    "sampling-refactor": PresetHistory(
        eras=[
            ("0.2.88", "good", ["code", "docs"]),
            ("0.2.89", "good", ["code", "break", "repair"]),
            ("0.2.90", "good", ["docs", "code"]),
            ("0.3.0", "bad", ["code", "docs"]),
            ("0.3.1", "bad", ["code"]),
            ("0.3.2", "bad", ["docs"]),
        ],
        touch="examples/speculative/speculative.cpp",
        program="llama-speculative",
        init_args=["--reference", "good"],
        change="llama.cpp #9294 (refactor sampling v2), in 0.3.0's tree",
    ),
    # "common : disable repeat penalties by default" (March 2024) is in 0.2.58's tree and not in
    # 0.2.57's: main's default sampling after the prompt `adde` goes from a .44 / f .02 / h .54
    # (repeat penalty 1.1 on the prompt's tokens) to a .56 / h .44 (numpy gives both exactly).
    "repeat-penalty": PresetHistory(
        eras=[
            ("0.2.55", "good", ["code", "docs"]),
            ("0.2.56", "good", ["code", "break", "repair"]),
            ("0.2.57", "good", ["docs"]),
            ("0.2.58", "bad", ["code", "docs"]),
            ("0.2.59", "bad", ["code"]),
            ("0.2.60", "bad", ["docs"]),
        ],
        touch="examples/main/main.cpp",
        program="llama-cli",
        init_args=["--prompt", "adde", "--condition", "none", "--position", "0", "--program-defaults"],
        change="the default repeat penalty 1.1 -> 1.0, in 0.2.58's tree",
    ),
    # The same change seen through llama-server (`server` then): /completion with a seed and no
    # sampling fields takes the server's defaults, which follow common's (verified by hand on
    # 1,000 seeds: 0.2.55 and 0.2.57 a .440 / f .019 / h .541, 0.2.58 a .556 / h .444).
    "server-repeat-penalty": PresetHistory(
        eras=[
            ("0.2.55", "good", ["code", "docs"]),
            ("0.2.56", "good", ["code", "break", "repair"]),
            ("0.2.57", "good", ["docs"]),
            ("0.2.58", "bad", ["code", "docs"]),
            ("0.2.59", "bad", ["code"]),
            ("0.2.60", "bad", ["docs"]),
        ],
        touch="examples/server/server.cpp",
        program="llama-server",
        init_args=["--prompt", "adde", "--condition", "none", "--position", "0", "--program-defaults"],
        change="the default repeat penalty 1.1 -> 1.0, in 0.2.58's tree (llama-server's /completion)",
    ),
    # llama.cpp #5625 "speculative : implement stochastic speculative sampling" (6d341ab6c,
    # 2024-03-05) is in 0.2.56's tree and not in 0.2.55's: llama-speculative's acceptance rate
    # (`accept    = NN.NNN%` on stderr at exit) goes from 76.3% to 36.2% a run (means over the
    # runs that drafted; 1,000 hashed seeds a tree, sd 30.3 and 30.6). Greedy verification with
    # a p_accept 0.5 cut-off on drafting becomes stochastic verification that always drafts
    # n_draft tokens. Both trees build `speculative` with LLAMA_* options (build variant 2) and
    # run the same command (variant 5). Measured and checked by hand in
    # docs/acceptance-rate-notes.md (scripts/acceptance_survey.py).
    "speculative-acceptance": PresetHistory(
        eras=[
            ("0.2.53", "good", ["code", "docs"]),
            ("0.2.54", "good", ["code", "break", "repair"]),
            ("0.2.55", "good", ["docs", "code"]),
            ("0.2.56", "bad", ["code", "docs"]),
            ("0.2.57", "bad", ["code"]),
            ("0.2.58", "bad", ["docs"]),
        ],
        touch="examples/speculative/speculative.cpp",
        program="llama-speculative",
        # the mean acceptance rate against the good end's runs: the preset's number `accept`
        # (read from its line on stderr in every era; `-nan%` when nothing was drafted, 27% of
        # seeds at 0.2.55: no observation), no hand edits
        init_args=["--reference", "good", "--statistic", "mean"],
        change="llama.cpp #5625 (stochastic speculative sampling), in 0.2.56's tree: mean acceptance 76% -> 36%",
    ),
}


def upstream_commit(version: str) -> tuple[str, int]:
    """(short sha, commit time) of the llama.cpp commit the sdist vendors, from the submodule's
    git directory the sdist carries."""
    gitdir = f"llama_cpp_python-{version}/.git/modules/vendor/llama.cpp/"
    with tempfile.TemporaryDirectory() as tmp, tarfile.open(fetch_sdist(version)) as tar:
        tar.extractall(tmp, members=[m for m in tar.getmembers() if m.name.startswith(gitdir)], filter="data")
        res = subprocess.run(
            ["git", "--git-dir", str(Path(tmp) / gitdir), "--work-tree", tmp, "log", "-1", "--format=%h %ct"],
            capture_output=True,
            text=True,
        )
    if res.returncode != 0 or not res.stdout.strip():
        raise SystemExit(f"llama-cpp-python {version}: no upstream commit recorded ({res.stderr.strip()})")
    sha, when = res.stdout.split()
    return sha, int(when)


def _import_tree(repo: Path, version: str) -> None:
    """Replace the work tree by the sdist's vendor/llama.cpp (the next commit records it)."""
    for entry in repo.iterdir():
        if entry.name != ".git":
            shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
    prefix = f"llama_cpp_python-{version}/vendor/llama.cpp/"
    tmp = repo.parent / f".extract-{version}"
    shutil.rmtree(tmp, ignore_errors=True)
    with tarfile.open(fetch_sdist(version)) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
        tar.extractall(tmp, members=members, filter="data")
    for pointer in (tmp / prefix).rglob(".git"):  # submodule pointers ("gitdir: ../../.git/modules/…")
        if pointer.is_file():
            pointer.unlink()
    for entry in (tmp / prefix).iterdir():
        entry.rename(repo / entry.name)
    shutil.rmtree(tmp)


def _change(repo: Path, kind: str, n: int, touch: str = TARGET_FILE) -> str:
    """Make one between-trees change in the work tree; returns its commit subject."""
    target = repo / touch
    area = Path(touch).parent.name
    if kind == "code":
        with open(target, "a", encoding="utf-8") as fh:
            fh.write(f"\n// bisectbot eras: ordinary change {n} (a comment, behaviour unchanged)\n")
        return f"{area} : tidy up ({n})"
    if kind == "docs":
        doc = repo / "docs" / "bisectbot-eras.md"
        doc.parent.mkdir(exist_ok=True)
        with open(doc, "a", encoding="utf-8") as fh:
            fh.write(f"- note {n}: documentation only\n")
        return f"docs : notes ({n})"
    if kind == "break":
        target.write_text(BREAK_LINE + target.read_text())
        return f"{area} : work in progress (does not build)"
    assert kind == "repair"
    target.write_text(target.read_text().replace(BREAK_LINE, "", 1))
    return f"{area} : fix the build"


def build_history(repo: Path, eras: list[tuple[str, str, list[str]]] = ERAS, touch: str = TARGET_FILE) -> dict:
    """The trees with commits between them, in ``repo`` (must not exist). Returns
    ``{"commits": [{"sha", "kind", "subject", "tree"}...], "imports": {version: sha},
    "first_bad": sha or None, "good": sha, "head": sha}``."""
    repo = Path(repo)
    if repo.exists():
        raise SystemExit(f"{repo} already exists")
    repo.mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "master")
    commits, imports, n = [], {}, 0
    for version, _verdict, after in eras:
        upstream, when = upstream_commit(version)
        day = time.strftime("%Y-%m-%d", time.gmtime(when))
        _import_tree(repo, version)
        # --force: the sdist holds exactly what upstream tracks, and older trees' .gitignore
        # patterns (e.g. `build*`) match tracked files such as scripts/build-info.cmake.
        _git(repo, "add", "-A", "--force")
        subject = f"llama.cpp {upstream} ({day}) as vendored by llama-cpp-python {version}"
        _git(repo, "commit", "-q", "--no-verify", "--allow-empty", "-m", subject, date=when)
        sha = _git(repo, "rev-parse", "HEAD")
        imports[version] = sha
        commits.append({"sha": sha, "kind": "import", "subject": subject, "tree": version})
        for hour, kind in enumerate(after, start=1):
            n += 1
            subject = _change(repo, kind, n, touch)
            _git(repo, "add", "-A")
            _git(repo, "commit", "-q", "--no-verify", "-m", subject, date=when + 3600 * hour)
            commits.append({"sha": _git(repo, "rev-parse", "HEAD"), "kind": kind, "subject": subject, "tree": version})
    first_bad = next((imports[v] for v, verdict, _a in eras if verdict == "bad"), None)
    return {
        "commits": commits,
        "imports": imports,
        "first_bad": first_bad,
        "good": commits[0]["sha"],
        "head": commits[-1]["sha"],
    }


def _describe(res: dict) -> str:
    detail = res.get("detail") or {}
    return (
        f"{str(res.get('verdict', '?')).upper()} after {res.get('runs')} runs, build variant "
        f"{detail.get('build_variant')}, run variant {detail.get('variant')}; counts {res.get('counts')}"
        + (f"; {detail.get('reason')}" if detail.get("reason") else "")
    )


def e2e(work: Path) -> int:
    """Make the history, test each tree and bisect it with the real CLI; 0 when all checks hold."""
    start = time.monotonic()
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    hist = build_history(work / "llama.cpp")
    print(
        f"eras: history of {len(hist['commits'])} commits over the trees "
        f"{', '.join(v for v, *_ in ERAS)}; first bad {hist['first_bad'][:12]} (the 0.2.85 import)",
        flush=True,
    )
    config = str(REPO_ROOT / "configs" / "llama-cpp-29975.yaml")
    common = ["--repo", str(work / "llama.cpp"), "--state", str(work / "state")]
    failures = []
    for version, expected, _after in ERAS:
        # The cross-check arm is tried on the oldest tree only, where it must be "not applicable"
        # without touching the main verdict (the 0.3.36 e2e checks it where it applies).
        arms = [] if version == ERAS[0][0] else ["--no-arms"]
        code, res = _bisectbot("test", config, "--commit", hist["imports"][version], *common, *arms)
        print(f"eras: {version} tree: {_describe(res)} (exit {code})", flush=True)
        if res.get("verdict") != expected:
            failures.append(f"the {version} tree tested {res.get('verdict')}, expected {expected}")
        for name, arm in res.get("arms", {}).items():
            print(f"eras: {version} tree, arm {name}: {arm['verdict']} ({arm.get('reason')})", flush=True)
            if arm["verdict"] != "not-applicable":
                failures.append(f"arm {name} on the {version} tree: {arm['verdict']}, expected not-applicable")

    code, rep = _bisectbot("bisect", config, "--good", hist["good"], "--bad", hist["head"], *common, "--no-arms")
    print(
        f"eras: bisect over {len(hist['commits'])} commits: {rep.get('status')} first_bad "
        f"{str(rep.get('first_bad'))[:12]} (expected {hist['first_bad'][:12]}), {rep.get('builds')} builds, "
        f"{rep.get('runs')} runs (exit {code})",
        flush=True,
    )
    for v in rep.get("verdicts", []):
        print(
            f"eras:   {v['role']:>15} {v['commit'][:12]} {v['verdict']:<5} build variant {v.get('build_variant')} "
            f"run variant {v.get('variant')} {v.get('subject', '')[:60]}",
            flush=True,
        )
    if rep.get("first_bad") != hist["first_bad"]:
        failures.append(f"bisect named {rep.get('first_bad')}, expected {hist['first_bad']}")
    if rep.get("status") != "found":
        failures.append(f"bisect status {rep.get('status')}, expected found")
    searched = rep.get("searched") or len(hist["commits"])
    bound = math.ceil(math.log2(searched)) + 2
    if (rep.get("builds") or 0) > bound:
        failures.append(
            f"bisect built {rep.get('builds')} commits, more than ⌈log2 N'⌉ + 2 = {bound} (N' = {searched})"
        )
    strategies = (rep.get("extra") or {}).get("strategies", [])
    if len(strategies) > 1 or len(rep.get("change_points") or []) > 1:
        failures.append(
            f"bisect searched {len(strategies)} times ({', '.join(strategies)}): a boundary was ruled out "
            "and the search walked back"
        )
    cost = rep.get("cost") or {}
    if cost.get("text"):
        print(f"eras: {cost['text']}", flush=True)
    return checked("eras", failures, start)


def e2e_preset(work: Path, which: str) -> int:
    """A PRESET_HISTORIES history: `bisectbot init --llama PROGRAM` writes the config (no hand
    edits), then `bisectbot bisect` across the history must name the first bad tree's import,
    confirmed (exit 0, status found), within its builds bound; 0 when every check holds."""
    spec = PRESET_HISTORIES[which]
    start = time.monotonic()
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    hist = build_history(work / "llama.cpp", spec.eras, spec.touch)
    repo, cfg = work / "llama.cpp", work / f"{which}.yaml"
    print(
        f"eras[{which}]: {len(hist['commits'])} commits over the trees {', '.join(v for v, *_ in spec.eras)}; "
        f"first bad {hist['first_bad'][:12]} ({spec.change})",
        flush=True,
    )
    # init's good-end test and the bisect share the config's default state directory (its
    # build and runs are replayed), under a cache of this work directory's own
    os.environ["XDG_CACHE_HOME"] = str(work / "cache")
    init = subprocess.run(
        [
            sys.executable,
            "-m",
            "bisectbot.cli",
            "init",
            str(repo),
            "--llama",
            spec.program,
            "--good",
            hist["good"],
            "-o",
            str(cfg),
            *spec.init_args,
        ],
        capture_output=True,
        text=True,
    )
    print(f"eras[{which}]: init --llama {spec.program} {' '.join(spec.init_args)}: exit {init.returncode}", flush=True)
    if init.returncode != 0:
        print(init.stdout + init.stderr, flush=True)
        print(f"eras[{which}]: FAILED: init did not write a working config", flush=True)
        return 1
    print(init.stdout.strip(), flush=True)
    code, rep = _bisectbot("bisect", str(cfg), "--good", hist["good"], "--bad", hist["head"])
    failures = []
    print(
        f"eras[{which}]: bisect over {len(hist['commits'])} commits: {rep.get('status')} first_bad "
        f"{str(rep.get('first_bad'))[:12]} (expected {hist['first_bad'][:12]}), {rep.get('builds')} builds "
        f"(bound {rep.get('builds_bound')}), {rep.get('runs')} runs + {rep.get('control_runs')} control runs "
        f"(exit {code})",
        flush=True,
    )
    for v in rep.get("verdicts", []):
        print(
            f"eras[{which}]:   {v['role']:>15} {v['commit'][:12]} {v['verdict']:<10} {v['runs']:>5} runs "
            f"build variant {v.get('build_variant')} run variant {v.get('variant')} {v.get('subject', '')[:50]}",
            flush=True,
        )
    if code != 0 or rep.get("status") != "found":
        failures.append(f"bisect exit {code}, status {rep.get('status')}: {rep.get('message')}")
    if rep.get("first_bad") != hist["first_bad"]:
        failures.append(f"bisect named {rep.get('first_bad')}, expected {hist['first_bad']}")
    bound = rep.get("builds_bound")
    if bound is not None and (rep.get("builds") or 0) > bound:
        failures.append(f"{rep.get('builds')} builds, over the bound {bound}")
    if "like the good end" not in str((rep.get("reference") or {}).get("source")):
        failures.append(f"the report does not say the reference is the good end: {rep.get('reference')}")
    return checked(f"eras[{which}]", failures, start)


def survey(work: Path, versions: list[str]) -> int:
    """`bisectbot test` each version's tree with the shipped config; 0 when none is SKIP."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    hist = build_history(work / "llama.cpp", [(v, "", []) for v in versions])
    config = str(REPO_ROOT / "configs" / "llama-cpp-29975.yaml")
    common = ["--repo", str(work / "llama.cpp"), "--state", str(work / "state"), "--no-arms"]
    skipped = []
    for commit in hist["commits"]:
        code, res = _bisectbot("test", config, "--commit", commit["sha"], *common)
        print(f"survey: {commit['subject']}: {_describe(res)} (exit {code})", flush=True)
        if res.get("verdict") in (None, "skip"):
            skipped.append(commit["tree"])
    print(
        f"survey: {len(versions) - len(skipped)} of {len(versions)} trees testable"
        + (f"; SKIP: {', '.join(skipped)}" if skipped else ""),
        flush=True,
    )
    return 1 if skipped else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("history")
    h.add_argument("repo", type=Path)
    e = sub.add_parser("e2e")
    e.add_argument("--work", type=Path, default=None, help="work directory (default: <cache>/eras[-HISTORY])")
    e.add_argument(
        "--history",
        choices=["29975", *PRESET_HISTORIES],
        default="29975",
        help="29975: the four eras judged by the shipped config; the others: a real change of one "
        "program, bisected with the config `init --llama` writes",
    )
    v = sub.add_parser("survey")
    v.add_argument("versions", nargs="+", help="llama-cpp-python sdist versions, oldest first")
    v.add_argument("--work", type=Path, default=None, help="work directory (default: <cache>/survey)")
    a = ap.parse_args(argv)
    if a.cmd == "history":
        print(json.dumps(build_history(a.repo), indent=2))
        return 0
    if a.cmd == "survey":
        return survey(a.work or cache_dir() / "survey", a.versions)
    if a.history != "29975":
        return e2e_preset(a.work or cache_dir() / f"eras-{a.history}", a.history)
    return e2e(a.work or cache_dir() / "eras")


if __name__ == "__main__":
    raise SystemExit(main())
