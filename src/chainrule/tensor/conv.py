"""Convolutions: ``conv2d`` and ``conv1d`` (NCHW, as PyTorch's).

A convolution is a matrix product in disguise (im2col, as in Caffe): every
window of the padded input, seen through a strided view of it (no Python
loop over pixels), becomes one row of a matrix ``cols`` of shape ``(N *
OH * OW, C * kh * kw)``, and the output is ``cols @ weight.T``: one matrix
product per call (one per group). For ``y = conv(x, w)``:

* ``dw = g^T @ cols``: the weight gradient, again one product;
* ``dx``: ``g @ w`` gives a gradient for every entry of ``cols``, added
  back where each entry came from (col2im): one strided addition per
  kernel offset, ``kh * kw`` of them. At stride 1 it is cheaper as a
  convolution of ``g`` with the flipped kernel (the transposed convolution).

The arrays are read and written channels-last (:func:`channels_last`).

The three maps ``conv(x, w)``, ``input_grad(g, w)`` and ``weight_grad(x, g)``
are the partial derivatives of one trilinear form ``<g, conv(x, w)>``, so
the vector-Jacobian products of each are the other two: that closes them
under differentiation, and ``create_graph=True`` gives second (and higher)
derivatives through the same three ops (``M.conv2d``, ``M.conv2d_input``,
``M.conv2d_weight`` in :mod:`chainrule.tensor.namespaces`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .blas import matmul as _mm
from .tensor import Tensor, lift, make

Pair = tuple[int, int]
#: ``padding`` as PyTorch takes it: an int, a pair, or ``"same"`` / ``"valid"``.
Padding = Union[int, tuple[int, int], str]


@dataclass(frozen=True)
class Geometry:
    """Everything about a convolution but the arrays: stride, padding
    (``((top, bottom), (left, right))``: ``"same"`` can be uneven),
    dilation and groups."""

    stride: Pair
    padding: tuple[Pair, Pair]
    dilation: Pair
    groups: int

    def output_size(self, size: Pair, kernel: Pair) -> Pair:
        """``(OH, OW)`` of an input ``size`` and a ``kernel``; < 1 if it does not fit."""
        out = []
        for n, k, s, (lo, hi), d in zip(size, kernel, self.stride, self.padding, self.dilation):
            out.append((n + lo + hi - d * (k - 1) - 1) // s + 1)
        return out[0], out[1]


# ----------------------------------------------------------------------------
# arguments
# ----------------------------------------------------------------------------


def as_pair(value: Any, name: str, op: str, least: int) -> Pair:
    """``value`` (an int, or a pair of them) as ``(height, width)``, each
    at least ``least``; a ValueError naming ``op`` and ``name`` if not."""
    items = value if isinstance(value, (tuple, list)) else (value, value)
    if len(items) != 2 or not all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) and v >= least for v in items
    ):
        raise ValueError(f"{op}: {name} must be an int >= {least} or a pair of them, got {value!r}")
    return int(items[0]), int(items[1])


def _padding(padding: Padding, kernel: Pair, stride: Pair, dilation: Pair, op: str) -> Any:
    if isinstance(padding, str):
        if padding == "valid":
            return (0, 0), (0, 0)
        if padding != "same":
            raise ValueError(f"{op}: padding must be 'same', 'valid' or ints, got {padding!r}")
        if stride != (1, 1):
            raise ValueError(f"{op}: padding='same' needs stride 1, got stride {stride}")
        # PyTorch's split: the extra row or column of an even kernel goes last
        total = [d * (k - 1) for k, d in zip(kernel, dilation)]
        return tuple((t // 2, t - t // 2) for t in total)
    ph, pw = as_pair(padding, "padding", op, 0)
    return (ph, ph), (pw, pw)


def geometry(
    kernel: Pair,
    stride: Any = 1,
    padding: Padding = 0,
    dilation: Any = 1,
    groups: int = 1,
    op: str = "conv2d",
) -> Geometry:
    """The checked :class:`Geometry` of a convolution with a ``kernel``
    (height, width) and PyTorch's arguments."""
    s = as_pair(stride, "stride", op, 1)
    d = as_pair(dilation, "dilation", op, 1)
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
        raise ValueError(f"{op}: groups must be an int >= 1, got {groups!r}")
    return Geometry(s, _padding(padding, kernel, s, d, op), d, int(groups))


