"""The commands that need no project of one's own: `demo` (a generated history with a planted
defect, bisected end to end), `doctor` (what this machine lacks for a build) and `fixtures`
(the tiny GGUF models the llama tests use)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from bisectbot import doctor
from bisectbot.cli.guard import EXIT_INPUT, EXIT_OK, EXIT_UNDECIDED, OneLineGroup, guard
from bisectbot.cli.options import color_option, html_option, json_option, markdown_option, quiet_option
from bisectbot.cli.terminal import Terminal, summary_width
from bisectbot.cli.wiring import announce_state, one_stdout, state_of, write_bisect_outputs
from bisectbot.config import load_config
from bisectbot.config.sections import repo_entry
from bisectbot.demo import MIN_COMMITS as DEMO_MIN_COMMITS
from bisectbot.errors import BisectbotError
from bisectbot.events import Events
from bisectbot.jobs import lifecycle as jobs
from bisectbot.newconfig.detect import BuildWish
from bisectbot.report.markdown import bound_text, count_of
from bisectbot.report.text import shell_lines, wrap

if TYPE_CHECKING:
    from bisectbot.newconfig.write import StatTestDraft


@click.command()
@click.option(
    "--commits",
    default=100,
    show_default=True,
    type=click.IntRange(min=DEMO_MIN_COMMITS),
    help=f"Commits in the generated history (at least {DEMO_MIN_COMMITS}).",
)
@click.option("--seed", default=0, show_default=True, help="Seed that places the planted culprit.")
@click.option(
    "--outside",
    default=0.5,
    show_default=True,
    type=click.FloatRange(0, 1),
    help="Share of ordinary commits that touch only files the build never compiles (CI, a "
    "CUDA file, scripts, docs), as most of llama.cpp's do; the bisect skips them.",
)
@click.option(
    "--dir",
    "workdir",
    type=click.Path(file_okay=False),
    help="Where to generate the demo (default: a new temporary directory).",
)
@json_option
@markdown_option
@html_option
@quiet_option
@color_option
def demo(
    commits: int,
    seed: int,
    outside: float,
    workdir: str | None,
    json_path: str | None,
    md_path: str | None,
    html_path: str | None,
    quiet: bool,
    color: str,
) -> None:
    """Generate a C++ speculative sampler with a planted defect in its history, and bisect it."""
    import tempfile

    from bisectbot.demo import generate_demo

    def body() -> int:
        one_stdout(json_path, md_path)
        root = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="bisectbot-demo-"))
        if workdir and root.exists() and any(root.iterdir()):
            raise BisectbotError(f"--dir {root} is not empty: give a new or empty directory")
        terminal = Terminal(quiet=quiet, color=color)
        doctor.preflight()  # git makes the history, cmake, make and c++ build it
        terminal.line(f"generating a {commits}-commit history in {root} …")
        history = generate_demo(root, n_commits=commits, seed=seed, outside=outside)
        cfg = load_config(history.config)
        with state_of(cfg, None) as state:  # the config's storage.state_dir: root/state
            session = jobs.Session(cfg, state, Events(terminal), config_path=str(history.config))
            plan = jobs.plan_bisect(session, history.good, history.bad)
            announce_state(terminal, session, plan.line)
            report = jobs.run_bisect(session, plan)
        found = report.first_bad == history.culprit
        outcome = (
            f"planted culprit {history.culprit[:12]}: "
            f"{'found' if found else 'NOT found'} with {count_of(report.builds, 'build')} "
            f"({bound_text(report)}) and {count_of(report.runs, 'run')}"
        )
        write_bisect_outputs(terminal, report, json_path, md_path, color, html_path)
        if json_path != "-":
            click.echo("\n".join(wrap(outcome, summary_width(), "    ")))
            click.echo(
                "every commit it tested:\n" + "\n".join(shell_lines(f"bisectbot log {history.config}", summary_width()))
            )
        else:  # stdout is the JSON's alone
            terminal.line(outcome)
        return EXIT_OK if found else EXIT_UNDECIDED

    guard(body)


@click.command("doctor")
@click.argument("config", type=click.Path(), required=False)
@click.option(
    "--repo",
    type=click.Path(file_okay=False),
    help="Also check that git can read this checkout (safe.directory, ownership).",
)
def doctor_command(config: str | None, repo: str | None) -> None:
    """Check that this machine has what bisectbot needs: cmake, make, compilers, git, ccache.

    One line per check; a missing piece names the Debian/Ubuntu package to install. With CONFIG:
    what its build needs (cmake's generator, make or ninja; a build command's program; nothing
    for build.kind none) and its local repository are checked too. Exit 0 when
    everything required is there, 2 otherwise (optional pieces only warn).
    """

    def body() -> int:
        cfg = load_config(config) if config else None
        where = Path(repo) if repo else (Path(cfg.repo_source) if cfg and cfg.repo.path else None)
        results = doctor.checks(doctor.config_tools(cfg.build if cfg else None), where)
        click.echo(doctor.platform_line())
        for check in results:
            click.echo(check.line())
        failed = [c.name for c in results if c.failed]
        if failed:
            click.echo(f"bisectbot doctor: missing {', '.join(failed)}: builds cannot run here", err=True)
            return EXIT_INPUT
        return EXIT_OK

    guard(body)


@click.group(cls=OneLineGroup)
def fixtures() -> None:
    """Generate test fixtures (tiny GGUF models every llama.cpp program can load)."""


@fixtures.command("tiny-llama")
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Directory to write target.gguf and draft.gguf into.",
)
@click.option(
    "--seed",
    type=int,
    default=None,
    help="Generator seed (default 879, which made fixtures/; 40 with --open-vocab, fixtures/open-vocab/).",
)
@click.option(
    "--open-vocab",
    is_flag=True,
    help="The variant whose 94 printable ASCII bytes ('!'..'~') can all be sampled (EOS </s>, never sampled).",
)
def tiny_llama(out_dir: str, seed: int | None, open_vocab: bool) -> None:
    """Write a tiny random Llama target (2 layers, F32, gpt2 byte vocabulary, EOS h) and a noisy
    draft: every llama.cpp program of every tree from 2024 on loads them; only a..h are sampled
    (--open-vocab: every printable ASCII byte).

    Deterministic: the same seed writes byte-identical files. Prints their sha256s.
    """
    from bisectbot.llama.fixtures import DEFAULT_SEED, OPEN_SEED, write_tiny_llama

    def body() -> int:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        chosen = seed if seed is not None else OPEN_SEED if open_vocab else DEFAULT_SEED
        for name, digest in write_tiny_llama(out, chosen, open_vocab).items():
            click.echo(f"{digest}  {out / name}")
        return 0

    guard(body)


@click.command()
@click.argument("repo", metavar="REPO")
@click.argument("argv", nargs=-1)
@click.option("--good", required=True, help="A commit (ref) known to behave right: built, sampled, and tested GOOD.")
@click.option(
    "--llama",
    "program",
    metavar="PROGRAM",
    help="Start from bisectbot's preset for this llama.cpp program (llama-speculative, llama-cli, "
    "llama-simple, llama-server; configs/llama/): its builds, flags and output formats across "
    "llama.cpp's history. ARGV (after --), if any, replaces the preset's sampling arguments "
    "(for llama-server: request fields as KEY=VALUE, e.g. top_k=40).",
)
@click.option("--target", help="The cmake target that builds the program (without it: the list of targets).")
@click.option(
    "--build-kind",
    type=click.Choice(["cmake", "command", "none"]),
    metavar="KIND",
    help="How a commit is built: cmake, command or none [default: detected: a command without "
    "{binary} builds nothing (none), a CMakeLists.txt is cmake, a Makefile `make -j{jobs}` (command)].",
)
@click.option(
    "--build-command",
    metavar="COMMAND",
    help="The build command run in each commit's tree, split as a shell would (never run by one), "
    "e.g. 'cargo build --release'; placeholders {jobs}, {source}.",
)
@click.option(
    "--binary",
    metavar="PATH",
    help="With a build command: the file {binary} stands for, relative to the tree [default: the one "
    "executable the build makes].",
)
@click.option("--name", help="The config's name (reports, state directory) [default: project, or the preset's].")
@click.option("--position", type=int, help="Which output token is the outcome [default: 0, or the preset's].")
@click.option("--condition", metavar="TOKEN|none", help="--llama: count only runs whose first token is TOKEN.")
@click.option("--prompt", help="--llama: the prompt instead of the preset's (bcdbc).")
@click.option(
    "--program-defaults",
    is_flag=True,
    help="--llama: none of the preset's sampling arguments: the program's own defaults apply.",
)
@click.option(
    "--reference",
    "reference_how",
    default="good",
    show_default=True,
    metavar="good|exact|REF",
    help="--llama: what commits are judged against: like the good end, the preset's exact "
    "(numpy) reference where it has one, or like the commit REF.",
)
@click.option(
    "--probs",
    help="The exact reference as OUTCOME=P,… (e.g. a=0.3,b=0.7); without it, a measured one: runs of --good.",
)
@click.option(
    "--statistic",
    type=click.Choice(["categorical", "mean", "time"]),
    help="What is judged: the outcome's distribution (categorical), the mean of a number each run "
    "prints (mean), or with --llama a timing the program prints, timed beside the good end (time) "
    "[default: mean when every sample prints a number that is not a small count].",
)
@click.option(
    "--number",
    metavar="NAME",
    help="--llama with --statistic mean|time: which number the program prints (the preset's "
    "`numbers`, e.g. accept, speed) [default: the preset's first of that kind].",
)
@click.option(
    "--tolerance",
    type=click.FloatRange(0, min_open=True),
    help="The smallest change that matters, in total variation (for a mean, in the number's units): a "
    "commit this far from the reference or farther is never called GOOD (test.tolerance) [default: 0.1; "
    "for a mean, a tenth of the samples' mean].",
)
@click.option(
    "--eta",
    type=click.FloatRange(0, max_open=False),
    help="A change below this (total variation; for a mean, its units) is never called BAD (test.eta); "
    "between eta and the tolerance either verdict is allowed [default: 0.3 × tolerance].",
)
@click.option("--output", "-o", type=click.Path(dir_okay=False), help="Where to write it [default: NAME.yaml].")
@quiet_option
def init(
    repo: str,
    argv: tuple[str, ...],
    good: str,
    program: str | None,
    target: str | None,
    build_kind: str | None,
    build_command: str | None,
    binary: str | None,
    name: str | None,
    position: int | None,
    condition: str | None,
    prompt: str | None,
    program_defaults: bool,
    reference_how: str,
    probs: str | None,
    statistic: str | None,
    number: str | None,
    tolerance: float | None,
    eta: float | None,
    output: str | None,
    quiet: bool,
) -> None:
    """Write a working config for REPO (a local checkout, or a clone URL) from the command line
    ARGV (after `--`; {binary} is the program, {seed} the seed, {source} the commit's own tree):
    find how the project is built
    (cmake: list its targets and build --target; a Makefile or --build-command: build once and
    take the executable it makes; a command without {binary}: nothing to build), build it at
    --good, run it on a few seeds to propose how its output is read, and test --good GOOD with
    the config.

    With --llama PROGRAM: start from the preset for that llama.cpp program instead, customised by
    --prompt, --condition, --position, --reference and the sampling arguments ARGV (for
    llama-server, the request's sampling fields as KEY=VALUE), then build and test it at --good
    the way every bisect will.

    --tolerance is the smallest change that matters: a commit within eta of the reference is
    never called BAD, one beyond the tolerance never GOOD, and in between either verdict is
    allowed (so a change smaller than the tolerance may be missed)."""

    def body() -> int:
        if "url" not in repo_entry(repo) and not Path(repo).is_dir():
            raise click.BadParameter(
                f"{repo}: no such directory (give a local checkout or a clone URL)", param_hint="REPO"
            )
        terminal = Terminal(quiet=quiet)
        band = _band(tolerance, eta)
        llama_only = {"--condition": condition, "--prompt": prompt, "--program-defaults": program_defaults}
        build = {"--build-kind": build_kind, "--build-command": build_command, "--binary": binary}
        if wrong := [flag for flag, said in (build if program is not None else llama_only).items() if said]:
            why = (
                "a preset (--llama) says how llama.cpp is built" if program is not None else "goes with --llama PROGRAM"
            )
            raise click.UsageError(f"{wrong[0]}: {why}" if program is not None else f"{wrong[0]} {why}")
        if program is not None:
            return _init_llama(
                terminal,
                program,
                repo,
                good,
                argv,
                name,
                position,
                condition,
                prompt,
                program_defaults,
                reference_how,
                output,
                (tolerance, eta),
                statistic,
                number,
            )
        if number is not None:
            raise click.UsageError("--number goes with --llama PROGRAM (a number the preset knows)")
        if statistic == "time":
            raise click.BadParameter(
                "time goes with --llama PROGRAM (a timing the preset knows)", param_hint="--statistic"
            )
        wish = BuildWish.of(build_kind, build_command, binary)
        if statistic != "mean" and tolerance is not None and tolerance >= 1 and statistic is not None:
            raise click.BadParameter(f"{tolerance:g} is a total variation here, below 1", param_hint="--tolerance")
        return _init_project(terminal, repo, good, argv, target, wish, name, position, probs, output, band, statistic)

    guard(body)


def _init_project(
    terminal: Terminal,
    repo: str,
    good: str,
    argv: tuple[str, ...],
    target: str | None,
    wish: BuildWish,
    name: str | None,
    position: int | None,
    probs: str | None,
    output: str | None,
    band: StatTestDraft | None,
    statistic: str | None = None,
) -> int:
    """`init` for a project of one's own: its build found, sampled, the config written, tested at --good."""
    from bisectbot.newconfig.write import write_config

    if not argv:
        raise click.UsageError("give the command after -- ({binary} the program, {seed} the seed), or --llama PROGRAM")
    table = _probs(probs) if probs else None
    out = Path(output or f"{name or 'project'}.yaml")
    path, report = write_config(
        repo,
        good,
        list(argv),
        out=out,
        target=target,
        name=name or "project",
        probs=table,
        position=position or 0,
        events=Events(terminal),
        band=band,
        wish=wish,
        statistic=statistic,
    )
    terminal.close()
    click.echo(f"wrote {path}: {good} tests GOOD with it after {report.detail.runs} runs")
    click.echo(f"next: bisectbot bisect {path} --good {good} --bad BAD")
    return EXIT_OK


def _init_llama(
    terminal: Terminal,
    program: str,
    repo: str,
    good: str,
    argv: tuple[str, ...],
    name: str | None,
    position: int | None,
    condition: str | None,
    prompt: str | None,
    program_defaults: bool,
    reference_how: str,
    output: str | None,
    band: tuple[float | None, float | None],
    statistic: str | None = None,
    number: str | None = None,
) -> int:
    """`init --llama PROGRAM`: the preset customised, written, and tested at --good; `band`:
    --tolerance and --eta as given (unset: the preset's); `statistic` mean|time: a number the
    program prints (the preset's `numbers`, `number` by name)."""
    from bisectbot.cli.wiring import default_state_dir
    from bisectbot.llama.presets import Customisation
    from bisectbot.newconfig.write import write_llama_config

    if program_defaults and argv:
        raise click.UsageError("--program-defaults drops the sampling arguments: give no ARGV with it")
    how = Customisation(
        repo=repo,
        name=name,
        prompt=prompt,
        args=[] if program_defaults else (list(argv) if argv else None),
        condition=condition,
        position=position,
        reference=reference_how,
        tolerance=band[0],
        eta=band[1],
        statistic=statistic if statistic in ("mean", "time") else None,
        number=number,
    )
    out = Path(output or f"{name or program}.yaml")
    path, report = write_llama_config(program, good, how, out=out, state_for=default_state_dir, events=Events(terminal))
    terminal.close()
    click.echo(f"wrote {path}: {good} tests GOOD with it after {report.detail.runs} runs")
    click.echo(f"next: bisectbot bisect {path} --good {good} --bad BAD")
    return EXIT_OK


def _band(tolerance: float | None, eta: float | None) -> StatTestDraft | None:
    """init's `test:` section from --tolerance and --eta (None: neither given, the defaults)."""
    from bisectbot.config.sections import StatTestConfig
    from bisectbot.newconfig.write import StatTestDraft

    if tolerance is None and eta is None:
        return None
    band = StatTestDraft(tolerance=StatTestConfig().tolerance if tolerance is None else tolerance)
    if eta is not None:
        if eta >= band["tolerance"]:
            raise click.BadParameter(f"{eta:g} is not below the tolerance {band['tolerance']:g}", param_hint="--eta")
        band["eta"] = eta
    return band


def _probs(text: str) -> dict[str, float]:
    """--probs a=0.3,b=0.7 → {"a": 0.3, "b": 0.7}, or a click error naming the part."""
    out: dict[str, float] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            raise click.BadParameter(f"{part!r} is not OUTCOME=PROBABILITY", param_hint="--probs") from None
        if not sep or not key.strip():
            raise click.BadParameter(f"{part!r} is not OUTCOME=PROBABILITY", param_hint="--probs")
    return out
