"""The report's charts in a real browser (Debian's chromium, driven by Playwright): the
Markdown's Mermaid blocks drawn by mermaid's own renderer (from npm, loaded from disk: no network
at run time), and the `--html` page opened with its SVG charts drawn."""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import replace
from html import escape as html_escape
from pathlib import Path
from typing import Iterator

import pytest

from bisectbot.core.diagnose import distance_along
from bisectbot.github.comment import CommentContext, render_bisect
from bisectbot.report.html import report_html
from bisectbot.report.markdown import bisect_markdown
from sample_reports import bisect_report

from conftest import MISSING_TOOL, require

ROOT = Path(__file__).resolve().parent.parent
MERMAID = Path(os.environ.get("BISECTBOT_MERMAID_JS", ROOT / ".cache/mermaid/node_modules/mermaid/dist/mermaid.min.js"))


@pytest.fixture(scope="module")
def page() -> Iterator[object]:
    require("chromium")
    sync_api = pytest.importorskip("playwright.sync_api", reason=f"{MISSING_TOOL} playwright (pip install playwright)")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=["--no-sandbox"])
        try:
            yield browser.new_page()
        finally:
            browser.close()


def placed_report():  # type: ignore[no-untyped-def]
    report = bisect_report()
    positions = {v.sha: p for v, p in zip(report.verdicts, (11, 0, 6, 5))}
    ref = report.reference
    return replace(report, along=distance_along(report.verdicts, positions, ref.categories, ref.category_probs))


def mermaid_blocks(markdown: str) -> list[str]:
    return re.findall(r"```mermaid\n(.*?)```", markdown, re.S)


def test_the_markdowns_mermaid_charts_render_in_mermaid_itself(page, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    if not MERMAID.is_file():
        pytest.skip(f"{MISSING_TOOL} mermaid (npm install --prefix .cache/mermaid mermaid@11)")
    report = placed_report()
    comment = render_bisect(report, CommentContext(repo="o/r")).fit()
    blocks = mermaid_blocks(bisect_markdown(report)) + mermaid_blocks(comment)
    assert len(blocks) >= 3  # distance in the Markdown; distribution and distance in the comment
    pres = "\n".join(f'<pre class="mermaid">{html_escape(b)}</pre>' for b in blocks)  # as GitHub: text
    html = (
        f"<!doctype html><html><body>{pres}<script src='{MERMAID.as_uri()}'></script>"
        "<script>mermaid.initialize({startOnLoad: true});</script></body></html>"
    )
    (tmp_path / "charts.html").write_text(html)
    page.goto((tmp_path / "charts.html").as_uri())
    page.wait_for_function(f"document.querySelectorAll('pre.mermaid svg').length === {len(blocks)}", timeout=30_000)
    assert "Syntax error" not in page.content()
    for i in range(len(blocks)):
        svg = page.locator("pre.mermaid svg").nth(i)
        assert svg.locator("rect, path").count() > 3  # bars or lines were drawn, not an empty frame


def test_the_html_page_opens_with_its_charts_drawn(page, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    report = placed_report()
    path = tmp_path / "report.html"
    path.write_text(report_html(report))
    assert "<script" not in path.read_text()  # self-contained: nothing to run, nothing to fetch
    page.goto(path.as_uri())
    assert page.title().startswith("bisectbot: first bad commit is")
    charts = page.locator("svg.chart")
    assert charts.count() == 3  # distance along the history; culprit and parent against the reference
    distance = charts.nth(0)
    assert distance.locator("rect.bar").count() == 4 and distance.locator("line.level").count() == 2
    heights = [float(distance.locator("rect.bar").nth(i).get_attribute("height") or 0) for i in range(4)]
    assert heights[2] > 10 * heights[0] > 0  # the culprit's bar stands far above the good end's
    box = distance.bounding_box()
    assert box is not None and box["width"] > 300 and box["height"] > 100  # laid out, visible
    assert page.locator("table").count() >= 1  # the verdict table rendered from the Markdown