def _check(x: np.ndarray, w: np.ndarray, geo: Geometry, op: str) -> Pair:
    """The output's ``(OH, OW)``, or an error naming the op and the shapes."""
    if x.ndim != 4 or w.ndim != 4:
        raise ValueError(
            f"{op}: expected input (N, C, H, W) and weight (out, in/groups, kh, kw), "
            f"got input {x.shape} and weight {w.shape}"
        )
    G = geo.groups
    if x.shape[1] != w.shape[1] * G:
        raise ValueError(
            f"{op}: input {x.shape} has {x.shape[1]} channels, weight {w.shape} with "
            f"groups={G} takes {w.shape[1] * G}"
        )
    if w.shape[0] % G:
        raise ValueError(
            f"{op}: weight {w.shape} has {w.shape[0]} output channels, not a multiple of groups={G}"
        )
    if x.dtype != w.dtype:
        raise TypeError(f"{op}: input is {x.dtype} but weight is {w.dtype}; give them one dtype")
    out = geo.output_size(x.shape[2:], w.shape[2:])
    if min(out) < 1:
        raise ValueError(
            f"{op}: input {x.shape} with padding {geo.padding} is smaller than the "
            f"kernel {w.shape[2:]} at dilation {geo.dilation}"
        )
    return out


# ----------------------------------------------------------------------------
# the kernels on arrays
# ----------------------------------------------------------------------------


def channels_last(x: np.ndarray) -> np.ndarray:
    """``(N, C, H, W)`` seen as ``(N, H, W, C)`` (a view). The kernels work
    in this order: a window's entries are then runs of ``C`` neighbours in
    memory, and the output of ``cols @ weight.T`` comes out in it, so a
    network's activations stay channels-last from layer to layer (as
    PyTorch's ``channels_last`` memory format) while their shape is NCHW."""
    return x.transpose(0, 2, 3, 1)


def pad_channels_last(x: np.ndarray, padding: tuple[Pair, Pair], value: float = 0.0) -> np.ndarray:
    """``x`` ``(N, C, H, W)`` padded, as a new channels-last ``(N, Hp, Wp, C)`` array."""
    (t, b), (l, r) = padding
    xt = channels_last(x)
    if not (t or b or l or r):
        return xt
    N, H, W, C = xt.shape
    xp = np.full((N, H + t + b, W + l + r, C), value, dtype=x.dtype)
    xp[:, t : t + H, l : l + W] = xt
    return xp


def windows(xp: np.ndarray, kernel: Pair, out: Pair, geo: Geometry) -> np.ndarray:
    """The windows of a padded channels-last ``xp``, a strided view ``(N,
    OH, OW, kh, kw, C)``: ``[n, i, j]`` is what output pixel ``(i, j)`` sees."""
    s = xp.strides
    (sh, sw), (dh, dw) = geo.stride, geo.dilation
    if (sh, sw) == kernel and (dh, dw) == (1, 1):  # side by side: a reshape does it
        (oh, ow), (kh, kw) = out, kernel
        tiles = xp[:, : oh * kh, : ow * kw].reshape(xp.shape[0], oh, kh, ow, kw, xp.shape[3])
        return tiles.transpose(0, 1, 3, 2, 4, 5)
    return as_strided(
        xp,
        (xp.shape[0], *out, *kernel, xp.shape[3]),
        (s[0], s[1] * sh, s[2] * sw, s[1] * dh, s[2] * dw, s[3]),
        writeable=False,
    )


