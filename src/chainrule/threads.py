"""How many threads the Tensor engine's operations use:
``set_num_threads`` and ``get_num_threads``, as ``torch.set_num_threads``.

The Tensor engine runs a large matrix product on BLAS's own threads, and a
stack of smaller ones (attention's ``q @ k^T`` over batch and heads) split
by the batch across a pool of Python threads, NumPy releasing the GIL in
each (:mod:`chainrule.tensor.blas`). Both use :func:`get_num_threads`
threads:

* the number given to :func:`set_num_threads`, when it was called;
* otherwise as many as NumPy's BLAS is allowed now (what threadpoolctl's
  ``threadpool_limits`` or ``OPENBLAS_NUM_THREADS`` / ``OMP_NUM_THREADS``
  at start-up set; OpenBLAS's default is every core), read through
  threadpoolctl once the Tensor engine is loaded;
* without threadpoolctl, ``OMP_NUM_THREADS`` (its first entry, as OpenMP
  reads a list), else ``os.cpu_count()``.

This module needs nothing but the standard library, so ``import chainrule``
still works without NumPy.
"""

from __future__ import annotations

import operator
import os
from collections.abc import Callable

__all__ = ["get_num_threads", "set_num_threads"]


class _State:
    requested: int | None = None  # set_num_threads's, or None: the default
    # NumPy's BLAS's current thread count, registered by the Tensor engine
    blas_threads: Callable[[], int | None] | None = None


_state = _State()


def set_num_threads(n: int) -> None:
    """Use ``n`` threads for the Tensor engine's operations from now on
    (``n >= 1``; 1 runs everything on the calling thread).

    >>> import chainrule
    >>> chainrule.set_num_threads(1)
    >>> chainrule.get_num_threads()
    1
    """
    if isinstance(n, bool):
        raise TypeError(f"set_num_threads: n must be an int, got {n!r}")
    try:
        n = operator.index(n)
    except TypeError:
        raise TypeError(f"set_num_threads: n must be an int, got {n!r}") from None
    if n < 1:
        raise ValueError(f"set_num_threads: n must be at least 1, got {n}")
    _state.requested = n


def reset_num_threads() -> None:
    """Forget :func:`set_num_threads`: back to the default (BLAS's count)."""
    _state.requested = None


def get_num_threads() -> int:
    """The threads the Tensor engine's operations use (see the module's
    notes for the default)."""
    if _state.requested is not None:
        return _state.requested
    if _state.blas_threads is not None:
        n = _state.blas_threads()
        if n is not None:
            return max(n, 1)
    return environment_threads()


def environment_threads() -> int:
    """``OMP_NUM_THREADS``'s first entry when it is a positive integer,
    else the number of CPUs."""
    value = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if value.isdigit() and int(value) > 0:
        return int(value)
    return os.cpu_count() or 1


def register_blas(reader: Callable[[], int | None]) -> None:
    """The Tensor engine's hook: ``reader()`` gives NumPy's BLAS's current
    thread count (None when it cannot tell)."""
    _state.blas_threads = reader
