"""Reductions over axes: ``sum``, ``mean``, ``max``.

The VJP of a reduction spreads the output gradient back over the reduced
axes: evenly for ``sum`` (1 each) and ``mean`` (1/n each), and for ``max``
onto the maximal entries, split evenly between ties (PyTorch's ``amax``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Union

import numpy as np

from .tensor import Tensor, make

Axis = Union[int, Sequence[int], None]


def _axes(axis: Axis, ndim: int, op: str) -> tuple[int, ...]:
    """``axis`` as a sorted tuple of non-negative axes (all axes for None)."""
    if axis is None:
        return tuple(range(ndim))
    items = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    out = []
    for a in items:
        if not isinstance(a, (int, np.integer)):
            raise TypeError(f"{op}: axis must be an int or a sequence of ints, got {axis!r}")
        if not -ndim <= a < (ndim or 1):
            raise ValueError(f"{op}: axis {a} is out of range for {ndim} dimensions")
        out.append(int(a) % (ndim or 1))
    if len(set(out)) != len(out):
        raise ValueError(f"{op}: repeated axis in {axis!r}")
    if ndim == 0:  # a scalar's only axis is itself (as PyTorch's dim 0)
        return ()
    return tuple(sorted(out))


def _expand(g: Any, out: Tensor) -> Any:
    """The output gradient with the reduced axes put back (size 1)."""
    axes, keepdims = out._ctx[:2]
    if keepdims or not axes:
        return g
    return g.reshape(_kept_shape(out._prev[0].data.shape, axes))


def _kept_shape(shape: tuple[int, ...], axes: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


def _sum_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    return (M.broadcast_to(_expand(g, out), out._prev[0].data.shape),)


def sum(x: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Sum over ``axis`` (all axes when None)."""
    axes = _axes(axis, x.data.ndim, "sum")
    return make(
        np.asarray(x.data.sum(axis=axes, keepdims=keepdims)), (x,), _sum_vjp, (axes, keepdims)
    )


def _mean_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    shape = out._prev[0].data.shape
    n = 1
    for a in out._ctx[0]:
        n *= shape[a]
    with np.errstate(invalid="ignore", divide="ignore"):
        return (M.broadcast_to(_expand(g, out) / n, shape),)


def mean(x: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor:
    """Mean over ``axis`` (all axes when None)."""
    axes = _axes(axis, x.data.ndim, "mean")
    with np.errstate(invalid="ignore", divide="ignore"):
        y = np.asarray(x.data.mean(axis=axes, keepdims=keepdims))
    return make(y, (x,), _mean_vjp, (axes, keepdims))


def _max_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    x = out._prev[0]
    axes, _, whole = out._ctx
    y = _expand(out.data, out)
    g = _expand(g, out)
    hit = x.data == y
    if whole:
        # torch.max(x): the nan entries are the max of a nan maximum, and
        # the other entries get 0 whatever g is (masked_fill)
        if np.isnan(y).any():
            hit |= np.isnan(x.data)
        return (M.astype(M.where(hit, g / hit.sum(), 0.0), x.data.dtype),)
    # torch.amax(x, dim): hit * g / count, so a nan or inf g reaches every
    # entry of its slice, and a slice whose maximum is nan gets nan (0 / 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        gx = hit * (g / hit.sum(axis=axes, keepdims=True))
    return (M.astype(gx, x.data.dtype),)


def max(x: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Maximum over ``axis`` (all axes when None); the gradient goes to the
    maximal entries, shared evenly between ties. With ``axis`` it is
    ``torch.amax``'s, without it ``torch.max``'s (which differ only where
    a gradient or the maximum is nan or infinite)."""
    if x.data.size == 0:
        raise ValueError("max: empty tensor has no maximum")
    axes = _axes(axis, x.data.ndim, "max")
    y = np.asarray(x.data.max(axis=axes, keepdims=keepdims))
    return make(y, (x,), _max_vjp, (axes, keepdims, axis is None))
