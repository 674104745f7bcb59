"""Matrix products on as many threads as pay.

The Tensor engine uses :func:`chainrule.get_num_threads` threads (by
default as many as NumPy's BLAS is allowed). Each product is routed by its
size, as PyTorch decides per op how many threads a product gets:

* **One matrix product.** OpenBLAS (NumPy's BLAS) splits a product over all
  its threads once it exceeds a small fixed size (``m n k`` above 262,144
  for a matrix product, ``m n`` above 9,216 for a matrix-vector one). For
  the products of a small transformer (a ``(2048, 16) @ (16, 64)``) waking
  the other threads costs more than the product. So a product below
  :data:`MULTITHREAD_WORK` multiply-adds, or with a side shorter than
  :data:`MIN_THREADED_SIDE`, runs on one BLAS thread; a larger one on all
  the engine's threads: up to :data:`POOL_WORK` on OpenBLAS's own threads,
  which spin for a while after each product and so answer the next at
  once; from there, a matrix product with at least :data:`MIN_SPLIT_ROWS`
  rows per thread is cut by its rows into one part per thread, each part
  on the pool (below) with BLAS on one thread (:func:`split_rows`): parts
  of whole rows never wait for each other until the end, and a part is
  long enough to pay for waking a pool thread (about 90 microseconds). A
  part may round differently from the whole product on one thread
  (OpenBLAS picks its blocking by size), as OpenBLAS's own threads may.
  The two kinds are not mixed in one step of the ``gpt-sizes`` models:
  OpenBLAS's spinning threads take the core from the pool's (measured: a
  product cut by rows right after one on OpenBLAS's threads ran no faster
  than on one thread).
* **Two independent products** (a linear layer's two gradients, ``g @ W``
  and ``g^T @ x``, of equal size) of :data:`POOL_WORK` multiply-adds each
  or more run at once on two threads, one on each with BLAS on one thread
  (:func:`matmul_pair`): each the very same BLAS call as on one thread.
  Smaller pairs go one after the other, each as one product.
* **A stack of products** (attention's ``q @ k^T`` and ``weights @ v`` over
  batch and heads, and their backward). NumPy's ``matmul`` runs the stack's
  products one after the other, each small enough to stay on one BLAS
  thread, so one core works and the others wait. From
  :data:`SPLIT_WORK` multiply-adds in all, the stack is split by its first
  batch axis into one part per thread, each part a NumPy ``matmul`` on a
  pool thread (NumPy releases the GIL while it multiplies) with BLAS on one
  thread, into one output array. Each matrix is then multiplied by the very
  same BLAS call as on one thread: the result is bit for bit the same.

Measured (``q @ k^T`` and ``s @ k`` of the ``gpt-sizes`` attention, 2 cores,
the measuring process at the highest priority on a machine at load 6, so
that the other engineers' jobs did not take its cores; medians of 15
alternating runs, two runs): split / unsplit time 0.58-0.64 at embedding
256 (``(16, 8, 128, 32)``), 0.69-0.87 at 128 (``(32, 4, 64, 32)``, 17
million multiply-adds per stack), 1.2-1.7 at 64 (2 million), 3-5 at 16:
handing a part to another thread costs 25-200 microseconds. On the whole
``gpt-sizes`` step the same comparison gave 0.97-1.01 at embedding 128 and
256 (load 6-10): most of the step is single products already on BLAS's
threads; a quiet machine's figures come from ``chainrule bench``.

Measured (the ``gpt-sizes`` step at embedding 256, float32, 2 threads,
old and new routing alternating in one process at the highest priority
on a machine at load 4-6; medians of 5-7): the gradient pair 1813 ms
against 4326 ms for both products on OpenBLAS's threads; then cutting the
forward's large products by rows 1425 ms against 1990 ms. A busy machine
exaggerates the difference (OpenBLAS's waiting threads suffer most from
it); a quiet machine's figures come from ``chainrule bench``.

Measured quiet (nothing else running; each in a process of its own,
medians of 7 steps): the pool's hand-off costs about 90 microseconds, so
at embedding 64 (products of 4-17 million multiply-adds, 0.1-0.4 ms each
in float32) the pool gained little: a ``(1024, 64) @ (64, 256)`` float32
took 0.79 of its one-thread time cut by rows and 0.55 on OpenBLAS's
threads, and the whole step at embedding 64 on two threads 14.8-16.1 ms
with pairs and cuts on the pool, 10.2-12.4 ms with every product on
OpenBLAS's threads (float64: 29-31 ms and 20-23 ms). At embedding 128
and 256 the pool was faster (embedding 256 float32: 325 ms against 362-384
ms), hence :data:`POOL_WORK`.

The machine's load does not change the routing: a process of its own
raises the load average it would read, and a benchmark would measure a
different program on a busy machine than on a user's idle one. On a
crowded machine ``chainrule.set_num_threads(1)`` (or
``OMP_NUM_THREADS=1``) is the user's choice, as with PyTorch.

Switching BLAS's threads needs threadpoolctl (``pip install
'chainrule[threads]'``); without it single products run as NumPy runs them
(stacks are still split). The switch is undone after each product, so code
outside chainrule never sees BLAS on other thread counts.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from ..threads import get_num_threads, register_blas

#: Multiply-adds of one matrix product from which more threads pay, on idle
#: cores (about a ``(1024, 64) @ (64, 64)``): from here to :data:`POOL_WORK`
#: on BLAS's own threads.
MULTITHREAD_WORK = 1 << 22

#: A product with a side (rows, columns or the inner size) shorter than
#: this stays on one thread whatever its size: a language model's head
#: (27 characters wide) gains little from OpenBLAS's threads, whose spinning
#: afterwards slows the pool's next parts (see :data:`POOL_WORK`).
MIN_THREADED_SIDE = 64

#: Multiply-adds of one matrix product from which it is cut by rows over the
#: engine's pool (:func:`split_rows`), and of each of a pair from which the
#: two run at once on it (:func:`matmul_pair`). A hand-off to the pool
#: wakes a sleeping thread (about 90 microseconds on the project's 2-core
#: machine, quiet); OpenBLAS's threads spin for a while after each product
#: and answer at once, so below this size they are faster: ``(1024, 64) @
#: (64, 256)`` float32 0.55 of the one-thread time on them, 0.79 cut by
#: rows on the pool. From here the pool's parts are long enough, and cut
#: by rows the threads never wait for each other inside a product.
POOL_WORK = 1 << 25

#: Multiply-adds of a whole stack of products from which splitting it by
#: batch across threads pays (8.4 million; see the module's measurements).
SPLIT_WORK = 1 << 23

#: Rows of the left matrix per thread from which a large matrix product is
#: cut by rows across the threads (:func:`split_rows`) rather than handed
#: to BLAS's threads.
MIN_SPLIT_ROWS = 32

#: Below these sizes OpenBLAS runs on one thread by itself.
_OPENBLAS_GEMM_SINGLE = 1 << 18
_OPENBLAS_GEMV_SINGLE = 9216

_controller: list[Any] | None = None


def _numpy_blas() -> Any:
    """threadpoolctl's controller of NumPy's own BLAS, or None (no
    threadpoolctl, or a BLAS it cannot drive). Other libraries' BLAS (say
    PyTorch's) are left alone."""
    global _controller
    if _controller is None:
        _controller = []
        try:
            from threadpoolctl import ThreadpoolController

            for lib in ThreadpoolController().lib_controllers:
                if lib.user_api == "blas" and "numpy" in str(lib.filepath):
                    _controller.append(lib)
                    break
        except Exception:  # threadpoolctl missing or unable: products run as NumPy runs them
            pass
    return _controller[0] if _controller else None


