"""micrograd's and microgpt's node protocols, on chainrule's nodes.

Code written for those engines builds and inspects nodes in their terms:

* micrograd: ``Value(data, _children, _op)``, then ``out._backward = f``
  with a closure that adds into the children's ``.grad``; ``_prev`` and
  ``_op`` to walk and draw the graph; ``v._backward()`` to apply one node's
  chain rule by hand.
* microgpt: ``Value(data, children, local_grads)``; ``_children`` and
  ``_local_grads``.

A chainrule node keeps ``_prev`` and ``_local`` (its local derivatives,
then its primitive); this module reads and writes them as those names, and
the primitive as ``_fn``. A node with a micrograd closure has no local
derivatives (``_local`` holds only its primitive, a :class:`UserOp` with
the closure, which the backward walk calls). A label and an anomaly
detector's creation number, which few nodes have, ride in a :class:`Tag`
in the primitive's place, so that every node stays four slots.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .intake import as_float
from .primitives import BY_NAME, LEAF, Primitive


class UserOp(Primitive):
    """The primitive of a node built with ``Value(data, children, ...)``:
    a name, and micrograd's ``_backward`` closure if it has one, but no rule
    the engine could evaluate again (no ``create_graph``, no compile)."""

    __slots__ = ("closure",)

    def __init__(self, name: str, closure: Callable[[], None] | None = None) -> None:
        super().__init__(name, float, None)
        self.closure = closure


MICROGPT = UserOp("")  # a node of microgpt's Value(data, children, local_grads)


REWIRED = [0]
"""How many times a Value has been wired by hand through this module (made
a node by ``Value(data, children, op)`` or ``v.__init__(...)``, given a
``_backward`` or an ``_fn``): a compiled replay that sees it move checks
that the leaves it reads are leaves still."""


def _no_backward() -> None:
    """micrograd's default ``_backward``: contributes nothing."""


def made_by_user(v: Any, children: Iterable[Any], op: Any) -> None:
    """Fill node ``v`` from micrograd's ``(children, op name)`` or
    microgpt's ``(children, local_grads)``."""
    kids = tuple(children)
    REWIRED[0] += 1
    for child in kids:
        if not isinstance(child, NodeProtocols):  # a base of every Value
            raise TypeError(f"Value: children must be Values, got {type(child).__name__} {child!r}")
    v._prev = kids
    if isinstance(op, str):  # micrograd: an op name; the closure comes later
        v._local = (UserOp(op, _no_backward if kids else None),)
        return
    local = tuple(as_float(d, "Value") for d in op)  # microgpt: local gradients
    if len(local) != len(kids):
        raise ValueError(
            f"Value: {len(kids)} children but {len(local)} local gradients; give one per child"
        )
    v._local = (*local, MICROGPT)


class Tag:
    """A node's primitive with what few nodes carry: a label, a number."""

    __slots__ = ("fn", "_label", "_id")

    def __init__(self, fn: Primitive) -> None:
        self.fn = fn


class _Rare:
    """An attribute few nodes have, kept in the node's :class:`Tag`."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, node: Any, owner: type | None = None) -> Any:
        if node is None:
            return self
        local = node._local
        if local and type(local[-1]) is Tag:
            return getattr(local[-1], self.name)
        raise AttributeError(self.name)

    def __set__(self, node: Any, value: Any) -> None:
        local = node._local
        if local and type(local[-1]) is Tag:
            tag = local[-1]
        else:
            tag = Tag(node._fn)
            node._local = (*local[:-1], tag) if local else (tag,)
        setattr(tag, self.name, value)


class NodeProtocols:
    """The reference engines' names for a node's parts (a base of ``Value``)."""

    __slots__ = ()

    data: float
    _prev: tuple[Any, ...]
    _local: tuple[Any, ...]
    grad: Any

    _label = _Rare()
    _id = _Rare()

    @property
    def _fn(self) -> Primitive:
        """The primitive that made this node: last in ``_local``, or its
        name there (a leaf's may be empty: :data:`~chainrule.value.primitives.LEAF`)."""
        local = self._local
        if not local:
            return LEAF
        fn = local[-1]
        if type(fn) is Tag:
            fn = fn.fn
        return BY_NAME[fn] if type(fn) is str else fn

    @_fn.setter
    def _fn(self, fn: Primitive) -> None:
        REWIRED[0] += 1
        local = self._local
        if local and type(local[-1]) is Tag:
            local[-1].fn = fn
        else:
            self._local = (*local[:-1], fn) if local else (fn,)  # type: ignore[misc]

    @property
    def _children(self) -> tuple[Any, ...]:
        """The Values this one was computed from (microgpt's name; micrograd's
        is ``_prev``)."""
        return self._prev

    @property
    def _local_grads(self) -> tuple[Any, ...]:
        """``d self / d child`` for each of ``_children`` (microgpt's name)."""
        closure = self._fn.closure
        if closure is not None:  # (a closure that knows why says so: a compiled output)
            raise AttributeError(
                getattr(closure, "no_local_grads", None)
                or f"_local_grads: node {self._op!r} backpropagates through a _backward "
                "closure, which has no local gradients to show"
            )
        return self._local[:-1]

    @property
    def _op(self) -> str:
        """The operation's name (micrograd's ``_op``: ``'+'``, ``'*'``, ``'ReLU'``...)."""
        return self._fn.name

    @property
    def _backward(self) -> Callable[[], None]:
        """micrograd's closure: calling it applies this node's chain rule
        once, ``child.grad += local * self.grad`` for each input."""
        return self._fn.closure or self._chain_rule_once

    @_backward.setter
    def _backward(self, closure: Callable[[], None]) -> None:
        if not callable(closure):
            raise TypeError(f"_backward: expected a callable, got {type(closure).__name__}")
        fn = UserOp(self._fn.name, closure)
        # no local derivatives: the closure has the rule
        self._local = self._local[-1:]  # type: ignore[misc]
        self._fn = fn

    def _chain_rule_once(self) -> None:
        g = self.grad
        for child, local in zip(self._prev, self._local):
            child.grad += local * g
