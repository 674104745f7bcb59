"""chainrule.compile and the sixth probe's outputs: a container ``fn``
returns that existed before the call (a global list of parameters, a row
``R[i]`` picked by an int argument, a list passed as an argument) is that
very object, as eagerly: a replay hands back the object itself where the
guards walk it, else the function runs eagerly with a CompileWarning. A
row picked by an int argument that ``fn`` changes in place is the caller's
row changed, as eagerly."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest

import chainrule
from chainrule import Value
from chainrule.compiler import CompileWarning

pytestmark = pytest.mark.usefixtures("trace_every_graph")


def calls(fn: Callable[..., Any], args: list[tuple[Any, ...]]) -> tuple[list[Any], int]:
    """``fn(*a)`` for each ``a``, and how many CompileWarnings they gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outs = [fn(*a) for a in args]
    return outs, sum(issubclass(w.category, CompileWarning) for w in caught)


def test_a_returned_global_list_is_that_list_and_replays() -> None:
    W = [Value(0.5), Value(1.5)]
    T = (Value(2.0), Value(3.0))

    def f(x: float) -> tuple[list[Value], tuple[Value, Value], Value]:
        return W, T, W[0] * x

    fast = chainrule.compile(f)
    outs, warned = calls(fast, [(2.0,), (3.0,), (4.0,)])
    assert [(o[0] is W, o[1] is T, o[2].data) for o in outs] == [
        (True, True, 1.0),
        (True, True, 1.5),
        (True, True, 2.0),
    ]
    assert (warned, fast.traces, fast.hits) == (0, 1, 2)
    outs[-1][0][0] = Value(100.0)  # the caller's list, as eagerly
    assert W[0].data == 100.0
    assert fast(1.0)[2].data == 100.0  # (W changed: traced again)


def test_a_returned_row_picked_by_an_int_is_the_row_itself() -> None:
    R = [[Value(1.0), Value(2.0)], [Value(3.0), Value(4.0)], [Value(5.0), Value(6.0)]]
    fast = chainrule.compile(lambda i: R[i])
    picks = [0, 1, 2, -1, 1]
    outs, warned = calls(fast, [(i,) for i in picks])
    assert [o is R[i] for o, i in zip(outs, picks)] == [True] * 5
    assert (warned, fast.traces, fast.hits) == (0, 1, 4)
    fast(1)[0] = Value(100.0)  # eagerly this edits R[1]
    assert R[1][0].data == 100.0


def test_a_returned_argument_list_runs_eagerly_as_that_list() -> None:
    fast = chainrule.compile(lambda xs, x: (xs, xs[0] * x))
    lists = [[Value(1.0), Value(2.0)] for _ in range(3)]
    outs, warned = calls(fast, [(xs, 2.0) for xs in lists])
    assert [(o[0] is xs, o[1].data) for o, xs in zip(outs, lists)] == [(True, 2.0)] * 3
    assert warned == 1 and "a list among its arguments" in (fast.eager_reason or "")


def test_a_returned_row_of_an_argument_runs_eagerly_as_that_row() -> None:
    picked = chainrule.compile(lambda rows, i: rows[i])
    R = [[Value(1.0), Value(2.0)], [Value(3.0), Value(4.0)]]
    outs, warned = calls(picked, [(R, 1), (R, 0)])
    assert (outs[0] is R[1], outs[1] is R[0], warned) == (True, True, 1)
    assert "a row picked by an int argument from a list passed" in (picked.eager_reason or "")


def test_a_returned_row_of_a_list_made_inside_replays() -> None:
    """Eagerly a new list at each call too: built anew at each replay."""
    W = [Value(0.5), Value(-1.5)]

    def made(i: int) -> list[Value]:
        rows = [[W[0] * 2.0, W[1]], [W[1], W[0] + 1.0]]
        return rows[i]

    eager = [[v.data for v in made(i)] for i in (0, 1, 0)]
    fast = chainrule.compile(made)
    outs, warned = calls(fast, [(0,), (1,), (0,)])
    assert [[v.data for v in o] for o in outs] == eager == [[1.0, -1.5], [-1.5, 1.5], [1.0, -1.5]]
    assert outs[1][0] is W[1] and outs[0] is not outs[2]
    assert (warned, fast.traces, fast.hits) == (0, 1, 2)


def grow(R: list[list[Value]], W: list[Value]) -> Callable[[int, float], Value]:
    def f(i: int, v: float) -> Value:
        row = R[i]
        row.append(Value(v) * row[0])
        row[1] = W[0]
        return row[0] * 1.0

    return f


def test_a_row_changed_in_place_is_the_callers_row_changed() -> None:
    """``row = R[i]; row.append(...); row[1] = W[0]``: eagerly the caller's
    row changes; compiled, the traced call changes it as eagerly (the node
    appended reaches the entry it was made from), and the function runs
    eagerly from then on."""

    def run(compiled: bool) -> tuple[list[Any], int]:
        R = [[Value(1.0), Value(2.0)], [Value(3.0), Value(4.0)]]
        W = [Value(0.5)]
        old = [r[0] for r in R]
        fn = chainrule.compile(grow(R, W)) if compiled else grow(R, W)
        outs, warned = calls(fn, [(1, 3.0), (0, 2.0), (1, 5.0)])
        R[1][2].backward()
        seen = [o.data for o in outs]
        seen += [[v.data for v in r] for r in R]
        seen += [R[1][1] is W[0], R[0][1] is W[0], [v.grad for v in old]]
        return seen, warned

    eager, _ = run(False)
    compiled, warned = run(True)
    assert (
        compiled
        == eager
        == [
            3.0,
            1.0,
            3.0,
            [1.0, 0.5, 2.0],
            [3.0, 0.5, 9.0, 15.0],
            True,
            True,
            [0.0, 3.0],
        ]
    )
    assert warned == 1


def test_a_row_changed_before_fn_raises_is_changed_as_eagerly() -> None:
    R = [[Value(1.0)], [Value(3.0)]]

    def f(i: int) -> Value:
        R[i].append(Value(7.0))
        raise KeyError("stop")

    fast = chainrule.compile(f)
    with pytest.raises(KeyError, match="stop"):
        fast(1)
    assert [[v.data for v in r] for r in R] == [[1.0], [3.0, 7.0]]
