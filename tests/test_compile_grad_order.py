"""chainrule.compile: a parameter's gradient through several compiled calls
in one graph is eager's bit for bit.

Eagerly, ``sum(f(x) for x in batch).backward()`` adds every chain-rule term
of the whole graph one by one into ``p.grad``, call after call:
``((g + t1) + t2) ...``. A compiled call is one node of that graph; its
backward adds its terms one by one to what ``p.grad`` holds when the walk
reaches it, not their sum from 0.0 (``g + (t1 + t2)``, which may differ in
the last bit). Each case runs many seeded draws of parameters and inputs,
eagerly and compiled, and compares every gradient by ``float.hex``: calls
summed by ``sum``, used in more arithmetic, a small MLP, Value arguments
(one passed to several calls, a parameter the function also reads passed
as one), entries picked by an int argument, infinities and nan, a leaf the
root does not depend on (the masked replay), and a backward pass from a
compiled output itself (which adds its sum to what the leaves held, as
``Value.backward`` does).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Any

import pytest

import chainrule
from chainrule import Value
from chainrule.compiler import CompiledValue
from conftest import close

pytestmark = pytest.mark.usefixtures("trace_every_graph")

SEEDS = range(60)


def _bits(values: Sequence[Value]) -> list[str]:
    return [float(v.grad).hex() for v in values]


def _compare(
    params: Sequence[Value],
    fn: Callable[..., Any],
    draw: Callable[[random.Random], Any],
    run: Callable[[Callable[..., Any], Any], tuple[Value, Sequence[Value]]],
    seeds: range = SEEDS,
    *,
    exact: bool = True,
) -> None:
    """For each seed: new data for ``params`` and the inputs ``draw`` makes,
    then ``run(f, inputs)`` (the root, and Values made for the call whose
    gradients count too) with ``fn`` and with it compiled; the root's
    backward pass leaves the same bits in every gradient (``exact=False``:
    the same to 1e-12)."""
    fast = chainrule.compile(fn, budget=False)
    differ = []
    replays = 0
    for seed in seeds:
        rng = random.Random(seed)
        for p in params:
            p.data = rng.uniform(-2.0, 2.0)
        inputs = draw(rng)
        got = []
        for f in (fn, fast):
            for p in params:
                p.grad = 0.0
            root, extra = run(f, inputs)
            root.backward()
            values = [*params, *extra]
            got.append(_bits(values) if exact else [v.grad for v in values])
            if f is fast:
                replays += _replays(root)
        same = got[0] == got[1] if exact else all(map(close, got[0], got[1]))
        if not same:
            differ.append(seed)
    assert replays, "the compiled calls ran eagerly"
    assert not differ, f"gradients differ from eager's for seeds {differ}"


def _replays(root: Value) -> int:
    """The compiled outputs in ``root``'s graph."""
    seen, stack, n = set(), [root], 0
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        n += isinstance(v, CompiledValue)
        stack.extend(v._prev)
    return n


def _floats(n: int) -> Callable[[random.Random], list[float]]:
    return lambda rng: [rng.uniform(-3.0, 3.0) for _ in range(n)]


# --------------------------------------------------------------------------
# calls summed, and used in more arithmetic
# --------------------------------------------------------------------------


def test_calls_summed_over_a_batch() -> None:
    w, b = Value(0.0), Value(0.0)

    def f(x: float) -> Value:
        return w * x + w * w * x + b * x * x

    def run(g: Callable[..., Any], xs: list[float]) -> tuple[Value, list[Value]]:
        return sum(g(x) for x in xs), []

    _compare([w, b], f, _floats(10), run)


def test_calls_in_more_arithmetic() -> None:
    w, b = Value(0.0), Value(0.0)

    def f(x: float) -> Value:
        return (w * x + b).tanh() * w + b * b * x

    def run(g: Callable[..., Any], xs: list[float]) -> tuple[Value, list[Value]]:
        a, c, d, e = (g(x) for x in xs)
        return (a * 3.0 + c) * d - e * (a + 1.5), []

    _compare([w, b], f, _floats(4), run)


