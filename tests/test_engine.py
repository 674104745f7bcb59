"""The scalar engine: micrograd's and microgpt's worked examples, the backward algorithm's
guarantees, and the errors a user sees."""

from __future__ import annotations

import inspect
import itertools
import math
import sys
from fractions import Fraction
from typing import Any

import pytest

try:  # NumPy's scalars are numbers too; the rest of this file needs no NumPy
    import numpy as np
except ImportError:  # CPython 3.14 under WebAssembly (the pure run)
    np = None

import chainrule
from chainrule import Value, add_n, dense, dot, gradients, no_grad
from chainrule.value.engine import Value as EngineValue
from chainrule.value.engine import topological_order


def test_value_is_exported_twice() -> None:
    assert chainrule.Value is EngineValue


def test_seed_003_worked_example() -> None:
    # e = (a*b + a)**2 at a=2, b=3, with every intermediate gradient.
    a, b = Value(2.0), Value(3.0)
    c = a * b
    d = c + a
    e = d**2
    e.backward()
    assert (c.data, d.data, e.data) == (6.0, 8.0, 64.0)
    assert e.grad == 1.0
    assert d.grad == 16.0
    assert c.grad == 16.0
    assert a.grad == 64.0  # 16 through d, 16 * b through c
    assert b.grad == 32.0


def test_seed_002_worked_example() -> None:
    # f = relu(a*b + d) at a=2, b=-3, d=10
    a, b, d = Value(2.0), Value(-3.0), Value(10.0)
    c = a * b
    e = c + d
    f = e.relu()
    f.backward()
    assert f.data == 4.0
    assert [v.grad for v in (a, b, c, d, e, f)] == [-3.0, 2.0, 1.0, 1.0, 1.0, 1.0]


def test_value_used_twice_gets_both_contributions() -> None:
    a = Value(3.0)
    b = a + a
    b.backward()
    assert a.grad == 2.0


def test_micrograd_attributes() -> None:
    a, b = Value(2.0, label="a"), Value(3.0)
    c = a * b
    assert c._prev == (a, b)
    assert c._op == "*"
    assert a._op == ""
    assert a.label == "a" and b.label == ""
    c.label = "c"
    assert c.label == "c"
    assert (a**2)._op == "**2"
    assert a.relu()._op == "ReLU"
    assert repr(a) == "Value(data=2.0, grad=0.0)"


def test_a_node_is_microgpts_four_slots_and_the_collector_lets_go_of_its_derivatives() -> None:
    import gc

    a, b = Value(2.0), Value(3.0)
    c = a * b
    assert Value.__slots__ == ("data", "grad", "_prev", "_local")
    assert not hasattr(c, "__dict__")
    assert c._local == (3.0, 2.0, "*") and c._fn is chainrule.value.primitives.MUL
    gc.collect()  # a tuple of floats and a name: untracked, as microgpt's (b, a)
    assert not gc.is_tracked(c._local) and gc.is_tracked(c._prev)


def test_a_label_or_anomaly_number_leaves_the_rule_alone() -> None:
    a, b = Value(2.0, label="a"), Value(3.0)
    c = a * b
    c.label = "c"
    c._id = 7
    assert (c.label, c._id, c._op, c._local_grads) == ("c", 7, "*", (3.0, 2.0))
    d = (c + 1.0).relu()
    d.label = "d"
    d.backward()
    assert (a.grad, b.grad, d._op, d.label) == (3.0, 2.0, "ReLU", "d")
    with no_grad():
        e = a * b
    two = (a * 2.0)._prev[1]
    e.label, two.label = "e", "two"  # no node shares its label with another
    assert (e.label, (a * b).label, two.label, (a * 3.0)._prev[1].label) == ("e", "", "two", "")
    assert two._fn is chainrule.value.primitives.NUMBER
    assert e._fn is chainrule.value.engine.NO_GRAD_RESULT


def test_grad_starts_at_zero() -> None:
    assert Value(1.5).grad == 0.0


