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

import math
from typing import Any

import numpy as np

from .blas import row_threads, run_parts
from .tensor import Tensor, constant, make

#: Bytes from which ReLU and its backward are split along the first axis
#: across :func:`chainrule.get_num_threads` threads (as attention's softmax,
#: :data:`chainrule.tensor.nn_ops.SPLIT_SCORE_BYTES`): each part the same
#: operations on its rows, so the same bits.
SPLIT_ELEMENTWISE_BYTES = 1 << 22

# ----------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------


def _both_constant(a: Any, b: Any, op: str) -> Tensor:
    raise TypeError(f"{op}: at least one operand must be a Tensor")


def _shape(x: Any) -> tuple[int, ...]:
    return tuple(np.shape(x.data if isinstance(x, Tensor) else x))


def broadcast_error(op: str, *operands: Any) -> ValueError:
    """The error for operands whose shapes do not broadcast together,
    naming the op and every shape (NumPy's own message names neither)."""
    shapes = ", ".join(str(_shape(x)) for x in operands)
    return ValueError(f"{op}: shapes {shapes} do not broadcast together")


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
    try:
        if isinstance(a, Tensor):
            if isinstance(b, Tensor):
                return make(a.data + b.data, (a, b), _add_vjp)
            return make(a.data + constant(b, "+"), (a,), _add_const_vjp)
        if isinstance(b, Tensor):
            return make(constant(a, "+") + b.data, (b,), _add_const_vjp)
        return _both_constant(a, b, "+")
    except ValueError:
        raise broadcast_error("+", a, b) from None


def _sub_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any, Any]:
    a, b = out._prev
    return M.fit(g, a.data), M.fit(-g, b.data)


def _rsub_const_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    return (M.fit(-g, out._prev[0].data),)


def sub(a: Any, b: Any) -> Tensor:
    """``a - b``."""
    try:
        if isinstance(a, Tensor):
            if isinstance(b, Tensor):
                return make(a.data - b.data, (a, b), _sub_vjp)
            return make(a.data - constant(b, "-"), (a,), _add_const_vjp)
        if isinstance(b, Tensor):
            return make(constant(a, "-") - b.data, (b,), _rsub_const_vjp)
        return _both_constant(a, b, "-")
    except ValueError:
        raise broadcast_error("-", a, b) from None


def _mul_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any, Any]:
    a, b = out._prev
    return M.fit(g * M.of(b), a.data), M.fit(g * M.of(a), b.data)


def _mul_const_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    return (M.fit(g * out._ctx, out._prev[0].data),)


def mul(a: Any, b: Any) -> Tensor:
    """``a * b``."""
    try:
        if isinstance(a, Tensor):
            if isinstance(b, Tensor):
                return make(a.data * b.data, (a, b), _mul_vjp)
            c = constant(b, "*")
            return make(a.data * c, (a,), _mul_const_vjp, c)
        if isinstance(b, Tensor):
            c = constant(a, "*")
            return make(c * b.data, (b,), _mul_const_vjp, c)
        return _both_constant(a, b, "*")
    except ValueError:
        raise broadcast_error("*", a, b) from None


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
    try:
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
    except ValueError:
        raise broadcast_error("/", a, b) from None


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
    try:
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
    except ValueError:
        raise broadcast_error("**", a, b) from None


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


def sigmoid_array(x: np.ndarray) -> np.ndarray:
    """``1 / (1 + e^-x)`` of an array (PyTorch's formula)."""
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


def sigmoid(x: Tensor) -> Tensor:
    """``1 / (1 + e^-x)``; derivative ``s (1 - s)``."""
    return make(sigmoid_array(x.data), (x,), _sigmoid_vjp)


def log_sigmoid_array(x: np.ndarray) -> np.ndarray:
    """``log(sigmoid(x)) = min(x, 0) - log1p(e^-|x|)`` of an array: no
    overflow, no log of 0 (PyTorch's formula)."""
    return np.minimum(x, 0.0) - np.log1p(np.exp(-np.abs(x)))


def _log_sigmoid_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    return (g * M.sigmoid(-M.of(out._prev[0])),)


def log_sigmoid(x: Tensor) -> Tensor:
    """``log(sigmoid(x))``, exact for large ``|x|``
    (``torch.nn.functional.logsigmoid``); derivative ``sigmoid(-x)``."""
    return make(log_sigmoid_array(x.data), (x,), _log_sigmoid_vjp)


_SAME_SIZE_INT = {np.dtype(np.float32): np.int32, np.dtype(np.float64): np.int64}


