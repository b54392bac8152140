#!/usr/bin/env python3
"""End-to-end material for llama.cpp #29975: a real llama.cpp tree with a local history to bisect.

    python scripts/llama_e2e.py prepare  DEST [--version 0.3.36]
    python scripts/llama_e2e.py history  REPO --seed N [--defect draft-top|residual-by-position]
    python scripts/llama_e2e.py measure  BINARY [--seeds 1000] [--fixtures DIR] [--hashed-seeds]
    python scripts/llama_e2e.py e2e      [--work DIR] [--seed N] [--commits 12] [--server]
    python scripts/llama_e2e.py same-outputs [--work DIR] [--seeds 200]
    python scripts/llama_e2e.py vocab    [--work DIR] [--seed N] [--commits 12]

``e2e``: the whole check that CI runs after the unit tests: prepare a tree, build its history,
then with the real ``bisectbot`` CLI: ``test`` the unpatched tree (must be BAD) and the patched
one (GOOD), ``bisect`` the history (must name the planted commit), and with ``--server`` check
that the llama-server reference agrees with the numpy one to 1e-3.

``prepare``: fetch the llama-cpp-python sdist (``pip download``, cached under
``${BISECTBOT_CACHE:-~/.cache/bisectbot}/sdist``), extract ``vendor/llama.cpp`` to DEST, delete
its ``.git`` pointer file, ``git init`` and commit the tree.

``history``: on top of a prepared tree build a local history (fixed dates and author, so the
shas are a function of the tree and the seed): the base commit applies the #29975 fix patch
(good), then ordinary commits, docs-only commits, one commit that breaks the build (repaired by
the next commit) and one commit, at a position drawn from the seed, that reintroduces a defect
(bad). Prints the shas as JSON.

``same-outputs``: the shipped config's build options (-O1, git hidden) against cmake's Release
default (-O3, the commit stamped) on the 0.3.36 tree, both built by bisectbot's builder: seeds 1..200 of the report's command
must print the same text with either binary (CI runs it; issue 24).

``vocab``: the open-vocabulary fixtures through llama-completion at top-k 40 (40 outcomes): the numpy
reference against llama-server's, then a bisect of a history with a planted sampler change.

``measure``: run ``llama-speculative`` with the command of the report on seeds 1..N (rerunning a
seed whose stdout was cut short) and print P(token 0 = f) and the distribution of token 1 given
token 0 = f against the numpy reference.

Nothing here touches the bisectbot repository except reading ``fixtures/``.
"""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURES = REPO_ROOT / "fixtures"
FIX_PATCH = FIXTURES / "llama-cpp-29975-fix.patch"
REINTRODUCE = {
    "draft-top": FIXTURES / "llama-cpp-29975-reintroduce-draft-top.patch",
    "residual-by-position": FIXTURES / "llama-cpp-29975-reintroduce-residual-by-position.patch",
}
TARGET_FILE = "examples/speculative/speculative.cpp"
# `vocab`: the open-vocabulary fixtures through llama-completion at top-k 40, a planted sampler change
VOCAB_CONFIG = REPO_ROOT / "configs" / "llama-open-vocab.yaml"
TOP_K_PATCH = FIXTURES / "llama-cpp-top-k-halved.patch"
COMPLETION_FILE = "tools/completion/completion.cpp"
DEFAULT_VERSION = "0.3.36"

GIT_ID = {
    "GIT_AUTHOR_NAME": "bisectbot e2e",
    "GIT_AUTHOR_EMAIL": "e2e@bisectbot.invalid",
    "GIT_COMMITTER_NAME": "bisectbot e2e",
    "GIT_COMMITTER_EMAIL": "e2e@bisectbot.invalid",
}
BASE_DATE = 1_767_225_600  # 2026-01-01T00:00:00Z; commit i is dated BASE_DATE + 3600 * i


def cache_dir() -> Path:
    return Path(os.environ.get("BISECTBOT_CACHE") or Path.home() / ".cache" / "bisectbot")


def fetch_sdist(version: str = DEFAULT_VERSION, cache: Path | None = None) -> Path:
    """The llama-cpp-python sdist, downloaded once into ``<cache>/sdist``."""
    dest = (cache or cache_dir()) / "sdist"
    name = f"llama_cpp_python-{version}.tar.gz"
    if (dest / name).is_file():
        return dest / name
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            f"llama-cpp-python=={version}",
            "-d",
            str(dest),
        ],
        check=True,
    )
    if not (dest / name).is_file():
        raise SystemExit(f"pip download did not produce {dest / name}")
    return dest / name


