"""Loss functions on Values, each the mean over the examples, as PyTorch's
default ``reduction="mean"``.

Given Tensors, ``mse_loss``, ``cross_entropy`` and
``binary_cross_entropy_with_logits`` are the Tensor engine's
(:mod:`chainrule.tensor.losses`, PyTorch's arguments and reductions); the
others say what to use instead.

Sums are single ``add_n`` nodes and ``logsumexp`` is one node whose local
gradients are the softmax, so a loss adds a handful of nodes per example,
not one per arithmetic step.

>>> from chainrule import Value
>>> from chainrule.losses import hinge_loss
>>> hinge_loss([Value(2.0), Value(0.5)], [1, -1]).data  # (0 + 1.5) / 2
0.75
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .functional import _loaded_tensor_class
from .value import ieee
from .value.engine import Primitive, Scalar, Value
from .value.functions import relu
from .value.sums import add_n, dot

if TYPE_CHECKING:
    from .tensor import Tensor

__all__ = [
    "binary_cross_entropy_with_logits",
    "cross_entropy",
    "example_cross_entropy",
    "hinge_loss",
    "log_softmax",
    "logsumexp",
    "mse_loss",
]


def _lse_forward(*xs: float) -> float:
    # Shift by the largest input so exp never overflows: log sum exp(x - m) + m.
    if any(math.isnan(x) for x in xs):
        return math.nan
    m = max(xs)
    if math.isinf(m):
        return m
    return m + math.log(math.fsum(math.exp(x - m) for x in xs))


def _lse_derivative(M: Any, *args: Any) -> tuple[Any, ...]:
    # d logsumexp / d x_i = softmax(x)_i = exp(x_i - out)
    *xs, out = args
    return tuple(M.exp(x - out) for x in xs)


#: ``log(exp(x1) + ... + exp(xn))`` as one node, computed without overflow.
LOGSUMEXP = Primitive("logsumexp", _lse_forward, _lse_derivative)


@functools.lru_cache(maxsize=1024)
def _cross_entropy(target: int) -> Primitive:
    """``-log softmax(logits)[target]`` for one fixed target index."""

    lse = _lse_forward

    def forward(*xs: float) -> float:
        return lse(*xs) - xs[target]

    def rule(M: Any, *args: Any) -> list[Any]:
        # d/dx_i = softmax_i - [i == target]; the logsumexp is out + x_target
        xs, out = args[:-1], args[-1]
        lse = out + xs[target]
        if type(lse) is float and lse - lse != 0.0:
            # out is inf (a -inf target logit, or an overflowing difference
            # such as 1e308 - -1e308) and lost the logsumexp: compute it again
            lse = _lse_forward(*xs)
        local = [M.exp(x - lse) for x in xs]
        local[target] = local[target] - 1.0
        return local

    return Primitive(f"cross_entropy[{target}]", forward, rule)


def _tensor_losses(*args: Any) -> Any:
    """The Tensor engine's losses module if any argument is a Tensor, else None."""
    tensor = _loaded_tensor_class()
    if tensor is None or not any(isinstance(a, tensor) for a in args):
        return None
    from .tensor import losses as tensor_losses

    return tensor_losses


def _no_tensors(op: str, instead: str, *args: Any) -> None:
    if _tensor_losses(*args) is not None:
        raise TypeError(
            f"{op}: this is the scalar engine's, for lists of Values; on Tensors use {instead}"
        )


def logsumexp(values: Sequence[Scalar]) -> Value:
    """``log(sum(exp(v)))``, stable for large inputs, as one node.

    >>> from chainrule.losses import logsumexp
    >>> round(logsumexp([1000.0, 1000.0]).data - 1000.0, 12)  # log 2, no overflow
    0.69314718056
    """
    _no_tensors(
        "logsumexp", "x - x.log_softmax() (each entry is logsumexp(x), computed stably)", values
    )
    if len(values) == 0:
        raise ValueError("logsumexp: needs at least one value")
    return LOGSUMEXP(*values)


def log_softmax(logits: Sequence[Scalar]) -> list[Value]:
    """``logits[i] - logsumexp(logits)`` for each i: log-probabilities."""
    _no_tensors("log_softmax", "chainrule.tensor.log_softmax(x) (or x.log_softmax())", logits)
    lse = logsumexp(logits)
    return [z - lse for z in _values(logits)]


def _values(xs: Sequence[Scalar]) -> list[Value]:
    return [x if isinstance(x, Value) else Value(x) for x in xs]