def blas_threads() -> int | None:
    """NumPy's BLAS's current thread count, or None when threadpoolctl
    cannot tell."""
    lib = _numpy_blas()
    if lib is None:
        return None
    n = lib.get_num_threads()
    return int(n) if n is not None else None


register_blas(blas_threads)


def _on_blas_threads(n: int, compute: Callable[[], Any]) -> Any:
    """``compute()`` with NumPy's BLAS on ``n`` threads, restored after."""
    lib = _numpy_blas()
    if lib is None:
        return compute()
    threads = lib.get_num_threads()
    if threads is None or threads == n:
        return compute()
    lib.set_num_threads(n)
    try:
        return compute()
    finally:
        lib.set_num_threads(threads)


def _single_threaded(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return _on_blas_threads(1, lambda: a @ b)


# ----------------------------------------------------------------------------
# the thread pool of split stacks
# ----------------------------------------------------------------------------


class _Pool:
    """``threads - 1`` worker threads (the caller does one part itself),
    made on first use and again when the thread count changes."""

    executor: ThreadPoolExecutor | None = None
    threads = 0
    lock = threading.Lock()


def _forget_pool() -> None:
    """In a forked child: the parent's workers do not exist there (a task
    given to them would never run); a new pool is made on first use."""
    _Pool.executor = None
    _Pool.threads = 0
    _Pool.lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_pool)


