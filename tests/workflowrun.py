"""GitHub Actions workflows run on this machine, for tests: a small, strict stand-in for the runner.

Why: docs/deploy.md tells a project to copy a workflow and use the composite action (action.yml);
the only honest check of that page is to run those files as GitHub would. `act` (a Go binary
driving Docker) is not available here, so this module runs them itself, step by step:

* **expressions** (``${{ … }}``, ``if:``) are parsed and evaluated as GitHub documents them:
  literals, contexts (names ignore case; a missing property is null), ``! < <= > >= == != && ||``,
  loose equality (numbers by coercion, strings ignoring case), and the functions ``contains``,
  ``startsWith``, ``endsWith``, ``format``, ``join``, ``toJSON``, ``fromJSON``, ``success``,
  ``always``, ``failure``, ``cancelled``. Anything else is an error, never a guess;
* **run steps** are written to a file and run with bash as the runner does (``bash -e {0}``, or
  ``bash --noprofile --norc -eo pipefail {0}`` for ``shell: bash``), in the workspace, with the
  ``GITHUB_*`` and ``RUNNER_*`` variables, the workflow's, job's and step's ``env:``, and what
  steps write to ``GITHUB_OUTPUT``, ``GITHUB_ENV`` and ``GITHUB_PATH``;
* **composite actions** (``uses: ./`` or a pinned ``owner/name@ref`` the test maps to a
  directory) run their own steps with ``inputs``, ``github.action_path`` and their ``outputs``;
* the **marketplace actions** the shipped files use are done here, each in a few lines:
  ``actions/checkout@v4`` clones the test's origin repository into the workspace,
  ``actions/setup-python@v5`` puts the given interpreter first on PATH as ``python``,
  ``actions/cache/restore@v4`` and ``actions/cache/save@v4`` keep immutable entries in a
  directory (exact key first, else the newest entry a restore key prefixes). Any other action,
  or an input these do not take, is an error.

`lint_workflow` and `lint_action` check the files' shape (known keys, one of ``run``/``uses``,
``shell`` in composite steps, references to declared inputs and earlier step ids, every
expression parses, none inside ``run:``).
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import yaml

# --------------------------------------------------------------------------- expressions


class ExpressionError(ValueError):
    """An expression this runner cannot parse or evaluate (GitHub would, or would refuse it)."""


_TOKEN_RE = re.compile(
    r"\s*(?:(?P<num>0x[0-9a-fA-F]+|-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)"
    r"|(?P<str>'(?:[^']|'')*')"
    r"|(?P<op>&&|\|\||==|!=|<=|>=|[<>!()\[\],.*])"
    r"|(?P<name>[A-Za-z_][A-Za-z0-9_-]*))"
)
CONTEXTS = tuple("github env vars job jobs steps runner secrets strategy matrix needs inputs".split())
FUNCTIONS = tuple("contains startswith endswith format join tojson fromjson success always failure cancelled".split())
STATUS_FUNCTIONS = ("success", "always", "failure", "cancelled")


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN_RE.match(text, pos)
        if not m or m.end() == pos:
            raise ExpressionError(f"cannot read {text[pos:]!r} in {text!r}")
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


class _Parser:
    """Recursive descent over GitHub's precedence: || < && < == != < < <= > >= < ! < . [] ()."""

    def __init__(self, text: str):
        self.text = text
        self.toks = _tokens(text)
        self.i = 0

    def parse(self) -> tuple:
        node = self._or()
        if self.i != len(self.toks):
            raise ExpressionError(f"unexpected {self.toks[self.i][1]!r} in {self.text!r}")
        return node

    def _peek(self) -> str | None:
        return self.toks[self.i][1] if self.i < len(self.toks) else None

    def _take(self, value: str | None = None) -> tuple[str, str]:
        if self.i >= len(self.toks):
            raise ExpressionError(f"unexpected end of {self.text!r}")
        tok = self.toks[self.i]
        if value is not None and tok[1] != value:
            raise ExpressionError(f"expected {value!r}, got {tok[1]!r} in {self.text!r}")
        self.i += 1
        return tok

    def _binary(self, ops: tuple[str, ...], below: Callable[[], tuple]) -> tuple:
        node = below()
        while self._peek() in ops:
            op = self._take()[1]
            node = ("op", op, node, below())
        return node

    def _or(self) -> tuple:
        return self._binary(("||",), self._and)

    def _and(self) -> tuple:
        return self._binary(("&&",), self._eq)

    def _eq(self) -> tuple:
        return self._binary(("==", "!="), self._cmp)

    def _cmp(self) -> tuple:
        return self._binary(("<", "<=", ">", ">="), self._unary)

    def _unary(self) -> tuple:
        if self._peek() == "!":
            self._take()
            return ("not", self._unary())
        return self._postfix()

    def _postfix(self) -> tuple:
        node = self._primary()
        while self._peek() in (".", "["):
            if self._take()[1] == ".":
                kind, name = self._take()
                if kind != "name":
                    raise ExpressionError(f"{name!r} after '.' (filters are not supported) in {self.text!r}")
                node = ("get", node, ("lit", name))
            else:
                node = ("get", node, self._or())
                self._take("]")
        return node

    def _primary(self) -> tuple:
        kind, value = self._take()
        if kind == "num":
            return ("lit", int(value, 16) if value.startswith("0x") else float(value))
        if kind == "str":
            return ("lit", value[1:-1].replace("''", "'"))
        if value == "(":
            node = self._or()
            self._take(")")
            return node
        if kind != "name":
            raise ExpressionError(f"unexpected {value!r} in {self.text!r}")
        low = value.lower()
        if low in ("true", "false"):
            return ("lit", low == "true")
        if low == "null":
            return ("lit", None)
        if self._peek() == "(":
            self._take()
            args = []
            while self._peek() != ")":
                args.append(self._or())
                if self._peek() != ")":
                    self._take(",")
            self._take(")")
            if low not in FUNCTIONS:
                raise ExpressionError(f"function {value}() is not supported (in {self.text!r})")
            return ("call", low, args)
        if low not in CONTEXTS:
            raise ExpressionError(f"unknown context {value!r} in {self.text!r}")
        return ("ctx", low)


