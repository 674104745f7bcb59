"""Batch normalization, as ``torch.nn.functional.batch_norm``.

Each channel (axis 1) is normalized over the batch and every other axis:
``xhat = (x - mean) * r`` with ``r = 1 / sqrt(var + eps)`` (the biased
variance), then ``y = xhat * weight + bias``. In training the statistics
are the batch's own, so every input moves every output of its channel; the
VJP is layer norm's with the axes changed (the textbook closed form, ``m``
the number of entries per channel)::

    dx = r * (gh - mean(gh) - xhat * mean(gh * xhat)),  gh = g * weight
    dweight = sum(g * xhat),  dbias = sum(g)

and the running statistics move towards the batch's, ``running = (1 -
momentum) * running + momentum * batch``, with the unbiased variance
(``var * m / (m - 1)``), as PyTorch's. In evaluation the running
statistics stand in for the batch's, and ``y`` is an affine map of ``x``,
built from the elementwise ops.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .tensor import Tensor, lift, make


def _batch_norm_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any, ...]:
    xhat, r, axes, eps = out._ctx
    x = out._prev[0]
    if M.graph:  # the statistics as nodes: their own derivatives count
        xv = M.of(x)
        xc = xv - xv.mean(axis=axes, keepdims=True)
        r = 1.0 / M.sqrt((xc * xc).mean(axis=axes, keepdims=True) + eps)
        xhat = xc * r
    grads: list[Any] = [None]
    gh = g
    if len(out._prev) > 1:
        w = M.of(out._prev[1])
        grads.append((g * xhat).sum(axis=axes))
        if len(out._prev) > 2:
            grads.append(g.sum(axis=axes))
        gh = g * w.reshape(r.shape)
    if x.requires_grad:
        mean_gh = gh.mean(axis=axes, keepdims=True)
        grads[0] = r * (gh - mean_gh - xhat * (gh * xhat).mean(axis=axes, keepdims=True))
    return tuple(grads)


def _check(
    x: np.ndarray, stats: dict[str, Any], params: dict[str, Tensor | None]
) -> tuple[int, ...]:
    if x.ndim < 2:
        raise ValueError(f"batch_norm: expected input (N, C, ...), got shape {x.shape}")
    C = x.shape[1]
    for name, value in {
        **stats,
        **{k: v.data if v is not None else None for k, v in params.items()},
    }.items():
        if value is not None and np.shape(value) != (C,):
            raise ValueError(
                f"batch_norm: {name} of shape {np.shape(value)} does not fit input {x.shape} "
                f"({C} channels)"
            )
    for name, p in params.items():
        if p is not None and p.data.dtype != x.dtype:
            raise TypeError(f"batch_norm: {name} is {p.data.dtype} but the input is {x.dtype}")
    return (1, C) + (1,) * (x.ndim - 2)


def batch_norm(
    input: Any,  # noqa: A002  (PyTorch's name)
    running_mean: np.ndarray | None,
    running_var: np.ndarray | None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Normalize each channel of ``input`` ``(N, C, ...)``, then scale by
    ``weight`` and shift by ``bias`` (``(C,)`` each, optional), as
    ``torch.nn.functional.batch_norm``.

    ``training``: with the batch's mean and (biased) variance, one node;
    ``running_mean`` and ``running_var`` (arrays, or None) are updated in
    place. Otherwise with the running statistics, which must be given.
    """
    x = lift(input, "batch_norm")
    xd = x.data
    shape = _check(
        xd,
        {"running_mean": running_mean, "running_var": running_var},
        {"weight": weight, "bias": bias},
    )
    if bias is not None and weight is None:
        raise ValueError("batch_norm: a bias needs a weight")
    axes = (0, *range(2, xd.ndim))
    if not training:
        if running_mean is None or running_var is None:
            raise ValueError("batch_norm: evaluation needs running_mean and running_var")
        mu = np.asarray(running_mean, dtype=xd.dtype).reshape(shape)
        r = (1.0 / np.sqrt(np.asarray(running_var, dtype=xd.dtype) + eps)).reshape(shape)
        y = (x - mu) * r
        if weight is not None:
            y = y * weight.reshape(shape)
            if bias is not None:
                y = y + bias.reshape(shape)
        return y
    count = xd.size // xd.shape[1]
    if count < 2:
        raise ValueError(
            f"batch_norm: training needs more than one value per channel, got input {xd.shape}"
        )
    mu = xd.mean(axis=axes, keepdims=True)
    xc = xd - mu
    var = (xc * xc).mean(axis=axes, keepdims=True)
    r = 1.0 / np.sqrt(var + eps)
    xhat = xc * r
    if running_mean is not None:
        running_mean *= 1.0 - momentum
        running_mean += momentum * mu.reshape(-1)
    if running_var is not None:
        running_var *= 1.0 - momentum
        running_var += (momentum * count / (count - 1)) * var.reshape(-1)
    ctx = (xhat, r, axes, eps)
    if weight is None:
        return make(xhat, (x,), _batch_norm_vjp, ctx)
    y = xhat * weight.data.reshape(shape)
    if bias is None:
        return make(y, (x, weight), _batch_norm_vjp, ctx)
    y += bias.data.reshape(shape)
    return make(y, (x, weight, bias), _batch_norm_vjp, ctx)


__all__ = ["batch_norm"]
