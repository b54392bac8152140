"""Make a commit ready to run: build it, pick the command variant its binary accepts, and hand
out its runs (stored or executed) as a `RunStream`.

Verdicts, the control sample and cross-check arms all get their runs here, so a run is stored
under the same key whoever asked for it, and replayed for whoever asks next. That key (the
*run key*) hashes everything that determines a run: the binary's content, the argv as written,
the contents of every file the argv names (fixtures, models), the run environment and how the
output is parsed. Change any of them and the stored runs are not replayed; change the test
levels or the reference and they are.

Command variants are chosen per binary from its `--help` (the first whose flags it shows); a
variant whose runs then mostly fail at that commit (it crashes, or its output does not parse)
is set aside for that binary and the next one that fits is tried, before the commit is skipped.

A runner with a `sandbox` handles untrusted code (a pull request's head): its state directory is
the throwaway box's (processes.sandbox.BoxState), its builds, `--help` and runs all start in the
sandbox, `{fixtures}` and `{config_dir}` name copies in the box (`inputs`), its runs are stored
under keys that name the sandbox, and it starts no cross-check arm (a server in a network
namespace of its own cannot be asked over HTTP).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from bisectbot.building.builder import Builder
from bisectbot.building.buildkeys import Placeholders, named_files, named_paths
from bisectbot.building.trees import KeptTree
from bisectbot.building.workspace import Export, Workspace
from bisectbot.config import Config
from bisectbot.config.sections import BuildConfig, ParseConfig, Variant
from bisectbot.core.policy import UnitCosts, unit_costs
from bisectbot.errors import GitError
from bisectbot.events import Events, VariantChosen, VariantFailed
from bisectbot.judge.parallel import Throttle
from bisectbot.judge.sweep import Executor, ProgramExecutor, Request, RunStream, ServerExecutor, render_argv
from bisectbot.processes.boxfs import BoxRefused
from bisectbot.processes.elf import self_contained
from bisectbot.processes.procs import Server, clean_env, free_port, run
from bisectbot.processes.sandbox import BoxState, Sandbox, with_explicit
from bisectbot.records.commits import BuildRecord, RunRecord
from bisectbot.records.keys import json_key
from bisectbot.state.files import content_hash, file_sha256
from bisectbot.state.statedir import StateDir
from bisectbot.state.storage import VariantChoice


@dataclass(frozen=True)
class Prepared:
    """A commit ready to run: its build, how to run one seed (None: it cannot be run, `why`
    says why; `applicable` False: a cross-check arm that does not exist there), the key its
    runs are stored under, and how many may run at once."""

    sha: str
    build: BuildRecord
    executor: Executor | None
    why: str
    run_key: str = ""
    variant: int | None = None
    jobs: int = 1
    applicable: bool = True
    choice: tuple[str, str] | None = field(default=None, repr=False)  # (binary sha256, variants digest)
    throttle: Throttle | None = field(default=None, repr=False)  # adapts `jobs` to the cut rate
    program: str = ""  # what identifies the program it runs across commits (program_identity)
    # what prints the program's help (to choose a command variant): its binary, or for a build
    # that leaves none (build.kind none) the first variant's command up to its first option
    # (empty for a cross-check arm: its binary)
    help_command: tuple[str, ...] = field(default=(), repr=False)


def program_identity(key: str, build: BuildRecord, argv: list[str], cfg: Config) -> str:
    """What makes two commits run the same program, so that one's test against the reference
    stands for the other's (CommitVerdict.program): the run key (the binaries' bytes, argv,
    input files, environment, parsing) and every other file kept with the binaries (loaded from
    the kept directory; the run key hashes only the binaries). "" where bytes do not settle it:
    a binary that is not self-contained (a runpath into the build tree, a script: processes.elf),
    an argv that reaches into the checkout or the build directory, or a run environment that
    sets the loader's variables."""
    if any(name.startswith("LD_") for name in cfg.run.env):
        return ""
    if any("{source}" in arg or "{build}" in arg for arg in argv):
        return ""
    if not build.binaries or not all(self_contained(Path(p)) for p in build.binaries.values()):
        return ""
    binaries = set(build.binaries.values())
    kept = sorted((Path(path).name, digest) for path, digest in build.hashes.items() if path not in binaries)
    return json_key({"runs": key, "kept": kept}, 16) if kept else key


