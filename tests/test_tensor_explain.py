"""explain and to_dot on Tensor graphs: shapes, dtypes, op names and
gradient norms, computed on the side exactly as backward() computes them."""

from __future__ import annotations

import doctest
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import chainrule.explainer.draw
import chainrule.explainer.tensor_table
from chainrule import Tensor, explain, to_dot
from chainrule.explainer.tensor_table import grad_summary, tensor_grads
from chainrule.explainer.text import forward_order
from tables import cells

RNG = np.random.default_rng(0)


def _graphs() -> list[tuple[str, Callable[[], Tensor]]]:
    def mlp() -> Tensor:
        x = Tensor(RNG.standard_normal((4, 3)), label="x")
        w = Tensor(RNG.standard_normal((3, 5)), label="w")
        b = Tensor(RNG.standard_normal(5), label="b")  # broadcast over the rows
        h = (x @ w + b).relu()
        return (h * h).mean() + (w * w).sum() * 0.01  # w used twice

    def float32() -> Tensor:
        x = Tensor(RNG.standard_normal((2, 3)), dtype=np.float32, label="x")
        return (x.tanh() * x).sum()

    return [("mlp", mlp), ("float32", float32)]


def test_docstring_examples() -> None:
    assert doctest.testmod(chainrule.explainer.tensor_table).failed == 0


@pytest.mark.parametrize(("name", "build"), _graphs())
def test_grads_are_exactly_backwards(name: str, build: Callable[[], Tensor]) -> None:
    loss = build()
    nodes, grads = tensor_grads(loss)
    assert all(v.grad is None for v in nodes)  # read-only
    table = cells(explain(loss))
    loss.backward()
    for node in nodes:
        assert np.array_equal(grads[node], node.grad)
        assert grads[node].dtype == node.data.dtype
    by_name = {row["node"]: row for row in table}
    for i, node in enumerate(nodes):
        row = by_name[node.label or f"#{i}"]
        assert row["grad"].removesuffix(" (seed)") == grad_summary(node.grad)
        assert row["dtype"] == str(node.data.dtype)
        assert row["op"] == node._op


def test_table_columns_for_a_layer(torch: Any) -> None:
    x = Tensor(np.arange(6.0).reshape(2, 3), label="x")
    w = Tensor(np.full((3, 2), 0.5), label="w")
    loss = (x @ w).tanh().mean()
    rows = cells(explain(loss))
    assert [(r["node"], r["op"], r["shape"], r["inputs"]) for r in rows] == [
        ("#4", "mean", "()", "#3"),
        ("#3", "tanh", "(2, 2)", "#2"),
        ("#2", "matmul", "(2, 2)", "x, w"),
        ("w", "", "(3, 2)", ""),
        ("x", "", "(2, 3)", ""),
    ]
    # the norm of w's gradient, against PyTorch
    tx = torch.tensor(x.data, requires_grad=True)
    tw = torch.tensor(w.data, requires_grad=True)
    (tx @ tw).tanh().mean().backward()
    norm = chainrule.explainer.text.format_number(float(tw.grad.norm()))
    assert rows[3]["grad"] == "norm " + norm
    markdown = explain(loss, format="markdown").splitlines()
    assert markdown[4] == "| `#2` | `matmul` | (2, 2) | float64 | `x, w` | norm 0.0638894 |"


def test_dot_records_show_shape_dtype_and_grad() -> None:
    x = Tensor(np.ones((2, 3)), dtype=np.float32, label="x")
    y = x * 2.0
    loss = y.sum()
    before = to_dot(loss)
    assert 'v0 [shape=record, label="{x|(2, 3) float32|grad none reached}"];' in before
    loss.backward()
    dot = to_dot(loss)
    assert 'v0 [shape=record, label="{x|(2, 3) float32|grad norm 4.89898}"];' in dot
    assert 'label="{#2|() float32|grad 1.0}", penwidth=2];' in dot
    assert f'v1_op [shape=ellipse, label="{y._op}"];' in dot and y._op.startswith("mul")
    assert len(forward_order(loss)) == 3


def test_refusals() -> None:
    x = Tensor(np.ones(3))
    with pytest.raises(ValueError, match=r"explain: the root has shape \(3,\)"):
        explain(x * 2.0)
    with pytest.raises(TypeError, match="to_dot: expected a Value or a Tensor, got list"):
        to_dot([1.0])  # type: ignore[arg-type]