def _git(repo: Path, *args: str, date: int | None = None) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_ID)
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    env["HOME"] = str(repo)  # no user config (signing, hooks, templates) leaks in
    if date is not None:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = f"{date} +0000"
    res = subprocess.run(["git", "-C", str(repo), *args], env=env, capture_output=True, text=True)
    if res.returncode != 0:
        raise SystemExit(f"git {' '.join(args)} in {repo} failed: {res.stderr.strip()}")
    return res.stdout.strip()


def prepare_tree(dest: Path, version: str = DEFAULT_VERSION, cache: Path | None = None) -> str:
    """Extract the sdist's ``vendor/llama.cpp`` into ``dest`` (must not exist), make it a git
    repository with one commit; returns its sha."""
    dest = Path(dest)
    if dest.exists():
        raise SystemExit(f"{dest} already exists")
    sdist = fetch_sdist(version, cache)
    prefix = f"llama_cpp_python-{version}/vendor/llama.cpp/"
    tmp = dest.with_name(dest.name + ".extract")
    shutil.rmtree(tmp, ignore_errors=True)
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix)]
        tar.extractall(tmp, members=members, filter="data")
    (tmp / prefix).rename(dest)
    shutil.rmtree(tmp)
    git_pointer = dest / ".git"  # "gitdir: ../../.git/modules/vendor/llama.cpp"
    if git_pointer.is_file():
        git_pointer.unlink()
    _git(dest, "init", "-q", "-b", "master")
    _git(dest, "add", "-A")
    _git(
        dest,
        "commit",
        "-q",
        "--no-verify",
        "-m",
        f"llama.cpp as vendored by llama-cpp-python {version}",
        date=BASE_DATE,
    )
    return _git(dest, "rev-parse", "HEAD")


# --- the local history -----------------------------------------------------------------------------


def _append(path: Path, text: str) -> None:
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(text)


def _apply(repo: Path, patch: Path) -> None:
    _git(repo, "apply", "--whitespace=nowarn", str(patch))


def build_history(repo: Path, seed: int, *, n_commits: int = 12, defect: str = "draft-top") -> dict:
    """Build the history on top of the prepared tree at ``repo`` (HEAD = the vendored tree).

    Commit 0 (``good``) applies the fix patch. Then ``n_commits`` commits: ordinary code commits
    (a comment appended to the target file, behaviour unchanged), docs-only commits, one commit
    that breaks the build (``#error``) directly followed by the commit that repairs it, and the
    commit that reintroduces ``defect`` at a seeded position. Returns
    ``{"good", "bad", "head", "broken", "repair", "commits": [{"sha", "kind", "subject"}...]}``
    with ``commits`` in order (commit 0 first)."""
    if defect not in REINTRODUCE:
        raise SystemExit(f"defect must be one of {sorted(REINTRODUCE)}")
    return _history(
        repo,
        seed,
        n_commits,
        base=(FIX_PATCH, "speculative : sample the draft token and compute the residual by token id (#29975)"),
        plant=(REINTRODUCE[defect], f"speculative : simplify draft bookkeeping ({defect})"),
        touch=TARGET_FILE,
        include='#include "arg.h"\n',
        extra={"defect": defect},
    )


