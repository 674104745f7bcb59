"""What a reader of the built site would see go wrong, found in a real
browser: every page opened, then a broken image, a link to a page or an
anchor that is not there, a code block wider than its column with no scroll
bar, or a drawing shrunk until its text is too small to read.

Used by ``tests/test_site.py`` on the built site and on planted pages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from html.parser import HTMLParser
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


# -- what fits its column, at a given window size (issue 35) -------------------

#: Run in the page: every table and code block wider than the room it has
#: whose overflow the reader cannot see the edges of (no border, shadow or
#: background of its own around the part that scrolls), and every output
#: block (what code printed: ``.python-run-output``, program output, text)
#: with a line that runs past the column instead of wrapping.
FIT = """
const column = document.querySelector('article, [role=main], main') || document.body;
const right = column.getBoundingClientRect().right;
const page = getComputedStyle(document.body).backgroundColor;
const out = {unframed: [], outputs: []};
const none = c => c === 'transparent' || /rgba\\(.*,\\s*0\\)$/.test(c);
function frame(el) {
  const s = getComputedStyle(el);
  const border = ['Left', 'Right', 'Top', 'Bottom'].some(side =>
    parseFloat(s[`border${side}Width`]) > 0 && s[`border${side}Style`] !== 'none'
    && !none(s[`border${side}Color`]));
  const fill = !none(s.backgroundColor) && s.backgroundColor !== page;
  return border || fill || s.boxShadow !== 'none';
}
function framed(box) {  // the box or an ancestor as wide as it, drawn
  const width = box.getBoundingClientRect().width;
  for (let el = box; el && el !== column; el = el.parentElement) {
    if (el.getBoundingClientRect().width > width + 40) break;
    if (frame(el)) return true;
  }
  return false;
}
function scroller(el) {  // the nearest box that scrolls el sideways
  for (let box = el; box && box !== column; box = box.parentElement) {
    const overflow = getComputedStyle(box).overflowX;
    if (['auto', 'scroll'].includes(overflow) && box.scrollWidth > box.clientWidth + 1) return box;
  }
  return null;
}
const label = el => el.textContent.trim().split('\\n')[0].trim().slice(0, 60);
for (const el of document.querySelectorAll('table, pre')) {
  if (el.offsetParent === null) continue;  // not shown
  if (el.closest('table') !== el && el.closest('table')) continue;  // inside a table: the table's
  const box = scroller(el);
  const spills = el.getBoundingClientRect().right > right + 1 && box === null;
  const clipped = box === null && el.scrollWidth > el.clientWidth + 1;
  if (spills || clipped || (box !== null && !framed(box)))
    out.unframed.push(`${el.tagName.toLowerCase()} ${JSON.stringify(label(el))}`);
  if (el.tagName === 'PRE' && el.closest('.python-run-output, .highlight-text, .output')
      && el.scrollWidth > el.clientWidth + 1) {
    const wide = el.textContent.split('\\n').reduce((a, b) => (b.length > a.length ? b : a), '');
    out.outputs.push(JSON.stringify(wide.trim().slice(0, 60)));
  }
}
return out;
"""


def check_fit(browser: Any, root: Path, sizes: tuple[tuple[int, int], ...]) -> Report:
    """Open every HTML page under ``root`` at each window size and report a
    table or code block wider than its column without a visible frame, and
    an output line that runs past the column."""
    root = root.resolve()
    report = Report()
    for width, height in sizes:
        browser.set_window_size(width, height)
        for page in sorted(root.rglob("*.html")):
            browser.get(page.as_uri())
            found = browser.execute_script(FIT)
            report.pages += 1
            where = f"{page.relative_to(root)} at {width}px"
            report.problems += [
                f"{where}: wider than its column, unframed: {b}" for b in found["unframed"]
            ]
            report.problems += [
                f"{where}: output line past the column: {b}" for b in found["outputs"]
            ]
    return report


def wide_tables(browser: Any, page: Path, width: int = 1280, height: int = 900) -> list[str]:
    """The tables on ``page`` that scroll sideways at this window size."""
    browser.set_window_size(width, height)
    browser.get(page.resolve().as_uri())
    return list(
        browser.execute_script(
            "return [...document.querySelectorAll('table')].filter(t => t.offsetParent !== null"
            " && t.getBoundingClientRect().width > t.parentElement.clientWidth + 1)"
            ".map(t => t.textContent.trim().split('\\n')[0].trim().slice(0, 60));"
        )
    )


# -- the API reference: a summary for every public name (issue 35) ------------


class _SummaryRows(HTMLParser):
    """The rows of a page's ``api-summary`` tables: (name, summary) texts."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._depth = 0  # > 0 inside a summary table
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = (dict(attrs).get("class") or "").split()
        if tag == "table" and (self._depth or "api-summary" in classes):
            self._depth += 1
        elif self._depth and tag == "tr":
            self.rows.append([])
        elif self._depth and tag == "td":
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "table" and self._depth:
            self._depth -= 1
        elif tag == "td" and self._cell is not None:
            self.rows[-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)


def summaries(page: Path) -> dict[str, str]:
    """``name -> its one-line summary`` as the page's summary tables show it."""
    parser = _SummaryRows()
    parser.feed(page.read_text(encoding="utf-8"))
    return {row[0]: row[1] for row in parser.rows if len(row) >= 2}


def missing_summaries(root: Path, public: dict[str, list[str]]) -> list[str]:
    """Every public name (``module -> names``) that the module's page under
    ``api/`` does not list with a summary, one line each."""
    problems = []
    for module, names in public.items():
        page = root / "api" / f"{module}.html"
        shown = summaries(page) if page.exists() else {}
        problems += [
            f"api/{module}.html: no summary for {name}"
            for name in names
            if not shown.get(name, "").strip()
        ]
    return problems
