"""A transformer's feed-forward block, ``fc2(relu(fc1(x)))`` without
biases, as one node.

Two linear layers and a ReLU as three nodes give the same numbers. As one
node, when both products are cut by rows across threads
(:func:`chainrule.tensor.blas.split_rows`), each thread takes its rows
through the first product, the ReLU and the second product in one go: one
hand-off to the pool instead of three (the ReLU of ``gpt-sizes``' hidden
layer is split too), each about 0.2 ms on the project's 2-core machine;
and the ReLU is done in place in the first product's output, which no one
else sees. The rows are the ones :func:`~chainrule.tensor.blas.split_rows`
gives each thread, so each product is the very same BLAS call as there.
The backward pass is the three nodes' own VJPs, in their order.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .blas import matmul, row_split_threads, run_parts
from .elementwise import relu, threshold_backward
from .tensor import Tensor, make


def _feed_forward_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any, ...]:
    x, w1, w2 = (M.of(t) for t in out._prev)
    x2 = x.reshape(-1, x.shape[-1])
    if M.graph:  # the hidden layer as a node: its own derivative counts
        h = relu(M.matmul(x2, w1.T))
        mask = h.data
    else:
        h = mask = out._ctx
    g2 = g.reshape(-1, w2.shape[0])
    gh, gw2 = M.matmul_pair(g2, w2, g2.T, h)  # fc2's VJP
    # the ReLU's; on arrays over gh, a product no one else sees
    gh = M.threshold(gh, mask) if M.graph else threshold_backward(gh, mask, overwrite=True)
    gx, gw1 = M.matmul_pair(gh, w1, gh.T, x2)  # fc1's
    return gx.reshape(x.shape), gw1, gw2


def feed_forward(x: Tensor, w1: Tensor, w2: Tensor) -> Tensor:
    """``relu(x @ w1^T) @ w2^T`` over the last axis of ``x`` (``w1`` is
    ``(hidden, in)``, ``w2`` ``(out, hidden)``, PyTorch's layout), one node."""
    xd, a, b = x.data, w1.data, w2.data
    x2 = xd.reshape(-1, xd.shape[-1])
    h = np.empty((x2.shape[0], a.shape[0]), dtype=np.result_type(xd, a))
    threads = min(row_split_threads(x2, a.T), row_split_threads(h, b.T))
    if threads > 1:
        y = np.empty((x2.shape[0], b.shape[0]), dtype=h.dtype)

        def part(lo: int, hi: int) -> None:
            hp = h[lo:hi]
            np.matmul(x2[lo:hi], a.T, out=hp)
            np.maximum(hp, 0.0, out=hp)
            np.matmul(hp, b.T, out=y[lo:hi])

        run_parts(x2.shape[0], threads, part)
    else:
        h = matmul(x2, a.T)
        np.maximum(h, 0.0, out=h)
        y = matmul(h, b.T)
    return make(y.reshape(*xd.shape[:-1], b.shape[0]), (x, w1, w2), _feed_forward_vjp, h)


__all__ = ["feed_forward"]
