"""Loss functions on Tensors, with PyTorch's names, arguments and
reductions (``torch.nn.functional``): ``mse_loss``, ``l1_loss``,
``binary_cross_entropy``, ``binary_cross_entropy_with_logits``,
``cross_entropy`` and ``nll_loss``.

``reduction`` is ``"mean"`` (the default), ``"sum"`` or ``"none"``; a
``weight`` rescales each element (each class for ``cross_entropy`` and
``nll_loss``, whose mean is then over the weights of the counted targets,
as PyTorch's). Values and gradients follow PyTorch's formulas, the clamps
and the edge cases included: ``binary_cross_entropy`` clamps each log at
-100 and divides its gradient by ``max(x (1 - x), 1e-12)``.

One difference: the classes of ``cross_entropy`` and ``nll_loss`` are on
the *last* axis, ``(..., C)`` with targets ``(...)``, as a language model's
logits come (PyTorch's are on axis 1, ``(N, C, d1, ...)``). For a 1-d or
2-d input the two agree.

>>> import numpy as np
>>> from chainrule import Tensor
>>> from chainrule.tensor import mse_loss
>>> mse_loss(Tensor([1.0, 3.0]), np.array([0.0, 1.0]))  # (1 + 4) / 2
Tensor(2.5)
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from .elementwise import log_sigmoid_array, sub, where
from .nn_ops import cross_entropy as _fused_cross_entropy
from .nn_ops import log_softmax
from .tensor import Tensor, as_array, lift, make

REDUCTIONS = ("mean", "sum", "none")

#: The smallest ``x (1 - x)`` binary_cross_entropy's gradient divides by:
#: PyTorch's EPSILON, a C float (1e-12 rounded to float32).
_EPSILON = float(np.float32(1e-12))


def _check_reduction(reduction: str, op: str) -> None:
    if reduction not in REDUCTIONS:
        raise ValueError(f"{op}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _reduce(losses: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return losses.mean()
    return losses.sum() if reduction == "sum" else losses


def _input(x: Any, op: str) -> Tensor:
    """The prediction: a Tensor (an array or number becomes a constant one)."""
    return lift(x, op)


def _binary(prediction: Any, target: Any, reduction: str, op: str) -> tuple[Tensor, Tensor]:
    """The prediction and the target of a binary loss as Tensors of one
    shape (a constant target in the prediction's dtype)."""
    _check_reduction(reduction, op)
    x = _input(prediction, op)
    t = target if isinstance(target, Tensor) else lift(as_array(target, x.dtype, op), op)
    if x.data.shape != t.data.shape:
        raise ValueError(
            f"{op}: target of shape {t.data.shape} for an input of shape {x.data.shape}: "
            "give them the same shape"
        )
    return x, t


def _weighted(losses: Tensor, weight: Any, reduction: str) -> Tensor:
    return _reduce(losses if weight is None else losses * weight, reduction)


# ----------------------------------------------------------------------------
# Regression: mean squared and absolute error
# ----------------------------------------------------------------------------


def _difference(prediction: Any, target: Any, op: str) -> Tensor:
    # a constant takes the Tensor's dtype: float32 predictions stay float32
    if isinstance(prediction, Tensor):
        if not isinstance(target, Tensor):
            target = as_array(target, prediction.dtype, op)
    elif isinstance(target, Tensor):
        prediction = as_array(prediction, target.dtype, op)
    else:
        raise TypeError(f"{op}: input or target must be a Tensor")
    shapes = np.shape(prediction), np.shape(target)  # Tensors are array-likes
    if shapes[0] != shapes[1]:
        # PyTorch warns too: (N, 1) against (N,) broadcasts to (N, N)
        warnings.warn(
            f"{op}: target of shape {shapes[1]} for an input of shape {shapes[0]}: they "
            "broadcast, which is likely not what you want",
            UserWarning,
            stacklevel=3,
        )
    return sub(prediction, target)


def mse_loss(input: Any, target: Any, reduction: str = "mean") -> Tensor:  # noqa: A002
    """``(input - target) ** 2``, reduced (``torch.nn.functional.mse_loss``).
    Both may be Tensors: each gets its gradient."""
    _check_reduction(reduction, "mse_loss")
    d = _difference(input, target, "mse_loss")
    return _reduce(d * d, reduction)


def l1_loss(input: Any, target: Any, reduction: str = "mean") -> Tensor:  # noqa: A002
    """``|input - target|``, reduced (``torch.nn.functional.l1_loss``); the
    derivative at 0 is 0, as PyTorch's."""
    _check_reduction(reduction, "l1_loss")
    return _reduce(_difference(input, target, "l1_loss").abs(), reduction)


# ----------------------------------------------------------------------------
# Binary classification
# ----------------------------------------------------------------------------


def _bce_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any, Any]:
    x, t = out._prev
    xv, tv = M.of(x), M.of(t)
    xd = x.data
    # PyTorch's binary_cross_entropy_backward: (x - t) / max(x (1 - x), eps)
    spread = M.where((1.0 - xd) * xd > _EPSILON, (1.0 - xv) * xv, _EPSILON)
    gx = g * (xv - tv) / spread
    # and its target backward: -logit(x)
    gt = -g * M.log(xv / (1.0 - xv)) if t.requires_grad else None
    return gx, gt


