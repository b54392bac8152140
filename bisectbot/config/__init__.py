"""The config: the YAML that names repo, build, run, parse, statistic, reference and test.

Validation happens once, here, so the rest of bisectbot can trust every field. Every problem becomes one
`ConfigError` line naming the file and the key path (``configs/x.yaml: run.timeout: ...``).
Relative paths are resolved against the config file's directory, never the current directory.

This module is the package's face: `load_config` and the root `Config`, with the checks across
sections. The sections themselves are `config.sections`, the seed layout `config.seeds`, and the
keys over time `config.history`: what keeps digests (so job ids) stable, what was removed.
"""

from __future__ import annotations

import difflib
import os
import stat
import types
import typing
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, Field, ValidationError, model_validator

from bisectbot.config.history import digest_data, removed_key
from bisectbot.config.sections import (
    BASE_PLACEHOLDERS,
    GOOD_END,
    ArmConfig,
    BuildConfig,
    ControlReference,
    GitHubConfig,
    ParseConfig,
    PresetInfo,
    ReferenceConfig,
    RepoConfig,
    RunConfig,
    StatisticConfig,
    StatTestConfig,
    StorageConfig,
    Strict,
    UntrustedConfig,
    check_placeholders,
    placeholders_in,
)
from bisectbot.errors import ConfigError
from bisectbot.records.keys import json_key

__all__ = ["CONFIG_MAX_BYTES", "Config", "load_config", "read_config_text"]


