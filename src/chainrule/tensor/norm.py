"""Batch normalization, as ``torch.nn.functional.batch_norm``.

Each channel (axis 1) is normalized over the batch and every other axis:
``xhat = (x - mean) * r`` with ``r = 1 / sqrt(var + eps)`` (the biased
variance), then ``y = xhat * weight + bias``. In training the statistics
are the batch's own, so every input moves every output of its channel; the
VJP is layer norm's with the axes changed (the textbook closed form, ``m``
the number of entries per channel, ``w`` the weight or 1)::

    dbias = sum(g),  dweight = sum(g * xhat)
    dx = r * w * (g - dbias / m - xhat * dweight / m)

and the running statistics move towards the batch's, ``running = (1 -
momentum) * running + momentum * batch``, with the unbiased variance
(``var * m / (m - 1)``), as PyTorch's. In evaluation the running
statistics stand in for the batch's, and ``y`` is an affine map of ``x``,
built from the elementwise ops.

The arithmetic runs on *wide rows*: the entries, channels last (the
memory order :mod:`chainrule.tensor.conv` leaves them in), as a matrix
whose rows hold ``k`` positions of all ``C`` channels. A per-channel vector
is tiled ``k`` times to match, so NumPy broadcasts it along rows of
thousands of entries rather than of ``C`` (several times faster for a
small ``C``), and the per-channel sums are one matrix-vector product.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .blas import matmul as _mm
from .tensor import Tensor, lift, make

#: Entries per wide row, at most (fewer when the count does not divide).
ROW_WIDTH = 2048


def _rows(x: Any) -> Any:
    """``(N, C, ...)`` as ``(N * ..., C)``: channels last, one row per
    position (a view for channels-last memory; arrays and Tensors alike)."""
    if x.ndim == 2:
        return x
    return x.transpose(0, *range(2, x.ndim), 1).reshape(-1, x.shape[1])


def _unrows(rows: Any, shape: tuple[int, ...]) -> Any:
    """:func:`_rows` undone: ``(N * ..., C)`` back to ``shape`` ``(N, C, ...)``."""
    if len(shape) == 2:
        return rows.reshape(shape)
    n = len(shape)
    return rows.reshape(shape[0], *shape[2:], shape[1]).transpose(0, n - 1, *range(1, n - 1))


def _per_row(m: int, C: int) -> int:
    """``k``: how many positions a wide row holds (the largest divisor of
    ``m`` with ``k * C`` at most :data:`ROW_WIDTH`, at least 1)."""
    k = max(1, min(m, ROW_WIDTH // max(C, 1)))
    while m % k:
        k -= 1
    return k


class _Wide:
    """The wide-row layout of an input ``shape``: ``m`` entries per channel,
    ``k`` positions per row, and the ones that sum the rows."""

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.shape = shape
        self.C = shape[1]
        self.m = int(np.prod(shape)) // self.C
        self.k = _per_row(self.m, self.C)
        self.ones = np.ones(self.m // self.k, dtype=dtype)

    def of(self, x: Any) -> Any:
        """``x`` ``(N, C, ...)`` as wide rows ``(m / k, k * C)``."""
        return _rows(x).reshape(-1, self.k * self.C)

    def back(self, wide: Any) -> Any:
        """Wide rows as ``(N, C, ...)`` again."""
        return _unrows(wide.reshape(-1, self.C), self.shape)

    def sum(self, wide: Any, matmul: Any = _mm) -> Any:
        """The per-channel sums ``(C,)`` of wide rows (``matmul``: ``M.matmul``
        for Tensors): a matrix-vector product, which BLAS runs on one thread
        at this size."""
        return matmul(wide.T, self.ones).reshape(self.k, self.C).sum(axis=0)

    def tile(self, M: Any, v: Any) -> Any:
        """A per-channel vector ``(C,)`` repeated along a wide row."""
        if not M.graph:
            return self.repeat(v)
        return M.broadcast_to(v.reshape(1, self.C), (self.k, self.C)).reshape(-1)

    def repeat(self, v: np.ndarray) -> np.ndarray:
        """:meth:`tile` on an array (``np.tile``'s result, in a quarter of its time)."""
        out = np.empty((self.k, self.C), dtype=v.dtype)
        out[...] = v
        return out.reshape(-1)


def _batch_norm_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any, ...]:
    wide, xhat, r, eps = out._ctx  # xhat as wide rows, r per channel
    x = out._prev[0]
    G = wide.of(g)
    inv_m = 1.0 / wide.m
    if M.graph:  # the statistics as nodes: their own derivatives count
        xw = wide.of(M.of(x))
        xc = xw - wide.tile(M, wide.sum(xw, M.matmul) * inv_m)
        r = 1.0 / M.sqrt(wide.sum(xc * xc, M.matmul) * inv_m + eps)
        xhat = xc * wide.tile(M, r)
    gb = wide.sum(G, M.matmul)
    gw = wide.sum(G * xhat, M.matmul)
    grads: list[Any] = [None]
    scale = r
    if len(out._prev) > 1:
        grads.append(gw)
        if len(out._prev) > 2:
            grads.append(gb)
        scale = r * M.of(out._prev[1])
    if x.requires_grad:
        centred = G - wide.tile(M, gb * inv_m) - xhat * wide.tile(M, gw * inv_m)
        grads[0] = wide.back(wide.tile(M, scale) * centred)
    return tuple(grads)


