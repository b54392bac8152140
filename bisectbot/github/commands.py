"""Parse and validate issue-comment commands. Pure: no I/O, no git, no GitHub.

Commands (first command line of a comment; quoted lines and code blocks are ignored so
quoting an earlier command does not re-run it)::

    /bisect good=<ref> bad=<ref> [config=<name>] [reference=good|config|<ref>]
    /check [ref=<ref>]          (ref=pull/<N>/head: the pull request's head, built in the sandbox)
    /cancel

Why so strict: refs end up as arguments to git. Anything that could be read as an
option (``--upload-pack=...``) or that only makes sense to a shell (``$(touch x)``) is
refused here, before anything touches git, with a one-line reason fit to post back.
Only ``author_association`` OWNER, MEMBER or COLLABORATOR may run commands.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Union

from bisectbot.inert import code
from bisectbot.records.refs import pull_number, pull_ref_problem

ALLOWED_ASSOCIATIONS = frozenset({"OWNER", "MEMBER", "COLLABORATOR"})
COMMAND_WORDS = ("/bisect", "/check", "/cancel")
USAGE = {
    "/bisect": "/bisect good=<ref> bad=<ref> [config=<name>] [reference=good|config|<ref>]",
    "/check": "/check [ref=<ref> | ref=pull/<N>/head]",
    "/cancel": "/cancel",
}
MAX_REF_LEN = 255

_HEX_RE = re.compile(r"[0-9a-fA-F]{4,40}|[0-9a-fA-F]{64}")
_SHA_RANGE_RE = re.compile(r"([0-9a-fA-F]{4,40}|[0-9a-fA-F]{64})\.\.\.?([0-9a-fA-F]{4,40}|[0-9a-fA-F]{64})")
_REF_CHAR_RE = re.compile(r"[A-Za-z0-9._/+-]")
_CONFIG_RE = re.compile(r"[A-Za-z0-9_.-]+")
_FENCE_RE = re.compile(r"^\s{0,3}(```|~~~)")


@dataclass(frozen=True)
class BisectCommand:
    """Find the commit between ``good`` and ``bad`` that changed the distribution."""

    good: str
    bad: str
    config: str | None = None
    # what commits are judged against: the config's reference (None, "config"), "good" (like the
    # good end: a control sample measured at good=), or a ref (like that commit)
    reference: str | None = None


@dataclass(frozen=True)
class CheckCommand:
    """Test one ref (default: the configured branch head) without bisecting."""

    ref: str | None = None


@dataclass(frozen=True)
class CancelCommand:
    """Stop the running job for this issue."""


@dataclass(frozen=True)
class Refusal:
    """A command we will not run; ``reason`` is one polite line to post back."""

    reason: str


Command = Union[BisectCommand, CheckCommand, CancelCommand]


def is_authorised(author_association: str | None) -> bool:
    """Owners, members and collaborators may run commands; everyone else may not."""
    return (author_association or "").upper() in ALLOWED_ASSOCIATIONS


def _show(value: str, limit: int = 40) -> str:
    """User input inside an inline code span that it cannot break out of (`inert.code`)."""
    return code(value, limit=limit)


def _char_name(c: str) -> str:
    if c.isspace():
        return "whitespace"
    if ord(c) < 32 or ord(c) == 127:
        return "a control character"
    if c == "`":
        return "a backtick"
    return f"'{c}'"


def validate_ref(ref: str, *, allow_range: bool = False) -> str | None:
    """Return why ``ref`` is refused, or None if it is a safe git ref or hex sha.

    Accepts hex shas and names passing ``git check-ref-format --allow-onelevel`` that
    use only ``[A-Za-z0-9._/+-]``. A ``<sha>..<sha>`` range only with ``allow_range``.
    A pull request only as ``pull/<N>/head`` (``records.refs``): ``pull/7/merge``,
    ``refs/pull/7/head`` and the clone's ``bisectbot/pull/7`` are refused.
    """
    shown = _show(ref)
    bad = f"ref {shown} is not allowed"
    if not ref:
        return "empty ref"
    if len(ref) > MAX_REF_LEN:
        return f"{bad}: longer than {MAX_REF_LEN} characters"
    if ref.startswith("-"):
        return f"{bad}: it starts with '-'"
    for c in ref:
        if not _REF_CHAR_RE.fullmatch(c):
            return f"{bad}: it contains {_char_name(c)}"
    if ".." in ref:
        if allow_range and _SHA_RANGE_RE.fullmatch(ref):
            return None
        return f"{bad}: it contains '..'" + ("" if allow_range else " (give a single ref)")
    if _HEX_RE.fullmatch(ref):
        return None
    # git check-ref-format rules that the character allowlist does not already cover.
    if ref.startswith("/") or ref.endswith("/") or "//" in ref:
        return f"{bad}: empty path component"
    if ref.endswith("."):
        return f"{bad}: it ends with '.'"
    for part in ref.split("/"):
        if part.startswith("."):
            return f"{bad}: a component starts with '.'"
        if part.endswith(".lock"):
            return f"{bad}: a component ends with '.lock'"
    if why := pull_ref_problem(ref):
        return f"{bad}: {why}"
    return None


def validate_config_name(name: str) -> str | None:
    """Return why a config name is refused (names map to files: no paths, no dots-only)."""
    if not _CONFIG_RE.fullmatch(name) or set(name) == {"."}:
        return f"config name {_show(name)} is not allowed: use only letters, digits, '_', '.' and '-'"
    return None


def find_command_line(body: str) -> str | None:
    """The first line that starts with a command word, outside code blocks and quotes."""
    in_fence = False
    for line in body.splitlines():
        if _FENCE_RE.match(line):
            in_fence = not in_fence
            continue
        stripped = line.strip()
        if in_fence or stripped.startswith(">"):
            continue
        word = stripped.split(maxsplit=1)[0].lower() if stripped else ""
        if word in COMMAND_WORDS:
            return stripped
    return None


def _ref_check(key: str) -> Callable[[str], str | None]:
    def check(value: str) -> str | None:
        why = validate_ref(value)
        if why and key != "ref":
            why = f"{key}: {why}"
        return why

    return check


_VALIDATORS: dict[str, Callable[[str], str | None]] = {
    "good": _ref_check("good"),
    "bad": _ref_check("bad"),
    "ref": _ref_check("ref"),
    "config": validate_config_name,
    "reference": lambda value: None if value in ("good", "config") else _ref_check("reference")(value),
}


def _parse_args(word: str, tokens: list[str], allowed: tuple[str, ...]) -> dict[str, str] | Refusal:
    """key=value tokens, each validated as soon as it is read (so the first bad one is named)."""
    usage = f"usage: `{USAGE[word]}`"
    args: dict[str, str] = {}
    for tok in tokens:
        key, eq, value = tok.partition("=")
        key = key.lower()
        if not eq or key not in allowed:
            return Refusal(f"Sorry, I don't understand {_show(tok)} — {usage}")
        if key in args:
            return Refusal(f"Sorry, {key}= is given twice — {usage}")
        if why := _VALIDATORS[key](value):
            return Refusal(f"Sorry, {why}.")
        args[key] = value
    return args


def parse_command(line: str) -> Command | Refusal:
    """Parse one command line (authorisation is the caller's, see :func:`parse_comment`)."""
    tokens = line.split()
    word = tokens[0].lower() if tokens else ""
    if word not in COMMAND_WORDS:
        return Refusal(f"Sorry, {_show(word)} is not a command — try `{USAGE['/bisect']}`")
    if word == "/cancel":
        if len(tokens) > 1:
            return Refusal(f"Sorry, `/cancel` takes no arguments — usage: `{USAGE['/cancel']}`")
        return CancelCommand()
    if word == "/check":
        args = _parse_args(word, tokens[1:], ("ref",))
        if isinstance(args, Refusal):
            return args
        return CheckCommand(args.get("ref"))
    args = _parse_args(word, tokens[1:], ("good", "bad", "config", "reference"))
    if isinstance(args, Refusal):
        return args
    missing = [k for k in ("good", "bad") if k not in args]
    if missing:
        return Refusal(f"Sorry, {' and '.join(k + '=' for k in missing)} missing — usage: `{USAGE['/bisect']}`")
    if args["good"] == args["bad"]:
        return Refusal("Sorry, good= and bad= are the same ref; give two different commits.")
    if any(pull_number(args[k]) is not None for k in ("good", "bad", "reference") if k in args):
        return Refusal(
            "Sorry, a pull request's head is untrusted code: it can be checked "
            "(`/check ref=pull/<N>/head`, in the sandbox) but not bisected."
        )
    return BisectCommand(args["good"], args["bad"], args.get("config"), args.get("reference"))


def refusal_for_unauthorised(author: str | None = None) -> Refusal:
    who = f" @{author}" if author and re.fullmatch(r"[A-Za-z0-9-]{1,39}", author) else ""
    return Refusal(f"Sorry{who}, only repository owners, members and collaborators can run bisectbot commands.")


def parse_comment(body: str, author_association: str | None, author: str | None = None) -> Command | Refusal | None:
    """The command in a comment, a :class:`Refusal`, or None when there is no command.

    Authorisation comes first, so an outsider learns nothing about validation rules.
    """
    line = find_command_line(body or "")
    if line is None:
        return None
    if not is_authorised(author_association):
        return refusal_for_unauthorised(author)
    return parse_command(line)
