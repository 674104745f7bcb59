"""Reductions over axes: ``sum``, ``mean``, ``max``, ``min``, ``var``, ``std``.

The VJP of a reduction spreads the output gradient back over the reduced
axes: evenly for ``sum`` (1 each) and ``mean`` (1/n each), for ``max`` and
``min`` onto the extreme entries, split evenly between ties (PyTorch's
``amax``/``amin``), and for ``var`` in proportion to each entry's distance
from the mean: ``2 (x - mean) / (n - correction)``.
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
    if isinstance(axis, (int, np.integer)):
        items: tuple[object, ...] = (axis,)
    elif isinstance(axis, (tuple, list)):
        items = tuple(axis)
    else:
        raise TypeError(f"{op}: axis must be an int or a sequence of ints, got {axis!r}")
    out = []
    for a in items:
        if isinstance(a, bool) or not isinstance(a, (int, np.integer)):
            raise TypeError(f"{op}: axis must be an int or a sequence of ints, got {axis!r}")
        if not -(ndim or 1) <= a < (ndim or 1):  # a 0-d tensor's axis is 0 or -1
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


def _extremum_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    """``max``'s and ``min``'s: the entries equal to the output share it."""
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
    return _extremum(x, axis, keepdims, "max")


def _max_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    return _extremum_vjp(M, g, out)


def _min_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    return _extremum_vjp(M, g, out)


def min(x: Tensor, axis: Axis = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Minimum over ``axis`` (all axes when None), as :func:`max` with the
    gradient going to the minimal entries."""
    return _extremum(x, axis, keepdims, "min")


def _extremum(x: Tensor, axis: Axis, keepdims: bool, op: str) -> Tensor:
    axes = _axes(axis, x.data.ndim, op)
    if x.data.size == 0 and (axis is None or any(x.data.shape[a] == 0 for a in axes)):
        raise ValueError(f"{op}: cannot reduce {x.data.shape} over an empty axis")
    reduce = np.max if op == "max" else np.min
    y = np.asarray(reduce(x.data, axis=axes, keepdims=keepdims))
    return make(y, (x,), _max_vjp if op == "max" else _min_vjp, (axes, keepdims, axis is None))


# ----------------------------------------------------------------------------
# variance and standard deviation
# ----------------------------------------------------------------------------


def _centered(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return x - x.mean(axis=axes, keepdims=True)


def _count(x: np.ndarray, axes: tuple[int, ...]) -> int:
    n = 1
    for a in axes:
        n *= x.shape[a]
    return n


def _two_over(n: float) -> float:
    """``2 / n`` as a Python float (weak: a float32 gradient stays float32),
    inf for ``n = 0``."""
    return 2.0 / n if n else float("inf")


def _var_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    x = out._prev[0]
    axes, _, correction = out._ctx
    xv = M.of(x)
    with np.errstate(invalid="ignore", divide="ignore"):
        # PyTorch's var_backward: (2 / (n - correction)) * g * (x - mean)
        xc = xv - xv.mean(axis=axes, keepdims=True)
        scale = _two_over(_count(x.data, axes) - correction)
        return ((scale * _expand(g, out)) * xc,)


def _std_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    x = out._prev[0]
    axes, _, correction = out._ctx
    xv = M.of(x)
    with np.errstate(invalid="ignore", divide="ignore"):
        xc = xv - xv.mean(axis=axes, keepdims=True)
        # PyTorch's std_backward: var_backward(g / (2 std)), with 0 where std
        # is 0 (a constant slice gets no gradient rather than nan)
        y = _expand(M.of(out), out)
        g = M.where(_expand(out.data, out) == 0.0, 0.0, _expand(g, out) / (2.0 * y))
        scale = _two_over(_count(x.data, axes) - correction)
        return ((scale * g) * xc,)


def _variance(x: Tensor, axis: Axis, correction: float, keepdims: bool, op: str) -> np.ndarray:
    axes = _axes(axis, x.data.ndim, op)
    xc = _centered(x.data, axes)
    n = _count(x.data, axes) - correction
    with np.errstate(invalid="ignore", divide="ignore"):
        # as PyTorch: divided by max(0, n - correction), so inf or nan (0 / 0)
        # when there are too few entries
        total = np.asarray((xc * xc).sum(axis=axes, keepdims=keepdims))
        return total / (n if n > 0 else 0.0)


def var(x: Tensor, axis: Axis = None, correction: float = 1, keepdims: bool = False) -> Tensor:
    """Variance over ``axis`` (all axes when None): the squared distances
    from the mean, summed and divided by ``n - correction`` (1: Bessel's
    correction, PyTorch's default; 0: the population variance)."""
    y = _variance(x, axis, correction, keepdims, "var")
    return make(y, (x,), _var_vjp, (_axes(axis, x.data.ndim, "var"), keepdims, correction))


def std(x: Tensor, axis: Axis = None, correction: float = 1, keepdims: bool = False) -> Tensor:
    """Standard deviation over ``axis``: ``sqrt(var(x, axis, correction))``."""
    with np.errstate(invalid="ignore"):
        y = np.sqrt(_variance(x, axis, correction, keepdims, "std"))
    return make(y, (x,), _std_vjp, (_axes(axis, x.data.ndim, "std"), keepdims, correction))
