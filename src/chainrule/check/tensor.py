"""``gradcheck`` for Tensor functions, and which op is to blame.

The whole function first: its output, weighted by a fixed random array so
that every output element counts, is differentiated by the backward pass
and by central differences in float64, element by element of every input
(order 1), and its gradient likewise (order 2: the Hessian of the weighted
output, row by row from a ``create_graph`` gradient).

When something disagrees, each op is then checked on its own, with the
*dot-product test* (as in adjoint testing): the program runs at ``x`` and at
``x ± eps v`` for a random direction ``v``, which gives every node a
numerical tangent ``dy``; a node's VJP of a random ``u`` must satisfy
``<u, dy> = sum_k <vjp_k(u), dx_k>`` over its inputs ``x_k``. The same test
on the VJP's own ``create_graph`` form checks second order. The first op
in creation order that fails is named in the report.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..tensor.namespaces import ARRAY, GRAPH
from ..tensor.tensor import Tensor, as_array, creation_order, gradients, make
from ..value.mode import enable_grad, no_grad
from .report import GradcheckReport, Mismatch, _agree


def gradcheck_tensors(
    f: Callable[..., Any], inputs: Sequence[Any], eps: float, atol: float, rtol: float, order: int
) -> GradcheckReport:
    """:func:`chainrule.gradcheck` for ``f`` taking Tensors and returning a
    Tensor of any shape, at ``inputs`` (Tensors, arrays or numbers, taken as
    float64).

    >>> import numpy as np
    >>> from chainrule import gradcheck
    >>> from chainrule.tensor import Primitive
    >>> bad = Primitive("cube", lambda x: x**3, lambda M, g, x, out: (g * 2.0 * x * x,))
    >>> report = gradcheck(lambda x: bad(x.tanh()), [np.array([0.5, 1.0])])
    >>> report.ok, report.op
    (False, 'cube')
    """
    points = [np.array(as_array(x, np.float64, "gradcheck"), dtype=np.float64) for x in inputs]
    with enable_grad():
        first = _output(f, [Tensor(p) for p in points])
    # A scalar output as it is; every element of a larger one counts, weighted
    weights = np.ones(()) if first.data.size == 1 else _weights(first.data.shape)
    program = _Weighted(f, weights)
    mismatches: list[Mismatch] = []

    def compare(k: int, index: tuple[int, ...], element: Any, analytic: Any, numeric: Any) -> None:
        if not _agree(float(analytic), float(numeric), atol, rtol):
            mismatches.append(Mismatch(k, index, float(analytic), float(numeric), element))

    with enable_grad():  # the analytic side needs a graph even inside no_grad
        analytic = program.gradient(points)
        for i, k, numeric in _central(program.value, points, eps):
            compare(1, (i,), (k,), analytic[i][k], numeric)
        checked = sum(p.size for p in points)
        if order == 2:
            rows = program.hessian_rows(points)
            for j, l, column in _central(program.gradient, points, eps):
                for i, row_block in enumerate(rows):
                    for k in np.ndindex(points[i].shape):
                        compare(2, (i, j), (k, l), row_block[k][j][l], column[i][k])
            checked += sum(p.size for p in points) ** 2
        op, culprit = (None, "")
        if mismatches:
            op, culprit = _blame(program, points, eps, atol, rtol, order)
    return GradcheckReport(mismatches, checked, order, op, culprit)


def _weights(shape: tuple[int, ...]) -> np.ndarray:
    return np.random.default_rng(0).standard_normal(shape)


def _output(f: Callable[..., Any], xs: list[Tensor]) -> Tensor:
    out = f(*xs)
    if isinstance(out, Tensor):
        return out
    if isinstance(out, (int, float)):
        return Tensor(float(out))
    raise TypeError(f"gradcheck: the function must return a Tensor, got {type(out).__name__}")


class _Weighted:
    """``sum(weights * f(x))``: the scalar every check differentiates."""

    def __init__(self, f: Callable[..., Any], weights: np.ndarray) -> None:
        self.f = f
        self.weights = weights

    def graph(self, xs: list[Tensor]) -> Tensor:
        return (_output(self.f, xs) * self.weights).sum()

    def value(self, points: list[np.ndarray]) -> float:
        with no_grad():
            return float(self.graph([Tensor(p) for p in points]).data)

    def gradient(self, points: list[np.ndarray]) -> list[np.ndarray]:
        xs = [Tensor(p) for p in points]
        return gradients(self.graph(xs), xs)

    def hessian_rows(self, points: list[np.ndarray]) -> list[Any]:
        """Per input ``i`` an object array: at element ``k``, the gradients
        of ``df/dx_i[k]`` with respect to every input."""
        xs = [Tensor(p) for p in points]
        first = gradients(self.graph(xs), xs, create_graph=True)
        blocks = []
        for g in first:
            block = np.empty(g.data.shape, dtype=object)
            for k in np.ndindex(g.data.shape):
                block[k] = gradients(g[k] if k else g, xs)
            blocks.append(block)
        return blocks

    def nodes(self, points: list[np.ndarray]) -> list[Tensor]:
        """The op nodes of one run, in creation order."""
        return creation_order(self.graph([Tensor(p) for p in points]))[0][::-1]


def _central(g: Callable[[list[np.ndarray]], Any], points: list[np.ndarray], eps: float) -> Any:
    """For every element ``k`` of every input ``i``: ``(i, k, (g(x + eps e)
    - g(x - eps e)) / 2 eps)``, ``g`` a number or a list of arrays."""
    for i, p in enumerate(points):
        for k in np.ndindex(p.shape):
            up = [q.copy() for q in points]
            down = [q.copy() for q in points]
            up[i][k] += eps
            down[i][k] -= eps
            hi, lo = g(up), g(down)
            if isinstance(hi, list):
                yield i, k, [(h - lo_) / (2.0 * eps) for h, lo_ in zip(hi, lo)]
            else:
                yield i, k, (hi - lo) / (2.0 * eps)


def _dot(a: Any, b: Any) -> float:
    return float(np.sum(np.asarray(a, dtype=np.float64) * b))


def _blame(
    program: _Weighted, points: list[np.ndarray], eps: float, atol: float, rtol: float, order: int
) -> tuple[str | None, str]:
    """The first op whose VJP fails the dot-product test, and a sentence."""
    rng = np.random.default_rng(1)
    direction = [rng.standard_normal(p.shape) for p in points]
    base = program.nodes(points)
    plus = program.nodes([p + eps * d for p, d in zip(points, direction)])
    minus = program.nodes([p - eps * d for p, d in zip(points, direction)])
    if [n._op for n in plus] != [n._op for n in base] or [n._op for n in minus] != [
        n._op for n in base
    ]:
        return None, "  (the program takes another path near this point: no op singled out)"
    for node, hi, lo in zip(base, plus, minus):
        dx = [(a.data - b.data) / (2.0 * eps) for a, b in zip(hi._prev, lo._prev)]
        dy = (hi.data - lo.data) / (2.0 * eps)
        u = rng.standard_normal(node.data.shape)
        pulled = node._vjp(ARRAY, u, node)
        lhs = _dot(u, dy)
        rhs = sum(_dot(p, d) for p, d in zip(pulled, dx) if p is not None)
        if not _agree(rhs, lhs, atol, rtol):
            return node._op, _sentence(node, 1, rhs, lhs)
        if order == 2:
            analytic, numeric = _second_order(node, hi, lo, u, dx, eps, rng)
            if not _agree(analytic, numeric, atol, rtol):
                return node._op, _sentence(node, 2, analytic, numeric)
    return None, "  (every op passes on its own: no op singled out)"


def _second_order(
    node: Tensor, hi: Tensor, lo: Tensor, u: np.ndarray, dx: list[Any], eps: float, rng: Any
) -> tuple[float, float]:
    """The dot-product test of the VJP's create_graph form: d/dt of
    ``<r, vjp(u)>`` along the tangents, by the graph and by differences."""
    leaves = [Tensor(x.data) for x in node._prev]
    clone = make(node.data, tuple(leaves), node._vjp, node._ctx)  # its inputs as fresh leaves
    pulled = clone._vjp(GRAPH, Tensor(u), clone)
    rs = [rng.standard_normal(x.data.shape) for x in leaves]
    terms = [(p * r).sum() for p, r in zip(pulled, rs) if isinstance(p, Tensor)]
    if not terms:
        return 0.0, 0.0
    q = terms[0]
    for t in terms[1:]:
        q = q + t
    analytic = sum(_dot(a, d) for a, d in zip(gradients(q, leaves), dx))

    def projected(n: Tensor) -> float:
        return sum(_dot(p, r) for p, r in zip(n._vjp(ARRAY, u, n), rs) if p is not None)

    return analytic, (projected(hi) - projected(lo)) / (2.0 * eps)


def _sentence(node: Tensor, order: int, analytic: float, numeric: float) -> str:
    shapes = tuple(tuple(x.data.shape) for x in node._prev)
    what = "VJP" if order == 1 else "VJP's own derivative (create_graph)"
    return (
        f"  the {what} of {node._op} (inputs of shapes {shapes}, output "
        f"{tuple(node.data.shape)}) fails the dot-product test: {analytic!r} "
        f"against {numeric!r} by finite differences"
    )


__all__ = ["gradcheck_tensors"]