def _history(
    repo: Path,
    seed: int,
    n_commits: int,
    *,
    base: tuple[Path, str] | None,
    plant: tuple[Path, str],
    touch: str,
    include: str,
    extra: dict,
) -> dict:
    """The history's commits (see `build_history`): commit 0 applies `base` (patch, subject) or,
    with None, is the prepared tree itself; `plant` is the patch and subject of the planted
    change; `touch` the file ordinary and build-breaking commits change (the break goes after
    its line `include`)."""
    if n_commits < 5:
        raise SystemExit("n_commits must be >= 5")
    repo = Path(repo)
    rng = random.Random(seed)
    # positions 1..n_commits; the planted change is never the first or last commit so both
    # endpoints stay clean; the build break (p, p+1 repair) avoids the planted position
    bad_pos = rng.randint(2, n_commits - 1)
    choices = [p for p in range(1, n_commits) if p not in (bad_pos, bad_pos - 1)]
    broken_pos = rng.choice(choices)
    kinds: dict[int, str] = {bad_pos: "defect", broken_pos: "break", broken_pos + 1: "repair"}
    for p in range(1, n_commits + 1):
        kinds.setdefault(p, rng.choice(["code", "docs"]))

    commits = []
    date = BASE_DATE + 3600
    if base is not None:
        _apply(repo, base[0])
        _git(repo, "commit", "-q", "--no-verify", "-am", base[1], date=date)
        commits.append({"sha": _git(repo, "rev-parse", "HEAD"), "kind": "fix", "subject": "fix"})
    else:
        commits.append({"sha": _git(repo, "rev-parse", "HEAD"), "kind": "tree", "subject": "the vendored tree"})
    target = repo / touch
    broken = '#error "bisectbot e2e: deliberately broken build"\n'
    for p in range(1, n_commits + 1):
        date += 3600
        kind = kinds[p]
        if kind == "defect":
            _apply(repo, plant[0])
            subject = plant[1]
        elif kind == "break":
            text = target.read_text()
            if include not in text:
                raise SystemExit(f"{touch} has no line {include!r} to break the build after")
            target.write_text(text.replace(include, include + broken, 1))
            subject = f"{Path(touch).stem} : work in progress (does not build)"
        elif kind == "repair":
            text = target.read_text()
            target.write_text(text.replace(broken, "", 1))
            subject = f"{Path(touch).stem} : fix the build"
        elif kind == "code":
            _append(target, f"\n// bisectbot e2e: ordinary change {p} (a comment, behaviour unchanged)\n")
            subject = f"{Path(touch).stem} : tidy up ({p})"
        else:
            doc = repo / "docs" / "bisectbot-e2e.md"
            doc.parent.mkdir(exist_ok=True)
            _append(doc, f"- note {p}: documentation only\n")
            _git(repo, "add", str(doc.relative_to(repo)))
            subject = f"docs : notes ({p})"
        _git(repo, "commit", "-q", "--no-verify", "-am", subject, date=date)
        commits.append({"sha": _git(repo, "rev-parse", "HEAD"), "kind": kind, "subject": subject})
    return {
        "seed": seed,
        **extra,
        "good": commits[0]["sha"],
        "bad": commits[bad_pos]["sha"],
        "broken": commits[broken_pos]["sha"],
        "repair": commits[broken_pos + 1]["sha"],
        "head": commits[-1]["sha"],
        "commits": commits,
    }


def build_vocab_history(repo: Path, seed: int, *, n_commits: int = 12) -> dict:
    """The `vocab` history on top of the prepared tree at ``repo``: commit 0 is the vendored tree
    (good), then ordinary commits to llama-completion's source, docs-only commits, a build break
    and its repair, and at a seeded position the planted change: the top-k sampler keeps k / 2
    tokens (``fixtures/llama-cpp-top-k-halved.patch``). Returns the shas as `build_history` does."""
    return _history(
        repo,
        seed,
        n_commits,
        base=None,
        plant=(TOP_K_PATCH, "sampling : top-k keeps k / 2 candidates (planted change)"),
        touch=COMPLETION_FILE,
        include='#include "arg.h"\n',
        extra={"plant": TOP_K_PATCH.name},
    )


# --- measuring a binary ------------------------------------------------------------------------------


def speculative_argv(binary: Path, fixtures: Path, seed: int) -> list[str]:
    return [
        str(binary),
        "-m",
        str(fixtures / "target.gguf"),
        "-md",
        str(fixtures / "draft.gguf"),
        "-p",
        "bcdbc",
        "-n",
        "4",
        "--spec-draft-n-max",
        "3",
        "-c",
        "64",
        "-t",
        "1",
        "--cache-type-k",
        "f32",
        "--cache-type-v",
        "f32",
        "-fa",
        "off",
        "--samplers",
        "penalties;top_k;top_p;min_p;temperature",
        "-np",
        "1",
        "--temp",
        "1.0",
        "--top-k",
        "3",
        "--top-p",
        "1.0",
        "--min-p",
        "0.0",
        "--repeat-penalty",
        "1.0",
        "--repeat-last-n",
        "64",
        "-s",
        str(seed),
    ]


