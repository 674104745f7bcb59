"""A captured graph (index arrays and one value buffer) and its replay.

Every node, leaf and constant gets a *slot* in one float64 buffer. An
interior node's *level* is one more than its deepest input's, so all nodes
of a level can run together once the levels below have. Within a level,
nodes of the same primitive (and the same shape: number of inputs, the
kinds of a running sum's terms) form a *group*, whose slots are
contiguous: its forward gathers each input position with one index array,
runs the primitive once on arrays, and writes one slice. The steps are
kept in level order; the backward pass runs them in reverse: per group,
the local derivatives (the table's rule on arrays) times the group's
gradients give its *terms*, one per input of each node, written into one
array; a node's gradient is the sum of its terms, added one at a time in
the order the eager pass adds them (the walk's order, root first: see
``capture._Edges``), before its own terms are made.

Sums run down the rows of a matrix by ``numpy.add.reduce``, which adds
row after row (:func:`sum_rows`). A running sum's terms are one gather of
slot pairs and one product (a plain term times a slot holding 1.0); the
products of a layer of neurons on a batch gather each factor once and
broadcast (:func:`_outer`).

A gather (``P[i]``) has an alias slot; where its pick is an entry that
the graph also uses directly (or another alias picks), eagerly one node,
the entry's gradient adds the alias's terms among its own, in the eager
pass's order (``term_rank``), not the alias's sum after them.

So forward values and gradients are the eager ones bit for bit, inf and
nan included, for the graph that was traced. Two things make the eager
walk visit nodes in another order than the trace's: a read float used as
an operand (the trace orders it after the nodes it was read from), and a
gather of nodes made inside the function whose pick changes (the eager
walk enters the graph through the picked one). There a node's terms may
be added in another order: gradients to about 1e-16 relative.
"""

from __future__ import annotations

import copy
import operator
from collections.abc import Callable
from dataclasses import dataclass
from itertools import compress
from typing import Any

import numpy as np

from ..tensor.floatpack import NOT_A_NUMBER, to_array
from ..value import intake as E
from ..value.engine import Value
from ..value.primitives import DEAD_UNIT, ZERO_EXPONENT, ZERO_MASKS, Primitive
from ..value.protocols import REWIRED

_KINDS = ("node", "arg", "int", "op", "reduce")
_get_data = operator.attrgetter("data")
_get_grad = operator.attrgetter("grad")
_get_prev = operator.attrgetter("_prev")

#: Groups of fewer nodes run the table's float functions node by node: a
#: NumPy call costs about as much as a dozen float operations.
SMALL_GROUP = 4


def _plain_numbers(xs: list[Any]) -> bool:
    """Whether every item is a Python float or int, as at the trace (which
    refuses a leaf whose ``.data`` is not: ``capture._check_numbers``). A
    NumPy scalar written to ``.data`` between calls computes by NumPy's
    rules eagerly (a float32's precision), which a float64 replay would
    not, nor a subclass of float or int with arithmetic of its own. In C
    loops: the exact types (floats only, the common case, in one count),
    then with ints ``sum`` (an int past the floats does not add)."""
    if operator.countOf(map(type, xs), float) == len(xs):
        return True
    if not _PLAIN.issuperset(map(type, xs)):
        return False
    try:
        return type(sum(xs, 0.0)) is float
    except OverflowError:
        return False


_PLAIN = frozenset((float, int))


def odd_number(xs: list[Any]) -> str | None:
    """Why a trace refuses these ``.data`` (the first not a Python float or
    int, named), or None: the words of the trace's refusal and of the
    warning when a replay finds one (:func:`_plain_numbers`)."""
    for x in xs:
        t = type(x)
        if t is not float and t is not int:
            return (
                f"a Value's .data is a {t.__module__}.{t.__qualname__}, whose arithmetic "
                "is not a Python float's: store float(x) in .data (Value(x) does)"
            )
    return None


def is_recipe(x: Any) -> bool:
    return type(x) is tuple and bool(x) and x[0] in _KINDS


class Retrace(Exception):
    """A replay that cannot give the eager result: trace again."""


@dataclass
class Group:
    """Nodes of one primitive at one level: outputs ``start:stop``."""

    fn: Primitive
    start: int
    stop: int
    matrix: np.ndarray  # input slots: one row per input position
    const: Any  # None, or a running sum's (kinds, None)
    forward: Callable[[np.ndarray, Any], np.ndarray]  # (inputs, constant) -> outputs
    # (inputs, c, outputs) -> the local derivatives, per input position an
    # array of the group's width or one number for all
    local: Callable[[np.ndarray, Any, np.ndarray], Any]
    small: bool  # so few nodes that floats beat arrays
    first_term: int = 0  # where its terms start among the program's terms
    incoming: Any = None  # the terms its nodes' gradients add (see gradient_of)

    def run(self, val: np.ndarray, call: Any) -> Any:
        """Write the group's outputs; return its inputs' values (the backward
        pass of the same buffer reads them again)."""
        X = val.take(self.matrix)
        val[self.start : self.stop] = self.forward(X, self.const)
        return X

    def backward(
        self,
        val: np.ndarray,
        gout: np.ndarray,
        contributions: np.ndarray,
        mask: np.ndarray | None,
        X: Any = None,
        rows: Any = None,
    ) -> None:
        """Write this group's terms (local derivative times gradient, one
        per input of each node) into ``contributions``, its part of the
        program's terms (:meth:`terms_of`); ``X``: its inputs' values, as
        :meth:`run` returned them for ``val``; ``rows``: the rows of
        ``contributions``, if at hand."""
        if mask is not None:
            gout = np.where(mask, gout, 0.0)
        if X is None:
            X = val.take(self.matrix)
        local = self.locals_of(val, X)
        for row, d in zip(contributions if rows is None else rows, local):
            np.multiply(d, gout, out=row)  # d: an array, or a number for all
        if self.fn.masked and not np.isfinite(gout).all():
            _masked(self, local, contributions, gout, X)
        if mask is not None:
            contributions[:, ~mask] = 0.0

    def locals_of(self, val: np.ndarray, X: np.ndarray) -> Any:
        """The local derivatives of the group's nodes for the buffer ``val``
        (``X``: their inputs' values): the table's rules, pure functions of
        the operands, evaluated now."""
        return self.local(X, self.const, val[self.start : self.stop])

    def terms_of(self, terms: np.ndarray) -> np.ndarray:
        """This group's part of ``terms``: a row per input position."""
        first = self.first_term
        return terms[first : first + self.matrix.size].reshape(self.matrix.shape)

    def reach(self, seen: np.ndarray, call: Any) -> None:
        """Mark the inputs of the marked nodes."""
        mine = seen[self.start : self.stop]
        if mine.any():
            seen[self.matrix[:, mine]] = True

    def nbytes(self) -> int:
        return int(self.matrix.nbytes + self.incoming.nbytes)