def parse_expression(text: str) -> tuple:
    """The syntax tree of one expression (without its ``${{ }}``)."""
    return _Parser(text).parse()


def references(node: tuple) -> Iterator[list[str]]:
    """The context paths an expression reads, as far as they are literal (``steps.x.outputs.y``)."""
    if node[0] == "get":
        path = _literal_path(node)
        if path is not None:
            yield path
            return
    for child in node[1:]:
        if isinstance(child, tuple):
            yield from references(child)
        elif isinstance(child, list):
            for c in child:
                yield from references(c)


def _literal_path(node: tuple) -> list[str] | None:
    if node[0] == "ctx":
        return [node[1]]
    if node[0] == "get" and node[2][0] == "lit" and isinstance(node[2][1], str):
        head = _literal_path(node[1])
        return None if head is None else head + [node[2][1]]
    return None


def _number(v: Any) -> float:
    if v is None:
        return 0.0
    if isinstance(v, bool):
        return 1.0 if v else 0.0
    if isinstance(v, (int, float)):
        return float(v)
    if isinstance(v, str):
        s = v.strip()
        if not s:
            return 0.0
        try:
            return float(int(s, 16)) if s.lower().startswith("0x") else float(s)
        except ValueError:
            return math.nan
    return math.nan


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, (dict, list)) or isinstance(b, (dict, list)):
        return a is b
    if type(a) is type(b) or (isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool)):
        if isinstance(a, str):
            return a.lower() == b.lower()
        return a == b
    return _number(a) == _number(b)


def truthy(v: Any) -> bool:
    if v is None or v is False or v == "":
        return False
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return not (v == 0 or math.isnan(v))
    return True


def to_text(v: Any) -> str:
    """A value as GitHub writes it into a string."""
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return str(int(v)) if v.is_integer() else repr(v)
    if isinstance(v, (int, str)):
        return str(v)
    raise ExpressionError(f"an object or array cannot be written into a string: {v!r}")


def _get(obj: Any, key: Any) -> Any:
    if isinstance(obj, dict):
        if not isinstance(key, str):
            return None
        for k, v in obj.items():
            if k.lower() == key.lower():
                return v
        return None
    if isinstance(obj, list) and isinstance(key, (int, float)) and not isinstance(key, bool):
        i = int(key)
        return obj[i] if 0 <= i < len(obj) else None
    return None


@dataclass
class Scope:
    """What an expression can read: the contexts, and the job's status for the status functions."""

    contexts: dict[str, Any]
    failed: bool = False


def evaluate(node: tuple, scope: Scope) -> Any:
    kind = node[0]
    if kind == "lit":
        return node[1]
    if kind == "ctx":
        if node[1] not in scope.contexts:
            raise ExpressionError(f"context {node[1]!r} is not available here")
        return scope.contexts[node[1]]
    if kind == "get":
        return _get(evaluate(node[1], scope), evaluate(node[2], scope))
    if kind == "not":
        return not truthy(evaluate(node[1], scope))
    if kind == "op":
        return _operator(node[1], node[2], node[3], scope)
    return _call(node[1], [evaluate(a, scope) for a in node[2]], scope)


