"""The scalar engine: ``Value``, its operators and ``backward()``.

A short tour, in micrograd's order:

* A ``Value`` is one node of microgpt's four slots (a small node is a fast
  one): ``data``, ``grad`` (d root / d node after ``backward()``), ``_prev``
  (its inputs) and ``_local``: ``d self / d input`` for each input, then the
  primitive of :mod:`chainrule.value.primitives` (``_fn``), named for hot ones:
  ``(b, a, "*")``. An operator makes it as microgpt does, ``Value(data,
  inputs, local)``: micrograd's graph node for node (a number operand is a
  leaf, ``-b`` is ``b * -1``, ``a - b`` is ``a + (-b)``, ``a / b`` is ``a * b**-1``).
* ``backward()`` orders the graph, seeds the root with 1.0 and walks the
  order in reverse, adding ``local * node.grad`` into every input
  (:mod:`chainrule.value.walk`: no recursion limit).

Around it, in :mod:`chainrule.value`: numbers coming in (``intake``), more
operations (``beyond_micrograd``), micrograd's and microgpt's protocols,
``create_graph`` (``higher_order``) and one-node sums (``sums``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any, Union

from . import primitives as P  # the rule table
from .beyond_micrograd import BeyondMicrograd
from .intake import as_float as _as_float
from .intake import reciprocal_is_exact as _reciprocal_is_exact
from .mode import Labelled, mode, next_id, state
from .primitives import LOG, NUMBER, POW, Primitive
from .protocols import NodeProtocols, made_by_user
from .walk import backpropagate, topological_order

Number = Union[int, float]
Scalar = Union["Value", int, float]

__all__ = ["Primitive", "Value", "backpropagate", "topological_order"]

_recording = state.get  # None: this thread records a graph, unobserved


class Value(BeyondMicrograd, Labelled, NodeProtocols):
    """A scalar and the graph that computed it.

    >>> a, b = Value(2.0, label="a"), Value(-3.0, label="b")
    >>> f = (a * b + 10.0).relu()
    >>> f.backward()
    >>> a.grad, b.grad
    (-3.0, 2.0)

    micrograd's ``Value(data, _children, _op)`` and microgpt's ``Value(data,
    children, local_grads)`` work too, with their attributes. Values compare
    by ``data``; ``==`` and hashing by identity.
    """

    __slots__ = ("data", "grad", "_prev", "_local")

    data: float
    grad: Any  # a float; a Value after backward(create_graph=True)
    _prev: tuple[Value, ...]
    _local: tuple[Any, ...]  # (*d self / d input, primitive), or () for a leaf

    def __init__(
        self,
        data: Number,
        _children: Iterable[Value] = (),
        _op: str | Iterable[Any] = "",
        label: str | object = "",
    ) -> None:
        if label is _OPERATOR:  # an operator's node: checked by the operator
            self.data = data
            self.grad = 0.0
            self._prev = _children  # type: ignore[assignment]
            self._local = _op  # type: ignore[assignment]
            return
        self.data = _as_float(data, "Value")
        self.grad = 0.0
        self._prev = self._local = ()
        if _children != () or (_op != "" and not isinstance(_op, str)):
            made_by_user(self, _children, _op)
        if label:
            self.label = label  # type: ignore[assignment]

    def __add__(self, other: Scalar) -> Value:
        if not isinstance(other, Value):
            other = _leaf(other, "+")
        v = Value(self.data + other.data, (self, other), (1.0, 1.0, "+"), _OPERATOR)
        return v if _recording() is None else _unusual(v)

    def __mul__(self, other: Scalar) -> Value:
        if not isinstance(other, Value):
            other = _leaf(other, "*")
        a, b = self.data, other.data
        v = Value(a * b, (self, other), (b, a, "*"), _OPERATOR)
        return v if _recording() is None else _unusual(v)

    def __pow__(self, other: Scalar) -> Value:
        if isinstance(other, Value):
            return _apply(POW, (self, other))
        c, x = _as_float(other, "**"), self.data
        if type(c) is float and c and 0.0 < x < math.inf:  # the table's rule, written out
            try:
                return _node(x**c, (self,), (c * x ** (c - 1.0), P.pow_const(c)))
            except OverflowError:  # inf: the table's functions say so without raising
                pass
        return _apply(P.pow_const(c), (self,))

    def relu(self) -> Value:
        """``max(0, self)``; the gradient is 0 where the output is 0."""
        x = self.data  # a nan stays nan and passes gradient, as torch.relu
        return _node(0.0 if x < 0.0 else x, (self,), (0.0, "ReLU") if x <= 0.0 else (1.0, "ReLU"))

    def backward(self, gradient: Scalar = 1.0, *, create_graph: bool = False) -> None:
        """Fill ``.grad`` of every node this Value was computed from.

        Leaves accumulate (call ``zero_grad()`` between steps); interior
        nodes are recomputed, so two calls leave twice the leaf gradients.
        ``create_graph=True``: the gradients are Values, differentiable again.
        """
        if self._fn is NO_GRAD_RESULT:
            raise RuntimeError(
                "backward: this Value was computed under no_grad(), so it has no graph "
                "to backpropagate through"
            )
        seed: Any = _lift(gradient, "backward") if create_graph else _as_float(gradient, "backward")
        order = topological_order(self)
        # leaves add this pass's gradient to what they held: two passes are twice one
        held = [(leaf, leaf.grad) for leaf in order[1] if leaf.grad != 0.0]
        observer = mode.observer
        on_edge = None if observer is None else observer.backward
        backpropagate(self, seed, create_graph=create_graph, on_edge=on_edge, order=order)
        for leaf, before in held:
            leaf.grad = before + leaf.grad

    def __neg__(self) -> Value:
        return self * -1.0

    __radd__ = __add__  # micrograd's self + other: the same node

    def __sub__(self, other: Scalar) -> Value:
        return self + (-other if isinstance(other, Value) else -_as_float(other, "-"))

    def __rsub__(self, other: Scalar) -> Value:
        return -self + other

    __rmul__ = __mul__  # micrograd's self * other: the same node

    def __truediv__(self, other: Scalar) -> Value:
        b = other.data if isinstance(other, Value) else _as_float(other, "/")
        if _reciprocal_is_exact(self.data, b):
            return self * other**-1.0
        return _apply(P.DIV, (self, _lift(other, "/")))

    def __rtruediv__(self, other: Scalar) -> Value:
        c = _as_float(other, "/")
        if _reciprocal_is_exact(c, self.data):
            return self**-1.0 * c
        return _apply(P.DIV, (_leaf(c, "/"), self))

    def __repr__(self) -> str:
        return f"Value(data={self.data}, grad={self.grad})"

    def exp(self) -> Value:
        """``e ** self``."""
        try:
            y = math.exp(self.data)
        except OverflowError:
            y = math.inf
        return _node(y, (self,), (y, "exp"))  # the table's rule, written out

    def log(self) -> Value:
        """The natural logarithm (``-inf`` at 0, ``nan`` below, as PyTorch)."""
        x = self.data
        if x > 0.0:
            return _node(math.log(x), (self,), (1.0 / x, "log"))  # the table's rule
        return _apply(LOG, (self,))

    def tanh(self) -> Value:
        """The hyperbolic tangent."""
        return _apply(P.TANH, (self,))


def _node(data: float, prev: tuple[Value, ...], local: tuple[Any, ...]) -> Value:
    """A new node: its value, its inputs, their local derivatives and its primitive."""
    v = Value(data, prev, local, _OPERATOR)
    return v if _recording() is None else _unusual(v)


def _unusual(v: Value) -> Value:
    """A new node in a thread that is not simply recording."""
    s: Any = _recording()
    if not s.grad_enabled:  # no_grad: a constant, with no inputs
        v._prev, v._local = (), _NO_GRAD
    elif s.observer is not None:
        v._id = next_id()  # anomaly detection tells nodes apart by it
        s.observer.forward(v)
    return v


def _apply(fn: Primitive, inputs: tuple[Value, ...]) -> Value:
    """Run a primitive of the table on Values: forward, then its rule on floats."""
    datas = [x.data for x in inputs]
    y = fn.forward(*datas)
    return _node(y, inputs, (*fn.derivative(P.FLOAT, *datas, y), fn))  # type: ignore[misc]


_OPERATOR = object()  # Value()'s fourth argument from an operator: data, inputs, _local
NO_GRAD_RESULT = Primitive("", float, None)  # backward() from it is a mistake, as PyTorch
_NO_GRAD, _NUMBER = (NO_GRAD_RESULT,), (NUMBER,)


def _leaf(x: object, op: str) -> Value:
    """A number operand as a new leaf Value (micrograd's ``Value(other)``)."""
    return Value(_as_float(x, op), (), _NUMBER, _OPERATOR)


def _lift(x: object, op: str) -> Value:
    """A Value as it is; a number as a new leaf."""
    return x if isinstance(x, Value) else _leaf(x, op)


# beyond_micrograd's methods make their nodes with these (Value builds on it).
Value._apply, Value._lift, Value._new_leaf = staticmethod(_apply), staticmethod(_lift), Value
