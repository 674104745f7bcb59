"""The documentation site as a reader sees it: built as CI builds it
(``sphinx-build -W``: every warning an error, the API reference's own checks
included), its links and anchors read from the built files, then every page
opened in headless Chromium, once loaded, and checked for broken images,
code blocks cut off without a scroll bar and drawings shrunk past reading
(``sitecheck.py``). The checker is shown finding each kind of defect on
planted pages first, and giving the same verdict when the browser is slow to
show a page. The toolchain that builds and checks the site is the one the
``docs`` and ``test`` extras pin, so the verdict is the same on every machine."""

from __future__ import annotations

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


class Lagging:
    """A browser whose ``get`` returns before the page is there: the first
    script run after it still sees the page before (as a loaded machine's
    Chromium did, once in a while, and the old checker read the wrong page's
    anchors)."""

    def __init__(self, browser: Any) -> None:
        self.browser = browser
        self.pending: str | None = None

    def get(self, url: str) -> None:
        self.pending = url

    def _arrive(self) -> None:
        if self.pending is not None:
            url, self.pending = self.pending, None
            self.browser.get(url)

    def execute_script(self, *args: Any) -> Any:
        result = self.browser.execute_script(*args)
        self._arrive()
        return result

    def execute_async_script(self, *args: Any) -> Any:
        result = self.browser.execute_async_script(*args)
        self._arrive()
        return result


def test_a_page_slow_to_show_gets_the_same_verdict(browser: Any, tmp_path: Path) -> None:
    for name, text in PLANTED.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    straight = check_site(browser, tmp_path)
    lagging = check_site(Lagging(browser), tmp_path)
    assert lagging.pages == straight.pages == 2
    assert sorted(lagging.problems) == sorted(straight.problems)
    assert len(straight.problems) == 5


@pytest.mark.slow
def test_every_page_of_the_site_reads_right(browser: Any, site: Path) -> None:
    report = check_site(browser, site)
    assert report.pages >= 40, report.pages
    assert not report.problems, "\n".join(report.problems)


#: Installed with the pinned tools but not pinned: they carry bytes, not the
#: verdict (intersphinx downloads, off unless asked for; Selenium's
#: connection to chromedriver) or every tool of an environment shares them,
#: pip's own included.
UNPINNED = {
    "requests", "certifi", "urllib3", "idna", "charset-normalizer",
    "trio", "trio-websocket", "outcome", "sniffio", "attrs", "wsproto", "h11",
    "websocket-client", "packaging", "typing-extensions",
}  # fmt: skip

#: The tools whose versions decide what the site is and what the tests say.
TOOLS = ["sphinx", "myst-parser", "furo", "sphinxcontrib-programoutput", "selenium"]
TOOLS += ["pytest", "pytest-xdist", "hypothesis"]


def _pins() -> dict[str, str]:
    """``name -> version`` of every exact pin of the docs and test extras
    that applies to this Python."""
    import tomllib
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    pins = {}
    for line in extras["docs"] + extras["test"]:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate():
            continue
        exact = [s.version for s in req.specifier if s.operator == "=="]
        if exact:
            pins[canonicalize_name(req.name)] = exact[0]
    return pins


@pytest.mark.skipif(sys.version_info < (3, 11), reason="the toolchain floats on 3.10 (Sphinx 9)")
def test_the_toolchain_is_pinned_and_installed_as_pinned() -> None:
    """Every package the site's build, the browser driver, the test runner
    and Hypothesis bring is pinned exactly in the extras, and what is
    installed is what is pinned (else: ``pip install -e '.[test]'``)."""
    from importlib.metadata import PackageNotFoundError, requires, version

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    pins = _pins()
    seen: set[str] = set()
    todo = list(TOOLS)
    while todo:
        name = canonicalize_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            installed = version(name)
        except PackageNotFoundError:
            pytest.fail(f"{name} is not installed: pip install -e '.[test]'")
        if name not in UNPINNED:
            assert name in pins, f"{name} {installed} floats: pin it in the docs or test extra"
            assert installed == pins[name], (
                f"{name} {installed} is installed, the extras pin {pins[name]}: "
                "pip install -e '.[test]'"
            )
        for line in requires(name) or []:
            req = Requirement(line)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    assert "sphinx" in seen and "docutils" in seen and "selenium" in seen