def _executor(threads: int) -> ThreadPoolExecutor:
    with _Pool.lock:
        if _Pool.executor is None or _Pool.threads != threads:
            if _Pool.executor is not None:
                _Pool.executor.shutdown(wait=False)
            _Pool.executor = ThreadPoolExecutor(threads - 1, thread_name_prefix="chainrule")
            _Pool.threads = threads
        return _Pool.executor


def _stack(a: np.ndarray, b: np.ndarray) -> tuple[tuple[int, ...], int] | None:
    """The batch shape of a stacked ``a @ b`` and the multiply-adds of one
    of its products, or None when it is not a stack this module splits."""
    if a.ndim < 2:
        return None
    if b.ndim == 1:  # a stack of matrix-vector products
        return a.shape[:-2], a.shape[-2] * a.shape[-1]
    work = a.shape[-2] * a.shape[-1] * b.shape[-1]
    batch_a, batch_b = a.shape[:-2], b.shape[:-2]
    if not batch_b:
        return batch_a, work
    if not batch_a:
        return batch_b, work
    if len(batch_a) != len(batch_b):
        return None
    return tuple(max(x, y) for x, y in zip(batch_a, batch_b)), work


def _rows(x: np.ndarray, batch_ndim: int, lo: int, hi: int) -> np.ndarray:
    """The part of operand ``x`` for output rows ``lo:hi`` of the first
    batch axis (all of ``x`` where it is broadcast along that axis)."""
    own = x.ndim - 2 if x.ndim >= 2 else 0
    if own == batch_ndim and x.shape[0] != 1:
        return x[lo:hi]
    return x


