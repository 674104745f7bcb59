"""The fused operations networks are made of: softmax, log-softmax,
cross-entropy, RMS and layer normalization, masking and attention.

Each could be written with the elementwise ops, at the price of many nodes
(a softmax is six) and numerical trouble (``exp`` of a large logit
overflows). As one node each they are stable — the maximum is subtracted
before ``exp`` — and cheap, and their VJPs are the textbook closed forms:

* softmax ``p``: ``dx = p * (g - sum(g * p))``
* log-softmax ``y``: ``dx = g - exp(y) * sum(g)``
* cross-entropy of logits and targets: ``dx = (softmax(x) - onehot) * g / n``
* RMS norm ``y = x * r`` with ``r = 1/sqrt(mean(x^2) + eps)``:
  ``dx = r * (g - x * r^2 * mean(g * x))``
* layer norm ``y = xhat``: ``dx = r * (g - mean(g) - xhat * mean(g * xhat))``
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ..random_state import tensor_generator
from .blas import matmul as _mm
from .blas import run_parts, split_threads
from .rows import _FLOOR, _ones, row_dot, row_mean, shifted_exp
from .tensor import Tensor, make

#: Bytes of an attention's weights (batch x heads x queries x keys) from
#: which the whole attention -- scores, softmax, the product with the
#: values, and the same for its backward pass -- is split by batch across
#: :func:`chainrule.get_num_threads` threads, each part start to end on one
#: thread: one hand-off to the pool each way (about 80 microseconds on the
#: project's 2-core machine), where splitting each product and the softmax
#: on its own took 3 forward and 4-5 backward. 2 MB: ``gpt-sizes``' float32
#: attention at embedding 128, ``(32, 4, 64, 64)``, and up. Not at embedding
#: 64 (512 KB in float32, 1 MB in float64): there the step's products run on
#: OpenBLAS's threads, which spin after each and take the core a pool
#: thread would get (see :mod:`chainrule.tensor.blas`): on a quiet machine
#: the step took 10.2-12.4 ms (float32) that way, unsplit, against
#: 14.8-16.1 ms with the attention and the products on the pool.
SPLIT_SCORE_BYTES = 1 << 21

# ----------------------------------------------------------------------------
# softmax and log-softmax
# ----------------------------------------------------------------------------


def _last(axis: int, ndim: int) -> bool:
    return axis == -1 or axis == ndim - 1


def _axis(axis: Any, ndim: int, op: str) -> int:
    """``axis`` checked (an int within ``ndim`` axes; a 0-d tensor's one
    axis is -1 or 0, as PyTorch's dim)."""
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise TypeError(f"{op}: axis must be an int, got {axis!r}")
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        raise ValueError(f"{op}: axis {axis} is out of range for a {ndim}-d tensor")
    return int(axis)


def _on_one_element(f: Any, x: Tensor, axis: int) -> Tensor:
    """``f`` of a 0-d tensor: along its one axis, as a 1-element vector."""
    from .shape import reshape

    return reshape(f(reshape(x, (1,)), axis), ())


def _softmax_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    p = M.of(out)
    gp = g * p
    if _last(out._ctx, p.ndim):
        gp -= p * M.row_sum(gp)  # in place on arrays; a new node on Tensors
        return (gp,)
    return (gp - p * gp.sum(axis=out._ctx, keepdims=True),)


def softmax(x: Tensor, axis: int = -1) -> Tensor:
    """``exp(x) / sum(exp(x))`` along ``axis``, computed without overflow."""
    xd = x.data
    axis = _axis(axis, xd.ndim, "softmax")
    if xd.ndim == 0:
        return _on_one_element(softmax, x, axis)
    if xd.size == 0:  # no entries: an empty result, as PyTorch (no maximum to shift by)
        return make(xd.copy(), (x,), _softmax_vjp, axis)
    if _last(axis, xd.ndim):
        e, s, _ = shifted_exp(xd)
    else:
        e = np.exp(xd - xd.max(axis=axis, keepdims=True))
        s = e.sum(axis=axis, keepdims=True)
    e /= s
    return make(e, (x,), _softmax_vjp, axis)


def _log_softmax_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    y = M.of(out)
    if _last(out._ctx, y.ndim):
        return (g - M.exp(y) * M.row_sum(g),)
    return (g - M.exp(y) * g.sum(axis=out._ctx, keepdims=True),)


def log_softmax(x: Tensor, axis: int = -1) -> Tensor:
    """``x - log(sum(exp(x)))`` along ``axis``, computed without overflow."""
    xd = x.data
    axis = _axis(axis, xd.ndim, "log_softmax")
    if xd.ndim == 0:
        return _on_one_element(log_softmax, x, axis)
    if xd.size == 0:  # no entries: an empty result, as PyTorch
        return make(xd.copy(), (x,), _log_softmax_vjp, axis)
    if _last(axis, xd.ndim):
        _, s, shift = shifted_exp(xd)
        y = xd - shift
    else:
        y = xd - xd.max(axis=axis, keepdims=True)
        s = np.exp(y).sum(axis=axis, keepdims=True)
    y -= np.log(s)
    return make(y, (x,), _log_softmax_vjp, axis)


# ----------------------------------------------------------------------------
# cross-entropy
# ----------------------------------------------------------------------------


def _cross_entropy_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    e, s, picked, valid, n, reduction = out._ctx
    x = out._prev[0]
    # softmax(x) - onehot(target): from the forward's exponentials on
    # arrays, recomputed as a node on Tensors (its own derivative counts)
    dx = M.softmax(x.reshape(-1, x.data.shape[-1])) if M.graph else e / s
    dx = M.add_at(dx, (np.arange(len(picked)), picked), -1.0)
    if reduction == "mean":
        # nothing counted: a nan loss but a zero gradient, as PyTorch
        dx *= g / n if n else 0.0
    elif reduction == "sum":
        dx *= g
    else:
        dx *= g.reshape(-1, 1)
    if valid is not None:  # after g: an ignored row gets 0 even from a nan g
        dx = M.fill(dx, ~valid, 0.0)
    return (dx.reshape(x.data.shape),)


def cross_entropy(
    logits: Tensor,
    targets: Any,
    *,
    reduction: str = "mean",
    ignore_index: int | None = -100,
) -> Tensor:
    """The negative log-likelihood of integer ``targets`` under
    ``softmax(logits)``, as ``torch.nn.functional.cross_entropy``.

    ``logits`` has the classes on its *last* axis, shape ``(..., C)``, and
    ``targets`` the shape ``(...)``. Targets equal to ``ignore_index`` count
    for nothing (padding); ``reduction`` is ``"mean"`` over the counted
    targets, ``"sum"`` or ``"none"``.
    """
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"cross_entropy: reduction must be mean, sum or none, got {reduction!r}")
    x = logits.data
    t = np.asarray(targets.data if isinstance(targets, Tensor) else targets)
    if t.dtype.kind not in "iu":
        raise TypeError(f"cross_entropy: targets must be integers, got {t.dtype}")
    if x.ndim == 0 or t.shape != x.shape[:-1]:
        raise ValueError(f"cross_entropy: logits {x.shape} need targets of shape {x.shape[:-1]}")
    n_classes = x.shape[-1]
    x2 = x.reshape(-1, n_classes)
    t = t.reshape(-1)
    valid = None
    if ignore_index is not None:
        mask = t != ignore_index
        if not mask.all():
            valid = mask
            t = np.where(mask, t, 0)
    if t.size and (t.min() < 0 or t.max() >= n_classes):
        raise IndexError(f"cross_entropy: target out of range for {n_classes} classes")
    e, s, shift = shifted_exp(x2)
    # -log_softmax at the target, in log_softmax's order of operations: the
    # shift cancels exactly before the log-sum is added (1e300-sized logits).
    picked = x2[np.arange(x2.shape[0]), t]
    losses = np.log(s).reshape(-1) - (picked - np.reshape(shift, -1))
    n = x2.shape[0]
    if valid is not None:
        losses = np.where(valid, losses, 0.0).astype(x.dtype, copy=False)
        n = int(valid.sum())
    if reduction == "mean":
        with np.errstate(invalid="ignore"):
            y = np.asarray(losses.sum() / n if n else losses.sum() * np.nan)
    elif reduction == "sum":
        y = np.asarray(losses.sum())
    else:
        y = losses.reshape(x.shape[:-1])
    return make(y, (logits,), _cross_entropy_vjp, (e, s, t, valid, n, reduction))