def _pairs(predictions: Any, targets: Any, op: str) -> tuple[list[Any], list[Any]]:
    """Both arguments as lists of equal, non-zero length (a lone scalar is a
    list of one)."""
    ps = [predictions] if isinstance(predictions, (Value, int, float)) else list(predictions)
    ts = [targets] if isinstance(targets, (Value, int, float)) else list(targets)
    if len(ps) != len(ts):
        raise ValueError(f"{op}: {len(ps)} predictions but {len(ts)} targets")
    if not ps:
        raise ValueError(f"{op}: no examples")
    return ps, ts


def mse_loss(predictions: Any, targets: Any) -> Value | Tensor:
    """Mean squared error, ``mean((p - t) ** 2)``.

    >>> from chainrule import Value
    >>> mse_loss([Value(1.0), Value(3.0)], [0.0, 1.0]).data  # (1 + 4) / 2
    2.5
    """
    tensor_losses = _tensor_losses(predictions, targets)
    if tensor_losses is not None:
        return tensor_losses.mse_loss(predictions, targets)
    ps, ts = _pairs(predictions, targets, "mse_loss")
    diffs = [p - t for p, t in zip(ps, ts)]
    # diffs . diffs: one node for the sum of squares; each diff appears on
    # both sides, so its gradient is 2 * diff, as for diff ** 2.
    return dot(diffs, diffs) / len(diffs)


def hinge_loss(scores: Any, labels: Any) -> Value:
    """The SVM max-margin loss of micrograd's demo: ``mean(relu(1 - y * s))``
    for labels ``y`` in {-1, +1}."""
    _no_tensors("hinge_loss", "Tensor ops: (1 - y * s).relu().mean()", scores, labels)
    ss, ys = _pairs(scores, labels, "hinge_loss")
    return add_n([relu(1.0 - y * s) for s, y in zip(ss, ys)]) / len(ss)


def binary_cross_entropy_with_logits(logits: Any, targets: Any) -> Value | Tensor:
    """Binary cross-entropy of ``sigmoid(logit)`` against targets in [0, 1],
    computed from the logit as ``softplus(z) - t * z`` so it never takes the
    log of 0 (``torch.nn.functional.binary_cross_entropy_with_logits``).

    >>> from chainrule import Value
    >>> round(binary_cross_entropy_with_logits([Value(0.0)], [1.0]).data, 12)  # log 2
    0.69314718056
    """
    tensor_losses = _tensor_losses(logits, targets)
    if tensor_losses is not None:
        return tensor_losses.binary_cross_entropy_with_logits(logits, targets)
    zs, ts = _pairs(logits, targets, "binary_cross_entropy_with_logits")
    return add_n([_softplus(z) - t * z for z, t in zip(zs, ts)]) / len(zs)


def _softplus(z: Any) -> Value:
    return z.softplus() if isinstance(z, Value) else Value(ieee.softplus(float(z)))


def cross_entropy(logits: Any, targets: Any) -> Value | Tensor:
    """Multi-class cross-entropy, ``mean(logsumexp(z) - z[target])``: the
    negative log-likelihood of each target class under ``softmax(z)``.

    ``logits`` is one list of class scores per example and ``targets`` one
    class index per example; a single example may be given as a flat list
    and an int.

    >>> from chainrule import Value
    >>> z = [Value(2.0), Value(2.0)]
    >>> round(cross_entropy(z, 0).data, 12)  # two equal classes: log 2
    0.69314718056
    """
    tensor_losses = _tensor_losses(logits, targets)
    if tensor_losses is not None:
        return tensor_losses.cross_entropy(logits, targets)
    if isinstance(targets, int):
        logits, targets = [logits], [targets]
    rows, ts = _pairs(logits, targets, "cross_entropy")
    return add_n([example_cross_entropy(row, t) for row, t in zip(rows, ts)]) / len(rows)


def example_cross_entropy(logits: Sequence[Scalar], target: int) -> Value:
    """``-log(softmax(logits)[target])`` for one example, as one node whose
    local gradients are ``softmax(logits) - onehot(target)``: what
    ``torch.nn.functional.cross_entropy`` computes for one example.

    >>> from chainrule import Value
    >>> round(example_cross_entropy([Value(0.0), Value(0.0)], 0).data, 6)
    0.693147
    """
    _no_tensors("example_cross_entropy", "chainrule.tensor.cross_entropy(logits, targets)", logits)
    items = list(logits)
    if isinstance(target, bool) or not isinstance(target, int):
        raise TypeError(f"cross_entropy: target must be an int, got {target!r}")
    if not 0 <= target < len(items):
        raise ValueError(f"cross_entropy: target {target} is not a class index below {len(items)}")
    return _cross_entropy(target)(*items)