def missing_for_variant(help_text: str, variant: Variant) -> list[str]:
    """Why a variant does not fit the binary's --help: its flags and `help_contains` texts that
    the help does not show, and its `help_lacks` texts that it does."""
    missing = []
    for arg in variant.argv[1:]:
        if re.fullmatch(r"--?[A-Za-z][\w-]*(=.*)?", arg):
            flag = arg.split("=", 1)[0]
            if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_text):
                missing.append(flag)
    missing += [text for text in variant.help_contains if text not in help_text]
    missing += [f"no {text!r}" for text in variant.help_lacks if text in help_text]
    return missing


def pick_variant(
    help_text: str, variants: list[Variant], failed: Mapping[int, str] | None = None
) -> tuple[int | None, str]:
    """The first variant that fits and has not failed at run time, or None with the reasons."""
    reasons = []
    for i, variant in enumerate(variants):
        if failed and i in failed:
            reasons.append(f"variant {i} failed at run time ({failed[i]})")
            continue
        missing = missing_for_variant(help_text, variant)
        if not missing:
            return i, f"variant {i}"
        reasons.append(f"variant {i} lacks {', '.join(missing[:3])}")
    return None, "no command variant fits the binary's --help: " + "; ".join(reasons)


def run_key(parts: Mapping[str, Any]) -> str:
    return json_key(parts, 24)


def rerun_key(key: str) -> str:
    """The key the second runs of a run key's seeds are stored under (CommitRunner.rerunning)."""
    return run_key({"rerun": key})


