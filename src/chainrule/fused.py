"""Fused primitives for the layers a GPT is made of.

Each function below records *one* node where the long form records one per
binary operation: a cross-entropy over 27 logits is one node with 27 inputs
instead of about a hundred. The gradients are the same; the graph is
smaller, so the forward pass allocates less and the backward pass visits
fewer nodes.

Every fused op is a :class:`~chainrule.Primitive`, its derivative rule
written once next to its forward function. The rule runs on floats for the
ordinary backward pass and on Values for ``create_graph=True``, so fused ops
can be differentiated twice.

>>> from chainrule import Value
>>> from chainrule.fused import cross_entropy
>>> logits = [Value(1.0), Value(2.0), Value(3.0)]
>>> loss = cross_entropy(logits, 2)
>>> loss.backward()
>>> round(loss.data, 6), round(logits[2].grad, 6)
(0.407606, -0.334759)
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from typing import Any

from .losses import LOGSUMEXP, logsumexp
from .losses import example_cross_entropy as cross_entropy
from .value import ieee
from .value.engine import Primitive, Scalar, Value
from .value.sums import dense

__all__ = [
    "EXP_SUB",
    "cross_entropy",
    "inv_rms",
    "linear",
    "logsumexp",
    "rmsnorm",
    "softmax",
]


# --------------------------------------------------------------------------
# The rules: d out / d input, on floats (M = FLOAT) or on Values (M = GRAPH)
# --------------------------------------------------------------------------


# logsumexp and the cross-entropy of one example are the losses module's
# (one node each; re-exported here). The rules below are for the other ops.


#: One softmax entry, ``exp(a - b)``, once ``b`` is the logsumexp.
EXP_SUB = Primitive("exp(a-b)", lambda a, b: ieee.exp(a - b), lambda M, a, b, out: (out, -out))


def _scaled_inv_rms(xs: Sequence[float], n: int, eps: float) -> float:
    """``1 / sqrt(mean(x**2) + eps)`` from a scaled sum of squares: with
    ``s = max |x|``, ``(1 / s) / sqrt(mean((x / s)**2) + eps / s**2)``. Exact
    where the plain sum of squares overflows although the inputs are
    finite (``[1e154, 1e154]``: 1e-154, not 0)."""
    s = max(abs(x) for x in xs)
    m = math.fsum([(x / s) * (x / s) for x in xs]) / n
    return ieee.div(1.0 / s, ieee.sqrt(m + eps / (s * s)))


@functools.lru_cache(maxsize=1024)
def _inv_rms(n: int, eps: float) -> Primitive:
    """``1 / sqrt(mean(x**2) + eps)`` of ``n`` inputs."""

    def forward(*xs: float) -> float:
        try:
            squares = math.fsum([x * x for x in xs])
        except OverflowError:  # finite squares whose sum is not
            squares = math.inf
        if squares == math.inf and all(map(math.isfinite, xs)):
            return _scaled_inv_rms(xs, n, eps)
        return ieee.div(1.0, ieee.sqrt(squares / n + eps))

    def rule(M: Any, *args: Any) -> list[Any]:
        # d r / d x_i = -x_i r**3 / n, multiplied in an order that keeps
        # x_i r (at most sqrt(n)) in range where r**3 alone would underflow
        out = args[-1]
        k = out * out * (-1.0 / n)
        return [(x * out) * k for x in args[:-1]]

    return Primitive("inv_rms", forward, rule)


# --------------------------------------------------------------------------
# The public functions
# --------------------------------------------------------------------------


def softmax(xs: Iterable[Scalar]) -> list[Value]:
    """``exp(x_i) / sum(exp(x))`` for every ``x_i``, in ``n + 1`` nodes: one
    logsumexp and one ``exp(x_i - lse)`` per entry (the long form takes
    about ``4n``).

    >>> from chainrule import Value
    >>> [round(p.data, 4) for p in softmax([Value(0.0), Value(0.0)])]
    [0.5, 0.5]
    """
    items = list(xs)
    lse = LOGSUMEXP(*items)
    return [EXP_SUB(x, lse) for x in items]


def inv_rms(xs: Iterable[Scalar], eps: float = 1e-5) -> Value:
    """``1 / sqrt(mean(x**2) + eps)`` as one node: the scale of an RMSNorm.

    >>> from chainrule import Value
    >>> inv_rms([Value(3.0), Value(-3.0)], eps=0.0).data
    0.3333333333333333
    """
    items = list(xs)
    if not items:
        raise ValueError("inv_rms: no inputs")
    return _inv_rms(len(items), float(eps))(*items)


def rmsnorm(xs: Iterable[Scalar], eps: float = 1e-5) -> list[Value]:
    """``x_i / sqrt(mean(x**2) + eps)`` for every ``x_i`` (no learned gain),
    as one :func:`inv_rms` node and one product per entry.

    Finite inputs whose squares sum past float64's range are scaled first,
    so ``rmsnorm([1e154, 1e154])`` is ``[1.0, 1.0]``: a deliberate
    difference from PyTorch, whose float64 sum overflows and gives 0.

    >>> from chainrule import Value
    >>> [y.data for y in rmsnorm([Value(3.0), Value(-3.0)], eps=0.0)]
    [1.0, -1.0]
    """
    items = list(xs)
    r = inv_rms(items, eps)
    return [x * r for x in items]


def linear(w: Sequence[Sequence[Scalar]], x: Sequence[Scalar]) -> list[Value]:
    """``w @ x`` (no bias): one :func:`~chainrule.dot` node per row of ``w``,
    built by :func:`~chainrule.dense`, which reads ``x`` once for all rows.

    >>> from chainrule import Value
    >>> [y.data for y in linear([[Value(1.0), Value(2.0)]], [Value(3.0), Value(4.0)])]
    [11.0]
    """
    return dense(w, x)