@dataclass
class SavedLocalsGroup(Group):
    """Nodes of a user's primitive: as the eager engine, which evaluates a
    derivative rule when the operation runs and keeps the numbers in the
    node, the forward pass evaluates the rule (with the state it reads at
    the call; an exception it raises makes the replay trace again, which
    raises it at the call as eagerly) and saves the local derivatives in
    the buffer, at ``saved`` (one row per input position); the backward
    pass reads them there, however late and however often it runs."""

    saved: Any = None  # (inputs, n): the slots of the local derivatives

    def run(self, val: np.ndarray, call: Any) -> Any:
        X = super().run(val, call)
        val[self.saved] = self.local(X, self.const, val[self.start : self.stop])
        return X

    def traced(self, val: np.ndarray) -> Any:
        """:meth:`run` right after the trace: the outputs and local
        derivatives the trace computed are the buffer's (``Program.base``),
        and the user's functions are not called a second time."""
        return val.take(self.matrix)

    def locals_of(self, val: np.ndarray, X: np.ndarray) -> Any:
        return val.take(self.saved)

    def nbytes(self) -> int:
        return super().nbytes() + int(self.saved.nbytes)


def _reciprocal_is_exact(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """:func:`chainrule.value.intake.reciprocal_is_exact` on arrays (``b ** -1.0``
    is C's ``pow``, as for floats; ``tests/test_compile.py`` checks the two
    agree on special values)."""
    ab = np.abs(b)
    with np.errstate(all="ignore"):
        y = np.abs(a * np.power(b, -1.0))
    in_range = (ab >= E.RECIP_MIN) & (ab <= E.RECIP_MAX)
    return in_range & ((y == 0.0) | ((y >= E.NORMAL_MIN) & (y <= E.FLOAT_MAX)))


def _guards_on_arrays() -> dict[Any, Callable[[np.ndarray, np.ndarray], np.ndarray]]:
    from ..value import engine

    return {engine._reciprocal_is_exact: _reciprocal_is_exact}


#: Guards between two node values that run on arrays (the engine's own).
GUARDS_ON_ARRAYS = _guards_on_arrays()


def _rows_in_order() -> bool:
    """Whether ``numpy.add.reduce`` down the rows of a C-ordered matrix (at
    least two columns) adds row after row from ``initial``: the inner loop
    then runs along a row, adding it into the running sums, and the
    pairwise summation only applies along the axis reduced in the inner
    loop. A probe: tiny terms after 1.0 vanish one by one (added together
    first, they would not), before it they add up; a column of -0.0 keeps
    its sign."""
    tiny = 2.0**-53
    T = np.array([[1.0, tiny, -0.0]] + [[tiny, tiny, -0.0]] * 15 + [[tiny, 1.0, -0.0]])
    expected = [1.0, 1.0 + 16 * tiny, -0.0]
    got = np.add.reduce(T, axis=0, initial=-0.0).tolist()
    return got == expected and str(got[2]) == "-0.0"


#: ``numpy.add.reduce`` adds rows in order here (the probe above).
REDUCE_IN_ORDER = _rows_in_order()


def sum_rows(T: np.ndarray, start: float = -0.0, out: np.ndarray | None = None) -> np.ndarray:
    """``start`` and the rows of ``T`` added one after another, ``((start +
    T[0]) + T[1]) ...``: the order of a chain of ``+`` (from ``-0.0``, which
    ``-0.0 + x`` leaves as ``x``: the chain itself; from ``0.0``: a
    gradient, which starts at 0.0). Down the rows of a matrix,
    ``numpy.add.reduce`` adds them in that order (see
    :func:`_rows_in_order`); a single column would be reduced pairwise,
    ``accumulate`` runs down it in order (and ``start`` added last only
    changes the sign of a zero, as added first). Into ``out`` if given."""
    width = T.shape[1]
    if width == 1:  # one long sum: accumulate runs down a vector, in order
        total = np.add.accumulate(T.ravel())[-1:] + start
    elif REDUCE_IN_ORDER:
        return np.add.reduce(T, axis=0, initial=start, out=out)
    else:
        total = T[0] + start
        for row in T[1:]:
            total += row
    if out is None:
        return total
    out[:] = total
    return out


@dataclass
class SumGroup(Group):
    """Running sums (:data:`~chainrule.compiler.rules.SUM_TERMS`) with the
    same kinds of terms, gathered straight from the buffer: the products'
    two factors and the plain terms, added row after row in order (as the
    chain of ``+`` adds them); each input's local derivative is the slot of
    the other factor (or a slot holding 1.0), so its term is one gather and
    one product."""

    left: Any = None  # (products, n): the first factors' slots
    right: Any = None  # (products, n): the second factors' slots
    single: Any = None  # (plain terms, n): their slots
    products: Any = None  # which terms are products
    singles: Any = None  # which terms are plain
    partner: Any = None  # (inputs, n): the slot of each input's local derivative

    def __post_init__(self) -> None:
        kinds = np.array(self.const[0])
        products, singles = np.flatnonzero(kinds == 2), np.flatnonzero(kinds == 1)
        # every term as a product of two slots, a plain term's second a slot
        # holding 1.0 (x * 1.0 is x, bit for bit): one gather, one product
        rows = np.cumsum(np.concatenate(([0], kinds)))[:-1]  # each term's first input row
        self.plain_rows = rows[singles]
        self.pairs = np.empty((2, len(kinds), self.matrix.shape[1]), dtype=np.intp)
        self.pairs[0, products], self.pairs[1, products] = self.left, self.right
        if len(singles):
            self.pairs[0, singles] = self.single
            self.pairs[1, singles] = self.partner[self.plain_rows]  # the slot of 1.0
        self.outer = _outer(self.left, self.right)
        self.single_across = self.single  # (see run: the plain terms, grid transposed)
        if self.outer is not None and len(singles):
            m, p = self.outer[2]
            self.single_across = (
                self.single.reshape(-1, m, p).transpose(0, 2, 1).reshape(len(singles), -1)
            )
        # for the outer products: the products in runs of consecutive terms
        # (products, their terms, their first factors' input rows, their
        # second factors'), the plain terms
        self.products = _as_slice(products)
        self.singles = _as_slice(singles)
        self.runs = []
        first_rows = rows.tolist()
        first = 0  # the products before a run: those of the runs before it
        for term_run in _runs(products):
            count = term_run.stop - term_run.start
            row = first_rows[term_run.start]
            self.runs.append(
                (
                    slice(first, first + count),
                    term_run,
                    slice(row, row + 2 * count, 2),
                    slice(row + 1, row + 2 * count + 1, 2),
                )
            )
            first += count

    def run(self, val: np.ndarray, call: Any) -> None:
        if self.outer is None:
            G = val.take(self.pairs)
            T = np.multiply(G[0], G[1], out=G[0])
            sum_rows(T, -0.0, val[self.start : self.stop])
            return
        # the products straight into their rows, from the small factors, each
        # row's grid (m, p) laid out across, (p, m): the multiply's inner loop
        # runs along the long side (16 x 1,600 products: 63 -> 39 us here);
        # each column is summed down the rows as before, then laid back
        T = np.empty(self.pairs.shape[1:])
        left, right, (m, p) = self.outer
        L, R = val.take(left), val.take(right)
        for run, terms, _, _ in self.runs:
            np.multiply(
                L[run].transpose(0, 2, 1), R[run].transpose(0, 2, 1), out=T[terms].reshape(-1, p, m)
            )
        singles = self.singles
        if type(singles) is slice:
            val.take(self.single_across, out=T[singles], mode="clip")
        elif len(singles):
            T[singles] = val.take(self.single_across)
        sums = sum_rows(T, -0.0)
        val[self.start : self.stop].reshape(m, p)[...] = sums.reshape(p, m).T

    def backward(
        self,
        val: np.ndarray,
        gout: np.ndarray,
        contributions: np.ndarray,
        mask: np.ndarray | None,
        X: Any = None,
        rows: Any = None,
    ) -> None:
        if mask is not None:
            gout = np.where(mask, gout, 0.0)
        if self.outer is None:
            val.take(self.partner, out=contributions, mode="clip")
            contributions *= gout
        else:  # each factor's local derivative is the other factor
            left, right, grid = self.outer
            g = gout.reshape(grid)
            L, R = val.take(left), val.take(right)
            for run, _, firsts, seconds in self.runs:
                _times_grid(R[run], g, contributions[firsts].reshape(-1, *grid))
                _times_grid(L[run], g, contributions[seconds].reshape(-1, *grid))
            if len(self.plain_rows):
                contributions[self.plain_rows] = 1.0 * gout  # a plain term's local: 1.0
        if mask is not None:
            contributions[:, ~mask] = 0.0

    def backward_direct(
        self, val: np.ndarray, gout: np.ndarray, contributions: np.ndarray, direct: Direct
    ) -> np.ndarray:
        """:meth:`backward` (unmasked) but for the terms of the factor that
        ``direct`` sums straight into its consumer's gradients, which it
        returns (see :class:`Direct`)."""
        left, right, grid = self.outer
        g = gout.reshape(grid)  # (points, neurons)
        L, R = val.take(left), val.take(right)
        for run, _, firsts, seconds in self.runs:  # the other factor's terms as usual
            if direct.side == "seconds":
                _times_grid(R[run], g, contributions[firsts].reshape(-1, *grid))
            else:
                _times_grid(L[run], g, contributions[seconds].reshape(-1, *grid))
        # (products, neurons): the local derivative of the factor's terms
        other = L[:, 0, :] if direct.side == "seconds" else R[:, 0, :]
        if len(self.plain_rows):
            contributions[self.plain_rows] = 1.0 * gout
        order = direct.order
        # the terms as a C-ordered (neurons, products, points) array (a ufunc
        # would lay its output out as its inputs' views are; points last: the
        # multiply's inner loop along the long side), summed down the rows of
        # its (neurons, products x points) matrix as REDUCE_IN_ORDER probes
        # it (0.0 + each in order), then laid out point by point
        n_points, n_neurons = grid
        terms = np.empty((n_neurons, other.shape[0], n_points))
        np.multiply(g.T[order][:, None, :], other.T[order][:, :, None], out=terms)
        sums = np.add.reduce(terms.reshape(n_neurons, -1), axis=0, initial=0.0)
        return sums.reshape(-1, n_points).T.ravel()


def _times_grid(factor: np.ndarray, g: np.ndarray, out: np.ndarray) -> None:
    """The terms of an outer product's factor: ``out[k] = factor[k] * g``,
    the other factor (``(products, 1, p)`` or ``(products, n / p, 1)``)
    broadcast over the gradients' grid ``g``. By ``numpy.einsum``, whose
    loop over such a grid is about twice as fast as a broadcast multiply's
    (16 x 1,600 products: 46 -> 24 us here): each term is one product,
    computed as ``0.0 + a * b``, so a zero term may lose its sign, which no
    gradient shows (every sum of terms starts from 0.0)."""
    if factor.shape[2] == 1:  # in runs: one value per row of the grid
        np.einsum("ki,ij->kij", factor[:, :, 0], g, out=out)
    else:  # tiled: one value per column
        np.einsum("kj,ij->kij", factor[:, 0, :], g, out=out)


@dataclass
class Direct:
    """A layer's inputs' gradients summed where their terms are made: the
    factor of an outer-product :class:`SumGroup` that comes in runs (a
    layer's input ``x[point]``, each used by every neuron) feeds one group
    (``consumer``, a plan position) and nothing else, and each of its slots
    adds its terms in the neurons' order (``order``: a slice, ascending or
    descending), its slots point by point (as the walk lays them out). Then
    its gradient is one product of the gradients and the other factor, laid
    out neurons first, and one ``numpy.add.reduce`` down that axis: the same
    sums in the same order, without writing the terms and gathering them
    again. ``side``: the rows of the factor's terms (``"firsts"`` or
    ``"seconds"``)."""

    consumer: int
    order: slice
    side: str

    @staticmethod
    def of(group: SumGroup, incoming: np.ndarray, first: int, consumer: int) -> Direct | None:
        """The direct path from ``group`` to the consumer whose slots start
        at ``first`` and add ``incoming``, if its terms are exactly these."""
        if group.outer is None or not REDUCE_IN_ORDER:
            return None
        left, right, (n_points, n_neurons) = group.outer
        if right.shape[2] == 1:  # (products, points, 1): the right factor comes in runs
            factor, side = right, "seconds"
        elif left.shape[2] == 1:
            factor, side = left, "firsts"
        else:
            return None
        n_products = factor.shape[0]
        width = incoming.shape[1]
        # each product's input row of the factor, run after run
        rows = [run[3 if side == "seconds" else 2] for run in group.runs]
        input_rows = np.concatenate([np.arange(r.start, r.stop, r.step) for r in rows])
        if len(input_rows) != n_products or incoming.shape[0] != n_neurons:
            return None
        column = factor[:, :, 0] - first  # (products, points): each input's consumer slot
        if width != column.size or column.min() < 0 or column.max() >= width:
            return None
        if len(np.unique(column)) != width:
            return None
        # the term of (product r, point p, neuron k): row r of the factor's
        # rows, output column p * n_neurons + k
        matrix_width = group.matrix.shape[1]
        base = group.first_term + input_rows[:, None] * matrix_width
        base = base + np.arange(n_points)[None, :] * n_neurons  # (products, points)
        expected = np.empty((n_neurons, width), dtype=np.intp)
        expected[:, column.ravel()] = base.ravel()[None, :] + np.arange(n_neurons)[:, None]
        if np.array_equal(incoming, expected):
            order = slice(None)
        elif np.array_equal(incoming, expected[::-1]):
            order = slice(None, None, -1)
        else:
            return None
        if not (column.T.ravel() == np.arange(width)).all():  # slots not point by point
            return None
        return Direct(consumer, order, side)


def _runs(indexes: np.ndarray) -> list[slice]:
    """Ascending ``indexes`` as slices of consecutive ones."""
    breaks = np.flatnonzero(np.diff(indexes) != 1) + 1
    return [slice(int(run[0]), int(run[-1]) + 1) for run in np.split(indexes, breaks) if len(run)]


def _period(A: np.ndarray) -> int:
    """The smallest ``p`` dividing ``A``'s width whose columns repeat every
    ``p`` (column ``c`` is column ``c % p``), or 0."""
    n = A.shape[1]
    for p in np.flatnonzero((A[:, :1] == A).all(axis=0))[1:].tolist():
        if n % p == 0 and (A.reshape(len(A), n // p, p) == A[:, None, :p]).all():
            return p
    return 0


def _run(A: np.ndarray) -> int:
    """The length ``q`` of the runs of equal columns that make ``A`` (column
    ``c`` is column ``c - c % q``), or 0."""
    n = A.shape[1]
    different = np.flatnonzero(~(A[:, :1] == A).all(axis=0))
    q = int(different[0]) if len(different) else n
    if q > 0 and n % q == 0 and (A.reshape(len(A), n // q, q) == A[:, ::q, None]).all():
        return q
    return 0


#: Products fewer than this gather their factors whole: broadcasting costs
#: a NumPy call per run of products and an inner loop per row of the grid
#: (measured: 16 x 1,600 products broadcast faster, 64 x 80 slower).
OUTER_MIN = 10_000


def _outer(left: np.ndarray, right: np.ndarray) -> Any:
    """Products whose factors make an outer product (the nodes of a layer of
    neurons on a batch: ``w[neuron] * x[point]``): one factor repeats
    every ``p`` columns, the other comes in runs of ``p``. Then each factor
    is gathered once, as small as it is, and broadcast: ``(left, right,
    grid)``, the small factors' slots, shaped (products, 1, p) and
    (products, n / p, 1) (in either order), and ``grid`` (n / p, p); None
    otherwise, or for fewer than :data:`OUTER_MIN` products."""
    n = left.shape[1]
    if left.size < OUTER_MIN:
        return None
    for a, b, swap in ((left, right, False), (right, left, True)):
        p = _period(a)
        if 1 < p < n and _run(b) == p:
            tiled = a[:, None, :p]  # (products, 1, p)
            runs = b[:, ::p, None]  # (products, n / p, 1)
            return (runs, tiled, (n // p, p)) if swap else (tiled, runs, (n // p, p))
    return None


def _as_slice(rows: np.ndarray) -> slice | np.ndarray:
    """``rows`` as a slice when they are consecutive (a view, not a copy)."""
    if len(rows) and (np.diff(rows) == 1).all():
        return slice(int(rows[0]), int(rows[-1]) + 1)
    return rows


@dataclass
class RecipeStep:
    """Floats that user code read and the engine used as operands, all of
    one level, recomputed from their recipes (no gradient flows through
    them, as eagerly)."""

    slots: np.ndarray
    compute: Callable[[np.ndarray, Any], Any]  # -> floats, or a float64 array

    def run(self, val: np.ndarray, call: Any) -> None:
        values = self.compute(val, call)
        if type(values) is np.ndarray:
            val[self.slots] = values
            return
        try:  # floats, packed (faster than NumPy's look at each item)
            val[self.slots] = to_array(values)
        except NOT_A_NUMBER:
            val[self.slots] = values

    def reach(self, seen: np.ndarray, call: Any) -> None:
        pass

    def nbytes(self) -> int:
        return int(self.slots.nbytes)


@dataclass(eq=False)  # a step is itself: hashed and compared by identity
class GatherStep:
    """``container[i]`` (see :mod:`chainrule.compiler.symbolic`): each slot
    of ``out`` (an alias) takes the value of the entry of its row of
    ``table`` (the slots of the entries the subscript may pick) that its
    int picks; ``recipes`` give the ints from the call's."""

    out: np.ndarray  # the aliases' slots
    table: np.ndarray  # per alias, the slots of the entries it may pick
    recipes: list[Any]  # per alias, the recipe of its int
    incoming: Any = None  # the terms its aliases' gradients add

    def __post_init__(self) -> None:
        self.rows = np.arange(len(self.out))
        self.flat_table = self.table.ravel()
        self.row_starts = self.rows * self.table.shape[1]  # each row's first in flat_table
        self.first = int(self.out[0])  # the aliases' slots are one slice
        self.stop = self.first + len(self.out)
        # the distinct recipes (a row of wte[token] shares its token's), and
        # each alias's among them
        position: dict[int, int] = {}
        self.which = np.array(
            [position.setdefault(id(r), len(position)) for r in self.recipes], dtype=np.intp
        )
        self.distinct = list({id(r): r for r in self.recipes}.values())
        from .symbolic import recipe_value  # only a program with a gather needs it

        self.recipe_value = recipe_value

    def picks(self, call: Any) -> np.ndarray:
        """The slots that the call's ints pick (once per call), or Retrace
        where the list would raise IndexError (the trace will raise it)."""
        cache = call.picks
        kept = cache.get(self)
        if kept is not None:
            return kept
        recipe_value = self.recipe_value
        n = self.table.shape[1]
        ints = call.ints
        columns = []
        for r in self.distinct:
            i = recipe_value(r, ints)
            if not -n <= i < n:
                raise Retrace
            columns.append(i % n)
        picked = np.array(columns, dtype=np.intp).take(self.which)
        picked += self.row_starts  # table[rows, picked], as positions in the flat table
        found = self.flat_table.take(picked)
        cache[self] = found
        return found

    def run(self, val: np.ndarray, call: Any) -> None:
        val[self.first : self.stop] = val.take(self.picks(call))

    def backward(self, gout: np.ndarray, late: np.ndarray, call: Any, mask: Any) -> None:
        """Add the aliases' gradients to the picked entries' after their
        own terms (``late``): for a gather whose aliases are themselves
        picked, or the root. Otherwise the picked entries add the aliases'
        terms among their own (:meth:`Program._merge_picked`)."""
        if mask is not None:
            gout = np.where(mask, gout, 0.0)
        np.add.at(late, self.picks(call), gout)

    def reach(self, seen: np.ndarray, call: Any) -> None:
        mine = seen[self.out]
        if mine.any():
            seen[self.picks(call)[mine]] = True

    def nbytes(self) -> int:
        return int(self.out.nbytes + self.table.nbytes)


Step = Group | RecipeStep | GatherStep


class Program:
    """The captured graph of one trace."""

    def __init__(self) -> None:
        self.n = 0
        self.base = np.zeros(0)
        self.live: list[Value] = []  # leaves that existed before the trace
        self.live_inputs: tuple[Value, ...] = ()  # the same, the inputs of an output node
        self.rewired = -1  # value.protocols.REWIRED when the live leaves were last seen leaves
        self.live_slots = np.zeros(0, dtype=np.intp)
        self.arg_leaves: list[tuple[int, int]] = []  # (slot, position among the args' Values)
        # the float arguments that guards compare, a slot each (filled at each replay)
        self.arg_slots: np.ndarray | None = None
        self.arg_positions: list[int] = []
        self.steps: list[Step] = []  # in level order
        self.guards: list[tuple[Callable[..., Any], Any, Any, Any]] = []
        # guards between two node values (or constants), by function: slots, slots, results
        # (results: an array for a guard on arrays, else a list)
        self.node_guards: list[tuple[Callable[..., Any], np.ndarray, np.ndarray, Any]] = []
        # the calls of functools caches (reads.cached_again): made again last,
        # once every other guard holds, where eager code would make them too
        self.late_guards: list[tuple[Callable[..., Any], Any, Any, Any]] = []
        self.node_slot: dict[Any, int] = {}
        # which slots are number operands (capture._numbers): no anomaly there
        self.numbers = np.zeros(0, dtype=bool)
        self.n_terms = 0  # terms of the backward pass, group by group
        self.term_rank = np.zeros(1, dtype=np.intp)  # per term, its place in the eager pass
        # (first slot, each gather's first slot and picks' bytes) -> _merge_layout's
        self._merges: dict[Any, Any] = {}
        self.leaf_incoming = np.zeros((1, 0), dtype=np.intp)  # leaves' terms, slots 0...
        self.budget: Any = None  # the compiled function's account, for replay times
        self.eager_seconds = 0.0  # an eager call of its graph (the budget's estimate)
        self._plan: list[tuple[Any, Any, int, int, bool, int]] | None = None  # see _backward_plan
        self._late = self._late_leaves = False
        self._leaves_from = np.zeros((2, 0), dtype=np.intp)  # see _backward_plan
        self._sums_in_one = False  # no leaf adds more than one term (see _backward_plan)
        self._direct: dict[int, Direct] = {}  # producer's plan position -> see Direct
        self._spare_terms: list[tuple[np.ndarray, list[Any]]] = []  # see _gradients
        self._reached: dict[Any, list[bool] | None] = {}  # see reached_leaves
        self._gathers: list[GatherStep] | None = None  # (see reached_leaves)
        self._inputs: tuple[np.ndarray, list[Any]] | None = None  # see forward
        self.layouts: dict[Any, Any] = {}  # optimizer -> compiler.step.Layout (which holds it)
        # said once: a backward pass through an output leaves its siblings' .grad
        self.warned_beside = False
        # an output's slot -> the slots of the outputs beside it that it depends on
        self.beside_paths: dict[tuple[int, tuple[int, ...]], set[int]] = {}

    @property
    def picks_by_int(self) -> bool:
        """Whether a step picks by an int argument (a gather): then which
        nodes a slot depends on changes from call to call."""
        return any(type(step) is GatherStep for step in self.steps)

    def rebound(self, live: list[Value]) -> Program:
        """This program reading and writing ``live`` (copies of its leaves,
        in order) instead: a ``copy.deepcopy`` of an output. The steps and
        plans are shared; no budget (the copy's passes are not the
        compiled function's replays) and no optimizer layouts."""
        new = copy.copy(self)
        new.live, new.live_inputs, new.rewired = list(live), tuple(live), -1
        new.budget, new.layouts, new._inputs, new._spare_terms = None, {}, None, []
        return new

    # -- forward ------------------------------------------------------------

    def forward(self, call: Any, late: bool = True) -> np.ndarray | None:
        """The buffer of every slot's value for the leaves' current data
        and the call's arguments (:class:`chainrule.compiler.keys.Call`),
        or None when a guard goes the other way (trace again); ``late``:
        the calls of caches too, and a user's primitives' functions (not right
        after the trace, which called them: their traced values are kept,
        and each runs once per call, as eagerly)."""
        val = self.base.copy()
        live = self.live
        if live:
            rewired = REWIRED[0]
            if rewired != self.rewired:  # a Value wired by hand since: a live leaf made a node?
                if any(map(_get_prev, live)):
                    return None  # (a trace sees the node)
                self.rewired = rewired
            data = [v.data for v in live]
            if not _plain_numbers(data):
                return None  # (a trace refuses it: the function runs eagerly)
            val[: len(live)] = to_array(data)  # the live leaves: slots 0...
        arg_values = call.values
        for slot, pos in self.arg_leaves:
            x = arg_values[pos].data
            if type(x) is not float and type(x) is not int:
                return None
            val[slot] = x
        try:
            with np.errstate(all="ignore"):
                if late:
                    inputs = [step.run(val, call) for step in self.steps]
                else:
                    inputs = [
                        step.traced(val) if type(step) is SavedLocalsGroup else step.run(val, call)
                        for step in self.steps
                    ]
            for f, a, b, expected in self.guards:
                if f(a(val, call), b(val, call)) != expected:
                    return None
        except Exception:
            # Retrace, or a recipe that raises (1.0 / x where a branch the
            # guards check protects it eagerly, the engine's own float
            # functions on an argument): trace again, which raises only
            # where the function raises eagerly
            return None
        if self.arg_slots is not None:
            floats = call.floats
            val[self.arg_slots] = [floats[k] for k in self.arg_positions]
        for f, slots_a, slots_b, expected in self.node_guards:
            on_arrays = GUARDS_ON_ARRAYS.get(f)
            if on_arrays is not None:
                # (the same shape: one result per pair of slots)
                if not (on_arrays(val.take(slots_a), val.take(slots_b)) == expected).all():
                    return None
            elif list(map(f, val[slots_a].tolist(), val[slots_b].tolist())) != expected:
                return None
        if late:  # (the cache's function raising here raises, once, as eagerly)
            for f, a, b, expected in self.late_guards:
                if f(a(val, call), b(val, call)) != expected:
                    return None
        # the groups' inputs, for a backward pass of this buffer (the newest
        # only: a tuple, read and replaced whole)
        self._inputs = (val, inputs)
        return val

    # -- backward -----------------------------------------------------------

    def backward(
        self,
        val: np.ndarray,
        root: int,
        seed: float,
        call: Any,
        nodes: list[int] | None = None,
        *,
        within: bool = False,
    ) -> dict[int, float]:
        """Add d root / d leaf to every leaf's ``.grad`` (eager semantics);
        with ``nodes`` (slots), return d root / d node of those that root
        depends on (the eager pass sets their ``.grad``).

        The root of a backward pass (``within=False``) adds each leaf's sum,
        from 0.0, to its ``.grad``, as ``Value.backward`` adds a pass's
        gradients to what the leaves held. A node within a larger graph's
        pass (``within=True``: :func:`chainrule.compiler._node_backward`)
        adds each term one by one to the leaf's ``.grad``, that pass's
        running sum, and assigns the result: ``((g + t1) + t2) ...``, the
        order of the eager walk, where this call's terms come together
        (``g + (t1 + t2)`` would differ in the last bit)."""
        kept: dict[tuple[int, int], np.ndarray] | None = None if nodes is None else {}
        live = self.live
        arg_values = call.values
        if self._plan is None:
            self._plan = self._backward_plan()
        # (where no leaf adds two terms, g + (0.0 + t) is g + t: as the root)
        if within and not self._sums_in_one:
            # the leaves' running sums, by slot: the live leaves', then the
            # arguments' (a Value is in one slot: compile keys an argument
            # that is also a leaf it reads, or is passed twice, apart). A
            # pass's running sum is never -0.0 (it starts at 0.0, and 0.0 + t
            # is not), so the sign of a zero term (see _times_grid) is moot.
            reached = self.reached_leaves(root, call)
            grads = list(map(_get_grad, live))
            if self.arg_leaves:
                grads += [arg_values[pos].grad for _, pos in self.arg_leaves]
            if reached is not None:  # (what the walk does not reach: its own business)
                grads = [g if r else 0.0 for g, r in zip(grads, reached)]
            grad = self.leaf_gradients(val, root, seed, call, kept, to_array(grads))
            ds = grad[: len(live)].tolist()
            if reached is None:
                for leaf, d in zip(live, ds):
                    leaf.grad = d
            else:
                for leaf, d in zip(compress(live, reached), compress(ds, reached)):
                    leaf.grad = d
            for k, (slot, pos) in enumerate(self.arg_leaves):
                if reached is None or reached[len(live) + k]:
                    arg_values[pos].grad = grad.item(slot)
        else:
            grad = self.leaf_gradients(val, root, seed, call, kept)
            reached = self.reached_leaves(root, call)
            ds = grad[: len(live)].tolist()
            leaves = live if reached is None else compress(live, reached)
            # as Value.backward: what a leaf the walk reaches held is added to
            # only where it is not zero (np.float32(0.0) included: the sum
            # stays a float); one it does not reach is left as it is (an int
            # 0, a -0.0, a None: eager's)
            for leaf, d in zip(leaves, ds if reached is None else compress(ds, reached)):
                held = leaf.grad  # (a plain loop: faster than map)
                leaf.grad = held + d if held != 0.0 else d
            for k, (slot, pos) in enumerate(self.arg_leaves):
                if reached is None or reached[len(live) + k]:
                    held = arg_values[pos].grad
                    d = grad.item(slot)
                    arg_values[pos].grad = held + d if held != 0.0 else d
        if not kept:
            return {}
        seen = self._reach(root, call)
        got = {}
        for (first, stop), g in kept.items():
            for slot in nodes or ():
                if first <= slot < stop and seen[slot]:
                    got[slot] = g.item(slot - first)
        return got

    def reached_leaves(self, root: int, call: Any) -> list[bool] | None:
        """Which leaves (the live ones, then the arguments' Values) the
        eager walk from ``root`` reaches this call, or None for all of them:
        a table's entries this call does not pick, a Value read only through
        ``.data``, are not (eagerly their ``.grad`` is left as it is). Per
        root where no gather picks (the same every call)."""
        gathers = self._gathers
        if gathers is None:
            gathers = self._gathers = [s for s in self.steps if type(s) is GatherStep]
        # (by the picks: a loop on one name replays them, at C speed)
        key = (root, *(g.picks(call).tobytes() for g in gathers)) if gathers else root
        if key in self._reached:
            return self._reached[key]
        seen = self._reach(root, call)
        slots = [*range(len(self.live)), *(slot for slot, _ in self.arg_leaves)]
        mask = seen[slots].tolist()
        found = None if all(mask) else mask
        if len(self._reached) >= 64:  # (picks that change call after call)
            self._reached.clear()
        self._reached[key] = found
        return found

    def leaf_gradients(
        self,
        val: np.ndarray,
        root: int,
        seed: float,
        call: Any,
        node_grads: dict[tuple[int, int], np.ndarray] | None = None,
        start: np.ndarray | None = None,
    ) -> np.ndarray:
        """d root / d leaf (times ``seed``), by slot: the live leaves first
        (``live[i]`` is slot ``i``), then the Values among the arguments
        (``arg_leaves``); into ``node_grads``, if given, every step's gradients by
        its slots ``(first, stop)``. With ``start`` (a number per leaf
        slot), each leaf's sum starts there instead of at 0.0: ``start``
        and then its terms, added one by one."""
        grad = self._gradients(val, root, seed, call, None, node_grads, start)
        if not np.isfinite(grad).all():
            # A node that root does not depend on got a zero gradient, and
            # zero times an inf local derivative is nan: the eager pass never
            # visits such a node. Again, with only the nodes root depends on.
            # (Also where an inf or nan was in ``start``: the same numbers.)
            seen = self._reach(root, call)
            grad = self._gradients(val, root, seed, call, seen, node_grads, start)
        return grad

    def node_gradients(
        self, val: np.ndarray, root: int, seed: float, call: Any
    ) -> tuple[np.ndarray, dict[tuple[int, int], np.ndarray]]:
        """Which slots root depends on, and those steps' gradients by their
        slots ``(first, stop)``: the nodes the eager walk visits, with the
        gradient each one's chain rule multiplies (for detect_anomaly:
        ``chainrule.compiler.anomaly``)."""
        seen = self._reach(root, call)
        grads: dict[tuple[int, int], np.ndarray] = {}
        self._gradients(val, root, seed, call, seen, grads)
        return seen, grads

    def _gradients(
        self,
        val: np.ndarray,
        root: int,
        seed: float,
        call: Any,
        seen: np.ndarray | None,
        node_grads: dict[tuple[int, int], np.ndarray] | None = None,
        start: np.ndarray | None = None,
    ) -> np.ndarray:
        """The leaves' gradients (slots 0...): each node's gradient is the
        sum of its terms, added one by one in the eager pass's order from
        0.0 (a leaf's: from ``start``, if given), before its own terms are
        made.

        The buffer of terms: every group's terms, then the padding term
        (0.0, which the columns of fewer terms add last), then a place per
        leaf for its ``start`` (the leaves' first row of terms then)."""
        plan = self._plan
        if plan is None:
            plan = self._plan = self._backward_plan()
        size = self.n_terms + 1 + self.leaf_incoming.shape[1]
        if seen is not None:  # the terms a mask skips: zeros
            terms = np.zeros(size)
            views = self._views(terms)
            return self._run_plan(val, root, seed, call, seen, terms, views, node_grads, start)
        # Every group writes all its terms before any is read (a node's
        # terms are read by the nodes it feeds, later in the plan), so a
        # buffer of terms serves call after call, with its groups' views;
        # one per concurrent backward pass (list.pop and append are atomic).
        spare = self._spare_terms
        try:
            terms, views = spare.pop()
        except IndexError:
            terms = np.empty(size)
            terms[self.n_terms] = 0.0  # the padding term
            views = self._views(terms)
        try:
            return self._run_plan(val, root, seed, call, None, terms, views, node_grads, start)
        finally:
            spare.append((terms, views))

    def _views(self, terms: np.ndarray) -> list[tuple[Any, Any]]:
        """Per plan entry: its group's part of ``terms`` and that part's rows
        (None for a gather, which writes its terms elsewhere)."""
        assert self._plan is not None
        views: list[tuple[Any, Any]] = []
        for step, *_ in self._plan:
            view = None if type(step) is GatherStep else step.terms_of(terms)
            views.append((view, None if view is None else list(view)))
        return views

    def _run_plan(
        self,
        val: np.ndarray,
        root: int,
        seed: float,
        call: Any,
        seen: np.ndarray | None,
        terms: np.ndarray,
        views: list[tuple[Any, Any]],
        node_grads: dict[tuple[int, int], np.ndarray] | None = None,
        start: np.ndarray | None = None,
    ) -> np.ndarray:
        """:meth:`_gradients` into ``terms``, each group into its part of
        them and its rows (``views``); with a mask (``seen``), the steps it
        marks only."""
        plan = self._plan
        assert plan is not None
        late = np.zeros(self.n if self._late else 0)  # gathers' gradients, after a slot's own
        merged: list[tuple[GatherStep, np.ndarray]] = []  # gathers whose terms merge
        kept = self._inputs
        inputs = None
        if kept is not None and kept[0] is val:
            inputs = kept[1]
            self._inputs = None  # held from a forward pass to its backward pass only

        def gradient_of(
            incoming: Any, first: int, stop: int, picked: bool, from_start: bool = False
        ) -> np.ndarray:
            if type(incoming) is slice:  # one term each, in a row
                g = terms[incoming] + 0.0  # (from 0.0: -0.0 becomes 0.0)
            else:
                # 0.0 + the first term + the next ...; the leaves' from their
                # starts: -0.0 + a first row of starts, which it leaves as they are
                g = sum_rows(terms.take(incoming), -0.0 if from_start else 0.0)
            if picked:
                if from_start:  # (the leaves' own terms, without their starts)
                    incoming = self.leaf_incoming
                self._merge_picked(g, incoming, first, stop, merged, terms, from_start)
                g += late[first:stop]
            if first <= root < stop:
                g[root - first] = seed
            return g

        direct = self._direct if seen is None else {}  # (see Direct; masked: the terms)
        summed: dict[int, np.ndarray] = {}  # consumer -> its gradient, from a Direct
        with np.errstate(all="ignore"):
            for i, ((step, incoming, first, stop, picked, j), (view, rows)) in enumerate(
                zip(plan, views)
            ):
                mask = None
                if seen is not None:
                    mask = seen[first:stop]
                    if not mask.any():
                        continue
                    if mask.all():
                        mask = None
                g = summed.pop(i, None)
                if g is None:
                    g = gradient_of(incoming, first, stop, picked)
                elif first <= root < stop:
                    g[root - first] = seed
                if node_grads is not None:
                    node_grads[first, stop] = g.copy()
                if type(step) is GatherStep:
                    if picked or first <= root < stop:
                        step.backward(g, late, call, mask)
                    else:
                        merged.append((step, step.picks(call)))
                elif i in direct and mask is None:
                    to = direct[i]
                    summed[to.consumer] = step.backward_direct(val, g, view, to)
                else:
                    X = None if inputs is None else inputs[j]
                    step.backward(val, g, view, mask, X, rows)
            n_leaves = self.leaf_incoming.shape[1]
            if start is None:
                grad = gradient_of(self.leaf_incoming, 0, n_leaves, self._late_leaves)
            else:
                terms[self.n_terms + 1 :] = start  # the leaves' first row (see _leaves_from)
                grad = gradient_of(self._leaves_from, 0, n_leaves, self._late_leaves, True)
        if seen is not None:  # (the leaves that root does not depend on: no terms)
            unseen = ~seen[:n_leaves]
            grad[unseen] = 0.0 if start is None else start[unseen]
        return grad

    def _merge_picked(
        self,
        g: np.ndarray,
        incoming: Any,
        first: int,
        stop: int,
        merged: list[tuple[GatherStep, np.ndarray]],
        terms: np.ndarray,
        from_start: bool = False,
    ) -> None:
        """The gradients ``g`` of slots ``first:stop`` where a gather's
        alias picked one this call: its own terms and the terms of every
        alias that picked it, added from 0.0 in the eager pass's order
        (``term_rank``), where the alias and the entry are one node;
        ``from_start``: the leaves' (``first`` 0), from each one's start
        instead (:meth:`_run_plan`)."""
        key = (first, *((step.first, picks.tobytes()) for step, picks in merged))
        layout = self._merges.get(key)
        if layout is None:
            layout = self._merge_layout(incoming, first, stop, merged)
            if len(self._merges) >= 64:  # (picks that change call after call)
                self._merges.clear()
            self._merges[key] = layout
        if layout is not None:
            hit, matrix = layout
            if from_start:  # -0.0 + each leaf's start, then its terms
                matrix = np.concatenate(((self.n_terms + 1 + hit)[None, :], matrix))
                g[hit] = sum_rows(terms.take(matrix), -0.0)
            else:
                g[hit - first] = sum_rows(terms.take(matrix), 0.0)

    def _merge_layout(
        self,
        incoming: Any,
        first: int,
        stop: int,
        merged: list[tuple[GatherStep, np.ndarray]],
    ) -> tuple[np.ndarray, np.ndarray] | None:
        """For :meth:`_merge_picked`: the picked slots and the matrix of
        their terms (one column each, in order, padded), or None."""
        pad = self.n_terms
        targets, sources = [], []
        for step, picks in merged:
            at = (picks >= first) & (picks < stop)
            if not at.any():
                continue
            columns = step.incoming[:, at]
            held = columns != pad
            if not held.any():  # aliases with no terms (read, not used): nothing to merge
                continue
            targets.append(np.broadcast_to(picks[at], columns.shape)[held])
            sources.append(columns[held])
        if not targets:
            return None
        hit = np.unique(np.concatenate(targets))
        if type(incoming) is slice:
            own = (incoming.start + hit - first)[None, :]
        else:
            own = incoming[:, hit - first]
        held = own != pad
        every_target = np.concatenate([np.broadcast_to(hit, own.shape)[held], *targets])
        every_source = np.concatenate([own[held], *sources])
        order = np.lexsort((self.term_rank[every_source], every_target))
        every_target, every_source = every_target[order], every_source[order]
        column = np.searchsorted(hit, every_target)
        starts = np.searchsorted(every_target, hit)
        row = np.arange(len(every_target)) - starts[column]
        matrix = np.full((int(row.max()) + 1, len(hit)), pad, dtype=np.intp)
        matrix[row, column] = every_source
        return hit, matrix

    def _backward_plan(self) -> list[tuple[Any, Any, int, int, bool, int]]:
        """The steps with a backward pass, last first, with their incoming
        terms (a slice where each slot has one and they are in a row), their
        slots and whether a gather may add to them (``late``)."""
        picked = np.zeros(self.n, dtype=bool)
        for step in self.steps:
            if type(step) is GatherStep:
                picked[step.table] = True
        self._late = bool(picked.any())
        n_leaves = self.leaf_incoming.shape[1]
        self._late_leaves = bool(picked[:n_leaves].any())
        # the leaves' terms after a first row of their starts, which a
        # backward pass within a larger one writes after the padding term
        # (see _gradients): their sums from their running sums
        starts = np.arange(self.n_terms + 1, self.n_terms + 1 + n_leaves, dtype=np.intp)
        self._leaves_from = np.concatenate((starts[None, :], self.leaf_incoming))
        # every leaf adds one term at most (a parameter used once per call, a
        # model on one point): its running sum plus (0.0 + t) is plus t, so
        # the walk's order needs no starts (backward)
        self._sums_in_one = len(self.leaf_incoming) == 1 and not self._late_leaves
        plan = []
        for j, step in reversed(list(enumerate(self.steps))):
            if type(step) is GatherStep:
                first, stop = step.first, step.stop
            elif isinstance(step, Group):
                first, stop = step.start, step.stop
            else:
                continue
            incoming = step.incoming
            if len(incoming) == 1 and type(_as_slice(incoming[0])) is slice:
                incoming = _as_slice(incoming[0])
            plan.append((step, incoming, first, stop, bool(picked[first:stop].any()), j))
        self._direct = {}
        outer = [(i, e[0]) for i, e in enumerate(plan) if type(e[0]) is SumGroup and e[0].outer]
        for i, (step, incoming, first, _, late, _) in enumerate(plan):
            if type(incoming) is slice or late or type(step) is GatherStep:
                continue
            for k, producer in outer:
                direct = Direct.of(producer, incoming, first, i) if k < i else None
                if direct is not None:
                    self._direct[k] = direct
                    break
        return plan

    def _reach(self, root: int, call: Any) -> np.ndarray:
        """Which slots ``root`` depends on, for this call's picks."""
        seen = np.zeros(self.n, dtype=bool)
        seen[root] = True
        for step in reversed(self.steps):
            step.reach(seen, call)
        return seen

    def nbytes(self) -> int:
        """Bytes of the captured graph: index arrays and the value buffer."""
        return int(self.base.nbytes + self.live_slots.nbytes + sum(s.nbytes() for s in self.steps))


def _masked(
    g: Group, local: Any, contributions: np.ndarray, gout: np.ndarray, xs: np.ndarray
) -> np.ndarray:
    """An inf or nan gradient through a selecting op passes as PyTorch
    passes it (``walk._masked``)."""
    bad = ~np.isfinite(gout)
    masked = g.fn.masked
    if masked == ZERO_EXPONENT:
        blocked = bad & (xs[1] == 0.0)
        contributions[0, blocked] = 0.0
        return contributions
    if masked == DEAD_UNIT:
        dead = bad & (local[-1] == 0.0)
        contributions[:, dead] = 0.0
        return contributions
    assert masked == ZERO_MASKS
    for row, d in zip(contributions, local):
        row[bad & (d == 0.0)] = 0.0
    return contributions
