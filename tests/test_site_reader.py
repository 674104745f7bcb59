"""The site as a reader finishes it (issue 35): every table and block fits
its column or scrolls inside a visible frame, at a desktop's and a phone's
width; no output line runs past the column; the operation tables are read
without scrolling sideways. Shown on planted pages first, then on the
site built as CI builds it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sitecheck import check_fit, wide_tables
from test_site import site  # noqa: F401 - the built site, a fixture

DESKTOP, PHONE = (1280, 900), (420, 800)

LONG = "TypeError: " + " ".join(f"word{i}" for i in range(60))
WIDE_ROW = "".join(f"<td>column_{i}</td>" for i in range(20))
CELLS = "".join(f"column_{i}" for i in range(20))  # the row's text

FIT_PAGES = {
    "index.html": f"""<!DOCTYPE html><html><body style="background: white">
<article style="width: 400px">
<table id="spills"><tr>{WIDE_ROW}</tr></table>
<div style="overflow-x: auto"><table id="bare"><tr><td>bare</td>{WIDE_ROW}</tr></table></div>
<div style="overflow-x: auto; border: 1px solid #ccc"><table><tr>{WIDE_ROW}</tr></table></div>
<div class="python-run-output"><pre style="overflow-x: auto; background: #eee">{LONG}</pre></div>
<div class="output"><pre style="white-space: pre-wrap; background: #eee">{LONG}</pre></div>
<div class="highlight-python"><pre style="overflow-x: auto; background: #eee">x = {LONG}</pre></div>
<pre style="overflow-x: auto">y = {LONG}</pre>
</article></body></html>""",
}


def test_the_fit_check_finds_each_planted_defect(browser: Any, tmp_path: Path) -> None:
    for name, text in FIT_PAGES.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    report = check_fit(browser, tmp_path, (DESKTOP,))
    assert report.pages == 1
    where = "index.html at 1280px"
    assert sorted(report.problems) == [
        f'{where}: output line past the column: "{LONG[:60]}"',
        f'{where}: wider than its column, unframed: pre "y = {LONG[:56]}"',
        f'{where}: wider than its column, unframed: table "{("bare" + CELLS)[:60]}"',
        f'{where}: wider than its column, unframed: table "{CELLS[:60]}"',
    ]


@pytest.mark.slow
def test_every_page_fits_at_a_desktop_and_a_phone_width(browser: Any, site: Path) -> None:  # noqa: F811
    report = check_fit(browser, site, (DESKTOP, PHONE))
    assert report.pages >= 2 * 80, report.pages
    assert report.problems == []


@pytest.mark.slow
def test_ops_tables_are_read_without_scrolling_sideways(browser: Any, site: Path) -> None:  # noqa: F811
    assert wide_tables(browser, site / "ops.html", *DESKTOP) == []
    # and on a phone they scroll inside their frame (what check_fit allows)
    assert len(wide_tables(browser, site / "ops.html", *PHONE)) == 2