def run_seed(binary: Path, fixtures: Path, seed: int, retries: int = 5) -> tuple[str | None, int]:
    """Generated text for ``seed`` (prompt removed) or None; and the number of runs it took.
    0.3.36 prints ``"\\n\\n" + prompt + generated + "\\n\\n\\n\\n"`` on stdout when complete; a
    stdout without the four trailing newlines was cut short (a prefix of the complete one)."""
    for attempt in range(1, retries + 1):
        res = subprocess.run(speculative_argv(binary, fixtures, seed), capture_output=True, timeout=60)
        out = res.stdout.decode(errors="replace")
        if res.returncode == 0 and out.endswith("\n\n\n\n") and out.strip().startswith("bcdbc"):
            return out.strip()[len("bcdbc") :], attempt
    return None, retries


def hashed_seed(i: int) -> int:
    """A well-spread 31-bit seed for index i. llama-speculative's verification RNG is
    std::default_random_engine (minstd_rand0): consecutive seeds give lattice-correlated draws,
    and frequencies over seeds 1..1000 scatter ~2.2x more than binomial noise."""
    return int.from_bytes(hashlib.sha256(f"bisectbot-seed-{i}".encode()).digest()[:4], "little") & 0x7FFFFFFF


def measure(binary: Path, fixtures: Path, seeds: int, jobs: int = 0, hashed: bool = False) -> dict:
    sys.path.insert(0, str(REPO_ROOT))
    from bisectbot.llama.forward import condition_prob, next_token_probs

    jobs = jobs or os.cpu_count() or 1
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        seed_list = [hashed_seed(i) if hashed else i for i in range(1, seeds + 1)]
        results = list(pool.map(lambda s: run_seed(binary, fixtures, s), seed_list))
    texts = [t for t, _ in results if t]
    cut_runs = sum(n - 1 for t, n in results if t) + sum(n for t, n in results if not t)
    t0 = collections.Counter(t[0] for t in texts if t)
    t1 = collections.Counter(t[1] for t in texts if len(t) > 1 and t[0] == "f")
    m = sum(t1.values())
    ref = next_token_probs(fixtures / "target.gguf", [1, 2, 3, 1, 2, 5])
    return {
        "binary": str(binary),
        "seeds": seeds,
        "hashed_seeds": hashed,
        "complete": len(texts),
        "cut_runs_rerun": cut_runs,
        "p_token0_f": t0["f"] / max(1, len(texts)),
        "p_token0_f_reference": condition_prob(fixtures / "target.gguf", [1, 2, 3, 1, 2], "f"),
        "runs_with_f": m,
        "token1_given_f": {k: c / m for k, c in sorted(t1.items())} if m else {},
        "reference": {k: v for k, v in ref.items() if v > 0},
        "lengths": dict(sorted(collections.Counter(len(t) for t in texts).items())),
    }


def checked(name: str, failures: list[str], start: float) -> int:
    """The script's last line, every failed check or that all passed, and its exit code."""
    import time

    verdict = "FAILED: " + "; ".join(failures) if failures else "all checks passed"
    print(f"{name}: {verdict} in {time.monotonic() - start:.0f} s", flush=True)
    return 1 if failures else 0


def _bisectbot(*args: str) -> tuple[int, dict]:
    """Run the real CLI; returns its exit code and JSON report (progress goes to our stderr)."""
    out = Path(tempfile.mkstemp(suffix=".json")[1])
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "bisectbot.cli", *args, "--json", str(out)], stdout=subprocess.PIPE, text=True
        )
        print(proc.stdout, flush=True)
        data = json.loads(out.read_text()) if out.stat().st_size else {}
    finally:
        out.unlink(missing_ok=True)
    return proc.returncode, data


