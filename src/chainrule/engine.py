"""The scalar engine: ``Value``, its operations and its backward pass.

Every operation is a :class:`Primitive`: a forward function on floats and a
*local derivative* rule, declared together in the table below. When an
operation runs, the engine evaluates the rule on the input floats right away
and stores the results, plain floats, in the new node's ``_local``. The
backward pass then only multiplies and adds::

    for node in reverse topological order:
        for child, local in zip(node._prev, node._local):
            child.grad += local * node.grad

The same rule also serves higher-order gradients: ``backward(create_graph=True)``
evaluates it again, on the nodes themselves instead of their floats, so the
gradient is itself a graph of Values. A rule is written against a small math
namespace ``M`` (``M.div``, ``M.log``, ...) that is either float arithmetic
with IEEE semantics (:mod:`chainrule.ieee`) or Value arithmetic.
"""

from __future__ import annotations

import functools
import itertools
import numbers
import operator
from collections.abc import Callable, Iterable, Sequence
from types import SimpleNamespace
from typing import Any, Union

from . import ieee
from .graph import Labelled, mode, next_id, reverse_topological_order

Number = Union[int, float]
Scalar = Union["Value", int, float]
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
    floats, and its local derivatives.

    ``derivative(M, *inputs, out)`` returns one local derivative
    ``d out / d input`` per input. It is written with ordinary operators
    plus the functions of the namespace ``M`` (``M.div``, ``M.pow``,
    ``M.pow_scalar``, ``M.exp``, ``M.log``, ``M.sqrt``, ``M.sin``, ``M.cos``, ``M.sigmoid``,
    ``M.sign`` and ``M.data``, which reads the float of an input), so that it
    runs both on floats (the ordinary backward pass) and on Values
    (``create_graph=True``, higher-order gradients).

    A *linear* primitive (``derivative=None``) has constant local
    derivatives, supplied when a node is made; ``+`` and ``*`` by a constant
    are linear.

    ``masked`` says how an inf or nan gradient meets a zero local
    derivative: ``MULTIPLY`` (the default, ``0 * inf = nan``, as PyTorch's
    arithmetic) or ``ZERO_MASKS`` (a zero blocks it, as PyTorch's relu,
    maximum and minimum, whose backward selects instead of multiplying).

    Calling a primitive applies it, which is how user code defines a custom
    operation::

        >>> from chainrule import Primitive, Value
        >>> cube = Primitive("cube", lambda x: x ** 3, lambda M, x, out: (3 * x * x,))
        >>> y = cube(Value(2.0))
        >>> y.backward()
        >>> y._prev[0].grad
        12.0
    """

    __slots__ = ("name", "forward", "derivative", "masked")

    def __init__(
        self,
        name: str,
        forward: Callable[..., float],
        derivative: Derivative | None,
        masked: int = MULTIPLY,
    ) -> None:
        self.name = name
        self.forward = forward
        self.derivative = derivative
        self.masked = masked

    def __call__(self, *inputs: Scalar) -> Value:
        if self.derivative is None:
            raise TypeError(f"{self.name}: a linear primitive is applied by the engine, not called")
        xs = tuple(_lift(x, self.name) for x in inputs)
        datas = [x.data for x in xs]
        y = _as_float(self.forward(*datas), self.name)
        local = tuple(self.derivative(FLOAT, *datas, y))
        if len(local) != len(xs):
            raise ValueError(
                f"{self.name}: derivative gave {len(local)} local gradients for {len(xs)} inputs"
            )
        return _node(y, xs, local, self)

    def __repr__(self) -> str:
        return f"Primitive({self.name!r})"


# --------------------------------------------------------------------------
# Numbers coming in
# --------------------------------------------------------------------------

_ACCEPTED = "an int, float, bool, NumPy real scalar or Value"


def _as_float(x: object, op: str) -> float:
    """``x`` as a float, or a TypeError that names the op and the value."""
    if type(x) is float:
        return x
    if isinstance(x, numbers.Real):  # int, bool, Fraction, NumPy real scalars
        return float(x)
    raise TypeError(f"{op}: expected {_ACCEPTED}, got {type(x).__name__} {x!r}")


def _lift(x: object, op: str) -> Value:
    """A Value as it is; a number as a new constant leaf."""
    if isinstance(x, Value):
        return x
    return Value(_as_float(x, op))


# --------------------------------------------------------------------------
# Node creation: the one hot function every operation goes through
# --------------------------------------------------------------------------

_new = object.__new__


def _node(y: float, prev: tuple[Value, ...], local: Sequence[Any], fn: Primitive) -> Value:
    v = _new(Value)
    v.data = y
    v.grad = 0.0
    if mode.fast:
        v._prev = prev
        v._local = local
        v._fn = fn
        v._id = next_id()
        return v
    if not mode.grad_enabled:  # no_grad: a constant, no graph
        v._prev = v._local = ()
        v._fn = NO_GRAD_RESULT
        v._id = 0
        return v
    v._prev = prev
    v._local = local
    v._fn = fn
    v._id = next_id()
    if mode.observer is not None:
        mode.observer.forward(v)
    return v


def _unary(fn: Primitive, x: Value) -> Value:
    xd = x.data
    y = fn.forward(xd)
    return _node(y, (x,), fn.derivative(FLOAT, xd, y), fn)  # type: ignore[misc]


def _binary(fn: Primitive, a: Value, b: Value) -> Value:
    ad = a.data
    bd = b.data
    y = fn.forward(ad, bd)
    return _node(y, (a, b), fn.derivative(FLOAT, ad, bd, y), fn)  # type: ignore[misc]


# --------------------------------------------------------------------------
# The derivative table: one primitive per line, forward beside its rule
# --------------------------------------------------------------------------


def _d_pow(M: Any, a: Any, b: Any, out: Any) -> tuple[Any, Any]:
    # As PyTorch: no gradient through a zero exponent, and none to the
    # exponent when the base is 0 and the exponent non-negative.
    ad, bd = M.data(a), M.data(b)
    d_base = 0.0 if bd == 0.0 else b * M.pow(a, b - 1.0)
    d_exponent = 0.0 if (ad == 0.0 and bd >= 0.0) else out * M.log(a)
    return d_base, d_exponent


def _d_maximum(M: Any, a: Any, b: Any, out: Any) -> tuple[float, float]:
    a, b = M.data(a), M.data(b)  # ties split the gradient, as torch.maximum
    if a == b:
        return 0.5, 0.5
    return (0.0 if a < b else 1.0), (0.0 if a > b else 1.0)


def _d_minimum(M: Any, a: Any, b: Any, out: Any) -> tuple[float, float]:
    a, b = M.data(a), M.data(b)
    if a == b:
        return 0.5, 0.5
    return (0.0 if a > b else 1.0), (0.0 if a < b else 1.0)


def _d_dot(M: Any, *args: Any) -> tuple[Any, ...]:
    # inputs w1..wn, x1..xn: d/dw_i = x_i, d/dx_i = w_i
    n = (len(args) - 1) // 2
    return (*args[n : 2 * n], *args[:n])


def _d_affine(M: Any, *args: Any) -> tuple[Any, ...]:
    # inputs w1..wn, x1..xn, b: as dot, and d/db = 1
    n = (len(args) - 2) // 2
    return (*args[n : 2 * n], *args[:n], 1.0)


def _d_affine_relu(M: Any, *args: Any) -> tuple[Any, ...]:
    # relu(w . x + b): the affine rule where the unit is active, 0 where not
    if args[-1] <= 0.0:  # the output; a Value compares by its data
        return (0.0,) * (len(args) - 1)
    return _d_affine(M, *args)


def _dot_forward(*args: float) -> float:
    n = len(args) // 2
    return sum(map(operator.mul, args[:n], args[n : 2 * n]))


def _affine_forward(*args: float) -> float:
    return _dot_forward(*args[:-1]) + args[-1]


def _relu(x: float) -> float:
    return 0.0 if x < 0.0 else x  # keeps nan, as torch.relu


def _affine_relu_forward(*args: float) -> float:
    return _relu(_affine_forward(*args))


LEAF = Primitive("", float, None)
# A result computed under no_grad: a leaf too, but backward() from it is a
# mistake (PyTorch raises), while backward() from a leaf the user made is not.
NO_GRAD_RESULT = Primitive("", float, None)

# name, forward on floats, local derivative(s) (M, inputs..., out) -> per input
ADD = Primitive("+", operator.add, lambda M, a, b, out: (1.0, 1.0))
SUB = Primitive("-", operator.sub, lambda M, a, b, out: (1.0, -1.0))
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
RELU = Primitive("ReLU", _relu, lambda M, x, out: (0.0,) if out <= 0.0 else (1.0,), ZERO_MASKS)
ABS = Primitive("abs", abs, lambda M, x, out: (M.sign(x),))
SIN = Primitive("sin", ieee.sin, lambda M, x, out: (M.cos(x),))
COS = Primitive("cos", ieee.cos, lambda M, x, out: (-M.sin(x),))
RDIV_CONST = Primitive("/", ieee.div, lambda M, x, out: (M.div(-out, x),))  # c / x
DOT = Primitive("dot", _dot_forward, _d_dot)
AFFINE = Primitive("dot", _affine_forward, _d_affine)
AFFINE_RELU = Primitive("ReLU(dot)", _affine_relu_forward, _d_affine_relu, DEAD_UNIT)

# Linear: the local derivatives are constants, given when the node is made.
NEG = Primitive("neg", operator.neg, None)  # (-1,)
ADD_CONST = Primitive("+", operator.add, None)  # x + c: (1,)
SUB_CONST = Primitive("-", operator.sub, None)  # x - c: (1,)
RSUB_CONST = Primitive("-", operator.sub, None)  # c - x: (-1,)
MUL_CONST = Primitive("*", operator.mul, None)  # x * c: (c,)
DIV_CONST = Primitive("/", ieee.div, None)  # x / c: (1/c,)
ADD_N = Primitive("sum", lambda *a: sum(a), None)  # x1 + ... + xn: (1, ..., 1)
AFFINE_CONST = Primitive("dot", _affine_forward, None)  # w . c + b: (c..., 1)
# relu(w . c + b): (c..., 1) where active, zeros where not; constant wherever
# the derivative exists, so linear too
AFFINE_CONST_RELU = Primitive("ReLU(dot)", _affine_relu_forward, None, DEAD_UNIT)


@functools.lru_cache(maxsize=256)
def _pow_const(c: float) -> Primitive:
    """``x ** c`` for a constant ``c``: one primitive per exponent."""

    def d(M: Any, x: Any, out: Any) -> tuple[Any]:
        return (0.0,) if c == 0.0 else (c * M.pow_scalar(x, c - 1.0),)

    # As PyTorch, x ** 0 passes no gradient at all, not even 0 * inf = nan.
    masked = ZERO_MASKS if c == 0.0 else MULTIPLY
    return Primitive(f"**{c:g}", lambda x: ieee.pow_scalar(x, c), d, masked)


@functools.lru_cache(maxsize=256)
def _rpow_const(c: float) -> Primitive:
    """``c ** x`` for a constant ``c``."""
    log_c = ieee.log(c)

    def d(M: Any, x: Any, out: Any) -> tuple[Any]:
        return (0.0,) if (c == 0.0 and M.data(x) >= 0.0) else (out * log_c,)

    return Primitive(f"{c:g}**", lambda x: ieee.pow(c, x), d)


# --------------------------------------------------------------------------
# Value
# --------------------------------------------------------------------------


class Value(Labelled):
    """A scalar and the graph that computed it.

    ``data`` is the number, ``grad`` the derivative of the last
    ``backward()`` root with respect to it (0.0 until then). ``_prev`` are
    the Values it was computed from and ``_op`` the name of the operation,
    as in micrograd, so code that draws micrograd graphs works unchanged.

    >>> a, b = Value(2.0, label="a"), Value(-3.0, label="b")
    >>> f = (a * b + 10.0).relu()
    >>> f.backward()
    >>> a.grad, b.grad
    (-3.0, 2.0)

    Values compare (``<``, ``<=``, ``>``, ``>=``) by ``data``; ``==`` and
    hashing are by identity, so Values can be kept in sets and dicts.
    """

    __slots__ = ("data", "grad", "_prev", "_local", "_fn", "_id", "_label")

    data: float
    grad: float | Value
    _prev: tuple[Value, ...]
    _local: Sequence[Any]
    _fn: Primitive
    _id: int

    def __init__(self, data: Number, label: str = "") -> None:
        self.data = _as_float(data, "Value")
        self.grad = 0.0
        self._prev = ()
        self._local = ()
        self._fn = LEAF
        self._id = 0
        if label:
            self._label = str(label)

    # -- naming -------------------------------------------------------------

    @property
    def _op(self) -> str:
        return self._fn.name

    def __repr__(self) -> str:
        return f"Value(data={self.data}, grad={self.grad})"

    def __float__(self) -> float:
        return self.data

    def __format__(self, spec: str) -> str:
        return format(self.data, spec)

    def _repr_svg_(self) -> str | None:
        """Jupyter shows a Value as the drawing of its graph when Graphviz's
        ``dot`` is installed; None falls back to the repr."""
        from .viz import svg_or_none  # lazily: drawing is not the engine's job

        return svg_or_none(self)

    # -- arithmetic ---------------------------------------------------------

    def __add__(self, other: Scalar) -> Value:
        if type(other) is Value:
            a = self.data
            b = other.data
            y = a + b
            return _node(y, (self, other), ADD.derivative(FLOAT, a, b, y), ADD)  # type: ignore[misc]
        if isinstance(other, Value):
            return _binary(ADD, self, other)
        return _node(self.data + _as_float(other, "+"), (self,), (1.0,), ADD_CONST)

    __radd__ = __add__

    def __mul__(self, other: Scalar) -> Value:
        if type(other) is Value:
            a = self.data
            b = other.data
            y = a * b
            return _node(y, (self, other), MUL.derivative(FLOAT, a, b, y), MUL)  # type: ignore[misc]
        if isinstance(other, Value):
            return _binary(MUL, self, other)
        c = _as_float(other, "*")
        return _node(self.data * c, (self,), (c,), MUL_CONST)

    __rmul__ = __mul__

    def __sub__(self, other: Scalar) -> Value:
        if isinstance(other, Value):
            return _binary(SUB, self, other)
        return _node(self.data - _as_float(other, "-"), (self,), (1.0,), SUB_CONST)

    def __rsub__(self, other: Scalar) -> Value:
        return _node(_as_float(other, "-") - self.data, (self,), (-1.0,), RSUB_CONST)

    def __truediv__(self, other: Scalar) -> Value:
        if isinstance(other, Value):
            return _binary(DIV, self, other)
        c = _as_float(other, "/")
        return _node(ieee.div(self.data, c), (self,), (ieee.div(1.0, c),), DIV_CONST)

    def __rtruediv__(self, other: Scalar) -> Value:
        c = _as_float(other, "/")
        y = ieee.div(c, self.data)
        return _node(y, (self,), RDIV_CONST.derivative(FLOAT, self.data, y), RDIV_CONST)  # type: ignore[misc]

    def __pow__(self, other: Scalar) -> Value:
        if isinstance(other, Value):
            return _binary(POW, self, other)
        return _unary(_pow_const(_as_float(other, "**")), self)

    def __rpow__(self, other: Scalar) -> Value:
        return _unary(_rpow_const(_as_float(other, "**")), self)

    def __neg__(self) -> Value:
        return _node(-self.data, (self,), (-1.0,), NEG)

    def __pos__(self) -> Value:
        return self

    def __abs__(self) -> Value:
        return _unary(ABS, self)

    # -- functions ----------------------------------------------------------

    def exp(self) -> Value:
        return _unary(EXP, self)

    def log(self) -> Value:
        return _unary(LOG, self)

    def sqrt(self) -> Value:
        return _unary(SQRT, self)

    def tanh(self) -> Value:
        return _unary(TANH, self)

    def sigmoid(self) -> Value:
        return _unary(SIGMOID, self)

    def relu(self) -> Value:
        x = self.data
        y = 0.0 if x < 0.0 else x  # inlined: the activation of every hidden neuron
        return _node(y, (self,), RELU.derivative(FLOAT, x, y), RELU)  # type: ignore[misc]

    def softplus(self) -> Value:
        return _unary(SOFTPLUS, self)

    def sin(self) -> Value:
        return _unary(SIN, self)

    def cos(self) -> Value:
        return _unary(COS, self)

    def abs(self) -> Value:
        return _unary(ABS, self)

    def max(self, other: Scalar) -> Value:
        """The larger of ``self`` and ``other`` (a tie splits the gradient)."""
        return _binary(MAXIMUM, self, _lift(other, "max"))

    def min(self, other: Scalar) -> Value:
        """The smaller of ``self`` and ``other`` (a tie splits the gradient)."""
        return _binary(MINIMUM, self, _lift(other, "min"))

    # -- comparisons on data ------------------------------------------------

    def __lt__(self, other: Scalar) -> bool:
        return self.data < _data(other, "<")

    def __le__(self, other: Scalar) -> bool:
        return self.data <= _data(other, "<=")

    def __gt__(self, other: Scalar) -> bool:
        return self.data > _data(other, ">")

    def __ge__(self, other: Scalar) -> bool:
        return self.data >= _data(other, ">=")

    # -- graph --------------------------------------------------------------

    def detach(self) -> Value:
        """A new leaf with the same data, cut off from this graph."""
        return Value(self.data)

    def backward(self, gradient: Scalar = 1.0, *, create_graph: bool = False) -> None:
        """Fill ``.grad`` of every node this Value was computed from.

        The seeds' algorithm: order the graph topologically, seed this
        node's gradient with ``gradient`` (1.0), walk the order in reverse
        and add ``local * node.grad`` into every input. Leaves accumulate
        (call ``zero_grad()`` between steps); interior nodes are recomputed
        on every call, so two calls leave exactly twice the leaf gradients.

        With ``create_graph=True`` the gradients are Values in a new graph
        and can be differentiated again.
        """
        if self._fn is NO_GRAD_RESULT:
            raise RuntimeError(
                "backward: this Value was computed under no_grad(), so it has no graph "
                "to backpropagate through"
            )
        if create_graph:
            _backward_create_graph(self, gradient)
            return
        seed = _as_float(gradient, "backward")
        order, leaves = reverse_topological_order(self)
        if not order:
            self.grad += seed
            return
        for v in order:
            v.grad = 0.0
        # Leaves collect this pass's gradient from zero and add it to what
        # they held in one step, so two passes give exactly twice one pass.
        held = [(leaf, leaf.grad) for leaf in leaves if leaf.grad != 0.0]
        for leaf, _ in held:
            leaf.grad = 0.0
        self.grad = seed
        if mode.observer is not None:
            _backward_observed(order, mode.observer)
        else:
            for v in order:
                g = v.grad
                if g - g != 0.0 and v._fn.masked:  # inf or nan into a mask
                    _masked_step(v, g, _add_to_grad)
                    continue
                for child, local in zip(v._prev, v._local):
                    child.grad += local * g
        for leaf, before in held:
            leaf.grad = before + leaf.grad


def _data(x: object, op: str) -> float:
    return x.data if isinstance(x, Value) else _as_float(x, op)


def _backward_observed(order: list[Value], observer: Any) -> None:
    for v in order:
        g: Any = v.grad  # a float: create_graph passes go through _propagate
        if g - g != 0.0 and v._fn.masked:  # as in backward(); the observer
            _masked_step(v, g, _add_to_grad)  # ignores non-finite incoming
            continue
        for child, local in zip(v._prev, v._local):
            contribution = local * g
            observer.backward(v, child, contribution, g)
            child.grad += contribution


def _backward_create_graph(root: Value, gradient: Scalar) -> None:
    grads = _propagate(root, _lift(gradient, "backward"), create_graph=True)
    for node, g in grads.items():
        if node._prev or (type(node.grad) is float and node.grad == 0.0):
            node.grad = g
        else:
            node.grad = node.grad + g


def _add_to_grad(child: Value, contribution: float) -> None:
    child.grad += contribution


def _add_to_dict(grads: dict[Value, Any], child: Value, contribution: float) -> None:
    acc = grads.get(child)
    grads[child] = contribution if acc is None else acc + contribution


def _masked_step(v: Value, g: float, add: Callable[[Value, float], None]) -> None:
    """Pass a non-finite gradient ``g`` through a node whose op selects its
    gradient (relu, max, min, pow): masked inputs get nothing, not ``0 * inf``."""
    local = v._local
    if v._fn.masked == ZERO_EXPONENT:  # torch.pow selects, for the base only
        base, exponent = v._prev
        if exponent.data != 0.0:
            add(base, local[0] * g)
        add(exponent, local[1] * g)
        return
    if v._fn.masked == DEAD_UNIT:
        if local[-1] == 0.0:  # the bias's local is 0 only for an inactive unit
            return
        for child, d in zip(v._prev, local):
            add(child, d * g)
        return
    for child, d in zip(v._prev, local):
        if d != 0.0:
            add(child, d * g)


def _propagate(root: Value, seed: Any, create_graph: bool) -> dict[Value, Any]:
    """Gradients of ``root`` for every node it depends on, in a dict; no
    ``.grad`` is touched. With ``create_graph`` they are Values."""
    grads: dict[Value, Any] = {root: seed}
    get = grads.get
    observer = mode.observer  # detect_anomaly sees these contributions too
    for v in reverse_topological_order(root)[0]:
        g = get(v)
        if g is None:
            continue
        fn = v._fn
        if create_graph and fn.derivative is not None:
            local: Sequence[Any] = fn.derivative(GRAPH, *v._prev, v)
        else:
            local = v._local
        if type(g) is float and g - g != 0.0 and fn.masked:
            _masked_step(v, g, functools.partial(_add_to_dict, grads))
            continue
        for child, d in zip(v._prev, local):
            contribution = d * g
            if observer is not None:
                observer.backward(v, child, contribution, g)
            acc = get(child)
            grads[child] = contribution if acc is None else acc + contribution
    return grads


def gradients(
    output: Value,
    inputs: Sequence[Value],
    gradient: Scalar = 1.0,
    *,
    create_graph: bool = False,
) -> list[Any]:
    """d output / d input for each of ``inputs``, without touching ``.grad``
    (``torch.autograd.grad``). An input the output does not depend on gets 0.

    With ``create_graph=True`` each gradient is a Value that can be
    differentiated again; otherwise a float.
    """
    if not isinstance(output, Value):
        raise TypeError(f"gradients: output must be a Value, got {type(output).__name__}")
    seed: Any = _lift(gradient, "gradients") if create_graph else _as_float(gradient, "gradients")
    grads = _propagate(output, seed, create_graph)
    zero: Any = Value(0.0) if create_graph else 0.0
    return [grads.get(x, zero) for x in inputs]


# --------------------------------------------------------------------------
# The two math namespaces the derivative rules are evaluated in
# --------------------------------------------------------------------------


def _identity(x: Any) -> Any:
    return x


#: Rules on floats: the ordinary backward pass.
FLOAT = SimpleNamespace(
    div=ieee.div,
    pow=ieee.pow,
    pow_scalar=ieee.pow_scalar,
    exp=ieee.exp,
    log=ieee.log,
    sqrt=ieee.sqrt,
    sin=ieee.sin,
    cos=ieee.cos,
    sigmoid=ieee.sigmoid,
    sign=ieee.sign,
    data=_identity,
)


def _graph_data(x: Any) -> float:
    return x.data if isinstance(x, Value) else x


def _graph_sign(x: Any) -> float:
    return ieee.sign(_graph_data(x))


# --------------------------------------------------------------------------
# Functions on numbers or Values, and the fused n-ary ops
# --------------------------------------------------------------------------


def exp(x: Scalar) -> Value:
    return _unary(EXP, _lift(x, "exp"))


def log(x: Scalar) -> Value:
    return _unary(LOG, _lift(x, "log"))


def sqrt(x: Scalar) -> Value:
    return _unary(SQRT, _lift(x, "sqrt"))


def tanh(x: Scalar) -> Value:
    return _unary(TANH, _lift(x, "tanh"))


def sigmoid(x: Scalar) -> Value:
    return _unary(SIGMOID, _lift(x, "sigmoid"))


def relu(x: Scalar) -> Value:
    return _unary(RELU, _lift(x, "relu"))


def softplus(x: Scalar) -> Value:
    return _unary(SOFTPLUS, _lift(x, "softplus"))


def sin(x: Scalar) -> Value:
    return _unary(SIN, _lift(x, "sin"))


def cos(x: Scalar) -> Value:
    return _unary(COS, _lift(x, "cos"))


def maximum(a: Scalar, b: Scalar) -> Value:
    return _binary(MAXIMUM, _lift(a, "max"), _lift(b, "max"))


def minimum(a: Scalar, b: Scalar) -> Value:
    return _binary(MINIMUM, _lift(a, "min"), _lift(b, "min"))


#: Rules on Values: ``create_graph=True``.
GRAPH = SimpleNamespace(
    div=operator.truediv,
    pow=operator.pow,
    pow_scalar=operator.pow,
    exp=exp,
    log=log,
    sqrt=sqrt,
    sin=sin,
    cos=cos,
    sigmoid=sigmoid,
    sign=_graph_sign,
    data=_graph_data,
)

_ONLY_VALUES = frozenset({Value})
_ONLY_FLOATS = frozenset({float})
_get_data = operator.attrgetter("data")


def _split(xs: Iterable[Scalar], op: str) -> tuple[list[Any], list[float], bool]:
    """The items of ``xs`` as a list, their floats, and whether all are
    Values (True) or all numbers (False); a mix is lifted to Values."""
    items: list[Any] = xs if type(xs) is list else list(xs)
    kinds = set(map(type, items))
    if kinds == _ONLY_VALUES:
        return items, list(map(_get_data, items)), True
    if kinds == _ONLY_FLOATS:
        return items, items, False
    if not any(issubclass(k, Value) for k in kinds):
        return items, [_as_float(x, op) for x in items], False
    items = [_lift(x, op) for x in items]
    return items, list(map(_get_data, items)), True


def dot(
    w: Iterable[Scalar],
    x: Iterable[Scalar],
    bias: Scalar | None = None,
    activation: str | None = None,
) -> Value:
    """``sum(w[i] * x[i]) + bias`` as one node instead of ``2n`` binary ones.

    The same value and gradients as the long form, with far fewer nodes and
    edges: it is what ``nn.Neuron`` uses. When ``x`` holds plain numbers (a
    network's input) they are constants and get no gradient.

    ``activation="relu"`` makes ``relu(w . x + bias)`` one node too (a
    hidden neuron); ``"tanh"`` adds a tanh node; ``None`` or ``"linear"``
    adds nothing.

    >>> from chainrule import Value, dot
    >>> w = [Value(1.0), Value(2.0)]
    >>> y = dot(w, [3.0, 4.0], Value(0.5))
    >>> y.data
    11.5
    """
    fused = _fused_activation(activation, "dot")
    out = _dot(*_split(w, "dot"), *_split(x, "dot"), bias, fused)
    return out.tanh() if activation == "tanh" else out


def _fused_activation(activation: str | None, op: str) -> bool:
    """Whether the activation is fused into the dot node (relu), after
    checking its name."""
    if activation not in (None, "linear", "relu", "tanh"):
        raise ValueError(f"{op}: unknown activation {activation!r}; use 'relu', 'tanh' or 'linear'")
    return activation == "relu"


def _dot(
    ws: list[Any],
    wd: list[float],
    w_values: bool,
    xs: list[Any],
    xd: list[float],
    x_values: bool,
    bias: Scalar | None,
    relu: bool = False,
) -> Value:
    if len(ws) != len(xs):
        raise ValueError(f"dot: lengths differ ({len(ws)} weights, {len(xs)} inputs)")
    if not w_values:  # constant weights: swap roles so the Values come first
        ws, wd, xs, xd, w_values, x_values = xs, xd, ws, wd, x_values, w_values
    y = sum(map(operator.mul, wd, xd))
    b: Value | None = None
    if bias is not None:
        b = bias if type(bias) is Value else _lift(bias, "dot")
        y += b.data
    if relu:
        return _dot_relu(ws, wd, w_values, xs, xd, x_values, b, y)
    # The local derivatives are _d_dot's / _d_affine's rule (d/dw = x,
    # d/dx = w, d/db = 1), built here directly from the lists.
    if b is None:
        if not x_values:
            if not w_values:
                return Value(y)
            return _node(y, tuple(ws), tuple(xd), AFFINE_CONST)
        return _node(y, (*ws, *xs), (*xd, *wd), DOT)
    if not w_values:
        return _node(y, (b,), (1.0,), ADD_CONST)
    if not x_values:
        return _node(y, (*ws, b), (*xd, 1.0), AFFINE_CONST)
    return _node(y, (*ws, *xs, b), (*xd, *wd, 1.0), AFFINE)


def _dot_relu(
    ws: list[Any],
    wd: list[float],
    w_values: bool,
    xs: list[Any],
    xd: list[float],
    x_values: bool,
    b: Value | None,
    y: float,
) -> Value:
    """``relu(w . x + b)`` as one node; ``y`` is the pre-activation."""
    if not w_values or b is None:  # rare shapes: two nodes
        return _dot(ws, wd, w_values, xs, xd, x_values, b).relu()
    out = _relu(y)
    if not x_values:
        prev: tuple[Value, ...] = (*ws, b)
        local = (0.0,) * len(prev) if out <= 0.0 else (*xd, 1.0)  # nan is live
        return _node(out, prev, local, AFFINE_CONST_RELU)
    prev = (*ws, *xs, b)
    local = (0.0,) * len(prev) if out <= 0.0 else (*xd, *wd, 1.0)
    return _node(out, prev, local, AFFINE_RELU)


def dense(
    weights: Iterable[Iterable[Scalar]],
    x: Iterable[Scalar],
    biases: Iterable[Scalar | None] | None = None,
    activation: str | None = None,
) -> list[Value]:
    """``[dot(w, x, b, activation) for w, b in zip(weights, biases)]``: a
    layer's units, with the shared input ``x`` read once instead of once
    per row. What ``nn.Layer`` uses.

    >>> from chainrule import Value, dense
    >>> rows = [[Value(1.0), Value(0.0)], [Value(2.0), Value(-1.0)]]
    >>> [v.data for v in dense(rows, [3.0, 4.0], [0.5, 0.0])]
    [3.5, 2.0]
    """
    relu = _fused_activation(activation, "dense")
    xs, xd, x_values = _split(x, "dense")
    rows = [w if type(w) is list else list(w) for w in weights]
    bs = [None] * len(rows) if biases is None else list(biases)
    if len(bs) != len(rows):
        raise ValueError(f"dense: {len(rows)} weight rows but {len(bs)} biases")
    if set(map(type, itertools.chain.from_iterable(rows))) == _ONLY_VALUES:
        # the usual case, a layer's parameters: one type check for the matrix
        out = [
            _dot(w, list(map(_get_data, w)), True, xs, xd, x_values, b, relu)
            for w, b in zip(rows, bs)
        ]
    else:
        out = [_dot(*_split(w, "dense"), xs, xd, x_values, b, relu) for w, b in zip(rows, bs)]
    return [v.tanh() for v in out] if activation == "tanh" else out


def add_n(values: Iterable[Scalar]) -> Value:
    """``values[0] + values[1] + ...`` as one node (a fast ``sum()``).

    >>> from chainrule import Value, add_n
    >>> add_n([Value(1.0), Value(2.0), 3]).data
    6.0
    """
    items, datas, all_values = _split(values, "add_n")
    if not all_values:
        return Value(sum(datas))
    return _node(sum(datas), tuple(items), (1.0,) * len(items), ADD_N)
