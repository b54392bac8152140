"""What a bisect's output must not say against itself (issue 48), as checks on what was rendered:
the terminal summary (with or without colour), the Markdown with its Mermaid chart, and the
`--html` page. tests/test_report.py runs them on sample reports, tests/test_demo.py on what the
real demo prints.

Each check reads only the text, as a person would: the first time a term is used its gloss is
right there; a placement (GOOD-SIDE, BAD-SIDE) is never drawn as a distance of its own, and the
charts say which were left out; a parent's CHANGED says it differs from its child and is not
red; a builds count past its bound says why.
"""

from __future__ import annotations

import html
import re
from typing import Iterable, Sequence

SGR = re.compile(r"\x1b\[([0-9;]*)m")
GLOSS = "  · "  # report.text: a gloss line under the line that first uses its term
PLACEMENTS = ("GOOD-SIDE", "BAD-SIDE")

STEPS = r"(reference|plain|sticky) steps"  # a forecast's strategy, whichever the costs chose
# (what finds a term's use, how its gloss begins), both regular expressions: terminal and Markdown alike
TERMS = [
    (r"\beta \d", r"eta "),
    (r"\btolerance \d", r"eta "),
    (r"confidence ≥", r"confidence ≥"),
    (r"per-step error", r"confidence ≥"),
    (r"\bbound \d", r"bound "),
    (STEPS, STEPS),
    (r"\bplain\b", STEPS),
    (r"P\(condition\)", r"P\(condition\)"),
]


def plain(text: str) -> str:
    return SGR.sub("", text)


def logical_lines(text: str) -> list[str]:
    """The terminal summary's lines with their wrapped continuations (indented) joined on; a
    gloss line starts one of its own."""
    out: list[str] = []
    for line in plain(text).splitlines():
        if line.startswith("  ") and not line.startswith(GLOSS) and out and out[-1]:
            out[-1] += " " + line.strip()
        else:
            out.append(line)
    return out


def _first(items: Sequence[str], pattern: str) -> int:
    found = [i for i, item in enumerate(items) if re.search(pattern, item)]
    assert found, f"{pattern!r} is not used at all"
    return found[0]


def terms_glossed_where_first_used(summary: str, terms: Iterable[tuple[str, str]] = TERMS) -> None:
    """Each term, the first time the terminal summary uses it, is glossed: in a gloss line that
    follows its paragraph (with only other glosses between), or it is first met inside its own
    gloss (the confidence's defines the per-step error)."""
    lines = logical_lines(summary)
    for pattern, gloss in terms:
        glossing = re.compile(re.escape(GLOSS) + gloss)
        i = _first(lines, pattern)
        if glossing.match(lines[i]):
            continue
        j = i + 1
        while j < len(lines) and lines[j].startswith(GLOSS) and not glossing.match(lines[j]):
            j += 1
        assert j < len(lines) and glossing.match(lines[j]), f"{pattern!r} first used without its gloss: {lines[i]!r}"


def markdown_terms_glossed_where_first_used(md: str, terms: Iterable[tuple[str, str]] = TERMS) -> None:
    """The same in the Markdown: the paragraph that first uses a term is followed by a quote
    glossing it (`> *term*: …`), or the term is first met in its own gloss."""
    paragraphs = [p for p in re.split(r"\n\s*\n", md) if p.strip()]
    for pattern, gloss in terms:
        glossing = re.compile(r"^> \*" + gloss, re.M)
        i = _first(paragraphs, pattern)
        if paragraphs[i].startswith(">") and glossing.search(paragraphs[i]):
            continue
        quote = paragraphs[i + 1] if i + 1 < len(paragraphs) else ""
        assert quote.startswith(">") and glossing.search(quote), (
            f"{pattern!r} first used without its gloss: {paragraphs[i][:200]!r}"
        )


def table_words_explained(summary: str) -> None:
    """The verdict table's words that are no claim about the reference say what they are on
    their row: a placement what placed it, each side of the change test what it differs from
    (the parent: its child), never a bare observed/reference that would read as a defect."""
    lines = logical_lines(summary)
    first_side = _first(lines, r"\b(GOOD|BAD)-SIDE\b")
    assert re.search(r"plac(ed|ing)", lines[first_side]) and re.search(
        r"not (a |tested )?(test )?against the reference|no test against the reference", lines[first_side]
    ), lines[first_side]
    rows = [ln for ln in lines if re.match(r"[0-9a-f]{12}  \S", ln)]
    for row in rows:
        if re.search(r"\s(GOOD|BAD)-SIDE\s", row):
            assert "placed, not tested against the reference" in row, row
        if re.search(r"\sconfirm-parent\s+CHANGED\s", row):
            assert "differs from its child" in row and "not vs the reference" in row, row
            assert "observed/reference:" not in row, row  # its few change-test runs, not shares tested
        if re.search(r"\sconfirm-culprit\s+CHANGED\s", row):
            assert "differs from its parent" in row, row


