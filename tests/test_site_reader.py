"""The site as a reader finishes it (issue 35): every table and block fits
its column or scrolls inside a visible frame, at a desktop's and a phone's
width; no output line runs past the column; the operation tables are read
without scrolling sideways. Shown on planted pages first, then on the
site built as CI builds it."""

from __future__ import annotations

import importlib
import inspect
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from sitecheck import check_fit, missing_summaries, summaries, wide_tables

DESKTOP, PHONE = (1280, 900), (420, 800)
REPO = Path(__file__).resolve().parent.parent
DOCS_EXT = REPO / "docs" / "_ext"

#: The modules whose every public name must have a one-line summary.
SUMMARISED = (
    "chainrule",
    "chainrule.tensor",
    "chainrule.nn",
    "chainrule.optim",
    "chainrule.losses",
    "chainrule.data",
)

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
def test_every_page_fits_at_a_desktop_and_a_phone_width(browser: Any, site: Path) -> None:
    report = check_fit(browser, site, (DESKTOP, PHONE))
    assert report.pages >= 2 * 80, report.pages
    assert report.problems == []


@pytest.mark.slow
def test_ops_tables_are_read_without_scrolling_sideways(browser: Any, site: Path) -> None:
    assert wide_tables(browser, site / "ops.html", *DESKTOP) == []
    # on a phone too: the formulas wrap at their spaces, inside their column
    assert wide_tables(browser, site / "ops.html", *PHONE) == []


STICKY = """
const frames = [...document.querySelectorAll('table.ops-table')].map(t => t.parentElement);
return frames.map(frame => {
  frame.scrollTop = 800;
  const head = frame.querySelector('thead th').getBoundingClientRect().top;
  const top = frame.getBoundingClientRect().top;
  return [frame.scrollTop, Math.round(head - top), getComputedStyle(frame).borderTopWidth];
});
"""


@pytest.mark.slow
def test_ops_tables_scroll_in_a_frame_under_their_header(browser: Any, site: Path) -> None:
    browser.set_window_size(*DESKTOP)
    browser.get((site / "ops.html").as_uri())
    # each table scrolled 800 px down inside its frame: its header still on top
    assert browser.execute_script(STICKY) == [[800, 1, "1px"], [800, 1, "1px"]]


SUMMARY_PAGE = """<!DOCTYPE html><html><body><article>
<table class="api-summary"><tbody>
<tr><td><a href="#m.a"><code>a</code></a></td><td><p>Does <code>a</code>.</p></td></tr>
<tr><td><code>b</code></td><td></td></tr>
</tbody></table></article></body></html>"""


def test_the_summary_check_finds_a_name_without_a_summary(tmp_path: Path) -> None:
    (tmp_path / "api").mkdir()
    (tmp_path / "api" / "m.html").write_text(SUMMARY_PAGE, encoding="utf-8")
    assert summaries(tmp_path / "api" / "m.html") == {"a": "Does a.", "b": ""}
    assert missing_summaries(tmp_path, {"m": ["a", "b", "c"], "gone": ["d"]}) == [
        "api/m.html: no summary for b",
        "api/m.html: no summary for c",
        "api/gone.html: no summary for d",
    ]


def _public(module_name: str) -> list[str]:
    """The module's public API: its ``__all__``, or without one the public
    names it defines itself; submodules aside (each has its own page)."""
    module = importlib.import_module(module_name)
    names = vars(module).get("__all__") or [
        n
        for n, obj in vars(module).items()
        if not n.startswith("_") and getattr(obj, "__module__", None) == module_name
    ]
    return [n for n in names if not inspect.ismodule(getattr(module, n))]


def _plain(rst: str) -> str:
    """What a docstring's reStructuredText reads as on the page."""
    rst = re.sub(r":[\w:]+:`~[^`]*?([^.`]+)`", r"\1", rst)  # :func:`~a.b` shows b
    rst = re.sub(r":[\w:]+:`([^`<]*?)(?: <[^>]*>)?`", r"\1", rst)
    return " ".join(rst.replace("`", "").replace("()", "").split())


def _read(shown: str) -> str:
    typeset = {"\u2019": "'", "\u201c": '"', "\u201d": '"', "\u2026": "..."}
    for char, ascii_ in typeset.items():
        shown = shown.replace(char, ascii_)
    return shown.replace("()", "")


