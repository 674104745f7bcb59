"""compile returns eager's numbers or runs eagerly (issue 32): each
reproduction of the issue, compiled beside eager.

A compiled call is one node of the caller's graph; every input a trace
reads is an input or a guard; the user's objects are left alone; a call
runs the function once.
"""

from __future__ import annotations

import functools
import math
import operator
import statistics
import struct
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import chainrule
from chainrule import Value
from chainrule.compiler import CompileWarning

pytestmark = pytest.mark.usefixtures("trace_every_graph")


def bits(x: float) -> tuple[bool, float, float]:
    """A float as compared bit for bit: nan equal to nan, -0.0 not 0.0."""
    return (True, 0.0, 0.0) if x != x else (False, math.copysign(1.0, x), abs(x))


def data(out: Any) -> Any:
    return out.data if isinstance(out, Value) else out


def eager_and_compiled(f: Callable[..., Any], *calls: tuple[Any, ...]) -> list[tuple[Any, Any]]:
    """(eager, compiled) results of ``f`` on each argument tuple, in order."""
    compiled = chainrule.compile(f)
    return [(data(f(*args)), data(compiled(*args))) for args in calls]


# --------------------------------------------------------------------------
# 1. A compiled call is one node in the caller's graph
# --------------------------------------------------------------------------


def test_a_compiled_result_used_in_more_arithmetic_keeps_its_gradient() -> None:
    w = Value(2.0)

    def loss(x: float) -> Value:
        return (w * x - 1.0) ** 2

    fast = chainrule.compile(loss)
    batch = [0.5, 1.0, 1.5]
    grads = []
    for f in (loss, fast, fast):  # eager, the trace, a replay
        w.grad = 0.0
        total = sum(f(x) for x in batch) / 3
        total.backward()
        grads.append((total.data, w.grad))
    assert grads[0] == pytest.approx((1.6666666666666667, 2.6666666666666665))
    assert grads[1] == grads[0] and grads[2] == grads[0]


def test_the_output_of_one_call_feeds_another_and_the_gradient_flows_through_both() -> None:
    w, b = Value(0.5), Value(-1.0)
    fast = chainrule.compile(lambda x: (w * x + b).tanh())
    expected = []
    for f in (lambda x: (w * x + b).tanh(), fast, fast):
        w.grad = b.grad = 0.0
        y = f(1.5) * f(-0.5) + f(2.0)
        y.backward()
        expected.append((y.data, w.grad, b.grad))
    assert expected[1] == pytest.approx(expected[0], rel=1e-12)
    assert expected[2] == pytest.approx(expected[0], rel=1e-12)


def test_nested_compiled_functions_give_eager_numbers_and_gradients() -> None:
    w = Value(1.5)
    inner = chainrule.compile(lambda x: w * x * x)
    outer = chainrule.compile(lambda x: inner(x) + w * 3.0)
    nested_no_floats = chainrule.compile(lambda: inner(2.0) * w)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for x in (1.0, 2.0, -3.0):
            w.grad = 0.0
            out = outer(x)
            out.backward()
            assert (out.data, w.grad) == (1.5 * x * x + 4.5, x * x + 3.0)
        for _ in range(2):
            w.grad = 0.0
            out = nested_no_floats()
            out.backward()
            assert (out.data, w.grad) == (1.5 * 4.0 * 1.5, 2 * 1.5 * 4.0)


def test_create_graph_through_a_compiled_output_is_a_clear_error() -> None:
    w = Value(1.5)
    fast = chainrule.compile(lambda x: w * x)
    fast(2.0)
    y = fast(3.0) * 2.0
    with pytest.raises(TypeError, match="create_graph"):
        y.backward(create_graph=True)


# --------------------------------------------------------------------------
# 2. Float arguments through Python functions: inputs or guards
# --------------------------------------------------------------------------

w_shared = Value(1.5)


