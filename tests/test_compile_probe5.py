"""chainrule.compile and the fifth probe: what user code can ask of the
objects a trace hands it (a node made inside fn, a pick ``W[i]``, a float
or int argument) is answered as eagerly: a graph walk it asks for
(``gradients()``) is of eager's graph, ``__slots__``, ``sys.getsizeof``,
``del``, ``pickle`` and the names in error messages are eager's."""

from __future__ import annotations

import pickle
import sys
import warnings
from collections.abc import Callable
from typing import Any

import pytest

import chainrule
from chainrule import Value
from chainrule.compiler import CompileWarning

pytestmark = pytest.mark.usefixtures("trace_every_graph")


def first_calls(
    make: Callable[[list[Value]], Callable[..., Any]], calls: list[tuple[Any, ...]]
) -> tuple[list[Any], list[Any], int]:
    """Eager and compiled runs of ``make(W)`` over ``calls``, each on fresh
    parameters ``W``: per call the result's value (or the exception's type
    and text) and the parameters' data and grads after ``backward()``; and
    how many CompileWarnings compiled gave."""

    def run(compiled: bool) -> tuple[list[Any], int]:
        W = [Value(0.5), Value(-1.5), Value(2.0)]
        fn = make(W)
        if compiled:
            fn = chainrule.compile(fn)
        seen: list[Any] = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for args in calls:
                for w in W:
                    w.grad = 0.0
                try:
                    out = fn(*args)
                except Exception as e:
                    seen.append((type(e).__name__, str(e)))
                    continue
                out.backward()
                seen.append((out.data, [(w.data, getattr(w, "grad", None)) for w in W]))
        return seen, sum(issubclass(w.category, CompileWarning) for w in caught)

    eager, _ = run(False)
    compiled, warned = run(True)
    return eager, compiled, warned


def test_gradients_inside_fn_walk_eagers_graph_with_picks() -> None:
    """``gradients()`` on a graph holding ``W[i]``: on the call that traces,
    the walk is of eager's graph (the pick is the entry), so the call gives
    eager's numbers; the function then runs eagerly."""

    def wrt_pick(W: list[Value]) -> Callable[..., Value]:
        def f(i: int, x: float) -> Value:
            (g,) = chainrule.gradients(W[i] * x, [W[i]])
            return W[1] * g

        return f

    def wrt_entry(W: list[Value]) -> Callable[..., Value]:
        def f(i: int, x: float) -> Value:
            (g,) = chainrule.gradients(W[i] * W[0] * x, [W[0]])
            return W[1] * g

        return f

    calls = [(0, 1.0), (1, 2.0), (0, 3.0)]
    eager, compiled, warned = first_calls(wrt_pick, calls)
    assert eager[0][0] == -1.5 and compiled == eager and warned >= 1
    eager, compiled, warned = first_calls(wrt_entry, calls)
    assert eager[0][0] == -1.5 and eager[1][0] == -1.5 * (-1.5 * 2.0)
    assert compiled == eager and warned >= 1


def test_a_graph_walk_inside_fn_runs_eagerly_with_eagers_count() -> None:
    from chainrule.value.walk import topological_order

    def count(W: list[Value]) -> Callable[..., Value]:
        def f(i: int, x: float) -> Value:
            loss = W[i] * W[0] * x
            nodes, leaves = topological_order(loss)
            return loss * float(len(nodes) + 10 * len(leaves))

        return f

    eager, compiled, warned = first_calls(count, [(0, 1.0), (2, 1.0)])
    # two products; the leaves W[0] (and W[i]) and x's
    assert [e[0] for e in eager] == [0.25 * 22.0, 1.0 * 32.0]
    assert compiled == eager and warned >= 1


def test_slots_of_what_a_trace_hands_user_code_are_eagers() -> None:
    def slots(W: list[Value]) -> Callable[..., Value]:
        def f(i: int, x: float) -> Value:
            n = W[0] * x
            k = float(len(n.__slots__)) + float(len(W[i].__slots__))
            for obj in (x, i, W[1].data, W[i]):
                k += 10.0 * hasattr(obj, "__slots__")
            return n * k + 100.0 * hasattr(W[i], "picked")

        return f

    eager, compiled, warned = first_calls(slots, [(1, 2.0), (2, 3.0)])
    assert eager[0][0] == 2.0 * 0.5 * (4.0 + 4.0 + 10.0)
    assert compiled == eager and warned >= 1  # (asking a pick for "picked")


def test_sizes_are_of_the_users_numbers_and_values() -> None:
    def sizes(W: list[Value]) -> Callable[..., Value]:
        def f(i: int, x: float) -> Value:
            total = sys.getsizeof(x) + sys.getsizeof(i) + sys.getsizeof(W[2].data)
            total += sys.getsizeof(W[i]) + x.__sizeof__() + i.__sizeof__() + W[i].__sizeof__()
            return W[0] * float(total)

        return f

    eager, compiled, warned = first_calls(sizes, [(1, 1.0), (2, 2.0)])
    expected = 3 * sys.getsizeof(1.0) + sys.getsizeof(1) + sys.getsizeof(Value(1.0))
    expected += (1).__sizeof__() + Value(1.0).__sizeof__()
    assert eager[0][0] == 0.5 * expected
    assert compiled == eager and warned == 0


@pytest.mark.parametrize("what", ["grad", "data", "pick grad"])
def test_del_of_a_parameters_attribute_inside_fn_is_eagers(what: str) -> None:
    def deleting(W: list[Value]) -> Callable[..., Value]:
        def f(i: int, x: float) -> Value:
            if what == "grad":
                del W[0].grad
            elif what == "data":
                del W[0].data
            else:
                del W[i].grad
            return W[1] * x

        return f

    def state(W: list[Value]) -> list[tuple[bool, bool]]:
        return [(hasattr(w, "data"), hasattr(w, "grad")) for w in W]

    results = []
    for compiled in (False, True):
        W = [Value(0.5), Value(-1.5), Value(2.0)]
        fn: Callable[..., Value] = deleting(W)
        if compiled:
            fn = chainrule.compile(fn)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CompileWarning)
            out = fn(0, 2.0)
        results.append((out.data, state(W)))
    assert results[0] == (-3.0, [(what != "data", what == "data"), (True, True), (True, True)])
    assert results[1] == results[0]


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda W, i, x: list(W[i]), "'Value' object is not iterable"),
        (lambda W, i, x: W[i][0], "'Value' object is not subscriptable"),
        (lambda W, i, x: i(3), "'int' object is not callable"),
        (lambda W, i, x: x(3), "'float' object is not callable"),
    ],
    ids=["iterate a pick", "subscript a pick", "call an int", "call a float"],
)
def test_error_messages_name_the_users_types(call: Any, message: str) -> None:
    W = [Value(0.5), Value(-1.5)]
    fast = chainrule.compile(lambda i, x: call(W, i, x))
    for f in (lambda i, x: call(W, i, x), fast):
        with pytest.raises(TypeError) as raised:
            f(1, 2.0)
        assert str(raised.value) == message


def test_pickle_of_a_node_inside_fn_is_eagers_bytes() -> None:
    w = Value(0.5)
    dumped: list[bytes] = []

    def f(x: float) -> Value:
        n = w * x
        dumped.append(pickle.dumps(n))
        return n * 2.0

    f(2.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompileWarning)
        assert chainrule.compile(f)(2.0).data == 2.0
    assert dumped[1] == dumped[0]
