"""The scalar engine: ``Value`` and its backward pass.

Every operation is a :class:`~chainrule.primitives.Primitive` of the table
in :mod:`chainrule.primitives`: a forward function on floats and a rule for
its *local derivatives*. When an operation runs, the engine evaluates the
rule on the input floats right away and stores the results, plain floats,
in the new node. The backward pass then only multiplies and adds::

    for node in reverse topological order:
        for child, local in zip(node._children, node._local_grads):
            child.grad += local * node.grad

A node is one object: its inputs and their local derivatives sit in its
own slots (``_a``/``_da`` and ``_b``/``_db`` for a unary or binary op; a
tuple of each for an n-ary one), so an operation allocates one tracked
object, which is what Python's garbage collector pays for.

``sum(w * x for ...)`` becomes one node too: a running sum whose partial
sums share one list of terms, with each product that only the expression
holds stored as its two factors. The value is the left-to-right sum and the
backward pass adds each term's contributions where the chain of binary
``+`` nodes would (see :func:`_push_terms`), so nothing changes by a bit;
``with elementary():`` turns it off.

The same rules also serve higher-order gradients: ``backward(create_graph=True)``
evaluates them again, on the nodes themselves instead of their floats, so
the gradient is itself a graph of Values.

micrograd's and microgpt's ways of building and inspecting nodes work too:
``Value(data, _children, _op)`` with a ``_backward`` closure (micrograd),
``Value(data, children, local_grads)`` (microgpt), and ``_prev``,
``_children``, ``_local_grads``, ``_op`` and ``_backward`` on every node.
"""

from __future__ import annotations

import itertools
import numbers
import operator
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from types import SimpleNamespace
from typing import Any, Union

from . import ieee
from .graph import Labelled, mode, next_id, on_fast_change
from .primitives import (
    ABS,
    ADD,
    ADD_CONST,
    ADD_N,
    AFFINE,
    AFFINE_CONST,
    AFFINE_CONST_RELU,
    AFFINE_RELU,
    COS,
    DEAD_UNIT,
    DIV,
    DIV_CONST,
    DOT,
    EXP,
    FLOAT,
    LEAF,
    LOG,
    MAXIMUM,
    MINIMUM,
    MUL,
    MUL_CONST,
    NEG,
    POW,
    RDIV_CONST,
    RELU,
    RSUB_CONST,
    SIGMOID,
    SIN,
    SOFTPLUS,
    SQRT,
    SUB,
    SUB_CONST,
    SUM_TERMS,
    TANH,
    ZERO_EXPONENT,
    Primitive,
    pow_const,
    rpow_const,
    where,
)

Number = Union[int, float]
Scalar = Union["Value", int, float]