@pytest.mark.parametrize(
    "f, xs",
    [
        (lambda x: w_shared * math.exp(x), [0.0, 2.0]),
        (lambda x: w_shared * math.sqrt(x), [1.0, 4.0]),
        (lambda x: w_shared * math.log(x), [1.0, 3.0]),
        (lambda x: w_shared * math.sin(x), [0.0, 1.0]),
        (lambda x: w_shared * math.pow(x, 3), [1.0, 2.0]),
        (lambda x: w_shared * (2.0 if math.isfinite(x) else 3.0), [1.0, math.inf]),
        (lambda x: w_shared * math.copysign(1.0, x), [1.0, -1.0]),
        (lambda x: w_shared * math.fsum([x, 1.0]), [1.0, 5.0]),
        (lambda x: w_shared * statistics.fmean([x, 1.0]), [1.0, 3.0]),
        (lambda x: w_shared * (2.0 if x.is_integer() else 3.0), [1.0, 1.5]),
        (lambda x: w_shared * x.as_integer_ratio()[1], [1.0, 1.5]),
        (lambda x: w_shared * np.exp(x), [0.0, 2.0]),
        (lambda x: w_shared * np.exp(x), [np.float64(0.0), np.float64(2.0)]),
        (lambda x: w_shared * 0.0 if math.isnan(x) else w_shared * x, [1.0, math.nan]),
        (lambda x: w_shared / float(x), [0.0, -0.0, 0.0]),
        (lambda x: w_shared * 3.0 if type(x) is float else w_shared * 0.0, [1.0, 2.0]),
    ],
)
def test_floats_through_python_functions_give_eager_numbers(f: Any, xs: list[Any]) -> None:
    for eager, compiled in eager_and_compiled(f, *[(x,) for x in xs]):
        assert bits(compiled) == bits(eager)


def test_math_exp_reproduction_of_the_issue() -> None:
    w = Value(1.5)
    f = chainrule.compile(lambda x: w * math.exp(x))
    assert f(0.0).data == 1.5
    assert f(2.0).data == 1.5 * math.exp(2.0)  # 11.08, not the traced 1.5


w_read = Value(0.5)
ws_read = [Value(0.5), Value(-1.0), Value(2.0)]


@pytest.mark.parametrize(
    "f",
    [
        lambda x: x * math.exp(w_read.data),
        lambda x: x * math.fsum(v.data for v in ws_read),  # a generator it consumes
        lambda x: x * statistics.fmean([v.data for v in ws_read]),  # the standard library
        lambda x: x * float(np.float64(w_read.data)),  # a NumPy constructor
        lambda x: x * struct.unpack("d", struct.pack("d", 2 * w_read.data))[0],
        lambda x: x * functools.reduce(operator.mul, [v.data for v in ws_read]),
        lambda x: x * float(np.sum(np.array([0.0] * 20_000 + [w_read.data]))),  # past a look
    ],
)
def test_a_number_read_from_a_value_through_opaque_code_gives_eagers_number(f: Any) -> None:
    """A number read from a Value (``.data``) handed to code the trace
    cannot see into (C, the standard library) is a guard: changed by a
    training step, it traces again; before, the trace's number was frozen
    (``math.exp(w.data)``: 1.65 at every call)."""
    x = Value(2.0)
    fast = chainrule.compile(f, budget=False)
    for step in range(3):
        w_read.data = ws_read[0].data = 0.5 + step
        assert bits(fast(x).data) == bits(f(x).data)
    assert fast.traces == 3  # each new number traced again
    assert bits(fast(x).data) == bits(f(x).data) and fast.traces == 3  # the same: a replay


def test_code_compile_cannot_copy_gets_its_reads_guarded() -> None:
    """A function without source (``exec``) runs as it is: the numbers it
    reads are guards, whatever it hands them to."""
    space: dict[str, Any] = {"math": math, "w": Value(0.5)}
    exec("def f(x):\n    return x * math.exp(w.data)", space)
    f = space["f"]
    fast = chainrule.compile(f, budget=False)
    x = Value(2.0)
    for step in range(3):
        space["w"].data = 0.5 + step
        assert bits(fast(x).data) == bits(f(x).data)