def e2e(work: Path, seed: int, n_commits: int, server: bool) -> int:
    """Prepare, build the history, test and bisect it with the real CLI; 0 when all checks hold."""
    import time

    start = time.monotonic()
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    tree = work / "llama.cpp"
    unpatched = prepare_tree(tree)
    hist = build_history(tree, seed, n_commits=n_commits)
    planted = hist["bad"]
    print(
        f"e2e: history of {len(hist['commits'])} commits, planted defect at {planted[:12]}, "
        f"build break at {hist['broken'][:12]}",
        flush=True,
    )
    config = str(REPO_ROOT / "configs" / "llama-cpp-29975.yaml")
    common = ["--repo", str(tree), "--state", str(work / "state")]
    failures = []

    code, res = _bisectbot("test", config, "--commit", unpatched, *common)
    print(
        f"e2e: unpatched 0.3.36 tree: {res.get('verdict', '?').upper()} after {res.get('runs')} runs "
        f"(exit {code}); counts {res.get('counts')}",
        flush=True,
    )
    if res.get("verdict") != "bad":
        failures.append(f"unpatched tree tested {res.get('verdict')}, expected bad")
    # The report's second path (speculative decoding inside llama-server) kept the distribution.
    for name, arm in res.get("arms", {}).items():
        print(f"e2e: unpatched tree, arm {name}: {arm['verdict'].upper()} after {arm['runs']} runs", flush=True)
        if arm["verdict"] != "good":
            failures.append(f"arm {name} on the unpatched tree tested {arm['verdict']}, expected good")
    code, res = _bisectbot("test", config, "--commit", hist["good"], *common)
    print(
        f"e2e: patched tree: {res.get('verdict', '?').upper()} after {res.get('runs')} runs "
        f"(exit {code}); counts {res.get('counts')}",
        flush=True,
    )
    if res.get("verdict") != "good":
        failures.append(f"patched tree tested {res.get('verdict')}, expected good")

    code, rep = _bisectbot("bisect", config, "--good", hist["good"], "--bad", hist["head"], *common)
    print(
        f"e2e: bisect: {rep.get('status')} first_bad {str(rep.get('first_bad'))[:12]} "
        f"(planted {planted[:12]}), {rep.get('builds')} builds, {rep.get('runs')} runs, "
        f"{rep.get('retried')} reruns of cut output (exit {code})",
        flush=True,
    )
    if rep.get("first_bad") != planted:
        failures.append(f"bisect named {rep.get('first_bad')}, planted {planted}")
    if os.environ.get("BISECTBOT_E2E_CLUSTER", "1") != "0":
        # the same bisect on a two-worker local Dask cluster, from a state of its own (the workers
        # build in their own directories; ccache is shared)
        cluster = ["--repo", str(tree), "--state", str(work / "state-cluster"), "--workers", "2"]
        code, crep = _bisectbot("bisect", config, "--good", hist["good"], "--bad", hist["head"], *cluster)
        print(
            f"e2e: bisect on 2 workers: {crep.get('status')} first_bad {str(crep.get('first_bad'))[:12]}, "
            f"{crep.get('rounds')} rounds (serial: {rep.get('rounds')}), {crep.get('builds')} builds, "
            f"N' {crep.get('searched')} of {crep.get('commits')} (exit {code})",
            flush=True,
        )
        if crep.get("first_bad") != rep.get("first_bad"):
            failures.append(f"the cluster named {crep.get('first_bad')}, the serial path {rep.get('first_bad')}")
        if (crep.get("rounds") or 0) > (rep.get("rounds") or 0):
            failures.append(f"the cluster took {crep.get('rounds')} rounds, the serial path {rep.get('rounds')}")

    if server:
        from bisectbot.config import load_config
        from bisectbot.jobs.lifecycle import Session
        from bisectbot.judge.reference import resolve_reference
        from bisectbot.state.statedir import StateDir

        cfg = load_config(config).with_repo_path(str(tree))
        numpy_ref = resolve_reference(cfg)
        comp = cfg.reference.compute.model_copy(update={"method": "server", "commit": hist["good"]})
        cfg_server = cfg.model_copy(update={"reference": cfg.reference.model_copy(update={"compute": comp})})
        with StateDir(work / "state") as state:
            server_ref = Session(cfg_server, state).reference
        gap = max(
            [
                abs(numpy_ref.probs.get(k, 0) - server_ref.probs.get(k, 0))
                for k in set(numpy_ref.probs) | set(server_ref.probs)
            ]
            + [abs((numpy_ref.condition_prob or 0) - (server_ref.condition_prob or 0))]
        )
        print(f"e2e: reference numpy {numpy_ref.probs} P(f)={numpy_ref.condition_prob:.10f}", flush=True)
        print(f"e2e: reference server {server_ref.probs} P(f)={server_ref.condition_prob:.10f}", flush=True)
        print(f"e2e: largest difference {gap:.2e} (must be <= 1e-3)", flush=True)
        if gap > 1e-3:
            failures.append(f"references differ by {gap:.2e}")

    return checked("e2e", failures, start)


