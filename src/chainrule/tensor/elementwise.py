"""Elementwise operations with NumPy broadcasting, and their VJPs.

Each op is a forward function next to its gradient rule. A rule gets the
gradient of the output and the output node (whose ``_prev`` are the
inputs); it returns one gradient per input, summed back to the input's
shape by :func:`~chainrule.tensor.tensor.fit`.

A constant operand (a Python or NumPy number, an array) is not a node: it
goes into ``_ctx``. Python numbers stay weak, so ``float32 * 2.0`` is
float32, as in PyTorch.

The formulas follow PyTorch's (``derivatives.yaml``), so values and
gradients agree with it to the last few bits.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .tensor import Tensor, constant, make

# ----------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------


def _both_constant(a: Any, b: Any, op: str) -> Tensor:
    raise TypeError(f"{op}: at least one operand must be a Tensor")


# ----------------------------------------------------------------------------
# + - * / **
# ----------------------------------------------------------------------------


def _add_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any, Any]:
    a, b = out._prev
    return M.fit(g, a.data), M.fit(g, b.data)


def _add_const_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    return (M.fit(g, out._prev[0].data),)


def add(a: Any, b: Any) -> Tensor:
    """``a + b``."""
    if isinstance(a, Tensor):
        if isinstance(b, Tensor):
            return make(a.data + b.data, (a, b), _add_vjp)
        return make(a.data + constant(b, "+"), (a,), _add_const_vjp)
    if isinstance(b, Tensor):
        return make(constant(a, "+") + b.data, (b,), _add_const_vjp)
    return _both_constant(a, b, "+")


def _sub_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any, Any]:
    a, b = out._prev
    return M.fit(g, a.data), M.fit(-g, b.data)


def _rsub_const_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    return (M.fit(-g, out._prev[0].data),)


def sub(a: Any, b: Any) -> Tensor:
    """``a - b``."""
    if isinstance(a, Tensor):
        if isinstance(b, Tensor):
            return make(a.data - b.data, (a, b), _sub_vjp)
        return make(a.data - constant(b, "-"), (a,), _add_const_vjp)
    if isinstance(b, Tensor):
        return make(constant(a, "-") - b.data, (b,), _rsub_const_vjp)
    return _both_constant(a, b, "-")


def _mul_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any, Any]:
    a, b = out._prev
    return M.fit(g * M.of(b), a.data), M.fit(g * M.of(a), b.data)


def _mul_const_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    return (M.fit(g * out._ctx, out._prev[0].data),)


def mul(a: Any, b: Any) -> Tensor:
    """``a * b``."""
    if isinstance(a, Tensor):
        if isinstance(b, Tensor):
            return make(a.data * b.data, (a, b), _mul_vjp)
        c = constant(b, "*")
        return make(a.data * c, (a,), _mul_const_vjp, c)
    if isinstance(b, Tensor):
        c = constant(a, "*")
        return make(c * b.data, (b,), _mul_const_vjp, c)
    return _both_constant(a, b, "*")


def _div_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any, Any]:
    a, b = out._prev
    bv = M.of(b)
    with np.errstate(divide="ignore", invalid="ignore"):
        # PyTorch: d/db (a / b) = -(a / b) / b
        return M.fit(g / bv, a.data), M.fit(-g * ((M.of(a) / bv) / bv), b.data)


def _div_const_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    with np.errstate(divide="ignore", invalid="ignore"):
        return (M.fit(g / out._ctx, out._prev[0].data),)


def _rdiv_const_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    x = out._prev[0]
    xv = M.of(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (M.fit(-g * ((out._ctx / xv) / xv), x.data),)


def div(a: Any, b: Any) -> Tensor:
    """``a / b`` (IEEE: ``1 / 0 = inf``, as PyTorch)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        if isinstance(a, Tensor):
            if isinstance(b, Tensor):
                return make(a.data / b.data, (a, b), _div_vjp)
            c = constant(b, "/")
            return make(a.data / c, (a,), _div_const_vjp, c)
        if isinstance(b, Tensor):
            c = constant(a, "/")
            return make(c / b.data, (b,), _rdiv_const_vjp, c)
    return _both_constant(a, b, "/")


def _pow_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any, Any]:
    a, b = out._prev
    av, bv = M.of(a), M.of(b)
    with np.errstate(all="ignore"):
        # As PyTorch: no gradient through a zero exponent, and none to the
        # exponent where the base is 0 and the exponent non-negative.
        d_base = M.where(b.data == 0.0, 0.0, g * (bv * av ** (bv - 1.0)))
        zero_base = (a.data == 0.0) & (b.data >= 0.0)
        d_exp = g * M.where(zero_base, 0.0, M.of(out) * M.log(M.where(zero_base, 1.0, av)))
    return M.fit(d_base, a.data), M.fit(d_exp, b.data)


def _pow_const_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    c = out._ctx
    x = out._prev[0]
    xv = M.of(x)
    if isinstance(c, float):
        if c == 0.0:  # zeros, even where g is inf or nan (as PyTorch)
            return (M.fit(M.where(True, 0.0, g), x.data),)
        if c == 2.0:
            return (M.fit(g * (2.0 * xv), x.data),)
        with np.errstate(all="ignore"):
            return (M.fit(g * (c * xv ** (c - 1.0)), x.data),)
    with np.errstate(all="ignore"):
        return (M.fit(M.where(c == 0.0, 0.0, g * (c * xv ** (c - 1.0))), x.data),)


def _rpow_const_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    c = out._ctx
    x = out._prev[0]
    with np.errstate(all="ignore"):
        local = M.where((c == 0.0) & (x.data >= 0.0), 0.0, M.of(out) * np.log(c))
    return (M.fit(g * local, x.data),)


