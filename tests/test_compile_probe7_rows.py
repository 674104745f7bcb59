"""chainrule.compile and the seventh probe's rows and identity: a row
``R[i]`` picked by an int argument is handed back as a list standing for
the user's row; identity asks about the user's row (and the function runs
eagerly); ``copy`` of a pick copies the
entry (two picks of one entry: one copy); ``gc.get_referrers`` and the like
answer for the entry."""

from __future__ import annotations

import copy
import gc
import warnings
from collections.abc import Callable
from typing import Any

import pytest

import chainrule
from chainrule import Value
from chainrule.compiler import CompileWarning

pytestmark = pytest.mark.usefixtures("trace_every_graph")


def calls(fn: Callable[..., Any], args: list[tuple[Any, ...]]) -> tuple[list[float], int]:
    """``fn(*a).data`` for each ``a``, and how many CompileWarnings they gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outs = [fn(*a).data for a in args]
    return outs, sum(issubclass(w.category, CompileWarning) for w in caught)


def rows() -> list[list[Value]]:
    return [[Value(1.0), Value(2.0)], [Value(3.0), Value(4.0)]]


PAIRS = [(0, 0, 1.0), (0, 1, 1.0), (1, 1, 2.0), (1, 0, 2.0), (0, 0, 3.0)]


def test_identity_of_rows_picked_by_ints_is_the_users_rows() -> None:
    R = rows()
    T = [tuple(r) for r in rows()]

    def is_(i: int, j: int, x: float) -> Value:
        return sum(R[i]) * x + (10.0 if R[i] is R[j] else 0.0)

    def ids(i: int, j: int, x: float) -> Value:
        return sum(R[i]) * x + float(len({id(R[i]), id(R[j])}))

    def own(i: int, j: int, x: float) -> Value:
        return sum(R[i]) * x + float(id(R[i]) == id(R[0])) + 2.0 * float(R[j] is R[1])

    def deny(i: int, j: int, x: float) -> Value:
        import operator

        same = operator.is_(T[i], T[j]) + 2 * (object.__eq__(R[i], R[j]) is True)
        return sum(T[i]) * x + float(same) + 4.0 * float(object.__hash__(T[i]) == hash(T[0]))

    for fn in (is_, ids, own, deny):
        eager = [fn(*a).data for a in PAIRS]
        outs, warned = calls(chainrule.compile(fn, budget=False), PAIRS)
        assert outs == eager, fn.__name__
        assert warned >= 1, fn.__name__


def test_two_picks_of_one_row_changed_through_one_run_eagerly() -> None:
    """Documented sharp bit: the call that traces reads the row through the
    other pick as it was; the caller's row is changed as eagerly, and the
    function runs eagerly from the next call on."""
    R = rows()

    def append(i: int, j: int, x: float) -> Value:
        a = R[i]
        b = R[j]
        b.append(Value(x))
        return sum(a) * float(len(a))

    def put(i: int, j: int, x: float) -> Value:
        a = R[i]
        a[0] = Value(x)
        return sum(R[j])

    for fn in (append, put):
        R[:] = rows()
        eager = [fn(0, 0, 5.0).data, fn(1, 1, 2.0).data]
        eager_rows = [[v.data for v in r] for r in R]
        R[:] = rows()
        outs, warned = calls(chainrule.compile(fn, budget=False), [(0, 0, 5.0), (1, 1, 2.0)])
        assert (outs[1], warned) == (eager[1], 1), fn.__name__
        assert [[v.data for v in r] for r in R] == eager_rows


def test_two_picks_of_one_row_replay_one_trace() -> None:
    R = rows()

    def f(i: int, j: int, x: float) -> Value:
        return sum(R[i]) * x + R[j][1]

    fast = chainrule.compile(f, budget=False)
    eager = [f(*a).data for a in PAIRS]
    outs, warned = calls(fast, PAIRS)
    assert (outs, warned, fast.traces) == (eager, 0, 1)


def test_deepcopy_of_two_picks_of_one_entry_makes_one_copy() -> None:
    W = [Value(1.0), Value(2.0)]
    R = rows()

    def entries(i: int, j: int, x: float) -> Value:
        c = copy.deepcopy([W[i], W[j]])
        return W[0] * x + float(c[0] is c[1]) + 2.0 * float(c[0].data == W[i].data)

    def shallow(i: int, j: int, x: float) -> Value:
        c = [copy.copy(W[i]), copy.copy(W[j])]
        return W[0] * x + c[0].data + c[1].data + float(c[0] is W[i])

    def rows_(i: int, j: int, x: float) -> Value:
        c = copy.deepcopy([R[i], R[j]])
        return W[0] * x + 2.0 * float(c[0][0] is c[1][0])

    for fn in (entries, shallow, rows_):
        eager = [fn(*a).data for a in PAIRS]
        outs, warned = calls(chainrule.compile(fn, budget=False), PAIRS)
        assert outs == eager, fn.__name__
        assert warned >= 1, fn.__name__


def test_gc_referrers_of_a_pick_are_the_entrys() -> None:
    W = [Value(1.0), Value(2.0)]

    def referrers(i: int, x: float) -> Value:
        return W[0] * x + float(any(r is W for r in gc.get_referrers(W[i])))

    def referents(i: int, x: float) -> Value:
        return W[0] * x + float(len(gc.get_referents(W[i])))

    args = [(0, 1.0), (1, 2.0), (0, 3.0)]
    for fn in (referrers, referents):
        eager = [fn(*a).data for a in args]
        outs, warned = calls(chainrule.compile(fn, budget=False), args)
        assert outs == eager, fn.__name__
        assert warned >= 1, fn.__name__