def test_floats_used_only_with_values_stay_inputs() -> None:
    w = Value(1.5)
    f = chainrule.compile(lambda x: (w * x + x * x).tanh())
    for x in (0.1, 0.2, 0.3, -0.0, 0.4):
        assert bits(f(x).data) == bits((w * x + x * x).tanh().data)
    assert f.traces == 1


def test_a_value_converted_to_a_float_raises_inside_compile_as_eagerly() -> None:
    w = Value(0.75)

    def to_float(x: float) -> float:
        return float(w * x)

    def through_math(x: float) -> float:
        return math.sin(w * x)

    for fn in (to_float, through_math):
        with pytest.raises(TypeError, match="float"):
            fn(1.0)
        with pytest.raises(TypeError, match="float"):
            chainrule.compile(fn)(1.0)


# --------------------------------------------------------------------------
# 4. Guards: -0.0, nan, out-of-range lookups
# --------------------------------------------------------------------------


def test_negative_zero_does_not_pass_the_guard_of_zero() -> None:
    w = Value(1.0)
    f = chainrule.compile(lambda x: w / float(x))
    assert f(0.0).data == math.inf
    assert f(-0.0).data == -math.inf


def test_an_unused_lookup_out_of_range_raises_as_eagerly() -> None:
    tab = [Value(1.0), Value(2.0), Value(3.0)]

    def f(i: int) -> Value:
        unused = tab[i + 1]  # noqa: F841
        return tab[i] * 10.0

    compiled = chainrule.compile(f)
    assert compiled(0).data == 10.0
    assert compiled(1).data == 20.0
    with pytest.raises(IndexError):
        f(2)
    with pytest.raises(IndexError):
        compiled(2)


# --------------------------------------------------------------------------
# 5. No cache keyed by the id of an object that can die
# --------------------------------------------------------------------------


def test_a_gathers_picks_are_never_another_steps() -> None:
    from chainrule.compiler.keys import Call
    from chainrule.compiler.program import GatherStep

    step = GatherStep(np.array([5]), np.array([[0, 1, 2]]), [("int", 0)])
    call = Call((), ints=[2])
    stranger = object()  # a step that died, whose id the new one took
    call.picks[id(step)] = (stranger, np.array([0]))
    assert step.picks(call).tolist() == [2]
    assert step.picks(call).tolist() == [2]


# --------------------------------------------------------------------------
# 6. One run per call
# --------------------------------------------------------------------------


def test_a_function_that_raises_while_traced_runs_once() -> None:
    tab = [Value(1.0), Value(2.0), Value(3.0), Value(4.0)]
    for make in (lambda f: f, chainrule.compile):
        log: list[int] = []

        def f(i: int, log: list[int] = log) -> Value:
            log.append(i)
            if i == 3:
                raise ValueError("three")
            return tab[i] * 2.0

        g = make(f)
        g(1)
        with pytest.raises(ValueError, match="three"):
            g(3)
        assert log == [1, 3]


# --------------------------------------------------------------------------
# 3. Globals, closures, containers, self: guarded, never stale
# --------------------------------------------------------------------------

scale = 1.5
W = [Value(1.0), Value(2.0)]
v_global = Value(1.5)


def scaled(x: float) -> Value:
    return W[1] * x * scale


def by_entry() -> Value:
    return W[0] * 1.0


def rebound() -> Value:
    return v_global * 1.0


def test_a_global_float_changed_after_tracing_is_read_afresh() -> None:
    global scale
    f = chainrule.compile(scaled)
    assert f(1.0).data == 3.0
    scale = 2.25
    try:
        assert f(1.0).data == scaled(1.0).data == 4.5
    finally:
        scale = 1.5


def test_a_list_entry_replaced_after_tracing_is_the_new_one() -> None:
    f = chainrule.compile(by_entry)
    assert f().data == 1.0
    old = W[0]
    W[0] = Value(7.0)
    try:
        out = f()
        assert out.data == 7.0
        out.backward()
        assert W[0].grad == 1.0 and old.grad == 0.0
    finally:
        W[0] = old


