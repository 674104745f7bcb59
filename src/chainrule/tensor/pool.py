"""Pooling: ``max_pool2d``, ``avg_pool2d`` and ``adaptive_avg_pool2d``
(NCHW, as PyTorch's).

Max pooling picks, in every window of a strided view of the input, the
first largest entry (PyTorch's choice among ties; the last nan wins, as in
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

import functools
from typing import Any

import numpy as np

from .conv import (
    Geometry,
    Pair,
    as_pair,
    channels_last,
    convolve,
    geometry,
    pad_channels_last,
    windows,
)
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
    N, C, H, W = out._prev[0].data.shape
    # the places are channels-last: so is the gradient, as the input was.
    # Disjoint windows pick every input at most once: plain assignment
    # (scatter's "basic" path) instead of the unbuffered add of repeats.
    flat = M.scatter((N * H * W * C,), picked, disjoint, channels_last(g).reshape(-1))
    return (flat.reshape(N, H, W, C).transpose(0, 3, 1, 2),)


@functools.lru_cache(maxsize=32)
def _origins(shape: tuple[int, ...], out: Pair, geo: Geometry) -> np.ndarray:
    """For every output of a pooling, the flat channels-last index (into
    the unpadded input) of its window's first entry: read-only, cached."""
    N, C, H, W = shape
    (t, _), (l, _) = geo.padding
    (sh, sw) = geo.stride
    rows = np.arange(out[0]).reshape(-1, 1, 1) * sh - t
    cols = np.arange(out[1]).reshape(-1, 1) * sw - l
    origin = ((np.arange(N).reshape(-1, 1, 1, 1) * H + rows) * W + cols) * C + np.arange(C)
    origin.setflags(write=False)
    return origin


def _first_inside(
    picked: np.ndarray,
    origins: np.ndarray,
    k: np.ndarray,
    kernel: Pair,
    out: Pair,
    geo: Geometry,
    shape: tuple[int, ...],
) -> np.ndarray:
    """``picked``, where a window of nothing but -inf picked its padding,
    moved to the window's first entry inside the input: PyTorch's pick
    (its scan starts there, and -inf is never larger than -inf)."""
    N, C, H, W = shape
    (t, _), (l, _) = geo.padding
    (sh, sw), (dh, dw), kw = geo.stride, geo.dilation, kernel[1]
    top = (np.arange(out[0]) * sh - t).reshape(-1, 1, 1)
    left = (np.arange(out[1]) * sw - l).reshape(-1, 1)
    row, col = top + k // kw * dh, left + k % kw * dw
    outside = (row < 0) | (row >= H) | (col < 0) | (col >= W)
    if not outside.any():
        return picked
    # the first row and column of each window inside the input: whole
    # dilation steps past the padding
    first_row = np.where(top < 0, top + -(top // dh) * dh, top)
    first_col = np.where(left < 0, left + -(left // dw) * dw, left)
    first = origins + ((first_row - top) * W + (first_col - left)) * C
    # A dilated window can have no entry inside at all (PyTorch indexes past
    # the input there): its gradient goes to the nearest entry.
    np.clip(first, 0, N * H * W * C - 1, out=first)
    return np.where(outside, first, picked)


def _scan(view: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The largest entry of every window of ``view`` ``(N, OH, OW, kh, kw,
    C)`` and its kernel offset ``k`` (``i * kw + j``), by PyTorch's scan:
    an entry replaces the maximum so far if it is larger, or nan; one
    comparison per kernel offset, over all windows at once.

    The entries of each offset are first copied out of the strided view
    next to each other (one pass): on the view every operation would step
    through runs of ``C`` channels, several times slower. The offset picked
    last is the largest ``q`` with ``better``, so ``k`` is a running
    maximum of ``q * better``: no masked writes."""
    N, OH, OW, kh, kw, C = view.shape
    entries = np.empty((kh, kw, N, OH, OW, C), dtype=view.dtype)
    np.copyto(entries, view.transpose(3, 4, 0, 1, 2, 5))
    entries = entries.reshape(kh * kw, N, OH, OW, C)
    y, k = _scan_entries(entries, nan=False)
    with np.errstate(invalid="ignore"):
        if np.isnan(y.sum()):  # np.maximum keeps a nan: a window had one (or inf - inf)
            y, k = _scan_entries(entries, nan=True)
    return y, k


def _scan_entries(entries: np.ndarray, nan: bool) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_scan` of the offsets' entries ``(kh * kw, ...)``, one after
    the other; ``nan``: a nan entry replaces the maximum too."""
    index = np.int8 if len(entries) < 2**7 else np.intp
    y = entries[0].copy()
    k = np.zeros(y.shape, dtype=index)
    better = np.empty(y.shape, dtype=bool)
    picks = np.empty(y.shape, dtype=index)
    with np.errstate(invalid="ignore"):
        for q in range(1, len(entries)):
            entry = entries[q]
            np.greater(entry, y, out=better)
            if nan:
                better |= np.isnan(entry)
                np.copyto(y, entry, where=better)
            else:
                np.maximum(entry, y, out=y)
            np.multiply(better, index(q), out=picks)
            np.maximum(k, picks, out=k)
    return y, k


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
    gradient goes to the entry picked: the first largest, or the last nan,
    as PyTorch's.

    >>> import numpy as np
    >>> from chainrule import Tensor
    >>> from chainrule.tensor import max_pool2d
    >>> max_pool2d(Tensor(np.arange(16.0).reshape(1, 1, 4, 4)), 2).data
    array([[[[ 5.,  7.],
             [13., 15.]]]])
    """
    x = lift(input, "max_pool2d")
    xd = x.data
    geo, kernel = _pool_geometry(xd, kernel_size, stride, padding, dilation, "max_pool2d")
    kh, kw = kernel
    out = geo.output_size(xd.shape[2:], kernel)
    view = windows(pad_channels_last(xd, geo.padding, -np.inf), kernel, out, geo)
    y, k = _scan(view)
    (dh, dw), C, W = geo.dilation, xd.shape[1], xd.shape[3]
    offsets = np.array([(q // kw * dh * W + q % kw * dw) * C for q in range(kh * kw)])
    origins = _origins(xd.shape, out, geo)
    picked = origins + np.take(offsets, k)
    if geo.padding != ((0, 0), (0, 0)):
        picked = _first_inside(picked, origins, k, kernel, out, geo, xd.shape)
    picked = picked.reshape(-1)
    (sh, sw) = geo.stride
    disjoint = sh >= dh * (kh - 1) + 1 and sw >= dw * (kw - 1) + 1
    return make(y.transpose(0, 3, 1, 2), (x,), _max_pool_vjp, (picked, disjoint))


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