def vocab(work: Path, seed: int, n_commits: int) -> int:
    """The open vocabulary end to end: prepare the 0.3.36 tree, build the `vocab` history, then with
    the real CLI and ``configs/llama-open-vocab.yaml``: the numpy reference (40 tokens at top-k 40)
    against llama-server's post-sampling probabilities at the good end (to 1e-6), and ``bisect``
    must name the planted commit (status found, exit 0). 0 when every check holds."""
    import time

    start = time.monotonic()
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    tree = work / "llama.cpp"
    prepare_tree(tree)
    hist = build_vocab_history(tree, seed, n_commits=n_commits)
    planted = hist["bad"]
    print(
        f"vocab: history of {len(hist['commits'])} commits, planted change at {planted[:12]}, "
        f"build break at {hist['broken'][:12]}",
        flush=True,
    )
    config = str(VOCAB_CONFIG)
    common = ["--repo", str(tree), "--state", str(work / "state")]
    failures = []

    _, numpy_ref = _bisectbot("reference", config, *common)
    _, server_ref = _bisectbot("reference", config, "--method", "server", "--commit", hist["good"], *common)
    probs, served = numpy_ref.get("probs", {}), server_ref.get("probs", {})
    k = len(probs)
    gap = max((abs(probs.get(t, 0.0) - served.get(t, 0.0)) for t in set(probs) | set(served)), default=1.0)
    print(
        f"vocab: K = {k} outcomes at top-k 40 (numpy), {len(served)} from llama-server; "
        f"largest difference {gap:.2e} (must be <= 1e-6)",
        flush=True,
    )
    if k < 40:
        failures.append(f"the reference has {k} outcomes, fewer than 40")
    if set(probs) != set(served) or gap > 1e-6:
        failures.append(f"the references differ (by {gap:.2e}, or in their tokens)")

    code, rep = _bisectbot("bisect", config, "--good", hist["good"], "--bad", hist["head"], *common)
    print(
        f"vocab: bisect: {rep.get('status')} first_bad {str(rep.get('first_bad'))[:12]} "
        f"(planted {planted[:12]}), {rep.get('builds')} builds, {rep.get('runs')} runs, "
        f"{rep.get('retried')} reruns of cut output (exit {code})",
        flush=True,
    )
    if rep.get("first_bad") != planted or rep.get("status") != "found" or code != 0:
        failures.append(f"bisect named {rep.get('first_bad')} ({rep.get('status')}, exit {code}), planted {planted}")
    return checked("vocab", failures, start)


