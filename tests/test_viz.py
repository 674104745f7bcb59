"""Graph drawing: the DOT text, its escaping and size limit, and rendering
through Graphviz's ``dot`` (required under CI=true, skipped elsewhere)."""

from __future__ import annotations

import doctest
import html
import os
import random
import re
import shutil
from pathlib import Path

import pytest

import chainrule.explainer.draw
from chainrule import Value, draw, to_dot
from chainrule.explainer.draw import GraphvizNotFound, to_svg
from chainrule.explainer.formula import evaluate
from chainrule.explainer.text import format_number, forward_order


def require_dot() -> None:
    """Skip without Graphviz, except in CI, where drawing must be tested."""
    if shutil.which("dot") is None:
        if os.environ.get("CI"):
            pytest.fail("Graphviz's `dot` is required in CI (apt-get install graphviz)")
        pytest.skip("Graphviz's `dot` is not installed")


@pytest.fixture
def no_dot(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(chainrule.explainer.draw.shutil, "which", lambda name: None)


def svg_texts(svg: str) -> list[str]:
    """The text the SVG shows, entities decoded (dot writes '-' as &#45;)."""
    return [html.unescape(t) for t in re.findall(r"<text[^>]*>(.*?)</text>", svg)]


def seed_002() -> Value:
    f = evaluate("relu(a*b + d)", {"a": 2, "b": -3, "d": 10})
    f.backward()
    return f


SEED_002_DOT = """\
digraph chainrule {
  rankdir=LR;
  node [fontname="Helvetica", fontsize=12];
  v0 [shape=record, label="{a|data 2.0|grad -3.0}"];
  v1 [shape=record, label="{b|data -3.0|grad 2.0}"];
  v2 [shape=record, label="{a*b|data -6.0|grad 1.0}"];
  v2_op [shape=ellipse, label="*"];
  v3 [shape=record, label="{d|data 10.0|grad 1.0}"];
  v4 [shape=record, label="{a*b + d|data 4.0|grad 1.0}"];
  v4_op [shape=ellipse, label="+"];
  v5 [shape=record, label="{relu(a*b + d)|data 4.0|grad 1.0}", penwidth=2];
  v5_op [shape=ellipse, label="ReLU"];
  v0 -> v2_op;
  v1 -> v2_op;
  v2_op -> v2;
  v2 -> v4_op;
  v3 -> v4_op;
  v4_op -> v4;
  v4 -> v5_op;
  v5_op -> v5;
}"""


def test_docstring_examples() -> None:
    assert doctest.testmod(chainrule.explainer.draw).failed == 0
    assert doctest.testmod(chainrule.explainer.text).failed == 0


def test_forward_order_places_leaves_at_first_use() -> None:
    labels = [v.label for v in forward_order(seed_002())]
    assert labels == ["a", "b", "a*b", "d", "a*b + d", "relu(a*b + d)"]


def test_seed_002_dot_text() -> None:
    assert to_dot(seed_002()) == SEED_002_DOT


def test_dot_structure_one_record_per_value_one_oval_per_op() -> None:
    f = evaluate("(a*b + a)**2", {"a": 2, "b": 3})
    f.backward()
    text = to_dot(f)
    records = re.findall(r"^  (v\d+) \[shape=record", text, re.M)
    ops = re.findall(r"^  (v\d+)_op \[shape=ellipse", text, re.M)
    edges = re.findall(r"^  (v\w+) -> (v\w+);", text, re.M)
    assert records == ["v0", "v1", "v2", "v3", "v4"]  # a, b, a*b, a*b + a, (...)**2
    assert ops == ["v2", "v3", "v4"]
    # forward: inputs -> op -> output; `a` feeds two operations
    assert edges == [
        ("v0", "v2_op"),
        ("v1", "v2_op"),
        ("v2_op", "v2"),
        ("v2", "v3_op"),
        ("v0", "v3_op"),
        ("v3_op", "v3"),
        ("v3", "v4_op"),
        ("v4_op", "v4"),
    ]
    assert '"{a|data 2.0|grad 64.0}"' in text and 'label="**2"' in text


def test_same_input_twice_gives_two_edges() -> None:
    x = Value(3.0, label="x")
    text = to_dot(x * x)
    assert text.count("v0 -> v1_op;") == 2


def test_unlabelled_values_are_numbered() -> None:
    x = Value(3.0)
    y = (x * 2.0).exp()
    text = to_dot(y)
    assert '"{#0|data 3.0|grad 0.0}"' in text  # grads as they are: no backward yet
    assert '"{2.0|data 2.0|grad 0.0}"' in text  # the number 2.0: a leaf, shown as itself
    assert '"{#2|data 6.0|grad 0.0}"' in text
    assert 'v3_op [shape=ellipse, label="exp"]' in text


def test_a_leaf_alone() -> None:
    text = to_dot(Value(1.5, label="w"))
    assert '  v0 [shape=record, label="{w|data 1.5|grad 0.0}", penwidth=2];' in text
    assert "->" not in text


def test_labels_are_escaped() -> None:
    x = Value(1.0, label='a|b{c}<d> "e" \\f')
    text = to_dot(x.tanh())
    assert r'label="{a\|b\{c\}\<d\> \"e\" \\f|data 1.0|grad 0.0}"' in text


def test_long_labels_are_shortened() -> None:
    x = Value(1.0, label="x" * 100)
    assert '"{' + "x" * 37 + "...|data" in to_dot(x)


def test_grads_from_create_graph_show_their_number() -> None:
    x = Value(3.0, label="x")
    y = x * x
    y.backward(create_graph=True)
    assert '"{x|data 3.0|grad 6.0}"' in to_dot(y)


def test_over_max_nodes_is_a_summary() -> None:
    x = Value(1.0, label="x")
    y = x
    for _ in range(300):
        y = y * 1.5
    y.label = "y"
    text = to_dot(y, max_nodes=200)
    # each * 1.5 is a node and a leaf for the number, as in micrograd
    assert "601 values and 300 operations: more than max_nodes=200" in text
    assert '  v600 [shape=record, label="{y|data ' in text
    assert "_op" not in text and text.count("shape=record") == 1
    full = to_dot(y, max_nodes=601)
    assert full.count("shape=record") == 601 and full.count("shape=ellipse") == 300


def test_rankdir_and_bad_arguments() -> None:
    assert "rankdir=TB;" in to_dot(Value(1.0), rankdir="TB")
    with pytest.raises(ValueError, match="rankdir"):
        to_dot(Value(1.0), rankdir="sideways")
    with pytest.raises(TypeError, match="expected a Value or a Tensor"):
        to_dot(1.0)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("x", "text"),
    [
        (-3, "-3.0"),
        (64.0, "64.0"),
        (0.25, "0.25"),
        (1 / 3, "0.333333"),
        (2.0 / 3e10, "6.66667e-11"),
        (1e20, "1e+20"),
        (1234567.0, "1234567.0"),
        (123456789.0, "1.23457e+08"),
        (float("inf"), "inf"),
        (-0.0, "-0.0"),
    ],
)
def test_format_number(x: float, text: str) -> None:
    assert format_number(x) == text


