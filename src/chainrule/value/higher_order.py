"""Higher-order gradients: the derivative rules evaluated on Values.

``backward(create_graph=True)`` and ``gradients(..., create_graph=True)``
walk the graph as usual, but instead of a node's stored floats they take
its primitive's rule ``derivative(M, *inputs, out)`` evaluated with
``M = GRAPH``: on the nodes themselves, so each local derivative, and so
each gradient, is a Value in a new graph that can be differentiated again.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

from . import ieee
from .primitives import where
from .protocols import NodeProtocols as Node  # a base of every Value


def _data(x: Any) -> float:
    return x.data if isinstance(x, Node) else x


def _sign(x: Any) -> float:
    return ieee.sign(_data(x))


def _on_values(
    on_floats: Callable[[float, float], float], on_values: Callable[[Any, Any], Any]
) -> Callable[[Any, Any], Any]:
    """A binary function for the rules on Values: the Value operator when
    either side is a Value, the IEEE float function when both are numbers
    (a constant's rule, ``1 / c`` with ``c = 0``, gives inf)."""

    def f(a: Any, b: Any) -> Any:
        if isinstance(a, Node) or isinstance(b, Node):
            return on_values(a, b)
        return on_floats(a, b)

    return f


def _unary(name: str) -> Callable[[Any], Any]:
    """A function for the rules on Values: the Value's method (``x.exp()``),
    the IEEE float function on a number (a constant's rule)."""
    on_floats = getattr(ieee, name)

    def f(x: Any) -> Any:
        return getattr(x, name)() if isinstance(x, Node) else on_floats(x)

    return f


#: Rules on Values: ``create_graph=True``.
GRAPH = SimpleNamespace(
    div=_on_values(ieee.div, operator.truediv),
    pow=_on_values(ieee.pow, operator.pow),
    pow_scalar=_on_values(ieee.pow_scalar, operator.pow),
    exp=_unary("exp"),
    log=_unary("log"),
    sqrt=_unary("sqrt"),
    sin=_unary("sin"),
    cos=_unary("cos"),
    sigmoid=_unary("sigmoid"),
    sign=_sign,
    data=_data,
    where=where,
)


def rule(v: Any) -> Sequence[Any]:
    """``v``'s local derivatives from its primitive's rule evaluated on
    Values, so that they are differentiable in turn."""
    fn = v._fn
    if fn.derivative is None:
        raise TypeError(
            f"node {fn.name!r} was built with constant local gradients "
            "(Value(data, children, local_grads)), which cannot be differentiated "
            "again; define the operation as a chainrule.Primitive for create_graph"
        )
    return fn.derivative(GRAPH, *v._prev, v)