def test_double_backward_is_exactly_twice() -> None:
    # micrograd gives three times on (a*b)*c: its intermediates accumulate.
    a, b, c = Value(2.0), Value(3.0), Value(4.0)
    out = (a * b) * c
    out.backward()
    once = (a.grad, b.grad, c.grad)
    out.backward()
    assert (a.grad, b.grad, c.grad) == tuple(2 * g for g in once)
    assert once == (12.0, 8.0, 6.0)


def test_double_backward_is_exactly_twice_on_a_network_like_graph() -> None:
    xs = [Value(0.1 * i - 0.7) for i in range(12)]
    h = [(x * 1.3 + 0.2).tanh() for x in xs]
    out = add_n(hi * hj for hi, hj in itertools.pairwise(h)) + dot(h, xs).sigmoid()
    out.backward()
    once = [x.grad for x in xs]
    out.backward()
    assert [x.grad for x in xs] == [2 * g for g in once]


def test_seed_gradient_argument() -> None:
    x = Value(3.0)
    y = x * x
    y.backward(2.5)
    assert x.grad == 15.0
    assert y.grad == 2.5


def test_backward_on_a_leaf() -> None:
    x = Value(3.0)
    x.backward()
    assert x.grad == 1.0


@pytest.mark.native  # WebAssembly's stack is too small to free a million-deep chain
def test_million_deep_chain_backpropagates() -> None:
    x = Value(0.5)
    y = x
    for i in range(1_000_000):
        y = y * 1.0000001 if i % 2 else y + 1e-7
    y.backward()
    # d/dx of alternating (+c, *k) is k ** 500000
    assert math.isclose(x.grad, 1.0000001**500_000, rel_tol=1e-9)


def test_backward_from_deep_in_a_recursion_still_gives_micrograds_order() -> None:
    """The order recurses as micrograd's build_topo does; a graph deeper than
    Python lets it recurse from here gets the same order built with a stack."""
    x = Value(0.5)
    y = x
    for i in range(300):
        y = (y * 1.01 if i % 2 else y + x).tanh()
    expected = topological_order(y)
    y.backward()
    expected_grad = x.grad

    def deep(n: int) -> Any:
        return deep(n - 1) if n else (topological_order(y), gradients(y, [x]))

    depth = len(inspect.stack(0))
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(depth + 200)  # room for `deep`, not for a 300-deep build_topo
    try:
        order, (gx,) = deep(150)
    finally:
        sys.setrecursionlimit(limit)
    assert order == expected and gx == expected_grad


@pytest.mark.parametrize(
    "make, expected",
    [
        (lambda x: 2 * x, (6.0, 2.0)),
        (lambda x: x * 2, (6.0, 2.0)),
        (lambda x: 1 / x, (1 / 3, -1 / 9)),
        (lambda x: x / 2, (1.5, 0.5)),
        (lambda x: 2**x, (8.0, 8.0 * math.log(2))),
        (lambda x: x**2, (9.0, 6.0)),
        (lambda x: 10 - x, (7.0, -1.0)),
        (lambda x: x - 10, (-7.0, 1.0)),
        (lambda x: 10 + x, (13.0, 1.0)),
        (lambda x: -x, (-3.0, -1.0)),
        (lambda x: abs(-x), (3.0, 1.0)),
        (lambda x: x ** Value(2.0), (9.0, 6.0)),
        (lambda x: sum([x, x, x]), (9.0, 3.0)),
        (lambda x: x.max(2.0), (3.0, 1.0)),
        (lambda x: x.min(2.0), (2.0, 0.0)),
    ],
)
def test_numbers_on_either_side(make, expected) -> None:  # type: ignore[no-untyped-def]
    x = Value(3.0)
    y = make(x)
    y.backward()
    assert math.isclose(y.data, expected[0], rel_tol=1e-15)
    assert math.isclose(x.grad, expected[1], rel_tol=1e-15)


