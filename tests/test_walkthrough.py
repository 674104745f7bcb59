"""The interactive page: self-contained, its data right, and in a real
browser (headless Chromium driven by Selenium) stepping through to the end
leaves every gradient equal to ``backward()``'s."""

from __future__ import annotations

import doctest
import io
import re
from pathlib import Path
from typing import Any

import pytest

import chainrule.explainer.walkthrough
from chainrule import Value
from chainrule.explainer.formula import evaluate
from chainrule.explainer.table import backward_walk
from chainrule.explainer.text import forward_order
from chainrule.explainer.walkthrough import page_data, walkthrough_html, write_walkthrough

FORMULAS = [
    ("c = a*b; e = c + d; f = relu(e)", {"a": 2.0, "b": -3.0, "d": 10.0}),
    ("c = a*b; d = c + a; e = d**2", {"a": 2.0, "b": 3.0}),
    ("t = tanh(a*b) * a; u = t - max(a, b) / (a*a + 1); v = exp(-u) * b", {"a": 0.7, "b": -1.9}),
]
LONG_NAMES = (
    "relu(alpha_coefficient*beta_coefficient + delta_offset_value)",
    {"alpha_coefficient": 2.0, "beta_coefficient": -3.0, "delta_offset_value": 10.0},
)


def test_docstring_examples() -> None:
    assert doctest.testmod(chainrule.explainer.walkthrough).failed == 0


def test_page_is_self_contained() -> None:
    page = walkthrough_html(evaluate(*FORMULAS[1]))
    # nothing fetched from anywhere: no src/href attributes, no @import, no url() but the marker
    assert not re.search(r"\b(src|href)\s*=", page)
    assert "@import" not in page and "@font-face" not in page
    assert re.findall(r"url\(([^)]*)\)", page) == ["#arrow"] * page.count("marker-end")
    assert "http" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_page_data_follows_the_walk() -> None:
    e = evaluate(*FORMULAS[1])
    walk = backward_walk(e)
    data = page_data(walk)
    assert data["updates"] == [[u.node, u.child, u.local] for u in walk.updates]
    assert len(data["texts"]) == len(walk.updates) + 2  # before the seed, the seed, each update
    names = walk.names
    a = names.index("a")
    assert (
        data["texts"][5] == "c = a * b: a.grad += 3.0 * 16.0 = 48.0, so a.grad = 16.0 + 48.0 = 64.0"
    )
    assert data["final"][a] == 5  # a is complete after step 5, its second contribution
    assert data["meanings"][a] == "if a increases by a small h, e increases by 64h"


def test_step_text_says_each_node_once_and_names_in_parentheses() -> None:
    """A node named by its own formula is not repeated (``a*b + d = a*b + d:``
    was), and ``.grad`` of a formula is on the whole of it."""
    data = page_data(backward_walk(evaluate("relu(a*b + d)", {"a": 2, "b": -3, "d": 10})))
    assert data["texts"][1:4] == [
        "Seed: relu(a*b + d).grad = 1.0 (drelu(a*b + d)/drelu(a*b + d) = 1). "
        "Now visit the nodes in reverse topological order.",
        "relu(a*b + d): (a*b + d).grad += 1.0 * 1.0 = 1.0, so (a*b + d).grad = 1.0",
        "a*b + d: (a*b).grad += 1.0 * 1.0 = 1.0, so (a*b).grad = 1.0",
    ]


def test_long_titles_wrap_and_are_whole_on_hover() -> None:
    page = walkthrough_html(evaluate(*LONG_NAMES))
    # the root's title, wrapped after an operator, and shortened on its second line
    assert '<text class="name" x="' in page and ">relu(alpha_coefficient*</text>" in page
    assert "<title>relu(alpha_coefficient*beta_coefficie...</title>" in page  # its display name
    assert "<title>alpha_coefficient*beta_coefficient</title>" in page


