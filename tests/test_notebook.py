"""The backward pass in a notebook: a Value and a Tensor drawn with nothing
installed, micrograd's ``draw_dot``, the stepping view inline, and the
check of gradients written by hand on micrograd's "backprop ninja" network
(a two-layer MLP with batch norm, on Tensors)."""

from __future__ import annotations

import doctest
import io
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import chainrule
import chainrule.explainer.compare
import chainrule.explainer.notebook
from chainrule import Tensor, Value, compare_grads
from chainrule.explainer.draw import GraphvizNotFound
from chainrule.explainer.notebook import (
    DISPLAY_MAX_NODES,
    draw_dot,
    graph_html,
    graph_svg,
    walkthrough,
)


def lecture_L() -> Value:
    """micrograd's lecture, its first graph: L = (a*b + c) * f, labelled."""
    a = Value(2.0, label="a")
    b = Value(-3.0, label="b")
    c = Value(10.0, label="c")
    e = a * b
    e.label = "e"
    d = e + c
    d.label = "d"
    f = Value(-2.0, label="f")
    L = d * f
    L.label = "L"
    return L


def test_docstring_examples() -> None:
    assert doctest.testmod(chainrule.explainer.notebook).failed == 0
    assert doctest.testmod(chainrule.explainer.compare).failed == 0


def records_and_ops(svg: str) -> tuple[int, int]:
    return svg.count('<g class="node"'), svg.count('<g class="op"')


def test_a_value_shows_its_graph_without_graphviz(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "")  # no dot
    L = lecture_L()
    L.backward()
    svg = L._repr_svg_()
    assert svg is not None and records_and_ops(svg) == (7, 3)  # as micrograd's draw_dot
    assert re.findall(r'<text class="name"[^>]*>([^<]*)</text>', svg) == list("abecdfL")
    grads = re.findall(r'<tspan class="grad" id="[^"]*">([^<]*)</tspan>', svg)
    assert grads == ["6.0", "-4.0", "-2.0", "-2.0", "-2.0", "4.0", "1.0"]
    assert "<script" not in svg and "http" not in svg.replace("http://www.w3.org/2000/svg", "")
    # each drawing its own ids: two outputs on one page do not share a marker
    ids = [re.search(r'<svg id="([^"]*)"', graph_svg(L))[1] for _ in range(2)]  # type: ignore[index]
    assert ids[0] != ids[1]


def test_a_tensor_shows_its_graph() -> None:
    x = Tensor([[1.0, 2.0], [3.0, 4.0]], label="x")
    loss = (x * x).sum()
    loss.label = "loss"
    loss.backward()
    svg = loss._repr_svg_()
    assert records_and_ops(svg) == (3, 2)
    assert "(2, 2) float64" in svg and ">norm 10.9545</tspan>" in svg
    assert graph_html(loss).startswith('<div class="cr-display"')


def test_a_large_graph_shows_a_summary_saying_how_to_draw_it() -> None:
    y = Value(1.0, label="x")
    for _ in range(200):
        y = y * 1.0
    y.label = "big"
    svg = graph_svg(y)
    assert records_and_ops(svg) == (0, 0)
    assert "big: a graph of 401 values and 200 operations," in svg
    assert f"more than the {DISPLAY_MAX_NODES} a notebook draws." in svg
    assert "draw_dot(big, max_nodes=401) draws it here," in svg
    assert records_and_ops(draw_dot(y, max_nodes=401)._repr_svg_()) == (401, 200)


def test_draw_dot_as_the_lecture_calls_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    L = lecture_L()
    dot = draw_dot(L, format="svg", rankdir="LR")
    assert records_and_ops(dot._repr_svg_()) == (7, 3)
    assert dot.source.startswith("digraph chainrule {\n  rankdir=LR;")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PATH", "")  # SVG needs nothing
    assert dot.render("graph") == "graph.svg"  # as graphviz: the DOT file and the drawing
    assert (tmp_path / "graph").read_text().startswith("digraph")
    assert records_and_ops((tmp_path / "graph.svg").read_text()) == (7, 3)
    with pytest.raises(GraphvizNotFound, match=r"format 'png' needs Graphviz's `dot` program"):
        draw_dot(L, format="png").render("graph")
    with pytest.raises(ValueError, match="rankdir must be 'LR' or 'TB', got 'XY'"):
        draw_dot(L, rankdir="XY")
    with pytest.raises(TypeError, match="draw_dot: expected a Value or a Tensor, got float"):
        draw_dot(3.0)
    assert chainrule.draw_dot is draw_dot and chainrule.walkthrough is walkthrough