def _operator(op: str, left: tuple, right: tuple, scope: Scope) -> Any:
    a = evaluate(left, scope)
    if op == "&&":
        return evaluate(right, scope) if truthy(a) else a
    if op == "||":
        return a if truthy(a) else evaluate(right, scope)
    b = evaluate(right, scope)
    if op == "==":
        return _equal(a, b)
    if op == "!=":
        return not _equal(a, b)
    if isinstance(a, str) and isinstance(b, str):
        x, y = a.lower(), b.lower()
        return {"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y}[op]
    n, m = _number(a), _number(b)
    return {"<": n < m, "<=": n <= m, ">": n > m, ">=": n >= m}[op]


def _call(name: str, args: list[Any], scope: Scope) -> Any:
    if name in STATUS_FUNCTIONS:
        if args:
            raise ExpressionError(f"{name}() takes no arguments")
        return {"success": not scope.failed, "always": True, "failure": scope.failed, "cancelled": False}[name]
    if name == "contains":
        search, item = args
        if isinstance(search, list):
            return any(_equal(x, item) for x in search)
        return to_text(item).lower() in to_text(search).lower()
    if name in ("startswith", "endswith"):
        text, part = (to_text(a).lower() for a in args)
        return text.startswith(part) if name == "startswith" else text.endswith(part)
    if name == "format":
        template, *values = args
        return re.sub(r"\{(\d+)\}", lambda m: to_text(values[int(m.group(1))]), to_text(template))
    if name == "join":
        items = args[0] if isinstance(args[0], list) else [args[0]]
        return (to_text(args[1]) if len(args) > 1 else ",").join(to_text(x) for x in items)
    if name == "tojson":
        return json.dumps(args[0], indent=2)
    return json.loads(to_text(args[0]))  # fromjson


def _expressions(text: str) -> Iterator[tuple[int, int, str]]:
    """Each ``${{ … }}`` in `text`: its start, end and inner text (a ``}}`` inside a string literal
    does not end it)."""
    pos = 0
    while (start := text.find("${{", pos)) >= 0:
        i, quoted = start + 3, False
        while i < len(text):
            if text[i] == "'":
                quoted = not quoted
            elif not quoted and text.startswith("}}", i):
                break
            i += 1
        else:
            raise ExpressionError(f"unterminated ${{{{ in {text!r}")
        yield start, i + 2, text[start + 3 : i]
        pos = i + 2


def interpolate(value: Any, scope: Scope) -> Any:
    """A value of the YAML with every ``${{ … }}`` replaced (a string that is one expression
    keeps the expression's type, as GitHub does for `with:` and `env:` values)."""
    if isinstance(value, dict):
        return {k: interpolate(v, scope) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, scope) for v in value]
    if not isinstance(value, str):
        return value
    found = list(_expressions(value))
    if len(found) == 1 and found[0][0] == 0 and found[0][1] == len(value):
        return evaluate(parse_expression(found[0][2]), scope)
    out, pos = [], 0
    for start, end, inner in found:
        out.append(value[pos:start])
        out.append(to_text(evaluate(parse_expression(inner), scope)))
        pos = end
    out.append(value[pos:])
    return "".join(out)


def condition(value: Any, scope: Scope) -> bool:
    """An ``if:``: an expression with or without ``${{ }}``; `success() &&` unless it calls a
    status function itself."""
    if value is None:
        return not scope.failed
    if isinstance(value, bool):
        return value and not scope.failed
    text = str(value).strip()
    if text.startswith("${{") and text.endswith("}}") and len(list(_expressions(text))) == 1:
        text = text[3:-2]
    node = parse_expression(text)
    if not any(f"{name}(" in text.replace(" ", "").lower() for name in STATUS_FUNCTIONS):
        return not scope.failed and truthy(evaluate(node, scope))
    return truthy(evaluate(node, scope))


# --------------------------------------------------------------------------- lint


WORKFLOW_KEYS = {"name", "run-name", True, "on", "permissions", "env", "defaults", "concurrency", "jobs"}
JOB_KEYS = set(
    "name needs runs-on permissions environment concurrency outputs env defaults if steps timeout-minutes"
    " strategy continue-on-error container services".split()
)
STEP_KEYS = set("id if name uses run shell with env continue-on-error timeout-minutes working-directory".split())
ACTION_KEYS = {"name", "author", "description", "inputs", "outputs", "runs", "branding"}
INPUT_KEYS = {"description", "required", "default", "deprecationMessage"}
PERMISSIONS = set(
    "actions attestations checks contents deployments discussions id-token issues packages pages pull-requests"
    " repository-projects security-events statuses".split()
)