def binary_cross_entropy(
    input: Any,  # noqa: A002
    target: Any,
    weight: Any = None,
    reduction: str = "mean",
) -> Tensor:
    """``-(t log x + (1 - t) log(1 - x))`` for probabilities ``x`` in [0, 1],
    each log clamped at -100 as PyTorch's
    (``torch.nn.functional.binary_cross_entropy``). ``weight`` broadcasts
    over the elements. From logits, prefer
    :func:`binary_cross_entropy_with_logits` (exact where ``x`` rounds to
    0 or 1)."""
    op = "binary_cross_entropy"
    x, t = _binary(input, target, reduction, op)
    xd, td = x.data, t.data
    if not ((xd >= 0.0) & (xd <= 1.0)).all():
        raise ValueError(f"{op}: every input must be a probability in [0, 1]")
    with np.errstate(divide="ignore"):
        y = (td - 1.0) * np.maximum(np.log1p(-xd), -100.0) - td * np.maximum(np.log(xd), -100.0)
    return _weighted(make(y.astype(xd.dtype, copy=False), (x, t), _bce_vjp), weight, reduction)


def _bce_logits_vjp(M: Any, g: Any, out: Tensor) -> tuple[Any, ...]:
    x, t, *pos = out._prev
    xv, tv = M.of(x), M.of(t)
    s = M.sigmoid(xv)
    grads: list[Any] = [None, None]
    if pos:  # PyTorch's formulas, in its order of operations
        pw = M.of(pos[0])
        pt = pw * tv
        grads[0] = g * ((pt + 1.0 - tv) * s - pt)
        if t.requires_grad:
            grads[1] = g * ((1.0 - pw) * M.log_sigmoid(xv) - xv)
        grads.append(
            M.fit(-g * tv * M.log_sigmoid(xv), pos[0].data) if pos[0].requires_grad else None
        )
    else:
        grads[0] = g * (s - tv)
        if t.requires_grad:
            grads[1] = -g * xv
    return tuple(grads)


def binary_cross_entropy_with_logits(
    input: Any,  # noqa: A002
    target: Any,
    weight: Any = None,
    reduction: str = "mean",
    pos_weight: Any = None,
) -> Tensor:
    """Binary cross-entropy of ``sigmoid(input)``, computed from the logit
    as ``(1 - t) x - log_sigmoid(x)`` so it never takes the log of 0
    (``torch.nn.functional.binary_cross_entropy_with_logits``).
    ``pos_weight`` (broadcast along the last axis, one per class) weighs
    the positive term: ``(1 - t) x - (1 + (pos_weight - 1) t) log_sigmoid(x)``."""
    op = "binary_cross_entropy_with_logits"
    x, t = _binary(input, target, reduction, op)
    xd, td = x.data, t.data
    ls = log_sigmoid_array(xd)
    prev: tuple[Tensor, ...] = (x, t)
    if pos_weight is not None:
        pw = lift(
            pos_weight if isinstance(pos_weight, Tensor) else as_array(pos_weight, x.dtype, op), op
        )
        ls = ls * ((pw.data - 1.0) * td + 1.0)
        prev = (x, t, pw)
    y = (1.0 - td) * xd - ls
    return _weighted(make(y.astype(xd.dtype, copy=False), prev, _bce_logits_vjp), weight, reduction)


# ----------------------------------------------------------------------------
# Multi-class classification
# ----------------------------------------------------------------------------


def _classes(
    x: Tensor, target: Any, ignore_index: int | None, op: str
) -> tuple[np.ndarray, np.ndarray]:
    """The target class of every row of ``x`` as ``(N, C)`` (0 where
    ignored) and the mask of the counted rows."""
    t = np.asarray(target.data if isinstance(target, Tensor) else target)
    if t.dtype.kind not in "iu":
        raise TypeError(f"{op}: target must hold class indices (integers), got {t.dtype}")
    if x.data.ndim == 0 or t.shape != x.data.shape[:-1]:
        raise ValueError(
            f"{op}: an input of shape {x.data.shape} (classes last) needs a target of shape "
            f"{x.data.shape[:-1]}, got {t.shape}"
        )
    t = t.reshape(-1)
    valid = np.ones(t.shape, dtype=bool) if ignore_index is None else t != ignore_index
    t = np.where(valid, t, 0)
    n_classes = x.data.shape[-1]
    if t.size and (t.min() < 0 or t.max() >= n_classes):
        raise IndexError(f"{op}: target out of range for {n_classes} classes")
    return t, valid


