"""Values that enter a compiled function from outside its graph, or along
paths the trace does not see: eager's numbers, or one CompileWarning and
an eager run, never a number frozen at the trace."""

from __future__ import annotations

import collections
import functools
import itertools
import json
import math
import random
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import chainrule
from chainrule import Value, no_grad
from chainrule.compiler import CompileWarning

pytestmark = pytest.mark.usefixtures("trace_every_graph")


def data(out: Any) -> Any:
    return out.data if isinstance(out, Value) else out


def compiled_quietly(f: Callable[..., Any], calls: list[tuple[Any, ...]]) -> Any:
    """The compiled ``f``, checked against eager on each call, no warning."""
    fast = chainrule.compile(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for args in calls:
            assert data(fast(*args)) == data(f(*args))
    return fast


def runs_eagerly(f: Callable[..., Any], calls: int, match: str, reset: Callable[[], Any]) -> None:
    """``f()`` compiled gives eager's numbers on each call (``reset`` puts
    the outside state back between the two runs), with one warning."""
    reset()
    eager = [data(f()) for _ in range(calls)]
    fast = chainrule.compile(f)
    reset()
    with pytest.warns(CompileWarning, match=match) as caught:
        compiled = [data(fast()) for _ in range(calls)]
    assert compiled == eager
    assert len([w for w in caught if issubclass(w.category, CompileWarning)]) == 1


# --------------------------------------------------------------------------
# 1. State from outside the graph: random numbers, clocks, files, iterators
# --------------------------------------------------------------------------

W = Value(2.0)
PARAMS = [Value(1.0 + 0.1 * k) for k in range(5)]
RNG = random.Random(0)
GEN = np.random.default_rng(0)


def noisy() -> Value:
    return W * (1.0 + random.random())


def dropout() -> Value:
    return sum((p if random.random() > 0.5 else p * 0.0 for p in PARAMS), Value(0.0))


def choose() -> Value:
    return random.choice(PARAMS) * W


def own_generator() -> Value:
    return W * RNG.random()


def numpy_noise() -> Value:
    return W * float(GEN.normal())


def numpy_module() -> Value:
    return W * float(np.random.rand())


@pytest.mark.parametrize(
    ("f", "name"),
    [
        (noisy, "random.random"),
        (dropout, "random.random"),
        (choose, "random.choice"),
        (own_generator, "Random.random"),
        (numpy_noise, "Generator.normal"),
        (numpy_module, "RandomState.rand"),
    ],
)
def test_random_numbers_run_eagerly_with_a_warning_naming_the_call(
    f: Callable[[], Value], name: str
) -> None:
    def reset() -> None:
        global RNG, GEN
        random.seed(2)
        np.random.seed(2)
        RNG = random.Random(0)
        GEN = np.random.default_rng(0)

    runs_eagerly(f, 4, f"calls {name}, whose result or effect changes from call to call", reset)


def clock() -> Value:
    return W * (time.perf_counter() - time.perf_counter())


def test_a_clock_runs_eagerly() -> None:
    fast = chainrule.compile(clock)
    with pytest.warns(CompileWarning, match="time.perf_counter"):
        fast()


def test_a_file_read_inside_the_function_runs_eagerly(tmp_path: Path) -> None:
    path = tmp_path / "scale.txt"

    def scaled() -> Value:
        with open(path) as f:
            return W * float(f.read())

    fast = chainrule.compile(scaled)
    seen = []
    with pytest.warns(CompileWarning, match="calls io.open"):
        for text in ("1.5", "2.5", "-4.0"):
            path.write_text(text)
            seen.append((fast().data, scaled().data))
    assert seen == [(3.0, 3.0), (5.0, 5.0), (-8.0, -8.0)]


def test_a_file_opened_outside_and_read_inside_runs_eagerly(tmp_path: Path) -> None:
    path = tmp_path / "scales.txt"
    path.write_text("1.5\n2.5\n-4.0\n")
    with open(path) as handle:

        def scaled() -> Value:
            return W * float(handle.readline())

        fast = chainrule.compile(scaled)
        with pytest.warns(CompileWarning, match="readline"):
            got = [fast().data for _ in range(3)]
    assert got == [3.0, 5.0, -8.0]


def make_loaders() -> dict[str, Callable[[], Iterator[float]]]:
    def gen() -> Iterator[float]:
        yield from (1.0, 2.0, 3.0)

    return {
        "list": lambda: iter([1.0, 2.0, 3.0]),
        "generator": gen,
        "count": lambda: itertools.count(1.0),
        "cycle": lambda: itertools.cycle([1.0, 2.0, 3.0]),
    }


@pytest.mark.parametrize("kind", sorted(make_loaders()))
def test_next_on_an_iterator_made_outside_runs_eagerly(kind: str) -> None:
    loader = make_loaders()[kind]()

    def step() -> Value:
        return W * next(loader)

    def reset() -> None:
        nonlocal loader
        loader = make_loaders()[kind]()

    runs_eagerly(step, 3, "the next item of an iterator made outside", reset)


def test_an_iterator_made_outside_and_consumed_by_a_loop_or_a_call_runs_eagerly() -> None:
    loader = iter([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])

    def by_loop() -> Value:
        total = Value(0.0)
        for x in loader:
            total = total + W * x
            break
        return total

    def by_call() -> Value:
        return W * sum(itertools.islice(loader, 2))

    def reset() -> None:
        nonlocal loader
        loader = iter([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])

    runs_eagerly(by_loop, 3, "iterates over an iterator made outside", reset)
    runs_eagerly(by_call, 2, "an iterator made outside the function", reset)


def test_iterators_made_inside_the_function_replay() -> None:
    def first(xs: list[float]) -> Value:
        it = iter(xs)
        a = next(it)
        b = next(x for x in xs if x > 0.0)
        c = next(itertools.count(3))
        return W * a + W * b * c

    fast = compiled_quietly(first, [([1.0, 2.0],), ([3.0, 4.0],)])
    assert fast.traces == 1


# --------------------------------------------------------------------------
# 2. A node made under no_grad() inside fn
# --------------------------------------------------------------------------


def test_a_value_made_under_no_grad_inside_the_function_is_not_frozen() -> None:
    w, b = Value(0.5), Value(-1.0)

    def f(x: float) -> Value:
        with no_grad():
            target = w * x
        return (b - target.data) ** 2 + (b - target)

    fast = chainrule.compile(f)
    with pytest.warns(CompileWarning, match="no_grad"):
        got = [(fast(x).data, f(x).data) for x in (1.0, 2.0, 3.0)]
    assert [g for g, _ in got] == [e for _, e in got] == [0.75, 2.0, 3.75]


# --------------------------------------------------------------------------
# 3. max/min over tuples: an argmax
# --------------------------------------------------------------------------

WS = [Value(0.5), Value(-1.0), Value(2.0)]


def argmax(xs: list[float]) -> Value:
    logits = [w * x for w, x in zip(WS, xs)]
    _, best = max((v.data, k) for k, v in enumerate(logits))
    return logits[best]


def argmin(xs: list[float]) -> Value:
    logits = [w * x for w, x in zip(WS, xs)]
    _, best = min((v.data, k) for k, v in enumerate(logits))
    return logits[best]


def argmax_zip(xs: list[float]) -> Value:
    logits = [w * x for w, x in zip(WS, xs)]
    _, best = max(zip([v.data for v in logits], range(3)))
    return logits[best]


def by_sorted(xs: list[float]) -> Value:
    logits = [w * x for w, x in zip(WS, xs)]
    return logits[sorted((v.data, k) for k, v in enumerate(logits))[-1][1]]


@pytest.mark.parametrize("f", [argmax, argmin, argmax_zip, by_sorted])
def test_an_argmax_over_tuples_follows_the_values(f: Callable[[list[float]], Value]) -> None:
    compiled_quietly(f, [([1.0, 1.0, 1.0],), ([9.0, 1.0, 1.0],), ([1.0, -9.0, 1.0],)])


def test_max_over_reads_is_still_one_trace() -> None:
    def softmax_top(xs: list[float]) -> Value:
        logits = [w * x for w, x in zip(WS, xs)]
        top = max(v.data for v in logits)
        return sum(((v - top).exp() for v in logits), Value(0.0))

    fast = compiled_quietly(softmax_top, [([1.0, 1.0, 1.0],), ([9.0, 1.0, 1.0],)])
    assert fast.traces == 1


# --------------------------------------------------------------------------
# 4. A C function applied through map, filter, sorted(key=), reduce
# --------------------------------------------------------------------------


def softmax_by_map(ps: list[Value]) -> Value:
    logits = [p * 1.5 for p in ps]
    e = list(map(math.exp, [v.data for v in logits]))
    return sum((v * (ei / sum(e)) for v, ei in zip(logits, e)), Value(0.0))


def by_map_tanh(ps: list[Value]) -> Value:
    logits = [p * 1.5 for p in ps]
    return ps[0] * sum(map(math.tanh, [v.data for v in logits]))


def by_key(ps: list[Value]) -> Value:
    d = [p.data * 1.5 for p in ps]
    return ps[0] * sorted(d, key=math.fabs)[0] + ps[1] * max(d, key=math.fabs)


def by_lambda_key(ps: list[Value]) -> Value:
    logits = [p * 1.5 for p in ps]
    return sorted(logits, key=lambda v: math.fabs(v.data))[0] * 2.0


def by_reduce(ps: list[Value]) -> Value:
    return ps[0] * functools.reduce(math.atan2, [p.data for p in ps])


def by_starmap(ps: list[Value]) -> Value:
    return ps[0] * sum(itertools.starmap(math.hypot, [(p.data, 1.0) for p in ps]))


@pytest.mark.parametrize(
    "f", [softmax_by_map, by_map_tanh, by_key, by_lambda_key, by_reduce, by_starmap]
)
def test_a_c_function_applied_through_a_builtin_is_a_guard(
    f: Callable[[list[Value]], Value],
) -> None:
    fast = chainrule.compile(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for values in ([0.5, -1.0, 2.0], [-1.0, 3.0, 0.25], [1.0, 3.0, 0.25], [0.5, -1.0, 2.0]):
            ps = [Value(v) for v in values]
            assert fast(ps).data == f(ps).data


# --------------------------------------------------------------------------
# 5. printf-style formatting
# --------------------------------------------------------------------------


def quantised(x: float) -> Value:
    v = WS[0] * x
    return v * float("%.2f" % v.data) + v * float("%e" % (v.data,))  # noqa: UP031


def quantised_bytes(x: float) -> Value:
    v = WS[0] * x
    return v * float(b"%.2f" % v.data) + float("%(a).1f" % {"a": x})  # noqa: UP031


@pytest.mark.parametrize("f", [quantised, quantised_bytes])
def test_printf_formatting_of_a_read_is_a_guard(f: Callable[[float], Value]) -> None:
    compiled_quietly(f, [(1.0,), (3.3,), (-2.0,)])


# --------------------------------------------------------------------------
# 6. A read float that outlives its trace
# --------------------------------------------------------------------------


def test_a_read_float_kept_after_its_trace_is_its_number_in_another_trace() -> None:
    w = Value(0.5)
    recent: collections.deque[float] = collections.deque(maxlen=10)

    def step(x: float) -> Value:
        loss = (w * x - 1.0) ** 2
        recent.append(loss.data)
        return loss

    chainrule.compile(step)(1.0)
    scale = recent[0]
    assert scale == 0.25 and scale.__class__ is float

    def g(x: float) -> Value:
        return w * x * scale

    fg = chainrule.compile(g)
    assert fg(1.0).data == g(1.0).data == 0.125
    w.data = 3.0
    assert fg(1.0).data == g(1.0).data == 0.75


# --------------------------------------------------------------------------
# 7. x.__class__ of a float argument
# --------------------------------------------------------------------------


def test_the_class_of_a_float_argument_is_float() -> None:
    def f(x: float) -> Value:
        return WS[0] * (3.0 if x.__class__ is float else 1.0) * x

    compiled_quietly(f, [(1.0,), (2.0,)])


# --------------------------------------------------------------------------
# 8. Int operations that read the int whole
# --------------------------------------------------------------------------

TABLE = [Value(0.1 * i) for i in range(12)]


def by_divmod(i: int) -> Value:
    row, col = divmod(i, 3)
    a, b = divmod(7, i)
    return TABLE[row * 3 + col] * 2.0 + TABLE[a + b]


def by_pow(i: int) -> Value:
    return TABLE[pow(i, 2, 5)] + TABLE[pow(2, i, 5)]


def by_json(i: int) -> Value:
    return TABLE[0] * len(json.dumps(i)) + TABLE[1] * len(json.dumps([1, 2]))


@pytest.mark.parametrize("f", [by_divmod, by_pow, by_json])
def test_int_arguments_read_whole_give_eager_results(f: Callable[[int], Value]) -> None:
    compiled_quietly(f, [(4,), (2,), (5,), (4,)])


# --------------------------------------------------------------------------
# 9. Errors: eager's type and message
# --------------------------------------------------------------------------


def times_big(i: int) -> Value:
    return TABLE[1] * 2**i


def over_big(i: int) -> Value:
    return TABLE[1] / 2**i


def big_over(i: int) -> Value:
    return 2**i / TABLE[1]


def read_root(x: float) -> Value:
    return TABLE[1] * ((TABLE[1] * x).data ** 0.5)


@pytest.mark.parametrize(
    ("f", "arg"), [(times_big, 1100), (over_big, 1100), (big_over, 1100), (read_root, -4.0)]
)
def test_errors_are_eagers(f: Callable[[Any], Value], arg: Any) -> None:
    with pytest.raises(Exception) as eager:
        f(arg)
    with pytest.raises(eager.type) as compiled:
        chainrule.compile(f)(arg)
    assert str(compiled.value) == str(eager.value)