def test_format_number_digits() -> None:
    assert format_number(1 / 3, digits=17) == repr(1 / 3)
    assert format_number(2 / 3, digits=3) == "0.667"


# -- rendering ------------------------------------------------------------


def test_draw_refuses_an_unknown_extension(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"end the name with \.svg, \.png, \.pdf"):
        draw(seed_002(), tmp_path / "graph.jpg")
    with pytest.raises(ValueError, match="format must be one of"):
        draw(seed_002(), tmp_path / "graph.svg", format="gif")


def test_draw_without_dot_says_how_to_install_it(tmp_path: Path, no_dot: None) -> None:
    with pytest.raises(GraphvizNotFound, match="apt-get install graphviz"):
        draw(seed_002(), tmp_path / "graph.svg")
    assert not (tmp_path / "graph.svg").exists()


def test_jupyter_draws_the_graph_without_dot(no_dot: None) -> None:
    f = seed_002()  # relu(a*b + d): a, b, a*b, d, a*b + d and the root; three computed
    svg = f._repr_svg_()
    assert svg is not None and svg.count('class="node"') == 6 and svg.count('class="op"') == 3
    assert svg_texts(svg)[:2] == ["a", "data 2.0"] and '-svg-grad-0">-3.0</tspan>' in svg
    html = f._repr_html_()  # what JupyterLab, VS Code and nbconvert show first
    assert html is not None and html.count('class="node"') == 6 and "<script" not in html


def test_a_failing_dot_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    false = shutil.which("false")
    if false is None:
        pytest.skip("no `false` program to stand in for a failing dot")
    monkeypatch.setattr(chainrule.explainer.draw.shutil, "which", lambda name: false)
    with pytest.raises(RuntimeError, match="dot failed: exit 1"):
        to_svg(seed_002())
    assert "relu(a*b + d)" in seed_002()._repr_svg_()  # type: ignore[operator]  # drawn here


def test_draw_writes_the_svg_of_seed_002(tmp_path: Path) -> None:
    require_dot()
    path = draw(seed_002(), tmp_path / "seed002.svg")
    svg = path.read_text(encoding="utf-8")
    assert path == tmp_path / "seed002.svg"
    assert "<svg" in svg and svg.rstrip().endswith("</svg>")
    texts = svg_texts(svg)
    for expected in ("a", "grad -3.0", "b", "grad 2.0", "d", "relu(a*b + d)", "data 4.0", "ReLU"):
        assert expected in texts
    assert texts.count("*") == 1 and texts.count("+") == 1