def test_value_to_a_value_power() -> None:
    a, b = Value(2.0), Value(3.0)
    y = a**b
    y.backward()
    assert y.data == 8.0
    assert a.grad == 12.0
    assert math.isclose(b.grad, 8.0 * math.log(2.0))


def test_never_a_complex_number() -> None:
    y = Value(-8.0) ** 0.5
    assert isinstance(y.data, float) and math.isnan(y.data)
    y = Value(-8.0) ** Value(1 / 3)
    assert isinstance(y.data, float) and math.isnan(y.data)


def test_log_of_zero() -> None:
    x = Value(0.0)
    y = x.log()
    y.backward()
    assert y.data == -math.inf
    assert x.grad == math.inf


NUMPY_NUMBERS = (
    []
    if np is None
    else [np.float64(3.0), np.float32(3.0), np.int64(3), np.True_, np.array(3.0), np.array(2)]
)


@pytest.mark.parametrize("number", [3, 3.0, True, Fraction(3, 1), *NUMPY_NUMBERS])
def test_accepted_numbers(number: object) -> None:
    v = Value(number)  # type: ignore[arg-type]
    assert type(v.data) is float
    x = float(number)  # type: ignore[arg-type]
    assert (v * number).data == x * x
    assert (v + number).data == (number + v).data == x + x  # type: ignore[operator]
    assert (v - number).data == 0.0 and (number - v).data == 0.0  # type: ignore[operator]


@pytest.mark.parametrize("bad", ["2", None, 1j, [1.0], (1.0,), {"a": 1}])
def test_bad_input_names_the_op_and_value(bad: object) -> None:
    with pytest.raises(TypeError, match=r"Value: expected .* got"):
        Value(bad)  # type: ignore[arg-type]
    x = Value(1.0)
    with pytest.raises(TypeError, match=r"^\*: .*" + type(bad).__name__):
        x * bad  # type: ignore[operator]
    with pytest.raises(TypeError, match=r"^\+: "):
        bad + x  # type: ignore[operator]
    with pytest.raises(TypeError, match=r"^\*\*: "):
        x**bad  # type: ignore[operator]
    with pytest.raises(TypeError, match=r"^max: "):
        x.max(bad)  # type: ignore[arg-type]


def test_comparisons_and_conversions() -> None:
    a, b = Value(1.0), Value(2.0)
    assert a < b and a <= b and b > a and b >= a
    assert a < 1.5 and b > 1.5
    assert a != Value(1.0)  # identity, so Values can live in sets
    assert len({a, Value(1.0)}) == 2
    assert b.item() == b.data == 2.0
    assert f"{b:.2f}" == "2.00" and f"{b}" == "2.0"
    assert max(a, b) is b


@pytest.mark.parametrize(
    "convert", [float, int, round, math.sin, math.exp, math.floor, lambda v: [1, 2, 3][v]]
)
def test_a_value_never_becomes_a_float_silently(convert: Any) -> None:
    # micrograd's and microgpt's Values have no __float__ either: math.sin(v)
    # would take the number and drop the graph, so the gradient would be wrong
    with pytest.raises(TypeError, match=r"chainrule\.sin\(v\).*v\.data / v\.item\(\)"):
        convert(Value(2.0))


def test_grad_of_math_sin_names_the_fix() -> None:
    from chainrule import grad, sin

    with pytest.raises(TypeError, match=r"chainrule\.sin"):
        grad(lambda x: math.sin(x) * x)(2.0)
    assert grad(lambda x: sin(x) * x)(2.0) == pytest.approx(math.sin(2.0) + 2.0 * math.cos(2.0))


def test_every_node_gets_its_grad() -> None:
    x = Value(0.3)
    h = (x * 2.0).tanh()
    y = h.exp() + h
    y.backward()
    t = math.tanh(0.6)
    assert y.grad == 1.0
    assert math.isclose(h.grad, math.exp(t) + 1.0)
    assert math.isclose(x.grad, (math.exp(t) + 1.0) * (1 - t * t) * 2.0)