__all__ = [
    "Primitive",
    "Value",
    "add_n",
    "backpropagate",
    "cos",
    "dense",
    "dot",
    "exp",
    "gradients",
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


# --------------------------------------------------------------------------
# Numbers coming in
# --------------------------------------------------------------------------

_ACCEPTED = "an int, float, bool, NumPy real scalar or Value"


def _as_float(x: object, op: str) -> float:
    """``x`` as a float, or a TypeError that names the op and the value."""
    if type(x) is float:
        return x
    if isinstance(x, numbers.Real):  # int, bool, Fraction, NumPy real scalars
        try:
            return float(x)
        except OverflowError:  # an int or Fraction beyond 1.8e308
            raise ValueError(
                f"{op}: {type(x).__name__} of about 10**{_log10(x)} is too large for a float"
            ) from None
    raise TypeError(f"{op}: expected {_ACCEPTED}, got {type(x).__name__} {x!r}")


def _log10(x: Any) -> int:
    """The decimal exponent of a huge int or Fraction (its digits may be
    too many for ``str``)."""
    return int(int(abs(x) // 1).bit_length() * 0.30103)


def _lift(x: object, op: str) -> Value:
    """A Value as it is; a number as a new constant leaf."""
    if isinstance(x, Value):
        return x
    return Value(_as_float(x, op))


# --------------------------------------------------------------------------
# Node layout
# --------------------------------------------------------------------------


class _Tag:
    """Marks, in a node's ``_b`` slot, a node whose inputs are a tuple."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


#: ``_a`` is a tuple of inputs and ``_da`` the tuple of their local derivatives.
NARY = _Tag("NARY")
#: ``_a`` is a tuple of inputs and ``_da`` a micrograd ``_backward`` closure.
CLOSURE = _Tag("CLOSURE")
#: A sum built term by term (``sum(w * x for ...)``): ``_a`` is a shared
#: :class:`_Terms`, ``_da`` how many of its inputs this node adds.
CHAIN = _Tag("CHAIN")


class _Terms:
    """The inputs of a running sum, shared by its successive partial sums.

    ``a + b + c`` as micrograd builds it is a chain of binary nodes; here
    each partial sum is one node that reads the first ``n`` entries of
    these lists, so adding a term allocates no new lists and a partial sum
    that nobody keeps is freed at once. A product term ``w * x`` made just
    for the sum is stored as its two factors (``kinds`` entry 2, local
    derivatives ``x`` and ``w``), a plain term as itself (entry 1, local 1).
    """

    __slots__ = ("inputs", "local", "kinds", "start", "first_plain")

    def __init__(self, start: float | None) -> None:
        self.inputs: list[Value] = []
        self.local: list[float] = []
        self.kinds: list[int] = []
        self.start = start  # the number a sum() starts from, added to the first term
        # The chain's first node is t1 + t2 with t1 a plain input: t1's
        # contribution comes just before t2's (set by _sum_step).
        self.first_plain = False


_refs = sys.getrefcount


def _temporary_refcount() -> int:
    """What ``sys.getrefcount`` shows for a temporary inside a binary
    operator (on CPython 3.10 to 3.13: the caller's reference, the
    argument's, getrefcount's own: 3), measured on this interpreter; -1
    where a temporary cannot be told from a kept value that way (other
    interpreters, and CPython from 3.14, whose stack may borrow references)."""
    if sys.implementation.name != "cpython" or sys.version_info >= (3, 14):
        return -1
    seen: list[tuple[int, int]] = []

    class Probe:
        def __add__(self, other: Any) -> Probe:
            seen.append((_refs(self), _refs(other)))
            return Probe()

    kept = Probe()
    held = [Probe(), Probe()]
    Probe() + Probe()
    kept + held[0]
    sum(held, Probe())
    temporary = seen[0][0]
    kept_values = [seen[1][0], seen[1][1], seen[2][1], seen[3][1]]
    if seen[0][1] != temporary or min(kept_values) <= temporary:
        return -1
    return temporary


#: ``sys.getrefcount`` of a temporary inside ``Value.__add__``: a product
#: showing it is held by nothing but the expression being evaluated.
_TEMPORARY = _temporary_refcount()

_new = object.__new__

# True while every thread records normally (no no_grad, observer or
# elementary() anywhere): the one check every operation makes, a module
# global, cheaper than reading the thread-local mode on every op.
_all_fast = True


def _set_fast(all_fast: bool) -> None:
    global _all_fast
    _all_fast = all_fast


on_fast_change(_set_fast)


# A result computed under no_grad: a leaf too, but backward() from it is a
# mistake (PyTorch raises), while backward() from a leaf the user made is not.
NO_GRAD_RESULT = Primitive("", float, None)


def _not_fast(v: Value) -> Value:
    """The rare path of node creation: this thread may be under
    ``no_grad`` (the node becomes a constant) or observed."""
    if not mode.grad_enabled:
        v._a = v._b = v._da = v._db = None
        v._fn = NO_GRAD_RESULT
        return v
    if mode.observer is not None:
        v._id = next_id()  # anomaly detection tells nodes apart by it
        mode.observer.forward(v)
    return v


def _node(
    y: float, children: Sequence[Value], local: Sequence[Any], fn: Primitive, c: Any = None
) -> Value:
    """A new node from its inputs and their local derivatives, in the
    layout that fits its arity (``c``: the constant of a ``const`` primitive)."""
    v = _new(Value)
    v.data = y
    v.grad = 0.0
    n = len(children)
    if n == 1:
        v._a = children[0]
        v._b = None
        v._da = local[0]
        v._db = c
    elif n == 2 and c is None:
        v._a, v._b = children
        v._da, v._db = local
    else:
        v._a = tuple(children)
        v._b = NARY
        v._da = tuple(local)
        v._db = c
    v._fn = fn
    if _all_fast:
        return v
    return _not_fast(v)


def apply(fn: Primitive, inputs: Sequence[Any]) -> Value:
    """Apply a primitive of the table (or a user's) to Values or numbers."""
    if fn.derivative is None:
        raise TypeError(f"{fn.name}: this primitive has no derivative rule and cannot be applied")
    c: tuple[Any, ...] = ()
    if fn.const:
        *inputs, constant = inputs
        c = (constant,)
    xs = tuple(_lift(x, fn.name) for x in inputs)
    if not xs:
        raise ValueError(f"{fn.name}: needs at least one input")
    datas = [x.data for x in xs]
    y = _as_float(fn.forward(*datas, *c), fn.name)
    local = tuple(fn.derivative(FLOAT, *datas, *c, y))
    if len(local) != len(xs):
        raise ValueError(
            f"{fn.name}: derivative gave {len(local)} local gradients for {len(xs)} inputs"
        )
    return _node(y, xs, local, fn, *c)


def _unary(fn: Primitive, x: Value) -> Value:
    xd = x.data
    y = fn.forward(xd)
    return _node(y, (x,), fn.derivative(FLOAT, xd, y), fn)  # type: ignore[misc]


def _binary(fn: Primitive, a: Value, b: Value) -> Value:
    ad = a.data
    bd = b.data
    y = fn.forward(ad, bd)
    return _node(y, (a, b), fn.derivative(FLOAT, ad, bd, y), fn)  # type: ignore[misc]


def _const(fn: Primitive, x: Value, c: float) -> Value:
    xd = x.data
    y = fn.forward(xd, c)
    return _node(y, (x,), fn.derivative(FLOAT, xd, c, y), fn, c)  # type: ignore[misc]


# Division as micrograd and microgpt define it, ``a * b ** -1`` (two nodes,
# the same floats bit for bit), wherever that is as exact as true division:
# 1/b and 1/b**2 normal and finite, and the quotient a normal number. Outside
# that range a single true-division node keeps PyTorch's numbers.
_RECIP_MIN = 2.0**-500
_RECIP_MAX = 2.0**500
_NORMAL_MIN = 2.0**-1022
_FLOAT_MAX = 1.7976931348623157e308


def _reciprocal_is_exact(a: float, b: float) -> bool:
    if not _RECIP_MIN <= abs(b) <= _RECIP_MAX:  # also False for nan
        return False
    y = abs(a * b**-1.0)
    return y == 0.0 or _NORMAL_MIN <= y <= _FLOAT_MAX


# --------------------------------------------------------------------------
# Sums built term by term
# --------------------------------------------------------------------------


def _add_term(terms: _Terms, x: Value, temporary_product: bool) -> None:
    """Append ``x`` to a running sum: as its two factors when it is a
    product made only for this sum (nothing else holds it, so no other
    node can need its gradient), else as itself."""
    if temporary_product:
        terms.inputs += (x._a, x._b)
        terms.local += (x._da, x._db)
        terms.kinds.append(2)
    else:
        terms.inputs.append(x)
        terms.local.append(1.0)
        terms.kinds.append(1)


def _sum_node(y: float, terms: _Terms) -> Value:
    v = _new(Value)
    v.data = y
    v.grad = 0.0
    v._a = terms
    v._b = CHAIN
    v._da = len(terms.inputs)
    v._db = len(terms.kinds)
    v._fn = SUM_TERMS
    return v


def _sum_start(product: Value, c: float) -> Value:
    """``c + w * x``: the first step of ``sum(w * x for ...)``."""
    terms = _Terms(c)
    y = product.data + c
    _add_term(terms, product, True)
    return _sum_node(y, terms)


def _sum_step(a: Value, b: Value, a_temporary: bool, b_temporary: bool) -> Value:
    """``a + b`` where ``a`` is a temporary running sum or product, or ``b``
    a temporary product: the same value as the binary node
    (``a.data + b.data``), as one node. A running sum that something else
    holds is a plain term of the new one, as in the binary chain."""
    y = a.data + b.data
    if a_temporary and a._b is CHAIN:
        terms: _Terms = a._a
        if len(terms.inputs) != a._da:  # extended before (a C caller's borrowed reference)
            terms = _branch(terms, a._da, a._db)
    else:
        terms = _Terms(None)
        _add_term(terms, a, a_temporary and a._fn is MUL)
        terms.first_plain = terms.kinds[0] == 1
    _add_term(terms, b, b_temporary)
    return _sum_node(y, terms)


def _branch(terms: _Terms, n: int, k: int) -> _Terms:
    copy = _Terms(terms.start)
    copy.inputs = terms.inputs[:n]
    copy.local = terms.local[:n]
    copy.kinds = terms.kinds[:k]
    return copy


# --------------------------------------------------------------------------
# Value
# --------------------------------------------------------------------------


class Value(Labelled):
    """A scalar and the graph that computed it.

    ``data`` is the number, ``grad`` the derivative of the last
    ``backward()`` root with respect to it (0.0 until then). ``_prev`` (also
    ``_children``) are the Values it was computed from, ``_local_grads``
    the derivative with respect to each, and ``_op`` the name of the
    operation, as in micrograd and microgpt, so code written for those
    engines works unchanged.

    >>> a, b = Value(2.0, label="a"), Value(-3.0, label="b")
    >>> f = (a * b + 10.0).relu()
    >>> f.backward()
    >>> a.grad, b.grad
    (-3.0, 2.0)

    Besides ``Value(data, label=...)``, both reference engines' constructors
    work: micrograd's ``Value(data, _children, _op)`` (then set
    ``_backward`` to a closure) and microgpt's ``Value(data, children,
    local_grads)``.

    Values compare (``<``, ``<=``, ``>``, ``>=``) by ``data``; ``==`` and
    hashing are by identity, so Values can be kept in sets and dicts.
    """

    __slots__ = ("data", "grad", "_a", "_b", "_da", "_db", "_fn", "_id", "_label")

    data: float
    grad: float | Value
    _a: Any
    _b: Any
    _da: Any
    _db: Any
    _fn: Primitive
    _id: int  # set only on nodes an anomaly detector watches

    def __init__(
        self,
        data: Number,
        _children: Iterable[Value] = (),
        _op: str | Iterable[Number] = "",
        label: str = "",
    ) -> None:
        self.data = _as_float(data, "Value")
        self.grad = 0.0
        self._a = self._b = self._da = self._db = None
        self._fn = LEAF
        if label:
            self._label = str(label)
        if _children != () or (_op != "" and not isinstance(_op, str)):
            _made_by_user(self, _children, _op)

    # -- micrograd's and microgpt's node protocol -------------------------

    @property
    def _children(self) -> tuple[Value, ...]:
        """The Values this one was computed from (microgpt's name)."""
        b = self._b
        if b is None:
            return () if self._a is None else (self._a,)
        if b is CHAIN:
            return tuple(self._a.inputs[: self._da])
        if b.__class__ is _Tag:
            return self._a
        return (self._a, b)

    _prev = _children  # micrograd's name

    @property
    def _local_grads(self) -> tuple[Any, ...]:
        """``d self / d child`` for each of :attr:`_children` (microgpt's name)."""
        b = self._b
        if b is None:
            return () if self._a is None else (self._da,)
        if b is CLOSURE:
            raise AttributeError(
                f"_local_grads: node {self._op!r} backpropagates through a _backward "
                "closure, which has no local gradients to show"
            )
        if b is NARY:
            return self._da
        if b is CHAIN:
            return tuple(self._a.local[: self._da])
        return (self._da, self._db)

    @property
    def _op(self) -> str:
        return self._fn.name

    @property
    def _backward(self) -> Callable[[], None]:
        """micrograd's closure: calling it applies this node's chain rule
        once, ``child.grad += local * self.grad`` for each input."""
        if self._b is CLOSURE:
            return self._da
        return self._chain_rule_once

    @_backward.setter
    def _backward(self, closure: Callable[[], None]) -> None:
        if not callable(closure):
            raise TypeError(f"_backward: expected a callable, got {type(closure).__name__}")
        self._a = self._children
        self._b = CLOSURE
        self._da = closure
        self._db = None

    def _chain_rule_once(self) -> None:
        g = self.grad
        for child, local in zip(self._children, self._local_grads):
            child.grad += local * g

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
    # The operators of user code are the hot path: + and * (and neg, sub,
    # relu) build their node inline, with the table's local derivatives
    # written out (ADD: 1, 1; MUL: b, a); test_engine checks each against
    # its rule in the table.

    def __add__(self, other: Scalar) -> Value:
        if other.__class__ is Value:
            if _all_fast:
                # a product that only this expression holds joins a running sum
                fn = self._fn
                a_temp = (fn is MUL or fn is SUM_TERMS) and _refs(self) == _TEMPORARY
                b_temp = other._fn is MUL and _refs(other) == _TEMPORARY
                if a_temp or b_temp:
                    return _sum_step(self, other, a_temp, b_temp)
            v = _new(Value)
            v.data = self.data + other.data
            v._b = other
            v._da = v._db = 1.0
            v._fn = ADD
        elif isinstance(other, Value):
            return _binary(ADD, self, other)
        else:
            c = _as_float(other, "+")
            if c == 0.0 and _all_fast and self._fn is MUL and _refs(self) == _TEMPORARY:
                return _sum_start(self, c)  # sum()'s 0 + w * x
            v = _new(Value)
            v.data = self.data + c
            v._b = None
            v._da = 1.0
            v._db = c  # the constant
            v._fn = ADD_CONST
        v.grad = 0.0
        v._a = self
        if _all_fast:
            return v
        return _not_fast(v)

    __radd__ = __add__

    def __mul__(self, other: Scalar) -> Value:
        v = _new(Value)
        if other.__class__ is Value:
            a = self.data
            b = other.data
            v.data = a * b
            v._b = other
            v._da = b
            v._db = a
            v._fn = MUL
        elif isinstance(other, Value):
            return _binary(MUL, self, other)
        else:
            c = _as_float(other, "*")
            v.data = self.data * c
            v._b = None
            v._da = c
            v._db = c  # the constant
            v._fn = MUL_CONST
        v.grad = 0.0
        v._a = self
        if _all_fast:
            return v
        return _not_fast(v)

    __rmul__ = __mul__

    def __sub__(self, other: Scalar) -> Value:
        if isinstance(other, Value):
            return _binary(SUB, self, other)
        return _const(SUB_CONST, self, _as_float(other, "-"))

    def __rsub__(self, other: Scalar) -> Value:
        return _const(RSUB_CONST, self, _as_float(other, "-"))

    def __truediv__(self, other: Scalar) -> Value:
        if isinstance(other, Value):
            if _reciprocal_is_exact(self.data, other.data):
                return self * other**-1.0
            return _binary(DIV, self, other)
        c = _as_float(other, "/")
        if _reciprocal_is_exact(self.data, c):
            return self * c**-1.0
        return _const(DIV_CONST, self, c)

    def __rtruediv__(self, other: Scalar) -> Value:
        c = _as_float(other, "/")
        if _reciprocal_is_exact(c, self.data):
            return self**-1.0 * c
        return _const(RDIV_CONST, self, c)

    def __pow__(self, other: Scalar) -> Value:
        if isinstance(other, Value):
            return _binary(POW, self, other)
        return _unary(pow_const(_as_float(other, "**")), self)

    def __rpow__(self, other: Scalar) -> Value:
        return _unary(rpow_const(_as_float(other, "**")), self)

    def __neg__(self) -> Value:
        return _unary(NEG, self)

    def __pos__(self) -> Value:
        return self

    def __abs__(self) -> Value:
        return _unary(ABS, self)

    # -- functions ----------------------------------------------------------

    def exp(self) -> Value:
        """``e ** self``."""
        return _unary(EXP, self)

    def log(self) -> Value:
        """The natural logarithm (``-inf`` at 0, ``nan`` below, as PyTorch)."""
        return _unary(LOG, self)

    def sqrt(self) -> Value:
        """The square root (``nan`` below 0, as PyTorch)."""
        return _unary(SQRT, self)

    def tanh(self) -> Value:
        """The hyperbolic tangent."""
        return _unary(TANH, self)

    def sigmoid(self) -> Value:
        """``1 / (1 + e ** -self)``, computed without overflow."""
        return _unary(SIGMOID, self)

    def relu(self) -> Value:
        """``max(0, self)``; the gradient is 0 where the output is 0."""
        x = self.data
        v = _new(Value)
        if x < 0.0:
            v.data = 0.0
            v._da = 0.0
        else:  # nan stays nan and is live, as torch.relu
            v.data = x
            v._da = 0.0 if x == 0.0 else 1.0
        v.grad = 0.0
        v._a = self
        v._b = v._db = None
        v._fn = RELU
        if _all_fast:
            return v
        return _not_fast(v)

    def softplus(self) -> Value:
        """``log(1 + e ** self)``, exact and without overflow."""
        return _unary(SOFTPLUS, self)

    def sin(self) -> Value:
        """The sine."""
        return _unary(SIN, self)

    def cos(self) -> Value:
        """The cosine."""
        return _unary(COS, self)

    def abs(self) -> Value:
        """The absolute value; its gradient at 0 is 0, as PyTorch's."""
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

        The textbook algorithm: order the graph topologically, seed this
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
        if create_graph or mode.observer is not None:
            seed: Any = (
                _lift(gradient, "backward") if create_graph else _as_float(gradient, "backward")
            )
            grads = backpropagate(self, seed, create_graph=create_graph, on_edge=_observed())
            for node, g in grads.items():
                if node._a is not None or (type(node.grad) is float and node.grad == 0.0):
                    node.grad = g
                else:
                    node.grad = node.grad + g
            return
        seed = _as_float(gradient, "backward")
        order, nodes, leaves, split = _backward_order(self)
        if not order:
            self.grad += seed
            return
        for v in nodes:
            v.grad = 0.0
        # Leaves collect this pass's gradient from zero and add it to what
        # they held in one step, so two passes give exactly twice one pass.
        held = [(leaf, leaf.grad) for leaf in leaves if leaf.grad != 0.0]
        for leaf, _ in held:
            leaf.grad = 0.0
        self.grad = seed
        for v in order:
            if v.__class__ is list:  # a span of a running sum's terms
                for child, contribution in _emit_span(v, v[0].grad):
                    child.grad += contribution
                continue
            g = v.grad
            if g - g != 0.0 and v._fn.masked:  # inf or nan into a selecting op
                for child, contribution in _contributions(v, g, False):
                    child.grad += contribution
                continue
            b = v._b
            if b is None:
                v._a.grad += v._da * g
            elif b.__class__ is not _Tag:
                v._a.grad += v._da * g
                b.grad += v._db * g
            elif b is CHAIN:  # a running sum, last term first, as the binary chain
                if v in split:
                    continue  # its spans add the contributions
                terms = v._a
                inputs, local = terms.inputs, terms.local
                n = v._da
                if terms.first_plain and _first_before_second(v):
                    for child, contribution in _emit_span([v, 0, n], g):
                        child.grad += contribution
                elif n == len(inputs):
                    for child, d in zip(reversed(inputs), reversed(local)):
                        child.grad += d * g
                else:
                    for child, d in zip(inputs[n - 1 :: -1], local[n - 1 :: -1]):
                        child.grad += d * g
            elif b is NARY:
                for child, local in zip(v._a, v._da):
                    child.grad += local * g
            else:
                v._da()  # micrograd's _backward closure
        for leaf, before in held:
            leaf.grad = before + leaf.grad


def _data(x: object, op: str) -> float:
    return x.data if isinstance(x, Value) else _as_float(x, op)


# --------------------------------------------------------------------------
# Nodes that user code builds by hand (micrograd's and microgpt's protocols)
# --------------------------------------------------------------------------


class _UserOp(Primitive):
    """The primitive of a node built with ``Value(data, children, ...)``:
    it has a name but no rule the engine could evaluate again."""

    __slots__ = ()

    def __init__(self, name: str) -> None:
        super().__init__(name, float, None)


def _no_backward() -> None:
    """micrograd's default ``_backward``: contributes nothing."""


def _made_by_user(v: Value, children: Iterable[Value], op: Any) -> None:
    kids = tuple(children)
    for child in kids:
        if not isinstance(child, Value):
            raise TypeError(f"Value: children must be Values, got {type(child).__name__} {child!r}")
    if isinstance(op, str):  # micrograd: an op name; the closure comes later
        v._fn = _UserOp(op)
        if kids:
            v._a = kids
            v._b = CLOSURE
            v._da = _no_backward
        return
    local = tuple(_as_float(d, "Value") for d in op)  # microgpt: local gradients
    if len(local) != len(kids):
        raise ValueError(
            f"Value: {len(kids)} children but {len(local)} local gradients; give one per child"
        )
    v._fn = _UserOp("")
    if kids:
        if len(kids) == 1:
            v._a, v._da = kids[0], local[0]
        elif len(kids) == 2:
            (v._a, v._b), (v._da, v._db) = kids, local
        else:
            v._a, v._b, v._da = kids, NARY, local


# --------------------------------------------------------------------------
# The graph: topological order and the general backward walk
# --------------------------------------------------------------------------


def topological_order(root: Value) -> tuple[list[Value], list[Value]]:
    """The nodes ``root`` depends on, split in two lists.

    The first holds the interior nodes, ``root`` first, each one before
    every node it was computed from: the order of the backward pass. The
    second holds the leaves, which only receive gradient.

    The order is micrograd's and microgpt's exactly (a depth-first search
    that lists a node after its inputs, taken in reverse), so a node that
    receives several contributions adds them in the same order and the
    gradients agree bit for bit; but the search is iterative, with its own
    stack, so depth is bounded by memory only, not by the recursion limit.
    """
    _, nodes, leaves, _ = _backward_order(root)
    return nodes, leaves


def _backward_order(root: Value) -> tuple[list[Any], list[Value], list[Value], set[Value]]:
    """:func:`topological_order` with the marks of running sums' term spans
    (see :func:`_push_terms`) among the nodes: the order the backward pass
    walks, the interior nodes alone, the leaves, and the running sums split
    into spans (the others add all their terms where they stand)."""
    split: set[Value] = set()
    if root._a is None:
        return [], [], [root], split
    done = False
    state: dict[Value, bool] = {}  # entered: False, finished: True
    get = state.get
    stack: list[Any] = [root]
    push = stack.append
    pop = stack.pop
    topo: list[Any] = []
    nodes = []
    leaves = []
    while stack:
        v = pop()
        if v.__class__ is list:  # a span of a running sum's terms: its inputs are done
            topo.append(v)
            continue
        s = get(v)
        if s is None:  # entering v: come back to it after its inputs
            a = v._a
            if a is None:
                state[v] = True
                leaves.append(v)
                continue
            state[v] = done
            push(v)
            b = v._b
            if b is None:
                if a not in state:
                    push(a)
            elif b is CHAIN:  # a running sum: one span of all its terms, usually
                base = len(stack)
                new = False
                for child in a.inputs[v._da - 1 :: -1]:
                    if child not in state:
                        push(child)
                        if child._a is not None:
                            new = True
                if new:  # some term reaches new nodes: push again, span by span
                    del stack[base:]
                    split.add(v)
                    _push_terms(v, push, state)
            elif b.__class__ is _Tag:
                for child in reversed(a):
                    if child not in state:
                        push(child)
            else:
                if b not in state:
                    push(b)
                if a not in state:
                    push(a)
        elif s is done:  # leaving v: every input is listed
            state[v] = True
            topo.append(v)
            nodes.append(v)
    topo.reverse()
    nodes.reverse()
    return topo, nodes, leaves, split


#: A span of a running sum's terms in the backward order: ``[node, lo, hi]``,
#: the node's inputs ``lo`` to ``hi``, whose contributions are added there.
TermMark = list[Any]


def _push_terms(v: Value, push: Callable[[Any], None], state: dict[Value, bool]) -> None:
    """Push a running sum's inputs for the depth-first search, with marks.

    The binary chain ``((t1 + t2) + t3) + ...`` adds each term's gradient
    contributions just before the pass walks down into the nodes first
    reached through that term. Here a mark stands in the order where the
    chain's nodes would: one for each span of terms that reaches no node
    the search has not seen, closed where a term reaches new nodes, so
    every contribution is added where the chain adds it. A span is
    emitted last term first (:func:`_emit_span`). In the chain's first
    node ``t1 + t2``, a plain ``t1`` gets its contribution with ``t2``'s,
    so a span never starts at ``t2`` then.
    """
    terms: _Terms = v._a
    inputs = terms.inputs
    kinds = terms.kinds
    first = 2 if terms.start is None and kinds[0] == 1 else 1  # where a span may start
    n = v._da
    mark: TermMark = [v, 0, n]
    push(mark)
    j = v._db - 1  # the term being pushed, last first
    lo = n - kinds[j]  # its first input
    new = False
    for i in range(n - 1, -1, -1):
        c = inputs[i]
        if c not in state:
            push(c)
            if c._a is not None:
                new = True
        if i == lo:  # term j is pushed
            if new and j >= first:  # it reaches new nodes: its span starts here
                mark[1] = lo
                mark = [v, 0, lo]
                push(mark)
                new = False
            j -= 1
            lo -= kinds[j] if j >= 0 else 0


def _first_before_second(v: Value) -> bool:
    """Whether the first span of running sum ``v`` must add ``t1`` before
    ``t2``, as the chain's first node ``t1 + t2`` does, rather than last
    term first: only when ``t1`` is a plain input and also one of ``t2``'s
    (a node's contributions are the only ones whose order matters)."""
    terms: _Terms = v._a
    if not terms.first_plain:
        return False
    inputs = terms.inputs  # (an input of t3 too: harmless, the chain's order either way)
    return inputs[0] is inputs[1] or (len(inputs) > 2 and inputs[0] is inputs[2])


def _emit_span(
    mark: TermMark, g: Any, local: Sequence[Any] | None = None
) -> list[tuple[Value, Any]]:
    """``(input, local * g)`` for the inputs of a span of a running sum's
    terms, in the binary chain's order: last term first, and in the
    chain's first node a plain ``t1`` just before ``t2``."""
    v, lo, hi = mark
    terms: _Terms = v._a
    if local is None:
        local = terms.local
    inputs = terms.inputs
    if lo == 0 and _first_before_second(v):
        head = 1 + terms.kinds[1]  # t1, then t2's inputs, after the later terms
        order = [*range(hi - 1, head - 1, -1), *range(head)]
        return [(inputs[j], local[j] * g) for j in order]
    stop = lo - 1 if lo else None
    return list(zip(inputs[hi - 1 : stop : -1], [d * g for d in local[hi - 1 : stop : -1]]))


def _contributions(v: Value, g: Any, create_graph: bool) -> Iterator[tuple[Value, Any]]:
    """``(child, local * g)`` for each input of ``v``: one node's chain rule.

    With ``create_graph`` the local derivatives are the table's rule
    evaluated on Values. An inf or nan ``g`` passes a selecting op (relu,
    max, min, pow's base) as PyTorch does: a masked input gets nothing.
    """
    b = v._b
    fn = v._fn
    if b is CLOSURE:
        raise TypeError(
            f"node {fn.name!r} backpropagates through a _backward closure (micrograd's "
            "protocol), which only backward() without create_graph can run; define the "
            "operation as a chainrule.Primitive to use it here"
        )
    children = v._children
    local = _rule(v) if create_graph else v._local_grads
    if type(g) is float and g - g != 0.0 and fn.masked:
        yield from _masked(v, children, local, g)
        return
    for child, d in zip(children, local):
        yield child, d * g


def _rule(v: Value) -> Sequence[Any]:
    """``v``'s local derivatives from the table's rule evaluated on Values,
    so that they are differentiable in turn (``create_graph``)."""
    fn = v._fn
    if fn.derivative is None:
        raise TypeError(
            f"node {fn.name!r} was built with constant local gradients "
            "(Value(data, children, local_grads)), which cannot be differentiated "
            "again; define the operation as a chainrule.Primitive for create_graph"
        )
    return fn.derivative(GRAPH, *v._children, *_constant(v), v)


def _constant(v: Value) -> tuple[Any, ...]:
    """The constant operand of ``v``'s primitive, as a 1-tuple (empty when
    it has none), for re-evaluating its rule."""
    if not v._fn.const:
        return ()
    if v._b is CHAIN:
        terms = v._a
        return ((tuple(terms.kinds[: v._db]), terms.start),)
    return (v._db,)


def _masked(
    v: Value, children: Sequence[Value], local: Sequence[Any], g: float
) -> Iterator[tuple[Value, Any]]:
    masked = v._fn.masked
    if masked == ZERO_EXPONENT:  # torch.pow selects, for the base only
        base, exponent = children
        if exponent.data != 0.0:
            yield base, local[0] * g
        yield exponent, local[1] * g
        return
    if masked == DEAD_UNIT:
        if local[-1] == 0.0:  # the bias's local is 0 only for an inactive unit
            return
        for child, d in zip(children, local):
            yield child, d * g
        return
    for child, d in zip(children, local):
        if d != 0.0:
            yield child, d * g


#: ``on_edge(node, child, contribution, incoming)``: sees every term of the
#: chain rule as it is added (anomaly detection, the explain table).
EdgeHook = Any


def backpropagate(
    root: Value, seed: Any = 1.0, *, create_graph: bool = False, on_edge: EdgeHook = None
) -> dict[Value, Any]:
    """The backward pass in its general form: the gradient of ``root`` for
    every node it depends on, in a dict (no ``.grad`` is touched).

    The walk of :meth:`Value.backward`, with two additions: ``create_graph``
    makes the gradients Values (the rules run on Values), and ``on_edge``
    is called with ``(node, child, contribution, incoming)`` for each term
    ``child.grad += contribution`` in the order the pass adds them.
    """
    grads: dict[Value, Any] = {root: seed}
    get = grads.get
    hook = on_edge
    sum_local: dict[Value, Sequence[Any]] = {}  # a running sum's local derivatives
    order, _, _, split = _backward_order(root)
    for v in order:
        if v.__class__ is list:  # a span of a running sum's terms
            node = v[0]
            g = get(node)
            if g is None:
                continue
            for child, contribution in _emit_span(v, g, sum_local[node]):
                if hook is not None:
                    hook(node, child, contribution, g)
                acc = get(child)
                grads[child] = contribution if acc is None else acc + contribution
            continue
        g = get(v)
        if g is None:
            continue
        if v._b is CHAIN:
            local = sum_local[v] = _rule(v) if create_graph else v._a.local
            if v in split:
                continue  # its spans add the contributions
            for child, contribution in _emit_span([v, 0, v._da], g, local):
                if hook is not None:
                    hook(v, child, contribution, g)
                acc = get(child)
                grads[child] = contribution if acc is None else acc + contribution
            continue
        for child, contribution in _contributions(v, g, create_graph):
            if hook is not None:
                hook(v, child, contribution, g)
            acc = get(child)
            grads[child] = contribution if acc is None else acc + contribution
    return grads


def _observed() -> EdgeHook:
    """The anomaly detector's view of the backward pass, if one watches."""
    observer = mode.observer
    return None if observer is None else observer.backward


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

    >>> from chainrule import Value, gradients
    >>> x = Value(3.0)
    >>> gradients(x * x, [x])
    [6.0]
    """
    if not isinstance(output, Value):
        raise TypeError(f"gradients: output must be a Value, got {type(output).__name__}")
    seed: Any = _lift(gradient, "gradients") if create_graph else _as_float(gradient, "gradients")
    grads = backpropagate(output, seed, create_graph=create_graph, on_edge=_observed())
    zero: Any = Value(0.0) if create_graph else 0.0
    return [grads.get(x, zero) for x in inputs]


# --------------------------------------------------------------------------
# Functions on numbers or Values, and the fused n-ary ops
# --------------------------------------------------------------------------


def exp(x: Scalar) -> Value:
    """``e ** x`` for a number or a Value."""
    return _unary(EXP, _lift(x, "exp"))


def log(x: Scalar) -> Value:
    """The natural logarithm of a number or a Value."""
    return _unary(LOG, _lift(x, "log"))


def sqrt(x: Scalar) -> Value:
    """The square root of a number or a Value."""
    return _unary(SQRT, _lift(x, "sqrt"))


def tanh(x: Scalar) -> Value:
    """The hyperbolic tangent of a number or a Value."""
    return _unary(TANH, _lift(x, "tanh"))


def sigmoid(x: Scalar) -> Value:
    """The logistic sigmoid of a number or a Value."""
    return _unary(SIGMOID, _lift(x, "sigmoid"))


def relu(x: Scalar) -> Value:
    """``max(0, x)`` for a number or a Value."""
    return _lift(x, "relu").relu()


def softplus(x: Scalar) -> Value:
    """``log(1 + e ** x)`` for a number or a Value."""
    return _unary(SOFTPLUS, _lift(x, "softplus"))


def sin(x: Scalar) -> Value:
    """The sine of a number or a Value."""
    return _unary(SIN, _lift(x, "sin"))


def cos(x: Scalar) -> Value:
    """The cosine of a number or a Value."""
    return _unary(COS, _lift(x, "cos"))


def maximum(a: Scalar, b: Scalar) -> Value:
    """The larger of two numbers or Values (a tie splits the gradient)."""
    return _binary(MAXIMUM, _lift(a, "max"), _lift(b, "max"))


def minimum(a: Scalar, b: Scalar) -> Value:
    """The smaller of two numbers or Values (a tie splits the gradient)."""
    return _binary(MINIMUM, _lift(a, "min"), _lift(b, "min"))


def _graph_data(x: Any) -> float:
    return x.data if isinstance(x, Value) else x


def _graph_sign(x: Any) -> float:
    return ieee.sign(_graph_data(x))


def _on_values(on_floats: Callable[[float, float], float]) -> Callable[[Any, Any], Any]:
    """A binary function for the rules on Values: the Value operator when
    either side is a Value, the IEEE float function when both are numbers
    (a constant operand's rule, ``1 / c`` with ``c = 0``, gives inf)."""
    by_name: dict[Any, Callable[[Any, Any], Any]] = {
        ieee.div: operator.truediv,
        ieee.pow: operator.pow,
        ieee.pow_scalar: operator.pow,
    }
    on_values = by_name[on_floats]

    def f(a: Any, b: Any) -> Any:
        if isinstance(a, Value) or isinstance(b, Value):
            return on_values(a, b)
        return on_floats(a, b)

    return f


#: Rules on Values: ``create_graph=True``.
GRAPH = SimpleNamespace(
    div=_on_values(ieee.div),
    pow=_on_values(ieee.pow),
    pow_scalar=_on_values(ieee.pow_scalar),
    exp=exp,
    log=log,
    sqrt=sqrt,
    sin=sin,
    cos=cos,
    sigmoid=sigmoid,
    sign=_graph_sign,
    data=_graph_data,
    where=where,
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
    if bias is None:
        if relu:
            return _dot(ws, wd, w_values, xs, xd, x_values, None).relu()
        if not w_values:
            return Value(sum(map(operator.mul, wd, xd)))
        if not x_values:
            bias = 0.0
        else:
            y = sum(map(operator.mul, wd, xd))
            return _node(y, (*ws, *xs), DOT.derivative(FLOAT, *wd, *xd, y), DOT)  # type: ignore[misc]
    b = bias if type(bias) is Value else _lift(bias, "dot")
    if not w_values:
        return b + sum(map(operator.mul, wd, xd))
    # The hot path of every network: the table's AFFINE / AFFINE_RELU forward
    # and local derivatives written out (test_protocols checks them).
    y = sum(map(operator.mul, wd, xd)) + b.data
    if relu:
        if y < 0.0:  # relu; a nan stays nan and is live, as torch.relu
            y = 0.0
        dead = y <= 0.0
    if not x_values:
        c = tuple(xd)
        if relu:
            local = (0.0,) * (len(ws) + 1) if dead else (*xd, 1.0)
            return _node(y, (*ws, b), local, AFFINE_CONST_RELU, c)
        local = (*xd, 1.0)
        return _node(y, (*ws, b), local, AFFINE_CONST, c)
    if relu:
        local = (0.0,) * (2 * len(ws) + 1) if dead else (*xd, *wd, 1.0)
        return _node(y, (*ws, *xs, b), local, AFFINE_RELU)
    local = (*xd, *wd, 1.0)
    return _node(y, (*ws, *xs, b), local, AFFINE)


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
    y = sum(datas)
    return _node(y, items, ADD_N.derivative(FLOAT, *datas, y), ADD_N)  # type: ignore[misc]