def im2col(x: np.ndarray, kernel: Pair, geo: Geometry) -> np.ndarray:
    """The windows of ``x`` ``(N, C, H, W)`` as ``(G, N * OH * OW, kh * kw * C/G)``:
    row ``(n, i, j)`` of group ``k`` holds the window that output pixel
    ``(i, j)`` of image ``n`` sees, in the order (row, column, channel)."""
    N, C = x.shape[:2]
    G = geo.groups
    out = geo.output_size(x.shape[2:], kernel)
    view = windows(pad_channels_last(x, geo.padding), kernel, out, geo)
    row = kernel[0] * kernel[1] * (C // G)  # not -1: an empty batch (N = 0) has no rows
    if G == 1:
        return view.reshape(1, N * out[0] * out[1], row)
    view = view.reshape(*view.shape[:5], G, C // G)
    return view.transpose(5, 0, 1, 2, 3, 4, 6).reshape(G, N * out[0] * out[1], row)


def _weight_matrix(w: np.ndarray, G: int) -> np.ndarray:
    """``(O, C/G, kh, kw)`` as ``(G, O/G, kh * kw * C/G)``, in im2col's order."""
    O, Cg, kh, kw = w.shape
    return w.reshape(G, O // G, Cg, kh, kw).transpose(0, 1, 3, 4, 2).reshape(G, O // G, -1)


def _rows(g: np.ndarray, G: int) -> np.ndarray:
    """An output gradient ``(N, O, OH, OW)`` as ``(G, N * OH * OW, O/G)``
    (a view when it is channels-last in memory and ``G`` is 1)."""
    N, O, OH, OW = g.shape
    rows = channels_last(g).reshape(N * OH * OW, G, O // G)
    return rows.transpose(1, 0, 2)


def _forward(x: np.ndarray, w: np.ndarray, geo: Geometry) -> tuple[np.ndarray, np.ndarray]:
    """``conv(x, w)`` and the ``cols`` it was computed from."""
    N, O = x.shape[0], w.shape[0]
    G = geo.groups
    OH, OW = geo.output_size(x.shape[2:], w.shape[2:])
    cols = im2col(x, w.shape[2:], geo)
    wm = _weight_matrix(w, G)
    if G == 1:
        y = _mm(cols[0], wm[0].T)  # (N * OH * OW, O)
    else:
        y = _mm(cols, wm.transpose(0, 2, 1)).transpose(1, 0, 2)  # (N * OH * OW, G, O/G)
        y = y.reshape(N * OH * OW, O)
    # the shape (N, O, OH, OW), the memory (N, OH, OW, O): no copy
    return y.reshape(N, OH, OW, O).transpose(0, 3, 1, 2), cols


def conv2d_array(x: np.ndarray, w: np.ndarray, geo: Geometry) -> np.ndarray:
    """``conv(x, w)`` on arrays."""
    return _forward(x, w, geo)[0]


def input_grad_array(
    g: np.ndarray, w: np.ndarray, geo: Geometry, x_shape: tuple[int, ...]
) -> np.ndarray:
    """``dx`` of ``conv(x, w)`` for the output gradient ``g``: col2im of
    ``g @ w``, or at stride 1 the transposed convolution (:func:`_transposed`)."""
    N, C, H, W = x_shape
    _, Cg, kh, kw = w.shape
    G = geo.groups
    OH, OW = g.shape[2:]
    # Not where the kernel holds a nan or an infinity: the transposed
    # convolution multiplies it by the zeros it pads g with, and 0 * nan is
    # a nan PyTorch (col2im of g @ w, below) never forms.
    transposed = _transposed(w, geo) if np.isfinite(w).all() else None
    if transposed is not None:
        return _forward(g, *transposed)[0]
    dcols = _mm(_rows(g, G), _weight_matrix(w, G))  # (G, N * OH * OW, kh * kw * Cg)
    # (N, OH, OW, kh, kw, C): each window entry's gradient, by where it was read
    dcols = dcols.reshape(G, N, OH, OW, kh, kw, Cg).transpose(1, 2, 3, 4, 5, 0, 6)
    dcols = dcols.reshape(N, OH, OW, kh, kw, C)
    (t, b), (l, r) = geo.padding
    (sh, sw), (dh, dw) = geo.stride, geo.dilation
    dxp = np.zeros((N, H + t + b, W + l + r, C), dtype=g.dtype)
    for i in range(kh):
        rows = slice(i * dh, i * dh + sh * (OH - 1) + 1, sh)
        for j in range(kw):
            dxp[:, rows, j * dw : j * dw + sw * (OW - 1) + 1 : sw] += dcols[:, :, :, i, j]
    return dxp[:, t : t + H, l : l + W].transpose(0, 3, 1, 2)


def _transposed(w: np.ndarray, geo: Geometry) -> tuple[np.ndarray, Geometry] | None:
    """At stride 1, ``dx`` is itself a convolution: of ``g``, padded by what
    the kernel overhangs minus the forward's padding, with the kernel
    flipped and its input and output channels exchanged (in each group).
    That is one im2col and one product, cheaper than col2im's addition per
    kernel offset. None where it does not apply (a stride, or a padding
    wider than the kernel's reach)."""
    if geo.stride != (1, 1):
        return None
    O, Cg, kh, kw = w.shape
    pads = []
    for (lo, hi), k, d in zip(geo.padding, (kh, kw), geo.dilation):
        reach = d * (k - 1)
        if lo > reach or hi > reach:
            return None
        pads.append((reach - lo, reach - hi))
    G = geo.groups
    flipped = w.reshape(G, O // G, Cg, kh, kw).transpose(0, 2, 1, 3, 4)[..., ::-1, ::-1]
    flipped = flipped.reshape(G * Cg, O // G, kh, kw)
    return flipped, Geometry((1, 1), (pads[0], pads[1]), geo.dilation, G)


def weight_grad_array(
    x: np.ndarray,
    g: np.ndarray,
    geo: Geometry,
    w_shape: tuple[int, ...],
    cols: np.ndarray | None = None,
) -> np.ndarray:
    """``dw`` of ``conv(x, w)`` for the output gradient ``g``: ``g^T @ cols``
    (``cols``: the forward's, when it kept them)."""
    O, Cg, kh, kw = w_shape
    G = geo.groups
    if cols is None:
        cols = im2col(x, (kh, kw), geo)
    gw = _mm(_rows(g, G).transpose(0, 2, 1), cols)  # (G, O/G, kh * kw * Cg)
    return gw.reshape(O, kh, kw, Cg).transpose(0, 3, 1, 2)


# ----------------------------------------------------------------------------
# the three ops on Tensors
# ----------------------------------------------------------------------------


def _conv2d_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any, ...]:
    geo, cols = out._ctx
    x, w = out._prev[:2]
    gx = M.conv2d_input(g, M.of(w), geo, x.data.shape) if x.requires_grad else None
    gw = M.conv2d_weight(M.of(x), g, geo, w.data.shape, cols) if w.requires_grad else None
    if len(out._prev) == 3:
        return gx, gw, g.sum(axis=(0, 2, 3))
    return gx, gw


def _input_grad_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any, Any]:
    geo = out._ctx
    gy, w = out._prev
    return M.conv2d(g, M.of(w), geo), M.conv2d_weight(g, M.of(gy), geo, w.data.shape, None)


def input_grad_op(g: Tensor, w: Tensor, geo: Geometry, x_shape: tuple[int, ...]) -> Tensor:
    """``dx`` of a convolution as a node: linear in ``g`` and in ``w``."""
    return make(input_grad_array(g.data, w.data, geo, x_shape), (g, w), _input_grad_vjp, geo)


def _weight_grad_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any, Any]:
    geo = out._ctx
    x, gy = out._prev
    return M.conv2d_input(M.of(gy), g, geo, x.data.shape), M.conv2d(M.of(x), g, geo)


def weight_grad_op(x: Tensor, g: Tensor, geo: Geometry, w_shape: tuple[int, ...]) -> Tensor:
    """``dw`` of a convolution as a node: linear in ``x`` and in ``g``."""
    return make(weight_grad_array(x.data, g.data, geo, w_shape), (x, g), _weight_grad_vjp, geo)


def convolve(
    x: Tensor, weight: Tensor, bias: Tensor | None, geo: Geometry, op: str = "conv2d"
) -> Tensor:
    """``conv(x, weight) + bias`` as one node, for a checked geometry;
    errors name ``op``."""
    w = weight.data
    _check(x.data, w, geo, op)
    y, cols = _forward(x.data, w, geo)
    if bias is None:
        return make(y, (x, weight), _conv2d_vjp, (geo, cols))
    if bias.data.shape != (w.shape[0],):
        raise ValueError(f"{op}: bias {bias.data.shape} does not fit weight {w.shape}")
    if bias.data.dtype != y.dtype:
        raise TypeError(f"{op}: bias is {bias.data.dtype} but weight is {w.dtype}")
    y = y + bias.data.reshape(-1, 1, 1)
    return make(y, (x, weight, bias), _conv2d_vjp, (geo, cols))


def conv2d(
    input: Any,  # noqa: A002  (PyTorch's name)
    weight: Tensor,
    bias: Tensor | None = None,
    stride: Any = 1,
    padding: Padding = 0,
    dilation: Any = 1,
    groups: int = 1,
) -> Tensor:
    """2-D convolution (cross-correlation, as every deep learning library's)
    of ``input`` ``(N, C, H, W)`` with ``weight`` ``(O, C/groups, kh, kw)``,
    plus ``bias`` ``(O,)``, as ``torch.nn.functional.conv2d``: ``stride``,
    ``padding`` (an int, a pair, ``"same"`` or ``"valid"``) and
    ``dilation`` are ints or ``(height, width)`` pairs; ``groups`` splits
    the channels into that many independent convolutions. ``input`` may be
    a plain array (an image batch), which gets no gradient. One node.

    >>> import numpy as np
    >>> from chainrule import Tensor
    >>> from chainrule.tensor import conv2d
    >>> x = Tensor(np.arange(16.0).reshape(1, 1, 4, 4))
    >>> conv2d(x, Tensor(np.ones((1, 1, 2, 2))), stride=2).data
    array([[[[10., 18.],
             [42., 50.]]]])
    """
    x = lift(input, "conv2d")
    kernel = weight.data.shape[2:] if weight.data.ndim == 4 else (1, 1)
    geo = geometry(kernel, stride, padding, dilation, groups)
    return convolve(x, weight, bias, geo)


def _single(value: Any, name: str) -> Any:
    """A conv1d argument (an int or a 1-tuple) as conv2d's, one row high."""
    if isinstance(value, (tuple, list)):
        if len(value) != 1:
            raise ValueError(f"conv1d: {name} must be an int or a 1-tuple, got {value!r}")
        value = value[0]
    return value


def conv1d(
    input: Any,  # noqa: A002
    weight: Tensor,
    bias: Tensor | None = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
) -> Tensor:
    """1-D convolution of ``input`` ``(N, C, L)`` with ``weight`` ``(O,
    C/groups, k)``, as ``torch.nn.functional.conv1d``: :func:`conv2d` on
    images one row high."""
    x = lift(input, "conv1d")
    if x.data.ndim != 3 or weight.data.ndim != 3:
        raise ValueError(
            f"conv1d: expected input (N, C, L) and weight (out, in/groups, k), "
            f"got input {x.data.shape} and weight {weight.data.shape}"
        )
    pad = _single(padding, "padding")
    geo = geometry(
        (1, weight.data.shape[2]),
        (1, _single(stride, "stride")),
        pad if isinstance(pad, str) else (0, pad),
        (1, _single(dilation, "dilation")),
        groups,
        "conv1d",
    )
    return convolve(x.unsqueeze(2), weight.unsqueeze(2), bias, geo, "conv1d").squeeze(2)


__all__ = ["Geometry", "as_pair", "conv1d", "conv2d", "convolve", "geometry", "im2col"]