def test_a_rebound_global_value_is_the_new_one() -> None:
    global v_global
    f = chainrule.compile(rebound)
    assert f().data == 1.5
    old, v_global = v_global, Value(10.0)
    try:
        assert f().data == 10.0
    finally:
        v_global = old


def test_closures_defaults_and_self_are_guarded() -> None:
    c = [2.0]
    w = Value(1.0)
    f = chainrule.compile(lambda x: w * x * c[0])
    assert f(1.0).data == 2.0
    c[0] = 3.0
    assert f(1.0).data == 3.0

    class Model:
        def __init__(self) -> None:
            self.k = 2.0
            self.rows = [[1.0, 2.0]]

        def loss(self, x: float) -> Value:
            return w * x * self.k + self.rows[0][1]

    m = Model()
    g = chainrule.compile(m.loss)
    assert g(1.0).data == 4.0
    m.k = 5.0
    assert g(1.0).data == 7.0
    m.rows[0][1] = -1.0
    assert g(1.0).data == 4.0


deep = {"a": {"b": {"c": [1.5]}}}
nested = [[[Value(3.0)]]]


def through_deep(x: float) -> Value:
    return nested[0][0][0] * x * deep["a"]["b"]["c"][0]


def test_entries_at_any_depth_are_guarded() -> None:
    """A float three containers down, a Value three lists down: changed
    after tracing, the replay uses the new ones (two levels were guarded
    before, and these numbers were stale)."""
    f = chainrule.compile(through_deep)
    for _ in range(2):
        assert f(1.0).data == 4.5
    deep["a"]["b"]["c"][0] = 4.0
    old = nested[0][0][0]
    nested[0][0][0] = Value(7.0)
    try:
        out = f(1.0)
        assert out.data == through_deep(1.0).data == 28.0
        out.backward()
        assert nested[0][0][0].grad == 4.0 and old.grad == 0.0
    finally:
        deep["a"]["b"]["c"][0] = 1.5
        nested[0][0][0] = old


shared_row = [1.5, 2.0]
tangled: dict[str, Any] = {"rows": [shared_row, shared_row], "pairs": [(shared_row, Value(0.5))]}
tangled["self"] = tangled  # a cycle
tangled["rows"].append(tangled["rows"])  # a list that holds itself


def through_tangled(x: float) -> Value:
    row, w = tangled["pairs"][0]
    return w * x * tangled["rows"][1][0] + row[1]


def test_shared_rows_and_cycles_are_guarded() -> None:
    """A row reached twice and containers that hold themselves: the guard
    walk ends, and a float changed in the shared row is the new one."""
    f = chainrule.compile(through_tangled)
    for _ in range(3):
        assert f(2.0).data == 0.5 * 2.0 * 1.5 + 2.0
    shared_row[0] = 3.0
    try:
        assert f(2.0).data == through_tangled(2.0).data == 0.5 * 2.0 * 3.0 + 2.0
    finally:
        shared_row[0] = 1.5


def test_a_row_whose_entry_becomes_a_row_is_walked_again() -> None:
    """Before a replay the guard walk takes a row level's types from the
    trace's walk; an entry replaced by a list of Values (the level's types
    change) is walked into, and the Value in it read; equal floats that
    are new objects still hold, a float replaced by one of another sign
    does not."""
    w = Value(2.0)
    table: list[list[Any]] = [[1.0, 0.0]]

    def f(x: float) -> Any:
        second = table[0][1]
        extra = sum(second, Value(0.0)) if isinstance(second, list) else second
        return w * x * table[0][0] + extra

    g = chainrule.compile(f)
    for _ in range(3):
        assert g(1.0).data == 2.0
    retraces = g.stats()["retraces"]
    table[0][0] = float("1.0")  # a new float object, the same number
    table[0][1] = 0.0 + 0.0
    assert g(1.0).data == 2.0
    assert g.stats()["retraces"] == retraces  # (the same numbers: the trace holds)
    table[0][1] = -0.0  # not the same number
    assert g(1.0).data == 2.0
    assert g.stats()["retraces"] == retraces + 1
    table[0][1] = [Value(5.0)]
    assert g(1.0).data == f(1.0).data == 7.0
    table[0][1][0].data = 6.0
    assert g(1.0).data == f(1.0).data == 8.0


