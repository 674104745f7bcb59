"""The third probe of compile, what a trace learns from read floats
(:mod:`chainrule.compiler.reads`): each finding, compiled beside eager.

A traced float (a float argument, a ``.data`` read) that an operation or a
C function takes whole is a guard, also when the operation gives
something other than a float, raises, or gets the float inside an
iterable it consumes; a float made through the TracedFloat class is a
plain float; an int argument nested in a container a C function reads
is the int itself.
"""

from __future__ import annotations

import json
import marshal
import math
import statistics
import warnings
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import chainrule
from chainrule import Value
from chainrule.compiler import CompileWarning

pytestmark = pytest.mark.usefixtures("trace_every_graph")


def data(out: Any) -> Any:
    return out.data if isinstance(out, Value) else out


def both(f: Callable[..., Any], calls: list[tuple[Any, ...]], w: Value) -> list[Any]:
    """(eager value, eager grad of ``w``) and the compiled ones, per call;
    a CompileWarning fails the test (each fix follows or guards)."""
    fast = chainrule.compile(f)
    out = []
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for args in calls:
            row = []
            for g in (f, fast):
                w.grad = 0.0
                r = g(*args)
                if isinstance(r, Value):
                    r.backward()
                row.append((data(r), w.grad))
            out.append(row)
    return out


def stepped(
    f: Callable[..., Any], v: Value, steps: list[tuple[float, tuple[Any, ...]]]
) -> list[Any]:
    """(eager, compiled) values of ``f(*args)`` after each ``v.data = d``
    (as an optimizer's step would), agreeing; returned for more checks."""
    fast = chainrule.compile(f)
    rows = []
    for d, args in steps:
        v.data = d
        rows.append((f(*args).data, fast(*args).data))
    agree(rows)
    return rows


def agree(rows: list[Any]) -> None:
    for eager, compiled in rows:
        assert compiled == eager


# --------------------------------------------------------------------------
# 1. A traced float with a NumPy float64: not a float the trace follows
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "apply",
    [
        lambda a, b: a + b,
        lambda a, b: a - b,
        lambda a, b: a * b,
        lambda a, b: a / b,
        lambda a, b: a**b,
        lambda a, b: a % b,
        lambda a, b: a // b,
    ],
    ids=["add", "sub", "mul", "truediv", "pow", "mod", "floordiv"],
)
def test_a_traced_float_left_of_a_numpy_float64_is_a_guard(
    apply: Callable[[Any, Any], Any],
) -> None:
    w, u = Value(0.5), Value(1.0)
    scale = np.sqrt(2.0)

    def f(x: float) -> Value:
        return w * apply(x, scale) + w * apply(u.data, scale)

    rows = stepped(f, u, [(1.0, (1.0,)), (1.0, (2.0,)), (4.0, (3.0,))])
    assert rows[1][0] != rows[0][0]  # (eager's numbers change)


# --------------------------------------------------------------------------
# 2. A traced float turned complex
# --------------------------------------------------------------------------


def test_a_float_argument_made_complex_is_a_guard() -> None:
    w = Value(0.5)

    def f(x: float) -> Value:
        return w * abs(x * 1j + 1)

    def g(x: float) -> Value:
        return w * abs(x**0.5)

    rows = both(f, [(-4.0,), (4.0,), (9.0,)], w) + both(g, [(-4.0,), (9.0,), (-9.0,)], w)
    agree(rows)
    assert rows[2][0][0] == 0.5 * math.sqrt(82.0)
    assert rows[4][0][0] == 1.5


def test_a_read_float_times_a_complex_is_a_guard() -> None:
    w, u = Value(0.5), Value(3.0)

    def f() -> Value:
        return w * abs(u.data * 1j + 1)

    rows = stepped(f, u, [(3.0, ()), (4.0, ())])
    assert rows[1][0] == 0.5 * math.sqrt(17.0)


# --------------------------------------------------------------------------
# 3. Views and other containers a C function reads are looked into
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "consume",
    [
        lambda d: math.fsum(d.values()),
        lambda d: statistics.fmean(d.values()),
        lambda d: math.fsum(v for _, v in d.items()),
        lambda d: math.fsum(deque(d.values())),
        lambda d: math.fsum(map(float.__pos__, d.values())),
        lambda d: math.fsum({v: 0 for v in d.values()}.keys()),  # noqa: C420 (not a C call)
    ],
    ids=["fsum-values", "fmean-values", "fsum-items", "deque", "map", "keys"],
)
def test_read_floats_in_a_dict_view_handed_to_a_c_function_are_guards(
    consume: Callable[[dict[str, float]], float],
) -> None:
    a, b, w = Value(1.0), Value(2.0), Value(3.0)

    def f(x: float) -> Value:
        d = {"a": a.data, "b": b.data, "x": x}
        return w * consume(d)

    rows = stepped(f, a, [(1.0, (1.0,)), (1.5, (1.0,)), (2.5, (3.0,))])
    assert rows[2][0] != rows[1][0] != rows[0][0]