class Config(Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    repo: RepoConfig
    fixtures: str | None = None
    build: BuildConfig
    run: RunConfig
    parse: ParseConfig = ParseConfig()
    statistic: StatisticConfig
    reference: ReferenceConfig
    test: StatTestConfig = StatTestConfig()
    arms: dict[str, ArmConfig] = Field(default_factory=dict)
    # GitHub settings are not part of the experiment: excluded from dumps, so from digest().
    github: GitHubConfig | None = Field(default=None, exclude=True)
    # Nor are the sandbox's limits (sandboxed runs are stored under keys that name them).
    untrusted: UntrustedConfig = Field(default_factory=UntrustedConfig, exclude=True)
    # Nor are the state directory's size caps (what is kept on disk, never what a run means).
    storage: StorageConfig = Field(default_factory=StorageConfig, exclude=True)
    # Nor is what `init --llama` reads of a preset (configs/llama/).
    preset: PresetInfo | None = Field(default=None, exclude=True)

    # Filled in by `load_config`, not by the YAML.
    source_path: Path | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _kinds(self) -> "Config":
        """What the statistic's kind asks of the reference and the test (`statistic.kind`)."""
        stat, ref, test = self.statistic, self.reference, self.test
        if not stat.numeric:
            if ref.mean is not None:
                raise ValueError("reference.mean is for a number (statistic.kind: mean)")
            if test.relative:
                raise ValueError("test.relative is for a number (statistic.kind: mean)")
            for key, value in (("tolerance", test.tolerance), ("eta", test.indifference)):
                if value >= 1:
                    raise ValueError(f"test.{key}: {value:g} is a total variation here, below 1")
            return self
        if ref.probs is not None or ref.compute is not None:
            raise ValueError(
                f"statistic.kind {stat.kind} judges a number: give reference.mean, or reference: good "
                "(like the good end), not reference.probs or reference.compute"
            )
        if stat.kind == "time" and ref.control is None:
            raise ValueError(
                "statistic.kind time judges a timing against the control's runs, interleaved with it: give "
                "reference: good (the good end) or reference.control"
            )
        if "tolerance" not in test.model_fields_set:
            units = "a fraction of the control's time, e.g. 0.05" if stat.kind == "time" else "the number's units"
            raise ValueError(f"statistic.kind {stat.kind}: give test.tolerance ({units})")
        if (stat.kind == "time" or test.relative) and test.tolerance >= 1:
            raise ValueError(f"test.tolerance: {test.tolerance:g} is a fraction of the reference here, below 1")
        if test.relative and ref.mean is not None and ref.mean == 0:
            raise ValueError("test.relative: the reference mean is 0, so a fraction of it is nothing")
        return self

    @model_validator(mode="after")
    def _computable(self) -> "Config":
        if self.reference.compute is not None:
            cond, out = self.statistic.condition, self.statistic.position
            if not ((cond is None and out == 0) or (cond is not None and cond.position == 0 and out == 1)):
                raise ValueError(
                    "reference.compute needs the outcome right after the prompt "
                    "(outcome 0) or after the condition token (condition 0, outcome 1)"
                )
        return self

    @model_validator(mode="after")
    def _positions(self) -> "Config":
        """A statistic's position must be one a run can produce: below parse.expect_tokens
        (exactly that many tokens) and below the run's generation length where the command
        states it (`-n`/`--n-predict`, or a server request's `n_predict`). Otherwise every run
        would be read as "not there" and a good commit could test BAD."""
        stat = self.statistic
        wanted = [] if stat.wall_time else [("statistic.outcome.position", stat.position)]
        if stat.condition is not None:
            wanted.append(("statistic.condition.position", stat.condition.position))
        for v, variant in enumerate(self.run.templates):
            where = "run.argv" if self.run.argv is not None else f"run.variants[{v}]"
            limits = []
            parse = self.parse_for(v)
            if parse.expect_tokens is not None:
                name = "parse" if variant.parse is None else f"run.variants[{v}].parse"
                limits.append((parse.expect_tokens, f"{name}.expect_tokens is {parse.expect_tokens}"))
            if (n := generation_length(variant.argv, self.run.serve.body if self.run.serve else None)) is not None:
                limits.append((n, f"{where} generates at most {n} token(s) ({n_source(self.run.serve)})"))
            for key, position in wanted:
                for limit, why in limits:
                    if position >= limit:
                        raise ValueError(f"{key}: {position} cannot exist: {why}, so positions 0..{limit - 1}")
        return self

    @model_validator(mode="after")
    def _placeholders(self) -> "Config":
        known = BASE_PLACEHOLDERS | set(self.build.binary_names) | ({"port"} if self.run.serve else set())
        for v, variant in enumerate(self.run.templates):
            where = "run.argv" if self.run.argv is not None else f"run.variants[{v}].argv"
            check_placeholders(variant.argv, where, known)
            if self.build.kind == "none":
                used = {name for arg in variant.argv for name in placeholders_in(arg, where)}
                if "source" not in used:
                    raise ValueError(
                        f"{where}: with build.kind none the program is the commit's own tree: name it "
                        "with {source} (e.g. python3 {source}/main.py)"
                    )
                if "build" in used:
                    raise ValueError(f"{where}: build.kind none builds nothing, so there is no {{build}}")
        return self

    @model_validator(mode="after")
    def _arms_build_with_cmake(self) -> "Config":
        if self.arms and self.build.kind != "cmake":
            raise ValueError(
                f"arms: cross-check arms are cmake targets: they need build.kind cmake, not {self.build.kind}"
            )
        return self

    # -- derived values -------------------------------------------------------------------
    @property
    def config_dir(self) -> Path:
        return self.source_path.parent if self.source_path else Path.cwd()

    def resolve(self, value: str) -> Path:
        """A path from the config, relative to the config file's directory ({fixtures} allowed)."""
        if "{" in value:
            value = value.format(fixtures=self.fixtures_dir or "", config_dir=self.config_dir)
        path = Path(os.path.expanduser(value))
        return path if path.is_absolute() else (self.config_dir / path).resolve()

    @property
    def fixtures_dir(self) -> Path | None:
        return self.resolve(self.fixtures) if self.fixtures else None

    @property
    def repo_source(self) -> str:
        """What the bot clones from: the resolved local path, or the URL."""
        return str(self.resolve(self.repo.path)) if self.repo.path else str(self.repo.url)

    def digest(self) -> str:
        """Hash of everything that defines the experiment, for caching and reproduction lines."""
        return _digest(digest_data(self.model_dump(mode="json")))

    def parse_for(self, variant: int) -> "ParseConfig":
        """How the output of command variant `variant` is read."""
        return self.run.templates[variant].parse or self.parse

    def experiment_digest(self) -> str:
        """Hash of what the config says determines per-seed outcomes (build, run, parse,
        statistic), shown in reports: alpha or the reference do not change it, the command does.
        Stored runs are keyed by the run key (runner.run_key), which also hashes the binary."""
        data = digest_data(self.model_dump(mode="json", include={"build", "run", "parse", "statistic"}))
        for volatile in ("timeout", "jobs", "max_runs", "retries"):
            data["run"].pop(volatile, None)
        data["build"].pop("timeout", None)
        data["build"].pop("jobs", None)
        return _digest(data)

    @property
    def secret_env_names(self) -> tuple[str, ...]:
        """Environment variables this config names as secrets (the GitHub token, the webhook
        secret): never passed to builds or runs, whatever their names look like."""
        gh = self.github
        return (gh.token_env, gh.webhook_secret_env) if gh is not None else ()

    def with_repo_path(self, path: str) -> "Config":
        """The same config pointed at another checkout (``--repo``)."""
        return self.model_copy(update={"repo": RepoConfig(path=str(Path(path).resolve()))})

    def without_arms(self) -> "Config":
        """The same config with no cross-check arms (``--no-arms``: their builds cost minutes)."""
        return self.model_copy(update={"arms": {}})

    def with_reference(self, how: str | None) -> "Config":
        """``--reference``: ``config`` (or None) as written; ``good``, like the job's good end;
        any other value, like that commit (a ref): a control sample measured there, with the
        config's own control settings when it has them."""
        if not how or how == "config":
            return self
        commit = GOOD_END if how == "good" else how
        control = self.reference.control
        settings = control.model_copy(update={"commit": commit, "good_end": False}) if control else None
        reference = ReferenceConfig(control=settings or ControlReference(commit=commit))
        return self.model_copy(update={"reference": reference})

    def with_good_end(self, sha: str) -> "Config":
        """The config with a reference "like the good end" bound to the job's good end `sha`
        (unchanged when its reference is anything else)."""
        control = self.reference.control
        if control is None or not control.unbound:
            return self
        bound = control.model_copy(update={"commit": sha, "good_end": True})
        return self.model_copy(update={"reference": self.reference.model_copy(update={"control": bound})})


def _digest(data: Any) -> str:
    return json_key(data, 16, compact=True)


def _format_loc(loc: tuple[Any, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _did_you_mean(loc: tuple[Any, ...]) -> str:
    """' (did you mean targets?)' for a misspelt key, found among the keys allowed there.

    Walks the key path through optional sections (`github.isue`), dict values
    (`arms.<name>.serv`) and list items (`run.variants[0].agrv`)."""
    annotation: Any = Config
    for part in loc[:-1]:
        annotation = _unwrap_optional(annotation)
        origin = typing.get_origin(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            field = annotation.model_fields.get(part) if isinstance(part, str) else None
            if field is None:
                return ""
            annotation = field.annotation
        elif origin in (dict, list):
            annotation = typing.get_args(annotation)[-1]  # skip the key or index
        else:
            return ""
    model = _unwrap_optional(annotation)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        return ""
    close = difflib.get_close_matches(str(loc[-1]), list(model.model_fields), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def _unwrap_optional(annotation: Any) -> Any:
    """`X | None` → X (other unions are left alone)."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType) and len(args) == 1:
        return args[0]
    return annotation


def generation_length(argv: list[str], body: dict[str, Any] | None) -> int | None:
    """How many tokens the command generates at most, where it says so: a server request's
    `n_predict`, or llama.cpp's `-n N` / `--n-predict N` / `--n-predict=N` (in 2024's
    llama-simple, `-n` counted the prompt too: either way no more tokens than N follow)."""
    if body is not None:
        value = body.get("n_predict")
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
    for i, arg in enumerate(argv):
        value = None
        if arg in ("-n", "--n-predict", "--predict") and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith("--n-predict="):
            value = arg.split("=", 1)[1]
        if value is not None and value.isdigit() and int(value) > 0:
            return int(value)
    return None


def n_source(serve: Any) -> str:
    return "the request's n_predict" if serve is not None else "its -n"


# How deep a config's YAML may nest: a real config is a few levels deep; a document nested
# thousands deep would otherwise end in a RecursionError traceback.
MAX_YAML_DEPTH = 64


class _ConfigLoader(yaml.SafeLoader):
    """PyYAML's safe loader, stricter: a key twice in one mapping is an error (not "the last
    wins", which silently drops the first), and nesting past MAX_YAML_DEPTH is refused early."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                mark = self.peek_event().start_mark
                raise yaml.composer.ComposerError(None, None, f"nested deeper than {MAX_YAML_DEPTH} levels", mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        if isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            for key_node, _value in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.setdefault(key, key_node.start_mark.line)
                except TypeError:  # an unhashable key: the base class says so
                    continue
                if first != key_node.start_mark.line:
                    raise yaml.constructor.ConstructorError(
                        None, None, f"duplicate key {key!r} (first on line {first + 1})", key_node.start_mark
                    )
        return super().construct_mapping(node, deep=deep)


def parse_yaml(text: str, path: Path | str) -> Any:
    """YAML text of a config (or preset) file, loaded strictly; ConfigError in one line naming
    the file, the line and column, and the problem."""
    try:
        return yaml.load(text, Loader=_ConfigLoader)  # noqa: S506 (a SafeLoader subclass)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise ConfigError(f"{path}: malformed YAML: {where}{problem}") from None
    except RecursionError:
        raise ConfigError(f"{path}: malformed YAML: nested too deep to read") from None


# A config is a page of YAML; anything this large is the wrong file (or /dev/zero).
CONFIG_MAX_BYTES = 1 << 20


def read_config_text(path: Path) -> str:
    """The text of a config file: a regular file, at most CONFIG_MAX_BYTES, UTF-8. Opened
    without blocking so that a FIFO or a device named as the config is refused, not waited on."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = (
                "a directory"
                if stat.S_ISDIR(info.st_mode)
                else "a FIFO"
                if stat.S_ISFIFO(info.st_mode)
                else "a device"
                if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode)
                else "not a regular file"
            )
            raise ConfigError(f"{path}: cannot read config: it is {kind}, not a regular file")
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(CONFIG_MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read config: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > CONFIG_MAX_BYTES:
        raise ConfigError(f"{path}: cannot read config: larger than {CONFIG_MAX_BYTES:,} bytes")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise ConfigError(f"{path}: cannot read config: not UTF-8 at byte {exc.start} (line {line})") from None


def _error_order(error: Any) -> tuple[bool, bool]:
    """Which validation error a config is told first: a removed key, then an unknown one (a
    misspelt key shows up as "unknown" and "missing" at once), then the rest in pydantic's order."""
    unknown = error["type"] == "extra_forbidden"
    return (not (unknown and removed_key(error["loc"])), not unknown)


def load_config(path: str | Path) -> Config:
    """Read and validate a config file; raise ConfigError with file and key path on any problem."""
    path = Path(path)
    data = parse_yaml(read_config_text(path), path)
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: the config must be a mapping of keys, got {type(data).__name__}")
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        errors = sorted(exc.errors(), key=_error_order)
        err = errors[0]
        loc = _format_loc(err["loc"])
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = removed_key(err["loc"]) or "unknown key" + _did_you_mean(err["loc"])
        elif err["type"] == "missing":
            msg = "missing key"
        msg = msg.removeprefix("Value error, ")
        more = f" (and {len(exc.errors()) - 1} more)" if len(exc.errors()) > 1 else ""
        where = f"{loc}: " if err["loc"] else ""
        raise ConfigError(f"{path}: {where}{msg}{more}") from None
    return config.model_copy(update={"source_path": path.resolve()})
