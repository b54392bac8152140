"""`--html FILE`: one self-contained page with the report and its charts (pure).

Why a page of its own: the Markdown's charts are Mermaid, drawn only where Mermaid runs
(GitHub); a file a maintainer opens or attaches must draw them without a network or a script
from elsewhere. So the page is the Markdown report rendered to HTML (the `markdown` library)
with its Mermaid blocks replaced by inline SVG drawn here: the distance from the reference along
the history (bars, eta and the tolerance as lines) and, per tested commit, its observed shares
beside the reference's. No script, no external file.
"""

from __future__ import annotations

import html
import math
import re
from typing import Sequence

import markdown

from bisectbot.core.diagnose import THETA_LONG, distance_name, distance_rank, observed_cells
from bisectbot.records.reports import BisectReport, CommitReport
from bisectbot.report.markdown import bisect_markdown, commit_markdown, distance_rows
from bisectbot.report.terms import PLACEMENTS, placements_note
from bisectbot.statistics.outcome import Verdict

WIDTH, HEIGHT, PAD = 640, 240, 40
STYLE = """
body { font-family: system-ui, sans-serif; max-width: 72rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
table { border-collapse: collapse; font-size: 0.85rem; } td, th { border: 1px solid #ccc; padding: 0.2rem 0.4rem; }
code, pre { background: #f4f4f4; } pre { padding: 0.5rem; overflow-x: auto; }
figure { margin: 1.5rem 0; } figcaption { font-size: 0.9rem; color: #555; }
svg text { font-size: 11px; fill: #333; }
"""


def _svg_bars(
    title: str, labels: Sequence[str], bars: Sequence[float], lines: Sequence[tuple[str, float]], top: float
) -> str:
    """A bar chart as inline SVG: one bar per label, horizontal lines at given levels."""
    n = max(1, len(bars))
    step = (WIDTH - 2 * PAD) / n
    top = top or 1.0

    def y(v: float) -> float:
        return HEIGHT - PAD - (HEIGHT - 2 * PAD) * min(v, top) / top

    parts = [
        f'<svg class="chart" role="img" aria-label="{html.escape(title)}" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" xmlns="http://www.w3.org/2000/svg">',
        f'<line x1="{PAD}" y1="{HEIGHT - PAD}" x2="{WIDTH - PAD}" y2="{HEIGHT - PAD}" stroke="#888"/>',
        f'<text x="{PAD}" y="{PAD - 16}">{html.escape(title)}</text>',
        f'<text x="4" y="{PAD}">{top:.2f}</text><text x="4" y="{HEIGHT - PAD}">0</text>',
    ]
    for i, (label, value) in enumerate(zip(labels, bars)):
        x = PAD + i * step + step * 0.15
        parts.append(
            f'<rect class="bar" x="{x:.1f}" y="{y(value):.1f}" width="{step * 0.7:.1f}" '
            f'height="{HEIGHT - PAD - y(value):.1f}" fill="#4a78b5"><title>{html.escape(label)}: {value:.3f}</title></rect>'
        )
        parts.append(f'<text x="{x:.1f}" y="{HEIGHT - PAD + 14}">{html.escape(label)}</text>')
    for name, level in lines:
        parts.append(
            f'<line class="level" x1="{PAD}" y1="{y(level):.1f}" x2="{WIDTH - PAD}" y2="{y(level):.1f}" '
            f'stroke="#c0392b" stroke-dasharray="4 3"/><text x="{WIDTH - PAD + 2}" y="{y(level) + 4:.1f}">'
            f"{html.escape(name)}</text>"
        )
    return "".join(parts) + "</svg>"


def _svg_intervals(
    title: str, labels: Sequence[str], points: Sequence[tuple[float, float, float]], lines: Sequence[tuple[str, float]]
) -> str:
    """A number's chart as inline SVG: per label θ's estimate (a dot) and the interval its test
    left (a vertical bar), horizontal lines at the band's ends (GOOD within the tolerance lines,
    BAD beyond the eta lines). An interval end off the chart is drawn to its edge."""
    values = [v for p in points for v in p if math.isfinite(v)] + [level for _, level in lines]
    lo, hi = min(values), max(values)
    pad = (hi - lo) * 0.08 or 1.0
    lo, hi = lo - pad, hi + pad
    n = max(1, len(points))
    step = (WIDTH - 2 * PAD) / n

    def y(v: float) -> float:
        v = min(max(v, lo), hi) if math.isfinite(v) else (hi if v > 0 else lo)
        return HEIGHT - PAD - (HEIGHT - 2 * PAD) * (v - lo) / (hi - lo)

    parts = [
        f'<svg class="chart" role="img" aria-label="{html.escape(title)}" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" xmlns="http://www.w3.org/2000/svg">',
        f'<text x="{PAD}" y="{PAD - 16}">{html.escape(title)}</text>',
        f'<text x="4" y="{PAD}">{hi:.3g}</text><text x="4" y="{HEIGHT - PAD}">{lo:.3g}</text>',
    ]
    for name, level in lines:
        parts.append(
            f'<line class="level" x1="{PAD}" y1="{y(level):.1f}" x2="{WIDTH - PAD}" y2="{y(level):.1f}" '
            f'stroke="{"#c0392b" if name.startswith("tolerance") else "#e59866"}" stroke-dasharray="4 3"/>'
            f'<text x="{WIDTH - PAD + 2}" y="{y(level) + 4:.1f}">{html.escape(name)}</text>'
        )
    for i, (label, (est, low, high)) in enumerate(zip(labels, points)):
        x = PAD + i * step + step / 2
        tip = f"{label}: {est:.4g} [{low:.4g}, {high:.4g}]"
        parts.append(
            f'<line class="interval" x1="{x:.1f}" y1="{y(low):.1f}" x2="{x:.1f}" y2="{y(high):.1f}" stroke="#4a78b5" '
            f'stroke-width="3"><title>{html.escape(tip)}</title></line>'
            f'<circle class="estimate" cx="{x:.1f}" cy="{y(est):.1f}" r="4" fill="#1b3a66"><title>{html.escape(tip)}</title>'
            f'</circle><text x="{x - 6:.1f}" y="{HEIGHT - PAD + 14}">{html.escape(label)}</text>'
        )
    return "".join(parts) + "</svg>"