# ----------------------------------------------------------------------------
# normalization
# ----------------------------------------------------------------------------


def rms_norm_backward(g: np.ndarray, x: np.ndarray, r: np.ndarray) -> np.ndarray:
    """The gradient of ``x * r`` (``r = 1 / sqrt(mean(x^2) + eps)`` per row)
    for the output gradient ``g``: ``r * (g - x * (r^2 * mean(g * x)))``,
    in one temporary, three passes over it (``r^2 * mean(g * x)`` is one
    number per row, from the rows' dot products)."""
    c = row_dot(g, x)
    c *= r * r / x.shape[-1]
    t = x * c
    np.subtract(g, t, out=t)
    t *= r
    return t


def _rms_norm_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any, ...]:
    r, eps = out._ctx
    x = M.of(out._prev[0])
    if M.graph:  # r as a node: its own derivative counts
        r = 1.0 / M.sqrt(M.row_mean(x * x) + eps)
    if len(out._prev) == 2:
        w = M.of(out._prev[1])
        gw = (g * (x * r)).reshape(-1, w.shape[-1]).sum(axis=0).reshape(w.shape)
        return M.rms_norm_backward(g * w, x, r), gw
    return (M.rms_norm_backward(g, x, r),)


def rms_norm(x: Tensor, weight: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """``x / sqrt(mean(x^2) + eps)`` over the last axis, times ``weight``
    when given (RMSNorm, as in microgpt and LLaMA)."""
    xd = x.data
    r = 1.0 / np.sqrt(row_dot(xd, xd) / xd.shape[-1] + eps)
    y = xd * r
    if weight is None:
        return make(y, (x,), _rms_norm_vjp, (r, eps))
    y *= weight.data
    return make(y, (x, weight), _rms_norm_vjp, (r, eps))


def _layer_norm_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any, ...]:
    xhat, r, eps = out._ctx
    if M.graph:  # xhat and r as nodes: their own derivatives count
        x = M.of(out._prev[0])
        xc = x - M.row_mean(x)
        r = 1.0 / M.sqrt(M.row_mean(xc * xc) + eps)
        xhat = xc * r
    grads: list[Any] = [None]
    gh = g
    if len(out._prev) > 1:
        w = M.of(out._prev[1])
        rows = (-1, w.shape[-1])
        grads.append((g * xhat).reshape(rows).sum(axis=0).reshape(w.shape))
        if len(out._prev) > 2:
            grads.append(g.reshape(rows).sum(axis=0))
        gh = g * w
    grads[0] = r * (gh - M.row_mean(gh) - xhat * M.row_mean(gh * xhat))
    return tuple(grads)