def test_slots_are_guarded() -> None:
    """An attribute in ``__slots__`` (no ``__dict__``) changed after tracing:
    the replay uses the new number."""

    class Scale:
        __slots__ = ("k",)

        def __init__(self) -> None:
            self.k = 2.0

    scale = Scale()
    w = Value(1.0)
    f = chainrule.compile(lambda x: w * x * scale.k)
    for _ in range(2):
        assert f(1.0).data == 2.0
    scale.k = 3.0
    assert f(1.0).data == 3.0


def test_a_module_attribute_it_reads_is_guarded() -> None:
    """``settings.RATE`` of a module it reads: rebound after tracing, the
    replay uses the new number."""
    import types

    settings = types.ModuleType("settings")
    settings.RATE = 2.0  # type: ignore[attr-defined]
    w = Value(1.0)
    namespace = {"settings": settings, "w": w}
    exec("def f(x):\n    return w * x * settings.RATE\n", namespace)  # its globals: namespace
    f = chainrule.compile(namespace["f"])
    assert f(1.0).data == 2.0
    settings.RATE = 5.0  # type: ignore[attr-defined]
    assert f(1.0).data == 5.0


def test_a_function_reading_more_than_it_can_check_runs_eagerly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """More entries reachable from what it reads than the guard checks
    before every replay: eagerly, with one warning naming why, and eager's
    numbers when the data changes."""
    from chainrule.compiler import sources

    monkeypatch.setattr(sources, "LIMIT", 50)
    data = [[float(i), float(i + 1)] for i in range(40)]
    w = Value(2.0)
    f = chainrule.compile(lambda i: w * data[i][0])
    with pytest.warns(CompileWarning, match="too many to check"):
        assert f(3).data == 6.0
    data[3][0] = 10.0
    assert f(3).data == 20.0


def test_a_function_that_changes_what_it_reads_runs_eagerly() -> None:
    w = Value(1.0)
    seen: list[float] = []

    def f(x: float) -> Value:
        seen.append(x)
        return w * x

    compiled = chainrule.compile(f)
    compiled(1.0)  # (a cache filling once changes what it reads once: traced again)
    with pytest.warns(CompileWarning, match="changes"):
        compiled(2.0)
    compiled(3.0)
    assert seen == [1.0, 2.0, 3.0]


# --------------------------------------------------------------------------
# 7. The budget in time (its account, on given times: never the clock)
# --------------------------------------------------------------------------


@pytest.mark.budget
def test_the_budget_refuses_when_tracing_is_two_eager_calls_in_the_red() -> None:
    from chainrule.compiler.budget import Budget

    b = Budget()
    assert b.first_sight("a") == "eager"  # the first call: eagerly, timed
    b.ran_eagerly(0.1, "a")
    # a new graph in a loop whose every call so far was new: no replays to come
    assert b.first_sight("b") == "eager"
    b.ran_eagerly(0.1, "b")
    assert b.first_sight("b") == "trace"  # met again: its replays to come repay a trace
    assert b.refuse() is None
    b.traced(1.0, 0.4, b.eager_of("b", 0.4))  # its run over the calibration: 0.1 s
    assert b.eager_of("a", 9.9) == 0.1  # a graph that ran eagerly: its own time
    # 1.0 - 0.1 spent; two eager calls with their backward: 2 * 0.1 * 3
    assert b.refuse() is not None and "paid back" in str(b.refuse())
    assert b.first_sight("c") == "eager"  # met once while in the red: not traced
    assert b.first_sight("c") == "trace"  # met again: the account decides
    for _ in range(2):  # replays pay it back: 0.1 - 0.001 forward, 0.2 - 0.001 backward
        b.replayed(0.001, 0.1)
        b.backward(0.001, 0.1)
    assert b.extra == pytest.approx(0.9 - 2 * 0.298)
    assert b.refuse() is None


