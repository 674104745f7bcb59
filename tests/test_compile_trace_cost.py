"""What makes a trace cheaper must not change a number: Value's ``+`` and
``*`` run as slot-reading copies of the engine's while a trace runs
(``chainrule.compiler.slotreads``), and a trace's record lets go of its
graph when it is done (``Record.forget``). Eager's numbers, the user's own
methods and subclasses as eagerly, and Value's namespace as before."""

from __future__ import annotations

import gc
import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import chainrule
from chainrule import Value
from chainrule.compiler import CompileWarning, slotreads
from chainrule.compiler.sources import STANDS_FOR
from chainrule.value import engine

pytestmark = pytest.mark.usefixtures("trace_every_graph")

EAGER_ADD, EAGER_MUL = engine.Value.__dict__["__add__"], engine.Value.__dict__["__mul__"]


@pytest.fixture
def value_namespace() -> Iterator[None]:
    """Value's ``+`` and ``*`` (and reflections) put back after a test that patches them."""
    names = ("__add__", "__radd__", "__mul__", "__rmul__")
    kept = {n: Value.__dict__[n] for n in names}
    yield
    for n, f in kept.items():
        setattr(Value, n, f)


def _both(f: Callable[..., Value], params: list[Value], *calls: tuple[Any, ...]) -> list[Any]:
    """Each call eagerly, then compiled (one compiled function for all):
    the number and the parameters' gradients, eager's beside compiled's.
    The compiled calls after the first are replays."""
    fast = chainrule.compile(f, budget=False)
    seen = []
    for args in calls:
        for g in (f, fast):
            for p in params:
                p.grad = 0.0
            out = g(*args)
            out.backward()
            seen.append((out.data, *(p.grad for p in params)))
    assert (fast.traces, fast.hits) == (1, len(calls) - 1)
    return seen


def test_a_trace_runs_the_slot_reading_copies_and_puts_the_engines_back() -> None:
    during: list[Any] = []
    w = Value(0.5)

    def f(x: float) -> Value:
        during.append((Value.__dict__["__add__"], Value.__dict__["__rmul__"]))
        return w * x + 1.0

    fast = chainrule.compile(f, budget=False)
    out = fast(3.0)
    copies = slotreads.operators()
    assert during == [(copies["__add__"], copies["__rmul__"])]
    assert copies["__add__"] is not EAGER_ADD and STANDS_FOR[copies["__add__"]] is EAGER_ADD
    assert STANDS_FOR[copies["__mul__"]] is EAGER_MUL
    assert copies["__add__"].__code__.co_filename == engine.__file__  # (the engine's reads)
    assert Value.__dict__["__add__"] is EAGER_ADD and Value.__dict__["__radd__"] is EAGER_ADD
    assert Value.__dict__["__mul__"] is EAGER_MUL and Value.__dict__["__rmul__"] is EAGER_MUL
    assert out.data == 2.5
    out.backward()
    assert w.grad == 3.0


def test_the_copies_give_eagers_numbers_bit_for_bit_on_random_graphs() -> None:
    rng = random.Random(7)
    params = [Value(rng.uniform(-2, 2)) for _ in range(6)]

    def f(xs: list[float]) -> Value:
        h = [p * x + q for p, x, q in zip(params, xs, reversed(params))]
        s = sum(a * b for a, b in zip(h, h[1:] + h[:1]))
        return 0.5 * s + 1 + (s * s).relu() * h[0]

    calls = [([rng.uniform(-3, 3) for _ in range(6)],) for _ in range(5)]
    seen = _both(f, params, *calls)
    assert seen[0::2] == seen[1::2]
    assert len({s[0] for s in seen}) == 5


def test_a_subclass_with_its_own_data_is_read_as_eagerly() -> None:
    class Doubled(Value):
        """A user's Value whose ``data`` reads twice its number."""

        __slots__ = ()

        @property  # type: ignore[override]
        def data(self) -> float:
            return 2.0 * Value.__dict__["data"].__get__(self)

        @data.setter
        def data(self, x: float) -> None:
            Value.__dict__["data"].__set__(self, x)

    w, d = Value(0.5), Doubled(3.0)

    def f(x: float) -> Value:
        return w * x + d * w

    fast = chainrule.compile(f, budget=False)
    with pytest.warns(CompileWarning, match="replaying the trace does not give the values"):
        got = [fast(x).data for x in (1.0, 2.0, 2.0)]  # (as before the copies: eagerly)
    assert got == [f(x).data for x in (1.0, 2.0, 2.0)] == [3.5, 4.0, 4.0]  # d reads 6.0


def test_a_user_patched_add_is_kept_during_and_after_a_trace(value_namespace: None) -> None:
    def shifted(self: Value, other: Any) -> Value:
        return EAGER_ADD(EAGER_ADD(self, other), 100.0)

    Value.__add__ = Value.__radd__ = shifted  # type: ignore[method-assign,assignment]
    w = Value(0.5)

    def f(x: float) -> Value:
        return w * x + 1.0

    assert slotreads.operators().keys() == {"__mul__", "__rmul__"}  # (not the user's +)
    seen = _both(f, [w], (3.0,), (4.0,), (5.0,))
    assert seen[0::2] == seen[1::2] == [(102.5, 3.0), (103.0, 4.0), (103.5, 5.0)]
    assert Value.__dict__["__add__"] is shifted and Value.__dict__["__radd__"] is shifted


def test_add_patched_between_calls_is_a_new_graph(value_namespace: None) -> None:
    w = Value(0.5)

    def f(x: float) -> Value:
        return w * x + 1.0

    fast = chainrule.compile(f, budget=False)
    assert fast(3.0).data == 2.5 and fast(3.0).data == 2.5
    assert fast.hits == 1  # (the trace's own swap is no change of Value's)
    Value.__add__ = lambda self, other: EAGER_ADD(EAGER_ADD(self, other), 100.0)  # type: ignore[method-assign]
    out = fast(3.0)
    assert out.data == f(3.0).data == 102.5
    out.backward()
    assert w.grad == 3.0


def _values_alive() -> int:
    return sum(1 for o in gc.get_objects() if type(o) is Value)


@pytest.mark.parametrize("with_int", [False, True])
def test_a_traced_graph_is_freed_without_the_cyclic_collector(with_int: bool) -> None:
    w = [Value(0.01 * k) for k in range(40)]

    def f(x: float, k: int = 0) -> Value:
        h = [wi * x + wi for wi in w]
        for _ in range(20):
            h = [a * b + 0.5 for a, b in zip(h, h[1:] + h[:1])]
        return sum(h) * w[k]

    fast = chainrule.compile(f, budget=False)
    gc.collect()
    was = gc.isenabled()
    gc.disable()
    try:
        before = _values_alive()
        out = fast(0.5, 3) if with_int else fast(0.5)  # (an int: a SymInt holds the record)
        assert fast.traces == 1
        del out
        after = _values_alive()
    finally:
        if was:
            gc.enable()
    # the trace made about 1,700 Values; the kept program holds none of them
    assert after - before < 20