#: Bytes of a row block :func:`threshold_backward` selects at a time in a
#: C-ordered gradient: its mask, its rows of ``g`` and of the output stay
#: in the core's cache between the three passes, so each array crosses
#: memory once (a feed-forward's hidden gradient, 8 MB at ``gpt-sizes``'
#: embedding 256 in float32, took 1.5 ms that way from cold caches, 2.2 ms
#: with a whole-size mask).
SELECT_BLOCK_BYTES = 1 << 18


def threshold_backward(g: np.ndarray, out: np.ndarray, *, overwrite: bool = False) -> np.ndarray:
    """PyTorch's ``threshold_backward``: ``g`` where ``out > 0`` and 0 where
    ``out <= 0``; a nan output passes its gradient, and an inf or nan ``g``
    is dropped, not multiplied (``0 * inf`` would be nan). With
    ``overwrite`` the result may be written over ``g`` (a temporary no one
    else sees).

    A select, done on the bits: ``np.where`` over a random mask is ten times
    slower (a branch per entry), and ``g * mask`` is wrong for inf and nan.
    """
    ints = _SAME_SIZE_INT.get(g.dtype)
    if ints is None or g.dtype != out.dtype or g.shape != out.shape or g.ndim == 0:
        return np.where(out <= 0.0, 0.0, g).astype(g.dtype, copy=False)
    if g.flags.c_contiguous and out.flags.c_contiguous:
        result = g if overwrite and g.flags.writeable else np.empty_like(g)
        _select_in_blocks(g.view(ints), out, result.view(ints))
        return result
    keep = np.empty_like(g, dtype=ints)  # in g's memory order (channels-last images)
    bits = g.view(ints)

    def part(lo: int, hi: int) -> None:
        k = keep[lo:hi]
        np.less_equal(out[lo:hi], 0.0, out=k, casting="unsafe")
        k -= 1  # 0 where dropped, all bits set where kept
        k &= bits[lo:hi]

    _by_rows(keep, part)
    return keep.view(g.dtype)


def _select_in_blocks(bits: np.ndarray, out: np.ndarray, result: np.ndarray) -> None:
    """``result = bits`` where ``out > 0``, else 0, for C-ordered arrays:
    :data:`SELECT_BLOCK_BYTES` of rows at a time through one small mask per
    thread."""
    per_row = max(1, bits[:1].nbytes)
    block = max(1, SELECT_BLOCK_BYTES // per_row)

    def part(lo: int, hi: int) -> None:
        mask = np.empty((min(block, hi - lo), *bits.shape[1:]), dtype=bits.dtype)
        for start in range(lo, hi, block):
            stop = min(start + block, hi)
            k = mask[: stop - start]
            np.less_equal(out[start:stop], 0.0, out=k, casting="unsafe")
            k -= 1  # 0 where dropped, all bits set where kept
            np.bitwise_and(k, bits[start:stop], out=result[start:stop])

    _by_rows(bits, part)


def _by_rows(x: np.ndarray, part: Any) -> None:
    """``part(lo, hi)`` over the first axis of ``x``: split across threads
    when ``x`` is large (:data:`SPLIT_ELEMENTWISE_BYTES`), else at once."""
    threads = row_threads(x, SPLIT_ELEMENTWISE_BYTES)
    if threads > 1:
        run_parts(x.shape[0], threads, part)
    else:
        part(0, x.shape[0])


def _relu_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    return (M.threshold(g, out.data),)


def relu(x: Tensor) -> Tensor:
    """``max(x, 0)``; the gradient passes where the output is positive."""
    xd = x.data
    if xd.ndim == 0 or xd.dtype.kind != "f":
        return make(np.maximum(xd, 0.0), (x,), _relu_vjp)  # keeps nan, as PyTorch
    y = np.empty_like(xd)

    def part(lo: int, hi: int) -> None:
        np.maximum(xd[lo:hi], 0.0, out=y[lo:hi])

    _by_rows(y, part)
    return make(y, (x,), _relu_vjp)


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
# where, clamp, gelu, erf (where is also what the VJPs above become under
# create_graph), and casts
# ----------------------------------------------------------------------------


def _condition(condition: Any) -> np.ndarray:
    c = np.asarray(condition.data if isinstance(condition, Tensor) else condition)
    if c.dtype != np.bool_:
        raise TypeError(f"where: condition must be boolean, got {c.dtype}")
    return c


def _where_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any, ...]:
    c, a_is_tensor = out._ctx
    grads: list[Any] = []
    prev = iter(out._prev)
    if a_is_tensor:
        grads.append(M.fit(M.where(c, g, 0.0), next(prev).data))
    if len(out._prev) > len(grads):
        grads.append(M.fit(M.where(c, 0.0, g), next(prev).data))
    return tuple(grads)


