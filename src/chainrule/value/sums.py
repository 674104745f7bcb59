"""Weighted sums as one node: ``dot``, ``dense`` and ``add_n``.

A library layer may record its work as one node, as PyTorch's ``Linear``
does: ``dot(w, x, b)`` is one node with ``2n + 1`` inputs where micrograd's
``sum((wi * xi for ...), b)`` makes ``2n`` nodes, with the same edges into
the weights and inputs. The value is micrograd's bit for bit: the bias
first, then each product, added left to right (never Python's ``sum()``
of floats, which compensates rounding from Python 3.12 on). The user's own
arithmetic is never fused: these are called by name, and by ``nn``.

Their primitives and derivative rules are declared here, beside them.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Iterable
from typing import Any

from .engine import Primitive, Scalar, Value, _lift, _node
from .primitives import DEAD_UNIT

__all__ = ["ADD_N", "AFFINE", "AFFINE_RELU", "DOT", "add_n", "dense", "dot"]

_add = operator.add
_mul = operator.mul


def _sum(start: Any, terms: Iterable[Any]) -> Any:
    """``start + t1 + t2 + ...`` left to right, as a chain of ``+`` nodes adds."""
    return functools.reduce(_add, terms, start)


# Inputs of the dot primitives: the weights w1..wn, the inputs x1..xn, then
# (AFFINE) the bias. The forward functions also run on arrays (compile).


def _dot_forward(*args: Any) -> Any:
    n = len(args) // 2
    return _sum(0.0, map(_mul, args[:n], args[n:]))


def _d_dot(M: Any, *args: Any) -> tuple[Any, ...]:
    n = (len(args) - 1) // 2  # w . x: d/dw_i = x_i, d/dx_i = w_i
    return (*args[n : 2 * n], *args[:n])


def _affine_forward(*args: Any) -> Any:
    n = (len(args) - 1) // 2
    return _sum(args[-1], map(_mul, args[:n], args[n : 2 * n]))


def _d_affine(M: Any, *args: Any) -> tuple[Any, ...]:
    n = (len(args) - 2) // 2  # b + w . x: as dot, and d/db = 1
    return (*args[n : 2 * n], *args[:n], 1.0)


def _relu(x: Any) -> Any:
    return 0.0 if x < 0.0 else x  # keeps nan, as torch.relu


def _affine_relu_forward(*args: Any) -> Any:
    return _relu(_affine_forward(*args))


def _d_affine_relu(M: Any, *args: Any) -> tuple[Any, ...]:
    # relu(b + w . x): the affine rule where the unit is active, 0 where not
    if args[-1] <= 0.0:  # the output; a Value compares by its data
        return (0.0,) * (len(args) - 1)
    return _d_affine(M, *args)


DOT = Primitive("dot", _dot_forward, _d_dot)
AFFINE = Primitive("dot", _affine_forward, _d_affine)
AFFINE_RELU = Primitive("ReLU(dot)", _affine_relu_forward, _d_affine_relu, DEAD_UNIT)
ADD_N = Primitive("sum", lambda *xs: _sum(0.0, xs), lambda M, *args: (1.0,) * (len(args) - 1))


_get_data = operator.attrgetter("data")


def _values(xs: Iterable[Scalar], op: str) -> list[Value]:
    """The items of ``xs`` as Values (a number becomes a leaf)."""
    items = xs if type(xs) is list else list(xs)
    if all(type(x) is Value for x in items):
        return items  # type: ignore[return-value]
    return [_lift(x, op) for x in items]


def _activation(activation: str | None, op: str) -> bool:
    """Whether the activation is fused into the node (relu), after checking its name."""
    if activation not in (None, "linear", "relu", "tanh"):
        raise ValueError(f"{op}: unknown activation {activation!r}; use 'relu', 'tanh' or 'linear'")
    return activation == "relu"


def dot(
    w: Iterable[Scalar],
    x: Iterable[Scalar],
    bias: Scalar | None = None,
    activation: str | None = None,
) -> Value:
    """``bias + w[0] * x[0] + w[1] * x[1] + ...`` as one node.

    The value is that of micrograd's neuron, ``sum((wi * xi for ...),
    bias)``, bit for bit (without a bias: ``sum(wi * xi for ...)``), and
    so are the gradients, with far fewer nodes. Numbers among ``w`` or
    ``x`` become leaves. ``activation="relu"`` makes ``relu(...)`` part of
    the node (a hidden unit); ``"tanh"`` adds a tanh node; ``None`` or
    ``"linear"`` nothing.

    >>> from chainrule import Value, dot
    >>> w = [Value(1.0), Value(2.0)]
    >>> dot(w, [3.0, 4.0], Value(0.5)).data
    11.5
    """
    relu = _activation(activation, "dot")
    out = _dot(_values(w, "dot"), _values(x, "dot"), bias, relu)
    return out.tanh() if activation == "tanh" else out


def _dot(ws: list[Value], xs: list[Value], bias: Scalar | None, relu: bool) -> Value:
    if len(ws) != len(xs):
        raise ValueError(f"dot: lengths differ ({len(ws)} weights, {len(xs)} inputs)")
    wd = list(map(_get_data, ws))
    xd = list(map(_get_data, xs))
    if bias is None:
        y = _sum(0.0, map(_mul, wd, xd))
        out = _node(y, (*ws, *xs), (*xd, *wd, DOT))
        return out.relu() if relu else out
    b = bias if type(bias) is Value else _lift(bias, "dot")
    y = _sum(b.data, map(_mul, wd, xd))
    if not relu:
        return _node(y, (*ws, *xs, b), (*xd, *wd, 1.0, AFFINE))
    if y < 0.0:  # relu; a nan stays nan and is live, as torch.relu
        y = 0.0
    local = (*(0.0,) * (2 * len(ws) + 1), AFFINE_RELU) if y <= 0.0 else (*xd, *wd, 1.0, AFFINE_RELU)
    return _node(y, (*ws, *xs, b), local)


def dense(
    weights: Iterable[Iterable[Scalar]],
    x: Iterable[Scalar],
    biases: Iterable[Scalar | None] | None = None,
    activation: str | None = None,
) -> list[Value]:
    """``[dot(w, x, b, activation) for w, b in zip(weights, biases)]``: a
    layer's units, with the shared input ``x`` made Values once. What
    ``nn.Layer`` uses.

    >>> from chainrule import Value, dense
    >>> rows = [[Value(1.0), Value(0.0)], [Value(2.0), Value(-1.0)]]
    >>> [v.data for v in dense(rows, [3.0, 4.0], [0.5, 0.0])]
    [3.5, 2.0]
    """
    relu = _activation(activation, "dense")
    xs = _values(x, "dense")
    rows = [_values(w, "dense") for w in weights]
    bs = [None] * len(rows) if biases is None else list(biases)
    if len(bs) != len(rows):
        raise ValueError(f"dense: {len(rows)} weight rows but {len(bs)} biases")
    out = [_dot(w, xs, b, relu) for w, b in zip(rows, bs)]
    return [v.tanh() for v in out] if activation == "tanh" else out


def add_n(values: Iterable[Scalar]) -> Value:
    """``sum(values)`` as one node: ``0 + values[0] + values[1] + ...``,
    left to right as Python's ``sum()`` of Values adds them.

    >>> from chainrule import Value, add_n
    >>> add_n([Value(1.0), Value(2.0), 3]).data
    6.0
    """
    items = _values(values, "add_n")
    datas = list(map(_get_data, items))
    return _node(_sum(0.0, datas), tuple(items), (*(1.0,) * len(items), ADD_N))
