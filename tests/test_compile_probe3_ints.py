"""chainrule.compile and the third probe: a Value's number handed to the
user by its own methods (``item()``, ``detach()``, ``repr``), int
arguments whose arithmetic raises or that C code takes as ints
(``'%.*f' % (i, x)``), and the names of the classes a trace puts in place
of the user's. Eager's numbers, gradients and messages, or one
CompileWarning and eager's numbers: never a silent other number."""

from __future__ import annotations

import copy
import pickle
import warnings
from collections.abc import Callable
from typing import Any

import pytest

import chainrule
from chainrule import Value
from chainrule.compiler import CompileWarning

pytestmark = pytest.mark.usefixtures("trace_every_graph")


def data(out: Any) -> Any:
    return out.data if isinstance(out, Value) else out


def same_as_eager(f: Callable[..., Any], calls: list[tuple[Any, ...]]) -> list[Any]:
    """``f`` compiled gives eager's numbers on each call, without a warning;
    returns the compiled function's results (their numbers)."""
    eager = [data(f(*args)) for args in calls]
    fast = chainrule.compile(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        compiled = [data(fast(*args)) for args in calls]
    assert compiled == eager
    return compiled


# --------------------------------------------------------------------------
# 1. item(), repr/str: the number a Value hands the user is followed or guarded
# --------------------------------------------------------------------------


def test_item_inside_fn_follows_the_values_data() -> None:
    w, s = Value(2.0), Value(0.5)

    def f(x: float) -> Value:
        return w * x * s.item()

    fast = chainrule.compile(f)
    got = []
    for sd in (0.5, 1.5, 3.0):
        s.data = sd  # as an optimizer step would
        w.grad = 0.0
        out = fast(1.0)
        out.backward()
        got.append((out.data, w.grad))
    assert got == [(1.0, 0.5), (3.0, 1.5), (6.0, 3.0)]  # eager's (repro 13)
    assert fast.traces == 1  # followed: one trace


def test_item_of_a_node_made_inside_fn_is_followed() -> None:
    w = Value(1.5)

    def f(x: float) -> Value:
        y = w * x
        return w * y.item() + y.item() ** 2

    assert same_as_eager(f, [(1.0,), (2.0,), (-3.0,)]) == [4.5, 13.5, 13.5]


def test_repr_and_str_of_a_node_inside_fn_are_read_whole() -> None:
    w = Value(0.5)

    def f(x: float) -> Value:
        y = w * x
        return y * len(repr(y)) + len(str(y))

    # "Value(data=0.5, grad=0)" ... : the lengths change with the number
    calls = [(1.0,), (1.0,), (2.0,), (10.0,), (1000.0,)]
    assert same_as_eager(f, calls) == [37.5, 37.5, 50.0, 150.0, 13527.0]


def test_repr_of_a_parameter_inside_fn_reads_its_grad_and_runs_eagerly() -> None:
    w = Value(0.5)

    def f(x: float) -> Value:
        return w * x * len(repr(w))

    fast = chainrule.compile(f)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        first = fast(1.0).data
        w.grad = 12.25  # a backward pass outside: repr(w) is longer
        second = fast(1.0).data
    assert (first, second) == (12.5, 13.5)  # eager's: 'Value(data=0.5, grad=12.25)'
    assert [c.category for c in caught] == [CompileWarning]
    assert "reads .grad of a Value" in str(caught[0].message)
    assert "test_compile_probe3_ints.py" in str(caught[0].message)


def test_local_grads_inside_fn_run_eagerly() -> None:
    w = Value(1.5)

    def f(x: float) -> Value:
        y = w * x
        return y * y._local_grads[0]

    fast = chainrule.compile(f)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = [fast(x).data for x in (2.0, 3.0)]
    assert got == [6.0, 13.5]
    assert "reads _local_grads" in str(caught[0].message)


# --------------------------------------------------------------------------
# 2. detach(): a stop-gradient leaf recomputed at each replay
# --------------------------------------------------------------------------


def test_detach_is_a_leaf_that_follows_the_detached_value_without_gradient() -> None:
    w = Value(0.5)

    def f(x: float) -> Value:
        baseline = (w * x).detach()  # stop-gradient
        return (w * x - baseline) ** 2 + baseline * w

    fast = chainrule.compile(f)
    got = []
    for x in (1.0, 2.0, 3.0):
        w.grad = 0.0
        out = fast(x)
        out.backward()
        got.append((out.data, w.grad))
    assert got == [(0.25, 0.5), (0.5, 1.0), (0.75, 1.5)]  # eager's (repro 12)
    assert fast.traces == 1


# --------------------------------------------------------------------------
# 3. An int argument's arithmetic that raises holds the trace to its value
# --------------------------------------------------------------------------


def floordiv(i: int) -> int:
    return 10 // i


def modulo(i: int) -> int:
    return 10 % i


def shift(i: int) -> int:
    return 1 << i


def power(i: int) -> float:
    return 0**i


def divmod_of(i: int) -> int:
    q, r = divmod(7, i)
    return q + r


def shifted_divisor(i: int) -> int:
    return 10 // (i - 1)


@pytest.mark.parametrize(
    ("op", "ints"),
    [
        (floordiv, [0, 1, 2, 0]),
        (modulo, [0, 3, 4]),
        (shift, [-1, 2, 3, -2]),
        (power, [-1, 2, 3]),
        (divmod_of, [0, 2, 3]),
        (shifted_divisor, [1, 2, 3, 1]),
    ],
)
def test_int_arithmetic_that_raises_caught_inside_fn_gives_eagers_branch(
    op: Callable[[int], Any], ints: list[int]
) -> None:
    w = Value(0.5)

    def f(i: int, x: float) -> Value:
        try:
            c = op(i)
        except (ZeroDivisionError, ValueError):
            c = 9
        return w * c * x

    same_as_eager(f, [(i, 1.0) for i in ints])


def test_the_reproduction_of_an_int_that_divides_by_zero() -> None:
    w = Value(0.5)

    def f(i: int, x: float) -> Value:
        try:
            c = 10 // i
        except ZeroDivisionError:
            c = 9
        return w * c * x

    assert same_as_eager(f, [(0, 1.0), (1, 1.0), (2, 1.0)]) == [4.5, 5.0, 2.5]  # repro 6


def test_an_int_over_a_float_argument_that_raises_guards_both() -> None:
    w = Value(0.5)

    def f(i: int, x: float) -> Value:
        try:
            c = i / x
        except ZeroDivisionError:
            c = -1.0
        return w * c

    assert same_as_eager(f, [(3, 0.0), (3, 2.0), (4, 0.0), (4, 4.0)]) == [-0.5, 0.75, -0.5, 0.5]


# --------------------------------------------------------------------------
# 4. '%*d' % (i, ...): C takes the int argument itself
# --------------------------------------------------------------------------


def test_an_int_argument_as_a_printf_precision_or_width() -> None:
    w = Value(0.5)

    def f(x: float, digits: int) -> Value:
        return w * float("%.*f" % (digits, x)) + len("%*d" % (digits, 5))  # noqa: UP031

    calls = [(1.23456, 1), (1.23456, 2), (1.23456, 1), (2.5, 3)]
    assert same_as_eager(f, calls) == [1.6, 2.615, 1.6, 4.25]


def test_an_int_argument_as_a_printf_character() -> None:
    w = Value(0.5)

    def f(i: int) -> Value:
        return w * ord(("%c" % i)[0]) + len(b"%*d" % (i, 1))  # noqa: UP031

    assert same_as_eager(f, [(65,), (66,)]) == [97.5, 99.0]


# --------------------------------------------------------------------------
# 5. The classes a trace puts in place of the user's show the user's names
# --------------------------------------------------------------------------


def test_an_error_message_names_value_on_the_call_that_traces() -> None:
    w = Value(0.5)

    def f(x: float) -> Value:
        a, _ = w * x  # a mistake: unpacking a Value
        return a

    messages = []
    for g in (f, chainrule.compile(f)):
        with pytest.raises(TypeError) as e:
            g(1.0)
        messages.append(str(e.value))
    assert messages == ["cannot unpack non-iterable Value object"] * 2  # repro 22


def test_a_number_read_from_a_value_is_named_float_in_a_message() -> None:
    w = Value(0.5)

    def f(x: float) -> Value:
        a, _ = (w * x).data  # a mistake: unpacking a float
        return w * a

    messages = []
    for g in (f, chainrule.compile(f)):
        with pytest.raises(TypeError) as e:
            g(1.0)
        messages.append(str(e.value))
    assert messages == ["cannot unpack non-iterable float object"] * 2


def test_type_of_a_node_made_inside_fn_is_value() -> None:
    w = Value(0.5)

    def f(x: float) -> Value:
        y = w * x
        scale = 2.0 if type(y) is Value and y.__class__ is Value else 3.0
        return y * scale * len(type(y).__name__ + type(y).__qualname__)

    assert same_as_eager(f, [(1.0,), (2.0,)]) == [10.0, 20.0]


class Tagged(Value):
    """A Value subclass of the user's."""


def test_type_of_a_pick_is_the_picked_entrys_class() -> None:
    same = [Value(1.0), Value(2.0)]
    mixed = [Value(1.0), Tagged(2.0)]

    def f(i: int, x: float) -> Value:
        e = same[i]
        return e * x * (2.0 if type(e) is Value else 3.0)

    def g(i: int, x: float) -> Value:
        e = mixed[i]
        return e * x * (2.0 if e.__class__ is Value else 3.0)

    assert same_as_eager(f, [(0, 1.0), (1, 1.0), (0, 2.0)]) == [2.0, 4.0, 4.0]
    # a list holding a Value of the user's class is no gather: the pick is
    # the entry itself and the int is pinned (one trace per value, replayed)
    fast = chainrule.compile(g)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = [fast(i, 1.0).data for i in (0, 1, 0, 1)]
    assert got == [2.0, 6.0, 2.0, 6.0]
    assert fast.traces == 2 and fast.hits == 2


def test_copy_and_pickle_of_a_node_inside_fn_make_values() -> None:
    w = Value(0.5)
    kinds = []

    def f(x: float) -> Value:
        y = w * x
        for c in (copy.copy(y), copy.deepcopy(y), pickle.loads(pickle.dumps(y))):
            kinds.append(type(c))
        return y

    fast = chainrule.compile(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompileWarning)
        assert fast(2.0).data == 1.0
    assert kinds == [Value, Value, Value]


def test_floats_returned_by_a_call_that_runs_eagerly_are_floats() -> None:
    w = Value(2.0)
    log = []

    def f(x: float) -> Any:
        h = w * x
        log.append(1)  # a side effect: f runs eagerly
        return h, h.data, x

    fast = chainrule.compile(f)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # (the first trace that changes what it reads returns its own result:
        # the second gives up and warns)
        for _ in range(2):
            _, hd, x = fast(1.5)
            assert (hd, x) == (3.0, 1.5)
            assert type(hd) is float and type(x) is float
    assert [c.category for c in caught] == [CompileWarning]
    assert log == [1, 1]


def test_a_copy_of_a_pick_inside_fn_is_a_copy_of_the_entry() -> None:
    table = [Value(1.0), Value(2.0)]

    def f(i: int, x: float) -> Value:
        e = table[i]
        return e * x + copy.copy(e).data

    fast = chainrule.compile(f)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = [fast(i, 1.0).data for i in (0, 1)]
    assert got == [2.0, 4.0]  # eager's
    assert caught and all(c.category is CompileWarning for c in caught)