def test_a_call_used_twice_and_a_square() -> None:
    w, b = Value(0.0), Value(0.0)

    def f(x: float) -> Value:
        return w * w * x + w * b + b * x

    def run(g: Callable[..., Any], xs: list[float]) -> tuple[Value, list[Value]]:
        outs = [g(x) for x in xs]
        return sum(o * o + o for o in outs), []

    _compare([w, b], f, _floats(6), run)


@pytest.mark.parametrize("chunk", [1, 3])  # 1: each parameter adds one term a call
@pytest.mark.parametrize("fused", [True, False])
def test_a_small_mlp_over_a_batch(fused: bool, chunk: int) -> None:
    model = chainrule.nn.MLP(2, [4, 4, 1], rng=random.Random(0), fused=fused)
    params = model.parameters()

    def f(batch: list[tuple[list[float], float]]) -> Value:  # a mini-batch's loss
        return sum((model(x) - y) ** 2 for x, y in batch)

    def draw(rng: random.Random) -> list[tuple[list[float], float]]:
        return [([rng.uniform(-2, 2), rng.uniform(-2, 2)], rng.uniform(-1, 1)) for _ in range(12)]

    def run(g: Callable[..., Any], batch: Any) -> tuple[Value, list[Value]]:
        chunks = [batch[k : k + chunk] for k in range(0, len(batch), chunk)]
        return sum(g(c) for c in chunks) * (1.0 / len(batch)), []

    _compare(params, f, draw, run, range(30))


def test_two_compiled_functions_in_one_graph() -> None:
    w, b = Value(0.0), Value(0.0)

    def f(x: float) -> Value:
        return w * x * w + b

    def h(x: float) -> Value:
        return b * x * w + w * x

    fast_h = chainrule.compile(h, budget=False)

    def run(g: Callable[..., Any], xs: list[float]) -> tuple[Value, list[Value]]:
        other = h if g is f else fast_h
        return sum(g(x) * other(x) + other(-x) for x in xs), []

    _compare([w, b], f, _floats(5), run)


# --------------------------------------------------------------------------
# Value arguments
# --------------------------------------------------------------------------


def test_value_arguments_one_passed_to_several_calls() -> None:
    w = Value(0.0)

    def f(v: Value, x: float) -> Value:
        return w * v * x + v * v + w * w * x

    def run(g: Callable[..., Any], xs: list[float]) -> tuple[Value, list[Value]]:
        vs = [Value(x) for x in xs[:3]]
        total = g(vs[0], xs[3]) + g(vs[1], xs[4]) + g(vs[0], xs[5]) * g(vs[2], xs[6])
        return total + g(vs[0], xs[7]), vs

    _compare([w], f, _floats(8), run)


def test_a_parameter_the_function_reads_passed_as_an_argument() -> None:
    w, u = Value(0.0), Value(0.0)

    def f(v: Value, x: float) -> Value:
        return w * v * x + w * x + v * v

    def run(g: Callable[..., Any], xs: list[float]) -> tuple[Value, list[Value]]:
        return g(w, xs[0]) + g(u, xs[1]) + g(w, xs[2]) + g(u, xs[3]), []

    _compare([w, u], f, _floats(4), run)


# --------------------------------------------------------------------------
# picks, infinities, the masked replay
# --------------------------------------------------------------------------


def test_entries_picked_by_an_int_argument() -> None:
    P = [Value(0.0) for _ in range(4)]

    def f(i: int, j: int, x: float) -> Value:
        return P[i] * x + P[2] * x * P[i] + P[j] * P[j]

    def draw(rng: random.Random) -> list[tuple[int, int, float]]:
        return [(rng.randrange(4), rng.randrange(4), rng.uniform(-3, 3)) for _ in range(10)]

    def run(g: Callable[..., Any], calls: Any) -> tuple[Value, list[Value]]:
        return sum(g(i, j, x) for i, j, x in calls), []

    _compare(P, f, draw, run)