def _class_weights(weight: Any, x: Tensor, op: str) -> np.ndarray | None:
    """One weight per class, as an array; a Tensor that wants a gradient is
    refused (PyTorch does not differentiate it either) rather than given none."""
    if weight is None:
        return None
    if isinstance(weight, Tensor) and weight.requires_grad:
        raise TypeError(f"{op}: weight gets no gradient: pass weight.detach() or an array")
    w = as_array(weight, x.dtype, op)
    if w.shape != x.data.shape[-1:]:
        raise ValueError(
            f"{op}: weight needs one entry per class ({x.data.shape[-1]}), got shape {w.shape}"
        )
    return w


def _reduce_rows(losses: Tensor, reduction: str, total: float, shape: tuple[int, ...]) -> Tensor:
    """One loss per row, reduced: the mean divides by ``total``, the
    counted targets' weight (0 / 0 = nan when nothing counts, as PyTorch)."""
    if reduction == "mean":
        with np.errstate(divide="ignore", invalid="ignore"):
            return losses.sum() / total
    return losses.sum() if reduction == "sum" else losses.reshape(shape)


def _nll_rows(
    logp: Tensor, t: np.ndarray, valid: np.ndarray, w: np.ndarray | None
) -> tuple[Tensor, float]:
    """``-weight[t] * logp[t]`` for each row (0 where ignored) and the
    counted targets' total weight."""
    rows = logp.reshape(-1, logp.data.shape[-1])
    picked = rows[np.arange(t.size), t]
    scale = np.ones(t.size, dtype=logp.dtype) if w is None else w[t]
    scale = np.where(valid, scale, 0.0).astype(logp.dtype, copy=False)
    losses = where(valid, picked * -scale, 0.0)  # an ignored row is 0, even from -inf
    return losses, float(scale.sum())


def nll_loss(
    input: Any,  # noqa: A002
    target: Any,
    weight: Any = None,
    ignore_index: int | None = -100,
    reduction: str = "mean",
) -> Tensor:
    """The negative log-likelihood ``-weight[t] * input[..., t]`` of class
    indices ``target`` under log-probabilities ``input`` (classes last)
    (``torch.nn.functional.nll_loss``). Targets equal to ``ignore_index``
    count for nothing; ``"mean"`` divides by the counted targets' weights
    (nan when nothing counts, as PyTorch)."""
    op = "nll_loss"
    _check_reduction(reduction, op)
    x = _input(input, op)
    t, valid = _classes(x, target, ignore_index, op)
    losses, total = _nll_rows(x, t, valid, _class_weights(weight, x, op))
    return _reduce_rows(losses, reduction, total, x.data.shape[:-1])


def cross_entropy(
    input: Any,  # noqa: A002
    target: Any,
    weight: Any = None,
    ignore_index: int | None = -100,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """The negative log-likelihood of class indices ``target`` under
    ``softmax(input)`` (classes last), as
    ``torch.nn.functional.cross_entropy``: ``weight`` per class,
    ``ignore_index`` for padding, ``label_smoothing`` mixing the one-hot
    target with the uniform distribution, and ``reduction``.

    Without weights or smoothing it is one fused node
    (``chainrule.tensor.nn_ops.cross_entropy``); with them,
    ``nll_loss(log_softmax(input))`` plus PyTorch's smoothing term
    ``label_smoothing / C * sum_c -weight[c] * log_softmax(input)[c]``.
    """
    op = "cross_entropy"
    _check_reduction(reduction, op)
    if isinstance(label_smoothing, bool) or not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"{op}: label_smoothing must be in [0, 1], got {label_smoothing!r}")
    x = _input(input, op)
    if weight is None and label_smoothing == 0.0:
        return _fused_cross_entropy(x, target, reduction=reduction, ignore_index=ignore_index)
    t, valid = _classes(x, target, ignore_index, op)
    w = _class_weights(weight, x, op)
    logp = log_softmax(x, -1)
    losses, total = _nll_rows(logp, t, valid, w)
    shape = x.data.shape[:-1]
    nll = _reduce_rows(losses, reduction, total, shape)
    if label_smoothing == 0.0:
        return nll
    smooth = where(valid, -(logp if w is None else logp * w).sum(-1).reshape(-1), 0.0)
    smoothed = _reduce_rows(smooth, reduction, total, shape)
    return (1.0 - label_smoothing) * nll + smoothed * (label_smoothing / x.data.shape[-1])


__all__ = [
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "cross_entropy",
    "l1_loss",
    "mse_loss",
    "nll_loss",
]