def test_the_stepping_view_has_ids_of_its_own() -> None:
    view = walkthrough(lecture_L())
    one, two = view._repr_html_(), view._repr_html_()
    prefix = re.search(r'<div class="cr-walk" id="([^"]*)walk"', one)[1]  # type: ignore[index]
    assert prefix and prefix not in two
    ids = re.findall(r'\bid="([^"]*)"', one)
    assert ids and all(i.startswith(prefix) for i in ids) and len(ids) == len(set(ids))
    assert one.count("<script>") == 1 and "<script src" not in one
    assert str(view) == chainrule.explain(lecture_L())
    with pytest.raises(TypeError, match="walkthrough: expected a Value, got Tensor"):
        walkthrough(Tensor([1.0]))  # type: ignore[arg-type]


# -- micrograd's "backprop ninja": a two-layer MLP with batch norm ---------------


def ninja(seed: int = 42) -> tuple[Tensor, dict[str, Tensor], dict[str, np.ndarray]]:
    """The lecture's forward pass, broken into its small steps, each a
    labelled Tensor, and the gradients of every step worked out by hand
    (the lecture's exercise 1) in NumPy."""
    rng = np.random.default_rng(seed)
    n, d, hidden, classes = 32, 30, 64, 27
    X = rng.standard_normal((n, d))
    Yb = rng.integers(0, classes, n)
    t: dict[str, Tensor] = {}

    def name(label: str, x: Tensor) -> Tensor:
        x.label = label
        t[label] = x
        return x

    embcat = name("embcat", Tensor(X))
    W1 = name("W1", Tensor(rng.standard_normal((d, hidden)) * (5 / 3) / d**0.5))
    b1 = name("b1", Tensor(rng.standard_normal(hidden) * 0.1))
    W2 = name("W2", Tensor(rng.standard_normal((hidden, classes)) * 0.1))
    b2 = name("b2", Tensor(rng.standard_normal(classes) * 0.1))
    bngain = name("bngain", Tensor(rng.standard_normal((1, hidden)) * 0.1 + 1.0))
    bnbias = name("bnbias", Tensor(rng.standard_normal((1, hidden)) * 0.1))
    hprebn = name("hprebn", embcat @ W1 + b1)
    bnmeani = name("bnmeani", 1 / n * hprebn.sum(0, keepdims=True))
    bndiff = name("bndiff", hprebn - bnmeani)
    bndiff2 = name("bndiff2", bndiff**2)
    bnvar = name("bnvar", 1 / (n - 1) * bndiff2.sum(0, keepdims=True))
    bnvar_inv = name("bnvar_inv", (bnvar + 1e-5) ** -0.5)
    bnraw = name("bnraw", bndiff * bnvar_inv)
    hpreact = name("hpreact", bngain * bnraw + bnbias)
    h = name("h", hpreact.tanh())
    logits = name("logits", h @ W2 + b2)
    logit_maxes = name("logit_maxes", logits.max(1, keepdims=True))
    norm_logits = name("norm_logits", logits - logit_maxes)
    counts = name("counts", norm_logits.exp())
    counts_sum = name("counts_sum", counts.sum(1, keepdims=True))
    counts_sum_inv = name("counts_sum_inv", counts_sum**-1)
    probs = name("probs", counts * counts_sum_inv)
    logprobs = name("logprobs", probs.log())
    loss = name("loss", -logprobs[range(n), Yb].mean())

    v = {k: x.data for k, x in t.items()}
    g: dict[str, np.ndarray] = {}
    g["logprobs"] = np.zeros_like(v["logprobs"])
    g["logprobs"][range(n), Yb] = -1.0 / n
    g["probs"] = g["logprobs"] / v["probs"]
    g["counts_sum_inv"] = (v["counts"] * g["probs"]).sum(1, keepdims=True)
    g["counts"] = g["probs"] * v["counts_sum_inv"]
    g["counts_sum"] = g["counts_sum_inv"] * (-1.0 * v["counts_sum"] ** -2.0)
    g["counts"] = g["counts"] + g["counts_sum"]
    g["norm_logits"] = g["counts"] * v["counts"]
    g["logit_maxes"] = (-g["norm_logits"]).sum(1, keepdims=True)
    g["logits"] = g["norm_logits"] + np.eye(classes)[v["logits"].argmax(1)] * g["logit_maxes"]
    g["h"] = g["logits"] @ v["W2"].T
    g["W2"] = v["h"].T @ g["logits"]
    g["b2"] = g["logits"].sum(0)
    g["hpreact"] = g["h"] * (1.0 - v["h"] * v["h"])
    g["bngain"] = (v["bnraw"] * g["hpreact"]).sum(0, keepdims=True)
    g["bnraw"] = g["hpreact"] * v["bngain"]
    g["bnbias"] = g["hpreact"].sum(0, keepdims=True)
    g["bnvar_inv"] = (v["bndiff"] * g["bnraw"]).sum(0, keepdims=True)
    g["bnvar"] = g["bnvar_inv"] * (-0.5 * (v["bnvar"] + 1e-5) ** -1.5)
    g["bndiff2"] = np.broadcast_to(g["bnvar"] * (1 / (n - 1)), v["bndiff2"].shape)
    g["bndiff"] = g["bnraw"] * v["bnvar_inv"] + g["bndiff2"] * (2.0 * v["bndiff"])
    g["bnmeani"] = (-g["bndiff"]).sum(0, keepdims=True)
    g["hprebn"] = g["bndiff"] + np.broadcast_to(g["bnmeani"] * (1 / n), v["hprebn"].shape)
    g["embcat"] = g["hprebn"] @ v["W1"].T
    g["W1"] = v["embcat"].T @ g["hprebn"]
    g["b1"] = g["hprebn"].sum(0)
    return loss, t, g