def test_draw_writes_png(tmp_path: Path) -> None:
    require_dot()
    path = draw(seed_002(), tmp_path / "seed002.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_escaped_labels_render_literally() -> None:
    require_dot()
    x = Value(1.0, label='a|b{c}<d> "e" \\f')
    assert 'a|b{c}<d> "e" \\f' in svg_texts(to_svg(x.tanh()))


@pytest.mark.parametrize(
    ("label", "shown"),
    [
        ("&amp;", "&amp;"),  # Graphviz decodes entities: drawn as "&" before
        ("a & b &lt;", "a & b &lt;"),
        ("&#45;1", "&#45;1"),
        ("x\x00y", "x\\x00y"),  # a NUL ended dot's input: "dot failed"
        ("s\ud800", "s\\ud800"),  # a lone surrogate: not UTF-8, _repr_svg_ raised
        ("bell\x07", "bell\\x07"),
    ],
)
def test_hostile_labels_are_drawn_literally(label: str, shown: str) -> None:
    require_dot()
    x = Value(1.0, label=label)
    y = x.tanh()
    y.label = label
    assert svg_texts(to_svg(y)).count(shown) == 2
    svg = y._repr_svg_()
    assert svg is not None and shown in svg_texts(svg)
    z = Value(2.0, (x,), "&lt;")  # micrograd's form: an op name that reads as an entity
    assert "&lt;" in svg_texts(to_svg(z))


def test_the_unprintable_are_escaped_in_every_name() -> None:
    assert chainrule.explainer.text.display_name(Value(0.0, label="a\x00b\ud800\tc"), 0) == (
        "a\\x00b\\ud800 c"
    )
    printable = chainrule.explainer.text.printable
    assert printable("caf\u00e9 \u03c0") == "caf\u00e9 \u03c0"  # letters stay


def test_jupyter_shows_the_graph() -> None:
    require_dot()
    svg = seed_002()._repr_svg_()
    assert svg is not None and "<svg" in svg and "relu(a*b + d)" in svg


def test_committed_drawing_is_the_relu_graph() -> None:
    # docs/relu-graph.svg is made by the README's `chainrule explain ... --svg docs/relu-graph.svg`
    svg = (Path(__file__).resolve().parent.parent / "docs" / "relu-graph.svg").read_text()
    texts = svg_texts(svg)
    assert texts[:3] == ["a", "data 2.0", "grad -3.0"]
    assert "f" in texts and "e" in texts and "grad 2.0" in texts


# -- fused nodes drawn as micrograd's chain ---------------------------------


def _records_and_edges(dot: str) -> tuple[list[str], int, int]:
    records = sorted(re.findall(r'label="\{[^|]*\|(data [^|]*\|grad [^}]*)\}"', dot))
    ops = len(re.findall(r"shape=ellipse", dot))
    edges = len(re.findall(r" -> ", dot))
    return records, ops, edges


@pytest.mark.parametrize("activation", ["relu", "linear"])
def test_expand_draws_a_fused_neuron_as_the_elementary_one(activation: str) -> None:
    from chainrule.nn import Neuron

    drawings = []
    for fused in (True, False):
        n = Neuron(3, activation=activation, rng=random.Random(4), fused=fused)
        y = n([Value(1.0), Value(-2.0), Value(0.5)])
        y.backward()
        drawings.append(_records_and_edges(to_dot(y, expand=fused)))
    (fused_records, fused_ops, fused_edges), (plain_records, plain_ops, plain_edges) = drawings
    assert (fused_ops, fused_edges) == (plain_ops, plain_edges)
    assert fused_records == plain_records  # the same data and grad in every box
    n = Neuron(3, activation=activation, rng=random.Random(4))
    y = n([Value(1.0), Value(-2.0), Value(0.5)])
    assert _records_and_edges(to_dot(y)) != drawings[0]  # without expand: one oval


def test_expand_draws_a_sum_as_a_chain_and_leaves_other_nodes() -> None:
    from chainrule import add_n

    xs = [Value(float(k), label=f"x{k}") for k in range(4)]
    s = add_n(xs) * 2.0
    s.backward()
    dot = to_dot(s, expand=True)
    assert dot.count('label="+"') == 3 and 'label="sum"' not in dot
    assert "{#4.2|data 3.0|grad 2.0}" in dot  # (x0 + x1) + x2, its grad d(2 s)/d piece = 2
    assert to_dot(s) == to_dot(s, expand=False) and 'label="sum"' in to_dot(s)
