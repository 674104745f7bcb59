"""The documentation site as a reader sees it: built as CI builds it
(``sphinx-build -W``: every warning an error, the API reference's own checks
included), then every page opened in headless Chromium and checked for
broken images, links to missing pages or anchors, code blocks cut off
without a scroll bar and drawings shrunk past reading (``sitecheck.py``).
The checker is shown finding each kind of defect on planted pages first."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sitecheck import check_site

ROOT = Path(__file__).resolve().parent.parent

WIDE = "x = " + " + ".join(f"term_{i}" for i in range(40))

PLANTED = {
    "index.html": f"""<!DOCTYPE html><html><body><article style="width: 400px">
<h1 id="top">Planted</h1>
<img src="missing.png" alt="a broken image">
<img src="wide.svg" style="width: 300px" alt="a drawing at 30% of its size">
<img src="wide.svg" style="width: 700px" alt="fine: 70%">
<a href="other.html#nowhere">a missing anchor</a>
<a href="gone.html">a missing page</a>
<a href="other.html#here">fine</a>
<pre style="overflow: hidden">{WIDE}</pre>
<pre style="overflow-x: auto">{WIDE}</pre>
</article></body></html>""",
    "other.html": """<!DOCTYPE html><html><body><article>
<h1 id="here">Other</h1><a href="index.html#top">fine</a><pre>short</pre>
</article></body></html>""",
    "wide.svg": '<svg xmlns="http://www.w3.org/2000/svg" width="1000" height="100">'
    '<text x="10" y="50" font-size="16">a label</text></svg>',
}


def test_the_checker_finds_each_planted_defect(browser: Any, tmp_path: Path) -> None:
    for name, text in PLANTED.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    report = check_site(browser, tmp_path)
    assert report.pages == 2
    assert sorted(report.problems) == [
        "index.html: broken image missing.png",
        f"index.html: code block cut off: {WIDE[:60]!r}",
        "index.html: drawing shrunk to wide.svg at 30%",
        "index.html: link to a missing anchor other.html#nowhere",
        "index.html: link to a missing page gone.html",
    ]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built from nothing as CI builds it, in a directory of its own."""
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-E", "-W", "--keep-going", "-q"]
        + [str(ROOT / "docs"), str(out)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, f"sphinx-build -W failed:\n{done.stderr}"
    return out


@pytest.mark.slow
def test_every_page_of_the_site_reads_right(browser: Any, site: Path) -> None:
    report = check_site(browser, site)
    assert report.pages >= 40, report.pages
    assert not report.problems, "\n".join(report.problems)
