"""Matrix products: ``@`` (batched, broadcasting) and the fused ``linear``.

For ``C = A @ B`` the VJPs are ``dA = dC @ B^T`` and ``dB = A^T @ dC``,
summed over any batch axes the operand was broadcast along. ``linear`` is
``x @ W^T + b`` as one node: three ops' worth of Python overhead saved on
the layer every network is made of.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .blas import matmul as _mm
from .tensor import Tensor, constant, make


def _matmul_grads(M: Any, g: Any, a: Any, b: Any, need_a: bool, need_b: bool) -> tuple[Any, Any]:
    # Vectors act as a 1-row (left) or 1-column (right) matrix; the gradient
    # lacks that axis, so it is put back first and taken out at the end.
    a_shape, b_shape = a.shape, b.shape
    a2 = a.reshape(1, -1) if a.ndim == 1 else a
    b2 = b.reshape(-1, 1) if b.ndim == 1 else b
    if a.ndim == 1 and b.ndim == 1:
        g = g.reshape(1, 1)
    elif a.ndim == 1:
        g = g.reshape(*g.shape[:-1], 1, g.shape[-1])
    elif b.ndim == 1:
        g = g.reshape(*g.shape, 1)
    ga = gb = None
    if need_a:
        if a2.ndim > 2 and b2.ndim == 2:
            m = g.shape[-1]
            ga = M.matmul(g.reshape(-1, m), b2.T).reshape(*g.shape[:-1], b2.shape[0])
        else:
            ga = M.matmul(g, b2.swapaxes(-1, -2))
        ga = M.fit(ga, a2).reshape(a_shape)
    if need_b:
        if b2.ndim == 2 and a2.ndim > 2:
            # the batch summed inside one product: (k, N) @ (N, m)
            k, m = b2.shape
            gb = M.matmul(a2.reshape(-1, k).T, g.reshape(-1, m))
        else:
            gb = M.matmul(a2.swapaxes(-1, -2), g)
        gb = M.fit(gb, b2).reshape(b_shape)
    return ga, gb


def _matmul_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any, ...]:
    a, b = out._prev
    return _matmul_grads(M, g, M.of(a), M.of(b), True, True)


def _matmul_left_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    # the Tensor is on the left, a constant on the right
    return (_matmul_grads(M, g, M.of(out._prev[0]), out._ctx, True, False)[0],)


def _matmul_right_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    return (_matmul_grads(M, g, out._ctx, M.of(out._prev[0]), False, True)[1],)


def _check(a: np.ndarray, b: np.ndarray) -> None:
    """NumPy's rules for ``a @ b``, checked here so the error names the
    shapes (NumPy's gufunc message names neither the op nor the sizes)."""
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(
            f"matmul: operands must have at least 1 dimension, got {a.shape} @ {b.shape}"
        )
    inner_a = a.shape[-1]
    inner_b = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if inner_a != inner_b:
        raise ValueError(
            f"matmul: shapes {a.shape} @ {b.shape} do not fit: "
            f"{inner_a} columns against {inner_b} rows"
        )
    if a.ndim > 2 or b.ndim > 2:
        try:
            np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        except ValueError:
            raise ValueError(
                f"matmul: batch shapes of {a.shape} @ {b.shape} do not broadcast together"
            ) from None


def matmul(a: Any, b: Any) -> Tensor:
    """``a @ b`` with NumPy's rules: vectors, matrices, and stacks of
    matrices whose batch axes broadcast."""
    if isinstance(a, Tensor):
        if isinstance(b, Tensor):
            _check(a.data, b.data)
            return make(_mm(a.data, b.data), (a, b), _matmul_vjp)
        c = np.asarray(constant(b, "@"))
        _check(a.data, c)
        return make(_mm(a.data, c), (a,), _matmul_left_vjp, c)
    if isinstance(b, Tensor):
        c = np.asarray(constant(a, "@"))
        _check(c, b.data)
        return make(_mm(c, b.data), (b,), _matmul_right_vjp, c)
    raise TypeError("@: at least one operand must be a Tensor")


def _linear_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any, ...]:
    prev = out._prev
    constant_input = out._ctx is not None
    x = out._ctx if constant_input else M.of(prev[0])
    w = M.of(prev[0 if constant_input else 1])
    n_out, n_in = w.shape
    # Flattened to one matrix product each, not one per batch row.
    g2 = g.reshape(-1, n_out)
    x2 = x.reshape(-1, n_in)
    if constant_input:
        grads = [M.matmul(g2.T, x2)]
    else:  # two independent products: at once on two threads
        gx, gw = M.matmul_pair(g2, w, g2.T, x2)
        grads = [gx.reshape(x.shape), gw]
    if len(prev) == (2 if constant_input else 3):  # a bias
        grads.append(g2.sum(axis=0))
    return tuple(grads)


def linear(x: Tensor | np.ndarray, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x @ weight.T + bias`` (PyTorch's layout: ``weight`` is
    ``(out_features, in_features)``), one node. ``x`` may be a plain array
    (a network's input), which gets no gradient."""
    constant_input = not isinstance(x, Tensor)
    xd = x.data if isinstance(x, Tensor) else np.asarray(constant(x, "linear"))
    w = weight.data
    if w.ndim != 2 or xd.ndim == 0 or xd.shape[-1] != w.shape[1]:
        raise ValueError(f"linear: input {xd.shape} does not fit weight {w.shape}")
    y = _mm(xd.reshape(-1, w.shape[1]), w.T).reshape(*xd.shape[:-1], w.shape[0])
    params = (weight,) if bias is None else (weight, bias)
    if bias is not None:
        b = bias.data
        if b.shape != (w.shape[0],):
            raise ValueError(f"linear: bias {b.shape} does not fit weight {w.shape}")
        if b.dtype != y.dtype:  # += would cast the bias silently
            raise TypeError(
                f"linear: bias is {b.dtype} but input {xd.shape} {xd.dtype} @ weight "
                f"{w.shape} {w.dtype} is {y.dtype}; give them one dtype"
            )
        y += b
    if constant_input:
        return make(y, params, _linear_vjp, xd)
    return make(y, (x, *params), _linear_vjp)  # type: ignore[arg-type]
