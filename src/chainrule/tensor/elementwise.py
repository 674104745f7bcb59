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

from .tensor import Tensor, constant, fit, make

# ----------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------


def _both_constant(a: Any, b: Any, op: str) -> Tensor:
    raise TypeError(f"{op}: at least one operand must be a Tensor")


# ----------------------------------------------------------------------------
# + - * / **
# ----------------------------------------------------------------------------


def _add_vjp(g: np.ndarray, out: Tensor) -> tuple[np.ndarray, np.ndarray]:
    a, b = out._prev
    return fit(g, a.data), fit(g, b.data)


def _add_const_vjp(g: np.ndarray, out: Tensor) -> tuple[np.ndarray]:
    return (fit(g, out._prev[0].data),)


def add(a: Any, b: Any) -> Tensor:
    """``a + b``."""
    if isinstance(a, Tensor):
        if isinstance(b, Tensor):
            return make(a.data + b.data, (a, b), _add_vjp)
        return make(a.data + constant(b, "+"), (a,), _add_const_vjp)
    if isinstance(b, Tensor):
        return make(constant(a, "+") + b.data, (b,), _add_const_vjp)
    return _both_constant(a, b, "+")


def _sub_vjp(g: np.ndarray, out: Tensor) -> tuple[np.ndarray, np.ndarray]:
    a, b = out._prev
    return fit(g, a.data), fit(-g, b.data)


def _rsub_const_vjp(g: np.ndarray, out: Tensor) -> tuple[np.ndarray]:
    return (fit(-g, out._prev[0].data),)


def sub(a: Any, b: Any) -> Tensor:
    """``a - b``."""
    if isinstance(a, Tensor):
        if isinstance(b, Tensor):
            return make(a.data - b.data, (a, b), _sub_vjp)
        return make(a.data - constant(b, "-"), (a,), _add_const_vjp)
    if isinstance(b, Tensor):
        return make(constant(a, "-") - b.data, (b,), _rsub_const_vjp)
    return _both_constant(a, b, "-")


def _mul_vjp(g: np.ndarray, out: Tensor) -> tuple[np.ndarray, np.ndarray]:
    a, b = out._prev
    return fit(g * b.data, a.data), fit(g * a.data, b.data)


def _mul_const_vjp(g: np.ndarray, out: Tensor) -> tuple[np.ndarray]:
    return (fit(g * out._ctx, out._prev[0].data),)


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


def _div_vjp(g: np.ndarray, out: Tensor) -> tuple[np.ndarray, np.ndarray]:
    a, b = out._prev
    bd = b.data
    # PyTorch: d/db (a / b) = -(a / b) / b
    return fit(g / bd, a.data), fit(-g * ((a.data / bd) / bd), bd)


def _div_const_vjp(g: np.ndarray, out: Tensor) -> tuple[np.ndarray]:
    return (fit(g / out._ctx, out._prev[0].data),)


def _rdiv_const_vjp(g: np.ndarray, out: Tensor) -> tuple[np.ndarray]:
    xd = out._prev[0].data
    return (fit(-g * ((out._ctx / xd) / xd), xd),)


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


def _pow_vjp(g: np.ndarray, out: Tensor) -> tuple[np.ndarray, np.ndarray]:
    a, b = out._prev
    ad, bd = a.data, b.data
    with np.errstate(all="ignore"):
        # As PyTorch: no gradient through a zero exponent, and none to the
        # exponent where the base is 0 and the exponent non-negative.
        d_base = np.where(bd == 0.0, 0.0, g * (bd * ad ** (bd - 1.0)))
        d_exp = g * np.where((ad == 0.0) & (bd >= 0.0), 0.0, out.data * np.log(ad))
    return fit(d_base, ad), fit(d_exp, bd)


def _pow_const_vjp(g: np.ndarray, out: Tensor) -> tuple[np.ndarray]:
    c = out._ctx
    xd = out._prev[0].data
    if isinstance(c, float):
        if c == 0.0:
            return (np.zeros_like(xd),)
        if c == 2.0:
            return (fit(g * (2.0 * xd), xd),)
        with np.errstate(all="ignore"):
            return (fit(g * (c * xd ** (c - 1.0)), xd),)
    with np.errstate(all="ignore"):
        return (fit(np.where(c == 0.0, 0.0, g * (c * xd ** (c - 1.0))), xd),)