def _check_running(name: str, value: Any) -> None:
    """A running statistic is a float NumPy array (updated in place in
    training), as PyTorch's is a float tensor: not a list, not ints."""
    if value is None:
        return
    if not isinstance(value, np.ndarray):
        raise TypeError(
            f"batch_norm: {name} must be a NumPy float array (it is updated in place), "
            f"got {type(value).__name__}"
        )
    if not np.issubdtype(value.dtype, np.floating):
        raise TypeError(
            f"batch_norm: {name} must be a float array, got {value.dtype}: "
            f"give it the input's dtype (e.g. np.zeros(C))"
        )


def _check_momentum(momentum: Any) -> float:
    """``momentum`` as a float in [0, 1]; None is refused here, as by
    ``torch.nn.functional.batch_norm`` (a cumulative average needs the
    count of batches that ``BatchNorm2d(momentum=None)`` keeps)."""
    if momentum is None:
        raise TypeError(
            "batch_norm: momentum must be a float in [0, 1], got None "
            "(the cumulative average is BatchNorm2d(momentum=None)'s, which counts the batches)"
        )
    real = (int, float, np.integer, np.floating)
    if isinstance(momentum, bool) or not isinstance(momentum, real):
        raise TypeError(f"batch_norm: momentum must be a float in [0, 1], got {momentum!r}")
    if not 0.0 <= momentum <= 1.0:
        raise ValueError(f"batch_norm: momentum must be a float in [0, 1], got {momentum!r}")
    return float(momentum)


def _check(x: np.ndarray, named: dict[str, Any]) -> None:
    if x.ndim < 2:
        raise ValueError(f"batch_norm: expected input (N, C, ...), got shape {x.shape}")
    C = x.shape[1]
    for name, value in named.items():
        if name.startswith("running_"):
            _check_running(name, value)
        if value is None:
            continue
        if np.shape(value) != (C,):
            raise ValueError(
                f"batch_norm: {name} of shape {np.shape(value)} does not fit input {x.shape} "
                f"({C} channels)"
            )
        if isinstance(value, Tensor) and value.data.dtype != x.dtype:
            raise TypeError(f"batch_norm: {name} is {value.data.dtype} but the input is {x.dtype}")


def batch_norm(
    input: Any,  # noqa: A002  (PyTorch's name)
    running_mean: np.ndarray | None,
    running_var: np.ndarray | None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Normalize each channel of ``input`` ``(N, C, ...)``, then scale by
    ``weight`` and shift by ``bias`` (``(C,)`` each, optional), as
    ``torch.nn.functional.batch_norm``.

    ``training``: with the batch's mean and (biased) variance, one node;
    ``running_mean`` and ``running_var`` (arrays, or None) are updated in
    place (float NumPy arrays), ``running = (1 - momentum) * running +
    momentum * batch``. Otherwise with the running statistics, which must
    be given. ``momentum`` is a float, as PyTorch's functional form takes
    it: ``BatchNorm2d(momentum=None)`` gives the cumulative average.
    """
    x = lift(input, "batch_norm")
    xd = x.data
    momentum = _check_momentum(momentum)
    _check(
        xd,
        {"running_mean": running_mean, "running_var": running_var, "weight": weight, "bias": bias},
    )
    if bias is not None and weight is None:
        raise ValueError("batch_norm: a bias needs a weight")
    if not training:
        if running_mean is None or running_var is None:
            raise ValueError("batch_norm: evaluation needs running_mean and running_var")
        shape = (1, xd.shape[1]) + (1,) * (xd.ndim - 2)
        mu = np.asarray(running_mean, dtype=xd.dtype).reshape(shape)
        r = (1.0 / np.sqrt(np.asarray(running_var, dtype=xd.dtype) + eps)).reshape(shape)
        y = (x - mu) * r
        if weight is not None:
            y = y * weight.reshape(shape)
            if bias is not None:
                y = y + bias.reshape(shape)
        return y
    wide = _Wide(xd.shape, xd.dtype)
    m = wide.m
    if m < 2:
        raise ValueError(
            f"batch_norm: training needs more than one value per channel, got input {xd.shape}"
        )
    xw = wide.of(xd)
    mu = wide.sum(xw) * (1.0 / m)
    xc = xw - wide.repeat(mu)
    var = wide.sum(np.square(xc)) * (1.0 / m)
    r = 1.0 / np.sqrt(var + eps)
    xhat = xc
    xhat *= wide.repeat(r)
    if running_mean is not None:
        running_mean *= 1.0 - momentum
        running_mean += momentum * mu
    if running_var is not None:
        running_var *= 1.0 - momentum
        running_var += momentum * (var * (m / (m - 1)))
    ctx = (wide, xhat, r, eps)
    if weight is None:
        return make(wide.back(xhat), (x,), _batch_norm_vjp, ctx)
    y = xhat * wide.repeat(weight.data)
    if bias is not None:
        y += wide.repeat(bias.data)
    params = (weight,) if bias is None else (weight, bias)
    return make(wide.back(y), (x, *params), _batch_norm_vjp, ctx)


__all__ = ["batch_norm"]
