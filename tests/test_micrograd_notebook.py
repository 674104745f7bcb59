"""micrograd's graph-drawing notebook (``trace_graph.ipynb``), its neuron
example, run with micrograd and with chainrule imported in its place: with
``Neuron(2, fused=False)`` (micrograd's own neuron, node for node) the
drawing has the same nodes and edges.

The notebook draws with the ``graphviz`` Python package (it only builds the
DOT source here, so Graphviz's ``dot`` program is not needed); its helpers
are re-stated below in the notebook's logic: collect every Value and every
(input, output) pair by walking ``_prev``, then one record per Value, one
op node per computed Value, an edge from each op to its Value and from each
input to the op of the Value it feeds.
"""

from __future__ import annotations

import os
import random
from types import ModuleType
from typing import Any

import pytest

try:
    import graphviz
except ImportError:  # pragma: no cover - the test extra installs it
    if os.environ.get("CI"):
        raise  # in CI the comparison must run, never skip
    pytest.skip(
        "the notebook draws with graphviz: pip install -e '.[test]'", allow_module_level=True
    )


def walk_graph(root: Any) -> tuple[set[Any], set[tuple[Any, Any]]]:
    nodes: set[Any] = set()
    edges: set[tuple[Any, Any]] = set()
    stack = [root]
    while stack:
        v = stack.pop()
        if v in nodes:
            continue
        nodes.add(v)
        for child in v._prev:
            edges.add((child, v))
            stack.append(child)
    return nodes, edges


def notebook_drawing(root: Any) -> Any:
    nodes, edges = walk_graph(root)
    dot = graphviz.Digraph(format="svg", graph_attr={"rankdir": "LR"})
    for n in nodes:
        uid = str(id(n))
        dot.node(name=uid, label=f"{{ data {n.data:.4f} | grad {n.grad:.4f} }}", shape="record")
        if n._op:
            dot.node(name=uid + n._op, label=n._op)
            dot.edge(uid + n._op, uid)
    for n1, n2 in edges:
        dot.edge(str(id(n1)), str(id(n2)) + n2._op)
    return dot


def counts(dot: Any) -> tuple[int, int]:
    """(nodes, edges) of the drawing, from its DOT statements."""
    edges = sum(1 for line in dot.body if "->" in line)
    return len(dot.body) - edges, edges


def neuron_example(
    engine: ModuleType, nn: ModuleType, **options: Any
) -> tuple[Any, list[Any], Any]:
    """The notebook's neuron: ``Neuron(2)`` on ``[1.0, -2.0]``, seed 1337."""
    random.seed(1337)
    n = nn.Neuron(2, **options)
    x = [engine.Value(1.0), engine.Value(-2.0)]
    y = n(x)
    y.backward()
    return y, x, n


def test_unfused_neuron_drawing_matches_micrograd() -> None:
    import micrograd.engine
    import micrograd.nn

    import chainrule.engine
    import chainrule.nn

    theirs, their_x, their_n = neuron_example(micrograd.engine, micrograd.nn)
    ours, our_x, our_n = neuron_example(chainrule.engine, chainrule.nn, fused=False)

    their_counts = counts(notebook_drawing(theirs))
    # micrograd: 5 Values in (w1, w2, b, x1, x2), 2 products, 2 sums, 1 ReLU
    assert their_counts == (10 + 5, 9 + 5)
    assert counts(notebook_drawing(ours)) == their_counts
    # and the same numbers: the value, and every gradient the drawing shows
    assert ours.data == theirs.data
    assert [p.grad for p in our_n.parameters()] == [p.grad for p in their_n.parameters()]
    assert [v.grad for v in our_x] == [v.grad for v in their_x]
    assert sorted(v._op for v in walk_graph(ours)[0]) == sorted(
        v._op for v in walk_graph(theirs)[0]
    )


def test_the_fused_neuron_is_one_node_and_expands_for_display() -> None:
    import micrograd.engine
    import micrograd.nn

    import chainrule.engine
    import chainrule.nn
    from chainrule.explainer.draw import to_dot

    ours, _, _ = neuron_example(chainrule.engine, chainrule.nn)
    # the default: relu(w . x + b) is one ReLU(dot) node over the 5 inputs
    assert counts(notebook_drawing(ours)) == (6 + 1, 5 + 1)
    assert ours._op == "ReLU(dot)"
    # chainrule's own drawing can expand it into micrograd's chain
    theirs, _, _ = neuron_example(micrograd.engine, micrograd.nn)
    dot = to_dot(ours, expand=True)
    drawn = (dot.count("shape=record") + dot.count("shape=ellipse"), dot.count(" -> "))
    assert drawn == counts(notebook_drawing(theirs))