def _rpow_const_vjp(g: np.ndarray, out: Tensor) -> tuple[np.ndarray]:
    c = out._ctx
    xd = out._prev[0].data
    with np.errstate(all="ignore"):
        local = np.where((c == 0.0) & (xd >= 0.0), 0.0, out.data * np.log(c))
    return (fit(g * local, xd),)


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


def _neg_vjp(g: np.ndarray, out: Tensor) -> tuple[np.ndarray]:
    return (-g,)


def neg(x: Tensor) -> Tensor:
    """``-x``."""
    return make(-x.data, (x,), _neg_vjp)


# ----------------------------------------------------------------------------
# Unary functions: forward and local derivative side by side
# ----------------------------------------------------------------------------


def _exp_vjp(g: np.ndarray, out: Tensor) -> tuple[np.ndarray]:
    return (g * out.data,)


def exp(x: Tensor) -> Tensor:
    """``e ** x``; its derivative is its own output."""
    with np.errstate(over="ignore"):
        return make(np.exp(x.data), (x,), _exp_vjp)


def _log_vjp(g: np.ndarray, out: Tensor) -> tuple[np.ndarray]:
    with np.errstate(divide="ignore", invalid="ignore"):
        return (g / out._prev[0].data,)


def log(x: Tensor) -> Tensor:
    """Natural logarithm: ``log 0 = -inf`` and ``log`` of a negative is nan."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return make(np.log(x.data), (x,), _log_vjp)


def _sqrt_vjp(g: np.ndarray, out: Tensor) -> tuple[np.ndarray]:
    with np.errstate(divide="ignore", invalid="ignore"):
        return (g / (2.0 * out.data),)


def sqrt(x: Tensor) -> Tensor:
    """Square root; nan below 0, derivative ``1 / (2 sqrt(x))``."""
    with np.errstate(invalid="ignore"):
        return make(np.sqrt(x.data), (x,), _sqrt_vjp)


def _tanh_vjp(g: np.ndarray, out: Tensor) -> tuple[np.ndarray]:
    y = out.data
    return (g * (1.0 - y * y),)


def tanh(x: Tensor) -> Tensor:
    """Hyperbolic tangent; derivative ``1 - tanh(x)^2``."""
    return make(np.tanh(x.data), (x,), _tanh_vjp)


def _sigmoid_vjp(g: np.ndarray, out: Tensor) -> tuple[np.ndarray]:
    y = out.data
    return (g * (1.0 - y) * y,)


def sigmoid(x: Tensor) -> Tensor:
    """``1 / (1 + e^-x)``; derivative ``s (1 - s)``."""
    with np.errstate(over="ignore"):
        return make(1.0 / (1.0 + np.exp(-x.data)), (x,), _sigmoid_vjp)


def _relu_vjp(g: np.ndarray, out: Tensor) -> tuple[np.ndarray]:
    # PyTorch's threshold_backward: zero where the output is <= 0, so a nan
    # input passes its gradient through.
    return (np.where(out.data <= 0.0, 0.0, g),)


def relu(x: Tensor) -> Tensor:
    """``max(x, 0)``; the gradient passes where the output is positive."""
    return make(np.maximum(x.data, 0.0), (x,), _relu_vjp)  # keeps nan, as PyTorch


def _abs_vjp(g: np.ndarray, out: Tensor) -> tuple[np.ndarray]:
    xd = out._prev[0].data
    # sign(x), with 0 (not nan) at nan, as PyTorch
    sign = (xd > 0.0).astype(xd.dtype)
    sign -= xd < 0.0
    return (g * sign,)


def abs(x: Tensor) -> Tensor:  # noqa: A001 - the field's name for it
    """``|x|``; derivative ``sign(x)`` (0 at 0)."""
    return make(np.abs(x.data), (x,), _abs_vjp)