@pytest.mark.budget
def test_a_graph_is_traced_when_its_replays_to_come_should_repay_the_trace() -> None:
    """Graphs cycling through 20 lengths, each met 7 times in 150 calls,
    whose trace costs tens of calls: none is traced (each call eager, as
    timed); a graph met at every call is traced when met again; with a
    trace measured cheap (2 calls), the cycling graphs are traced."""
    from chainrule.compiler import budget

    def sights(b: budget.Budget, keys: list[Any], eager: float) -> list[str]:
        out = []
        for key in keys:
            sight = b.first_sight(key)
            out.append(sight)
            if sight in ("eager", "rare"):
                b.ran_eagerly(eager, key)
        return out

    cycling = [("length", k % 20) for k in range(150)]
    # the priors: a trace 1 ms + 15 calls of 0.3 ms; a replay saves half a
    # call and its backward (0.45 ms): 12 replays to come repay it
    b = budget.Budget()
    got = sights(b, cycling, 3e-4)
    assert "trace" not in got and got.count("rare") == 150 - 20  # (the rest met once)
    assert b.mostly_met_once()  # (the one warning)
    assert budget.Budget().trace_estimate(3e-4) == pytest.approx(1e-3 + 15 * 3e-4)
    loop = budget.Budget()
    assert sights(loop, ["step"] * 2, 3e-4) == ["eager", "trace"]
    cheap = budget.Budget()
    cheap.traced(2e-3, 1e-3, 3e-4)  # a trace measured: 1.7 ms beyond a call of 0.3 ms
    assert cheap.trace_estimate(3e-4) == pytest.approx(1.7e-3)
    got = sights(cheap, cycling, 3e-4)
    assert got[:20] == ["eager"] * 20 and got[20] == "trace"  # met again: 100 / 21 to come


@pytest.mark.budget
def test_a_function_that_settles_gets_a_bounded_second_chance() -> None:
    from chainrule.compiler import budget

    b = budget.Budget()
    b.traced(1.0, 0.4, 0.1)
    b.ran_eagerly(0.1)
    assert b.refuse() is not None
    chances = 0
    for _ in range(10_000):
        b.ran_eagerly(0.1)
        if b.refuse() is None:
            chances += 1
            b.traced(1.0, 0.4, 0.1)  # it traced again, and did not pay
    assert chances == budget.CHANCES


@pytest.mark.budget
def test_replays_slower_than_eager_calls_send_the_function_to_eager() -> None:
    from chainrule.compiler.budget import Budget

    b = Budget()
    b.traced(0.01, 0.0004, 0.0001)
    b.ran_eagerly(0.0001)
    for _ in range(3):
        b.replayed(0.0002, 0.0001)  # twice an eager call of the same graph
    assert "too small" in str(b.replays_lose())


@pytest.mark.budget
def test_replays_whose_backward_is_slower_send_the_function_to_eager() -> None:
    """A replay's forward faster than eager's, its backward much slower (a
    large table picked by an int: probe AD4): the whole replay counts."""
    from chainrule.compiler.budget import Budget

    b = Budget()
    b.traced(0.01, 0.004, 0.001)
    b.ran_eagerly(0.001)
    b.ran_backward_eagerly(0.002)
    for _ in range(3):
        b.replayed(0.0005, 0.001)  # half an eager forward...
        b.replayed(0.0005, 0.001)
        assert b.replays_lose() is None  # (forward only: faster)
        b.backward(0.01, 0.001)  # ...then five times an eager backward (0.002)
    b.replays.clear()
    for _ in range(3):
        b.replayed(0.0005, 0.001)
        b.backward(0.01, 0.001)
    assert b.replays == type(b.replays)([0.0105 / 0.003] * 3)
    assert "a large table" in str(b.replays_lose())


@pytest.mark.budget
def test_most_calls_meeting_a_new_graph_is_said_once() -> None:
    """Graphs met once are not traced while tracing has not paid; when most
    calls meet one, compiling does not help: the budget says so."""
    from chainrule.compiler import budget

    b = budget.Budget()
    b.ran_eagerly(0.1, "first")
    b.traced(1.0, 0.4, 0.1)
    sights = [b.first_sight(("new", k)) for k in range(budget.WINDOW)]
    assert sights == ["eager"] * budget.WINDOW
    assert b.mostly_met_once()


