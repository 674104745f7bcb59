"""Matrix products on as many BLAS threads as pay.

OpenBLAS (NumPy's BLAS) splits a product over all its threads once it
exceeds a small fixed size (``m n k`` above 262,144 for a matrix product,
``m n`` above 9,216 for a matrix-vector one). For the products of a small
transformer (a ``(2048, 16) @ (16, 64)``) waking the other threads costs
more than the product: on a loaded 2-core machine ten times more. PyTorch
decides per op how many threads a product gets; this module does the same
for the Tensor engine: a product below :data:`MULTITHREAD_WORK` multiply-adds
per matrix runs on one thread, a larger one on as many as BLAS is allowed
(``OPENBLAS_NUM_THREADS``, threadpoolctl's limits) -- unless the machine's
other cores are busy. Then a BLAS thread waits for a core while the others
wait for it, and two threads take several times as long as one (measured:
a ``(2048, 128) @ (128, 512)`` float32 product 2.4 ms on one thread and
17 ms on two at a load average of 6 on 2 cores). So, as OpenMP's dynamic
adjustment (``OMP_DYNAMIC``) does, the engine asks the system's load
average (``os.getloadavg``, read at most once a second) and uses more
threads only while the other cores are mostly idle.

Switching needs threadpoolctl (``pip install 'chainrule[threads]'``); without
it every product runs as NumPy runs it. The switch is undone after each
product, so code outside chainrule never sees BLAS on fewer threads.
"""

from __future__ import annotations

import os
import time
from typing import Any

import numpy as np

#: Multiply-adds of one matrix product from which more threads pay, on idle
#: cores (about a ``(2048, 64) @ (64, 128)``; measured on the project's
#: 2-core machine: 0.8 ms on one thread, 0.57 ms on two).
MULTITHREAD_WORK = 1 << 24

#: Below these sizes OpenBLAS runs on one thread by itself.
_OPENBLAS_GEMM_SINGLE = 1 << 18
_OPENBLAS_GEMV_SINGLE = 9216

_controller: list[Any] | None = None
_idle = [True, -1.0]  # other cores mostly idle?, when it was read


def _others_idle() -> bool:
    """True while the load average leaves at least half a core free beside
    this process (and where the system does not say)."""
    now = time.monotonic()
    if now - _idle[1] >= 1.0:
        try:
            load = os.getloadavg()[0]
        except (OSError, AttributeError):  # not on this system: assume idle
            load = 0.0
        _idle[0] = load <= (os.cpu_count() or 1) - 0.5
        _idle[1] = now
    return bool(_idle[0])


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


def _single_threaded(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    lib = _numpy_blas()
    if lib is None:
        return a @ b
    threads = lib.get_num_threads()
    if threads is None or threads <= 1:
        return a @ b
    lib.set_num_threads(1)
    try:
        return a @ b
    finally:
        lib.set_num_threads(threads)


def matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a @ b``, on one BLAS thread when each matrix product is too small
    for more to pay."""
    if b.ndim == 1:  # matrix-vector
        if a.shape[-1] * (a.shape[-2] if a.ndim > 1 else 1) <= _OPENBLAS_GEMV_SINGLE:
            return a @ b
        return _single_threaded(a, b)
    work = a.shape[-1] * b.shape[-1] * (a.shape[-2] if a.ndim > 1 else 1)
    if work <= _OPENBLAS_GEMM_SINGLE or (work >= MULTITHREAD_WORK and _others_idle()):
        return a @ b
    return _single_threaded(a, b)
