"""The scalar engine's functions, on a number or a Value: ``chainrule.exp(x)``,
``chainrule.sin(x)``, ... Each returns a Value (a number becomes a leaf),
so it keeps the graph where ``math.exp(x)`` would drop it.

>>> from chainrule import Value, sin
>>> x = Value(0.0)
>>> y = sin(x) * 2
>>> y.backward()
>>> x.grad
2.0
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from types import FunctionType
from typing import Any

from . import engine as E
from .engine import Scalar, Value, _lift
from .primitives import FLOAT, Primitive

__all__ = [
    "apply",
    "cos",
    "exp",
    "log",
    "maximum",
    "minimum",
    "relu",
    "sigmoid",
    "sin",
    "softplus",
    "sqrt",
    "tanh",
]


def exp(x: Scalar) -> Value:
    """``e ** x`` for a number or a Value."""
    return _lift(x, "exp").exp()


def log(x: Scalar) -> Value:
    """The natural logarithm of a number or a Value."""
    return _lift(x, "log").log()


def sqrt(x: Scalar) -> Value:
    """The square root of a number or a Value."""
    return _lift(x, "sqrt").sqrt()


def tanh(x: Scalar) -> Value:
    """The hyperbolic tangent of a number or a Value."""
    return _lift(x, "tanh").tanh()


def sigmoid(x: Scalar) -> Value:
    """The logistic sigmoid of a number or a Value."""
    return _lift(x, "sigmoid").sigmoid()


def relu(x: Scalar) -> Value:
    """``max(0, x)`` for a number or a Value."""
    return _lift(x, "relu").relu()


def softplus(x: Scalar) -> Value:
    """``log(1 + e ** x)`` for a number or a Value."""
    return _lift(x, "softplus").softplus()


def sin(x: Scalar) -> Value:
    """The sine of a number or a Value."""
    return _lift(x, "sin").sin()


def cos(x: Scalar) -> Value:
    """The cosine of a number or a Value."""
    return _lift(x, "cos").cos()


def maximum(a: Scalar, b: Scalar) -> Value:
    """The larger of two numbers or Values (a tie splits the gradient)."""
    return _lift(a, "max").max(b)


def minimum(a: Scalar, b: Scalar) -> Value:
    """The smaller of two numbers or Values (a tie splits the gradient)."""
    return _lift(a, "min").min(b)


def is_own(fn: Primitive) -> bool:
    """Whether ``fn``'s functions are chainrule's own (the table's, the
    fused ops', the losses'; a forward written in Python among them, or one
    of the table's C functions, ``operator.add``): pure functions of the operands, which a
    compiled replay may evaluate in its backward pass. A user's may read
    state (a global scale a schedule changes) or raise: a replay evaluates
    them in its forward pass, when the eager engine does (a user's forward
    with a derivative rule of the table's is the user's)."""
    forward = fn.forward
    if isinstance(forward, FunctionType):
        return _chainrule_s(fn.derivative) and _chainrule_s(forward)
    return _chainrule_s(fn.derivative) and any(forward is f for f in _C_FORWARDS)


#: The table's forwards written in C (a user's ``math.exp`` is not one of them).
_C_FORWARDS = (operator.add, operator.mul, abs, float)


def _chainrule_s(f: object) -> bool:
    module = getattr(f, "__module__", None)
    return type(module) is str and module.startswith(_PACKAGE)


_PACKAGE = __name__.split(".", 1)[0] + "."


#: Called with a primitive whose forward or derivative function raised,
#: while compile traces (:mod:`chainrule.compiler.trace`): a replay would not raise.
raised: Callable[[Primitive], None] | None = None


def apply(fn: Primitive, inputs: Sequence[Any]) -> Value:
    """Apply a primitive (of the table, or a user's) to Values or numbers."""
    if fn.derivative is None:
        raise TypeError(f"{fn.name}: this primitive has no derivative rule and cannot be applied")
    xs = tuple(E._lift(x, fn.name) for x in inputs)
    if not xs:
        raise ValueError(f"{fn.name}: needs at least one input")
    datas = [x.data for x in xs]
    try:
        y = E._as_float(fn.forward(*datas), fn.name)
        local = tuple(fn.derivative(FLOAT, *datas, y))
        if len(local) != len(xs):
            raise ValueError(
                f"{fn.name}: derivative gave {len(local)} local gradients for {len(xs)} inputs"
            )
    except BaseException:
        if raised is not None:
            raised(fn)
        raise
    return E._node(y, xs, (*local, fn))


Primitive.apply = apply  # calling a primitive applies it (see Primitive.apply)
