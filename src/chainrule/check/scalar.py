"""``gradcheck``: the engine's derivatives against central differences,
``(f(x + eps) - f(x - eps)) / 2 eps``, an oracle that shares nothing with
the derivative table: it is how a custom :class:`~chainrule.Primitive` is tested."""

from __future__ import annotations

import numbers
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ..value.autograd import gradients
from ..value.engine import Value
from ..value.mode import enable_grad, no_grad
from .report import GradcheckError, GradcheckReport, Mismatch, _agree


def _output(f: Callable[..., Any], xs: list[Value]) -> Value:
    out = f(*xs)
    if isinstance(out, Value):
        return out
    if isinstance(out, numbers.Real):
        return Value(float(out))
    raise TypeError(
        f"gradcheck: the function must return a scalar (a Value or a number), "
        f"got {type(out).__name__} {out!r}"
    )


def _evaluate(f: Callable[..., Any], point: list[float]) -> float:
    with no_grad():  # values only: no graph to build
        return _output(f, [Value(p) for p in point]).data


def _gradient(f: Callable[..., Any], point: list[float]) -> list[float]:
    xs = [Value(p) for p in point]
    return gradients(_output(f, xs), xs)


def _central(g: Callable[[list[float]], Any], point: list[float], j: int, eps: float) -> Any:
    """Central difference of ``g`` (a number or a list of numbers) along x_j."""
    up, down = list(point), list(point)
    up[j] += eps
    down[j] -= eps
    hi, lo = g(up), g(down)
    if isinstance(hi, list):
        return [(h - l) / (2.0 * eps) for h, l in zip(hi, lo)]
    return (hi - lo) / (2.0 * eps)


def gradcheck(
    f: Callable[..., Any],
    inputs: Sequence[Any],
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    *,
    order: int = 1,
    raise_exception: bool = False,
) -> GradcheckReport:
    """Compare the derivatives of ``f`` at ``inputs`` with central differences.

    ``f`` takes one Value per input and returns a scalar; or, when the
    inputs are Tensors or NumPy arrays, one Tensor per input, returning a
    Tensor of any shape (and the report names the op whose VJP is wrong:
    ``chainrule.check.tensor``). With ``order=1``
    each ``df/dx_i`` from the backward pass is compared with
    ``(f(x + eps e_i) - f(x - eps e_i)) / 2 eps``. With ``order=2`` the
    second derivatives are checked too: the derivatives of the
    ``create_graph=True`` gradient against central differences of the
    gradient. A derivative agrees when ``|analytic - numeric| <= atol +
    rtol * |numeric|``.

    Returns a :class:`GradcheckReport` listing every mismatch (true when
    there is none); with ``raise_exception=True`` a mismatch raises
    :class:`GradcheckError` instead.

    >>> from chainrule import Primitive, gradcheck
    >>> bad_cube = Primitive("cube", lambda x: x**3, lambda M, x, out: (2 * x * x,))
    >>> report = gradcheck(bad_cube, [2.0])
    >>> report.ok, report.mismatches[0].analytic, round(report.mismatches[0].numeric, 6)
    (False, 8.0, 12.0)
    """
    if order not in (1, 2):
        raise ValueError(f"gradcheck: order must be 1 or 2, got {order!r}")
    if not eps > 0.0:
        raise ValueError(f"gradcheck: eps must be positive, got {eps!r}")
    if any(map(_is_tensor_like, inputs)):
        from .tensor import gradcheck_tensors

        report = gradcheck_tensors(f, inputs, eps, atol, rtol, order)
        if raise_exception and report.mismatches:
            raise GradcheckError(report)
        return report
    point = [x.data if isinstance(x, Value) else _number(x) for x in inputs]
    n = len(point)
    mismatches: list[Mismatch] = []

    def compare(k: int, index: tuple[int, ...], analytic: float, numeric: float) -> None:
        if not _agree(analytic, numeric, atol, rtol):
            mismatches.append(Mismatch(k, index, analytic, numeric))

    with enable_grad():  # the analytic side needs a graph even inside no_grad
        first = _gradient(f, point)
        for i in range(n):
            compare(1, (i,), first[i], _central(lambda p: _evaluate(f, p), point, i, eps))
        checked = n
        if order == 2:
            from ..functional import _differentiable  # (a compiled function: its own)

            xs = [Value(p) for p in point]
            graph = gradients(_output(_differentiable(f), xs), xs, create_graph=True)
            rows = [gradients(g, xs) for g in graph]
            columns = [_central(lambda p: _gradient(f, p), point, j, eps) for j in range(n)]
            for i in range(n):
                for j in range(n):
                    compare(2, (i, j), rows[i][j], columns[j][i])
            checked += n * n
    report = GradcheckReport(mismatches, checked, order)
    if raise_exception and mismatches:
        raise GradcheckError(report)
    return report


def _is_tensor_like(x: object) -> bool:
    """A Tensor or a NumPy array (whose modules are loaded if it is one)."""
    tensor = sys.modules.get("chainrule.tensor.tensor")
    np = sys.modules.get("numpy")
    return (tensor is not None and isinstance(x, tensor.Tensor)) or (
        np is not None and isinstance(x, np.ndarray)
    )


def _number(x: object) -> float:
    if isinstance(x, numbers.Real):
        return float(x)
    raise TypeError(f"gradcheck: inputs must be numbers or Values, got {type(x).__name__} {x!r}")
