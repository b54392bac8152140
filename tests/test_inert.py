"""Untrusted text is inert (issue 46): rendered by GitHub's own Markdown engine (cmark-gfm with
GitHub's extensions, raw HTML let through as GitHub lets it through before sanitising), what a
commit or pull request wrote can open or close no HTML, mention nobody, reference no issue and
link nowhere, and on a terminal no control character gets through.

GitHub turns `@name` into a mention, `#12`, `owner/repo#12` and `GH-12` into references, URLs and
shas into links in the *text* of the rendered HTML, skipping `code`, `pre` and `a` elements
(html-pipeline's MentionFilter and IssueReferenceFilter, IGNORE_PARENTS). So the property checked
is: every such character of the text lands inside `code`, and the text reads the same.
"""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bisectbot.inert import block, code, one_line, prose, visible

cmarkgfm = pytest.importorskip("cmarkgfm")
from cmarkgfm.cmark import Options  # noqa: E402

# The attacks of issue 46, as a pull request's subject or build error line would carry them.
ATTACKS = [
    "</details>",
    "<details open><summary>pwned</summary>",
    "<img src=http://attacker.example/p.png>",
    "<a href=http://attacker.example>click</a>",
    "@org/team please look",
    "cc @someone",
    "fixes owner/repo#123 and #7 and GH-9",
    "\x1b[2J\x1b]8;;http://attacker.example\x07link\x1b]8;;\x07",
    "see http://attacker.example/x and www.attacker.example",
    "*www.attacker.example* and (www.attacker.example) and _www.attacker.example_",
    "`` ` ``` ````",
    "**bold** _em_ [x](http://attacker.example) ![i](http://attacker.example/i.png)",
    "| a | b |",
    "\u202eevil\u202c and \u2066isolate\u2069",
    "line one\n\n# heading\n- item\n<script>alert(1)</script>",
    "&lt;img src=x&gt; &#64;user",
    "$x^2$ ~~gone~~ :tada:",
]
# What GitHub acts on in rendered text outside code: mentions, references, code; an HTML tag.
MARKUP_CHARS = "@#`"
TAG_LIKE = re.compile(r"(?i)<[a-z/!?]")


def gfm(markdown: str) -> str:
    return cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE)


