"""The backward pass of a Tensor graph as a table: one row per tensor, with
its op, shape, dtype, inputs and gradient (the number itself for a single
element, the gradient's norm for an array).

As for Values, the pass is run on the side from the tensors' own
vector-Jacobian products, in the order ``backward()`` uses, and no
``.grad`` is changed. Needs NumPy (the Tensor engine does).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .text import display_name, format_number, forward_order, table

HEADER = ("node", "op", "shape", "dtype", "inputs", "grad")


def tensor_grads(root: Any) -> tuple[list[Any], dict[Any, np.ndarray]]:
    """The tensors ``root`` depends on in forward order, and the gradient
    of ``root`` (seed: ones) for each one the pass reaches."""
    if root.data.size != 1:
        raise ValueError(
            f"explain: the root has shape {root.data.shape}; explain a scalar, "
            "such as a loss (or its .sum())"
        )
    from ..tensor.tensor import propagate

    nodes = forward_order(root)
    # Reversed, the forward order processes interior tensors newest first,
    # as backward() does; backward()'s own walk, so the sums are the same.
    interior = [node for node in reversed(nodes) if node._prev]
    return nodes, propagate(interior, root, np.ones_like(root.data), create_graph=False)


def grad_summary(g: np.ndarray | None, digits: int = 6) -> str:
    """A gradient in one cell: the number for one element, else its norm.

    >>> grad_summary(np.array([3.0, -4.0]))
    'norm 5.0'
    >>> grad_summary(np.array(2.5)), grad_summary(None)
    ('2.5', 'none reached')
    """
    if g is None:
        return "none reached"
    if g.size == 1:
        return format_number(g.reshape(()).item(), digits)
    return "norm " + format_number(float(np.linalg.norm(g.astype(np.float64))), digits)


def shape_text(shape: tuple[int, ...]) -> str:
    """``(3, 4)``; ``()`` for a scalar."""
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def explain_tensor(root: Any, format: str = "text", *, digits: int = 6) -> str:  # noqa: A002
    """The table of :func:`chainrule.explain` for a Tensor graph.

    >>> from chainrule import Tensor
    >>> x = Tensor([[1.0, 2.0], [3.0, 4.0]], label="x")
    >>> loss = (x * x).sum()
    >>> print(explain_tensor(loss))
    node  op   shape   dtype    inputs  grad
    ----  ---  ------  -------  ------  ------------
    #2    sum  ()      float64  #1      1.0 (seed)
    #1    mul  (2, 2)  float64  x, x    norm 2.0
    x          (2, 2)  float64          norm 10.9545
    """
    nodes, grads = tensor_grads(root)
    names = {node: display_name(node, i) for i, node in enumerate(nodes)}
    rows: list[tuple[str, ...]] = []
    for node in reversed(nodes):
        grad = grad_summary(grads.get(node), digits)
        if node is root:
            grad += " (seed)"
        rows.append(
            (
                names[node],
                node._op,
                shape_text(node.data.shape),
                str(node.data.dtype),
                ", ".join(names[c] for c in node._prev),
                grad,
            )
        )
    return table(HEADER, rows, format, code_columns=(0, 1, 4))
