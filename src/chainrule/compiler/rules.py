"""Replay rules: the table's primitives run on many nodes at once.

Forward values must equal the eager engine's bit for bit. The primitives
whose float forward is one IEEE-754 operation per input (``+ - * /``,
negation, their constant forms and the fused sums and running sums, all
built from those, left to right)
run their own forward function on NumPy arrays, which is the same IEEE
operation element by element (``tests/test_compile.py`` checks every one,
specials included). ReLU and max/min are selections, written here with
``numpy.where`` and checked the same way. Every other primitive (``exp``,
``log``, ``tanh``, ``**``, ..., a user's own) runs its float forward on
each element: NumPy's transcendental functions may differ from the C
library's by an ulp, and the eager engine uses the C library.

Local derivatives come from the same table: each rule runs once on arrays,
in the namespace :data:`ARRAY` (``M.where`` is ``numpy.where``). A rule
that cannot (a user's rule that branches on a value) runs per element on
floats, as the eager engine runs it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import numpy as np

from ..tensor.floatpack import to_array
from ..value import ieee
from ..value import primitives as P
from ..value import sums as S
from ..value.functions import is_own
from ..value.primitives import Primitive
from .program import sum_rows

Array = np.ndarray


def _sign(x: Array) -> Array:
    return np.where(x > 0.0, 1.0, np.where(x < 0.0, -1.0, 0.0))  # 0 for nan, as ieee.sign


def _per_element(f: Callable[..., float]) -> Callable[..., Array]:
    """The table's float function ``f`` (:mod:`chainrule.value.ieee`, what
    the eager backward pass calls) over arrays, element by element.
    NumPy's own loops are not C's ``pow``, ``exp``, ``sin``: ``np.power``
    squares for an exponent of 2.0 and takes ``sqrt`` for 0.5, and where
    a CPU has AVX-512 its ``exp``, ``log``, ``sin``, ``cos`` are NumPy's
    vectorized ones; each may differ from libm in the last bit."""

    def apply(*args: Any) -> Array:
        arrays = np.broadcast_arrays(*(np.asarray(a, dtype=float) for a in args))
        out = list(map(f, *(a.ravel().tolist() for a in arrays)))
        return np.array(out, dtype=float).reshape(arrays[0].shape)

    return apply


def powers(xs: list[float], c: float) -> list[float]:
    """``ieee.pow_scalar(x, c)`` for each of ``xs``: ``math.pow`` over them
    all at C speed, which is what it returns where that does not raise,
    except for 0.5 and -0.5 off the positive floats (then node by node)."""
    if c not in (0.5, -0.5) or all(0.0 < x < math.inf for x in xs):
        try:
            return list(map(math.pow, xs, itertools.repeat(c)))
        except (OverflowError, ValueError):
            pass
    return [ieee.pow_scalar(x, c) for x in xs]


def _pow_scalar(x: Any, c: Any) -> Array:
    if type(x) is np.ndarray and x.ndim == 1 and type(c) is float:  # (a group's row)
        return np.array(powers(x.tolist(), c))
    if np.ndim(c):
        return _per_element(ieee.pow_scalar)(x, c)
    a = np.asarray(x, dtype=float)
    return np.array(powers(a.ravel().tolist(), float(c)), dtype=float).reshape(a.shape)


def _identity(x: Any) -> Any:
    return x


#: The rules' namespace on arrays (IEEE results, no exceptions: call under
#: ``numpy.errstate(all="ignore")``): one IEEE operation per element on
#: arrays (a quotient, a square root: correctly rounded), every other
#: function the table's, element by element (:func:`_per_element`).
ARRAY = SimpleNamespace(
    div=np.divide,
    pow=_per_element(ieee.pow),
    pow_scalar=_pow_scalar,
    exp=_per_element(ieee.exp),
    log=_per_element(ieee.log),
    sqrt=np.sqrt,
    sin=_per_element(ieee.sin),
    cos=_per_element(ieee.cos),
    sigmoid=_per_element(ieee.sigmoid),
    sign=_sign,
    data=_identity,
    where=np.where,
)


# A running sum ``t1 + t2 + ...`` the compiler finds in a chain of ``+`` nodes
# (what ``sum(w * x for ...)`` builds): the constant is ``(kinds, start)``,
# one kind per term, 1 for a term that is
# an input, 2 for a product of the next two inputs; ``start`` is the number
# a ``sum()`` starts from (or None), added to the first term. Summed left to
# right, as the chain of binary additions it stands for.


def _sum_terms_forward(*args: Any) -> float:
    kinds, start = args[-1]
    terms = []
    i = 0
    for kind in kinds:
        terms.append(args[i] if kind == 1 else args[i] * args[i + 1])
        i += kind
    total = terms[0] if start is None else terms[0] + start
    for term in terms[1:]:
        total = total + term
    return total


def _d_sum_terms(M: Any, *args: Any) -> list[Any]:
    kinds, _ = args[-2]
    local: list[Any] = []
    i = 0
    for kind in kinds:
        local += (1.0,) if kind == 1 else (args[i + 1], args[i])
        i += kind
    return local


SUM_TERMS = Primitive("sum", _sum_terms_forward, _d_sum_terms, const=True)


def _relu(x: Array) -> Array:
    return np.where(x < 0.0, 0.0, x)  # as primitives.RELU: nan and -0.0 stay


def _select(pick_a: Callable[[Array, Array], Array]) -> Callable[[Array, Array], Array]:
    def f(a: Array, b: Array) -> Array:
        return np.where(np.isnan(a) | np.isnan(b), np.nan, np.where(pick_a(a, b), a, b))

    return f


def _then_relu(fn: Primitive) -> Callable[..., Array]:
    def f(*args: Any) -> Array:
        y: Any = fn.forward(*args)
        return _relu(y)

    return f


#: Forward functions that run on arrays unchanged: one IEEE operation (or a
#: left-to-right sum of them) per element.
SAME_ON_ARRAYS = frozenset(
    {
        P.ADD,
        P.MUL,
        P.DIV,
        S.ADD_N,
        S.DOT,
        S.AFFINE,
        SUM_TERMS,
    }
)

#: Forward functions with a choice, as numpy.where.
SELECTIONS: dict[Primitive, Callable[..., Array]] = {
    P.RELU: _relu,
    P.MAXIMUM: _select(np.greater_equal),
    P.MINIMUM: _select(np.less_equal),
    S.AFFINE_RELU: _then_relu(S.AFFINE),
}


def forward_function(fn: Primitive, small: bool) -> Callable[[Array, Any], Any]:
    """``f(X, c)``: the group's outputs from its input matrix ``X`` (one row
    per input position, one column per node) and its constant."""
    vector = None if small else (fn.forward if fn in SAME_ON_ARRAYS else SELECTIONS.get(fn))
    if vector is not None:
        if fn.const:
            return lambda X, c: vector(*X, c)
        return lambda X, c: vector(*X)
    forward = fn.forward  # the table's float function on each node: exact by construction
    in_c = None if small else _c_forward(fn)
    if in_c is not None:
        return lambda X, c: _mapped(in_c, X, lambda: per_node_array(forward, X))
    if fn.const:
        return lambda X, c: np.array(
            [forward(*row, ci) for row, ci in zip(X.T.tolist(), _const_rows(c, X.shape[1]))],
            dtype=float,
        )
    return lambda X, c: per_node_array(forward, X)


def per_node_array(forward: Callable[..., float], X: Array) -> Array:
    return np.array([forward(*row) for row in X.T.tolist()], dtype=float)


def _pow_exponent(fn: Primitive) -> float | None:
    """The constant ``c`` of ``fn`` if it is ``primitives.pow_const(c)``
    (found by its name, ``**{c:g}``, and checked: the table makes one
    primitive per exponent)."""
    if not fn.name.startswith("**") or fn.const or fn is P.POW:
        return None
    try:
        c = float(fn.name[2:])
    except ValueError:
        return None
    return c if P.pow_const(c) is fn else None


#: The table's float functions that return what a function of ``math``
#: returns (``ieee.exp`` is ``math.exp``), except where that raises (an
#: overflow) and the table returns inf instead.
_IN_C: dict[Primitive, Callable[[float], float]] = {P.EXP: math.exp}


def _c_forward(fn: Primitive) -> Callable[[list[float]], list[float]] | None:
    """``fn``'s forward on a list of floats as ``map`` of the C function its
    table entry calls (raising where the table's function would not: the
    caller then runs the table's function on each node)."""
    f = _IN_C.get(fn)
    if f is not None:
        return lambda xs: list(map(f, xs))
    c = _pow_exponent(fn)
    if c is None:
        return None
    return lambda xs: powers(xs, c)


def _mapped(
    in_c: Callable[[list[float]], list[float]], X: Array, per_node: Callable[[], Array]
) -> Array:
    try:
        return to_array(in_c(X[0].tolist()))
    except (OverflowError, ValueError):
        return per_node()


def _const_rows(c: Any, n: int) -> list[Any]:
    """The per-node constants from the group's constant (an array, a tuple
    of arrays, or a SUM_TERMS ``(kinds, start)``)."""
    if isinstance(c, np.ndarray):
        return c.tolist()
    if isinstance(c, tuple) and len(c) == 2 and isinstance(c[0], tuple):  # SUM_TERMS
        kinds, start = c
        starts = [None] * n if start is None else start.tolist()
        return [(kinds, s) for s in starts]
    return list(zip(*(a.tolist() for a in c)))


def vectorizes(fn: Primitive) -> bool:
    """Whether ``fn``'s derivative rule is one of the table's, written to run
    on arrays; a user's rule runs per element."""
    d = fn.derivative
    return d is not None and getattr(d, "__module__", None) in (P.__name__, S.__name__, __name__)


#: The largest magnitude up to which every int is a float exactly.
_EXACT_INT = 2**53


def replays_as_float(d: Any) -> bool:
    """Whether a user's rule's local derivative ``d`` gives eager's numbers
    as a float64 in a replay's buffer: a float, or an int a float holds
    exactly (eager's ``d * grad`` is then ``float(d) * grad``). Eagerly a
    NumPy scalar stays one in the gradient (``float32``), ``None`` or an
    int past the floats raise only at ``backward()``: those run eagerly."""
    return type(d) is float or (type(d) is int and -_EXACT_INT <= d <= _EXACT_INT)


class NotAFloat(Exception):
    """A user's rule gave a local derivative a replay cannot hold
    (:func:`replays_as_float`): the replay's forward traces again, which
    runs the function eagerly."""


def kernels(fn: Primitive, small: bool, kinds: tuple[int, ...] | None = None) -> tuple[Any, Any]:
    """``(forward(X, c), local(X, c, out))`` for a group of ``fn``; ``kinds``
    for a group of running sums (``SUM_TERMS``) of those kinds of terms."""
    if fn is SUM_TERMS and kinds is not None:  # on arrays even for one sum: many terms
        sums = RunningSums(kinds)
        return sums.forward, sums.local
    return forward_function(fn, small), TableRule(fn, small or not vectorizes(fn)).local


class RunningSums:
    """``SUM_TERMS`` nodes with the same kinds of terms, as matrix operations:
    the terms (products of two inputs, or inputs) in one matrix, summed in
    order down its rows by ``numpy.add.accumulate``, which adds row after row
    as ``_sum_terms_forward`` does; the local derivatives of
    ``_d_sum_terms`` (the other factor of a product, 1 for a plain term) by
    one gather. ``tests/test_compile.py`` checks both against the table."""

    def __init__(self, kinds: tuple[int, ...]) -> None:
        rows, singles, firsts, partner = [], [], [], []
        i = 0
        for k, kind in enumerate(kinds):
            if kind == 1:
                singles.append(k)
                rows.append(i)
                partner += [i]
            else:
                firsts.append(k)
                partner += [i + 1, i]
            i += kind
        self.singles = np.array(singles, dtype=np.intp)  # terms that are one input
        self.single_rows = np.array(rows, dtype=np.intp)
        self.products = np.array(firsts, dtype=np.intp)  # terms that are a product
        pairs = np.array(
            [j for j, kind in zip(np.cumsum((0, *kinds))[:-1], kinds) if kind == 2], dtype=np.intp
        )
        self.left, self.right = pairs, pairs + 1
        self.partner = np.array(partner, dtype=np.intp)  # the row whose value is each input's local
        self.ones = np.array(
            [j for j, kind in zip(np.cumsum((0, *kinds))[:-1], kinds) if kind == 1], dtype=np.intp
        )
        self.n_terms = len(kinds)

    def forward(self, X: Array, c: Any) -> Array:
        _, start = c
        T = np.empty((self.n_terms, X.shape[1]))
        T[self.singles] = X[self.single_rows]
        T[self.products] = X[self.left] * X[self.right]
        if start is not None:
            T[0] += start
        return sum_rows(T)

    def local(self, X: Array, c: Any, out: Array) -> Array:
        D = X[self.partner]
        D[self.ones] = 1.0
        return D


class TableRule:
    """A primitive's derivative rule for a group: once on arrays (namespace
    :data:`ARRAY`) or, for a few nodes or a rule that branches on a value,
    on each node's floats (namespace ``FLOAT``, as the eager engine)."""

    def __init__(self, fn: Primitive, per_element: bool) -> None:
        assert fn.derivative is not None
        self.fn = fn
        self.rule = fn.derivative
        self.per_element = per_element
        self.checked = not is_own(fn)  # a user's rule: its outputs checked at each replay

    def local(self, X: Array, c: Any, out: Array) -> Any:
        """The local derivatives of a group, per input position (a row of
        ``X``) an array of its width or one number for all (the rule's
        constant derivative, ``1.0`` of ``a + b``)."""
        fn, rule = self.fn, self.rule
        if not self.per_element:
            args = [*X, c] if fn.const else list(X)
            try:
                local = rule(ARRAY, *args, out)
            except (TypeError, ValueError):  # a rule that branches on a value
                self.per_element = True
            else:
                return local
        rows = X.T.tolist()
        outs = out.tolist()
        if fn.const:
            consts = _const_rows(c, len(outs))
            locals_ = [rule(P.FLOAT, *row, ci, o) for row, ci, o in zip(rows, consts, outs)]
        else:
            locals_ = [rule(P.FLOAT, *row, o) for row, o in zip(rows, outs)]
        if self.checked and not all(map(replays_as_float, itertools.chain(*locals_))):
            raise NotAFloat(self.fn.name)
        return np.array(locals_, dtype=float).reshape(X.shape[::-1]).T