@pytest.mark.budget
def test_a_function_too_small_to_gain_runs_eagerly_until_a_call_grows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first call runs eagerly, timed; one shorter than MIN_CALL makes
    the function run eagerly (one warning, no trace) while calls stay short;
    LONG_CALLS longer calls in a row hand it back to the budget (one alone,
    or two, is a pause: a garbage collection, another thread)."""
    from chainrule.compiler import budget

    monkeypatch.setattr(budget, "MIN_CALL", 1.0)  # every call short, whatever the load
    w = Value(0.5)
    f = chainrule.compile(lambda xs: sum(w * x for x in xs))
    with pytest.warns(CompileWarning, match="too short for a replay"):
        assert f([1.0]).data == 0.5
    assert f.traces == 0 and f.small is not None and f.stats()["eager"] == f.small
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # said once
        assert f([2.0, 4.0]).data == 3.0
        monkeypatch.setattr(budget, "MIN_CALL", 0.0)  # every call is now long enough
        monkeypatch.setattr(budget, "TRACE_FIXED", 0.0)  # and a trace 15 of its calls
        for _ in range(budget.LONG_CALLS - 1):
            assert f([2.0]).data == 1.0
        assert f.small is not None  # not yet: a pause
        monkeypatch.setattr(budget, "MIN_CALL", 1.0)
        assert f([2.0]).data == 1.0  # a short call: the count starts again
        monkeypatch.setattr(budget, "MIN_CALL", 0.0)
        for _ in range(budget.LONG_CALLS - 1):
            assert f([2.0]).data == 1.0
        assert f.small is not None
        assert f([2.0]).data == 1.0
        assert f.small is None and f.traces == 0
        out = f([2.0])  # grown: its graph (one float: the first call's) is met again
    assert f.traces == 1 and out.data == 1.0
    out.backward()
    assert w.grad == 2.0


@pytest.mark.budget
def test_the_warning_names_an_int_used_as_a_number(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 32's item 7: an int argument used as a number gives a new trace
    per value; the one warning says so (not "a value read from .data")."""
    from chainrule.compiler import budget

    monkeypatch.setattr(budget, "MIN_CALL", 0.0)  # not too small to gain, however fast
    monkeypatch.setattr(budget, "TRACE_FIXED", 0.0)  # and a trace 15 of its calls
    w = Value(1.5)
    f = chainrule.compile(lambda i: w * float(i))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(40):
            assert f(i).data == 1.5 * i
    messages = [str(c.message) for c in caught if issubclass(c.category, CompileWarning)]
    assert len(messages) == 1
    assert "int argument is used as the number" in messages[0]
    assert f.traces < 10


# --------------------------------------------------------------------------
# 8. Bit for bit: the same pick taken several times
# --------------------------------------------------------------------------


def test_an_entry_picked_several_times_gets_eagers_gradient_bit_for_bit() -> None:
    """Issue 32's item 8: ``a, b, c = T[i], T[i], T[i]`` is one entry taken
    three times; its gradient terms add up in the eager walk's order (they
    were three stand-ins summed apart: 1 ulp off at 3.4e16)."""
    import random

    rng = random.Random(3)
    for _ in range(40):
        T = [Value(rng.uniform(-1, 1) * 10 ** rng.randint(-3, 17)) for _ in range(4)]

        def f(i: int, y: float, T: list[Value] = T) -> Value:
            a, b, c = T[i], T[i], T[i]
            return a * y + b * b + c * y * y

        g = chainrule.compile(f)
        for i in range(4):
            y = rng.uniform(-1e8, 1e8)
            out = g(i, y)
            out.backward()
            compiled = [v.grad for v in T]
            for v in T:
                v.grad = 0.0
            expected = f(i, y)
            expected.backward()
            assert bits(out.data) == bits(expected.data)
            assert [bits(v.grad) for v in T] == [bits(x) for x in compiled]
            for v in T:
                v.grad = 0.0
    assert g.traces == 1