def layer_norm(
    x: Tensor, weight: Tensor | None = None, bias: Tensor | None = None, eps: float = 1e-5
) -> Tensor:
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the last axis
    (biased variance, as PyTorch's LayerNorm)."""
    xd = x.data
    xc = xd - row_mean(xd)
    r = 1.0 / np.sqrt(row_mean(xc * xc) + eps)
    xhat = xc * r
    if weight is None:
        if bias is not None:
            raise ValueError("layer_norm: a bias needs a weight")
        return make(xhat, (x,), _layer_norm_vjp, (xhat, r, eps))
    y = xhat * weight.data
    if bias is None:
        return make(y, (x, weight), _layer_norm_vjp, (xhat, r, eps))
    y += bias.data
    return make(y, (x, weight, bias), _layer_norm_vjp, (xhat, r, eps))


# ----------------------------------------------------------------------------
# masking and attention
# ----------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)
def causal_mask(n_queries: int, n_keys: int | None = None) -> np.ndarray:
    """Boolean ``(n_queries, n_keys)`` array, True where a query must not
    see a key: key ``j`` after query ``i`` (``j > i``). Read-only, cached."""
    mask = np.triu(np.ones((n_queries, n_keys or n_queries), dtype=bool), k=1)
    mask.setflags(write=False)
    return mask


@functools.lru_cache(maxsize=64)
def _additive_mask(n_queries: int, n_keys: int, dtype: np.dtype, first: int = 0) -> np.ndarray:
    """``-inf`` where a query must not see a key, 0 elsewhere, the queries
    numbered from ``first`` (a block of them: key ``j`` after query
    ``first + i``). Read-only, cached."""
    hidden = np.triu(np.ones((n_queries, n_keys), dtype=bool), k=1 + first)
    mask = np.where(hidden, -np.inf, 0.0).astype(dtype)
    mask.setflags(write=False)
    return mask


def _masked_fill_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    return (M.astype(M.where(out._ctx, 0.0, g), g.dtype),)


def masked_fill(x: Tensor, mask: Any, value: float) -> Tensor:
    """``x`` with ``value`` wherever ``mask`` (broadcast to ``x``) is True;
    those places get no gradient. ``masked_fill(scores, causal_mask(T),
    -inf)`` is causal masking."""
    m = np.asarray(mask.data if isinstance(mask, Tensor) else mask, dtype=bool)
    y = np.where(m, value, x.data).astype(x.data.dtype, copy=False)
    if y.shape != x.data.shape:
        raise ValueError(f"masked_fill: mask {m.shape} does not broadcast to {x.data.shape}")
    return make(y, (x,), _masked_fill_vjp, m)


def _like(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A new array of ``shape`` laid out in memory as ``x`` is when ``x``
    is a head-split view ``(B, T, H, d) -> (B, H, T, d)`` (merging its
    heads back is then free), else C-ordered."""
    if x.ndim == 4 and x.transpose(0, 2, 1, 3).flags.c_contiguous:
        memory = np.empty((shape[0], shape[2], shape[1], shape[3]), x.dtype)
        return memory.transpose(0, 2, 1, 3)
    return np.empty(shape, x.dtype)


def _scores(
    q: np.ndarray, k: np.ndarray, scale: float, causal: bool, out: np.ndarray, first: int = 0
) -> None:
    """``(q * scale) k^T`` (masked when ``causal``, the queries numbered
    from ``first``) into ``out``: the scale on the queries, a quarter of
    the scores' size at 128 keys of 32 dimensions, not on the scores."""
    np.matmul(q * scale, k.swapaxes(-1, -2), out=out)
    if causal:
        out += _additive_mask(out.shape[-2], out.shape[-1], out.dtype, first)


#: Queries from which a causal attention is done in two halves: the first
#: half of the queries sees only the first half of the keys, so a quarter
#: of the score-sized work (products, exponentials, the backward's) is
#: never done; its weights are zeros. Measured (one thread, forward and
#: backward, medians of 15, load 3.6 at the highest priority): 0.88 of the
#: whole's time at ``(16, 8, 128, 32)`` float32, 0.84 float64; at 64
#: queries, ``(32, 4, 64, 32)``, 1.01-1.10 (the blocks' strided views cost
#: more than the quarter saves).
CAUSAL_HALVES_FROM = 128


def _blocks(n_queries: int, n_keys: int, causal: bool) -> list[tuple[slice, slice]]:
    """The (queries, keys) blocks of an attention's weights to compute: the
    whole, or for a causal one of :data:`CAUSAL_HALVES_FROM` queries or
    more, the second half of the queries with every key first, then the
    first half with the first half of the keys."""
    if not causal or n_queries != n_keys or n_queries < CAUSAL_HALVES_FROM:
        return [(slice(0, n_queries), slice(0, n_keys))]
    h = n_queries // 2
    return [(slice(h, n_queries), slice(0, n_keys)), (slice(0, h), slice(0, h))]


#: How far (natural log) below its matrix's maximum score a row's largest
#: score may lie for the matrix's one shift to serve the row: its
#: exponentials then sum to ``exp(-18.4) = 1e-8`` or more (the small ones
#: keep their precision); further below, the matrix is shifted row by row.
SHARED_SHIFT_RANGE = float(-np.log(_FLOOR))


def _row_floor(s: np.ndarray, first: int) -> np.ndarray:
    """A lower bound of each row's largest visible score, per row: the
    score of key 0 (which every query sees), and of the query's own key
    (the diagonal from key ``first``) when every query has it."""
    floor = s[..., 0]
    if s.shape[-1] - first == s.shape[-2]:
        floor = np.maximum(floor, np.diagonal(s, offset=first, axis1=-2, axis2=-1))
    return floor


def _softmax_entries(s: np.ndarray, first: int) -> None:
    """``s`` replaced by its softmax over the last axis, in place, for a
    stack of score matrices (the queries numbered from ``first``).

    Each matrix (a batch entry's head) is shifted by its own maximum (one
    reduction and one subtraction over a long run of memory: a maximum
    and a subtraction per short row cost half the exponentials) when
    every row's largest score is within :data:`SHARED_SHIFT_RANGE` of it,
    as a cheap lower bound (:func:`_row_floor`) shows before the
    exponentials; otherwise (a trained or diverging model's scores spread
    wide, or inf or nan) the matrix is shifted row by row. Decided matrix
    by matrix, so a part of the batch gets the very numbers the whole
    does, and nothing is computed twice."""
    shift = s.max(axis=(-2, -1), keepdims=True)
    floor = _row_floor(s, first).min(axis=-1)[..., None, None]
    with np.errstate(invalid="ignore"):  # inf - inf: a nan row, as PyTorch's
        by_rows = ~np.isfinite(shift) | ~(floor >= shift - SHARED_SHIFT_RANGE)
        if by_rows.any():
            shift = np.repeat(shift, s.shape[-2], axis=-2)
            bad = by_rows[..., 0, 0]
            shift[bad] = s[bad].max(axis=-1, keepdims=True)
        s -= shift
    with np.errstate(over="ignore"):
        np.exp(s, out=s)
    s /= np.matmul(s, _ones(s.shape[-1], s.dtype))[..., None]


def _fusable(q: np.ndarray, k: np.ndarray, v: np.ndarray) -> bool:
    """Whether ``q``, ``k`` and ``v`` are stacks of one batch shape (no
    broadcasting) of one float dtype: the attention done per batch part."""
    return (
        q.ndim >= 3
        and q.shape[:-2] == k.shape[:-2] == v.shape[:-2]
        and q.dtype == k.dtype == v.dtype
        and q.dtype.kind == "f"
    )


def _attention_threads(q: np.ndarray, n_keys: int) -> int:
    """Threads for an attention of queries ``q`` over ``n_keys`` keys: 1
    below :data:`SPLIT_SCORE_BYTES` of weights (batch x heads x queries x
    keys)."""
    return split_threads(q.shape[0], q[..., 0].nbytes * n_keys, SPLIT_SCORE_BYTES)


def _weights(q: np.ndarray, blocks: list[tuple[slice, slice]]) -> tuple[np.ndarray, ...]:
    """Room for an attention's weights: one array per block of
    :func:`_blocks`, each contiguous (the operations on a block that is a
    strided view of the whole, rows of 64 in rows of 128, took twice as
    long; the upper right quarter of a causal one, never computed, is not
    stored)."""
    batch = q.shape[:-2]
    return tuple(
        np.empty((*batch, rows.stop - rows.start, keys.stop - keys.start), dtype=q.dtype)
        for rows, keys in blocks
    )


def _attention_forward(
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    scale: float,
    causal: bool,
    y: np.ndarray | None = None,
) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """The output (into ``y`` when given) and the attention weights, block
    by block (:func:`_weights`), each part of the batch (scores, softmax,
    product with ``v``) done start to end on one thread: one hand-off to
    the pool for the whole forward."""
    if y is None:
        y = _like(q, (*q.shape[:-2], q.shape[-2], v.shape[-1]))
    blocks = _blocks(q.shape[-2], k.shape[-2], causal)
    weights = _weights(q, blocks)

    def part(lo: int, hi: int) -> None:
        for (rows, keys), p in zip(blocks, weights):
            sp = p[lo:hi]
            qp, kp = q[lo:hi, ..., rows, :], k[lo:hi, ..., keys, :]
            _scores(qp, kp, scale, causal, sp, rows.start)
            _softmax_entries(sp, rows.start)
            np.matmul(sp, v[lo:hi, ..., keys, :], out=y[lo:hi, ..., rows, :])

    run_parts(q.shape[0], _attention_threads(q, k.shape[-2]), part)
    return y, weights


def _attention_backward_parts(
    g: np.ndarray,
    q: np.ndarray,
    k: np.ndarray,
    v: np.ndarray,
    weights: tuple[np.ndarray, ...],
    scale: float,
    out: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    causal: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`attention_backward` on arrays (into ``out`` when given), each
    part of the batch start to end on one thread (one hand-off), the
    score-sized temporary one per part; for a ``causal`` one, only the
    blocks of the weights the forward computed (:func:`_blocks`), as
    :func:`_attention_forward` keeps them."""
    gq, gk, gv = out or (_like(q, q.shape), _like(k, k.shape), _like(v, v.shape))
    blocks = _blocks(q.shape[-2], k.shape[-2], causal)

    def part(lo: int, hi: int) -> None:
        # the first block has every key: it writes gv and gk, later ones add
        for n, ((rows, keys), p) in enumerate(zip(blocks, weights)):
            pp, gp = p[lo:hi], g[lo:hi, ..., rows, :]
            gvp, gkp = gv[lo:hi, ..., keys, :], gk[lo:hi, ..., keys, :]
            qp, kp = q[lo:hi, ..., rows, :], k[lo:hi, ..., keys, :]
            if n == 0:
                np.matmul(pp.swapaxes(-1, -2), gp, out=gvp)
            else:
                gvp += np.matmul(pp.swapaxes(-1, -2), gp)
            # softmax's VJP times the scale, p * (dp - rowdot(dp, p)), with
            # the scale on g (a quarter of dp's size): two passes over dp
            gs = np.matmul(gp * scale, v[lo:hi, ..., keys, :].swapaxes(-1, -2))
            gs -= row_dot(gs, pp)
            gs *= pp
            np.matmul(gs, kp, out=gq[lo:hi, ..., rows, :])
            if n == 0:
                np.matmul(gs.swapaxes(-1, -2), qp, out=gkp)
            else:
                gkp += np.matmul(gs.swapaxes(-1, -2), qp)

    run_parts(q.shape[0], _attention_threads(q, k.shape[-2]), part)
    return gq, gk, gv


def _attention_weights(s: np.ndarray) -> np.ndarray:
    """``softmax(s)`` over the last axis (a new array)."""
    p, total, _ = shifted_exp(s)
    p /= total
    return p


def attention_backward(
    M: Any, g: Any, q: Any, k: Any, v: Any, p: Any, scale: float, causal: bool = False
) -> tuple[Any, Any, Any]:
    """The gradients of ``softmax(q k^T * scale) v`` (``p`` the softmax, or
    :func:`_attention_forward`'s blocks of it) for the output gradient
    ``g``: ``dv = p^T g``; the scores get softmax's ``p * (dp - sum(dp *
    p))`` with ``dp = g v^T``, times ``scale``; then ``dq = ds k`` and ``dk
    = ds^T q``. On arrays the score-sized arrays are updated in place: one
    temporary of that size."""
    if isinstance(p, tuple):  # the blocks of a fused forward (arrays)
        return _attention_backward_parts(g, q, k, v, p, scale, causal=causal)
    gv = M.matmul(p.swapaxes(-1, -2), g)
    gs = M.matmul(g, v.swapaxes(-1, -2))
    gs *= p
    gs -= p * M.row_sum(gs)
    gs *= scale
    gq = M.matmul(gs, k)
    gk = M.matmul(gs.swapaxes(-1, -2), q)
    return gq, gk, gv


def _attention_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any, ...]:
    p, scale, causal = out._ctx
    q, k, v = (M.of(t) for t in out._prev)
    if M.graph:  # the attention weights as nodes: their own derivatives count
        s = M.matmul(q, k.swapaxes(-1, -2)) * scale
        if causal:
            s = s + _additive_mask(s.shape[-2], s.shape[-1], s.dtype)
        p = M.softmax(s)
    gq, gk, gv = attention_backward(M, g, q, k, v, p, scale, causal)
    return M.fit(gq, q), M.fit(gk, k), M.fit(gv, v)


def attention(
    q: Tensor, k: Tensor, v: Tensor, *, causal: bool = True, scale: float | None = None
) -> Tensor:
    """Scaled dot-product attention, ``softmax(q k^T * scale) v``, one node.

    ``q`` is ``(..., T_q, d)``, ``k`` ``(..., T_k, d)``, ``v`` ``(..., T_k, d_v)``;
    ``scale`` defaults to ``1/sqrt(d)``. ``causal`` hides later keys from
    each query, as ``torch.nn.functional.scaled_dot_product_attention(...,
    is_causal=True)``.
    """
    qd, kd, vd = q.data, k.data, v.data
    if scale is None:
        scale = 1.0 / float(np.sqrt(qd.shape[-1]))
    if _fusable(qd, kd, vd):
        y, weights = _attention_forward(qd, kd, vd, scale, causal)
        return make(y, (q, k, v), _attention_vjp, (weights, scale, causal))
    s = _mm(qd, kd.swapaxes(-1, -2))
    s *= scale
    if causal:
        s += _additive_mask(s.shape[-2], s.shape[-1], s.dtype)
    p = _attention_weights(s)
    return make(_mm(p, vd), (q, k, v), _attention_vjp, (p, scale, causal))


def _self_attention_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any, ...]:
    n_head, scale, saved = out._ctx
    x, wq, wk, wv = (M.of(t) for t in out._prev)
    B, T, C = x.shape
    D = C // n_head
    if not M.graph:
        x2, w, q, k, v, p = saved
        gy = g.reshape(B, T, n_head, D).transpose(0, 2, 1, 3)
        gqkv = np.empty((B, T, 3, n_head, D), dtype=x2.dtype)
        parts = tuple(gqkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
        _attention_backward_parts(gy, q, k, v, p, scale, parts, causal=True)
        g2 = gqkv.reshape(B * T, 3 * C)
        gx, gw = M.matmul_pair(g2, w, g2.T, x2)
        return gx.reshape(x.shape), gw[:C], gw[C : 2 * C], gw[2 * C :]
    # create_graph: the same steps as nodes (their own derivatives count)
    x2 = x.reshape(B * T, C)

    def heads(w: Any) -> Any:
        return M.matmul(x2, w.T).reshape(B, T, n_head, D).transpose(0, 2, 1, 3)

    q, k, v = heads(wq), heads(wk), heads(wv)
    s = M.matmul(q, k.swapaxes(-1, -2)) * scale + _additive_mask(T, T, x.data.dtype)
    gy = g.reshape(B, T, n_head, D).transpose(0, 2, 1, 3)
    grads = attention_backward(M, gy, q, k, v, M.softmax(s), scale)
    gx = None
    gws = []
    for gh, w in zip(grads, (wq, wk, wv)):
        g2 = gh.transpose(0, 2, 1, 3).reshape(B * T, C)
        gx = M.matmul(g2, w) if gx is None else gx + M.matmul(g2, w)
        gws.append(M.matmul(g2.T, x2))
    return (gx.reshape(x.shape), *gws)


def self_attention(x: Tensor, wq: Tensor, wk: Tensor, wv: Tensor, n_head: int) -> Tensor:
    """Causal multi-head self-attention of ``x`` ``(B, T, C)`` before its
    output projection: ``attention`` of the heads of ``x wq^T``, ``x wk^T``
    and ``x wv^T``, the heads merged back to ``(B, T, C)``; one node.

    The three projections are one matrix product (with the three weights
    stacked), so ``x`` is read once and its gradient is one product too;
    the heads are views of that product, and the attention writes its
    output, and its backward pass the projections' gradient, straight in
    the ``(B, T, H, d)`` layout the products want.
    """
    xd = x.data
    B, T, C = xd.shape
    D = C // n_head
    w = np.concatenate([wq.data, wk.data, wv.data])
    qkv = _mm(xd.reshape(B * T, C), w.T).reshape(B, T, 3, n_head, D)
    q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
    scale = 1.0 / float(np.sqrt(D))
    y = np.empty((B, T, n_head, D), dtype=xd.dtype)
    _, p = _attention_forward(q, k, v, scale, True, y.transpose(0, 2, 1, 3))
    saved = (xd.reshape(B * T, C), w, q, k, v, p)
    return make(y.reshape(B, T, C), (x, wq, wk, wv), _self_attention_vjp, (n_head, scale, saved))


# ----------------------------------------------------------------------------
# dropout
# ----------------------------------------------------------------------------


def _dropout_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any]:
    return (g * out._ctx,)


def dropout(
    x: Tensor, p: float = 0.5, training: bool = True, *, rng: np.random.Generator | None = None
) -> Tensor:
    """Each entry zeroed with probability ``p`` and the rest scaled by
    ``1 / (1 - p)``, so the expectation is unchanged, as
    ``torch.nn.functional.dropout``; the identity when not ``training``
    (or ``p == 0``). The draws come from ``rng`` (when None, the generator
    :func:`chainrule.manual_seed` seeds); the gradient passes through the
    kept entries, scaled alike."""
    if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: p must be a probability in [0, 1], got {p!r}")
    if not training or p == 0.0:
        return x
    xd = x.data
    if p == 1.0:
        scale = np.zeros(xd.shape, dtype=xd.dtype)
    else:
        keep = (rng or tensor_generator()).random(xd.shape) >= p
        scale = keep.astype(xd.dtype) * xd.dtype.type(1.0 / (1.0 - p))
    return make(xd * scale, (x,), _dropout_vjp, scale)


__all__ = [
    "attention",
    "causal_mask",
    "cross_entropy",
    "dropout",
    "layer_norm",
    "log_softmax",
    "masked_fill",
    "rms_norm",
    "self_attention",
    "softmax",
]
