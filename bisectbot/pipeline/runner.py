"""Make a commit ready to run: build it, pick the command variant its binary accepts, and hand
out its runs (stored or executed) as a `RunStream`.

Verdicts, the control sample and cross-check arms all get their runs here, so a run is stored
under the same key whoever asked for it, and replayed for whoever asks next.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from bisectbot.config import Config, Variant
from bisectbot.core.records import BuildRecord
from bisectbot.edges.procs import Server, clean_env, free_port, run
from bisectbot.edges.storage import StateDir
from bisectbot.edges.workspace import Workspace
from bisectbot.pipeline.build import Builder, build_dir_key, build_key
from bisectbot.pipeline.events import Events, VariantChosen
from bisectbot.pipeline.sweep import Executor, ProgramExecutor, RunStream, ServerExecutor, render_argv


@dataclass(frozen=True)
class Prepared:
    """A commit ready to run: its build, how to run one seed (None: it cannot be run, `why`
    says why), the key its runs are stored under, and how many may run at once."""

    sha: str
    build: BuildRecord
    executor: Executor | None
    why: str
    experiment: str
    variant: int | None = None
    jobs: int = 1


def missing_for_variant(help_text: str, variant: Variant) -> list[str]:
    """Flags (and help_contains texts) of a variant that the binary's --help does not show."""
    missing = []
    for arg in variant.argv[1:]:
        if re.fullmatch(r"--?[A-Za-z][\w-]*(=.*)?", arg):
            flag = arg.split("=", 1)[0]
            if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_text):
                missing.append(flag)
    missing += [text for text in variant.help_contains if text not in help_text]
    return missing


def pick_variant(help_text: str, variants: list[Variant]) -> tuple[int | None, str]:
    """The first variant that fits, or None with the reason each one did not."""
    reasons = []
    for i, variant in enumerate(variants):
        missing = missing_for_variant(help_text, variant)
        if not missing:
            return i, f"variant {i}"
        reasons.append(f"variant {i} lacks {', '.join(missing[:3])}")
    return None, "no command variant fits the binary's --help: " + "; ".join(reasons)


class CommitRunner:
    """Builds and runs commits of one config in one state directory."""

    def __init__(self, cfg: Config, state: StateDir, workspace: Workspace, events: Events):
        self.cfg, self.state, self.workspace, self.events = cfg, state, workspace, events
        self.builder = Builder(state, workspace, events, cfg.secret_env_names)
        self.experiment = cfg.experiment_digest()

    # -- seeds ---------------------------------------------------------------------------------
    def seeds(self, start: int, count: int) -> list[int]:
        """The seeds passed for run indices start … start + count − 1 (hashed or not)."""
        return [self.cfg.run.seed(i) for i in range(start, start + count)]

    def seed_block(self, block: int) -> list[int]:
        """Seeds of one block: the main test uses block 0, the final re-test block 1."""
        first, budget = self.cfg.run.first_seed, self.cfg.run.max_runs
        return self.seeds(first + block * budget, budget)

    # -- commits ready to run ------------------------------------------------------------------
    def prepare(self, sha: str) -> Prepared:
        """Build the commit and pick its command variant."""
        cfg = self.cfg
        build = self.builder.ensure(sha, cfg.build)
        if not build.ok:
            return Prepared(sha, build, None, build.reason, self.experiment)
        env = self.run_env(build)
        variant, why = self._variant(sha, build, env)
        if variant is None:
            return Prepared(sha, build, None, why, self.experiment)
        values = {
            **build.binaries,
            "fixtures": str(cfg.fixtures_dir or ""),
            "config_dir": str(cfg.config_dir),
            "source": str(self.workspace.root),
            "build": str(self.state.build_dir(build_dir_key(cfg.build))),
        }
        executor = ProgramExecutor(cfg.run.templates[variant].argv, values, run_cfg=cfg.run,
                                   parse_cfg=cfg.parse, workdir=self.state.run_dir, env=env,
                                   variant=variant)
        return Prepared(sha, build, executor, why, self.experiment, variant,
                        cfg.run.jobs or os.cpu_count() or 1)

    def prepare_arm(self, sha: str, arm: str) -> Prepared:
        """Build a cross-check arm's server at the commit; it starts only if a seed must run."""
        cfg, spec = self.cfg, self.cfg.arms[arm]
        build_cfg = cfg.build.model_copy(update={"targets": spec.targets, "binaries": spec.binaries})
        build = self.builder.ensure(sha, build_cfg)
        experiment = cfg.arm_digest(arm)
        if not build.ok:
            return Prepared(sha, build, None, build.reason, experiment)
        port = free_port()
        values = {**build.binaries, "port": str(port), "fixtures": str(cfg.fixtures_dir or ""),
                  "config_dir": str(cfg.config_dir)}
        server = Server(render_argv(spec.serve, values), port=port, health=spec.health,
                        startup_timeout=spec.startup_timeout, env=self.run_env(build),
                        log=self.state.log_path(f"server-{arm}-{sha}.log"), cwd=self.state.root)
        return Prepared(sha, build, ServerExecutor(spec, server), "", experiment, None, spec.jobs)

    def runs(self, prepared: Prepared, seeds: list[int]) -> RunStream:
        """The commit's runs over `seeds`: stored ones replayed, missing ones executed and stored."""
        assert prepared.executor is not None, "prepare() said this commit cannot be run"
        store = self.state.store
        return RunStream(seeds, store.runs(prepared.experiment, prepared.sha), prepared.executor,
                         lambda rec: store.put_run(prepared.experiment, prepared.sha, rec),
                         jobs=prepared.jobs, check=self.events.check)

    def run_env(self, build: BuildRecord) -> dict[str, str]:
        """Environment for the program under test: no credentials; its kept libraries first."""
        extra = dict(self.cfg.run.env)
        if build.binaries:
            kept = Path(next(iter(build.binaries.values()))).parent
            old = os.environ.get("LD_LIBRARY_PATH", "")
            extra.setdefault("LD_LIBRARY_PATH", f"{kept}{os.pathsep + old if old else ''}")
        return clean_env(extra, drop=self.cfg.secret_env_names)

    def _variant(self, sha: str, build: BuildRecord, env: dict[str, str]) -> tuple[int | None, str]:
        """Which command variant this commit's binary accepts (asked once, then remembered)."""
        cfg, store = self.cfg, self.state.store
        variants = cfg.run.templates
        if len(variants) == 1 and cfg.run.variants is None:
            return 0, "argv"
        key = (build_key(cfg.build), self.experiment, sha)
        if (known := store.variant(*key)) is not None:
            return known
        binary = next(iter(build.binaries.values()))
        res = run([binary, *cfg.run.help_args], env=env, timeout=60, cwd=self.state.root)
        index, why = pick_variant(res.stdout + res.stderr, variants)
        if index is None and not (res.stdout + res.stderr).strip():
            why = f"`{Path(binary).name} {' '.join(cfg.run.help_args)}` printed nothing (exit {res.returncode})"
        store.put_variant(*key, index, why)
        if index is not None:
            self.events.emit(VariantChosen(sha, index))
        return index, why
