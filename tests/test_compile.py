"""chainrule.compile: replayed graphs against the eager engine.

Forward values bit for bit, gradients to 1e-12 relative, on random graphs
of every op of the scalar engine; retracing on a new structure; reads of
``.data`` while tracing; what falls back to eager, and says so.
"""

from __future__ import annotations

import math
import operator
import random
import warnings
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import chainrule
from chainrule import Primitive, Value, add_n, dot, fused
from chainrule.compiler import CompileWarning, rules
from chainrule.value import primitives, sums
from conftest import close

pytestmark = pytest.mark.usefixtures("trace_every_graph")


# --------------------------------------------------------------------------
# The rules on arrays are the table's, bit for bit
# --------------------------------------------------------------------------

SPECIALS = [0.0, -0.0, 1.0, -1.0, 0.5, 1e-300, -1e-300, 1e300, -1e300, math.inf, -math.inf]
SPECIALS += [math.nan, 2.0**-1074, 3.7, -2.25]


def same(a: float, b: float) -> bool:
    """Bit for bit, as far as Python can tell: equal with the same sign, or both nan."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def _columns(k: int, n: int = 400, seed: int = 0) -> np.ndarray:
    rng = random.Random(seed)
    pool = SPECIALS + [rng.uniform(-5, 5) for _ in range(40)]
    return np.array([[rng.choice(pool) for _ in range(n)] for _ in range(k)])


ARRAY_FORWARDS = sorted(
    [*rules.SAME_ON_ARRAYS - {rules.SUM_TERMS}, *rules.SELECTIONS], key=lambda p: p.name
)


@pytest.mark.parametrize("fn", ARRAY_FORWARDS, ids=lambda p: p.name)
def test_array_forward_is_the_float_forward_bit_for_bit(fn: Primitive) -> None:
    k = {"neg": 1, "ReLU": 1, "+": 2, "-": 2, "*": 2, "/": 2, "max": 2, "min": 2}.get(fn.name, 7)
    if fn is sums.DOT:
        k = 6
    X = _columns(k)
    c: Any = None
    with np.errstate(all="ignore"):
        ours = rules.forward_function(fn, small=False)(X, c)
    floats = rules.forward_function(fn, small=True)(X, c)  # the table's function per node
    assert all(same(a, b) for a, b in zip(ours.tolist(), floats.tolist()))


C_FORWARDS = [primitives.EXP] + [primitives.pow_const(c) for c in (-1.0, -0.5, 0.5, 2.0, 3.0, -2.0)]


@pytest.mark.parametrize("fn", C_FORWARDS, ids=lambda p: p.name)
@pytest.mark.parametrize("pool", ["specials", "positive"])
def test_forward_by_the_c_function_is_the_tables_bit_for_bit(fn: Primitive, pool: str) -> None:
    """exp and x ** c run as ``map(math.exp, ...)`` / ``math.pow`` over a
    group (where that raises, or for 0.5 and -0.5 off the positive floats,
    the table's function per node): the table's results, nan's sign too."""
    X = _columns(1, n=300, seed=len(fn.name))
    with np.errstate(all="ignore"):
        if pool == "positive":  # no overflow: the whole group by the C function
            X = np.nan_to_num(np.abs(X) % 50.0, nan=1.5) + 0.25
        ours = rules.forward_function(fn, small=False)(X, None).tolist()
    expected = [fn.forward(x) for x in X[0].tolist()]
    assert all(
        same(a, b) and math.copysign(1.0, a) == math.copysign(1.0, b)
        for a, b in zip(ours, expected)
    )
    assert rules._c_forward(fn) is not None


def test_pow_exponent_is_found_only_for_the_tables_primitive() -> None:
    assert rules._pow_exponent(primitives.pow_const(-0.5)) == -0.5
    assert rules._pow_exponent(primitives.pow_const(0.123456789)) is None  # **0.123457: not it
    assert rules._pow_exponent(Primitive("**2", lambda x: x, lambda M, x, out: (1.0,))) is None
    assert rules._pow_exponent(primitives.POW) is None


@pytest.mark.parametrize("kinds", [(1,), (2,), (1, 2, 2), (2, 1, 2, 1, 1), (2,) * 9])
@pytest.mark.parametrize("start", [None, 0.0, -2.5])
def test_running_sums_match_the_table(kinds: tuple[int, ...], start: float | None) -> None:
    X = _columns(sum(kinds), n=300, seed=len(kinds))
    n = X.shape[1]
    starts = None if start is None else np.full(n, start)
    sums = rules.RunningSums(kinds)
    with np.errstate(all="ignore"):
        out = sums.forward(X, (kinds, starts))
        local = sums.local(X, (kinds, starts), out)
    for j in range(n):
        col = X[:, j].tolist()
        expected = rules.SUM_TERMS.forward(*col, (kinds, start))
        assert same(out[j], expected)
        d = rules.SUM_TERMS.derivative(primitives.FLOAT, *col, (kinds, start), expected)  # type: ignore[misc]
        assert all(same(a, b) for a, b in zip(local[:, j].tolist(), d))


@pytest.mark.parametrize("shape", [(1, 7), (2, 1), (5, 1), (3, 2), (40, 3), (17, 300), (700, 5)])
@pytest.mark.parametrize("start", [-0.0, 0.0])
@pytest.mark.parametrize("reduce", [True, False], ids=["reduce", "loop"])
def test_sum_rows_adds_row_after_row_from_start(
    shape: tuple[int, int], start: float, reduce: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """program.sum_rows is ``((start + T[0]) + T[1]) + ...`` per column, as a
    chain of ``+`` (start -0.0) or a gradient from 0.0 adds: values that
    cancel, vanish or overflow in that order only, signed zeros, inf, nan
    (with NumPy's reduce, and with the loop where a probe finds it not in
    order)."""
    from chainrule.compiler import program

    assert program.REDUCE_IN_ORDER  # NumPy's reduce down the rows is in order here
    monkeypatch.setattr(program, "REDUCE_IN_ORDER", reduce)
    rng = random.Random(shape[0] * 1000 + shape[1])
    pool = SPECIALS + [1e16, -1e16, 2.0**-53, 1.0, 3.0, 1e308, -1e308]
    T = np.array([[rng.choice(pool) for _ in range(shape[1])] for _ in range(shape[0])])
    T[:, 0] = -0.0  # a column of negative zeros: -0.0 from -0.0, 0.0 from 0.0
    if shape[1] > 1:
        T[:, 1] = [1.0] + [2.0**-53] * (shape[0] - 1)  # each tiny term vanishes
    with np.errstate(all="ignore"):
        got = program.sum_rows(T, start).tolist()
        into = np.full(shape[1], 7.0)
        program.sum_rows(T, start, into)
    for j, column in enumerate(T.T.tolist()):
        total = start
        for x in column:
            total += x
        assert same(got[j], total), (j, got[j], total)
        assert same(into[j], total)
    assert same(got[0], start)


# --------------------------------------------------------------------------
# Random graphs of every op: compiled against eager
# --------------------------------------------------------------------------

CUBE = Primitive("cube", lambda x: x * x * x, lambda M, x, out: (3 * x * x,))

UNARY = {
    "exp": lambda x: (x * 0.1).exp(),
    "log": lambda x: x.log(),
    "sqrt": lambda x: x.sqrt(),
    "tanh": lambda x: x.tanh(),
    "sigmoid": lambda x: x.sigmoid(),
    "softplus": lambda x: x.softplus(),
    "relu": lambda x: x.relu(),
    "abs": lambda x: abs(x),
    "sin": lambda x: x.sin(),
    "cos": lambda x: x.cos(),
    "neg": lambda x: -x,
    "square": lambda x: x**2,
    "pow_half": lambda x: x**0.5,
    "rpow": lambda x: 2.0**x,
    "add_c": lambda x: x + 1.5,
    "sub_c": lambda x: x - 0.25,
    "rsub_c": lambda x: 3.0 - x,
    "mul_c": lambda x: x * -1.25,
    "div_c": lambda x: x / 3.0,
    "rdiv_c": lambda x: 2.0 / x,
    "cube": lambda x: CUBE(x),
}
BINARY = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "div": operator.truediv,
    "pow": lambda a, b: abs(a) ** b,
    "max": lambda a, b: a.max(b),
    "min": lambda a, b: a.min(b),
}
NARY = [
    "dot",
    "affine",
    "affine_relu",
    "affine_const",
    "affine_const_relu",
    "add_n",
    "sum_products",
]
NARY += ["sum_values", "softmax", "cross_entropy", "rmsnorm", "stable_softmax"]

instruction = st.one_of(
    st.tuples(st.just("u"), st.sampled_from(sorted(UNARY)), st.integers(0, 10**6)),
    st.tuples(
        st.just("b"), st.sampled_from(sorted(BINARY)), st.integers(0, 10**6), st.integers(0, 10**6)
    ),
    st.tuples(st.just("n"), st.sampled_from(NARY), st.integers(0, 10**6), st.integers(1, 4)),
)
floats = st.floats(-3, 3, allow_nan=False)


def build(program: list[tuple[Any, ...]], params: list[Value]) -> Value:
    nodes: list[Any] = list(params)
    for ins in program:
        pick = lambda k: nodes[k % len(nodes)]  # noqa: E731
        if ins[0] == "u":
            nodes.append(UNARY[ins[1]](pick(ins[2])))
        elif ins[0] == "b":
            nodes.append(BINARY[ins[1]](pick(ins[2]), pick(ins[3])))
        else:
            nodes.append(_nary(ins[1], [pick(ins[2] + 7 * i) for i in range(ins[3] + 1)]))
    tail = nodes[len(params) :] or nodes
    return sum(v * (0.5 + 0.1 * i) for i, v in enumerate(tail[-4:]))  # type: ignore[no-any-return]


def _nary(name: str, xs: list[Value]) -> Value:
    n = len(xs)
    consts = [0.5 - 0.3 * i for i in range(n)]
    if name == "dot":
        return dot(xs, xs[::-1])
    if name == "affine":
        return dot(xs, xs[::-1], xs[0])
    if name == "affine_relu":
        return dot(xs, xs[::-1], xs[-1], activation="relu")
    if name == "affine_const":
        return dot(xs, consts, xs[0])
    if name == "affine_const_relu":
        return dot(xs, consts, xs[-1], activation="relu")
    if name == "add_n":
        return add_n(xs)
    if name == "sum_products":  # one running sum (SUM_TERMS)
        return sum(a * b for a, b in zip(xs, xs[1:] + xs[:1]))  # type: ignore[no-any-return]
    if name == "sum_values":  # a chain of +, one running sum when compiled
        return sum(xs)  # type: ignore[no-any-return]
    if name == "softmax":
        return fused.softmax(xs)[0]
    if name == "cross_entropy":
        return fused.cross_entropy(xs, n - 1)
    if name == "rmsnorm":
        return fused.rmsnorm(xs)[-1]
    top = max(v.data for v in xs)  # microgpt's stable softmax
    exps = [(v - top).exp() for v in xs]
    total = sum(exps)
    return exps[0] / total


def check(fn: Any, params: list[Value], compiled: Any) -> None:
    """compiled() against fn(): values bit for bit, leaf gradients to 1e-12
    (relative to the largest one)."""
    eager = fn()
    for p in params:
        p.grad = 0.0
    eager.backward()
    expected = [p.grad for p in params]
    sizes = _magnitudes(eager, params)
    out = compiled()
    assert same(out.data, eager.data), (out.data, eager.data)
    for p in params:
        p.grad = 0.0
    out.backward()
    # The replay adds a node's contributions in another order than the eager
    # pass: where they cancel, the difference is relative to their size.
    for p, g, size in zip(params, expected, sizes):
        assert close(p.grad, g, atol=1e-12 * size), (p.grad, g, size)


def _magnitudes(root: Value, params: list[Value]) -> list[float]:
    """For each param, the sum over all paths of |product of local
    derivatives|: the size of the terms its gradient is the sum of."""
    order, _ = chainrule.value.walk.topological_order(root)
    size: dict[Value, float] = {root: 1.0}
    for v in order:
        g = size.get(v, 0.0)
        for child, d in zip(v._children, v._local_grads):
            term = abs(d) * g
            size[child] = size.get(child, 0.0) + (term if math.isfinite(term) else 0.0)
    return [size.get(p, 0.0) for p in params]


@given(
    st.lists(instruction, min_size=1, max_size=14),
    st.lists(floats, min_size=1, max_size=5),
    st.randoms(use_true_random=False),
)
def test_random_graphs_replay_as_eager(program: Any, xs: list[float], rng: random.Random) -> None:
    params = [Value(x) for x in xs]
    fn = lambda: build(program, params)  # noqa: E731
    compiled = chainrule.compile(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        check(fn, params, compiled)  # the trace
        for _ in range(3):  # replays on new values
            for p in params:
                p.data = rng.uniform(-3, 3)
            check(fn, params, compiled)
    assert compiled.eager_reason is None


def test_every_op_is_in_the_random_graphs() -> None:
    """The random graphs reach every primitive of the table (fused ones,
    the running sum, a user's own included)."""
    seen: set[str] = set()
    params = [Value(0.3 * i - 0.4) for i in range(4)]
    for name in UNARY:
        seen.add(UNARY[name](params[1])._op)
    for name in BINARY:
        seen.add(BINARY[name](params[1], params[2])._op)
    for name in NARY:
        seen.add(_nary(name, params)._op)
    table = {p.name for p in vars(primitives).values() if isinstance(p, Primitive) and p.name}
    assert table <= seen | {"/"}, table - seen  # true division: outside micrograd's range only


def test_true_division_outside_the_reciprocal_range_retraces() -> None:
    a, b = Value(1.0), Value(4.0)
    compiled = chainrule.compile(lambda: a / b)
    assert compiled().data == 0.25
    b.data = 1e-310  # a * b**-1 would overflow: the engine divides once
    out = compiled()
    assert same(out.data, (a / b).data) and compiled.retraces == 1


# --------------------------------------------------------------------------
# Keys, retracing, arguments
# --------------------------------------------------------------------------


def test_structure_change_retraces_and_keys_are_visible() -> None:
    w = Value(2.0)
    compiled = chainrule.compile(lambda xs: sum(w * x for x in xs), max_traces=2)
    assert compiled([1.0, 2.0]).data == 6.0
    assert compiled([3.0, 4.0]).data == 14.0  # floats are inputs: a replay
    assert compiled.traces == 1
    assert compiled([1.0, 2.0, 3.0]).data == 12.0  # a longer list: a new trace
    assert compiled.traces == 2
    assert compiled.keys() == [
        ((list, 2, (float, float)),),
        ((list, 3, (float, float, float)),),
    ] or (len(compiled.keys()) == 2)
    compiled([1.0])
    assert compiled.traces == 3 and len(compiled.keys()) == 2  # bounded by max_traces


@given(st.lists(st.lists(floats, min_size=1, max_size=6), min_size=1, max_size=8))
def test_new_lengths_retrace_and_replays_match_eager(batches: list[list[float]]) -> None:
    w = [Value(0.3), Value(-0.7)]

    def f(xs: list[float]) -> Value:
        return sum((w[i % 2] * x).tanh() for i, x in enumerate(xs)) + w[0] * w[1]

    compiled = chainrule.compile(f, max_traces=16)
    for xs in batches:
        out, expected = compiled(xs), f(xs)
        assert same(out.data, expected.data)
    assert compiled.traces == len({len(xs) for xs in batches})


@given(
    st.lists(floats, min_size=2, max_size=5),
    st.lists(st.lists(floats, min_size=5, max_size=5), min_size=1, max_size=6),
    st.floats(-1, 1),
)
def test_reads_of_data_never_go_stale(
    start: list[float], updates: list[list[float]], threshold: float
) -> None:
    """Branches on reads, max over reads, reads used as constants and as
    leaves: after any change of the leaves, the replay is the eager result."""
    xs = [Value(x) for x in start]

    def f() -> Value:
        top = max(v.data for v in xs)
        out = sum((v - top).exp() for v in xs)
        for v in xs:
            out = out * v if v.data > threshold else out + v  # a guard per node
        return out + Value(min(v.data for v in xs)) * xs[0]

    compiled = chainrule.compile(f)
    check(f, xs, compiled)
    for new in updates:
        for v, x in zip(xs, new):
            v.data = x
        check(f, xs, compiled)


def test_an_int_that_picks_a_list_entry_is_one_trace() -> None:
    table = [Value(1.0), Value(10.0), Value(100.0)]
    compiled = chainrule.compile(lambda i: table[i] * 2.0)
    assert [compiled(i).data for i in (0, 1, 2, 1, -1)] == [2.0, 20.0, 200.0, 20.0, 200.0]
    assert compiled.traces == 1


def test_an_int_that_shapes_the_graph_traces_per_value() -> None:
    w = Value(1.5)
    compiled = chainrule.compile(lambda n: sum(w * k for k in range(n)))
    assert [compiled(n).data for n in (2, 3, 2, 4)] == [1.5, 4.5, 1.5, 9.0]
    assert compiled.traces == 3


def test_value_arguments_are_bound_by_position() -> None:
    w = Value(3.0)
    compiled = chainrule.compile(lambda x: (w * x).tanh())
    x1, x2 = Value(0.1), Value(-0.2)
    compiled(x1)
    out = compiled(x2)
    assert compiled.traces == 1 and same(out.data, math.tanh(3.0 * -0.2))
    out.backward()
    assert close(x2.grad, 3.0 * (1 - math.tanh(-0.6) ** 2)) and x1.grad == 0.0
    assert close(w.grad, -0.2 * (1 - math.tanh(-0.6) ** 2))


def test_outputs_keep_their_structure_and_backward_accumulates() -> None:
    a, b = Value(1.5), Value(-2.0)
    compiled = chainrule.compile(lambda: {"sum": a + b, "parts": [a * b, (a - b).relu()], "n": 2})
    compiled()
    out = compiled()
    assert out["n"] == 2 and out["sum"].data == -0.5 and out["parts"][0].data == -3.0
    out["parts"][1].backward()
    out["parts"][1].backward()  # twice without zero_grad: twice the gradient
    assert (a.grad, b.grad) == (2.0, -2.0)


# --------------------------------------------------------------------------
# Reads of .data while tracing
# --------------------------------------------------------------------------


def stable_softmax_loss(logits: list[Value]) -> Value:
    top = max(v.data for v in logits)  # microgpt's stable softmax
    exps = [(v - top).exp() for v in logits]
    total = sum(exps)
    return -(exps[1] / total).log()


def test_stable_softmax_max_is_recomputed_not_frozen() -> None:
    logits = [Value(x) for x in (0.5, 2.0, -1.0)]
    compiled = chainrule.compile(lambda: stable_softmax_loss(logits))
    compiled()
    for new in ([3.0, 0.1, 0.2], [0.0, 0.0, 5.0], [-1.0, -1.0, -1.0]):  # another max each time
        for v, x in zip(logits, new):
            v.data = x
        check(lambda: stable_softmax_loss(logits), logits, compiled)
    assert compiled.traces == 1  # the max is replayed, no guard needed


def test_a_branch_on_data_is_a_guard() -> None:
    x = Value(1.0)

    def f() -> Value:
        return x * 2.0 if x.data > 0 else x * -3.0

    compiled = chainrule.compile(f)
    assert compiled().data == 2.0
    x.data = 4.0
    assert compiled().data == 8.0 and compiled.traces == 1
    x.data = -1.0  # the branch goes the other way: traced again
    out = compiled()
    assert out.data == 3.0 and compiled.traces == 2 and compiled.retraces == 1
    out.backward()
    assert x.grad == -3.0


def test_accuracy_inside_the_function_is_never_stale() -> None:
    scores = [Value(0.5), Value(-0.5)]
    labels = [1, -1]

    def f() -> tuple[Value, float]:
        loss = sum((1 + -y * s).relu() for y, s in zip(labels, scores))
        accuracy = sum((s.data > 0) == (y > 0) for s, y in zip(scores, labels)) / len(labels)
        return loss, accuracy

    compiled = chainrule.compile(f)
    assert compiled()[1] == 1.0
    scores[0].data = -0.25
    loss, accuracy = compiled()
    assert accuracy == 0.5 and same(loss.data, f()[0].data)


def test_a_read_used_as_an_exponent_is_guarded_whole() -> None:
    x = Value(2.0)
    compiled = chainrule.compile(lambda: x**x.data)  # the exponent picks a primitive
    assert compiled().data == 4.0
    x.data = 3.0
    assert compiled().data == 27.0 and compiled.retraces == 1


def test_writing_data_inside_the_function_runs_eagerly() -> None:
    x = Value(2.0)

    def f() -> Value:
        x.data = x.data + 1.0
        return x * 2.0

    compiled = chainrule.compile(f)
    with pytest.warns(CompileWarning, match="writes .data"):
        assert compiled().data == 6.0
    assert compiled().data == 8.0 and "writes .data" in str(compiled.eager_reason)


def test_zero_grad_inside_the_function_runs_eagerly() -> None:
    x = Value(2.0)

    def f() -> Value:
        x.grad = 0.0  # a replay would not repeat it
        return x * x

    compiled = chainrule.compile(f)
    with pytest.warns(CompileWarning, match=r"writes \.grad"):
        compiled().backward()
    compiled().backward()
    assert x.grad == 4.0  # zeroed by each (eager) call


def test_a_read_of_grad_inside_the_function_runs_eagerly() -> None:
    """A replay would use the gradient the trace read: refused, so every
    call sees the gradient of its time."""
    w = Value(2.0)

    def f() -> Value:
        return w * w.grad

    compiled = chainrule.compile(f)
    w.grad = 1.0
    with pytest.warns(CompileWarning, match=r"reads \.grad"):
        assert compiled().data == 2.0
    for g in (5.0, 7.0):
        w.grad = g
        assert compiled().data == 2.0 * g
    assert compiled.hits == 0


def test_read_floats_in_arithmetic_and_as_leaves() -> None:
    x = Value(2.0)

    def f() -> Value:
        c = 2.0 * x.data + 1.0  # arithmetic on a read: followed
        return x * c + Value(x.data) * x  # a detached copy: a recomputed constant

    compiled = chainrule.compile(f)
    compiled()
    x.data = -1.5
    check(f, [x], compiled)
    assert compiled.traces == 1


def test_float_of_a_value_raises_as_eagerly() -> None:
    x = Value(2.0)
    compiled = chainrule.compile(lambda: x * float(x))
    with pytest.raises(TypeError, match="float"):
        compiled()


# --------------------------------------------------------------------------
# What cannot be replayed
# --------------------------------------------------------------------------


def test_micrograd_closure_nodes_run_eagerly_with_a_warning() -> None:
    x = Value(3.0)

    def f() -> Value:
        out = Value(x.data * 2, (x,), "double")

        def _backward() -> None:
            x.grad += 2 * out.grad

        out._backward = _backward
        return out

    compiled = chainrule.compile(f)
    with pytest.warns(CompileWarning, match="_backward closure"):
        out = compiled()
    out.backward()
    assert x.grad == 2.0


def test_microgpt_local_grads_nodes_run_eagerly_with_a_warning() -> None:
    x = Value(3.0)
    compiled = chainrule.compile(lambda: Value(x.data**2, (x,), (2 * x.data,)))
    with pytest.warns(CompileWarning, match="local_grads"):
        compiled().backward()
    assert x.grad == 6.0


def test_compile_checks_its_arguments() -> None:
    with pytest.raises(TypeError, match="compile: expected a function"):
        chainrule.compile(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_traces"):
        chainrule.compile(lambda: None, max_traces=0)


def test_compiled_graph_is_smaller_than_eager() -> None:
    """Index arrays and one buffer: fewer bytes per node than eager Values."""
    import tracemalloc

    from chainrule.bench.moons import LAYERS, DemoStep, UserMLP, initial_weights, make_moons

    X, y = make_moons(20)
    step = DemoStep(Value, UserMLP(Value, LAYERS, initial_weights()), X, y)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    loss = step.loss()
    eager_bytes = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    compiled = chainrule.compile(step.loss)
    compiled()
    memory = compiled.memory()
    nodes = len(chainrule.value.walk.topological_order(loss)[0])
    assert memory["bytes"] / memory["nodes"] < eager_bytes / nodes


def _replayed_as_eager(fn: Any, params: list[Value]) -> Any:
    """Compile ``fn`` (a list of Values, the first the loss), replay it, and
    check its values and the loss's gradients against eager, bit for bit;
    the replayed program."""
    with np.errstate(all="ignore"):
        eager = fn()
        eager[0].backward()
        expected = [p.grad for p in params]
        compiled = chainrule.compile(fn)
        compiled()
        for p in params:
            p.grad = 0.0
        out = compiled()
        out[0].backward()
    assert all(same(a.data, b.data) for a, b in zip(out, eager))
    assert all(same(p.grad, g) for p, g in zip(params, expected))
    return next(iter(compiled._cache.values()))[-1].program


@pytest.mark.parametrize("bias_first", [True, False])
def test_a_layer_on_a_batch_is_an_outer_product_bit_for_bit(
    bias_first: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The running sums of a layer on a batch (``w[neuron] * x[point]``)
    gather each factor once and broadcast (program._outer); values and
    gradients stay the eager ones bit for bit, specials included."""
    from chainrule.compiler import program
    from chainrule.compiler.program import SumGroup

    monkeypatch.setattr(program, "OUTER_MIN", 0)  # this small layer too

    rng = random.Random(7)
    pool = [0.0, -0.0, 1e308, -1e-308, 2.5, -1.0, 1e-300]
    W = [[Value(rng.choice(pool + [rng.uniform(-2, 2)] * 4)) for _ in range(3)] for _ in range(5)]
    b = [Value(rng.uniform(-1, 1)) for _ in range(5)]
    X = [[Value(rng.choice(pool + [rng.uniform(-2, 2)] * 4)) for _ in range(3)] for _ in range(7)]

    def loss() -> Value:
        out = []
        for x in X:
            for w, bi in zip(W, b):
                terms = [wi * xi for wi, xi in zip(w, x)]
                out.append((sum(terms, bi) if bias_first else sum(terms[1:], terms[0]) + bi).relu())
        return sum(o * o for o in out)

    params = [p for row in W for p in row] + b + [p for row in X for p in row]
    program = _replayed_as_eager(lambda: [loss()], params)
    outer = [s.outer for s in program.steps if isinstance(s, SumGroup) and s.outer is not None]
    assert [o[2] for o in outer] == [(7, 5)]  # 7 points, 5 neurons


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("neuron_major", [False, True])
def test_a_hidden_layers_gradient_summed_where_it_is_made_bit_for_bit(
    seed: int, bias: bool, neuron_major: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two layers on a batch: the first layer's outputs feed only the second
    layer's products, so their gradients are summed straight from the
    products (program.Direct) instead of written as terms and gathered:
    values and gradients the eager ones bit for bit, specials included."""
    from chainrule.compiler import program

    monkeypatch.setattr(program, "OUTER_MIN", 0)  # this small layer too
    rng = random.Random(seed)
    pool = [0.0, -0.0, 1e308, -1e-308, 2.5, -1.0, 1e-300]

    def number() -> float:
        return rng.choice(pool + [rng.uniform(-2, 2)] * 6)

    W1 = [[Value(number()) for _ in range(2)] for _ in range(4)]
    W2 = [[Value(number()) for _ in range(4)] for _ in range(3)]
    b2 = [Value(number()) for _ in range(3)]
    X = [[number() for _ in range(2)] for _ in range(6)]

    def hidden(w: list[Value], x: list[float]) -> Value:
        return sum(wi * Value(xi) for wi, xi in zip(w, x)).relu()

    def loss() -> Value:
        if neuron_major:  # the hidden layer made neuron by neuron (laid out as the walk meets it)
            by_neuron = [[hidden(w, x) for x in X] for w in W1]
            H = [list(column) for column in zip(*by_neuron)]
        else:
            H = [[hidden(w, x) for w in W1] for x in X]
        out = []
        for h in H:
            for w, b in zip(W2, b2):  # sum() from 0, or from the bias as micrograd's Neuron
                products = (wi * hi for wi, hi in zip(w, h))
                out.append((sum(products, b) if bias else sum(products)).relu())
        return sum(o * o for o in out)

    params = [p for row in W1 + W2 for p in row] + b2
    replayed = _replayed_as_eager(lambda: [loss()], params)
    assert [d.side for d in replayed._direct.values()] == ["seconds"]


@given(
    st.integers(1, 3),  # inputs
    st.integers(2, 5),  # hidden neurons
    st.integers(1, 4),  # output neurons
    st.integers(1, 6),  # points
    st.booleans(),  # a bias first in the output sums
    st.randoms(use_true_random=False),
)
def test_random_two_layer_batches_replay_as_eager(
    n_in: int, n_hidden: int, n_out: int, n_points: int, bias: bool, rng: random.Random
) -> None:
    """Two layers on a batch of every small shape, each layer an outer
    product (program.OUTER_MIN lowered): where the hidden layer's gradient
    is summed directly (program.Direct) or not, values and gradients are
    the eager ones bit for bit."""
    from chainrule.compiler import program

    pool = [0.0, -0.0, 1e308, -1e-300, 2.5, -1.0]

    def number() -> float:
        return rng.choice(pool) if rng.random() < 0.2 else rng.uniform(-2, 2)

    W1 = [[Value(number()) for _ in range(n_in)] for _ in range(n_hidden)]
    W2 = [[Value(number()) for _ in range(n_hidden)] for _ in range(n_out)]
    b2 = [Value(number()) for _ in range(n_out)]
    X = [[number() for _ in range(n_in)] for _ in range(n_points)]

    def loss() -> Value:
        out = []
        for x in X:
            h = [sum(wi * Value(xi) for wi, xi in zip(w, x)).relu() for w in W1]
            for w, b in zip(W2, b2):
                products = (wi * hi for wi, hi in zip(w, h))
                out.append((sum(products, b) if bias else sum(products)).relu())
        return sum(o * o for o in out)

    params = [p for row in W1 + W2 for p in row] + b2
    outer_min = program.OUTER_MIN
    program.OUTER_MIN = 0
    try:
        _replayed_as_eager(lambda: [loss()], params)
    finally:
        program.OUTER_MIN = outer_min


def test_softmax_shifts_on_arrays_are_the_builtins() -> None:
    """A stable softmax's ``-max(v.data ...)`` (and ``min``, and a single
    read) of every row runs as one gather and reduceat (capture._on_arrays);
    rows whose values hold a zero or a nan take the builtins' loop, whose
    pick among 0.0 and -0.0, or among nan, is their own. Replayed on new
    values every call: the eager values bit for bit, and the gradients
    (bit for bit but for the order of a read float's terms, 1e-16)."""
    rng = random.Random(5)
    rows = [[Value(0.0) for _ in range(n)] for n in (1, 2, 3, 5)]
    params = [v for row in rows for v in row]

    weights = [0.5, -1.25, 2.0, 0.75, -0.5]

    def softmaxes() -> list[Value]:
        out = []
        for row in rows:
            top = max(v.data for v in row)
            low = min(v.data for v in row)
            exps = [(v - top).exp() for v in row]
            total = sum(exps)
            out += [e / total * c + (v + -low) * c for e, v, c in zip(exps, row, weights)]
        return [sum(out)]

    compiled = chainrule.compile(softmaxes)
    specials = [0.0, -0.0, math.inf, -math.inf, math.nan, 1e308, -1e-308]
    for k in range(40):
        for v in params:  # mostly ordinary floats; a zero, an inf or a nan now and then
            v.data = rng.choice(specials) if k % 4 == 3 else rng.uniform(-3, 3)
            v.grad = 0.0
        eager = softmaxes()[0]
        eager.backward()
        expected = [v.grad for v in params]
        for v in params:
            v.grad = 0.0
        with np.errstate(all="ignore"):
            got = compiled()[0]
            got.backward()
        assert same(got.data, eager.data), k
        # a read float as an operand: terms may be added in another order
        assert all(
            same(v.grad, g) or close(v.grad, g, atol=1e-15) for v, g in zip(params, expected)
        ), k
    program = next(iter(compiled._cache.values()))[-1].program
    recipes = [s for s in program.steps if type(s).__name__ == "RecipeStep"]
    assert recipes and all("_on_arrays" in s.compute.__qualname__ for s in recipes)
    assert compiled.hits >= 15  # specials flip guards: some calls trace again


def test_sums_of_different_lengths_on_one_level_are_one_group_bit_for_bit() -> None:
    """Running sums of one level whose kinds of terms begin a longer one's
    join it, padded with -0.0 (capture._merge_sums): sums of -0.0 stay
    -0.0, values and gradients stay the eager ones bit for bit."""
    from chainrule.compiler.program import SumGroup

    rng = random.Random(3)
    pool = [-0.0, -0.0, 0.0, 1e308, 2.5, -1.0, 1e-300, -3.75]
    rows = [[Value(rng.choice(pool)) for _ in range(n)] for n in (3, 4, 6, 5)]
    ws = [[Value(rng.choice(pool)) for _ in range(n)] for n in (3, 4, 6, 5)]
    zeros = [Value(-0.0) for _ in range(4)]

    def loss() -> list[Value]:
        plain = [sum(row[1:], row[0]) for row in rows]  # kinds (1, 1, ...)
        dots = [sum((w * x for w, x in zip(wr, row)), -0.0) for wr, row in zip(ws, rows)]
        signed = sum(zeros[1:], zeros[0])  # -0.0, a sum of negative zeros
        return [sum((a * b for a, b in zip(plain, dots)), signed * 2.0), signed]

    params = [p for row in rows + ws for p in row] + zeros
    program = _replayed_as_eager(loss, params)
    assert math.copysign(1.0, loss()[1].data) == -1.0
    widths = sorted(s.stop - s.start for s in program.steps if isinstance(s, SumGroup))
    assert widths == [1, 4, 5]  # the total; the plain sums and the negative zeros; the dots


def test_writing_data_of_a_node_made_inside_the_function_runs_eagerly() -> None:
    """A write to a new node's .data by the function's code is watched
    (eagerly the graph goes on from the number written, which a replay
    would not write)."""
    x = Value(2.0)

    def f() -> Value:
        h = x * 3.0
        h.data = 1.0  # the eager graph goes on from 1.0
        return h * x

    compiled = chainrule.compile(f)
    with pytest.warns(CompileWarning, match="writes .data of a Value it made"):
        out = compiled()
    assert out.data == 2.0
    out.backward()
    assert x.grad == 1.0 + 2.0 * 3.0  # through h (3.0 * h.grad) and directly (h.data)
    assert compiled().data == 2.0


# --------------------------------------------------------------------------
# Edge values: the replay adds a node's gradient terms in the eager order
# --------------------------------------------------------------------------

EDGE = [1e308, -1e308, 1e-308, -1e-308, 0.0, -0.0, 1.0, -2.5, 7e307, 2.0**-1074, 700.0, -745.0]


def test_huge_values_add_their_gradient_terms_in_the_eager_order(torch: Any) -> None:
    """Issue 25 item 6: p*p - p.exp() at 1e308. The eager pass adds exp's
    -inf first, then p and p (each 1e308): -inf; summing the two 1e308 first
    (inf) and then -inf gave nan."""
    p = Value(1e308)
    compiled = chainrule.compile(lambda: p * p - p.exp())
    compiled().backward()
    t = torch.tensor(1e308, dtype=torch.float64, requires_grad=True)
    (t * t - t.exp()).backward()
    assert p.grad == -math.inf == t.grad.item()


@given(
    st.lists(instruction, min_size=1, max_size=14).filter(
        lambda prog: not any(ins[1] == "stable_softmax" for ins in prog)
    ),
    st.lists(st.sampled_from(EDGE), min_size=1, max_size=5),
)
def test_edge_values_give_the_eager_gradients_bit_for_bit(program: Any, xs: list[float]) -> None:
    """Graphs without reads of .data: values and gradients are the eager
    ones bit for bit (inf and nan where eager has them), at huge, tiny and
    signed-zero inputs."""
    params = [Value(x) for x in xs]
    fn = lambda: build(program, params)  # noqa: E731
    try:
        with np.errstate(all="ignore"):
            eager = fn()
    except (OverflowError, ValueError, ZeroDivisionError):
        return  # the eager graph cannot be built (a user primitive overflows)
    for p in params:
        p.grad = 0.0
    eager.backward()
    expected = [p.grad for p in params]
    compiled = chainrule.compile(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompileWarning)  # a guard at inf may not hold
        out = compiled()
    assert same(out.data, eager.data)
    for p in params:
        p.grad = 0.0
    out.backward()
    assert all(same(p.grad, g) for p, g in zip(params, expected)), (
        [p.grad for p in params],
        expected,
    )


def test_reciprocal_guard_on_arrays_is_the_engines() -> None:
    """The engine picks a * b**-1 or one true division by the values; the
    replay checks that choice on arrays (program.GUARDS_ON_ARRAYS)."""
    from chainrule.compiler import program
    from chainrule.value import engine

    edge = SPECIALS + [2.0**-500, 2.0**500, 2.0**-501, 2.0**501, 1.7e308, 2.0**-1022, 3e-300]
    a = np.array([x for x in edge for _ in edge])
    b = np.array([y for _ in edge for y in edge])
    ours = program.GUARDS_ON_ARRAYS[engine._reciprocal_is_exact](a, b)
    assert ours.tolist() == [
        engine._reciprocal_is_exact(x, y) for x, y in zip(a.tolist(), b.tolist())
    ]