def where(condition: Any, a: Any, b: Any) -> Tensor:
    """``a`` where ``condition`` is True, ``b`` elsewhere, all three
    broadcast together (``torch.where``); each operand gets the gradient of
    the places it was picked for."""
    c = _condition(condition)
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        raise TypeError("where: at least one of a and b must be a Tensor")
    ad = a.data if isinstance(a, Tensor) else constant(a, "where")
    bd = b.data if isinstance(b, Tensor) else constant(b, "where")
    try:
        y = np.where(c, ad, bd)
    except ValueError:
        raise broadcast_error("where", c, a, b) from None
    prev = tuple(t for t in (a, b) if isinstance(t, Tensor))
    return make(y, prev, _where_vjp, (c, isinstance(a, Tensor)))


def _clamp_bound(value: Any, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise TypeError(f"clamp: {name} must be a real number or None, got {value!r}")
    return float(value)


def _clamp_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    lo, hi = out._ctx
    x = out._prev[0].data
    # PyTorch's clamp_backward: the gradient passes where lo <= x <= hi
    # (both ends included); nan is outside
    inside = np.ones(x.shape, dtype=bool) if lo is None else x >= lo
    if hi is not None:
        inside &= x <= hi
    return (M.where(inside, g, 0.0),)


def clamp(x: Tensor, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002
    """``x`` limited to ``[min, max]`` (either may be None), as
    ``torch.clamp``: nan stays nan, and ``min > max`` gives ``max``
    everywhere. The gradient passes where ``min <= x <= max``."""
    lo, hi = _clamp_bound(min, "min"), _clamp_bound(max, "max")
    if lo is None and hi is None:
        raise ValueError("clamp: give min, max or both")
    y = x.data
    if lo is not None:
        y = np.where(y < lo, lo, y)  # where, not np.maximum: keeps nan as nan either way
    if hi is not None:
        y = np.where(y > hi, hi, y)
    return make(np.asarray(y, dtype=x.data.dtype), (x,), _clamp_vjp, (lo, hi))


#: NumPy's name for clamp.
clip = clamp

_SQRT_HALF = 0.7071067811865476  # 1 / sqrt(2)
_INV_SQRT_2PI = 0.3989422804014327  # 1 / sqrt(2 pi)
_SQRT_2_OVER_PI = 0.7978845608028654  # sqrt(2 / pi)
_erf = np.frompyfunc(math.erf, 1, 1)


def erf(x: np.ndarray) -> np.ndarray:
    """The error function of every entry (``math.erf``'s, exact to the last
    bit; NumPy has none), in ``x``'s dtype."""
    return np.asarray(_erf(x.astype(np.float64)), dtype=np.float64).astype(x.dtype, copy=False)


def _gelu_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    x = M.of(out._prev[0])
    if out._ctx == "tanh":
        # PyTorch's GeluBackward with approximate='tanh'
        inner = _SQRT_2_OVER_PI * (x + 0.044715 * (x * x * x))
        t = M.tanh(inner)
        d_inner = _SQRT_2_OVER_PI * (1.0 + 3.0 * 0.044715 * x * x)
        local = 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * d_inner
    else:
        cdf = 0.5 * (1.0 + M.erf(x * _SQRT_HALF))
        local = cdf + x * (_INV_SQRT_2PI * M.exp(-0.5 * x * x))
    return (g * local,)


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    """The Gaussian error linear unit ``x * Phi(x)`` (``Phi`` the standard
    normal CDF), as ``torch.nn.functional.gelu``; ``approximate="tanh"``
    is GPT-2's ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``."""
    xd = x.data
    if approximate == "tanh":
        y = 0.5 * xd * (1.0 + np.tanh(_SQRT_2_OVER_PI * (xd + 0.044715 * (xd * xd * xd))))
    elif approximate == "none":
        y = xd * (0.5 * (1.0 + erf(xd * _SQRT_HALF)))
    else:
        raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return make(np.asarray(y, dtype=xd.dtype), (x,), _gelu_vjp, approximate)


def _erf_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    x = M.of(out._prev[0])
    return (g * (_TWO_OVER_SQRT_PI * M.exp(-(x * x))),)


_TWO_OVER_SQRT_PI = 1.1283791670955126  # 2 / sqrt(pi)


def erf_op(x: Tensor) -> Tensor:
    """The error function of a Tensor (``torch.erf``); derivative
    ``2 / sqrt(pi) exp(-x^2)``. (gelu's VJP under create_graph.)"""
    return make(erf(x.data), (x,), _erf_vjp)


def _astype_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    return (M.astype(g, out._prev[0].data.dtype),)


def astype(x: Tensor, dtype: Any) -> Tensor:
    """``x`` cast to float32 or float64; the gradient is cast back."""
    d = np.dtype(dtype)
    if d not in (np.dtype(np.float32), np.dtype(np.float64)):
        raise TypeError(f"astype: dtype must be float32 or float64, got {d}")
    return make(x.data.astype(d), (x,), _astype_vjp)
