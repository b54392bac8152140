"""Text that came from a commit or a pull request, made inert for people's eyes (pure).

Commit subjects, build error lines, what a program printed, outcome names and refs are written by
whoever wrote the commit; a pull request's author is an attacker. Shown raw, such text could open
or close HTML in a comment (`</details>`, `<img src=…>`), mention people (`@org/team`),
cross-reference issues (`owner/repo#1`), link anywhere, or drive the operator's terminal (ESC
sequences, OSC-8 links, bidirectional overrides). Every renderer goes through the one module here:

* `visible`: control and invisible format characters shown as escapes (`\\x1b`, `\\u202e`); the
  terminal and log form. Nothing of the text is dropped, so it reads as what it is.
* `code`: one Markdown code span the text cannot close. Inside a code span GitHub parses no HTML,
  links nothing and, by its own rule, neither mentions nor cross-references (its filters skip
  `code`, `pre` and `a` elements).
* `prose`: Markdown that reads like the text: every word that could be markup on GitHub (HTML, a
  mention, a reference, a link, a backtick) goes into a code span, and every punctuation mark
  that could start markup is backslash-escaped, so nothing in it is emphasis, a list or a link.
* `block`: a fenced code block the text cannot close (the fence is longer than any in it).

Each is tested against GitHub's own renderer (cmark-gfm with its extensions) in
tests/test_inert.py, by property and by the attacks of issue 46.
"""

from __future__ import annotations

import re
import unicodedata

# Unicode categories that are not text to be read: controls (Cc), invisible formatting (Cf: bidi
# overrides, zero-width joiners), surrogates left by undecodable bytes (Cs), private use (Co),
# unassigned (Cn), and the line/paragraph separators (Zl, Zp) that end lines by themselves.
_HIDDEN = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
ELLIPSIS = "…"


def _escape(ch: str) -> str:
    n = ord(ch)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def visible(text: str, keep: str = "") -> str:
    """`text` with every control or invisible character shown as its escape (`\\x1b`, `\\u202e`),
    except those in `keep` (e.g. "\\n" for a multi-line log). A backslash stays as it is: the
    escapes are for reading, not for round-tripping."""
    return "".join(_escape(ch) if ch not in keep and unicodedata.category(ch) in _HIDDEN else ch for ch in str(text))


def one_line(text: str, limit: int | None = None) -> str:
    """`text` on one line (its lines joined, runs of blanks made one space, the rest `visible`),
    at most `limit` characters, an ellipsis marking a cut: how every error and every field of
    untrusted text is shown, on a terminal or in a comment."""
    flat = visible(" ".join(str(text).split()))
    if limit is not None and len(flat) > limit:
        flat = flat[: max(0, limit - 1)].rstrip() + ELLIPSIS
    return flat


def code(text: str, *, table: bool = False, limit: int | None = None) -> str:
    """One inline code span holding `text` (on one line, `visible`), which no backtick in it can
    close: the delimiter is one backtick longer than the longest run inside. In a table cell
    (`table`) a `|` is escaped, as GitHub's tables need even inside code."""
    body = one_line(text, limit)
    if table:
        body = body.replace("|", "\\|")
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    fence = "`" * (longest + 1)
    if body.startswith("`") or body.endswith("`") or (body.startswith(" ") and body.endswith(" ") and body.strip()):
        body = f" {body} "  # CommonMark strips one space from each side, so the text stays as it was
    if not body:
        return "` `"  # an empty span is not a span: show a space
    return f"{fence}{body}{fence}"


# A word is shown as it is only when it is made of these and nothing else: letters, digits and
# the punctuation of ordinary prose. Anything else — `@` `#`, a backtick, `&` `[` `]` `\\` `~`
# `{` `}` `$` `^`, or a character outside ASCII that is not a letter, digit or common typographic
# mark — puts the whole word in a code span.
_PLAIN_WORD = re.compile(r"[\w.,;:!|'\"()<>=+\-*/%?≥≤×→←·–—…°±≈]+")
# Plain-looking words that GitHub would still read as markup: an HTML tag or autolink (`<` before
# a letter, `/`, `!` or `?`), a URL (scheme or www.), an issue reference by "GH-12", a commit sha
# (7 to 40 hex digits, which GitHub links when the commit exists).
_MARKUP_LIKE = re.compile(r"(?i)<[a-z/!?]|://|(?<![0-9a-z])www\.|\bgh-\d|(?<![0-9a-z])[0-9a-f]{7,40}(?![0-9a-z])")
# What would start a block at the beginning of a line: a list item, a quote, a heading underline.
_BLOCK_START = re.compile(r"[-+=>]|\d+[.)]")
# Emphasis marks, escaped by a backslash (which CommonMark and Python-Markdown, the HTML report's
# renderer, both take): every `*`, and a `_` at a word's edge (inside a word it is no emphasis).
_EMPHASIS = re.compile(r"\*|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


def prose(text: str, *, table: bool = False, limit: int | None = None) -> str:
    """`text` (one line, `visible`) as Markdown that renders as the same words: a word that could
    be markup on GitHub (HTML, a mention, a reference, a link, code, a list at the line's start)
    goes into a code span of its own, and the emphasis marks of every other word are escaped.
    In a table cell (`table`) every `|` is escaped, in code too."""
    out = []
    for part in re.split(r"( +)", one_line(text, limit)):
        if not part or part.isspace():
            out.append(part)
        elif (
            _PLAIN_WORD.fullmatch(part) and not _MARKUP_LIKE.search(part) and not (not out and _BLOCK_START.match(part))
        ):
            escaped = _EMPHASIS.sub(lambda m: "\\" + m.group(0), part)
            out.append(escaped.replace("|", "\\|") if table else escaped)
        else:
            out.append(code(part, table=table))
    return "".join(out)


def block(text: str, language: str = "") -> str:
    """A fenced code block holding `text` (`visible`, its lines kept), which no line of it can
    close: the fence is one backtick longer than any run of backticks inside (at least three)."""
    body = visible(str(text), keep="\n\t")
    longest = max((len(run) for run in re.findall(r"`{3,}", body)), default=2)
    fence = "`" * (longest + 1)
    return f"{fence}{language}\n{body}\n{fence}"
