"""`bisectbot init`: a working config from a repository and a command line.

Why: writing a config by hand means knowing the target's binary path, how the program's output
splits into tokens and where the outcome sits — and the first mistake surfaces as a verdict.
`init` finds out instead: it configures the good commit to list its cmake targets (an unknown
target is refused with the list), builds the target there through the same builder as every
bisect, runs the command on a few seeds and proposes `parse` and `statistic` from what the
program printed (newconfig/proposal.py: a word, a number, a line, a JSON field; characters only for a
token stream), writes the test's tolerance and eta with what they mean, takes the exact reference the user gives or else a measured one (a control
sample of the good commit, grown while tests need it), writes the config and validates it:
the good commit must test GOOD with it. Nothing here is guessed silently: the sample outputs
and the outcomes seen are written into the config's header.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Callable, NotRequired, Sequence, TypedDict

import yaml

from bisectbot.building.cmake import target_names
from bisectbot.building.workspace import Workspace, same_project
from bisectbot.config import Config, load_config
from bisectbot.config.sections import BASE_PLACEHOLDERS, StatTestConfig, repo_entry
from bisectbot.errors import ConfigError
from bisectbot.events import Events, Note
from bisectbot.inert import one_line
from bisectbot.jobs import lifecycle as jobs
from bisectbot.judge.sweep import render_argv
from bisectbot.newconfig.detect import BuildWish, build_command, choose_kind, find_binary
from bisectbot.newconfig.proposal import ParseDraft, Proposal, StatisticDraft, propose
from bisectbot.processes.procs import clean_env, exit_reason, run
from bisectbot.records.reports import CommitReport
from bisectbot.state.statedir import StateDir
from bisectbot.statistics.outcome import Verdict

if TYPE_CHECKING:
    from bisectbot.llama.presets import Customisation

SAMPLE_SEEDS = 20  # runs of the command whose outputs propose `parse`
# What `cmake --build … --target help` lists that is not a program of the project.
NOT_PROGRAMS = {"all", "clean", "depend", "edit_cache", "rebuild_cache", "install", "list_install_components", "test"}


# The config `init` writes, as YAML: every section it fills (configs/example.yaml has them all).
class BuildDraft(TypedDict, total=False):
    kind: str  # command | none (cmake: left out, the default)
    cmake_args: list[str]
    targets: list[str]
    command: list[str]
    binaries: dict[str, list[str]]


class RunDraft(TypedDict):
    argv: list[str]
    max_runs: int


class StatTestDraft(TypedDict):
    tolerance: float
    eta: NotRequired[float]


class ReferenceDraft(TypedDict, total=False):
    probs: dict[str, float]
    control: dict[str, str]  # {commit: sha}


class ConfigDraft(TypedDict):
    name: str
    repo: dict[str, str]  # {path: …} or {url: …}
    build: BuildDraft
    run: RunDraft
    parse: ParseDraft
    statistic: StatisticDraft
    reference: ReferenceDraft
    test: StatTestDraft
    storage: dict[str, str]  # {state_dir: …}


def programs(help_text: str) -> list[str]:
    """The targets a project defines, from cmake's target list (no object files, no cmake's own)."""
    names = target_names(help_text)
    return sorted(n for n in names if n not in NOT_PROGRAMS and not n.endswith((".o", ".i", ".s", ".obj")))


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
    band: StatTestDraft | None = None,
    wish: BuildWish = BuildWish(),
    statistic: str | None = None,
) -> tuple[Path, CommitReport]:
    """Find, build, sample, propose, write, validate (see the module's docstring). `band`: the
    test's tolerance and eta as given (init --tolerance, --eta; default: the config's; for a
    number, in its units). `wish`: what the user said of the build (newconfig.detect; unsaid, it
    is detected). `statistic`: categorical or mean (init --statistic; unsaid: mean when every
    sample prints a number that is not a small count). Returns the config written and the good
    commit's test report (GOOD, or ConfigError says what it was)."""
    if "{seed}" not in " ".join(argv):
        raise ConfigError("init: the command needs {seed} where the seed goes (and {binary} for the program)")
    unknown = [a for a in argv if "{" in a and not any(f"{{{p}}}" in a for p in (*BASE_PLACEHOLDERS, "binary"))]
    if unknown:
        raise ConfigError(
            f"init: unknown placeholder in {unknown[0]!r} (known: binary, {', '.join(BASE_PLACEHOLDERS)})"
        )
    events = events or Events()
    where = repo_entry(repo)
    repo_path = where.get("url") or where["path"]
    with tempfile.TemporaryDirectory(prefix="bisectbot-init-") as tmp:
        work = Path(tmp)
        ws = Workspace(repo_path, work / "clone")
        sha = ws.resolve(good)
        draft, target = _detect_build(ws.export(sha, work / "src"), sha, argv, target, cmake_args, wish, work)
    data: ConfigDraft = {
        "name": name,
        "repo": where,
        "build": draft,
        "run": {"argv": list(argv), "max_runs": 16384},
        "parse": {"split": "chars"},
        "statistic": {"outcome": {"position": 0}},
        "reference": {"probs": probs} if probs else {"control": {"commit": sha}},
        "test": {"tolerance": StatTestConfig().tolerance},  # the band given is written with the statistic
        "storage": {"state_dir": str(state_dir) if state_dir else _free_state_dir(out.parent, name, repo_path)},
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
        outputs, errors = _sample(cfg, build.binaries, session.workspace.checkout(sha))
    proposal = propose(outputs, position, errors)
    given = band is not None
    header_notes: list[str] = []
    if statistic == "mean" or (statistic is None and proposal.numeric and not probs):
        if probs:
            raise ConfigError("init: --probs is a distribution over outcomes, not for --statistic mean")
        proposal = proposal.as_mean()
        band, header_notes = _number_band(proposal, band, given=statistic == "mean")
    data["parse"], data["statistic"] = proposal.parse, proposal.statistic
    data["test"] = band or data["test"]
    shown = errors if proposal.parse.get("stream") == "stderr" else outputs
    header = _header(target, sha, shown, proposal)
    header[-1:-1] = header_notes
    out.write_text(_config_text(data, header, events, given=given))
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


def _free_state_dir(where: Path, name: str, repo: str) -> str:
    """`./NAME-state`, unless that holds another project's clone (another project given the
    same name in this folder): then the first `./NAME-state-K` that is free or this project's."""
    for k in range(1, 100):
        rel = f"./{name}-state" + (f"-{k}" if k > 1 else "")
        if same_project(where / rel / "src", repo):
            return rel
    raise ConfigError(f"init: {name}-state to {name}-state-99 in {where} all hold other projects: give another --name")


def band_text(eta: float, tolerance: float, kind: str = "categorical") -> str:
    """What eta and tolerance mean, in one line (the config's comment, init's own line)."""
    change = {
        "categorical": "a change of total variation",
        "mean": "a change of the mean (in its units)",
        "time": "a slowdown or speed-up (a fraction of the control's time)",
    }[kind]
    return f"{change} below eta {eta:g} is never called BAD, above tolerance {tolerance:g} never GOOD; in between either verdict is allowed"


def _number_band(proposal: Proposal, band: StatTestDraft | None, *, given: bool) -> tuple[StatTestDraft, list[str]]:
    """The test of a number: --tolerance as given (the number's units), else a tenth of the
    samples' mean; and the header's lines saying what init read and why it judges the mean."""
    values = proposal.numbers
    mean = sum(values) / len(values)
    sd = (sum((v - mean) ** 2 for v in values) / max(1, len(values) - 1)) ** 0.5
    why = (
        "as asked (--statistic mean)"
        if given
        else "every sample printed a number (--statistic categorical reads each value as an outcome)"
    )
    notes = [
        f"# statistic.kind mean, {why}: the samples' mean {mean:.4g}, sd {sd:.3g}; each commit's mean is tested.",
    ]
    if bounds := proposal.statistic.get("bounds"):
        what = "a percentage" if bounds[1] == 100 else "a rate"
        notes.append(
            f"# statistic.bounds {bounds}: every value reads as {what}, so the tests are exact at any number of runs "
            "(a run outside them is unreadable: remove bounds if values can fall outside)."
        )
    else:
        notes.append(
            "# No statistic.bounds: the mean is judged by a normal approximation, from run 100 on (more if skewed)."
        )
    if band is not None:
        return band, notes
    tolerance = float(f"{abs(mean) * 0.1:.2g}") if mean else float(f"{max(sd, 1e-9) / 2:.2g}")
    notes.append(
        f"# test.tolerance {tolerance:g} is a tenth of the samples' mean: give init --tolerance T (the number's "
        "units) for the smallest change that matters."
    )
    return StatTestDraft(tolerance=tolerance), notes


def _header(target: str, sha: str, outputs: Sequence[str], proposal: Proposal) -> list[str]:
    """The config's first lines: what init ran, what it read and how (untrusted output on one
    line each, control characters escaped: it cannot end the comment)."""
    first = " | ".join(one_line(o) for o in outputs[:3])
    return [
        f"# bisectbot config written by `bisectbot init` for {target} at {sha[:12]}.",
        f"# {len(outputs)} sample runs; outcome: {one_line(proposal.line())}.",
        *(f"# Note: {one_line(note)}" for note in proposal.notes),
        f"# First outputs: {one_line(first, 200)}",
        "# Every key: configs/example.yaml in bisectbot's repository.",
    ]


def _config_text(data: ConfigDraft, header: list[str], events: Events, *, given: bool) -> str:
    """The config as init writes it: the header, then the sections, `test:` with a comment that
    says what its eta and tolerance mean. What it proposes is said on the way (events), and when
    the band is the default's, that it is and how to change it."""
    test = StatTestConfig.model_validate(data["test"])
    band = band_text(test.indifference, test.tolerance, data["statistic"].get("kind", "categorical"))
    for line in header[1:-2]:
        events.emit(Note(f"init:{line[1:]}"))
    shown = yaml.safe_dump(dict(data["parse"]), default_flow_style=True, sort_keys=False, width=10**6)
    events.emit(Note(f"init: parse: {one_line(shown)}"))
    proposed = "a tenth of the samples' mean" if data["statistic"].get("kind") == "mean" else "the defaults"
    how = "as given" if given else f"{proposed}; give init --tolerance T for the smallest change that matters"
    events.emit(Note(f"init: test.tolerance {test.tolerance:g}, test.eta {test.indifference:g} ({how}): {band}"))
    body = yaml.safe_dump(data, sort_keys=False)
    eta = "" if test.eta is not None else "; eta is 0.3 × tolerance unless set"
    comment = f"# test: the tolerance is the smallest change that matters: {band}{eta}.\n"
    return "\n".join(header) + "\n" + body.replace("\ntest:\n", "\n" + comment + "test:\n", 1)


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
    building once, newconfig.detect), or nothing (build.kind none)."""
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


def _sample(cfg: Config, binaries: dict[str, str], source: Path) -> tuple[list[str], list[str]]:
    """The command's stdout and stderr for the first SAMPLE_SEEDS seeds."""
    values = {**binaries, "config_dir": str(cfg.config_dir), "source": str(source)}
    outputs, errors = [], []
    for seed in range(cfg.run.first_seed, cfg.run.first_seed + SAMPLE_SEEDS):
        try:
            argv = render_argv(list(cfg.run.templates[0].argv), {**values, "seed": str(seed)})
        except KeyError as exc:
            raise ConfigError(
                f"init: {{{exc.args[0]}}} cannot be filled in while sampling: edit the config after"
            ) from None
        res = run(argv, env=clean_env(), timeout=cfg.run.timeout)
        if res.returncode != 0 or res.timed_out:
            raise ConfigError(
                f"init: the command failed on seed {seed} ({one_line(exit_reason(res), 300)}): {argv!r:.200}"
            )
        outputs.append(res.stdout)
        errors.append(res.stderr)
    return outputs, errors


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
    test = StatTestConfig.model_validate(config.get("test") or {})
    kind = str((config.get("statistic") or {}).get("kind", "categorical"))
    if how.statistic in ("mean", "time"):
        from bisectbot.llama.presets import number_of

        name, number = number_of(data.get("preset") or {}, how, path)
        header.append(
            f"# statistic: {number.get('what') or name} (the preset's number {name!r}, statistic.kind {kind}), "
            "judged against the good end's runs (init --number NAME picks another)."
        )
    header.append(f"# test: {band_text(test.indifference, test.tolerance, kind)} (init --tolerance, --eta).")
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
    if detail.values:
        seen = f"mean {detail.values['mean']:.4g} (sd {detail.values['sd']:.3g}) of {detail.values['n']:.0f} numbers"
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
