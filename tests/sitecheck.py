"""What a reader of the built site would see go wrong, found in a real
browser: every page opened, then a broken image, a link to a page or an
anchor that is not there, a code block wider than its column with no scroll
bar, or a drawing shrunk until its text is too small to read.

Used by ``tests/test_site.py`` on the built site and on planted pages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

#: A drawing shown at less than this fraction of its own size has text
#: below ~10 px (Graphviz draws 12 pt = 16 px labels).
MIN_SCALE = 0.65

#: Run in the page: what it shows, measured as laid out.
MEASURE = """
const out = {images: [], small: [], blocks: [], ids: [], links: []};
for (const img of document.images) {
  const src = img.getAttribute('src');
  if (!img.complete || img.naturalWidth === 0) out.images.push(src);
  else if (src.endsWith('.svg') && img.clientWidth < arguments[0] * img.naturalWidth)
    out.small.push(`${src} at ${Math.round(100 * img.clientWidth / img.naturalWidth)}%`);
}
for (const el of document.querySelectorAll('[id]')) out.ids.push(el.id);
for (const el of document.querySelectorAll('a[name]')) out.ids.push(el.name);
for (const a of document.querySelectorAll('a[href]')) out.links.push(a.href);
const column = document.querySelector('article, [role=main], main') || document.body;
const right = column.getBoundingClientRect().right;
for (const pre of document.querySelectorAll('pre')) {
  if (pre.offsetParent === null) continue;  // not shown
  const overflow = getComputedStyle(pre).overflowX;
  const clipped = pre.scrollWidth > pre.clientWidth + 1 && !['auto', 'scroll'].includes(overflow);
  const spills = pre.getBoundingClientRect().right > right + 1;
  if (clipped || spills) out.blocks.push(pre.textContent.trim().split('\\n')[0].slice(0, 60));
}
return out;
"""


@dataclass
class Report:
    """Every problem found, one line each, and how many pages were opened."""

    pages: int = 0
    problems: list[str] = field(default_factory=list)


def check_site(browser: Any, root: Path) -> Report:
    """Open every HTML page under ``root`` and report what a reader would
    find broken (links are checked once every page's anchors are known)."""
    root = root.resolve()
    report = Report()
    ids: dict[Path, set[str]] = {}
    links: list[tuple[Path, str]] = []
    for page in sorted(root.rglob("*.html")):
        browser.get(page.as_uri())
        found = browser.execute_script(MEASURE, MIN_SCALE)
        report.pages += 1
        name = page.relative_to(root)
        report.problems += [f"{name}: broken image {src}" for src in found["images"]]
        report.problems += [f"{name}: drawing shrunk to {s}" for s in found["small"]]
        report.problems += [f"{name}: code block cut off: {b!r}" for b in found["blocks"]]
        ids[page] = set(found["ids"])
        links += [(page, href) for href in found["links"]]
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