class _Walk(HTMLParser):
    """The rendered HTML's tags, and its text split into inside-`code` and outside."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.depth = 0
        self.inside: list[str] = []
        self.outside: list[str] = []
        self.all: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append(tag)
        self.depth += tag == "code"

    def handle_startendtag(self, tag: str, attrs: list) -> None:
        self.tags.append(tag)

    def handle_endtag(self, tag: str) -> None:
        self.tags.append("/" + tag)
        self.depth -= tag == "code"

    def handle_data(self, data: str) -> None:
        (self.inside if self.depth else self.outside).append(data)
        self.all.append(data)

    def handle_comment(self, data: str) -> None:
        self.tags.append("!--")


def walk(markup: str) -> _Walk:
    w = _Walk()
    w.feed(markup)
    w.close()
    return w


def words(text: str) -> str:
    return " ".join(text.split())


hostile = st.lists(
    st.sampled_from(
        list("ab0f9 <>@#/:`|\\*_[]()!&;.~$^{}=-+\n\t\x1b\x07\x00\u202e\u200b\u2028é")
        + ["http://", "www.", "GH-1", "deadbeef1", "</details>", "&lt;", "&#64;"]
    ),
    max_size=40,
).map("".join)


@given(hostile, st.booleans())
@settings(max_examples=400, deadline=None)
def test_prose_renders_as_its_words_with_every_markup_character_inside_code(text: str, line_start: bool) -> None:
    """Mid-line (after "Why: ") and at the start of a line, where a list or quote could begin."""
    lead = "" if line_start else "Why: "
    out = walk(gfm(lead + prose(text)))
    assert [t for t in out.tags if t not in ("p", "/p", "code", "/code")] == [], out.tags
    outside = "".join(out.outside)
    assert not any(c in outside for c in MARKUP_CHARS) and not TAG_LIKE.search(outside), outside
    # links would be <a> tags, refused above; GitHub's own reference filters look for these:
    assert "://" not in outside and not re.search(r"(?i)\bgh-\d", outside)
    assert words("".join(out.all)) == words(lead + one_line(text))


@given(hostile)
@settings(max_examples=300, deadline=None)
def test_a_code_span_holds_the_whole_text_whatever_it_is(text: str) -> None:
    out = walk(gfm("x " + code(text)))
    assert out.tags == ["p", "code", "/code", "/p"], out.tags
    assert "".join(out.inside) == (one_line(text) or " ")


@given(hostile, st.integers(1, 30))
@settings(max_examples=300, deadline=None)
def test_a_table_cell_holds_prose_and_code_in_its_own_cell(text: str, limit: int) -> None:
    """Cut to fit (an ellipsis marks the cut) or whole: a cut never leaves markup outside code."""
    table = (
        f"| a | b | c | d |\n|---|---|---|---|\n"
        f"| 1 | {prose(text, table=True)} | {code(text, table=True)} | {prose(text, table=True, limit=limit)} |\n"
    )
    rendered = gfm(table)
    cells = re.findall(r"<td>(.*?)</td>", rendered, flags=re.S)
    assert len(cells) == 4, rendered
    prose_cell, code_cell, cut_cell = walk(cells[1]), walk(cells[2]), walk(cells[3])
    assert words("".join(cut_cell.all)) == words(one_line(text, limit))
    assert not any(c in "".join(cut_cell.outside) for c in MARKUP_CHARS)
    assert not TAG_LIKE.search("".join(cut_cell.outside)) and "://" not in "".join(cut_cell.outside)
    assert words("".join(prose_cell.all)) == words(one_line(text))
    assert not any(c in "".join(prose_cell.outside) for c in MARKUP_CHARS)
    assert not TAG_LIKE.search("".join(prose_cell.outside))
    assert [t for t in prose_cell.tags + code_cell.tags + cut_cell.tags if t not in ("code", "/code")] == []
    assert "".join(code_cell.inside).strip() == one_line(text).strip()


@given(hostile)
@settings(max_examples=300, deadline=None)
def test_a_fenced_block_cannot_be_closed_from_inside(text: str) -> None:
    rendered = gfm(block(text) + "\n\n**after**")
    # the block is one <pre>, and what follows it is still outside it
    assert rendered.count("<pre>") == 1 and rendered.rstrip().endswith("<p><strong>after</strong></p>"), rendered
    inside = html.unescape(re.search(r"<pre><code>(.*?)</code></pre>", rendered, flags=re.S).group(1))
    assert inside == visible(text, keep="\n\t") + "\n"


@pytest.mark.parametrize("attack", ATTACKS)
def test_each_attack_of_issue_46_is_inert_in_prose_and_code(attack: str) -> None:
    for markdown in (prose(attack), code(attack), prose(attack, table=True)):
        out = walk(gfm(markdown))
        assert set(out.tags) <= {"p", "/p", "code", "/code"}, (attack, out.tags)
        outside = "".join(out.outside)
        assert not any(c in outside for c in MARKUP_CHARS) and not TAG_LIKE.search(outside), (attack, markdown)
        assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f\u202a-\u202e\u2066-\u2069]", gfm(markdown)), markdown


def test_visible_shows_controls_and_keeps_what_is_asked() -> None:
    assert visible("a\x1b[2Jb\u202ec\u200bd") == "a\\x1b[2Jb\\u202ec\\u200bd"
    assert visible("a\nb\tc", keep="\n") == "a\nb\\x09c"
    assert visible("plain é ≥ 0.35 — ok") == "plain é ≥ 0.35 — ok"
    assert one_line("a\n\n  b\x1b", limit=5) == "a b\\…"


def test_ordinary_prose_stays_readable() -> None:
    """Words of ordinary prose are not put in code: only the ones that could be markup."""
    text = "E_bad = 1.2e+04 ≥ 1/alpha after 42 runs (TV < 0.31); build failed: 'x' undeclared! -> 3 of 4"
    assert prose(text) == text
    assert words("".join(walk(gfm(prose(text))).all)) == text
    assert prose("- 12 commits (3 tried): _x_ *y*") == "`-` 12 commits (3 tried): \\_x\\_ \\*y\\*"
