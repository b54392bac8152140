"""Docs that cannot drift: the command reference is --help, links resolve, sentences stay short."""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from cogapp import Cog
from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parent.parent


def cog_check(path: Path) -> tuple[int, str]:
    """cog --check on one file: its return code and what it printed (a diff when it differs)."""
    with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.redirect_stderr(out):
        code = Cog().main(["cog", "--check", "--diff", str(path)])
    return code, out.getvalue()


def test_the_command_reference_is_what_help_prints() -> None:
    code, out = cog_check(ROOT / "docs" / "commands.md")
    assert code == 0, f"docs/commands.md differs from --help; run `cog -r docs/commands.md`\n{out}"


def test_a_stale_command_reference_fails_the_check(tmp_path: Path) -> None:
    stale = tmp_path / "commands.md"
    text = (ROOT / "docs" / "commands.md").read_text()
    stale.write_text(text.replace("Show this message and exit.", "Show this message."))
    (tmp_path / "cog_commands.py").write_text((ROOT / "docs" / "cog_commands.py").read_text())
    code, out = cog_check(stale)
    assert code != 0 and "Show this message." in out


# --- links: every relative target exists (and is not ignored by git), every #anchor is a heading's

MD = MarkdownIt("commonmark").enable("table")


def pages() -> list[Path]:
    """The Markdown a reader follows links through: the README and the documentation pages."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def github_anchor(heading: str) -> str:
    """A heading's anchor as GitHub makes it (github-slugger): lowercase, every character that is
    not a letter, digit, mark, `_`, `-` or space removed, each space a `-` (none collapsed)."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def heading_anchors(text: str) -> set[str]:
    """The anchors of a page's headings; a repeated one gets -1, -2, … as on GitHub."""
    tokens = MD.parse(text)
    seen: dict[str, int] = {}
    anchors = set()
    for opening, inline in zip(tokens, tokens[1:]):
        if opening.type != "heading_open":
            continue
        words = "".join(c.content for c in inline.children or [] if c.type in ("text", "code_inline"))
        base = anchor = github_anchor(words)
        while anchor in seen:
            seen[base] += 1
            anchor = f"{base}-{seen[base]}"
        seen[anchor] = 0
        anchors.add(anchor)
    return anchors


def links(text: str) -> list[str]:
    """Every link and image target of a page, in order; code spans and code blocks hold none."""
    out = []
    for token in MD.parse(text):
        for child in token.children or []:
            if child.type == "link_open":
                out.append(str(child.attrs["href"]))
            elif child.type == "image":
                out.append(str(child.attrs["src"]))
    return out


def git_ignored(path: Path, root: Path) -> bool:
    """Whether git ignores `path` (then a clone, and GitHub, do not have it); False outside git."""
    proc = subprocess.run(["git", "-C", str(root), "check-ignore", "-q", str(path)], capture_output=True)
    return proc.returncode == 0


def broken_links(page: Path, root: Path) -> list[str]:
    problems = []
    for href in links(page.read_text()):
        url = urlsplit(href)
        if url.scheme or url.netloc:  # not fetched (no network here): only its form is checked
            if url.scheme not in ("http", "https") or not url.netloc or re.search(r"\s", href):
                problems.append(f"{href}: not a well-formed http(s) URL")
            continue
        target = (page.parent / unquote(url.path)).resolve() if url.path else page
        if not target.is_relative_to(root):
            problems.append(f"{href}: outside the repository")
        elif not target.exists():
            problems.append(f"{href}: {target.relative_to(root)} does not exist")
        elif git_ignored(target, root):
            problems.append(f"{href}: {target.relative_to(root)} is ignored by git (not in a clone)")
        elif url.fragment and target.suffix == ".md":
            if unquote(url.fragment) not in heading_anchors(target.read_text()):
                problems.append(f"{href}: no heading in {target.relative_to(root)} has the anchor #{url.fragment}")
        elif url.fragment and not re.fullmatch(r"L\d+(-L\d+)?", url.fragment):
            problems.append(f"{href}: #{url.fragment} is not a line of {target.relative_to(root)}")
    return problems


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_resolves(page: Path) -> None:
    problems = broken_links(page, ROOT)
    assert not problems, f"broken links in {page.relative_to(ROOT)}:\n" + "\n".join(problems)


