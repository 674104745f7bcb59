"""chainrule.compile and Python's operator dispatch (the sixth probe): a
user's subclass of Value that overrides a reflected operator
(``__rmul__``...) or a comparison is asked first when it is the right
operand of a plain Value, as eagerly, also where compile's own classes
stand in for the plain Value: a node made while tracing, a pick
``R[i]``, a compiled call's output."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest

import chainrule
from chainrule import Value
from chainrule.compiler import CompileWarning

pytestmark = pytest.mark.usefixtures("trace_every_graph")


class Doubling(Value):
    """Its reflected operators double what Value gives; its comparisons
    ask a scaled number (so Python's choice of method shows)."""

    __slots__ = ()

    def __rmul__(self, other: Any) -> Value:
        return Value.__mul__(self, other) * 2.0

    def __radd__(self, other: Any) -> Any:
        if isinstance(other, Value) and other.data < 0.0:
            return NotImplemented  # Python then asks the left operand's __add__
        return Value.__add__(self, other) * 2.0

    def __rtruediv__(self, other: Any) -> Value:
        return Value.__truediv__(other, self) * 2.0

    def __rpow__(self, other: Any) -> Value:
        return Value.__pow__(other, self) * 2.0

    def __gt__(self, other: Any) -> bool:
        return bool(self.data * 10.0 > other.data)


class OwnMul(Value):
    """Overrides its own ``__mul__`` (the left operand's, asked first anyway)."""

    __slots__ = ()

    def __mul__(self, other: Any) -> Value:
        return Value.__mul__(self, other) + 100.0


def runs(
    make: Callable[[list[Value], Value], Callable[..., Any]],
    calls: list[tuple[Any, ...]],
    cls: type[Value] = Doubling,
) -> tuple[list[Any], list[Any]]:
    """Eager and compiled runs of ``make(W, m)`` over ``calls`` (``m`` of
    ``cls``), each on fresh Values: per call the result's value, and the
    gradients of ``W`` and ``m`` after ``backward()``."""

    def run(compiled: bool) -> list[Any]:
        W, m = [Value(0.5), Value(-1.5), Value(2.0)], cls(3.0)
        fn = make(W, m)
        if compiled:
            fn = chainrule.compile(fn)
        seen: list[Any] = []
        with warnings.catch_warnings():
            warnings.simplefilter("error", CompileWarning)  # traced and replayed
            for args in calls:
                for v in (*W, m):
                    v.grad = 0.0
                out = fn(*args)
                out.backward()
                seen.append((out.data, [v.grad for v in (*W, m)]))
        return seen

    return run(False), run(True)


CALLS = [(2.0, 0), (3.0, 1), (-4.0, 2), (10.0, 0)]


@pytest.mark.parametrize(
    "expression",
    [
        lambda node, m: node * m,  # m.__rmul__ first
        lambda node, m: node + m,  # m.__radd__ first (NotImplemented below 0: node.__add__)
        lambda node, m: node / m,  # m.__rtruediv__ first (Value's / swapped while tracing)
        lambda node, m: node**m,  # m.__rpow__ first
        lambda node, m: node * 2.0 if node < m else node * 3.0,  # m.__gt__ first
        lambda node, m: (node - m) * m,  # node - m is node + (-m): Value's
    ],
    ids=["mul", "add", "truediv", "pow", "lt", "sub"],
)
def test_node_made_in_fn_asks_users_subclass_first(
    expression: Callable[[Value, Value], Value],
) -> None:
    """``node <op> m``, ``node`` made inside fn: eagerly a plain Value, so
    ``m``'s reflected method is asked first; so is it compiled (values and
    gradients, the call that traces and the replays)."""
    eager, compiled = runs(lambda W, m: lambda x, i: expression(W[0] * x, m), CALLS)
    assert repr(compiled) == repr(eager)  # (bit for bit, nan as nan)


def test_node_times_subclass_is_eagers() -> None:
    """The repro: ``(w * x) * m`` is 6.0 eagerly (``m.__rmul__``), not 3.0."""
    eager, compiled = runs(lambda W, m: lambda x, i: (W[0] * x) * m, [(2.0, 0), (3.0, 1)])
    assert [e[0] for e in eager] == [6.0, 9.0]
    assert repr(compiled) == repr(eager)  # (bit for bit, nan as nan)


def test_pick_asks_users_subclass_first() -> None:
    """``R[i] * m``, ``R[i] < m``, ``R[i] + m`` with ``R[i]`` a gather's pick
    (a stand-in while tracing): eager's values and gradients."""
    eager, compiled = runs(
        lambda W, m: lambda x, i: (W[i] * m) + (W[i] + m) * x + (x if W[i] < m else -x), CALLS
    )
    assert eager[0][0] == (0.5 * 3.0) * 2.0 + (0.5 + 3.0) * 2.0 * 2.0 + 2.0
    assert repr(compiled) == repr(eager)  # (bit for bit, nan as nan)


def test_pick_equal_asks_users_subclass_first() -> None:
    """``R[i] == m``: eagerly ``m.__eq__`` is asked first (a subclass of the
    entry's class); so is it for the stand-in of the pick."""

    class Near(Value):
        __slots__ = ()
        __hash__ = Value.__hash__

        def __eq__(self, other: object) -> bool:
            return isinstance(other, Value) and abs(self.data - other.data) < 1.5

    def make(W: list[Value], m: Value) -> Callable[..., Any]:
        return lambda x, i: W[i] * x if W[i] == m else W[i] * -x

    calls = [(2.0, 2), (2.0, 0), (3.0, 2)]
    eager, compiled = runs(make, calls, cls=Near)
    assert [e[0] for e in eager] == [4.0, -1.0, 6.0]
    assert repr(compiled) == repr(eager)  # (bit for bit, nan as nan)


def test_subclass_argument_asks_first() -> None:
    """The subclass's Value passed as an argument: ``(w * x) * v``."""

    def run(compiled: bool) -> list[float]:
        w = Value(0.5)

        def f(v: Value, x: float) -> Value:
            return (w * x) * v

        g = chainrule.compile(f) if compiled else f
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return [g(Doubling(3.0), x).data for x in (2.0, 3.0)]

    assert run(False) == [6.0, 9.0]
    assert run(True) == run(False)


def test_compiled_output_asks_users_subclass_first() -> None:
    """A compiled call's output times the subclass's Value outside fn:
    ``fast(2.0) * m`` is ``m.__rmul__``'s, 6.0, with eager's gradients."""
    w, m = Value(0.5), Doubling(3.0)
    fast = chainrule.compile(lambda x: w * x)
    for _ in range(2):  # the call that traces, then a replay
        w.grad = m.grad = 0.0
        out = fast(2.0) * m
        out.backward()
        assert (out.data, w.grad, m.grad) == (6.0, 12.0, 2.0)
        assert (fast(20.0) < m, fast(80.0) < m) == (True, False)  # m.__gt__: 30.0 > 10.0


def test_own_operator_of_left_subclass_still_used() -> None:
    """``m * node``: the left operand's own ``__mul__`` is asked first, as
    eagerly (compile's classes add nothing there)."""
    eager, compiled = runs(lambda W, m: lambda x, i: m * (W[0] * x), CALLS, cls=OwnMul)
    assert eager[0][0] == 3.0 * 1.0 + 100.0
    assert repr(compiled) == repr(eager)  # (bit for bit, nan as nan)