# --------------------------------------------------------------------------
# 4. An iterator a C function consumes: each float it yields is a guard
# --------------------------------------------------------------------------


def test_floats_read_earlier_and_yielded_by_a_generator_to_a_c_function_are_guards() -> None:
    W = [Value(0.5), Value(1.5), Value(2.5)]

    def f(x: float) -> Value:
        vals = [v.data for v in W]
        total = math.fsum(v for v in vals)
        mean = statistics.fmean(v for v in vals)
        spread = math.fsum(iter([x, -x, x]))
        return W[0] * total + W[0] * mean + W[0] * spread

    rows = stepped(f, W[1], [(1.5, (1.0,)), (2.0, (1.0,)), (3.0, (2.0,))])
    assert rows[1][0] == 0.5 * (5.0 + 5.0 / 3.0 + 1.0)


def test_a_generator_handed_to_a_c_function_is_consumed_as_eagerly() -> None:
    """The pinning iterator takes items one by one: a C function that stops
    early leaves the rest to the user's code, as eagerly."""
    w = Value(2.0)

    def f(x: float) -> Value:
        gen = (v for v in (x, 2 * x, 3 * x))
        first = math.fsum(__import__("itertools").islice(gen, 2))
        return w * first + w * next(gen)

    agree(both(f, [(1.0,), (2.0,), (-1.5,)], w))


# --------------------------------------------------------------------------
# 5-7. An operation or a C call that raises pins its operands
# --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "risky",
    [lambda x: 1.0 / x, lambda x: x**1000, lambda x: x / (x - 1.0), lambda x: x % x],
    ids=["reciprocal", "overflow", "shifted", "mod"],
)
def test_an_operation_that_raises_on_a_float_argument_is_a_guard(
    risky: Callable[[float], float],
) -> None:
    w = Value(2.0)

    def f(x: float) -> Value:
        try:
            s = risky(x)
        except (ZeroDivisionError, OverflowError):
            s = 5.0
        return w * s

    rows = both(f, [(1.5,), (0.0,), (-0.0,), (1.0,), (4.0,), (20.0,)], w)
    agree(rows)
    assert rows[4][0] != rows[1][0]


def test_an_operation_that_raises_on_a_read_float_is_a_guard() -> None:
    w, u = Value(2.0), Value(0.0)

    def f(x: float) -> Value:
        try:
            s = 1.0 / u.data
        except ZeroDivisionError:
            s = 5.0
        return w * s * x

    rows = stepped(f, u, [(0.0, (1.0,)), (2.0, (1.0,)), (4.0, (1.0,))])
    assert [e for e, _ in rows] == [10.0, 1.0, 0.5]


def test_an_int_argument_in_an_operation_that_raises_or_turns_complex_is_a_guard() -> None:
    """The same for an int argument (:mod:`chainrule.compiler.symbolic`)."""
    w = Value(2.0)

    def f(i: int) -> Value:
        try:
            s = 1.0 / i
        except ZeroDivisionError:
            s = 5.0
        return w * s + w * abs((i - 3) ** 0.5)

    rows = both(f, [(0,), (2,), (4,), (7,)], w)
    agree(rows)
    assert rows[1][0][0] == 2.0 * 0.5 + 2.0 * 1.0


@pytest.mark.parametrize(
    "risky",
    [math.log, math.sqrt, math.exp, lambda x: 2.0**x, lambda x: math.fsum([x, math.log(x)])],
    ids=["log", "sqrt", "exp", "power", "nested"],
)
def test_a_c_function_that_raises_on_a_float_argument_is_a_guard(
    risky: Callable[[float], float],
) -> None:
    w = Value(2.0)

    def f(x: float) -> Value:
        try:
            q = risky(x)
        except (ValueError, OverflowError):
            q = -1.0
        return w * q

    rows = both(f, [(1.0,), (-1.0,), (3.0,), (2000.0,), (0.5,)], w)
    agree(rows)


# --------------------------------------------------------------------------
# 8. A TracedFloat made through its class is a plain float
# --------------------------------------------------------------------------


