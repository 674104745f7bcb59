"""Operations that move numbers without changing them: ``reshape`` (and
``unsqueeze``, ``squeeze``, ``flatten``), ``transpose``, indexing,
``concatenate`` (``cat``), ``stack`` and ``embedding``.

Their VJPs move the gradient back the same way: reshape it back, transpose
it by the inverse permutation, scatter it into zeros at the indexed places
(adding where an index repeats), or split it into the pieces.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .blas import matmul as _mm
from .tensor import Tensor, lift, make


def _reshape_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    return (g.reshape(out._prev[0].data.shape),)


def reshape(x: Tensor, shape: Sequence[int]) -> Tensor:
    """The same numbers in a new shape (one axis may be -1)."""
    try:
        y = x.data.reshape(tuple(shape))
    except (ValueError, TypeError) as e:
        raise ValueError(f"reshape: cannot reshape {x.data.shape} to {tuple(shape)}: {e}") from None
    return make(y, (x,), _reshape_vjp)


def _transpose_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    axes = out._ctx
    if axes is None:
        return (g.transpose(),)
    return (g.transpose(np.argsort(axes)),)


def transpose(x: Tensor, axes: Sequence[int] | None = None) -> Tensor:
    """Permute the axes (reverse them when ``axes`` is None)."""
    if axes is not None:
        axes = tuple(int(a) % max(x.data.ndim, 1) for a in axes)
        if sorted(axes) != list(range(x.data.ndim)):
            raise ValueError(f"transpose: {axes} is not a permutation of {x.data.ndim} axes")
    return make(x.data.transpose(axes), (x,), _transpose_vjp, axes)


def swapaxes(x: Tensor, a: int, b: int) -> Tensor:
    """Exchange two axes."""
    axes = list(range(x.data.ndim))
    axes[a], axes[b] = axes[b], axes[a]
    return transpose(x, axes)


# ----------------------------------------------------------------------------
# Indexing
# ----------------------------------------------------------------------------

_BASIC = (int, np.integer, slice, type(None), type(Ellipsis))


def _normalize_index(index: Any) -> tuple[Any, bool]:
    """The index with Tensors and lists turned into arrays, and whether it
    is basic (slices, ints, None, ...), which NumPy answers with a view and
    whose places never repeat."""
    parts = index if isinstance(index, tuple) else (index,)
    out = []
    basic = True
    for p in parts:
        if isinstance(p, Tensor):
            p = p.data
        if isinstance(p, (list, np.ndarray)):
            p = np.asarray(p)
            if p.dtype.kind == "f":
                raise IndexError("index: arrays used as indices must be of integer or boolean type")
            basic = False
        elif isinstance(p, (bool, np.bool_)) or not isinstance(p, _BASIC):
            basic = False
        out.append(p)
    return (tuple(out) if isinstance(index, tuple) else out[0]), basic


def _getitem_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    index, basic = out._ctx
    x = out._prev[0].data
    return (M.scatter(x.shape, index, basic, M.astype(g, x.dtype)),)


def getitem(x: Tensor, index: Any) -> Tensor:
    """``x[index]``: slicing, and integer or boolean array indexing; the
    gradient of an entry picked several times is the sum of its picks."""
    index, basic = _normalize_index(index)
    return make(np.asarray(x.data[index]), (x,), _getitem_vjp, (index, basic))


def _embedding_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    w = out._prev[0].data
    flat = out._ctx.reshape(-1)
    g2 = g.reshape(flat.size, -1)
    if M.graph:
        return (M.scatter(w.shape, flat, False, g2.reshape(flat.size, *w.shape[1:])),)
    if flat.size <= w.shape[0] and np.bincount(flat, minlength=w.shape[0]).max(initial=0) <= 1:
        # each row picked once at most (a position table's ``arange(T)``):
        # its gradient is its one pick's, put in place; no sums to do
        gw = np.zeros(w.shape, dtype=w.dtype)
        gw[flat] = g2.reshape(flat.size, *w.shape[1:])
        return (gw,)
    if w.shape[0] * flat.size <= 1 << 20:
        # onehot(indices)^T @ g sums each row's picks in one matrix product,
        # several times faster than the unbuffered np.add.at for small tables
        onehot = np.zeros((w.shape[0], flat.size), dtype=w.dtype)
        onehot[flat, np.arange(flat.size)] = 1.0
        return (_mm(onehot, g2).reshape(w.shape),)
    gw = np.zeros(w.shape, dtype=w.dtype)
    np.add.at(gw, flat, g2)
    return (gw,)


def embedding(weight: Tensor, indices: Any) -> Tensor:
    """Rows of ``weight`` picked by an integer array: ``weight[indices]``,
    shape ``indices.shape + weight.shape[1:]``. The gradient of a row is
    the sum over every place it was picked."""
    idx = np.asarray(indices.data if isinstance(indices, Tensor) else indices)
    if idx.dtype.kind not in "iu":
        if idx.size == 0:
            idx = idx.astype(np.intp)
        else:
            raise TypeError(f"embedding: indices must be integers, got {idx.dtype}")
    n = weight.data.shape[0]
    if idx.size and (idx.min() < 0 or idx.max() >= n):
        bad = idx.min() if idx.min() < 0 else idx.max()
        raise IndexError(
            f"embedding: index {bad} is out of range for a table of {n} rows, shape "
            f"{weight.data.shape} (indices run from 0 to {n - 1}, as PyTorch's)"
        )
    return make(weight.data.take(idx, axis=0), (weight,), _embedding_vjp, idx)


# ----------------------------------------------------------------------------
# Joining
# ----------------------------------------------------------------------------


def _concatenate_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any, ...]:
    axis, bounds = out._ctx
    starts = (0, *bounds)
    ends = (*bounds, g.shape[axis])
    lead = (slice(None),) * axis
    return tuple(
        M.fit(g[lead + (slice(int(a), int(b)),)], t.data)
        for a, b, t in zip(starts, ends, out._prev)
    )


def concatenate(tensors: Sequence[Any], axis: int = 0) -> Tensor:
    """Join tensors along an existing axis."""
    ts = tuple(lift(t, "concatenate") for t in tensors)
    if not ts:
        raise ValueError("concatenate: need at least one tensor")
    axis = int(axis) % max(ts[0].data.ndim, 1)
    y = np.concatenate([t.data for t in ts], axis=axis)
    bounds = np.cumsum([t.data.shape[axis] for t in ts])[:-1]
    return make(y, ts, _concatenate_vjp, (axis, bounds))


def _stack_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any, ...]:
    lead = (slice(None),) * out._ctx
    return tuple(M.fit(g[lead + (i,)], t.data) for i, t in enumerate(out._prev))


def stack(tensors: Sequence[Any], axis: int = 0) -> Tensor:
    """Join tensors of one shape along a new axis."""
    ts = tuple(lift(t, "stack") for t in tensors)
    if not ts:
        raise ValueError("stack: need at least one tensor")
    y = np.stack([t.data for t in ts], axis=axis)
    return make(y, ts, _stack_vjp, int(axis) % y.ndim)


#: PyTorch's name for concatenate.
cat = concatenate


# ----------------------------------------------------------------------------
# Axes of size one, flattening: reshapes with PyTorch's arguments
# ----------------------------------------------------------------------------


def _axis(axis: Any, ndim: int, op: str) -> int:
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"{op}: dim must be an int, got {axis!r}")
    if not -ndim <= axis < ndim:
        raise ValueError(f"{op}: dim {axis} is out of range for {ndim - (op == 'unsqueeze')} dims")
    return int(axis) % ndim


def unsqueeze(x: Tensor, axis: int) -> Tensor:
    """``x`` with a new axis of size 1 at ``axis`` (``-1``: last)."""
    shape = list(x.data.shape)
    shape.insert(_axis(axis, x.data.ndim + 1, "unsqueeze"), 1)
    return reshape(x, shape)


def squeeze(x: Tensor, axis: int | Sequence[int] | None = None) -> Tensor:
    """``x`` without axes of size 1: all of them, or those of ``axis``
    that have size 1 (others are kept, as PyTorch)."""
    shape = x.data.shape
    if axis is None:
        drop = {i for i, n in enumerate(shape) if n == 1}
    else:
        axes = axis if isinstance(axis, (tuple, list)) else (axis,)
        ndim = max(len(shape), 1)
        drop = {_axis(a, ndim, "squeeze") for a in axes}
        drop = {i for i in drop if i < len(shape) and shape[i] == 1}
    return reshape(x, [n for i, n in enumerate(shape) if i not in drop])


def flatten(x: Tensor, start: int = 0, end: int = -1) -> Tensor:
    """Axes ``start`` to ``end`` (both included) merged into one, as
    ``torch.flatten``; a 0-d tensor becomes 1-d."""
    shape = x.data.shape
    if not shape:
        return reshape(x, (1,))
    s, e = _axis(start, len(shape), "flatten"), _axis(end, len(shape), "flatten")
    if s > e:
        raise ValueError(f"flatten: start dim {start} comes after end dim {end}")
    merged = 1
    for n in shape[s : e + 1]:
        merged *= n
    return reshape(x, (*shape[:s], merged, *shape[e + 1 :]))


# ----------------------------------------------------------------------------
# Broadcasting and scattering (the VJPs of sum and indexing, as ops)
# ----------------------------------------------------------------------------


def _broadcast_to_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    return (M.fit(g, out._prev[0].data),)


def broadcast_to(x: Tensor, shape: Sequence[int]) -> Tensor:
    """``x`` repeated along new or size-1 axes to ``shape`` (NumPy's rules);
    the gradient is summed back."""
    try:
        y = np.broadcast_to(x.data, tuple(shape))
    except ValueError as e:
        raise ValueError(f"broadcast_to: cannot broadcast {x.data.shape} to {tuple(shape)}") from e
    return make(y, (x,), _broadcast_to_vjp)


def _scatter_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    index, _ = out._ctx
    return (g[index],)


def scatter(shape: Sequence[int], index: Any, basic: bool, values: Tensor) -> Tensor:
    """Zeros of ``shape`` with ``values`` added at ``index`` (an index as
    :func:`getitem` takes it, already normalized; ``basic`` when it has only
    slices and ints). The VJP of indexing, and its VJP is indexing."""
    y = np.zeros(tuple(shape), dtype=values.data.dtype)
    if basic:
        y[index] = values.data
    else:
        np.add.at(y, index, values.data)
    return make(y, (values,), _scatter_vjp, (index, basic))
