"""Reductions along the last axis, fast for the short rows of small
networks (a softmax over 16 keys, an RMS norm over 16 features).

NumPy's ``x.sum(axis=-1)`` and ``x.max(axis=-1)`` pay a fixed cost per row,
which dominates when rows are short. A product with a vector of ones does
the sum in one BLAS call, and a softmax may subtract any constant per row,
so one maximum over the whole array serves, as long as no row underflows.
"""

from __future__ import annotations

import functools

import numpy as np

from .blas import matmul

# A row whose exponentials sum below this under the shared shift lies too
# far below the global maximum: its small entries would lose precision.
_FLOOR = 1e-8


@functools.lru_cache(maxsize=256)
def _ones(n: int, dtype: np.dtype) -> np.ndarray:
    ones = np.ones(n, dtype=dtype)
    ones.setflags(write=False)
    return ones


def row_sum(x: np.ndarray) -> np.ndarray:
    """``x.sum(axis=-1, keepdims=True)``, as one matrix-vector product."""
    return matmul(x, _ones(x.shape[-1], x.dtype))[..., None]


def row_mean(x: np.ndarray) -> np.ndarray:
    """``x.mean(axis=-1, keepdims=True)``."""
    return row_sum(x) / x.shape[-1]


def row_dot(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``(a * b).sum(axis=-1, keepdims=True)`` for arrays of one shape,
    without the product as an array (one pass over each)."""
    return np.einsum("...i,...i->...", a, b)[..., None]


def shifted_exp(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``e = exp(x - shift)`` with ``s = row_sum(e)`` and the shift, which is
    the maximum of all of ``x`` when every row keeps its precision under it,
    and each row's own maximum otherwise (or when ``x`` has inf or nan)."""
    shift = x.max()
    if np.isfinite(shift):
        e = np.exp(x - shift)
        s = row_sum(e)
        if s.min() >= _FLOOR:
            return e, s, shift
    shift = x.max(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        e = np.exp(x - shift)
    return e, row_sum(e), shift