def pow(a: Any, b: Any) -> Tensor:  # noqa: A001 - the field's name for it
    """``a ** b``; a negative base with a fractional exponent gives nan."""
    with np.errstate(all="ignore"):
        if isinstance(a, Tensor):
            if isinstance(b, Tensor):
                return make(a.data**b.data, (a, b), _pow_vjp)
            c = constant(b, "**")
            if isinstance(c, float) and c == 2.0:
                return make(a.data * a.data, (a,), _pow_const_vjp, c)
            return make(a.data**c, (a,), _pow_const_vjp, c)
        if isinstance(b, Tensor):
            c = constant(a, "**")
            return make(c**b.data, (b,), _rpow_const_vjp, c)
    return _both_constant(a, b, "**")


def _neg_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    return (-g,)


def neg(x: Tensor) -> Tensor:
    """``-x``."""
    return make(-x.data, (x,), _neg_vjp)


# ----------------------------------------------------------------------------
# Unary functions: forward and local derivative side by side
# ----------------------------------------------------------------------------


def _exp_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    return (g * M.of(out),)


def exp(x: Tensor) -> Tensor:
    """``e ** x``; its derivative is its own output."""
    with np.errstate(over="ignore"):
        return make(np.exp(x.data), (x,), _exp_vjp)


def _log_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    with np.errstate(divide="ignore", invalid="ignore"):
        return (g / M.of(out._prev[0]),)


def log(x: Tensor) -> Tensor:
    """Natural logarithm: ``log 0 = -inf`` and ``log`` of a negative is nan."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return make(np.log(x.data), (x,), _log_vjp)


def _sqrt_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    with np.errstate(divide="ignore", invalid="ignore"):
        return (g / (2.0 * M.of(out)),)


def sqrt(x: Tensor) -> Tensor:
    """Square root; nan below 0, derivative ``1 / (2 sqrt(x))``."""
    with np.errstate(invalid="ignore"):
        return make(np.sqrt(x.data), (x,), _sqrt_vjp)


def _tanh_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    y = M.of(out)
    return (g * (1.0 - y * y),)


def tanh(x: Tensor) -> Tensor:
    """Hyperbolic tangent; derivative ``1 - tanh(x)^2``."""
    return make(np.tanh(x.data), (x,), _tanh_vjp)


def _sigmoid_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    y = M.of(out)
    return (g * (1.0 - y) * y,)


def sigmoid(x: Tensor) -> Tensor:
    """``1 / (1 + e^-x)``; derivative ``s (1 - s)``."""
    with np.errstate(over="ignore"):
        return make(1.0 / (1.0 + np.exp(-x.data)), (x,), _sigmoid_vjp)


def _relu_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    # PyTorch's threshold_backward: zero where the output is <= 0, so a nan
    # input passes its gradient through.
    return (M.where(out.data <= 0.0, 0.0, g),)


def relu(x: Tensor) -> Tensor:
    """``max(x, 0)``; the gradient passes where the output is positive."""
    return make(np.maximum(x.data, 0.0), (x,), _relu_vjp)  # keeps nan, as PyTorch


def _abs_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    xd = out._prev[0].data
    # sign(x), with 0 (not nan) at nan, as PyTorch
    sign = (xd > 0.0).astype(xd.dtype)
    sign -= xd < 0.0
    return (g * sign,)


def abs(x: Tensor) -> Tensor:  # noqa: A001 - the field's name for it
    """``|x|``; derivative ``sign(x)`` (0 at 0)."""
    return make(np.abs(x.data), (x,), _abs_vjp)


# ----------------------------------------------------------------------------
# Selection and casts (also what the VJPs above become under create_graph)
# ----------------------------------------------------------------------------


def _where_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any, ...]:
    cond, sides = out._ctx
    return tuple(
        M.fit(M.where(cond, g, 0.0) if i == 0 else M.where(cond, 0.0, g), x.data)
        for i, x in zip(sides, out._prev)
    )


def where(cond: Any, a: Any, b: Any) -> Tensor:
    """``a`` where ``cond`` is true, else ``b`` (``torch.where``): each
    side's gradient flows where it was picked. ``cond`` is a boolean array
    (or Tensor, read as a mask); ``a`` and ``b`` are Tensors or constants."""
    c = np.asarray(cond.data if isinstance(cond, Tensor) else cond, dtype=bool)
    sides = [(i, x) for i, x in enumerate((a, b)) if isinstance(x, Tensor)]
    if not sides:
        raise TypeError("where: at least one of a, b must be a Tensor")
    av = a.data if isinstance(a, Tensor) else constant(a, "where")
    bv = b.data if isinstance(b, Tensor) else constant(b, "where")
    try:
        y = np.where(c, av, bv)
    except ValueError as e:
        raise ValueError(
            f"where: shapes {c.shape}, {np.shape(av)}, {np.shape(bv)} do not broadcast"
        ) from e
    dtype = np.result_type(*(x.data.dtype for _, x in sides))
    prev = tuple(x for _, x in sides)
    return make(y.astype(dtype, copy=False), prev, _where_vjp, (c, tuple(i for i, _ in sides)))


def _astype_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    return (M.astype(g, out._prev[0].data.dtype),)


def astype(x: Tensor, dtype: Any) -> Tensor:
    """``x`` cast to float32 or float64; the gradient is cast back."""
    d = np.dtype(dtype)
    if d not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError(f"astype: dtype must be float32 or float64, got {d}")
    return make(x.data.astype(d), (x,), _astype_vjp)