class CommitRunner:
    """Builds and runs commits of one config in one state directory."""

    def __init__(
        self,
        cfg: Config,
        state: StateDir,
        workspace: Workspace | Export,
        events: Events,
        *,
        portable: bool = False,
        sandbox: Sandbox | None = None,
        inputs: Mapping[str, str] | None = None,
    ):
        self.cfg, self.state, self.workspace, self.events = cfg, state, workspace, events
        self.portable = portable
        self.sandbox = with_explicit(sandbox, cfg.run.env) if sandbox is not None else None
        self.on_run: Callable[[str, str, RunRecord], None] | None = None  # told of every run stored
        self.values = {"config_dir": str(cfg.config_dir), "fixtures": str(cfg.fixtures_dir or "")}
        self.values.update(inputs or {})  # untrusted: copies in the box
        self.builder = Builder(state, workspace, events, cfg.secret_env_names, self.values, self.sandbox)
        self.experiment = cfg.experiment_digest()  # for reports: what the config says runs are
        self.control_executed = 0  # the control's runs executed (reference.control_runs), for runs_executed
        # run.jobs 0: start at the core count, back off while cut output costs more than it gains
        # (one throttle for the program under test: the cut rate is the program's and the machine's)
        self.throttle = Throttle(os.cpu_count() or 1) if cfg.run.jobs == 0 else None
        # untrusted code's box: the files the bot hashes there are read following no link
        self._box = state.fs if sandbox is not None and isinstance(state, BoxState) else None
        self._common: list[int] = []  # block 0's seeds, the same at every commit (seed_block)
        # `{source}` is the commit's own kept tree (building.trees): its digest keys the runs
        self._uses_tree = cfg.build.kind == "none" or any(
            "{source}" in arg for variant in cfg.run.templates for arg in variant.argv
        )

    # -- seeds ---------------------------------------------------------------------------------
    def seeds(self, start: int, count: int) -> list[int]:
        """The seeds passed for run indices start … start + count − 1 (hashed or not)."""
        return [self.cfg.run.seed(i) for i in range(start, start + count)]

    def seed_block(self, sha: str, block: int, count: int | None = None) -> list[int]:
        """The seeds of one block at the commit: its tests (and the bad-model runs) use block 0,
        common to every commit; runs on fresh seeds use block 1, its own
        (`RunConfig.commit_seeds`); `count` defaults to max_runs. Block 0 is remembered (every
        test starts from it, and the alike table asks for 2^14 of its seeds at every step)."""
        count = count or self.cfg.run.max_runs
        if block != 0:
            return self.cfg.run.commit_seeds(sha, block, count)
        if len(self._common) < count:
            self._common = self.cfg.run.commit_seeds(sha, 0, count)
        return self._common[:count]

    # -- commits ready to run ------------------------------------------------------------------
    def prepare(self, sha: str) -> Prepared:
        """Build the commit and pick its command variant."""
        cfg = self.cfg
        if cfg.run.serve is not None and self.sandbox is not None:
            # its box has no network, and a server started by the bot would run that code outside it
            why = "run.serve: a server is not run for untrusted code (its sandbox has no network)"
            return Prepared(sha, BuildRecord(sha, "unsupported", {}, "", 0.0, why), None, why)
        build = self.builder.ensure(sha, cfg.build, inputs=False)  # the narrowing built the ends already
        if not build.ok:
            return Prepared(sha, build, None, build.reason)
        tree, why = self._tree_of(sha)
        if why:
            return Prepared(sha, build, None, why)
        env = self.run_env(build)
        variants = cfg.run.templates
        values = {
            **build.binaries,
            **self.values,
            "source": str(tree.path if tree is not None else self.workspace.root),
            "build": str(self.builder.build_dir(cfg.build, build.variant)),
        }
        identity, helper = self._program(build, tree, values)
        choice, key = self._choice(sha, identity, helper, env, variants, cfg.run.help_args, cfg.run.variants is None)
        if choice.index is None:
            return Prepared(sha, build, None, choice.why, choice=key, help_command=tuple(helper))
        index = choice.index
        variant, parse = variants[index], cfg.parse_for(index)
        if cfg.run.serve is not None:
            served = self._prepare_server(sha, build, env, index, values, choice.why, key, tree)
            return replace(served, help_command=tuple(helper))
        files, watched = self._run_files(variant.argv, values)
        executor = ProgramExecutor(
            variant.argv,
            values,
            run_cfg=cfg.run,
            parse_cfg=parse,
            workdir=self.run_dir,
            env=env,
            variant=index,
            sandbox=self.sandbox,
            watched=watched,
            on_written=lambda path: self.state.store.mark_output(str(path)),
        )
        stored_as = self._program_key(sha, build, variant.argv, files, parse, tree)
        trusted_here = not self.portable and self.sandbox is None
        return Prepared(
            sha,
            build,
            executor,
            choice.why,
            stored_as,
            index,
            cfg.run.jobs or os.cpu_count() or 1,
            choice=key,
            throttle=self.throttle,
            program=program_identity(stored_as, build, variant.argv, cfg) if trusted_here else "",
            help_command=tuple(helper),
        )

    def _tree_of(self, sha: str) -> tuple[KeptTree | None, str]:
        """The commit's kept tree when its runs reach into it (`{source}`; build.kind none), or
        why it cannot be had (its export failed)."""
        if not self._uses_tree:
            return None, ""
        try:
            return self.builder.tree(sha), ""
        except GitError as exc:
            return None, str(exc)

    def _program_key(
        self,
        sha: str,
        build: BuildRecord,
        argv: Sequence[str],
        files: dict[str, str],
        parse: ParseConfig,
        tree: KeptTree | None = None,
    ) -> str:
        """What the runs of a program are stored under: its command, binaries, input files,
        environment and parse (and the sandbox for untrusted code), and the digest of the
        commit's kept tree when the command reaches into it (`{source}`: a script and every
        module it imports). On a cluster, runs are filed by the build's identity (commit, build
        key, which hashes the cmake arguments and the compiler, build variant) rather than the
        binary's bytes, which embed each worker's own source path: a seed run on one worker is
        not run on another."""
        cfg = self.cfg
        binaries = (
            {"build": self.builder.key(cfg.build), "sha": sha, "variant": build.variant}
            if self.portable
            else self._hashes(build)
        )
        return run_key(
            {
                "kind": "program",
                "argv": list(argv),
                "binaries": binaries,
                "files": files,
                "env": cfg.run.env,
                "parse": parse.key(),
                **({"sandbox": self.sandbox.key()} if self.sandbox is not None else {}),
                **({"tree": tree.digest} if tree is not None else {}),
            }
        )

    def _prepare_server(
        self,
        sha: str,
        build: BuildRecord,
        env: dict[str, str],
        index: int,
        values: dict[str, str],
        why: str,
        choice: tuple[str, str],
        tree: KeptTree | None,
    ) -> Prepared:
        """The program under test is a server (run.serve): started once at the commit when a
        seed must run, asked once per seed (never for untrusted code: `prepare`)."""
        cfg = self.cfg
        assert cfg.run.serve is not None and self.sandbox is None
        variant, parse = cfg.run.templates[index], cfg.parse_for(index)
        port = free_port()
        server = Server(
            render_argv(variant.argv, {**values, "port": str(port)}),
            port=port,
            health=cfg.run.serve.health,
            startup_timeout=cfg.run.serve.startup_timeout,
            env=env,
            log=self.state.log_path(f"server-main-{sha}.log"),
            cwd=self.run_dir,
        )
        binaries = (
            {"build": self.builder.key(cfg.build), "sha": sha, "variant": build.variant}
            if self.portable
            else self._hashes(build)
        )
        key_parts = {
            "kind": "server",
            "serve": variant.argv,
            "binaries": binaries,
            "files": named_files(variant.argv, values),
            "env": cfg.run.env,
            "request": cfg.run.serve.model_dump(mode="json", include={"path", "body", "field"}),
            "parse": parse.key(),
            **({"tree": tree.digest} if tree is not None else {}),
        }
        stored_as = run_key(key_parts)
        return Prepared(
            sha,
            build,
            ServerExecutor(Request.of_run(cfg.run), server, parse, failures_as_runs=True),
            why,
            stored_as,
            index,
            cfg.run.jobs or os.cpu_count() or 1,
            choice=choice,
            throttle=self.throttle,
            program=program_identity(stored_as, build, variant.argv, cfg) if not self.portable else "",
        )

    def _run_files(self, argv: list[str], values: Mapping[str, str]) -> tuple[dict[str, str], list[Path]]:
        """The files of the run command that key its runs, and those to watch for writes.

        `run.inputs` (argv elements as written) names the inputs. Without it, every file the
        argv names is an input unless a run was seen writing it in this state directory (a log
        file a wrapper appends to): such a file stands in the key with the content it had when
        first seen, so the runs stored before the write was noticed keep their key, and a
        restart reruns none of them. Files not yet known as written are watched."""
        chosen, store = self.cfg.run.inputs, self.state.store
        files: dict[str, str] = {}
        watched: list[Path] = []
        for arg, path in named_paths(argv, values).items():
            current = self._digest(path)
            if chosen is not None:
                if arg in chosen and current is not None:
                    files[arg] = current
                continue
            seen = store.run_file(str(path)) or store.first_sight(str(path), current)
            if seen.output:
                if seen.first is not None:
                    files[arg] = seen.first
                continue
            if current is not None:
                files[arg] = current
            watched.append(path)
        return files, watched

    def prepare_arm(self, sha: str, arm: str) -> Prepared:
        """Build a cross-check arm's server at the commit; it starts only if a seed must run.
        Where no build variant or no serve variant fits, the arm is not applicable."""
        cfg, spec = self.cfg, self.cfg.arms[arm]
        if self.sandbox is not None:
            return Prepared(
                sha,
                BuildRecord(sha, "unsupported", {}, "", 0.0, "untrusted code"),
                None,
                "not applicable here: cross-check arms are not run for untrusted code",
                applicable=False,
            )
        build_cfg = BuildConfig(
            cmake_args=cfg.build.cmake_args,
            variants=spec.build_choices,
            keep=cfg.build.keep,
            timeout=cfg.build.timeout,
            jobs=cfg.build.jobs,
        )
        build = self.builder.ensure(sha, build_cfg, inputs=False)
        if build.status == "unsupported":
            return Prepared(sha, build, None, f"not applicable here: {build.reason}", applicable=False)
        if not build.ok:
            return Prepared(sha, build, None, build.reason)
        env = self.run_env(build)
        identity, helper = self._program(build, None, {})
        choice, key = self._choice(
            sha, identity, helper, env, spec.serve_choices, spec.help_args or ["--help"], spec.serve_variants is None
        )
        if choice.index is None:
            return Prepared(sha, build, None, f"not applicable here: {choice.why}", applicable=False, choice=key)
        serve = spec.serve_choices[choice.index]
        port = free_port()
        values = {**build.binaries, "port": str(port), **self.values}
        server = Server(
            render_argv(serve.argv, values),
            port=port,
            health=spec.health,
            startup_timeout=spec.startup_timeout,
            env=env,
            log=self.state.log_path(f"server-{arm}-{sha}.log"),
            cwd=self.state.root,
        )
        parse = serve.parse or spec.parse
        key_parts = {
            "kind": "server",
            "serve": serve.argv,
            "binaries": self._hashes(build),
            "files": named_files(serve.argv, {k: v for k, v in values.items() if k != "port"}),
            "body": spec.body,
            "path": spec.path,
            "field": spec.field,
            "parse": parse.key(),
        }
        return Prepared(
            sha,
            build,
            ServerExecutor(Request.of_arm(spec), server, parse),
            choice.why,
            run_key(key_parts),
            choice.index,
            spec.jobs,
            choice=key,
        )

    def variant_failed(self, prepared: Prepared, reason: str, arm: str | None = None) -> Prepared | None:
        """The variant's runs mostly failed at this commit: set it aside for this binary and
        prepare the next variant that fits; None when there is none."""
        if prepared.choice is None or prepared.variant is None:
            return None
        binary, spec = prepared.choice
        store = self.state.store
        known = store.variant(binary, spec)
        failed = dict(known.failed if known else ())
        failed[prepared.variant] = reason
        variants = self.cfg.run.templates if arm is None else self.cfg.arms[arm].serve_choices
        help_args = self.cfg.run.help_args if arm is None else (self.cfg.arms[arm].help_args or ["--help"])
        helper = list(prepared.help_command) or [next(iter(prepared.build.binaries.values()))]  # an arm's: its binary
        help_text = self._help(helper, help_args, self.run_env(prepared.build))
        index, why = pick_variant(help_text, variants, failed)
        store.put_variant(binary, spec, VariantChoice(index, why, tuple(sorted(failed.items()))))
        self.events.emit(VariantFailed(prepared.sha, prepared.variant, reason, index))
        if index is None:
            return None
        return self.prepare(prepared.sha) if arm is None else self.prepare_arm(prepared.sha, arm)

    def built_already(self, sha: str) -> bool:
        """Whether the commit has a usable stored build (preparing it will not build)."""
        return self.builder.stored(sha, self.cfg.build) is not None

    def unit_costs(self) -> UnitCosts:
        """What a build and a run cost here, as this state directory measured them (its latest
        builds under this config's build key, its latest runs, divided by the runs at once);
        the conservative defaults for what it never measured (core.policy)."""
        timings = self.state.store.timings(self.builder.key(self.cfg.build))
        at_once = min(self.cfg.run.jobs or os.cpu_count() or 1, os.cpu_count() or 1)
        return unit_costs(timings.build_seconds, timings.run_seconds, at_once)

    def runs_version(self, sha: str) -> tuple[int, int]:
        """Changes whenever this process may have changed what `stored_runs` gives for the
        commit: a run of it stored, or a run input marked as written (which changes run keys)."""
        store = self.state.store
        return store.runs_written[sha], store.outputs_marked

    def rerunning(self, prepared: Prepared) -> Prepared:
        """The commit ready to run its seeds a second time: the same program, its runs stored
        under a key of their own (`rerun_key`), never mistaken for the first run of a seed and
        replayed on a resume like any run. Whether a seed prints the same twice says whether
        the program is deterministic per seed (CommitTester.reruns)."""
        return replace(prepared, run_key=rerun_key(prepared.run_key))

    def stored_runs(self, prepared: Prepared) -> dict[int, RunRecord]:
        """The commit's runs already stored, by seed (none is executed)."""
        return self.state.store.runs(prepared.run_key, prepared.sha)

    def runs(self, prepared: Prepared, seeds: list[int]) -> RunStream:
        """The commit's runs over `seeds`: stored ones replayed, missing ones executed and stored."""
        assert prepared.executor is not None, "prepare() said this commit cannot be run"
        store = self.state.store

        def keep(recs: Sequence[RunRecord]) -> None:
            store.put_runs(prepared.run_key, prepared.sha, recs)
            if self.on_run is not None:
                for rec in recs:
                    self.on_run(prepared.run_key, prepared.sha, rec)

        return RunStream(
            seeds,
            store.runs(prepared.run_key, prepared.sha),
            prepared.executor,
            keep,
            jobs=prepared.throttle or prepared.jobs,
            check=self.events.check,
        )

    @property
    def run_dir(self) -> Path:
        """The program's working directory (for untrusted code, in the box)."""
        return self.state.run_dir

    def run_env(self, build: BuildRecord) -> dict[str, str]:
        """Environment for the program under test: no credentials; its kept libraries first."""
        extra = dict(self.cfg.run.env)
        if build.binaries:
            kept = Path(next(iter(build.binaries.values()))).parent
            old = os.environ.get("LD_LIBRARY_PATH", "")
            extra.setdefault("LD_LIBRARY_PATH", f"{kept}{os.pathsep + old if old else ''}")
        return clean_env(extra, drop=self.cfg.secret_env_names)

    # -- command variants ----------------------------------------------------------------------
    def _program(self, build: BuildRecord, tree: KeptTree | None, values: Mapping[str, str]) -> tuple[str, list[str]]:
        """What a command variant is chosen for, and the command that prints its help: the
        binary's sha256 and the binary; for a build that leaves none (build.kind none), the
        kept tree's digest and the first command variant up to its first option (`python3
        {source}/main.py`, to which help_args are added)."""
        if build.binaries:
            path = next(iter(build.binaries.values()))
            return self._digest(path, remembered=True) or "", [path]
        first = self.cfg.run.templates[0].argv
        upto = next((i for i, arg in enumerate(first) if arg.startswith("-")), len(first))
        helper = [arg.format_map(Placeholders(values)) for arg in first[: max(upto, 1)]]
        return (tree.digest if tree is not None else ""), helper

    def _choice(
        self,
        sha: str,
        identity: str,
        helper: list[str],
        env: dict[str, str],
        variants: list[Variant],
        help_args: list[str],
        single: bool,
    ) -> tuple[VariantChoice, tuple[str, str]]:
        """Which command variant this program accepts (asked once per program: its binary's
        content, or its tree's; then remembered with the variants that failed at run time)."""
        spec = run_key({"variants": [v.model_dump(mode="json") for v in variants], "help": help_args})
        key = (identity, spec)
        if single:
            return VariantChoice(0, "argv"), key
        store = self.state.store
        if (known := store.variant(*key)) is not None:
            return known, key
        help_text = self._help(helper, help_args, env)
        index, why = pick_variant(help_text, variants)
        if index is None and not help_text.strip():
            why = f"`{' '.join([Path(helper[0]).name, *helper[1:], *help_args])}` printed nothing"
        choice = VariantChoice(index, why)
        store.put_variant(*key, choice)
        if index is not None:
            self.events.emit(VariantChosen(sha, index))
        return choice, key

    def _help(self, helper: list[str], help_args: list[str], env: dict[str, str]) -> str:
        res = run([*helper, *help_args], env=env, timeout=60, cwd=self.run_dir, sandbox=self.sandbox)
        return res.stdout + res.stderr

    def _hashes(self, build: BuildRecord) -> dict[str, str]:
        return {name: self._digest(path, remembered=True) or "" for name, path in build.binaries.items()}

    def _digest(self, path: Path | str, *, remembered: bool = False) -> str | None:
        """sha256 of a regular file (None: there is none); in untrusted code's box, read
        following no link; else remembered while its size and mtime hold, if asked."""
        if self._box is not None:
            try:
                return self._box.sha256(Path(path))
            except BoxRefused:
                return None
        if not Path(path).is_file():
            return None
        return content_hash(path) if remembered else file_sha256(path)