def same_outputs(work: Path, seeds: int) -> int:
    """The shipped config's build (-O1, Ninja where installed, git hidden) against cmake's
    Release default (-O3, Makefiles, the commit stamped) on the 0.3.36 tree: both built by bisectbot's own builder, then the report's command run on seeds 1..N
    with each binary; every seed must print the same generated text. 0 when it does."""
    import time

    from bisectbot.building.builder import Builder
    from bisectbot.building.workspace import Workspace
    from bisectbot.config import load_config
    from bisectbot.events import Events
    from bisectbot.state.statedir import StateDir

    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    tree = work / "llama.cpp"
    sha = prepare_tree(tree)
    shipped = load_config(REPO_ROOT / "configs" / "llama-cpp-29975.yaml").build
    default = shipped.model_copy(  # cmake's Release flags and default generator: the build before issue 24
        update={
            "cmake_args": [a for a in shipped.cmake_args if not a.startswith(("-DCMAKE_C_FLAGS", "-DCMAKE_CXX_FLAGS"))],
            "generator": "make",
            "hide_git": False,  # and the commit stamp of a build that sees git (issue 26)
        }
    )
    changed = sorted(set(shipped.cmake_args) - set(default.cmake_args)) + ["hide_git"] * shipped.hide_git
    binaries: dict[str, Path] = {}
    with StateDir(work / "state") as state:
        builder = Builder(state, Workspace(str(tree), state.clone_dir), Events())
        for name, cfg in (("shipped", shipped), ("default", default)):
            rec = builder.ensure(sha, cfg)
            if not rec.ok:
                print(f"same-outputs: the {name} build failed: {rec.reason}", flush=True)
                return 1
            binaries[name] = Path(rec.binaries["binary"])
            print(
                f"same-outputs: {name} build ({cfg.generator}, hide_git {cfg.hide_git}: {' '.join(cfg.cmake_args)}) "
                f"in {rec.seconds:.0f} s",
                flush=True,
            )
    # 0.3.36's stdout is cut short at random (its logging thread is still writing at exit), more
    # often on a loaded machine: CI once saw 5 of 400 seeds cut 5 times running. A cut run says
    # nothing about the binary, so each seed is run until it completes, up to 40 times.
    texts: dict[str, list[str | None]] = {}
    for name, binary in binaries.items():
        start = time.monotonic()
        results = [run_seed(binary, FIXTURES, seed, retries=40) for seed in range(1, seeds + 1)]
        texts[name] = [text for text, _ in results]
        runs = sum(n for _, n in results)
        per_run = (time.monotonic() - start) / runs
        print(
            f"same-outputs: {name} binary, seeds 1..{seeds}: {per_run * 1000:.0f} ms a run, "
            f"{runs - seeds} reruns of a cut output (load average {os.getloadavg()[0]:.1f})",
            flush=True,
        )
    incomplete = [i + 1 for i, (a, b) in enumerate(zip(texts["shipped"], texts["default"])) if a is None or b is None]
    differ = [i + 1 for i, (a, b) in enumerate(zip(texts["shipped"], texts["default"])) if a != b]
    print(
        f"same-outputs: {', '.join(changed)} against the default: {seeds - len(differ)} of {seeds} seeds print "
        f"the same text"
        + (f"; differ at seeds {differ[:10]}" if differ else "")
        + (f"; no complete output at seeds {incomplete[:10]}" if incomplete else ""),
        flush=True,
    )
    return 1 if differ or incomplete else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("dest", type=Path)
    p.add_argument("--version", default=DEFAULT_VERSION)
    h = sub.add_parser("history")
    h.add_argument("repo", type=Path)
    h.add_argument("--seed", type=int, required=True)
    h.add_argument("--commits", type=int, default=12)
    h.add_argument("--defect", choices=sorted(REINTRODUCE), default="draft-top")
    m = sub.add_parser("measure")
    m.add_argument("binary", type=Path)
    m.add_argument("--seeds", type=int, default=1000)
    m.add_argument("--fixtures", type=Path, default=FIXTURES)
    m.add_argument("--jobs", type=int, default=0)
    m.add_argument("--hashed-seeds", action="store_true", help="use hashed_seed(1..N) instead of 1..N")
    e = sub.add_parser("e2e")
    e.add_argument("--work", type=Path, default=None, help="work directory (default: <cache>/e2e)")
    e.add_argument("--seed", type=int, default=1)
    e.add_argument("--commits", type=int, default=12)
    e.add_argument("--server", action="store_true", help="also check the llama-server reference")
    v = sub.add_parser("vocab")
    v.add_argument("--work", type=Path, default=None, help="work directory (default: <cache>/vocab)")
    v.add_argument("--seed", type=int, default=1)
    v.add_argument("--commits", type=int, default=12)
    o = sub.add_parser("same-outputs")
    o.add_argument("--work", type=Path, default=None, help="work directory (default: <cache>/same-outputs)")
    o.add_argument("--seeds", type=int, default=200)
    a = ap.parse_args(argv)
    if a.cmd == "same-outputs":
        return same_outputs(a.work or cache_dir() / "same-outputs", a.seeds)
    if a.cmd == "vocab":
        return vocab(a.work or cache_dir() / "vocab", a.seed, a.commits)
    if a.cmd == "e2e":
        return e2e(a.work or cache_dir() / "e2e", a.seed, a.commits, a.server)
    if a.cmd == "prepare":
        print(prepare_tree(a.dest, a.version))
    elif a.cmd == "history":
        print(json.dumps(build_history(a.repo, a.seed, n_commits=a.commits, defect=a.defect), indent=2))
    else:
        print(json.dumps(measure(a.binary.resolve(), a.fixtures.resolve(), a.seeds, a.jobs, a.hashed_seeds), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
