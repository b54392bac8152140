"""`bisectbot init`: a working config from a repository, a cmake target and a command line.

Why: writing a config by hand means knowing the target's binary path, how the program's output
splits into tokens and where the outcome sits — and the first mistake surfaces as a verdict.
`init` finds out instead: it configures the good commit to list its cmake targets (an unknown
target is refused with the list), builds the target there through the same builder as every
bisect, runs the command on a few seeds and proposes `parse` and `statistic` from what the
program printed, takes the exact reference the user gives or else a measured one (a control
sample of the good commit, grown while tests need it), writes the config and validates it:
the good commit must test GOOD with it. Nothing here is guessed silently: the sample outputs
and the outcomes seen are written into the config's header.
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, NotRequired, Sequence, TypedDict

import yaml

from bisectbot.building.cmake import target_names
from bisectbot.building.workspace import Workspace
from bisectbot.cli.detect import BuildWish, build_command, choose_kind, find_binary
from bisectbot.config import Config, load_config
from bisectbot.config.sections import BASE_PLACEHOLDERS
from bisectbot.errors import ConfigError
from bisectbot.events import Events
from bisectbot.jobs import lifecycle as jobs
from bisectbot.judge.sweep import render_argv
from bisectbot.processes.procs import clean_env, run
from bisectbot.records.reports import CommitReport
from bisectbot.state.statedir import StateDir
from bisectbot.statistics.outcome import Verdict

if TYPE_CHECKING:
    from bisectbot.llama.presets import Customisation

SAMPLE_SEEDS = 20  # runs of the command whose outputs propose `parse`
# What `cmake --build … --target help` lists that is not a program of the project.
NOT_PROGRAMS = {"all", "clean", "depend", "edit_cache", "rebuild_cache", "install", "list_install_components", "test"}


# The config `init` writes, as YAML: every section it fills (configs/example.yaml has them all).
class ParseDraft(TypedDict):
    prefix: NotRequired[str]
    split: str  # whitespace | chars
    expect_tokens: NotRequired[int]


class PositionDraft(TypedDict):
    position: int


class StatisticDraft(TypedDict):
    outcome: PositionDraft


class BuildDraft(TypedDict, total=False):
    kind: str  # command | none (cmake: left out, the default)
    cmake_args: list[str]
    targets: list[str]
    command: list[str]
    binaries: dict[str, list[str]]


class RunDraft(TypedDict):
    argv: list[str]
    max_runs: int


class ReferenceDraft(TypedDict, total=False):
    probs: dict[str, float]
    control: dict[str, str]  # {commit: sha}


class ConfigDraft(TypedDict):
    name: str
    repo: dict[str, str]  # {path: …}
    build: BuildDraft
    run: RunDraft
    parse: ParseDraft
    statistic: StatisticDraft
    reference: ReferenceDraft
    storage: dict[str, str]  # {state_dir: …}


@dataclass(frozen=True)
class Proposal:
    """What the sample runs suggest: how output splits, where the outcome is, what was seen."""

    parse: ParseDraft
    statistic: StatisticDraft
    outcomes: Counter[str] = field(default_factory=Counter)


def programs(help_text: str) -> list[str]:
    """The targets a project defines, from cmake's target list (no object files, no cmake's own)."""
    names = target_names(help_text)
    return sorted(n for n in names if n not in NOT_PROGRAMS and not n.endswith((".o", ".i", ".s", ".obj")))


def propose(outputs: Sequence[str], position: int = 0) -> Proposal:
    """`parse` and `statistic` for these outputs: a prefix every output starts with (an echoed
    prompt), then whitespace-separated tokens if every output has some, else characters; the
    outcome is token `position`; expect_tokens the fewest any output had."""
    texts = [o.strip("\n") for o in outputs]
    if not texts or not any(t.strip() for t in texts):
        raise ConfigError("init: the command printed nothing on stdout for any seed")
    prefix = os.path.commonprefix(texts)
    if " " in prefix:
        prefix = prefix[: prefix.rindex(" ") + 1]  # whole words only
    elif len(set(texts)) > 1 or not prefix:
        prefix = ""
    rests = [t[len(prefix) :] for t in texts]
    words = [r.split() for r in rests]
    split = "whitespace" if all(words) and any(len(w) > 1 for w in words) else "chars"
    tokens = words if split == "whitespace" else [list(r.strip()) for r in rests]
    fewest = min(len(t) for t in tokens)
    if fewest <= position:
        raise ConfigError(f"init: --position {position}, but some output has only {fewest} token(s): {rests!r:.200}")
    parse: ParseDraft = {"prefix": prefix, "split": split, "expect_tokens": fewest}
    if not prefix:
        del parse["prefix"]
    seen = Counter(t[position] for t in tokens)
    return Proposal(parse, {"outcome": {"position": position}}, seen)


def _configure_and_list(source: Path, sha: str, cmake_args: Sequence[str], work: Path) -> list[str]:
    """Configure the commit's tree (exported to `source`) once in a scratch build directory and
    list its programs."""
    build = work / "build"
    env = clean_env()
    res = run(["cmake", "-S", str(source), "-B", str(build), *cmake_args], env=env, timeout=600)
    if res.returncode != 0:
        raise ConfigError(f"init: cmake cannot configure {sha[:12]}: {(res.stderr or res.stdout)[-300:].strip()}")
    listed = run(["cmake", "--build", str(build), "--target", "help"], env=env, timeout=120)
    return programs(listed.stdout)


def write_config(
    repo: str,
    good: str,
    argv: Sequence[str],
    *,
    out: Path,
    target: str | None,
    name: str,
    probs: dict[str, float] | None,
    position: int,
    cmake_args: Sequence[str] = ("-DCMAKE_BUILD_TYPE=Release",),
    state_dir: Path | None = None,
    events: Events | None = None,
    wish: BuildWish = BuildWish(),
) -> tuple[Path, CommitReport]:
    """Find, build, sample, propose, write, validate (see the module's docstring). Returns the
    config written and the good commit's test report (GOOD, or ConfigError says what it was).
    `wish`: what the user said of the build (cli.detect; unsaid, it is detected)."""
    if "{seed}" not in " ".join(argv):
        raise ConfigError("init: the command needs {seed} where the seed goes (and {binary} for the program)")
    unknown = [a for a in argv if "{" in a and not any(f"{{{p}}}" in a for p in (*BASE_PLACEHOLDERS, "binary"))]
    if unknown:
        raise ConfigError(
            f"init: unknown placeholder in {unknown[0]!r} (known: binary, {', '.join(BASE_PLACEHOLDERS)})"
        )
    events = events or Events()
    repo_path = str(Path(repo).resolve())
    with tempfile.TemporaryDirectory(prefix="bisectbot-init-") as tmp:
        work = Path(tmp)
        ws = Workspace(repo_path, work / "clone")
        sha = ws.resolve(good)
        draft, target = _detect_build(ws.export(sha, work / "src"), sha, argv, target, cmake_args, wish, work)
    data: ConfigDraft = {
        "name": name,
        "repo": {"path": repo_path},
        "build": draft,
        "run": {"argv": list(argv), "max_runs": 16384},
        "parse": {"split": "chars"},
        "statistic": {"outcome": {"position": 0}},
        "reference": {"probs": probs} if probs else {"control": {"commit": sha}},
        "storage": {"state_dir": str(state_dir) if state_dir else f"./{name}-state"},
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    cfg = load_config(out)
    root = cfg.config_dir / str(cfg.storage.state_dir)
    with StateDir(root) as state:
        session = jobs.Session(cfg, state, events, config_path=str(out))
        build = session.runner.builder.ensure(sha, cfg.build)
        if not build.ok:
            raise ConfigError(f"init: cannot build {target} at {sha[:12]}: {build.reason}")
        outputs = _sample(cfg, build.binaries, session.workspace.checkout(sha))
    proposal = propose(outputs, position)
    data["parse"], data["statistic"] = proposal.parse, proposal.statistic
    seen = ", ".join(f"{o!r} ×{n}" for o, n in proposal.outcomes.most_common())
    header = [
        f"# bisectbot config written by `bisectbot init` for {target} at {sha[:12]}.",
        f"# {len(outputs)} sample runs; outcome at token {position}: {seen}.",
        f"# First outputs: {' | '.join(o.strip() for o in outputs[:3])[:200]}",
        "# Every key: configs/example.yaml in bisectbot's repository.",
    ]
    out.write_text("\n".join(header) + "\n" + yaml.safe_dump(data, sort_keys=False))
    cfg = load_config(out)
    with StateDir(root) as state:
        session = jobs.Session(cfg, state, events, config_path=str(out))
        report = jobs.run_test(session, jobs.plan_test(session, sha))
    if report.verdict is not Verdict.GOOD:
        raise ConfigError(
            f"init: wrote {out}, but the good commit {sha[:12]} tests {report.verdict.value.upper()} with it: "
            f"{report.detail.reason}"
        )
    return out, report


def _detect_build(
    source: Path,
    sha: str,
    argv: Sequence[str],
    target: str | None,
    cmake_args: Sequence[str],
    wish: BuildWish,
    work: Path,
) -> tuple[BuildDraft, str]:
    """The config's build section for the good commit's tree (exported to `source`), and what
    it builds in words: cmake's one program or --target, a build command's binary (found by
    building once, cli.detect), or nothing (build.kind none)."""
    kind = choose_kind(source, argv, wish, sha)
    if kind != "cmake" and target is not None:
        raise ConfigError(f"init: --target names a cmake target, but {sha[:12]} is built by build kind {kind}")
    if kind == "none":
        return {"kind": "none"}, "a program run from its tree"
    if kind == "command":
        command = build_command(source, wish, sha)
        binary = find_binary(source, command, wish.binary, sha)
        return {"kind": "command", "command": command, "binaries": {"binary": [binary]}}, binary
    known = _configure_and_list(source, sha, cmake_args, work)
    if target is None and len(known) == 1:
        target = known[0]  # the project's one program
    if target is None or target not in known:
        what = "give --target" if target is None else f"no target {target!r} at {sha[:12]}"
        raise ConfigError(f"init: {what}: the programs cmake lists are {', '.join(known) or 'none'}")
    binaries = [f"bin/{target}", target, f"bin/Release/{target}", f"Release/{target}"]
    return {"cmake_args": list(cmake_args), "targets": [target], "binaries": {"binary": binaries}}, target


def _sample(cfg: Config, binaries: dict[str, str], source: Path) -> list[str]:
    """The command's stdout for the first SAMPLE_SEEDS seeds."""
    values = {**binaries, "config_dir": str(cfg.config_dir), "source": str(source)}
    outputs = []
    for seed in range(cfg.run.first_seed, cfg.run.first_seed + SAMPLE_SEEDS):
        try:
            argv = render_argv(list(cfg.run.templates[0].argv), {**values, "seed": str(seed)})
        except KeyError as exc:
            raise ConfigError(
                f"init: {{{exc.args[0]}}} cannot be filled in while sampling: edit the config after"
            ) from None
        res = run(argv, env=clean_env(), timeout=cfg.run.timeout)
        if res.returncode != 0:
            raise ConfigError(f"init: the command failed on seed {seed} (exit {res.returncode}): {argv!r:.200}")
        outputs.append(res.stdout)
    return outputs


def write_llama_config(
    program: str,
    good: str,
    how: "Customisation",
    *,
    out: Path,
    state_for: Callable[[Config], Path],
    events: Events | None = None,
) -> tuple[Path, CommitReport]:
    """`init --llama PROGRAM`: the preset for the program (configs/llama/), customised as asked,
    written to `out`, then tested at the good commit with the same builder, command-variant
    choice and runs as every bisect (so a preset that cannot build or run there, or whose
    output does not parse, says why now, not in the middle of a bisect). Returns the config
    and the good commit's report (GOOD, or ConfigError says what it was)."""
    from bisectbot.llama.presets import customise, load_preset

    data, path = load_preset(program)
    config = customise(data, path, how)
    header = [
        f"# bisectbot config written by `bisectbot init --llama {program}` from {path.name}",
        "# (bisectbot's configs/llama/: the comments there say what each variant is for).",
    ]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(header) + "\n" + yaml.safe_dump(config, sort_keys=False, width=100))
    cfg = load_config(out)
    events = events or Events()
    root = state_for(cfg)  # the state directory later commands on this config use
    with StateDir(root) as state:
        session = jobs.Session(cfg, state, events, config_path=str(out))
        session.sync()
        sha = session.workspace.resolve(good)
        session.bind_good_end(sha)
        report = jobs.run_test(session, jobs.plan_test(session, sha))
    detail = report.detail
    seen = ", ".join(f"{k} ×{n}" for k, n in sorted(detail.counts.items(), key=lambda kv: -kv[1]) if n)
    header += [
        f"# At {sha[:12]} ({good}): build variant {detail.build_variant}, command variant {detail.variant}; "
        f"{detail.verdict.value.upper()} after {detail.runs} runs; counts: {seen or 'none'}.",
    ]
    out.write_text("\n".join(header) + "\n" + yaml.safe_dump(config, sort_keys=False, width=100))
    if report.verdict is not Verdict.GOOD:
        raise ConfigError(
            f"init --llama: wrote {out}, but the good commit {sha[:12]} tests {report.verdict.value.upper()} "
            f"with it: {detail.reason}"
        )
    return out, report