def run_parts(rows: int, threads: int, part: Callable[[int, int], None]) -> None:
    """``part(lo, hi)`` for ``min(threads, rows)`` consecutive ranges
    covering ``0:rows``, at once: the first on the calling thread, the
    others on the pool's; NumPy's BLAS on one thread meanwhile (parts call
    NumPy directly, never this module's routing). An error in a part is
    raised here, after every part has finished."""
    parts = min(threads, rows)
    if parts <= 1:  # one part: on this thread, BLAS on one thread as for a split
        _on_blas_threads(1, lambda: part(0, rows))
        return
    bounds = [rows * i // parts for i in range(parts + 1)]

    def compute() -> None:
        pool = _executor(threads)
        futures: list[Future[None]] = [
            pool.submit(part, bounds[k], bounds[k + 1]) for k in range(1, parts)
        ]
        try:
            part(bounds[0], bounds[1])
        finally:
            for future in futures:
                future.result()

    _on_blas_threads(1, compute)


def row_threads(x: np.ndarray, min_bytes: int) -> int:
    """Threads for elementwise work on ``x`` split along its first axis:
    :func:`chainrule.get_num_threads` from ``min_bytes`` on, else 1 (and 1
    without a first axis of two or more to split)."""
    return split_threads(x.shape[0] if x.ndim >= 2 else 1, x.nbytes, min_bytes)


def split_threads(rows: int, nbytes: int, min_bytes: int) -> int:
    """Threads for work on ``nbytes`` of data split into ``rows`` parts at
    most: :func:`chainrule.get_num_threads` from ``min_bytes`` on, else 1."""
    if rows < 2 or nbytes < min_bytes:
        return 1
    return get_num_threads()


def split_matmul(a: np.ndarray, b: np.ndarray, batch: tuple[int, ...], threads: int) -> np.ndarray:
    """``a @ b`` for a stack with batch shape ``batch``, its first batch
    axis cut into ``threads`` parts multiplied at once on the pool's
    threads (BLAS on one thread each): the same products as ``a @ b``."""
    tail = (a.shape[-2],) if b.ndim == 1 else (a.shape[-2], b.shape[-1])
    out = np.empty(batch + tail, dtype=np.result_type(a, b))
    nd = len(batch)

    def part(lo: int, hi: int) -> None:
        np.matmul(_rows(a, nd, lo, hi), _rows(b, nd, lo, hi), out=out[lo:hi])

    run_parts(batch[0], threads, part)
    return out


def _pairable(a: np.ndarray, b: np.ndarray) -> bool:
    return a.ndim == 2 and b.ndim == 2 and a.dtype == b.dtype and a.dtype.kind == "f"


def matmul_pair(
    a: np.ndarray, b: np.ndarray, c: np.ndarray, d: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``(a @ b, c @ d)`` for two independent matrix products (a linear
    layer's two gradients): on two threads, from :data:`POOL_WORK`
    multiply-adds each, the two at once, one on the calling thread and one
    on the pool's, BLAS on one thread each. Each is the very same BLAS call
    as on one thread (the same bits), and neither waits for the other's
    threads inside BLAS. Otherwise one after the other, each routed as
    :func:`matmul` routes it."""
    threads = get_num_threads()
    if threads > 1 and _pairable(a, b) and _pairable(c, d):
        first = a.shape[0] * a.shape[1] * b.shape[1]
        second = c.shape[0] * c.shape[1] * d.shape[1]
        if min(first, second) >= POOL_WORK and threads == 2:
            out: list[np.ndarray] = [a, c]

            def part(lo: int, hi: int) -> None:
                for i in range(lo, hi):
                    out[i] = a @ b if i == 0 else c @ d

            run_parts(2, threads, part)
            return out[0], out[1]
    return matmul(a, b), matmul(c, d)


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b`` on as many threads as pay for its size (see the module)."""
    threads = get_num_threads()
    stacked = a.ndim > 2 or b.ndim > 2
    if threads > 1 and stacked and a.dtype == b.dtype and a.dtype.kind == "f":
        stack = _stack(a, b)
        if stack is not None:
            batch, work = stack
            if (
                len(batch) > 0
                and batch[0] > 1
                and work < MULTITHREAD_WORK
                and work * int(np.prod(batch)) >= SPLIT_WORK
            ):
                return split_matmul(a, b, batch, threads)
    if b.ndim == 1:  # matrix-vector
        if a.shape[-1] * (a.shape[-2] if a.ndim > 1 else 1) <= _OPENBLAS_GEMV_SINGLE:
            return a @ b
        return _single_threaded(a, b)
    rows = a.shape[-2] if a.ndim > 1 else 1
    work = rows * a.shape[-1] * b.shape[-1]
    if work <= _OPENBLAS_GEMM_SINGLE:
        return a @ b
    if work >= MULTITHREAD_WORK and min(rows, a.shape[-1], b.shape[-1]) >= MIN_THREADED_SIDE:
        return _large(a, b, threads)
    return _single_threaded(a, b)


def row_split_threads(a: np.ndarray, b: np.ndarray) -> int:
    """The threads :func:`matmul` cuts ``a @ b`` into by rows
    (:func:`split_rows`), or 1 when it does not: two float matrices of one
    dtype, :data:`POOL_WORK` multiply-adds or more (and
    :data:`MULTITHREAD_WORK`), sides of :data:`MIN_THREADED_SIDE` or more
    and :data:`MIN_SPLIT_ROWS` rows per thread."""
    threads = get_num_threads()
    if threads == 1 or a.ndim != 2 or b.ndim != 2 or not _pairable(a, b):
        return 1
    work = a.shape[0] * a.shape[1] * b.shape[1]
    if (
        work > _OPENBLAS_GEMM_SINGLE
        and work >= max(POOL_WORK, MULTITHREAD_WORK)
        and min(*a.shape, b.shape[1]) >= MIN_THREADED_SIDE
        and a.shape[0] >= MIN_SPLIT_ROWS * threads
    ):
        return threads
    return 1


def _large(a: np.ndarray, b: np.ndarray, threads: int) -> np.ndarray:
    """A product of :data:`MULTITHREAD_WORK` or more on ``threads``
    threads: a matrix product of :data:`POOL_WORK` or more with rows enough
    cut by rows (:func:`split_rows`), anything else on BLAS's own threads."""
    if threads == 1:
        return _single_threaded(a, b)
    if row_split_threads(a, b) > 1:
        return split_rows(a, b, threads)
    return _on_blas_threads(threads, lambda: a @ b)


def split_rows(a: np.ndarray, b: np.ndarray, threads: int) -> np.ndarray:
    """``a @ b`` for matrices, the rows of ``a`` cut into ``threads`` parts
    multiplied at once on the pool's threads, BLAS on one thread each."""
    out = np.empty((a.shape[0], b.shape[1]), dtype=a.dtype)

    def part(lo: int, hi: int) -> None:
        np.matmul(a[lo:hi], b, out=out[lo:hi])

    run_parts(a.shape[0], threads, part)
    return out