def test_dot_matches_the_long_form() -> None:
    w = [Value(0.5 * i - 1.0) for i in range(5)]
    x = [Value(0.25 * i + 0.1) for i in range(5)]
    b = Value(0.3)
    y = dot(w, x, b)
    y.backward()
    fast = (y.data, [v.grad for v in w + x + [b]])
    for v in w + x + [b]:
        v.grad = 0.0
    z = sum((wi * xi for wi, xi in zip(w, x)), b)
    z.backward()
    slow = (z.data, [v.grad for v in w + x + [b]])
    assert math.isclose(fast[0], slow[0], rel_tol=1e-15)
    assert fast[1] == slow[1]


def test_dot_with_constant_inputs() -> None:
    w = [Value(2.0), Value(-1.0)]
    y = dot(w, [3.0, 4.0], 1)
    y.backward()
    assert y.data == 3.0
    assert [v.grad for v in w] == [3.0, 4.0]
    # the two weights, the inputs as leaves (micrograd's Value(xi)) and the bias
    assert [v.data for v in y._prev] == [2.0, -1.0, 3.0, 4.0, 1.0]


def test_dot_length_mismatch() -> None:
    with pytest.raises(ValueError, match="dot: lengths differ"):
        dot([Value(1.0)], [1.0, 2.0])


def test_add_n() -> None:
    xs = [Value(float(i)) for i in range(4)]
    y = add_n(xs + [10])
    y.backward()
    assert y.data == 16.0
    assert [x.grad for x in xs] == [1.0] * 4


def test_no_grad_builds_no_graph() -> None:
    x = Value(2.0)
    with no_grad():
        y = x * x + 1.0
        assert not chainrule.is_grad_enabled()
        with chainrule.enable_grad():
            z = x * x
    assert chainrule.is_grad_enabled()
    assert y.data == 5.0 and y._prev == ()
    assert z._prev == (x, x)


def test_no_grad_as_decorator() -> None:
    @no_grad()
    def f(v: Value) -> Value:
        return v * 3.0

    assert f(Value(1.0))._prev == ()
    assert chainrule.is_grad_enabled()


def test_detach() -> None:
    x = Value(2.0)
    y = (x * 3.0).detach() * x
    y.backward()
    assert x.grad == 6.0


def test_gradients_leaves_grad_untouched() -> None:
    x, z = Value(2.0), Value(5.0)
    y = x * x * x
    gx, gz = gradients(y, [x, z])
    assert (gx, gz) == (12.0, 0.0)
    assert x.grad == 0.0


def test_create_graph_second_derivative() -> None:
    x = Value(2.0)
    y = x**3
    y.backward(create_graph=True)
    g = x.grad
    assert isinstance(g, Value) and g.data == 12.0
    x2 = Value(2.0)
    (gx2,) = gradients(x2**3, [x2], create_graph=True)
    (hx2,) = gradients(gx2, [x2])
    assert hx2 == 12.0  # d2/dx2 x^3 = 6x


def test_custom_primitive() -> None:
    cube = chainrule.Primitive("cube", lambda x: x**3, lambda M, x, out: (3 * x * x,))
    x = Value(2.0)
    y = cube(x) + cube(1.0)
    y.backward()
    assert y.data == 9.0 and x.grad == 12.0
    (g,) = gradients(cube(x), [x], create_graph=True)
    assert gradients(g, [x]) == [12.0]
    wrong = chainrule.Primitive("bad", lambda x: x, lambda M, x, out: (1.0, 2.0))
    with pytest.raises(ValueError, match="bad: derivative gave 2 local gradients for 1 inputs"):
        wrong(x)