def test_github_anchors() -> None:
    page = "# What a found commit proves, and `--scan`\n## Real llama.cpp\n## Notes\n## Notes\n## Ünïcode — dash_x\n"
    assert heading_anchors(page) == {
        "what-a-found-commit-proves-and---scan",
        "real-llamacpp",
        "notes",
        "notes-1",
        "ünïcode--dash_x",
    }


def test_the_link_check_finds_each_kind_of_broken_link(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("ignored.md\n")
    (tmp_path / "ignored.md").write_text("# Ignored\n")
    (tmp_path / "other.md").write_text("# Other page\n## Part two\n")
    (tmp_path / "code.py").write_text("x = 1\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Here\n## Here\n\n"
        "Fine: [a](other.md), [b](other.md#part-two), [c](#here-1), [d](code.py#L1), [e](https://x.org/y),"
        " `[in code](missing.md)`, ![img](code.py).\n\n"
        "```\n[in a block](missing.md)\n```\n\n"
        "| a | b |\n|---|---|\n| [cell](gone.md) | x |\n\n"
        "Broken: [f](missing.md), [g](ignored.md), [h](other.md#part-three), [i](#there),"
        " [j](code.py#x), [k](http://), [l](ftp://x.org/f), [m](../outside.md).\n"
    )
    problems = broken_links(page, tmp_path)
    assert [p.split(":")[0] for p in problems] == [
        "gone.md",
        "missing.md",
        "ignored.md",
        "other.md#part-three",
        "#there",
        "code.py#x",
        "http",
        "ftp",
        "../outside.md",
    ], problems


# --- the README reads in sentences of at most 50 words

MAX_WORDS = 50
ABBREVIATION = re.compile(r"(?:^|[\s(])(?:e\.g|i\.e|etc|vs|cf)\.$")


def prose(text: str) -> list[str]:
    """A page's paragraphs and list items as plain text, without headings, tables and code blocks;
    a code span keeps its words (they count), with `.`, `!` and `?` in it made unable to end a sentence."""
    out = []
    skipping = 0
    for token in MD.parse(text):
        if token.type in ("heading_open", "table_open"):
            skipping += 1
        elif token.type in ("heading_close", "table_close"):
            skipping -= 1
        elif token.type == "inline" and not skipping:
            parts = []
            for child in token.children or []:
                if child.type == "text":
                    parts.append(child.content)
                elif child.type == "code_inline":
                    parts.append("`" + re.sub(r"[.!?]", "·", child.content) + "`")
                elif child.type in ("softbreak", "hardbreak"):
                    parts.append(" ")
            out.append("".join(parts))
    return out


def sentences(paragraph: str) -> list[str]:
    """Split where `.`, `!` or `?` (and any closing bracket or quote) is followed by a space, except
    after an abbreviation (e.g. this one); a sentence may start in lowercase (`bisectbot …`)."""
    out, start = [], 0
    for end in re.finditer(r"[.!?][)\]\"'’]*\s+", paragraph):
        if ABBREVIATION.search(paragraph[: end.start() + 1]):
            continue
        out.append(paragraph[start : end.end()].strip())
        start = end.end()
    out.append(paragraph[start:].strip())
    return [s for s in out if s]


def long_sentences(text: str) -> list[str]:
    return [s for p in prose(text) for s in sentences(p) if len(s.split()) > MAX_WORDS]


def test_no_readme_sentence_is_over_50_words() -> None:
    long = long_sentences((ROOT / "README.md").read_text())
    assert not long, f"README.md sentences over {MAX_WORDS} words (split them):\n\n" + "\n\n".join(
        f"({len(s.split())} words) {s}" for s in long
    )


def test_the_sentence_check_counts_prose_only() -> None:
    words = " ".join(["word"] * 26)
    long = f"Long {words}, e.g. a `cmd x.y. Z` {words}."  # 56 words: neither e.g. nor the span ends it
    text = (
        f"# {words} {words}\n\n"  # a heading
        f"```\n{words} {words}\n```\n\n"  # a code block
        f"| a |\n|---|\n| {words} {words} |\n\n"  # a table
        f"Short. {words}. {words}. bisectbot {words}.\n\n"  # four sentences, one lowercase
        f"* {long}\n"
    )
    assert long_sentences(text) == [long.replace("cmd x.y. Z", "cmd x·y· Z")]
    assert [len(s.split()) for s in sentences(prose(text)[0])] == [1, 26, 26, 27]
