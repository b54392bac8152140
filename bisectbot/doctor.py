"""What bisectbot needs on this machine, checked before anything is cloned or built.

`bisectbot doctor` prints one line per check, each missing piece with the Debian/Ubuntu package
(or pip command) that provides it. `preflight` is the cheap part of it (is each program on
PATH?), run first by every command that builds, so that a missing cmake is one line naming
`apt-get install cmake` instead of a failed build in a build log and an endpoint that "cannot
build". What is needed is data (`Tool`, `build_tools`); looking at the machine (PATH, versions,
git's view of a repository, the sandbox probe) is the side effect, in the functions below them.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import platform
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from bisectbot.config.sections import BuildConfig
from bisectbot.errors import ToolError
from bisectbot.processes.procs import run
from bisectbot.processes.sandbox import missing as sandbox_missing


@dataclass(frozen=True)
class Tool:
    """A program bisectbot runs: the names it goes by, the package that provides it, and why it
    is needed (said when it is missing, so the user can judge an optional one)."""

    name: str
    commands: tuple[str, ...]  # any of these on PATH will do
    apt: str  # Debian/Ubuntu package
    required: bool
    why: str
    env: str | None = None  # a variable that names the program instead (CC, CXX), as cmake reads it

    @property
    def install(self) -> str:
        return f"apt-get install {self.apt}"


GIT = Tool("git", ("git",), "git", True, "clones the project, lists and checks out its commits")
CMAKE = Tool("cmake", ("cmake",), "cmake", True, "configures and builds every commit")
MAKE = Tool(
    "make",
    ("make",),
    "make",
    True,
    "cmake's default generator (Unix Makefiles) runs it; Debian's cmake only recommends it",
)
NINJA = Tool("ninja", ("ninja",), "ninja-build", True, "cmake's Ninja generator runs it (build.generator)")
CXX = Tool("C++ compiler", ("c++", "g++", "clang++"), "g++", True, "compiles the project", env="CXX")
CC = Tool("C compiler", ("cc", "gcc", "clang"), "gcc", True, "compiles the project's C sources", env="CC")
# Not needed (Makefiles do), but `build.generator: auto` takes it where it is installed.
NINJA_FASTER = Tool(
    "ninja", ("ninja",), "ninja-build", False, "builds use cmake's Makefiles (Ninja's are a little faster)"
)
CCACHE = Tool("ccache", ("ccache",), "ccache", False, "without it each commit's build compiles everything again")
BWRAP = Tool(
    "bwrap",
    ("bwrap",),
    "bubblewrap",
    False,
    "pull-request checks (check --ref pull/<N>/head) build and run untrusted code under it",
)
PRLIMIT = Tool(
    "prlimit",
    ("prlimit",),
    "util-linux",
    False,
    "sets the limits of untrusted code (pull-request checks are refused without it)",
)

# Python packages the pipeline imports lazily (so a broken install shows up only halfway through
# a run): name, minimum version, what needs it.
PACKAGES: tuple[tuple[str, str, str], ...] = (
    ("gguf", "0.10", "the llama config's numpy reference reads the GGUF fixtures"),
)


def generator_args(generator: str, cmake_args: list[str]) -> list[str]:
    """The `-G` arguments for build.generator: none when cmake_args name a generator already or
    Makefiles are asked for (cmake's default on Linux); Ninja when asked for, or for `auto` when
    `ninja` is on PATH. Part of the build directory's key: cmake refuses to switch generators
    in a configured directory."""
    if generator == "make" or any(a.startswith("-G") for a in cmake_args):
        return []
    if generator == "auto" and os.environ.get("CMAKE_GENERATOR"):
        return []  # the user's choice for every cmake
    if generator == "ninja" or shutil.which("ninja") is not None:
        return ["-G", "Ninja"]
    return []


def generator_tool(cmake_args: Iterable[str], environ: Mapping[str, str]) -> Tool:
    """The program cmake's generator runs: ninja for -G Ninja (or CMAKE_GENERATOR=Ninja…),
    otherwise make (Unix Makefiles, cmake's default on Linux and macOS)."""
    args = list(cmake_args)
    generator = environ.get("CMAKE_GENERATOR", "")
    for i, arg in enumerate(args):
        if arg == "-G" and i + 1 < len(args):
            generator = args[i + 1]
        elif arg.startswith("-G") and len(arg) > 2:
            generator = arg[2:]
    return NINJA if generator.startswith("Ninja") else MAKE


def build_tools(cmake_args: Iterable[str] = (), environ: Mapping[str, str] | None = None) -> list[Tool]:
    """The programs a command that builds cannot do without, for these cmake arguments."""
    return [GIT, CMAKE, generator_tool(cmake_args, os.environ if environ is None else environ), CXX, CC]


def cmake_args_of(build: BuildConfig) -> list[str]:
    """Every cmake argument a config may pass (its variants' too): a -G in any of them counts,
    and so does build.generator (`generator_args`: `auto` takes Ninja when it is here)."""
    args = [*build.cmake_args, *(a for v in build.variants or () for a in v.cmake_args)]
    return [*generator_args(build.generator, args), *args]


def config_tools(build: BuildConfig | None) -> list[Tool]:
    """The programs a config's builds cannot do without: cmake's (build.kind cmake, or no
    config), git and the program of each build command (command), git alone (none: nothing is
    built, the commit's tree is exported)."""
    if build is None or build.kind == "cmake":
        return build_tools(cmake_args_of(build) if build is not None else ())
    programs = [argv[0] for argv in build.commands if "/" not in argv[0] and "{" not in argv[0]]
    return [GIT, *dict.fromkeys(command_tool(p) for p in programs)]


def command_tool(program: str) -> Tool:
    """A build command's program as a tool (its package named as Debian names it, when known)."""
    known = {t.commands[0]: t for t in (MAKE, NINJA, CMAKE)}
    return known.get(program) or Tool(program, (program,), program, True, "the build command runs it")


def find(tool: Tool, environ: Mapping[str, str] | None = None) -> str | None:
    """Where `tool` is: its CC/CXX-style variable's program when set (cmake uses that one, so a
    wrong one is missing even if g++ is installed), else the first of its commands on PATH."""
    environ = os.environ if environ is None else environ
    path = environ.get("PATH")
    named = environ.get(tool.env, "").strip() if tool.env else ""
    if named:
        try:
            words = shlex.split(named)  # cmake allows a launcher or flags after the program
        except ValueError:  # unbalanced quotes: taken as written
            words = named.split()
        return shutil.which(words[0], path=path) if words else None
    return next((found for c in tool.commands if (found := shutil.which(c, path=path))), None)


def missing_line(missing: Sequence[Tool], environ: Mapping[str, str]) -> str:
    """One line for the tools a command lacks, with the one apt-get line that installs them all."""
    names = ", ".join(
        t.name + (f" (${t.env}={environ[t.env]})" if t.env and environ.get(t.env) else "") for t in missing
    )
    packages = " ".join(dict.fromkeys(t.apt for t in missing))
    return (
        f"{names} not found on PATH: install with `apt-get install {packages}` (Debian/Ubuntu; "
        f"as a user: sudo apt-get …); `bisectbot doctor` checks everything"
    )


def preflight(tools: Sequence[Tool] | None = None) -> None:
    """ToolError naming every required program of `tools` (default: a cmake build's) that is
    not on PATH (a `shutil.which` each)."""
    missing = [t for t in (build_tools() if tools is None else tools) if find(t) is None]
    if missing:
        raise ToolError(missing_line(missing, os.environ))


# -- bisectbot doctor ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Check:
    """One line of `bisectbot doctor`: `status` is ok, missing (a required piece: exit 2) or
    warning (an optional one)."""

    name: str
    status: str
    detail: str

    @property
    def failed(self) -> bool:
        return self.status == "missing"

    def line(self) -> str:
        label = {"ok": "ok", "missing": "MISSING", "warning": "warning"}[self.status]
        return f"{label:<8} {self.name}: {self.detail}"


def _version(program: str) -> str:
    """First line of `program --version` (empty when it says nothing in 10 s)."""
    res = run([program, "--version"], timeout=10)
    lines = (res.stdout or res.stderr).strip().splitlines() if res.returncode == 0 else []
    return lines[0].strip() if lines else ""


def tool_check(tool: Tool) -> Check:
    where = find(tool)
    if where is None:
        named = os.environ.get(tool.env, "") if tool.env else ""
        what = f"${tool.env}={named!r} is not on PATH" if named else "not found on PATH"
        return Check(tool.name, "missing" if tool.required else "warning", f"{what}; {tool.why}: {tool.install}")
    version = _version(where)
    return Check(tool.name, "ok", f"{version} ({where})" if version else where)


def package_check(name: str, minimum: str, why: str) -> Check:
    fix = f"{sys.executable} -m pip install '{name}>={minimum}'"
    if importlib.util.find_spec(name) is None:
        return Check(f"python package {name}", "missing", f"not importable by {sys.executable}; {why}: {fix}")
    try:
        version = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        version = "?"
    if version != "?" and _older(version, minimum):
        return Check(f"python package {name}", "missing", f"{version} is older than {minimum}; {why}: {fix}")
    return Check(f"python package {name}", "ok", version)


def _older(version: str, minimum: str) -> bool:
    def key(v: str) -> tuple[int, ...]:
        parts = []
        for p in v.split("."):
            digits = "".join(c for c in p if c.isdigit()) if p else ""
            if not digits:
                break
            parts.append(int(digits))
        return tuple(parts)

    return key(version) < key(minimum)


def repo_check(path: Path) -> Check:
    """Whether git will work in `path`: a checkout owned by another user is refused as "dubious
    ownership" (a bind-mounted checkout in a container, a colleague's clone) unless it is listed
    in safe.directory."""
    name = f"repository {path}"
    if find(GIT) is None:
        return Check(name, "missing", "cannot be checked without git")
    res = run(["git", "-C", str(path), "rev-parse", "--git-dir"], timeout=30)
    if res.returncode == 0:
        return Check(name, "ok", "git can read it")
    lines = [ln.strip() for ln in res.stderr.splitlines() if ln.strip()]
    said = next((ln for ln in lines if ln.lower().startswith(("fatal:", "error:"))), lines[0] if lines else "")
    reason = said.split(":", 1)[1].strip() if said.lower().startswith(("fatal:", "error:")) else said
    if "dubious ownership" in reason:
        reason += f"; if you trust it: git config --global --add safe.directory {path.resolve()}"
    return Check(name, "missing", reason or f"git exited with status {res.returncode}")


def sandbox_check() -> Check:
    """Whether untrusted code (a pull request's head) could be run here: bubblewrap making all
    its namespaces (a trivial command is run in it)."""
    name = "pull-request sandbox"
    why = sandbox_missing()
    if why is not None:
        return Check(name, "warning", f"{why}; pull-request checks are refused")
    return Check(name, "ok", "bubblewrap: new user, mount, PID, IPC, UTS and network namespaces")


def checks(tools: Sequence[Tool] | None = None, repo: Path | None = None) -> list[Check]:
    """Everything `bisectbot doctor` looks at, in the order it prints them; `tools` are the
    required programs (`config_tools`; default: a cmake build's)."""
    tools = build_tools() if tools is None else list(tools)
    out = [tool_check(t) for t in tools]
    out += [tool_check(NINJA_FASTER)] if CMAKE in tools and NINJA not in tools else []
    out += [tool_check(CCACHE), tool_check(BWRAP), tool_check(PRLIMIT), sandbox_check()]
    out += [package_check(*p) for p in PACKAGES]
    if repo is not None:
        out.append(repo_check(repo))
    return out


def platform_line() -> str:
    """The machine, as the README's supported-platforms list names it."""
    return f"{platform.system()} {platform.machine()}, Python {platform.python_version()} ({sys.executable})"
