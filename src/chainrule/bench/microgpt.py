"""The literal scalar engine of microgpt, the baseline a microgpt user
compares with.

Written from the published description of microgpt's ``Value``: a node
keeps its inputs (``_children``) and the local derivative with respect to
each (``_local_grads``); ``backward()`` orders the graph with a recursive
depth-first search and adds ``local_grad * v.grad`` into every child. No
fused ops, no error checks: the smallest correct engine, as its users run
it. chainrule's ``Value`` must run the same user code faster and give the
same numbers bit for bit.
"""

from __future__ import annotations

import math
import sys
from typing import Any

#: The literal engine sorts its graph recursively; a step's graph is deeper
#: than Python's default limit of 1,000 (microgpt's users raise it too).
RECURSION_LIMIT = 20_000


class Value:
    __slots__ = ("data", "grad", "_children", "_local_grads")

    def __init__(
        self, data: Any, children: tuple[Any, ...] = (), local_grads: tuple[Any, ...] = ()
    ) -> None:
        self.data = data
        self.grad = 0
        self._children = children
        self._local_grads = local_grads

    def __add__(self, other: Any) -> Value:
        other = other if isinstance(other, Value) else Value(other)
        return Value(self.data + other.data, (self, other), (1, 1))

    def __mul__(self, other: Any) -> Value:
        other = other if isinstance(other, Value) else Value(other)
        return Value(self.data * other.data, (self, other), (other.data, self.data))

    def __pow__(self, other: float) -> Value:
        return Value(self.data**other, (self,), (other * self.data ** (other - 1),))

    def log(self) -> Value:
        return Value(math.log(self.data), (self,), (1 / self.data,))

    def exp(self) -> Value:
        return Value(math.exp(self.data), (self,), (math.exp(self.data),))

    def relu(self) -> Value:
        return Value(max(0, self.data), (self,), (float(self.data > 0),))

    def __neg__(self) -> Value:
        return self * -1

    def __radd__(self, other: Any) -> Value:
        return self + other

    def __sub__(self, other: Any) -> Value:
        return self + (-other)

    def __rsub__(self, other: Any) -> Value:
        return other + (-self)

    def __rmul__(self, other: Any) -> Value:
        return self * other

    def __truediv__(self, other: Any) -> Value:
        return self * other**-1

    def __rtruediv__(self, other: Any) -> Value:
        return other * self**-1

    def backward(self) -> None:
        topo: list[Value] = []
        visited: set[Value] = set()

        def build_topo(v: Value) -> None:
            if v not in visited:
                visited.add(v)
                for child in v._children:
                    build_topo(child)
                topo.append(v)

        build_topo(self)
        self.grad = 1
        for v in reversed(topo):
            for child, local_grad in zip(v._children, v._local_grads):
                child.grad += local_grad * v.grad


def literal_value() -> type:
    """The literal engine's ``Value``, with the recursion limit its
    recursive sort needs on a training step's graph."""
    sys.setrecursionlimit(max(sys.getrecursionlimit(), RECURSION_LIMIT))
    return Value
