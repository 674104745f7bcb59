"""chainrule.compile and the fourth probe: an entry picked by an int
argument (``P[i]``) is, to user code, the entry itself. A Value of the
user's subclass (its attributes, its methods) is picked as itself, the int
pinned; the attributes that tell a node (``_prev``, ``_op``...), its
``.grad``, and writes to it are the entry's, and the function then runs
eagerly. The call that traced returns eager's number, never one computed
on compile's stand-in."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest

import chainrule
from chainrule import Value
from chainrule.compiler import CompileWarning

pytestmark = pytest.mark.usefixtures("trace_every_graph")


class Param(Value):
    """A parameter with an attribute of its own (a per-parameter scale)."""

    def __init__(self, data: float, scale: float) -> None:
        super().__init__(data)
        self.scale = scale

    def scaled(self) -> Value:
        return self * self.scale


def outcomes(
    make: Callable[[list[Any]], Callable[..., Value]],
    table: Callable[[], list[Any]],
    calls: list[tuple[Any, ...]],
) -> tuple[list[Any], list[Any], int]:
    """Eager and compiled runs of ``make(table())`` over ``calls``, each on
    fresh tables: per call the result's value, the picked entries' data and
    grads after ``backward()``; and how many CompileWarnings compiled gave."""

    def run(compiled: bool) -> tuple[list[Any], int]:
        entries = table()
        fn = make(entries)
        if compiled:
            fn = chainrule.compile(fn)
        seen = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for args in calls:
                for e in entries:
                    e.grad = 0.5
                out = fn(*args)
                out.backward()
                seen.append((out.data, [(e.data, e.grad) for e in entries]))
        return seen, sum(issubclass(w.category, CompileWarning) for w in caught)

    eager, _ = run(False)
    compiled, warned = run(True)
    return eager, compiled, warned


def params() -> list[Any]:
    return [Param(1.0, 2.0), Param(3.0, 4.0)]


def values() -> list[Any]:
    return [Value(1.0), Value(3.0)]


CALLS = [(0, 1.0), (1, 2.0), (0, 3.0), (1, 1.0)]


@pytest.mark.parametrize(
    ("make", "eager_first"),
    [
        (lambda P: lambda i, x: P[i] * P[i].scale * x, 2.0),
        (lambda P: lambda i, x: P[i].scaled() * x, 2.0),
        (lambda P: lambda i, x: P[i] * getattr(P[i], "scale", 1.0) * x, 2.0),
        (lambda P: lambda i, x: P[i] * (5.0 if hasattr(P[i], "scale") else 1.0) * x, 5.0),
        (lambda P: lambda i, x: P[i] * (3.0 if type(P[i]) is Param else 1.0) * x, 3.0),
    ],
    ids=["attribute", "method", "getattr", "hasattr", "type"],
)
def test_a_pick_of_the_users_subclass_is_the_entry_itself(make: Any, eager_first: float) -> None:
    eager, compiled, warned = outcomes(make, params, CALLS)
    assert eager[0][0] == eager_first
    assert compiled == eager and warned == 0


def test_a_subclass_attribute_changed_between_calls_is_read_again() -> None:
    P = params()
    fast = chainrule.compile(lambda i, x: P[i] * P[i].scale * x)
    assert fast(1, 1.0).data == 12.0
    P[1].scale = -1.0
    assert fast(1, 1.0).data == -3.0
    assert fast(0, 1.0).data == 2.0


@pytest.mark.parametrize(
    ("make", "eager_first"),
    [
        (lambda W: lambda i, x: W[i] * float(len(W[i]._prev) + 1) * x, 1.0),
        (lambda W: lambda i, x: W[i] * (2.0 if W[i]._op else 1.0) * x, 1.0),
        (lambda W: lambda i, x: W[i] * float(len(W[i]._children) + 1) * x, 1.0),
        (lambda W: lambda i, x: W[i] * float(len(W[i]._local or ()) + 1) * x, 1.0),
        (lambda W: lambda i, x: W[i] * float(len(W[i]._local_grads) + 1) * x, 1.0),
        (lambda W: lambda i, x: W[i] * float(len(W[i].__slots__)) * x, 4.0),
        (lambda W: lambda i, x: W[i] * float(len(W[i].label) + 1) * x, 1.0),
        (lambda W: lambda i, x: W[i] * (W[i].grad + 1.0) * x, 1.5),
    ],
    ids=["_prev", "_op", "_children", "_local", "_local_grads", "__slots__", "label", "grad"],
)
def test_the_node_attributes_of_a_pick_are_the_entrys(make: Any, eager_first: float) -> None:
    eager, compiled, warned = outcomes(make, values, CALLS)
    assert eager[0][0] == eager_first
    assert compiled == eager
    # which entry, so what it reads, depends on the int (a Value's __slots__ do not)
    assert warned >= 1 or make(values())(0, 1.0).data == 4.0


def test_writes_to_a_pick_reach_the_entry_and_every_pick_of_it() -> None:
    def make(W: list[Any]) -> Callable[..., Value]:
        def f(i: int, x: float) -> Value:
            a = W[i]
            W[0].data = 9.0  # the entry a picks when i == 0
            W[i].grad = 0.25
            return a * (a.grad + 1.0) * x

        return f

    eager, compiled, warned = outcomes(make, values, [(0, 2.0), (1, 1.0)])
    assert eager[0] == (22.5, [(9.0, 2.75), (3.0, 0.5)])
    assert compiled == eager and warned >= 1


def test_a_call_that_runs_eagerly_returns_eagers_number_on_its_first_call() -> None:
    a = Value(2.0)
    table = [a, a * 3.0]  # a node made outside: the function runs eagerly

    def f(i: int, x: float) -> Value:
        return table[i] * float(len(table[i]._prev) + 1) * x

    fast = chainrule.compile(f)
    with pytest.warns(CompileWarning):
        got = [fast(i, 1.0).data for i in (0, 0, 1)]
    assert got == [f(i, 1.0).data for i in (0, 0, 1)] == [2.0, 2.0, 18.0]