def test_labels_cannot_break_out_of_the_page(tmp_path: Path) -> None:
    x = Value(1.0, label="</script><script>alert(1)</script>")
    page = walkthrough_html(x.exp(), title="<b>t</b>")
    assert "<script>alert" not in page and "<b>t</b>" not in page
    assert page.count("<script>") == 1
    assert (
        write_walkthrough(x * 2.0, tmp_path / "p.html")
        .read_text(encoding="utf-8")
        .startswith("<!DOCTYPE html>")
    )


DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_committed_page_and_screenshot_are_current() -> None:
    # made by the README's two commands: explain --html, then chromium --screenshot
    page = (DOCS / "walkthrough.html").read_text(encoding="utf-8")
    assert page == walkthrough_html(evaluate(*FORMULAS[1]))
    png = (DOCS / "walkthrough.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 20_000


def test_refusals() -> None:
    with pytest.raises(TypeError, match="walkthrough_html: expected a Value, got float"):
        walkthrough_html(3.0)  # type: ignore[arg-type]
    x = Value(1.0)
    y = x
    for _ in range(300):
        y = y * 1.0
    with pytest.raises(ValueError, match="601 nodes, more than max_nodes=200"):
        walkthrough_html(y)


# -- in a real browser -----------------------------------------------------


def _open(browser: Any, root: Value, path: Path) -> None:
    write_walkthrough(root, path)
    browser.get(path.resolve().as_uri())


def _grads_on_page(browser: Any) -> dict[int, float]:
    cells = browser.find_elements("css selector", "td.grad")
    return {int(c.get_attribute("data-node")): float(c.get_attribute("data-grad")) for c in cells}


@pytest.mark.parametrize(("source", "values"), FORMULAS)
def test_stepping_to_the_end_gives_backwards_gradients(
    browser: Any, tmp_path: Path, source: str, values: dict[str, float]
) -> None:
    root = evaluate(source, values)
    _open(browser, root, tmp_path / "walk.html")
    counter = browser.find_element("id", "counter")
    steps = int(counter.get_attribute("data-steps"))
    assert steps == len(backward_walk(root).updates) + 1
    assert set(_grads_on_page(browser).values()) == {0.0}  # before the seed
    forward = browser.find_element("id", "next")
    clicks = 0
    while forward.is_enabled():
        forward.click()
        clicks += 1
        assert clicks <= steps
    assert clicks == steps and counter.get_attribute("data-step") == str(steps)
    on_page = _grads_on_page(browser)
    root.backward()
    nodes = forward_order(root)
    assert on_page == {i: v.grad for i, v in enumerate(nodes)}  # exactly, every node
    # the drawing shows the same numbers as the table
    for i in on_page:
        shown = browser.find_element("id", f"svg-grad-{i}").text
        assert shown == browser.find_element("id", f"grad-{i}").text


def test_stepping_back_undoes_one_update(browser: Any, tmp_path: Path) -> None:
    e = evaluate(*FORMULAS[1])
    _open(browser, e, tmp_path / "back.html")
    a = forward_order(e).index(e._prev[0]._prev[1])
    browser.find_element("id", "last").click()
    assert _grads_on_page(browser)[a] == 64.0
    browser.find_element("id", "prev").click()  # undo b's update: a still 64
    browser.find_element("id", "prev").click()  # undo a += 48
    assert _grads_on_page(browser)[a] == 16.0
    text = browser.find_element("id", "step-text").text
    assert text == "d = c + a: a.grad += 1.0 * 16.0 = 16.0, so a.grad = 16.0"
    # the node being processed (d) and the input receiving (a) are highlighted
    d = forward_order(e).index(e._prev[0])
    assert "active" in browser.find_element("id", f"node-{d}").get_attribute("class").split()
    assert "target" in browser.find_element("id", f"node-{a}").get_attribute("class").split()
    browser.find_element("id", "first").click()
    assert set(_grads_on_page(browser).values()) == {0.0}


def test_the_page_renders(browser: Any, tmp_path: Path) -> None:
    from matplotlib import image

    e = evaluate(*FORMULAS[0])
    _open(browser, e, tmp_path / "shot.html")
    browser.find_element("id", "next").click()
    pixels = image.imread(io.BytesIO(browser.get_screenshot_as_png()), format="png")
    height, width = pixels.shape[:2]
    assert (width, height) == (1200, 900) or width > 600
    rgb = pixels[..., :3]
    ink = (rgb.sum(axis=2) < 2.4).mean()  # not near white
    colours = {tuple(p) for p in (rgb[::7, ::7].reshape(-1, 3) * 255).astype(int).tolist()}
    assert ink > 0.01, "the page rendered blank"
    assert len(colours) > 20  # text, boxes, the highlighted node: not one flat colour


# -- the drawing's geometry, as the browser lays it out ------------------------

GEOMETRY = """
const box = (el) => { const b = el.getBBox(); return [b.x, b.y, b.x + b.width, b.y + b.height]; };
const nodes = [...document.querySelectorAll("g.node")].map((g) => ({
  rect: box(g.querySelector("rect")),
  texts: [...g.querySelectorAll("text")].map(box),
  title: (g.querySelector("title") || {textContent: ""}).textContent,
  shown: [...g.querySelectorAll("text.name")].map((t) => t.textContent),
}));
const labels = [...document.querySelectorAll("text.local")].map((t) => ({
  box: box(t), text: t.textContent, from: +t.dataset.from, to: +t.dataset.to,
}));
const edges = [...document.querySelectorAll("path.edge")].map((p) => {
  const n = p.getTotalLength(), points = [];
  for (let s = 0; s <= n; s += 1) { const q = p.getPointAtLength(s); points.push([q.x, q.y]); }
  const end = p.getPointAtLength(n);
  return {from: +p.dataset.from, to: +p.dataset.to, points: points, end: [end.x, end.y]};
});
return {nodes: nodes, labels: labels, edges: edges};
"""


def _overlap(a: list[float], b: list[float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _inside(inner: list[float], outer: list[float], margin: float) -> bool:
    return (
        inner[0] >= outer[0] + margin
        and inner[1] >= outer[1] + margin
        and inner[2] <= outer[2] - margin
        and inner[3] <= outer[3] - margin
    )


def _check_geometry(drawing: dict[str, Any], walk: Any) -> None:
    nodes, labels, edges = drawing["nodes"], drawing["labels"], drawing["edges"]
    assert len(nodes) == len(walk.nodes)
    for i, node in enumerate(nodes):
        for text in node["texts"]:  # every line of the box inside it: no overflow
            assert _inside(text, node["rect"], 2.0), (i, node["shown"], text, node["rect"])
        for other in nodes[i + 1 :]:
            assert not _overlap(node["rect"], other["rect"])
    heads = [[x - 8.5, y - 4.5, x + 0.5, y + 4.5] for x, y in (e["end"] for e in edges)]
    for j, label in enumerate(labels):
        local = dict(walk.locals_of(label["to"]))[label["from"]]
        assert label["text"] == chainrule.explainer.text.format_number(local)  # sign included
        for node in nodes:
            assert not _overlap(label["box"], node["rect"]), label
        for other in labels[j + 1 :]:
            assert not _overlap(label["box"], other["box"]), (label, other)
        for head in heads:
            assert not _overlap(label["box"], head), (label, head)
        x0, y0, x1, y1 = label["box"]
        for edge in edges:  # no line through a label (a minus sign on a line reads as none)
            crossing = [
                p
                for p in edge["points"]
                if x0 - 1.5 < p[0] < x1 + 1.5 and y0 - 1.5 < p[1] < y1 + 1.5
            ]
            assert not crossing, (label, edge["from"], edge["to"], crossing[:3])
    for node in nodes:  # a title wrapped, or shortened: whole on hover
        shown = " ".join(node["shown"])
        assert "".join(shown.split()) == "".join(node["title"].split()) or shown.endswith("...")


@pytest.mark.parametrize(
    ("source", "values"),
    [
        LONG_NAMES,
        FORMULAS[2],
        (
            "prediction_of_the_network = weight_of_the_first_input * first_input_value; "
            "squared_error_of_this_example = (prediction_of_the_network - target_value)**2",
            {"weight_of_the_first_input": -0.5, "first_input_value": 3.0, "target_value": 1.25},
        ),
    ],
)
def test_the_drawing_fits_its_boxes_and_keeps_labels_clear(
    browser: Any, tmp_path: Path, source: str, values: dict[str, float]
) -> None:
    """Read back from the browser's layout: every title and number inside
    its box, no boxes overlapping, and every edge label (its sign included)
    clear of boxes, other labels, arrowheads and every line; before the
    pass and after it, when the grads are written in."""
    root = evaluate(source, values)
    _open(browser, root, tmp_path / "geometry.html")
    walk = backward_walk(root)
    _check_geometry(browser.execute_script(GEOMETRY), walk)
    browser.find_element("id", "last").click()
    _check_geometry(browser.execute_script(GEOMETRY), walk)


# -- any screen: keys step without scrolling, the address follows the step -----


def test_keys_step_without_scrolling_and_the_address_follows(browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.keys import Keys

    e = evaluate(*FORMULAS[2])
    browser.set_window_size(1000, 500)  # the page is taller than the window
    try:
        _open(browser, e, tmp_path / "keys.html")
        counter = browser.find_element("id", "counter")
        steps = int(counter.get_attribute("data-steps"))
        body = browser.find_element("tag name", "body")
        for key, step in ((Keys.ARROW_RIGHT, 1), (Keys.ARROW_RIGHT, 2), (Keys.END, steps)):
            body.send_keys(key)
            assert counter.get_attribute("data-step") == str(step)
            assert browser.execute_script("return window.scrollY") == 0
            assert browser.execute_script("return location.hash") == f"#step={step}"
        body.send_keys(Keys.ARROW_LEFT)
        assert browser.execute_script("return location.hash") == f"#step={steps - 1}"
        browser.execute_script("location.hash = '#step=3'")  # a shared address moves it
        browser.execute_script("return new Promise((r) => setTimeout(r, 50))")
        assert counter.get_attribute("data-step") == "3"
        body.send_keys(Keys.HOME)
        assert counter.get_attribute("data-step") == "0"
        assert browser.execute_script("return window.scrollY") == 0
    finally:
        browser.set_window_size(1200, 900)


PHONE = """
const w = window.innerWidth, box = (el) => el.getBoundingClientRect();
const active = document.querySelector('g.node.active');
const drawing = document.getElementById('drawing');
return {scrollWidth: document.documentElement.scrollWidth, width: w,
  cells: [...document.querySelectorAll('td')].filter((c) => c.offsetParent)
    .map((c) => [box(c).left, box(c).right]),
  drawing: [box(drawing).left, box(drawing).right],
  active: active ? [box(active).left, box(active).right] : null};
"""


def test_at_phone_width_the_table_reflows_and_the_drawing_follows(
    browser: Any, tmp_path: Path
) -> None:
    e = evaluate(*FORMULAS[2])
    browser.set_window_size(420, 800)
    try:
        _open(browser, e, tmp_path / "phone.html")
        last = browser.find_element("id", "last")
        last.click()
        s = browser.execute_script(PHONE)
        assert s["scrollWidth"] <= s["width"]  # nothing wider than the screen
        assert all(left >= 0 and right <= s["width"] for left, right in s["cells"])
        steps = int(browser.find_element("id", "counter").get_attribute("data-steps"))
        browser.find_element("id", "first").click()
        for _ in range(steps):
            browser.find_element("id", "next").click()
            s = browser.execute_script(PHONE)
            (l0, r0), (l1, r1) = s["drawing"], s["active"]
            assert l0 - 1 <= l1 and r1 <= r0 + 1, s  # the active node in the drawing's view
    finally:
        browser.set_window_size(1200, 900)