def test_entries_of_a_table_picked_twice_to_within_rounding() -> None:
    """``T[i][j]``, both ints arguments: the first pick's aliases are
    picked, and an entry adds its alias's gradient, summed, after its own
    terms (docs/compile.md, "Gradient bits"): over several calls that sum
    is not added term by term to the running sum, so the bits may differ.
    Each leaf's running sum still counts once, and every term once."""
    T = [[Value(0.0) for _ in range(3)] for _ in range(3)]
    params = [p for row in T for p in row]

    def f(i: int, j: int, x: float) -> Value:
        return T[i][j] * x * T[i][j] + (T[j][i] * x).tanh() + T[0][1] * x

    def draw(rng: random.Random) -> list[tuple[int, int, float]]:
        return [(rng.randrange(3), rng.randrange(3), rng.uniform(-3, 3)) for _ in range(10)]

    def run(g: Callable[..., Any], calls: Any) -> tuple[Value, list[Value]]:
        return sum(g(i, j, x) for i, j, x in calls), []

    _compare(params, f, draw, run, exact=False)


def test_infinite_and_nan_gradients() -> None:
    w, b = Value(0.0), Value(0.0)

    def f(x: float, y: float) -> Value:  # w's terms overflow, b's do not
        return w * x * x * x + b * y + b * b * y

    def draw(rng: random.Random) -> list[tuple[float, float]]:
        xs = [rng.uniform(-3.0, 3.0) for _ in range(6)]
        xs[rng.randrange(6)] = rng.choice([1e200, -1e200])  # a term of w's inf
        if rng.random() < 0.5:
            xs[rng.randrange(6)] = rng.choice([1e200, -1e200, math.inf])
        return [(x, rng.uniform(-3.0, 3.0)) for x in xs]

    def run(g: Callable[..., Any], calls: Any) -> tuple[Value, list[Value]]:
        return sum(g(x, y) for x, y in calls), []

    _compare([w, b], f, draw, run, range(30))


def test_a_leaf_the_root_does_not_depend_on_keeps_its_running_sum() -> None:
    """``f2``'s second output makes the replay of its first's backward pass
    nan where the eager pass does not go (``0 * inf``), so it runs again
    masked: ``u``, which that output does not depend on, keeps what ``f1``
    added."""
    w, u = Value(0.0), Value(0.0)

    def f1(x: float) -> Value:
        return u * x + w * u * x

    def f2(x: float) -> tuple[Value, Value]:
        return w * x + w * w, (u * 0.0).log()

    fast_f1 = chainrule.compile(f1, budget=False)

    def run(g: Callable[..., Any], xs: list[float]) -> tuple[Value, list[Value]]:
        first = f1 if g is f2 else fast_f1
        return sum(first(x) + g(x)[0] for x in xs), []

    _compare([w, u], f2, _floats(5), run, range(30))


# --------------------------------------------------------------------------
# the root itself: its sum added to what the leaves held
# --------------------------------------------------------------------------


def test_backward_from_a_compiled_output_adds_to_what_leaves_held() -> None:
    w, b = Value(0.0), Value(0.0)

    def f(x: float) -> Value:
        return w * x + w * w * x + b * x * x

    fast = chainrule.compile(f, budget=False)
    for seed in SEEDS:
        rng = random.Random(seed)
        w.data, b.data = rng.uniform(-2, 2), rng.uniform(-2, 2)
        xs = [rng.uniform(-3, 3) for _ in range(5)]
        got = []
        for g in (f, fast):
            w.grad = b.grad = 0.0
            for x in xs:  # no zero_grad between: each pass adds to the last
                g(x).backward()
            got.append(_bits([w, b]))
        assert got[0] == got[1], seed