ORDER = [
    "logprobs",
    "probs",
    "counts_sum_inv",
    "counts_sum",
    "counts",
    "norm_logits",
    "logit_maxes",
    "logits",
    "h",
    "W2",
    "b2",
    "hpreact",
    "bngain",
    "bnbias",
    "bnraw",
    "bnvar_inv",
    "bnvar",
    "bndiff2",
    "bndiff",
    "bnmeani",
    "hprebn",
    "embcat",
    "W1",
    "b1",
]


def test_backprop_ninja_correct_gradients_are_exact() -> None:
    loss, tensors, manual = ninja()
    out = io.StringIO()
    report = compare_grads(loss, {k: manual[k] for k in ORDER}, file=out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "logprobs        | exact: True  | approximate: True  | maxdiff: 0.0"
    assert [line.split()[0] for line in lines[:-1]] == ORDER
    assert report.all_exact and report.first_wrong is None, out.getvalue()
    assert lines[-1] == "all exact"
    # keyed by the Tensors themselves, as the lecture's cmp(name, dt, t)
    assert compare_grads(loss, {tensors["W1"]: manual["W1"]}, quiet=True).all_exact
    tensors["h"].retain_grad()  # PyTorch's call: every tensor keeps its grad here anyway
    loss.backward()
    assert np.array_equal(tensors["h"].grad, manual["h"]) and tensors["h"].retains_grad


def test_backprop_ninja_names_the_first_wrong_gradient() -> None:
    loss, _, manual = ninja()
    wrong = dict(manual)
    # the classic slip: the variance's 1/(n-1) taken as 1/n
    wrong["bndiff2"] = manual["bndiff2"] * (31 / 32)
    out = io.StringIO()
    report = compare_grads(loss, {k: wrong[k] for k in ORDER}, file=out)
    first = report.first_wrong
    assert first is not None and first.name == "bndiff2"
    ours = manual["bndiff2"]
    assert first.maxdiff == pytest.approx(float(np.abs(ours / 32).max()), rel=1e-12)
    assert "bndiff2         | exact: False | approximate: False | maxdiff: " in out.getvalue()
    assert out.getvalue().splitlines()[-1] == f"first wrong: bndiff2 (maxdiff {first.maxdiff})"


def test_compare_grads_refusals() -> None:
    L = lecture_L()
    with pytest.raises(KeyError, match="no node of the graph labelled 'z'"):
        compare_grads(L, {"z": 1.0})
    with pytest.raises(KeyError, match="is not in the graph of the root"):
        compare_grads(L, {Value(1.0): 1.0})
    with pytest.raises(TypeError, match="manual gradients go in a dict"):
        compare_grads(L, [1.0])  # type: ignore[arg-type]
    loss, _, manual = ninja()
    with pytest.raises(ValueError, match=r"the gradient given for W1 has shape \(30,\), the node"):
        compare_grads(loss, {"W1": manual["b1"][:30]})


def _unused(x: Any) -> Any:
    return x


# -- the lecture's notebook: run headless without Graphviz, exported, in Chromium ----

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "examples" / "micrograd-lecture.ipynb"


def _no_dot_path() -> str:
    """PATH without the directories that hold Graphviz's ``dot``."""
    import os

    dirs = os.environ.get("PATH", "").split(os.pathsep)
    return os.pathsep.join(d for d in dirs if d and not (Path(d) / "dot").exists())


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The notebook executed by a Jupyter kernel (nbclient) with no ``dot``
    on the PATH, then exported to HTML by nbconvert."""
    import os
    import shutil

    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    nbconvert = pytest.importorskip("nbconvert")
    work = tmp_path_factory.mktemp("notebook")
    saved = {k: os.environ.get(k) for k in ("PATH", "PYTHONPATH")}
    os.environ["PATH"] = _no_dot_path()
    os.environ["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT / "src"), saved["PYTHONPATH"]])
    )
    try:
        assert shutil.which("dot") is None
        nb = nbformat.read(NOTEBOOK, as_version=4)
        client = nbclient.NotebookClient(
            nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(work)}}
        )
        client.execute()
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.output_type == "error"]
    assert not errors, errors
    body, _ = nbconvert.HTMLExporter(template_name="lab").from_notebook_node(nb)
    page = work / "lecture.html"
    page.write_text(body, encoding="utf-8")
    return page


GRAPHS = """
return [...document.querySelectorAll('.jp-OutputArea-output')].flatMap((out) => {
  if (out.querySelector('.cr-walk')) return [];
  const svg = out.querySelector('svg.cr-graph');
  if (svg) return [{records: svg.querySelectorAll('g.node').length,
    ops: svg.querySelectorAll('g.op').length, width: svg.getBoundingClientRect().width}];
  const img = out.querySelector('img[src^="data:image/svg+xml"]');
  if (!img) return [];
  const text = atob(img.src.split(',')[1]);
  return [{records: text.split('<g class="node"').length - 1,
    ops: text.split('<g class="op"').length - 1, width: img.naturalWidth}];
});
"""

STATE = """
const w = arguments[0], P = w.id.slice(0, -4), $ = (id) => document.getElementById(P + id);
const grads = [...w.querySelectorAll('td.grad')].map((c) => [+c.dataset.node, +c.dataset.grad]);
const box = (el) => { if (!el) return null; const r = el.getBoundingClientRect();
  return [r.left, r.top, r.right, r.bottom]; };
return {step: +$('counter').dataset.step, steps: +$('counter').dataset.steps,
  text: $('step-text').textContent, grads: grads, svg: [...w.querySelectorAll('tspan.grad')]
  .map((t) => t.textContent), controls: box(w.querySelector('.cr-controls')),
  active: box(w.querySelector('g.node.active')), drawing: box($('drawing')),
  view: [window.innerWidth, window.innerHeight], scroll: window.scrollY};
"""


def _expected(root: Value) -> list[tuple[str, dict[int, float]]]:
    """Every step's text and grads, from ``explain``'s record of the pass."""
    from chainrule.explainer.table import backward_walk
    from chainrule.explainer.walkthrough import page_data

    walk = backward_walk(root)
    texts = page_data(walk)["texts"]
    grads = dict.fromkeys(range(len(walk.nodes)), 0.0)
    out = [(texts[0], dict(grads))]
    grads[walk.root] = walk.seed
    out.append((texts[1], dict(grads)))
    for j, u in enumerate(walk.updates):
        grads[u.child] = u.after
        out.append((texts[j + 2], dict(grads)))
    assert out[-1][1] == dict(enumerate(walk.grads))  # explain's grad column
    return out


def _visible(inner: list[float], outer: list[float]) -> bool:
    return (
        inner[0] >= outer[0] - 1
        and inner[1] >= outer[1] - 1
        and inner[2] <= outer[2] + 1
        and inner[3] <= outer[3] + 1
    )


def _neuron() -> Value:
    x1, x2 = Value(2.0, label="x1"), Value(0.0, label="x2")
    w1, w2 = Value(-3.0, label="w1"), Value(1.0, label="w2")
    b = Value(6.8813735870195432, label="b")
    x1w1 = x1 * w1
    x1w1.label = "x1*w1"
    x2w2 = x2 * w2
    x2w2.label = "x2*w2"
    s = x1w1 + x2w2
    s.label = "x1*w1 + x2*w2"
    n = s + b
    n.label = "n"
    o = n.tanh()
    o.label = "o"
    return o


def test_the_lecture_notebook_in_a_browser(browser: Any, exported: Path) -> None:
    import random

    from selenium.webdriver.common.keys import Keys

    from chainrule.explainer.text import forward_order
    from chainrule.nn import MLP

    random.seed(1337)
    out = MLP(3, [4, 4, 1])([2.0, 3.0, -1.0])
    mlp = forward_order(out)
    browser.set_window_size(1200, 900)
    browser.get(exported.as_uri())
    graphs = browser.execute_script(GRAPHS)
    # L, draw_dot(L), draw_dot(L) after backward, the MLP's output
    assert [(g["records"], g["ops"]) for g in graphs] == [(7, 3)] * 3 + [
        (len(mlp), sum(1 for v in mlp if v._prev))
    ]
    assert all(g["width"] > 200 for g in graphs)
    widgets = browser.find_elements("css selector", ".cr-walk")
    assert len(widgets) == 2
    expected = [_expected(lecture_L()), _expected(_neuron())]

    def state(w: Any) -> dict[str, Any]:
        return browser.execute_script(STATE, w)

    def check(w: Any, k: int, which: int) -> dict[str, Any]:
        s = state(w)
        text, grads = expected[which][k]
        assert s["step"] == k and s["text"] == text
        assert {int(i): g for i, g in s["grads"]} == grads
        return s

    # the first: keys only, while it has the focus; the second does not move
    first, second = widgets
    browser.execute_script("arguments[0].scrollIntoView(); arguments[0].focus();", first)
    steps = state(first)["steps"]
    assert steps == len(expected[0]) - 1
    for k in range(1, steps + 1):
        first.send_keys(Keys.ARROW_RIGHT)
        check(first, k, 0)
        assert state(second)["step"] == 0
    first.send_keys(Keys.HOME)
    check(first, 0, 0)
    first.send_keys(Keys.END)
    check(first, steps, 0)
    # the second: buttons only; the first stays at its end
    nxt = browser.find_element("id", second.get_attribute("id")[:-4] + "next")
    for k in range(1, state(second)["steps"] + 1):
        nxt.click()
        check(second, k, 1)
    assert state(first)["step"] == steps
    assert not nxt.is_enabled()

    # a phone: 420 x 800; every step keeps the controls and the active node in view
    browser.set_window_size(420, 800)
    for w, which in ((first, 0), (second, 1)):
        browser.execute_script("arguments[0].scrollIntoView(); arguments[0].focus();", w)
        w.send_keys(Keys.HOME)
        before = state(w)["scroll"]
        for k in range(1, len(expected[which])):
            w.send_keys(Keys.ARROW_RIGHT)
            s = check(w, k, which)
            view = [0, 0, *s["view"]]
            assert s["scroll"] == before, "a key scrolled the page"
            assert _visible(s["controls"], view), (k, s["controls"], view)
            assert s["active"] is not None
            assert _visible(s["active"], view) and _visible(s["active"], s["drawing"]), (k, s)
    browser.set_window_size(1200, 900)
