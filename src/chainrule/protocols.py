"""micrograd's and microgpt's node protocols, on chainrule's nodes.

Code written for those engines builds and inspects nodes in their terms:

* micrograd: ``Value(data, _children, _op)``, then ``out._backward = f``
  with a closure that adds into the children's ``.grad``; ``_prev`` and
  ``_op`` to walk and draw the graph; ``v._backward()`` to apply one node's
  chain rule by hand.
* microgpt: ``Value(data, children, local_grads)``; ``_children`` and
  ``_local_grads``.

A chainrule node keeps ``_prev``, ``_local`` and ``_fn``; this module reads
and writes them as those names. A node with a micrograd closure has no
local derivatives (``_local`` is None) and its ``_fn`` is a :class:`UserOp`
holding the closure, which the backward walk calls.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from .primitives import Primitive


class UserOp(Primitive):
    """The primitive of a node built with ``Value(data, children, ...)``:
    a name, and micrograd's ``_backward`` closure if it has one, but no rule
    the engine could evaluate again (no ``create_graph``, no compile)."""

    __slots__ = ("closure",)

    def __init__(self, name: str, closure: Callable[[], None] | None = None) -> None:
        super().__init__(name, float, None)
        self.closure = closure


def _no_backward() -> None:
    """micrograd's default ``_backward``: contributes nothing."""


def made_by_user(v: Any, children: Iterable[Any], op: Any) -> None:
    """Fill node ``v`` from micrograd's ``(children, op name)`` or
    microgpt's ``(children, local_grads)``."""
    from .engine import Value, _as_float

    kids = tuple(children)
    for child in kids:
        if not isinstance(child, Value):
            raise TypeError(f"Value: children must be Values, got {type(child).__name__} {child!r}")
    v._prev = kids
    if isinstance(op, str):  # micrograd: an op name; the closure comes later
        v._fn = UserOp(op, _no_backward)
        v._local = None if kids else ()
        return
    local = tuple(_as_float(d, "Value") for d in op)  # microgpt: local gradients
    if len(local) != len(kids):
        raise ValueError(
            f"Value: {len(kids)} children but {len(local)} local gradients; give one per child"
        )
    v._fn = UserOp("")
    v._local = local


class _Rare:
    """An attribute few nodes have, kept in the node's ``_extra`` dict."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, node: Any, owner: type | None = None) -> Any:
        if node is None:
            return self
        try:
            return node._extra[self.name]
        except (AttributeError, KeyError):
            raise AttributeError(self.name) from None

    def __set__(self, node: Any, value: Any) -> None:
        try:
            extra = node._extra
        except AttributeError:
            extra = node._extra = {}
        extra[self.name] = value


class NodeProtocols:
    """The reference engines' names for a node's parts (a base of ``Value``)."""

    __slots__ = ()

    _prev: tuple[Any, ...]
    _local: tuple[Any, ...] | None
    _fn: Primitive
    _extra: dict[str, Any]
    grad: Any

    # A label and an anomaly detector's creation number are rare: they share
    # one slot, so that every node is smaller (and the collector's work too).
    _label = _Rare()
    _id = _Rare()

    @property
    def _children(self) -> tuple[Any, ...]:
        """The Values this one was computed from (microgpt's name; micrograd's
        is ``_prev``)."""
        return self._prev

    @property
    def _local_grads(self) -> tuple[Any, ...]:
        """``d self / d child`` for each of ``_children`` (microgpt's name)."""
        if self._local is None:
            raise AttributeError(
                f"_local_grads: node {self._op!r} backpropagates through a _backward "
                "closure, which has no local gradients to show"
            )
        return self._local

    @property
    def _op(self) -> str:
        """The operation's name (micrograd's ``_op``: ``'+'``, ``'*'``, ``'ReLU'``...)."""
        return self._fn.name

    @property
    def _backward(self) -> Callable[[], None]:
        """micrograd's closure: calling it applies this node's chain rule
        once, ``child.grad += local * self.grad`` for each input."""
        if self._local is None:
            closure: Callable[[], None] = self._fn.closure  # type: ignore[attr-defined]
            return closure
        return self._chain_rule_once

    @_backward.setter
    def _backward(self, closure: Callable[[], None]) -> None:
        if not callable(closure):
            raise TypeError(f"_backward: expected a callable, got {type(closure).__name__}")
        self._fn = UserOp(self._fn.name, closure)  # type: ignore[misc]
        self._local = None  # type: ignore[misc]

    def _chain_rule_once(self) -> None:
        g = self.grad
        for child, local in zip(self._prev, self._local or ()):
            child.grad += local * g