def test_statistics_mean_of_a_read_float_and_a_float_argument_gives_eagers_number() -> None:
    u, w = Value(0.5), Value(2.0)

    def f(x: float) -> Value:
        return w * statistics.mean([u.data, x])

    rows = stepped(f, u, [(0.5, (1.0,)), (0.5, (3.0,)), (1.5, (3.0,))])
    assert [e for e, _ in rows] == [1.5, 3.5, 4.5]


def test_the_class_of_a_read_float_called_gives_a_plain_float() -> None:
    u, w = Value(0.5), Value(2.0)

    def f(x: float) -> Value:
        a = type(u.data)(3.0) + type(x)(x)
        b = x.fromhex("0x1.8p1")
        return w * a * b

    agree(both(f, [(1.0,), (2.0,)], w))


# --------------------------------------------------------------------------
# 9. An int argument nested in what a C function reads is the int
# --------------------------------------------------------------------------


def test_json_dumps_of_an_int_argument_in_a_dict_gives_eagers_text() -> None:
    w = Value(0.5)

    def f(x: float, step: int) -> Value:
        text = json.dumps({"step": step, "pair": [step, 2], "key": {step: (step,)}})
        return (w * x - 1.0) ** 2 * sum(map(ord, text))  # (the text, char by char)

    agree(both(f, [(2.0, 1), (2.0, 2), (3.0, 12)], w))


def test_marshal_dumps_of_a_list_holding_arguments_gives_eagers_bytes() -> None:
    w = Value(0.5)

    def f(x: float, i: int) -> Value:
        return w * len(marshal.dumps([x, i, {i}, (i, x)])) + w * x

    agree(both(f, [(2.0, 1), (2.5, 1), (2.5, 300)], w))


def test_a_list_a_c_function_changes_keeps_its_change() -> None:
    """The ints are made whole in the user's own list: a C function that
    changes the list (``bisect.insort``) changes the user's list, as eagerly."""
    import bisect

    w = Value(0.5)

    def f(x: float, i: int) -> Value:
        seen = [i, i + 10]
        bisect.insort(seen, 5)
        return w * x * len(seen) + w * seen[1]

    agree(both(f, [(1.0, 1), (1.0, 7), (2.0, 20)], w))


def test_the_numbers_in_an_argument_list_made_plain_for_a_call_are_put_back() -> None:
    """A list or dict argument read by a C function is not changed by it:
    the plain numbers are the call's only, so the function replays (it is
    not one that changes its arguments in place) and still follows them."""
    w = Value(2.0)

    def f(xs: list[float], d: dict[str, Any]) -> Value:
        return w * math.fsum(xs) + w * len(json.dumps(d)) + w * xs[0]

    fast = chainrule.compile(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for xs in ([1.0, 2.0], [1.0, 3.0], [1.0, 3.0]):
            d = {"a": xs[1], "i": [1, (2, len(xs))]}
            assert fast(xs, d).data == f(xs, d).data
            assert xs == [1.0, xs[1]] and type(xs[1]) is float
    assert fast.traces == 2 and fast.hits == 1


def test_an_iterator_passed_on_by_itertools_is_still_followed() -> None:
    """``itertools.chain`` only passes its iterators' items on: the loop
    over it follows them (one trace), and a C function handed the chain
    pins them (a guard)."""
    import itertools

    W = [Value(0.5), Value(1.5)]

    def loop(x: float) -> Value:
        total = W[0] * 0.0
        for v in itertools.chain((v.data for v in W), iter([x])):
            total = total + W[0] * v
        return total

    def summed(x: float) -> Value:
        return W[0] * math.fsum(itertools.chain((v.data for v in W), [x]))

    rows = []
    fast_loop, fast_summed = chainrule.compile(loop), chainrule.compile(summed)
    for d in (1.5, 2.0, 3.0):
        W[1].data = d
        rows += [(loop(1.0).data, fast_loop(1.0).data), (summed(1.0).data, fast_summed(1.0).data)]
    agree(rows)
    assert rows[5][0] == 0.5 * (0.5 + 3.0 + 1.0)
    assert fast_loop.traces == 1


def test_a_read_float_pinned_then_the_winner_of_max_is_pinned_again() -> None:
    """A float a C function read (a guard on its own node) that then wins
    ``max()`` is the reduction: read whole again, it is guarded again."""
    a, b, w = Value(1.0), Value(0.5), Value(2.0)

    def f(x: float) -> Value:
        p = a.data
        first = math.exp(p)
        m = max(p, b.data)
        return w * math.exp(m) + w * first * x

    rows = stepped(f, b, [(0.5, (1.0,)), (0.7, (1.0,)), (3.0, (1.0,))])
    assert rows[2][0] == 2.0 * math.exp(3.0) + 2.0 * math.e