@pytest.mark.slow
def test_every_public_name_has_its_one_line_summary_in_the_reference(site: Path) -> None:
    sys.path.insert(0, str(DOCS_EXT))
    try:
        import apiref
        import public_api
    finally:
        sys.path.remove(str(DOCS_EXT))
    for name in SUMMARISED:
        shown = summaries(site / "api" / f"{name}.html")
        names = _public(name)
        assert sorted(shown) == sorted(names), name
        module = importlib.import_module(name)
        for public in names:
            written = apiref.one_line(public_api.docstring(module, public))
            assert written, f"{name}.{public} has no docstring"
            assert _read(shown[public]) == _plain(written), f"{name}.{public}"
    # and every other public module's page lists its names with a summary
    every = {m.__name__: public_api.public_names(m) for m in public_api.modules()}
    assert len(every) >= 20
    assert missing_summaries(site, every) == []


#: What changes from one run to the next in what a tutorial prints: times
#: and the speed-ups they give, and where a warning points (the page names
#: a block ``<cell 5>``, Jupyter a file of its own).
VOLATILE = [
    (re.compile(r"\d[\d,.]*\s*(ms|us|µs|s)\b"), "<time>"),
    (re.compile(r"\d[\d,.]*x (faster|slower)"), "<ratio>"),
    (re.compile(r"(<cell \d+>|\S*ipykernel_\d+/\d+\.py):\d+"), "<cell>"),
]


def _printed(cell: dict[str, Any]) -> str:
    """What a code cell printed, an exception as Python prints its last line."""
    text = ""
    for out in cell["outputs"]:
        if out["output_type"] == "stream" and out["name"] == "stdout":
            text += "".join(out["text"])
        elif out["output_type"] == "error":
            text += f"{out['ename']}: {out['evalue']}\n"
    for pattern, mark in VOLATILE:
        text = pattern.sub(mark, text)
    return text


@pytest.mark.slow
@pytest.mark.parametrize(
    "name",
    ["backward-by-hand", "from-micrograd", "gpt-on-names", "compile-a-loop", "continue-on-torch"],
)
def test_each_tutorial_notebook_runs_and_prints_what_the_page_shows(
    site: Path,
    name: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    assert (site / "tutorials" / f"{name}.py").is_file()
    shown = nbformat.read(site / "tutorials" / f"{name}.ipynb", as_version=4)
    # run as a reader would, from a checkout: this one's src, its examples/
    monkeypatch.setenv("PYTHONPATH", str(REPO / "src"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    (tmp_path / "examples").symlink_to(REPO / "examples")
    run = nbformat.from_dict(shown)
    for cell in run.cells:
        if cell.cell_type == "code":
            cell.outputs = []
    nbclient.NotebookClient(
        run, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    code = [(a, b) for a, b in zip(shown.cells, run.cells) if a.cell_type == "code"]
    assert code, name
    ran = 0
    for page, notebook in code:
        if page.source.startswith("%%bash"):
            assert not any(o["output_type"] == "error" for o in notebook.outputs)
            continue
        assert _printed(notebook) == _printed(page), page.source.splitlines()[0]
        ran += bool(page.outputs)
    assert ran >= 1 or name == "continue-on-torch"


# -- the landing page, the favicon, the changelog, the extras (issue 35) ------


@pytest.mark.slow
def test_the_landing_page_starts_a_reader(site: Path) -> None:
    html = (site / "index.html").read_text(encoding="utf-8")
    article = html[html.index("<article") : html.index("</article>")]
    text = re.sub(r"<[^>]+>", "", article)  # what the page says, in its order
    order = [
        "pip install -e",
        "chainrule moons --out out",
        "Learn the backward pass.",
        "Train with it.",
        "Speed it up.",
        "Where it fits",
        "Contents",
    ]
    found = [text.find(mark) for mark in order]
    assert -1 not in found, dict(zip(order, found))
    assert found == sorted(found)


@pytest.mark.slow
def test_every_page_names_the_favicon(site: Path) -> None:
    pages = sorted(site.rglob("*.html"))
    assert len(pages) >= 80
    for page in pages:
        links = re.findall(
            r'<link rel="(?:shortcut )?icon" href="([^"]+)"', page.read_text(encoding="utf-8")
        )
        assert len(links) == 1, page
        assert (page.parent / links[0]).resolve().is_file(), (page, links[0])


def test_the_changelog_records_the_release_and_what_follows() -> None:
    headings = re.findall(r"^## (.+)$", (REPO / "CHANGELOG.md").read_text(encoding="utf-8"), re.M)
    assert headings[:2] == ["[Unreleased]", "[0.1.0] - 2026-11-26"]


def test_getting_started_lists_every_extra() -> None:
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "optional-dependencies"
    ]
    page = (REPO / "docs" / "getting-started.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `([\w-]+)` \| ([^|]+) \|", page, re.M))
    assert sorted(rows) == sorted(extras)
    # `all` is the user's extras, and its row names each of them
    (inside,) = re.findall(r"chainrule\[([\w,]+)\]", extras["all"][0])
    assert all(f"`{name}`" in rows["all"] for name in inside.split(",")), rows["all"]
