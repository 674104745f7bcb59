"""The derivative table of the scalar engine: one primitive per line.

Each primitive is a name, a forward function on floats and a rule for its
*local derivatives*, ``d out / d input`` for each input, as in the table
every backpropagation text shows (``a * b``: ``b, a``; ``tanh(x)``:
``1 - tanh(x) ** 2``). A rule runs on floats when an operation runs, on
Values for ``create_graph=True`` and on NumPy arrays when
``chainrule.compile`` replays a graph: it is written with ordinary
operators and a math namespace ``M``. The fused library ops declare their
rules beside their code. Nothing here knows about ``Value``.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Callable, Sequence
from types import SimpleNamespace
from typing import Any

from . import ieee

Derivative = Callable[..., Sequence[Any]]

# How a non-finite gradient (inf, nan) passes a zero local derivative.
# PyTorch multiplies (0 * inf = nan) except in ops whose backward selects
# rather than multiplies: relu, maximum, minimum keep a masked input at 0.
MULTIPLY = 0  # 0 * inf = nan, as for mul, abs, ...
ZERO_MASKS = 1  # a zero local derivative blocks the gradient (relu, max, min)
DEAD_UNIT = 2  # fused relu(w . x + b): an inactive unit blocks all of it
ZERO_EXPONENT = 3  # x ** y: a zero exponent blocks the base's gradient


class Primitive:
    """An operation of the scalar engine: a name, a forward function on
    floats and ``derivative(M, *inputs, out)``, one local derivative per
    input, written with the namespace ``M`` (``M.div``, ``M.pow``,
    ``M.pow_scalar``, ``M.exp``, ``M.log``, ``M.sqrt``, ``M.sin``, ``M.cos``,
    ``M.sigmoid``, ``M.sign``, ``M.where``; ``M.data`` for an input's float).
    ``masked``: how an inf or nan gradient meets a zero local derivative.
    ``const=True``: a last operand ``c`` is a constant, not differentiated.
    Calling a primitive applies it: a custom operation in one line::

        >>> from chainrule import Primitive, Value
        >>> cube = Primitive("cube", lambda x: x ** 3, lambda M, x, out: (3 * x * x,))
        >>> x = Value(2.0)
        >>> cube(x).backward()
        >>> x.grad
        12.0
    """

    __slots__ = ("name", "forward", "derivative", "masked", "const")
    closure: Callable[[], None] | None = None  # micrograd's _backward (protocols.UserOp)

    def __init__(
        self,
        name: str,
        forward: Callable[..., float],
        derivative: Derivative | None,
        masked: int = MULTIPLY,
        *,
        const: bool = False,
    ) -> None:
        self.name = name
        self.forward = forward
        self.derivative = derivative
        self.masked = masked
        self.const = const

    #: A call's work: :func:`~chainrule.value.functions.apply`, set there (it builds on this table).
    apply: Callable[[Primitive, Sequence[Any]], Any]

    def __call__(self, *inputs: Any) -> Any:
        return Primitive.apply(self, inputs)

    def __repr__(self) -> str:
        return f"Primitive({self.name!r})"


# Rules too long for one line


def _d_pow(M: Any, a: Any, b: Any, out: Any) -> tuple[Any, Any]:
    # As PyTorch: no gradient through a zero exponent, and none to the
    # exponent when the base is 0 and the exponent non-negative.
    ad, bd = M.data(a), M.data(b)
    d_base = M.where(bd == 0.0, 0.0, b * M.pow(a, b - 1.0))
    d_exponent = M.where((ad == 0.0) & (bd >= 0.0), 0.0, out * M.log(a))
    return d_base, d_exponent


def _d_maximum(M: Any, a: Any, b: Any, out: Any) -> tuple[float, float]:
    a, b = M.data(a), M.data(b)  # ties split the gradient, as torch.maximum
    tie = a == b
    return M.where(tie, 0.5, M.where(a < b, 0.0, 1.0)), M.where(tie, 0.5, M.where(a > b, 0.0, 1.0))


def _d_minimum(M: Any, a: Any, b: Any, out: Any) -> tuple[float, float]:
    return _d_maximum(M, b, a, out)  # min(a, b) selects as max(b, a) does


def _d_relu(M: Any, x: Any, out: Any) -> tuple[float]:
    return (M.where(out <= 0.0, 0.0, 1.0),)  # a nan output is live, as torch.relu


# The table

LEAF = Primitive("", float, None)
#: A leaf made from a number operand (``x * 2``: micrograd's ``Value(2)``).
NUMBER = Primitive("", float, None)

# name, forward on floats, local derivative(s) (M, inputs..., out) -> per input
ADD = Primitive("+", operator.add, lambda M, a, b, out: (1.0, 1.0))
MUL = Primitive("*", operator.mul, lambda M, a, b, out: (b, a))
DIV = Primitive("/", ieee.div, lambda M, a, b, out: (M.div(1.0, b), M.div(-out, b)))
POW = Primitive("**", ieee.pow, _d_pow, ZERO_EXPONENT)
MAXIMUM = Primitive("max", ieee.maximum, _d_maximum, ZERO_MASKS)
MINIMUM = Primitive("min", ieee.minimum, _d_minimum, ZERO_MASKS)
EXP = Primitive("exp", ieee.exp, lambda M, x, out: (out,))
LOG = Primitive("log", ieee.log, lambda M, x, out: (M.div(1.0, x),))
SQRT = Primitive("sqrt", ieee.sqrt, lambda M, x, out: (M.div(0.5, out),))
TANH = Primitive("tanh", ieee.tanh, lambda M, x, out: (1.0 - out * out,))
SIGMOID = Primitive("sigmoid", ieee.sigmoid, lambda M, x, out: (out * (1.0 - out),))
SOFTPLUS = Primitive("softplus", ieee.softplus, lambda M, x, out: (M.sigmoid(x),))
RELU = Primitive("ReLU", lambda x: 0.0 if x < 0.0 else x, _d_relu, ZERO_MASKS)  # nan stays
ABS = Primitive("abs", abs, lambda M, x, out: (M.sign(x),))
SIN = Primitive("sin", ieee.sin, lambda M, x, out: (M.cos(x),))
COS = Primitive("cos", ieee.cos, lambda M, x, out: (-M.sin(x),))


#: Entries a node names by a string in its ``_local`` (``(b, a, "*")``): the cyclic
#: collector stops tracking a tuple of floats and strings, as microgpt's.
BY_NAME = {fn.name: fn for fn in (ADD, MUL, EXP, LOG, RELU)}


@functools.lru_cache(maxsize=256)
def pow_const(c: float) -> Primitive:
    """``x ** c`` for a constant ``c``: one primitive per exponent."""

    def d(M: Any, x: Any, out: Any) -> tuple[Any]:
        return (0.0,) if c == 0.0 else (c * M.pow_scalar(x, c - 1.0),)

    # As PyTorch, x ** 0 passes no gradient at all, not even 0 * inf = nan.
    masked = ZERO_MASKS if c == 0.0 else MULTIPLY
    return Primitive(f"**{c:g}", lambda x: ieee.pow_scalar(x, c), d, masked)


# The float namespace the rules run in for the ordinary backward pass


def where(condition: Any, if_true: Any, if_false: Any) -> Any:
    """The rules' data-dependent choice, written so that an array namespace
    can take it element-wise (``numpy.where``) when compile replays a rule."""
    return if_true if condition else if_false


_ON_FLOATS = ("div", "pow", "pow_scalar", "exp", "log", "sqrt", "sin", "cos", "sigmoid", "sign")
#: Rules on floats: the ordinary backward pass.
FLOAT = SimpleNamespace(
    **{name: getattr(ieee, name) for name in _ON_FLOATS}, data=lambda x: x, where=where
)
