"""Python's operator dispatch for compile's own classes of Value.

Python asks the right operand of ``a * b`` first (``b.__rmul__(a)``) when
its class is a proper subclass of the left operand's and overrides the
reflected method; for a comparison ``a < b`` it asks ``b.__gt__(a)`` first
whenever ``b``'s class is a proper subclass. Eagerly, the nodes a function
makes are plain Values, so a user's ``class MyV(Value)`` overriding
``__rmul__`` is asked first in ``node * m``; compile puts its own classes in
place of plain Values (a node made while tracing, a stand-in for a pick, a
compiled call's output), which the user's class does not derive from, so
Python would ask Value's operator instead. :func:`as_value` gives those
classes operators that dispatch as for a plain Value: one set lookup on
the common path (a number, a Value, one of compile's classes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..value.engine import Value
from .reads import TracedFloat

#: Value's binary operators -> the method Python asks of the right operand
#: first when its class is a proper subclass of the left operand's: the
#: reflected operator (if the subclass overrides it), the swapped comparison
#: (always).
REFLECTED = {
    "__add__": "__radd__",
    "__sub__": "__rsub__",
    "__mul__": "__rmul__",
    "__truediv__": "__rtruediv__",
    "__pow__": "__rpow__",
    "__lt__": "__gt__",
    "__le__": "__ge__",
    "__gt__": "__lt__",
    "__ge__": "__le__",
}

#: The operand types of the common path, of which Python asks nothing
#: first: numbers, Value, and compile's own classes (:func:`as_value`).
PLAIN_OPERANDS: set[type] = {float, int, Value, TracedFloat}


def asked_first(left: Value, right: Any, reflected: str) -> Any:
    """What ``right`` answers when Python asks its ``reflected`` method
    first (``left`` a plain Value, ``right`` of the user's own subclass of
    Value), or NotImplemented when Python would not ask it: an arithmetic
    reflection is asked only if the subclass overrides Value's."""
    t = type(right)
    if t in PLAIN_OPERANDS or not issubclass(t, Value):
        return NotImplemented
    if reflected.startswith("__r") and getattr(t, reflected) is getattr(Value, reflected):
        return NotImplemented
    return getattr(right, reflected)(left)


def _dispatched(name: str, reflected: str) -> Callable[[Value, Any], Any]:
    """Value's operator ``name`` (the one Value has at call time: a trace
    swaps some) for a class of compile's own, dispatched as for a plain
    Value (:func:`as_value`)."""

    plain = PLAIN_OPERANDS

    def operator(self: Value, other: Any) -> Any:  # (two arguments: pow(v, 2, 3) as eagerly)
        if type(other) not in plain:
            result = asked_first(self, other, reflected)
            if result is not NotImplemented:
                return result
        return getattr(Value, name)(self, other)

    operator.__name__ = name
    operator.__qualname__ = f"{Value.__name__}.{name}"  # (in eager's error messages)
    return operator


def as_value(cls: type) -> None:
    """Give ``cls``, a class compile puts in place of a plain Value (a node
    made while tracing, a stand-in, a compiled call's output), Value's
    binary operators with Python's dispatch for a plain Value: eagerly,
    ``node * m`` with ``m`` of the user's subclass of Value that overrides
    ``__rmul__`` calls ``m.__rmul__`` first (``node < m``: ``m.__gt__``);
    Python would not for ``cls``, which the user's class does not derive from."""
    PLAIN_OPERANDS.add(cls)
    for name, reflected in REFLECTED.items():
        setattr(cls, name, _dispatched(name, reflected))