def test_dense_is_dot_per_row() -> None:
    rows = [[Value(0.5 * i - j) for i in range(3)] for j in range(4)]
    biases = [Value(0.1 * j) for j in range(4)]
    x = [Value(0.3), Value(-1.2), Value(2.0)]
    outs = dense(rows, x, biases)
    add_n(o * o for o in outs).backward()
    fast = [v.grad for v in x] + [w.grad for row in rows for w in row]
    for v in x + biases + [w for row in rows for w in row]:
        v.grad = 0.0
    add_n(dot(r, x, b) ** 2 for r, b in zip(rows, biases)).backward()
    assert fast == [v.grad for v in x] + [w.grad for row in rows for w in row]
    assert [o.data for o in outs] == [dot(r, x, b).data for r, b in zip(rows, biases)]
    assert [o.data for o in dense(rows, [1.0, 0.0, 0.0])] == [r[0].data for r in rows]
    with pytest.raises(ValueError, match="dense: 4 weight rows but 1 biases"):
        dense(rows, x, [1.0])


@pytest.mark.parametrize("constant_x", [False, True])
def test_relu_fused_into_dot_matches_two_nodes(constant_x: bool) -> None:
    import random

    rng = random.Random(7)
    for _ in range(40):
        w = [Value(rng.uniform(-1, 1)) for _ in range(4)]
        xv = [rng.uniform(-1, 1) for _ in range(4)]
        x = xv if constant_x else [Value(v) for v in xv]
        b = Value(rng.uniform(-0.5, 0.5))
        leaves = w + [b] + ([] if constant_x else x)  # type: ignore[operator]
        fused = dot(w, x, b, activation="relu")
        assert fused._op == "ReLU(dot)" and len(fused._prev) == 2 * len(w) + 1
        (fused * 3.0).backward()
        got = [v.grad for v in leaves]
        for v in leaves:
            v.grad = 0.0
        long = dot(w, x, b).relu()
        (long * 3.0).backward()
        assert fused.data == long.data
        assert got == [v.grad for v in leaves]
        # the second-order rule: d/dw_i of d(out)/dx_i is the active mask
        if not constant_x:
            g_fused = gradients(fused, [x[0]], create_graph=True)[0]  # type: ignore[list-item]
            g_long = gradients(long, [x[0]], create_graph=True)[0]  # type: ignore[list-item]
            assert g_fused.data == g_long.data
            assert gradients(g_fused, [w[0]]) == gradients(g_long, [w[0]])


def test_dense_activations() -> None:
    rows = [[Value(1.0), Value(-1.0)], [Value(-2.0), Value(0.5)]]
    x = [Value(0.5), Value(0.25)]
    relu = dense(rows, x, [0.0, 0.0], activation="relu")
    tanh = dense(rows, x, [0.0, 0.0], activation="tanh")
    assert [v.data for v in relu] == [0.25, 0.0]
    assert [v.data for v in tanh] == [math.tanh(0.25), math.tanh(-0.875)]
    with pytest.raises(ValueError, match="dense: unknown activation 'gelu'"):
        dense(rows, x, activation="gelu")


@pytest.mark.parametrize("w_values", [True, False])
@pytest.mark.parametrize("x_values", [True, False])
@pytest.mark.parametrize("with_bias", [True, False])
def test_every_dot_shape_matches_the_long_form(
    w_values: bool, x_values: bool, with_bias: bool
) -> None:
    wf, xf, bf = [0.5, -1.25, 2.0], [1.5, 0.25, -0.75], 0.375
    w = [Value(v) if w_values else v for v in wf]
    x = [Value(v) if x_values else v for v in xf]
    b = Value(bf) if with_bias else None
    fast = dot(w, x, b) * 3.0
    fast.backward()
    leaves = [v for v in [*w, *x, b] if isinstance(v, Value)]
    got = [v.grad for v in leaves]
    for v in leaves:
        v.grad = 0.0
    slow = sum(wi * xi for wi, xi in zip(w, x))
    if b is not None:
        slow = slow + b
    if isinstance(slow, Value):
        (slow * 3.0).backward()
    assert math.isclose(fast.data, 3.0 * (sum(a * c for a, c in zip(wf, xf)) + (bf if b else 0.0)))
    assert got == [v.grad for v in leaves]
    assert (
        got
        == [3.0 * c for c in xf] * w_values + [3.0 * a for a in wf] * x_values + [3.0] * with_bias
    )