def _walk_strings(value: Any, where: str) -> Iterator[tuple[str, str]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _walk_strings(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _walk_strings(v, f"{where}[{i}]")
    elif isinstance(value, str):
        yield where, value


def _lint_expressions(value: Any, where: str, allowed: set[str], step_ids: set[str], inputs: set[str]) -> list[str]:
    """Every ``${{ }}`` parses, reads only `allowed` contexts, earlier step ids and declared inputs."""
    problems = []
    for place, text in _walk_strings(value, where):
        try:
            nodes = [parse_expression(inner) for _, _, inner in _expressions(text)]
        except ExpressionError as exc:
            problems.append(f"{place}: {exc}")
            continue
        if place.endswith(".if") and "${{" not in text:
            try:
                nodes.append(parse_expression(text))
            except ExpressionError as exc:
                problems.append(f"{place}: {exc}")
        for node in nodes:
            for path in references(node):
                if path[0] not in allowed:
                    problems.append(f"{place}: context {path[0]!r} is not available there")
                elif path[0] == "steps" and len(path) > 1 and path[1] not in step_ids:
                    problems.append(f"{place}: no earlier step has the id {path[1]!r}")
                elif path[0] == "inputs" and len(path) > 1 and path[1] not in inputs:
                    problems.append(f"{place}: no input {path[1]!r} is declared")
    return problems


def _lint_steps(steps: Any, where: str, allowed: set[str], inputs: set[str], composite: bool) -> list[str]:
    if not isinstance(steps, list) or not steps:
        return [f"{where}: steps must be a non-empty list"]
    problems: list[str] = []
    ids: set[str] = set()
    for n, step in enumerate(steps):
        at = f"{where}[{n}]"
        if not isinstance(step, dict):
            problems.append(f"{at}: a step is a mapping")
            continue
        problems += [f"{at}: unknown key {k!r}" for k in step if k not in STEP_KEYS]
        if ("run" in step) == ("uses" in step):
            problems.append(f"{at}: give exactly one of run and uses")
        if "with" in step and "uses" not in step:
            problems.append(f"{at}: with: belongs to a uses: step")
        if "run" in step and composite and "shell" not in step:
            problems.append(f"{at}: a composite action's run step needs shell:")
        if "run" in step and "${{" in str(step["run"]):
            problems.append(f"{at}: an expression inside run: (pass values through env:)")
        problems += _lint_expressions(step, at, allowed, ids, inputs)
        if "id" in step:
            if step["id"] in ids:
                problems.append(f"{at}: id {step['id']!r} is used twice")
            ids.add(step["id"])
    return problems


def lint_workflow(data: Any) -> list[str]:
    """What is wrong with a workflow file's shape (empty when nothing)."""
    if not isinstance(data, dict):
        return ["a workflow is a mapping"]
    problems = [f"unknown top-level key {k!r}" for k in data if k not in WORKFLOW_KEYS]
    triggers = data.get(True, data.get("on"))
    if not triggers:
        problems.append("no on:")
    dispatch = triggers.get("workflow_dispatch") if isinstance(triggers, dict) else None
    inputs = set((dispatch or {}).get("inputs") or {})
    for scope in [data, *(data.get("jobs") or {}).values()]:
        for name, level in (scope.get("permissions") or {}).items() if isinstance(scope, dict) else ():
            if name not in PERMISSIONS or level not in ("read", "write", "none"):
                problems.append(f"permissions: {name}: {level} is not a permission")
    problems += _lint_expressions(data.get("env") or {}, "env", {"github", "secrets", "inputs", "vars"}, set(), inputs)
    problems += _lint_expressions(
        data.get("concurrency") or {}, "concurrency", {"github", "inputs", "vars"}, set(), inputs
    )
    jobs = data.get("jobs")
    if not isinstance(jobs, dict) or not jobs:
        return problems + ["jobs: must name at least one job"]
    for name, job in jobs.items():
        at = f"jobs.{name}"
        problems += [f"{at}: unknown key {k!r}" for k in job if k not in JOB_KEYS]
        if "runs-on" not in job:
            problems.append(f"{at}: no runs-on")
        top = {"github", "needs", "vars", "inputs"}
        problems += _lint_expressions({"if": job.get("if")} if "if" in job else {}, at, top, set(), inputs)
        problems += _lint_expressions(
            job.get("env") or {}, f"{at}.env", top | {"secrets", "matrix", "strategy"}, set(), inputs
        )
        allowed = set(CONTEXTS) - {"jobs"}
        problems += _lint_steps(job.get("steps"), f"{at}.steps", allowed, inputs, composite=False)
    return problems


def lint_action(data: Any) -> list[str]:
    """What is wrong with a composite action's action.yml (empty when nothing)."""
    if not isinstance(data, dict):
        return ["an action is a mapping"]
    problems = [f"unknown top-level key {k!r}" for k in data if k not in ACTION_KEYS]
    problems += [f"no {k}:" for k in ("name", "description", "runs") if k not in data]
    inputs = data.get("inputs") or {}
    for name, spec in inputs.items():
        problems += [f"inputs.{name}: unknown key {k!r}" for k in spec if k not in INPUT_KEYS]
        if "description" not in spec:
            problems.append(f"inputs.{name}: no description")
        problems += _lint_expressions(spec.get("default", ""), f"inputs.{name}.default", {"github"}, set(), set())
    runs = data.get("runs") or {}
    if runs.get("using") != "composite":
        return problems + ["runs.using: this runner knows composite actions only"]
    allowed = {"github", "env", "steps", "runner", "inputs", "job", "strategy", "matrix"}
    problems += _lint_steps(runs.get("steps"), "runs.steps", allowed, set(inputs), composite=True)
    ids = {s.get("id") for s in runs.get("steps") or [] if isinstance(s, dict)}
    for name, spec in (data.get("outputs") or {}).items():
        if not isinstance(spec, dict) or "value" not in spec or "description" not in spec:
            problems.append(f"outputs.{name}: needs description and value")
        else:
            problems += _lint_expressions(
                spec["value"], f"outputs.{name}", {"steps", "inputs", "github"}, ids, set(inputs)
            )
    return problems


# --------------------------------------------------------------------------- running


@dataclass
class StepResult:
    name: str
    outcome: str  # success | failure | skipped
    log: str = ""
    outputs: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0


@dataclass
class JobResult:
    name: str
    status: str  # success | failure | skipped
    steps: list[StepResult] = field(default_factory=list)
    workspace: Path | None = None

    def log(self) -> str:
        return "\n".join(f"--- {s.name}: {s.outcome} ({s.seconds:.1f} s)\n{s.log}" for s in self.steps)


def read_key_values(path: Path) -> dict[str, str]:
    """GITHUB_OUTPUT / GITHUB_ENV: ``name=value`` lines and ``name<<DELIMITER`` blocks."""
    out: dict[str, str] = {}
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line:
            continue
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            value = []
            while lines[i] != delimiter:
                value.append(lines[i])
                i += 1
            i += 1
            out[name] = "\n".join(value)
        else:
            name, _, value = line.partition("=")
            out[name] = value
    return out


@dataclass
class _Job:
    """One job's run: its workspace, environment so far, PATH additions and status."""

    workspace: Path
    temp: Path
    github: dict[str, Any]
    env_file: dict[str, str] = field(default_factory=dict)  # what steps wrote to GITHUB_ENV
    path: list[str] = field(default_factory=list)  # what steps wrote to GITHUB_PATH, newest first
    failed: bool = False
    results: list[StepResult] = field(default_factory=list)
    counter: int = 0


class Runner:
    """Runs workflows against a local origin repository, with a cache kept across runs.

    `actions` maps a ``uses:`` value (``OWNER/bisectbot@v0.2.0``) to a composite action's
    directory; `python` is what ``actions/setup-python`` provides; `base_env` is the runner
    machine's environment (PATH, HOME, and whatever the test wants every step to see).
    """

    def __init__(
        self,
        root: Path,
        *,
        repository: str,
        origin: Path,
        python: str,
        base_env: Mapping[str, str],
        actions: Mapping[str, Path] | None = None,
        secrets: Mapping[str, str] | None = None,
        step_timeout: float = 900.0,
    ) -> None:
        self.root = Path(root)
        self.repository = repository
        self.origin = Path(origin)
        self.python = python
        self.base_env = dict(base_env)
        self.actions = dict(actions or {})
        self.secrets = dict(secrets or {})
        self.step_timeout = step_timeout
        self.cache_root = self.root / "cache"
        self.cache: dict[str, tuple[Path, float]] = {}  # key -> (directory, when saved)
        self.runs = 0
        self.simulated: dict[str, Callable[[_Job, dict[str, Any]], StepResult]] = {
            "actions/checkout@v4": self._checkout,
            "actions/setup-python@v5": self._setup_python,
            "actions/cache/restore@v4": self._cache_restore,
            "actions/cache/save@v4": self._cache_save,
        }

    # ------------------------------------------------------------------ workflow and job
    def _load(
        self, workflow: Path, event_name: str, event: dict[str, Any], inputs: dict[str, str] | None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The workflow (linted, and triggered by this event) and its `inputs` context."""
        data = yaml.safe_load(Path(workflow).read_text(encoding="utf-8"))
        problems = lint_workflow(data)
        if problems:
            raise ExpressionError(f"{workflow}: " + "; ".join(problems))
        triggers = data.get(True, data.get("on"))
        if event_name not in triggers:
            raise ValueError(f"{workflow} does not run on {event_name}")
        types = (triggers[event_name] or {}).get("types") if isinstance(triggers[event_name], dict) else None
        if types and event.get("action") not in types:
            raise ValueError(f"{workflow} does not run on {event_name} {event.get('action')}")
        spec = triggers.get("workflow_dispatch") or {}
        declared = (spec.get("inputs") or {}) if event_name == "workflow_dispatch" else {}
        return data, {k: v.get("default", "") for k, v in declared.items()} | dict(inputs or {})

    def starts(self, workflow: Path, event_name: str, event: dict[str, Any]) -> bool:
        """Whether GitHub would start the workflow's one job for this event (its `if:`)."""
        data, given = self._load(workflow, event_name, event, None)
        ((_, job),) = data["jobs"].items()
        github = {"event_name": event_name, "event": event, "repository": self.repository}
        return "if" not in job or condition(
            job["if"], Scope({"github": github, "inputs": given, "vars": {}, "needs": {}})
        )

    def run(
        self, workflow: Path, event_name: str, event: dict[str, Any], inputs: dict[str, str] | None = None
    ) -> JobResult:
        """Run the workflow's one job for an event, as GitHub would start it."""
        data, given = self._load(workflow, event_name, event, inputs)
        ((job_name, job),) = data["jobs"].items()
        self.runs += 1
        run_dir = self.root / f"run-{self.runs}"
        workspace = run_dir / "work" / self.repository.split("/")[1]
        temp = run_dir / "temp"
        for d in (workspace, temp):
            d.mkdir(parents=True)
        head = subprocess.run(
            ["git", "-C", str(self.origin), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        branch = subprocess.run(
            ["git", "-C", str(self.origin), "symbolic-ref", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        (run_dir / "event.json").write_text(json.dumps(event))
        github = {
            "event_name": event_name,
            "event": event,
            "event_path": str(run_dir / "event.json"),
            "repository": self.repository,
            "repository_owner": self.repository.split("/")[0],
            "workspace": str(workspace),
            "run_id": str(1000 + self.runs),
            "run_number": str(self.runs),
            "run_attempt": "1",
            "sha": head,
            "ref": f"refs/heads/{branch}",
            "ref_name": branch,
            "token": self.secrets.get("GITHUB_TOKEN", ""),
            "actor": (event.get("sender") or {}).get("login", "someone"),
            "workflow": data.get("name", ""),
            "job": job_name,
            "server_url": "https://github.com",
            "api_url": "https://api.github.com",
        }
        state = _Job(workspace, temp, github)
        wf_env_scope = Scope({"github": github, "secrets": self.secrets, "inputs": given, "vars": {}})
        wf_env = {k: to_text(v) for k, v in interpolate(data.get("env") or {}, wf_env_scope).items()}
        top = Scope({"github": github, "inputs": given, "vars": {}, "needs": {}})
        if "if" in job and not condition(job["if"], top):
            return JobResult(job_name, "skipped", workspace=workspace)
        job_scope = Scope({**top.contexts, "env": wf_env, "secrets": self.secrets, "matrix": {}, "strategy": {}})
        job_env = wf_env | {k: to_text(v) for k, v in interpolate(job.get("env") or {}, job_scope).items()}
        contexts = {
            "github": github,
            "inputs": given,
            "vars": {},
            "needs": {},
            "secrets": self.secrets,
            "matrix": {},
            "strategy": {},
            "runner": self._runner_context(temp),
            "job": {"status": "success"},
            "steps": {},
        }
        self._steps(state, job["steps"], contexts, job_env)
        return JobResult(job_name, "failure" if state.failed else "success", state.results, workspace)

    def _runner_context(self, temp: Path) -> dict[str, str]:
        return {"os": "Linux", "arch": "X64", "name": "local", "temp": str(temp), "tool_cache": str(temp / "toolcache")}

    def _steps(self, job: _Job, steps: list[dict[str, Any]], contexts: dict[str, Any], env: dict[str, str]) -> bool:
        """Run `steps` in order; False when one failed (the job's status is updated too)."""
        failed = False
        for step in steps:
            scope = Scope({**contexts, "env": env | job.env_file}, failed=failed or job.failed)
            name = str(step.get("name") or step.get("uses") or step.get("run", "").splitlines()[0])
            if not condition(step.get("if"), scope):
                job.results.append(StepResult(name, "skipped"))
                if "id" in step:
                    contexts["steps"][step["id"]] = {"outputs": {}, "outcome": "skipped", "conclusion": "skipped"}
                continue
            step_env = {k: to_text(v) for k, v in interpolate(step.get("env") or {}, scope).items()}
            scope.contexts["env"] = env | job.env_file | step_env
            name = to_text(interpolate(name, scope))
            started = time.monotonic()
            if "uses" in step:
                result = self._uses(job, step, scope, env | step_env, name)
            else:
                result = self._run(job, step, scope, env | step_env, name)
            result.seconds = time.monotonic() - started
            job.results.append(result)
            if "id" in step:
                contexts["steps"][step["id"]] = {
                    "outputs": result.outputs,
                    "outcome": result.outcome,
                    "conclusion": result.outcome,
                }
            if result.outcome == "failure" and not step.get("continue-on-error"):
                failed = True
                job.failed = True
                contexts["job"] = {"status": "failure"}
        return not failed

    # ------------------------------------------------------------------ run: and composite uses:
    def _environment(self, job: _Job, env: dict[str, str], files: dict[str, Path]) -> dict[str, str]:
        github = job.github
        out = dict(self.base_env)
        out.update(
            {
                "CI": "true",
                "GITHUB_ACTIONS": "true",
                "GITHUB_WORKSPACE": github["workspace"],
                "GITHUB_REPOSITORY": github["repository"],
                "GITHUB_REPOSITORY_OWNER": github["repository_owner"],
                "GITHUB_EVENT_NAME": github["event_name"],
                "GITHUB_EVENT_PATH": github["event_path"],
                "GITHUB_SHA": github["sha"],
                "GITHUB_REF": github["ref"],
                "GITHUB_REF_NAME": github["ref_name"],
                "GITHUB_RUN_ID": github["run_id"],
                "GITHUB_RUN_NUMBER": github["run_number"],
                "GITHUB_RUN_ATTEMPT": github["run_attempt"],
                "GITHUB_ACTOR": github["actor"],
                "GITHUB_WORKFLOW": github["workflow"],
                "GITHUB_JOB": github["job"],
                "GITHUB_SERVER_URL": github["server_url"],
                "GITHUB_API_URL": github["api_url"],
                "RUNNER_OS": "Linux",
                "RUNNER_ARCH": "X64",
                "RUNNER_TEMP": str(job.temp),
                "RUNNER_TOOL_CACHE": str(job.temp / "toolcache"),
            }
        )
        if "action_path" in github:
            out["GITHUB_ACTION_PATH"] = github["action_path"]
        out.update(job.env_file)
        out.update(env)
        out.update({f"GITHUB_{k.upper()}": str(p) for k, p in files.items()})
        out["PATH"] = os.pathsep.join([*job.path, out.get("PATH", os.defpath)])
        return out

    def _run(self, job: _Job, step: dict[str, Any], scope: Scope, env: dict[str, str], name: str) -> StepResult:
        job.counter += 1
        files = {k: job.temp / f"_{k}_{job.counter}" for k in ("output", "env", "path", "step_summary")}
        for p in files.values():
            p.write_text("")
        script = job.temp / f"_step_{job.counter}.sh"
        script.write_text(to_text(interpolate(step["run"], scope)))
        shell = step.get("shell")
        if shell == "bash":
            argv = ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)]
        elif shell is None:
            argv = ["bash", "-e", str(script)]
        else:
            raise ExpressionError(f"shell {shell!r} is not supported")
        cwd = Path(job.github["workspace"])
        if "working-directory" in step:
            cwd = cwd / to_text(interpolate(step["working-directory"], scope))
        try:
            proc = subprocess.run(
                argv,
                cwd=cwd,
                env=self._environment(job, env, files),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=float(step.get("timeout-minutes", self.step_timeout / 60)) * 60,
            )
            log, code = proc.stdout, proc.returncode
        except subprocess.TimeoutExpired as exc:
            log, code = f"{exc.output or ''}\n(timed out)", 124
        job.env_file.update(read_key_values(files["env"]))
        job.path[:0] = [p for p in reversed(files["path"].read_text().splitlines()) if p]
        outputs = read_key_values(files["output"])
        return StepResult(name, "success" if code == 0 else "failure", f"{log}(exit {code})", outputs)

    def _uses(self, job: _Job, step: dict[str, Any], scope: Scope, env: dict[str, str], name: str) -> StepResult:
        ref = str(step["uses"])
        given = {k: interpolate(v, scope) for k, v in (step.get("with") or {}).items()}
        if ref in self.simulated:
            return self.simulated[ref](job, given)
        if ref == "./":
            directory = Path(job.github["workspace"])
        elif ref in self.actions:
            directory = self.actions[ref]
        else:
            raise ValueError(f"uses: {ref} is neither simulated here nor mapped to a directory")
        return self._composite(job, directory, ref, given, scope, env, name)

    def _composite(
        self, job: _Job, directory: Path, ref: str, given: dict[str, Any], scope: Scope, env: dict[str, str], name: str
    ) -> StepResult:
        action = yaml.safe_load((directory / "action.yml").read_text(encoding="utf-8"))
        problems = lint_action(action)
        if problems:
            raise ExpressionError(f"{directory}/action.yml: " + "; ".join(problems))
        declared = action.get("inputs") or {}
        unknown = set(given) - set(declared)
        if unknown:
            raise ValueError(f"uses: {ref}: unexpected inputs {sorted(unknown)}")
        inputs: dict[str, str] = {}
        for key, spec in declared.items():
            if key in given:
                inputs[key] = to_text(given[key])
            elif spec.get("required"):
                raise ValueError(f"uses: {ref}: input {key!r} is required")
            else:
                inputs[key] = to_text(interpolate(spec.get("default", ""), scope))
        github = dict(job.github, action_path=str(directory), action_ref=ref.partition("@")[2])
        inner = _Job(job.workspace, job.temp, github, job.env_file, job.path, counter=job.counter)
        contexts = {"github": github, "inputs": inputs, "runner": self._runner_context(job.temp), "steps": {}}
        contexts.update({"job": {"status": "failure" if job.failed else "success"}, "strategy": {}, "matrix": {}})
        ok = self._steps(inner, action["runs"]["steps"], contexts, env)
        job.counter = inner.counter
        scope_out = Scope({"steps": contexts["steps"], "inputs": inputs, "github": github})
        outputs = {k: to_text(interpolate(v["value"], scope_out)) for k, v in (action.get("outputs") or {}).items()}
        log = "\n".join(f"  --- {r.name}: {r.outcome} ({r.seconds:.1f} s)\n{r.log}" for r in inner.results)
        return StepResult(name, "success" if ok else "failure", log, outputs)

    # ------------------------------------------------------------------ marketplace actions, done here
    @staticmethod
    def _only(given: dict[str, Any], ref: str, allowed: set[str]) -> None:
        unknown = set(given) - allowed
        if unknown:
            raise ValueError(f"{ref}: inputs {sorted(unknown)} are not simulated")

    def _checkout(self, job: _Job, given: dict[str, Any]) -> StepResult:
        """actions/checkout: the origin's default branch, with `fetch-depth` commits (1 by
        default; 0: the whole history)."""
        self._only(given, "actions/checkout@v4", {"fetch-depth"})
        depth = int(given.get("fetch-depth", 1))
        shallow = ["--depth", str(depth)] if depth > 0 else []
        proc = subprocess.run(
            ["git", "clone", "--quiet", "--no-hardlinks", *shallow, self.origin.as_uri(), str(job.workspace)],
            capture_output=True,
            text=True,
        )
        return StepResult("actions/checkout@v4", "success" if proc.returncode == 0 else "failure", proc.stderr)

    def _setup_python(self, job: _Job, given: dict[str, Any]) -> StepResult:
        """actions/setup-python: `self.python` first on PATH as python and python3, whatever the
        version asked (it must be one bisectbot supports)."""
        self._only(given, "actions/setup-python@v5", {"python-version"})
        asked = tuple(int(x) for x in str(given.get("python-version", "3")).split(".")[:2])
        if asked < (3, 11):
            return StepResult("actions/setup-python@v5", "failure", f"Python {asked} is older than bisectbot needs")
        bindir = job.temp / "toolcache" / "Python" / "bin"
        bindir.mkdir(parents=True, exist_ok=True)
        for exe in ("python", "python3"):
            if not (bindir / exe).exists():
                (bindir / exe).symlink_to(self.python)
        job.path.insert(0, str(bindir))
        return StepResult("actions/setup-python@v5", "success", f"python {self.python}", {"python-path": self.python})

    def _cache_paths(self, given: dict[str, Any], ref: str) -> list[str]:
        paths = [p.strip() for p in str(given.get("path", "")).splitlines() if p.strip()]
        for p in paths:
            if any(c in p for c in "*?[!") or Path(p).is_absolute() or ".." in Path(p).parts:
                raise ValueError(f"{ref}: path {p!r} is not simulated (relative paths in the workspace only)")
        return paths

    def _cache_restore(self, job: _Job, given: dict[str, Any]) -> StepResult:
        """actions/cache/restore: the exact key, else the newest entry a restore key prefixes."""
        ref = "actions/cache/restore@v4"
        self._only(given, ref, {"path", "key", "restore-keys"})
        paths, key = self._cache_paths(given, ref), str(given["key"])
        match = key if key in self.cache else None
        for prefix in (
            [] if match else [p.strip() for p in str(given.get("restore-keys", "")).splitlines() if p.strip()]
        ):
            candidates = [k for k in self.cache if k.startswith(prefix)]
            if candidates:
                match = max(candidates, key=lambda k: self.cache[k][1])
                break
        outputs = {"cache-hit": "true" if match == key else "false", "cache-primary-key": key}
        if match is None:
            return StepResult(ref, "success", f"Cache not found for input keys: {key}", outputs)
        stored = self.cache[match][0]
        for p in paths:
            if (stored / p).exists():
                shutil.copytree(stored / p, job.workspace / p, symlinks=True, dirs_exist_ok=True)
        return StepResult(ref, "success", f"Cache restored from key: {match}", outputs | {"cache-matched-key": match})

    def _cache_save(self, job: _Job, given: dict[str, Any]) -> StepResult:
        """actions/cache/save: a new entry under the key; an existing key is kept as it is."""
        ref = "actions/cache/save@v4"
        self._only(given, ref, {"path", "key"})
        paths, key = self._cache_paths(given, ref), str(given["key"])
        if key in self.cache:
            return StepResult(ref, "success", f"Cache already exists: {key} (caches are immutable)")
        stored = self.cache_root / f"entry-{len(self.cache)}"
        saved = []
        for p in paths:
            if (job.workspace / p).exists():
                shutil.copytree(job.workspace / p, stored / p, symlinks=True)
                saved.append(p)
        if not saved:
            return StepResult(ref, "success", "Path Validation Error: no path to save")
        self.cache[key] = (stored, time.monotonic())
        return StepResult(ref, "success", f"Cache saved with key: {key} ({', '.join(saved)})")
