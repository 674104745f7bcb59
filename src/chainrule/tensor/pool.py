"""Pooling: ``max_pool2d``, ``avg_pool2d`` and ``adaptive_avg_pool2d``
(NCHW, as PyTorch's).

Max pooling picks, in every window of a strided view of the input, the
first largest entry (PyTorch's choice among ties; a nan wins, as in
PyTorch). The output is that gather, and its VJP the matching scatter:
each output's gradient goes to the one input it was picked from, added up
where overlapping windows picked the same one. Scatter and gather are each
other's VJPs (``M.scatter`` and indexing), so the second derivatives come
with them.

Average pooling is a convolution of each channel with a constant kernel of
``1 / (kh * kw)`` (zeros padded in and counted, PyTorch's default
``count_include_pad=True``), and reuses :mod:`chainrule.tensor.conv`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .conv import Geometry, as_pair, convolve, geometry
from .reduce import mean
from .tensor import Tensor, lift, make


def _pool_geometry(
    x: np.ndarray, kernel: Any, stride: Any, padding: Any, dilation: Any, op: str
) -> tuple[Geometry, tuple[int, int]]:
    """The checked geometry of a pooling and its kernel; PyTorch's limits:
    a 4-d input, padding at most half the kernel."""
    if x.ndim != 4:
        raise ValueError(f"{op}: expected input (N, C, H, W), got shape {x.shape}")
    k = as_pair(kernel, "kernel_size", op, 1)
    geo = geometry(k, k if stride is None else stride, padding, dilation, 1, op)
    (ph, _), (pw, _) = geo.padding
    if 2 * ph > k[0] or 2 * pw > k[1]:
        raise ValueError(
            f"{op}: padding {(ph, pw)} must be at most half the kernel {k}, as PyTorch's"
        )
    out = geo.output_size(x.shape[2:], k)
    if min(out) < 1:
        raise ValueError(
            f"{op}: input {x.shape} with padding {(ph, pw)} is smaller than the kernel {k}"
        )
    return geo, k


def _max_pool_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    picked, disjoint = out._ctx
    shape = out._prev[0].data.shape
    # disjoint windows pick every input at most once: plain assignment
    # (scatter's "basic" path) instead of the unbuffered add of repeats
    flat = M.scatter((int(np.prod(shape)),), picked, disjoint, g.reshape(-1))
    return (flat.reshape(shape),)


def max_pool2d(
    input: Any,  # noqa: A002  (PyTorch's name)
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
) -> Tensor:
    """The largest entry of every ``kernel_size`` window of ``input``
    ``(N, C, H, W)``, as ``torch.nn.functional.max_pool2d``: windows every
    ``stride`` (default: the kernel, so they do not overlap), the input
    padded with ``-inf``, ``dilation`` spacing a window's entries. The
    gradient goes to the entry picked (the first, among ties).

    >>> import numpy as np
    >>> from chainrule import Tensor
    >>> from chainrule.tensor import max_pool2d
    >>> max_pool2d(Tensor(np.arange(16.0).reshape(1, 1, 4, 4)), 2).data
    array([[[[ 5.,  7.],
             [13., 15.]]]])
    """
    x = lift(input, "max_pool2d")
    xd = x.data
    geo, (kh, kw) = _pool_geometry(xd, kernel_size, stride, padding, dilation, "max_pool2d")
    N, C, H, W = xd.shape
    OH, OW = geo.output_size((H, W), (kh, kw))
    (t, b), (l, r) = geo.padding
    (sh, sw), (dh, dw) = geo.stride, geo.dilation
    xp = np.pad(xd, ((0, 0), (0, 0), (t, b), (l, r)), constant_values=-np.inf) if t or l else xd
    s = xp.strides
    windows = as_strided(
        xp,
        (N, C, OH, OW, kh, kw),
        (s[0], s[1], s[2] * sh, s[3] * sw, s[2] * dh, s[3] * dw),
        writeable=False,
    ).reshape(N, C, OH, OW, kh * kw)
    k = windows.argmax(axis=-1)
    y = np.take_along_axis(windows, k[..., None], axis=-1)[..., 0]
    # where each pick sits in the unpadded input, as a flat index
    row = np.arange(OH).reshape(-1, 1) * sh - t + (k // kw) * dh
    col = np.arange(OW) * sw - l + (k % kw) * dw
    np.clip(row, 0, H - 1, out=row)  # a window of nothing but -inf padding: no real pick
    np.clip(col, 0, W - 1, out=col)
    base = np.arange(N * C).reshape(N, C, 1, 1) * (H * W)
    picked = (base + row * W + col).reshape(-1)
    disjoint = sh >= dh * (kh - 1) + 1 and sw >= dw * (kw - 1) + 1
    return make(y, (x,), _max_pool_vjp, (picked, disjoint))


def avg_pool2d(
    input: Any,  # noqa: A002
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
) -> Tensor:
    """The mean of every ``kernel_size`` window of ``input`` ``(N, C, H,
    W)``, as ``torch.nn.functional.avg_pool2d`` (zero padding counted in
    the mean, PyTorch's default): a convolution of each channel with a
    constant kernel."""
    x = lift(input, "avg_pool2d")
    geo, (kh, kw) = _pool_geometry(x.data, kernel_size, stride, padding, 1, "avg_pool2d")
    N, C, H, W = x.data.shape
    kernel = Tensor(np.full((1, 1, kh, kw), 1.0 / (kh * kw), x.data.dtype), requires_grad=False)
    y = convolve(x.reshape(N * C, 1, H, W), kernel, None, geo, "avg_pool2d")
    return y.reshape(N, C, *y.data.shape[2:])


def adaptive_avg_pool2d(input: Any, output_size: Any) -> Tensor:  # noqa: A002
    """The mean over ``output_size`` equal tiles of each channel, as
    ``torch.nn.functional.adaptive_avg_pool2d``: ``output_size=1`` is the
    global average pool, ``(N, C, H, W) -> (N, C, 1, 1)``. Tiles of unequal
    size (an output size that does not divide the input's) are not
    supported."""
    x = lift(input, "adaptive_avg_pool2d")
    oh, ow = as_pair(output_size, "output_size", "adaptive_avg_pool2d", 1)
    if x.data.ndim != 4:
        raise ValueError(f"adaptive_avg_pool2d: expected input (N, C, H, W), got {x.data.shape}")
    H, W = x.data.shape[2:]
    if (oh, ow) == (1, 1):
        return mean(x, (2, 3), True)
    if H % oh or W % ow:
        raise ValueError(
            f"adaptive_avg_pool2d: output size {(oh, ow)} does not divide the input's "
            f"{(H, W)}; only equal tiles are supported"
        )
    return avg_pool2d(x, (H // oh, W // ow))


__all__ = ["adaptive_avg_pool2d", "avg_pool2d", "max_pool2d"]