def _number_chart(r: BisectReport) -> str | None:
    """θ along the history for a number: each tested commit's estimate and interval (the
    report's `along`), the band of GOOD and BAD drawn as lines."""
    numeric = r.reference.numeric
    rows = [a for a in r.along if "value" in a and Verdict(a["verdict"]) not in PLACEMENTS]
    if numeric is None or len(rows) < 2:
        return None
    good, bad = numeric["good"], numeric["bad"]
    lines = [("tolerance", good[0]), ("tolerance", good[1]), ("eta", bad[0]), ("eta", bad[1])]
    what = THETA_LONG[numeric["scale"]]
    svg = _svg_intervals(
        f"{what} by commit position, with the interval each test left",
        [str(a["position"]) for a in rows],
        [(a["value"], a["low"], a["high"]) for a in rows],
        lines,
    )
    caption = (
        f"Each tested commit's {what} (dot) and the interval its test left at its level (bar): a GOOD's "
        "interval lies between the tolerance lines, a BAD's beyond an eta line."
    )
    return _figure(svg, caption)


def _figure(svg: str, caption: str) -> str:
    return f"<figure>{svg}<figcaption>{html.escape(caption)}</figcaption></figure>"


def charts(r: BisectReport | CommitReport) -> list[str]:
    """The report's charts as SVG figures: distance along the history (a bisect with two or
    more commits tested against the reference; placements left out, the caption says which),
    then observed vs reference for the culprit and its parent (each by its longest test against
    the reference), or the tested commit."""
    out = []
    numeric = r.reference.numeric
    name = distance_name(numeric)
    if isinstance(r, BisectReport) and len(rows := distance_rows(r)) >= 2:
        top = max(0.2, min(1.0, max(tv for _, _, tv, _ in rows) * 1.1))
        if numeric is not None:  # the number's own units: room for the tolerance line and every bar
            top = max(1.5 * (r.tolerance or 0.0), max(tv for _, _, tv, _ in rows) * 1.1, 1e-9)
        levels = [(n, v) for n, v in (("eta", r.eta), ("tolerance", r.tolerance)) if v is not None]
        svg = _svg_bars(
            f"distance from the reference ({name}) by commit position",
            [str(pos) for pos, *_ in rows],
            [tv for *_, tv, _ in rows],
            levels,
            top,
        )
        note = placements_note(r)
        what = "total variation" if numeric is None else f"distance ({name}, its estimate)"
        caption = f"Each tested commit's {what} from the reference, in history order." + (
            f" {note[0].upper()}{note[1:]}." if note else ""
        )
        out.append(_figure(svg, caption))
    if numeric is not None:  # a number's runs are a line of text in the tables, not a distribution
        chart = _number_chart(r) if isinstance(r, BisectReport) else None
        return out + ([chart] if chart else [])
    if isinstance(r, BisectReport):
        shown = [v for v in r.verdicts if v.arm == "main" and v.counts and v.sha in (r.first_bad, r.last_good)]
        culprit = r.first_bad
        shown.sort(key=lambda v: (v.sha != culprit, distance_rank(v)))  # the culprit first, each by its best test
    else:
        shown = [r.detail] if r.detail.counts else []
    seen: set[str] = set()
    for v in shown:
        if v.sha in seen:
            continue
        seen.add(v.sha)
        cells = observed_cells(v.counts, r.reference.categories, r.reference.category_probs)
        labels = [f"{c.label} obs" for c in cells] + [f"{c.label} ref" for c in cells]
        values = [c.freq or 0.0 for c in cells] + [c.ref for c in cells]
        order = [i for pair in zip(range(len(cells)), range(len(cells), 2 * len(cells))) for i in pair]
        svg = _svg_bars(
            f"{v.sha[:12]} ({v.role}): observed vs reference",
            [labels[i] for i in order],
            [values[i] for i in order],
            [],
            1.0,
        )
        out.append(_figure(svg, f"Shares among runs that met the condition, {v.runs} runs."))
    return out


def report_html(r: BisectReport | CommitReport) -> str:
    """The whole page: title, the Markdown report as HTML (its Mermaid blocks left out), charts."""
    md = bisect_markdown(r) if isinstance(r, BisectReport) else commit_markdown(r)
    md = re.sub(r"<details><summary>Chart:[^\n]*</summary>\n\n```mermaid\n.*?```\n\n</details>\n?", "", md, flags=re.S)
    body = markdown.markdown(md, extensions=["tables", "fenced_code"])
    title = html.escape(md.splitlines()[0].lstrip("# ").replace("`", ""))
    return (
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>{title}</title>'
        f"<style>{STYLE}</style></head><body>\n{body}\n<h3>Charts</h3>\n" + "\n".join(charts(r)) + "\n</body></html>\n"
    )
