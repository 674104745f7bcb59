"""What a reader of the built site would see go wrong: a link to a page or
an anchor that is not there (read from the built HTML files themselves),
and, in a real browser once each page has loaded, a broken image, a code
block wider than its column with no scroll bar, or a drawing shrunk until
its text is too small to read.

Links and anchors come from the files, not from the browser: they are what
Sphinx wrote, the same on every machine, whatever the browser has loaded
yet. The browser is for what only layout shows, and it measures a page only
once its address is the page's and its document and images have loaded.

Used by ``tests/test_site.py`` on the built site and on planted pages.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit

#: A drawing shown at less than this fraction of its own size has text
#: below ~10 px (Graphviz draws 12 pt = 16 px labels).
MIN_SCALE = 0.65

#: How long one page may take to load before it is reported as not loading.
LOAD_SECONDS = 30.0

#: Run in the page once it has loaded: what it shows, measured as laid out.
#: Asynchronous: it waits for every image to finish loading (or fail) first.
MEASURE = """
const done = arguments[arguments.length - 1];
const images = Array.from(document.images);
for (const img of images) img.loading = 'eager';
Promise.all(images.map(img => img.complete ? null :
  new Promise(settle => {
    img.addEventListener('load', settle);
    img.addEventListener('error', settle);
  })
)).then(() => {
  const out = {url: document.URL, state: document.readyState, images: [], small: [], blocks: []};
  for (const img of images) {
    const src = img.getAttribute('src');
    if (img.naturalWidth === 0) out.images.push(src);
    else if (src.endsWith('.svg') && img.clientWidth < arguments[0] * img.naturalWidth)
      out.small.push(`${src} at ${Math.round(100 * img.clientWidth / img.naturalWidth)}%`);
  }
  const column = document.querySelector('article, [role=main], main') || document.body;
  const right = column.getBoundingClientRect().right;
  for (const pre of document.querySelectorAll('pre')) {
    if (pre.offsetParent === null) continue;  // not shown
    const overflow = getComputedStyle(pre).overflowX;
    const clipped = pre.scrollWidth > pre.clientWidth + 1 && !['auto', 'scroll'].includes(overflow);
    const spills = pre.getBoundingClientRect().right > right + 1;
    if (clipped || spills) out.blocks.push(pre.textContent.trim().split('\\n')[0].slice(0, 60));
  }
  done(out);
});
"""

#: Where the browser is and whether its document has finished loading.
WHERE = "return [document.URL, document.readyState];"


@dataclass
class Report:
    """Every problem found, one line each, and how many pages were opened."""

    pages: int = 0
    problems: list[str] = field(default_factory=list)


class _Page(HTMLParser):
    """The anchors a page defines and the links it makes, as written."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        if named.get("id"):
            self.ids.add(str(named["id"]))
        if tag == "a" and named.get("name"):
            self.ids.add(str(named["name"]))
        if tag == "a" and named.get("href") is not None:
            self.links.append(str(named["href"]))


def read_page(page: Path) -> tuple[set[str], list[str]]:
    """The ids (and ``<a name>``\\ s) of a built page and its links, resolved
    against the page's own address as a browser resolves them."""
    parsed = _Page()
    parsed.feed(page.read_text(encoding="utf-8"))
    parsed.close()
    return parsed.ids, [urljoin(page.as_uri(), href) for href in parsed.links]


def _same_page(url: str, uri: str) -> bool:
    return unquote(url.split("#", 1)[0]) == unquote(uri)


def _measure(browser: Any, uri: str) -> dict[str, Any] | None:
    """Open ``uri`` and measure it once the browser shows it, loaded; None
    when it never does within ``LOAD_SECONDS``."""
    browser.get(uri)
    deadline = time.monotonic() + LOAD_SECONDS
    while time.monotonic() < deadline:
        url, state = browser.execute_script(WHERE)
        if _same_page(url, uri) and state == "complete":
            found: dict[str, Any] = browser.execute_async_script(MEASURE, MIN_SCALE)
            if _same_page(found["url"], uri) and found["state"] == "complete":
                return found
        time.sleep(0.05)
    return None


def check_links(root: Path) -> Report:
    """Every HTML page under ``root`` read as a file: links to missing pages
    and missing anchors."""
    root = root.resolve()
    report = Report()
    ids: dict[Path, set[str]] = {}
    links: list[tuple[Path, str]] = []
    for page in sorted(root.rglob("*.html")):
        ids[page], found = read_page(page)
        links += [(page, href) for href in found]
        report.pages += 1
    for page, href in links:
        url = urlsplit(href)
        if url.scheme != "file":
            continue  # the site links out only to addresses it names as such
        target = Path(unquote(url.path))
        if not target.is_relative_to(root):
            continue
        name, where = page.relative_to(root), target.relative_to(root)
        if not target.exists():
            report.problems.append(f"{name}: link to a missing page {where}")
        elif url.fragment and target in ids and unquote(url.fragment) not in ids[target]:
            report.problems.append(f"{name}: link to a missing anchor {where}#{url.fragment}")
    return report


def check_site(browser: Any, root: Path) -> Report:
    """Every HTML page under ``root``: its links and anchors from the files
    (``check_links``), then each page opened in the browser and measured once
    loaded for what a reader would find broken."""
    root = root.resolve()
    report = check_links(root)
    for page in sorted(root.rglob("*.html")):
        name = page.relative_to(root)
        found = _measure(browser, page.as_uri())
        if found is None:
            report.problems.append(f"{name}: did not load in {LOAD_SECONDS:.0f} s")
            continue
        report.problems += [f"{name}: broken image {src}" for src in found["images"]]
        report.problems += [f"{name}: drawing shrunk to {s}" for s in found["small"]]
        report.problems += [f"{name}: code block cut off: {b!r}" for b in found["blocks"]]
    return report