def no_red_changed(*outputs: str) -> None:
    """CHANGED, wherever it is coloured, is not red (a defect's colour): on a parent it says that
    it differs from its child, which is what the confirmation looks for."""
    seen = 0
    for out in outputs:
        for m in re.finditer(r"\x1b\[([0-9;]*)m(CHANGED)", out):
            seen += 1
            assert "31" not in m.group(1).split(";") and "91" not in m.group(1).split(";"), out[
                m.start() - 80 : m.end()
            ]
    assert seen, "no coloured CHANGED to check (was the output coloured?)"


def placement_rows(summary: str) -> dict[str, str]:
    """sha (12) → GOOD-SIDE / BAD-SIDE: the placements of the terminal summary's verdict table."""
    out = {}
    for line in plain(summary).splitlines():
        if m := re.match(r"([0-9a-f]{12})  \S+\s+(GOOD-SIDE|BAD-SIDE)\s", line):
            out[m.group(1)] = m.group(2)
    return out


def terminal_chart_draws_no_placement(summary: str, placed: dict[str, int]) -> None:
    """The terminal's distance bars (sha → position of each placement given): no placement drawn,
    and the note under the bars names each one left out."""
    lines = plain(summary).splitlines()
    start = _first(lines, r"^distance from the reference along the history")
    chart = []
    for line in lines[start + 1 :]:
        if not line.strip():
            break
        chart.append(line)
    rows = [m for ln in chart if (m := re.match(r"\s+(\d+) ([0-9a-f]{12}) .* (\d\.\d{3}) (\S+)$", ln))]
    assert rows, chart
    for m in rows:
        assert m.group(4) not in PLACEMENTS and m.group(2) not in placed, m.group(0)
    note = " ".join(" ".join(ln.split()) for ln in chart if not re.match(r"\s+\d+ [0-9a-f]{12} ", ln))
    if placed:
        assert note.startswith("not drawn: ") and "not tested against the reference" in note, note
        assert all(sha[:12] in note for sha in placed), note


def mermaid_chart_draws_no_placement(md: str, placed: dict[str, int]) -> None:
    """The Markdown's distance chart (a Mermaid xychart): no placement's position among its
    bars, and its summary line names each one left out."""
    m = re.search(
        r"<summary>(Chart: distance from the reference along the history[^<]*)</summary>\s*```mermaid\n(.*?)```",
        md,
        re.S,
    )
    assert m, "no distance chart in the Markdown"
    summary, source = m.groups()
    labels = re.search(r'x-axis "commit position" \[(.*?)\]', source)
    assert labels
    drawn = {int(x) for x in re.findall(r'"(\d+)"', labels.group(1))}
    assert not drawn & set(placed.values()), (drawn, placed)
    if placed:
        assert "not drawn: " in summary and all(sha[:12] in summary for sha in placed), summary


def html_chart_draws_no_placement(page: str, placed: dict[str, int]) -> None:
    """The `--html` page's distance chart (its first SVG): no bar at a placement's position, and
    its caption names each one left out."""
    m = re.search(r'<figure><svg class="chart"(.*?)</svg><figcaption>(.*?)</figcaption>', page, re.S)
    assert m, "no chart in the page"
    svg, caption = m.group(1), html.unescape(m.group(2))
    assert "distance from the reference" in svg
    drawn = {int(pos) for pos in re.findall(r'<rect class="bar"[^>]*><title>(\d+): ', svg)}
    assert drawn and not drawn & set(placed.values()), (drawn, placed)
    if placed:
        assert "Not drawn: " in caption and all(sha[:12] in caption for sha in placed), caption


BUILDS = re.compile(r"(\d[\d,]*) builds? \(bound (\d+)(?:, exceeded by (\d+): ([^·]*?))?\)(?: ·| and|$)")


def builds_within_bound_or_say_why(text: str) -> int:
    """Every 'N builds (bound B…)' of the text (wrapped lines read as one): within the bound, or
    past it by N − B with what needed the builds. Returns how many it read."""
    flat = " ".join(plain(text).replace("**", "").split())
    found = list(BUILDS.finditer(flat))
    for m in found:
        builds, bound = int(m.group(1).replace(",", "")), int(m.group(2))
        if builds > bound:
            assert m.group(3) and int(m.group(3)) == builds - bound and m.group(4).strip(), m.group(0)
    return len(found)
