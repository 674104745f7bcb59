"""chainrule.compile's cache: what a key is made of, threads, and the
eager fallback when tracing does not pay.

Issue 25 items 1-3: NumPy scalars, bools and 0-d arrays as arguments
(never keyed by the ``id()`` of a freeable object), one compiled function
called from 4 threads with a tiny switch interval, and another thread's
operations entering a trace.
"""

from __future__ import annotations

import gc
import sys
import threading
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import chainrule
from chainrule import Value
from chainrule.compiler import CompileWarning

pytestmark = pytest.mark.usefixtures("trace_every_graph")


@pytest.fixture
def tiny_switch_interval() -> Iterator[None]:
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(old)


# --------------------------------------------------------------------------
# Item 1: NumPy scalars are inputs, never id()
# --------------------------------------------------------------------------


def test_numpy_float_arguments_are_keyed_by_their_value() -> None:
    """NumPy reads a float64 whole (``np.exp(x)``, ``x.dtype``): the
    function sees the scalar itself, and each value is a trace of its own."""
    w = Value(0.5)
    f = chainrule.compile(lambda x: w * x)
    xs = list(np.linspace(-2.0, 2.0, 3)) * 10
    got = [f(x).data for x in xs]  # each element a fresh np.float64, freed after the call
    assert got == [0.5 * float(x) for x in xs]
    assert f.traces == 3


def test_numpy_scalars_whose_ids_are_reused_never_give_a_stale_number() -> None:
    """The exact reproduction of the issue: a freed object's id is reused."""
    w = Value(0.5)
    f = chainrule.compile(lambda x: w * x)
    for kind in (np.float64, np.float32, np.int64, np.int32):
        for value in (1, 2, 0, 3):
            x = kind(value)
            expected = (w * x).data
            assert f(x).data == expected, (kind, value)
            del x
            gc.collect()


def test_zero_d_arrays_and_numpy_bools_are_keyed_by_their_value() -> None:
    w = Value(2.0)
    f = chainrule.compile(lambda x: w * float(x))
    for value in (1.5, 2.5, 1.5, -0.0):
        assert f(np.array(value)).data == 2.0 * value
    g = chainrule.compile(lambda flag: w * 3.0 if flag else w * -1.0)
    assert [g(np.bool_(b)).data for b in (True, False, True)] == [6.0, -2.0, 6.0]
    assert [g(b).data for b in (True, False)] == [6.0, -2.0]


def test_other_objects_are_held_so_their_identity_cannot_be_reused() -> None:
    w = Value(1.0)

    class Box:
        def __init__(self, x: float) -> None:
            self.x = x

    f = chainrule.compile(lambda box: w * box.x)
    for x in (1.0, 2.0, 3.0, 4.0):
        assert f(Box(x)).data == x  # a fresh object each time: never a stale trace
        gc.collect()


numpy_scalar = st.one_of(
    st.floats(-1e3, 1e3, allow_nan=False).map(np.float64),
    st.floats(-1e3, 1e3, allow_nan=False, width=32).map(np.float32),
    st.integers(-5, 5).map(np.int64),
    st.integers(-5, 5).map(np.int8),
    st.booleans().map(np.bool_),
    st.booleans(),
    st.floats(-1e3, 1e3, allow_nan=False).map(np.array),
    st.integers(-5, 5).map(np.array),
    st.booleans().map(np.array),
)


@given(st.lists(numpy_scalar, min_size=1, max_size=30))
def test_numpy_scalar_bool_and_0d_arguments_replay_as_eager(xs: list[Any]) -> None:
    w = Value(0.75)

    def f(x: Any) -> Value:
        y = w * (x * 1.0)  # NumPy arithmetic, then the engine converts the number
        return y * 2.0 if x else y - 1.0  # a branch on the argument

    compiled = chainrule.compile(f, max_traces=64)
    for x in xs:
        expected = f(x).data
        got = compiled(x).data
        assert got == expected or (got != got and expected != expected), (x, got, expected)


# --------------------------------------------------------------------------
# Item 2: one compiled function shared by threads
# --------------------------------------------------------------------------


@pytest.mark.usefixtures("tiny_switch_interval")
@pytest.mark.parametrize("max_traces", [1, 8])
def test_one_compiled_function_shared_by_four_threads(max_traces: int) -> None:
    """max_traces=1: the issue's reproduction (``i * 1.0``: a new trace per
    value of i), traces dropped and made while other threads replay; 8:
    ``table[i]`` picks an entry, every call a replay after the first."""
    w = Value(0.5)
    table = [Value(float(i)) for i in range(5)]
    if max_traces == 1:
        f = chainrule.compile(lambda x, i: w * x + i * 1.0, max_traces=1)
    else:
        f = chainrule.compile(lambda x, i: w * x + table[i], max_traces=8)
    errors: list[str] = []
    calls = 20_000

    def run(seed: int) -> None:
        try:
            for k in range(calls):
                i = (k + seed) % 5
                x = float(k % 7)
                v = f(x, i).data
                if v != 0.5 * x + i:
                    errors.append(f"f({x}, {i}) = {v}")
                    return
        except Exception as error:
            errors.append(repr(error))

    threads = [threading.Thread(target=run, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    if max_traces == 8:
        assert f.eager_reason is None and f.traces <= 4 and f.hits >= 4 * calls - 4
    else:  # five int values, one trace kept: it gives up tracing
        assert f.eager_reason is None or "trac" in f.eager_reason


# --------------------------------------------------------------------------
# Item 3: another thread's work never enters a trace
# --------------------------------------------------------------------------


def test_another_threads_ops_never_enter_a_trace() -> None:
    x, w = Value(1.5), Value(2.0)
    other = [Value(3.0), Value(4.0)]
    inside, done = threading.Event(), threading.Event()

    def f() -> Value:
        inside.set()
        assert done.wait(10)  # thread B works while this trace runs
        return w * x

    def thread_b() -> None:
        assert inside.wait(10)
        a, b = other
        for _ in range(50):
            q = a / b  # the engine's division records a guard while tracing
            if a > 0 and b.data > 1.0:  # comparisons and reads: guards, if recorded
                q = q * a
            node = Value(a.data * 2, (a,), "double")  # a micrograd closure node

            def _backward(node: Value = node) -> None:
                a.grad += 2 * node.grad

            node._backward = _backward
            (q + node).backward()
        done.set()

    compiled = chainrule.compile(f)
    b = threading.Thread(target=thread_b)
    b.start()
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        assert compiled().data == 3.0
    b.join()
    alone = chainrule.compile(lambda: w * x)
    alone()
    assert compiled.memory() == alone.memory()  # none of B's nodes or leaves
    for a_value in (-1.0, 0.5, 7.0):  # B's values change: A never retraces
        other[0].data = a_value
        other[1].data = 1e-310
        assert compiled().data == 3.0
    assert compiled.traces == 1 and compiled.retraces == 0 and compiled.eager_reason is None
