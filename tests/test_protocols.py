"""micrograd's and microgpt's ways of building and inspecting nodes, on
chainrule's Value: the constructors, ``_backward`` (read and set),
``_children``, ``_local_grads``, ``_prev`` and ``_op``."""

from __future__ import annotations

import math
import random

import pytest

from chainrule import Value, detect_anomaly, dot, gradients
from chainrule.bench import microgpt
from chainrule.value.engine import topological_order

# --------------------------------------------------------------------------
# micrograd: Value(data, _children, _op) and a _backward closure
# --------------------------------------------------------------------------


def lecture_tanh(self: Value, V: type = Value) -> Value:
    """tanh as micrograd's lecture adds an op: the constructor with the
    children and the op name, then a closure set as ``_backward``."""
    x = self.data
    t = (math.exp(2 * x) - 1) / (math.exp(2 * x) + 1)
    out = V(t, (self,), "tanh")

    def _backward() -> None:
        self.grad += (1 - t**2) * out.grad

    out._backward = _backward
    return out


def test_lecture_tanh_neuron_gives_micrograds_gradients() -> None:
    from micrograd.engine import Value as MicrogradValue

    def neuron(V: type, tanh: object) -> tuple[list[object], object]:
        x1, x2, w1, w2, b = V(2.0), V(0.0), V(-3.0), V(1.0), V(6.8813735870195432)
        n = x1 * w1 + x2 * w2 + b
        o = tanh(n)  # type: ignore[operator]
        o.backward()
        return [x1, x2, w1, w2, b], o

    ours, o = neuron(Value, lecture_tanh)
    theirs, o_ref = neuron(MicrogradValue, lambda n: lecture_tanh(n, MicrogradValue))
    assert o._op == "tanh" and o._prev[0]._op != ""
    assert o.data == o_ref.data  # type: ignore[attr-defined]
    assert [v.grad for v in ours] == [v.grad for v in theirs]  # type: ignore[attr-defined]
    assert [v.grad for v in ours][:3] == pytest.approx([-1.5, 0.5, 1.0])


def test_lecture_tanh_neuron_trains() -> None:
    rng = random.Random(0)
    xs = [[2.0, 3.0, -1.0], [3.0, -1.0, 0.5], [0.5, 1.0, 1.0], [1.0, 1.0, -1.0]]
    ys = [1.0, -1.0, -1.0, 1.0]
    w = [Value(rng.uniform(-1, 1)) for _ in range(3)]
    b = Value(0.0)
    losses = []
    for _ in range(50):
        preds = [lecture_tanh(sum((wi * xi for wi, xi in zip(w, x)), b)) for x in xs]
        loss = sum((p - y) ** 2 for p, y in zip(preds, ys))
        for p in [*w, b]:
            p.grad = 0.0
        loss.backward()
        for p in [*w, b]:
            p.data -= 0.05 * p.grad
        losses.append(loss.data)
    assert losses[-1] < 0.1 * losses[0]


def test_walkthrough_backward_closure_of_a_product() -> None:
    a = Value(2.0)
    b = Value(3.0)
    c = a * b
    c.grad = 1.0
    c._backward()
    assert (a.grad, b.grad) == (3.0, 2.0)


def test_backward_closure_of_every_layout_applies_the_chain_rule_once() -> None:
    x, y = Value(1.5), Value(-2.0)
    w = [Value(0.5), Value(0.25)]
    nodes = [x.exp(), x + y, x * 3.0, sum(wi * xi for wi, xi in zip(w, [x, y]))]
    for node in nodes:
        for leaf in (x, y, *w):
            leaf.grad = 0.0
        node.grad = 2.0
        node._backward()
        expected = {id(c): 0.0 for c in node._children}
        for child, local in zip(node._children, node._local_grads):
            expected[id(child)] += local * 2.0
        assert {id(c): c.grad for c in node._children} == expected


def test_a_leafs_backward_does_nothing() -> None:
    a = Value(1.0)
    a.grad = 5.0
    a._backward()
    assert a.grad == 5.0


def test_backward_can_be_replaced_on_a_built_node() -> None:
    a, b = Value(2.0), Value(3.0)
    c = a * b

    def doubled() -> None:  # a deliberately different rule: backward() must call it
        a.grad += 2 * b.data * c.grad
        b.grad += 2 * a.data * c.grad

    c._backward = doubled
    c.backward()
    assert (a.grad, b.grad) == (6.0, 4.0)
    assert c._backward is doubled


def test_micrograd_node_without_closure_passes_nothing() -> None:
    a = Value(2.0)
    out = Value(a.data * 10, (a,), "scale")  # micrograd: _backward defaults to a no-op
    (out + a).backward()
    assert a.grad == 1.0 and out._op == "scale" and out._prev == (a,)


def test_closures_refuse_where_they_cannot_run() -> None:
    x = Value(0.5)
    y = lecture_tanh(x)
    with pytest.raises(TypeError, match=r"node 'tanh' .*_backward closure"):
        y.backward(create_graph=True)
    # gradients() runs the same walk as backward(), closures included,
    # and leaves every .grad as it was
    x.grad, y.grad = 5.0, 7.0
    assert gradients(y, [x]) == [1 - math.tanh(0.5) ** 2]
    assert x.grad == 5.0 and y.grad == 7.0
    with pytest.raises(AttributeError, match="no local gradients"):
        y._local_grads  # noqa: B018
    with pytest.raises(TypeError, match="callable"):
        y._backward = 3.0  # type: ignore[assignment]


def test_closure_node_under_anomaly_detection_is_refused_clearly() -> None:
    x = Value(0.5)
    y = lecture_tanh(x)
    with detect_anomaly(), pytest.raises(TypeError, match="_backward closure"):
        y.backward()


# --------------------------------------------------------------------------
# microgpt: Value(data, children, local_grads), _children, _local_grads
# --------------------------------------------------------------------------


def by_hand(root: Value) -> None:
    """microgpt's backward pass, run by hand over ``_children`` and
    ``_local_grads``: the literal engine's own ``backward`` (recursive, as
    microgpt's; small graphs only), applied to chainrule's nodes."""
    microgpt.Value.backward(root)  # type: ignore[arg-type]


def graph(fused: bool) -> tuple[Value, list[Value]]:
    rng = random.Random(3)
    leaves = [Value(rng.uniform(-2, 2)) for _ in range(4)]
    a, b, c, d = leaves

    def build() -> Value:
        e = a * b + c
        f = (e * d).relu() + (a / c).exp() - b**2
        if fused:  # a library layer's one node
            g = dot([a, b, c, d], [e, f, e, f], a, "relu")
        else:
            g = sum(x * y for x, y in zip([a, b, c, d], [e, f, e, f]))
        return (g * f).tanh() + (-a).log() * 0.5 + f.sigmoid() / 3.0

    return build(), leaves


@pytest.mark.parametrize("fused", [False, True])
def test_microgpt_loop_by_hand_equals_backward(fused: bool) -> None:
    root, leaves = graph(fused)
    by_hand(root)
    mine = [v.grad for v in leaves]
    inner = {v: v.grad for v in topological_order(root)[0]}
    for v in [*inner, *leaves]:
        v.grad = 0.0
    root.backward()
    assert [v.grad for v in leaves] == mine  # bit for bit: the same order of +=
    assert all(v.grad == g for v, g in inner.items())
    assert any(g != 0.0 for g in mine)


def test_microgpt_constructor_builds_nodes_that_backpropagate() -> None:
    x = Value(3.0)
    y = Value(x.data**2, (x,), (2 * x.data,))  # microgpt's __pow__ by hand
    z = Value(y.data * x.data, (y, x), (x.data, y.data))
    s = Value(z.data + y.data + x.data, (z, y, x), (1, 1, 1))
    s.backward()
    # s = x^3 + x^2 + x: ds/dx = 3x^2 + 2x + 1
    assert x.grad == 3 * 9 + 2 * 3 + 1
    assert s._children == (z, y, x) and s._local_grads == (1.0, 1.0, 1.0)
    assert y._local_grads == (6.0,) and z._prev == (y, x)
    assert gradients(s, [x]) == [34.0]


def test_microgpt_nodes_refuse_create_graph_with_a_reason() -> None:
    x = Value(3.0)
    y = Value(x.data**2, (x,), (2 * x.data,))
    with pytest.raises(TypeError, match="constant local gradients"):
        y.backward(create_graph=True)


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        (((Value(1.0),), (1.0, 2.0)), ValueError, "1 children but 2 local gradients"),
        (((1.0,), (1.0,)), TypeError, "children must be Values"),
        (((Value(1.0),), ("x",)), TypeError, "expected an int, float"),
    ],
)
def test_constructor_mistakes_name_the_problem(args: tuple, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        Value(1.0, *args)


def test_label_keyword_and_micrograds_fourth_argument() -> None:
    a = Value(1.0, label="a")
    b = Value(2.0, (a,), "+", "b")  # micrograd's lecture: Value(data, _children, _op, label)
    assert (a.label, b.label, b._op) == ("a", "b", "+")


# --------------------------------------------------------------------------
# The hot operators write the table's rules out: they must agree with it
# --------------------------------------------------------------------------


def test_inlined_locals_equal_the_table() -> None:
    from chainrule.value import primitives as P
    from chainrule.value import sums as S
    from chainrule.value.primitives import FLOAT

    rng = random.Random(0)
    for _ in range(200):
        a, b = Value(rng.uniform(-5, 5)), Value(rng.choice([0.0, -0.0, rng.uniform(-5, 5)]))
        c = rng.uniform(-3, 3)
        cases = [
            (a + b, P.ADD.derivative(FLOAT, a.data, b.data, a.data + b.data)),
            (a * b, P.MUL.derivative(FLOAT, a.data, b.data, a.data * b.data)),
            (a + c, P.ADD.derivative(FLOAT, a.data, c, a.data + c)),
            (a * c, P.MUL.derivative(FLOAT, a.data, c, a.data * c)),
            (b.relu(), P.RELU.derivative(FLOAT, b.data, max(b.data, 0.0))),
        ]
        for node, rule in cases:
            assert node._local_grads == tuple(rule), node._op
        w, xs, bias = [a, b], [b, Value(c)], Value(c / 2)
        wd, xd = [a.data, b.data], [b.data, c]
        for relu, fn in ((False, S.AFFINE), (True, S.AFFINE_RELU)):
            act = "relu" if relu else None
            for x in (xs, xd):  # Values, or numbers (which become leaves)
                node = dot(w, x, bias, act)
                rule = fn.derivative(FLOAT, *wd, *xd, bias.data, node.data)
                assert node._local_grads == tuple(rule) and node._fn is fn
                assert node.data == fn.forward(*wd, *xd, bias.data)


def _bits(x: object) -> str:
    """Floats compared bit for bit (``-0.0`` is not ``0.0``, nan is nan)."""
    return repr(tuple(x) if isinstance(x, (tuple, list)) else x)


@pytest.mark.parametrize(
    "x", [2.5, 0.3, 1e-300, 1e300, 0.0, -0.0, -2.0, math.inf, -math.inf, math.nan]
)
def test_powers_exp_and_log_written_out_equal_the_table(x: float) -> None:
    """``x ** c``, ``exp`` and ``log`` write the table's rule out for the
    common case and take the table's path elsewhere: the same node either way."""
    from chainrule.value import primitives as P
    from chainrule.value.primitives import FLOAT

    exponents = [2, 3, 2.0, -1.0, 0.5, -0.5, 1.5, 0.0, -0.0, 10.0, 400.0, -400.0, 2.75, math.nan]
    for c in exponents:
        node = Value(x) ** c
        fn = P.pow_const(float(c))
        assert node._fn is fn, c
        assert _bits(node.data) == _bits(fn.forward(x)), c
        assert _bits(node._local_grads) == _bits(fn.derivative(FLOAT, x, node.data)), c
    for y in (x, x * 300.0, -x * 800.0):
        for node, fn in ((Value(y).exp(), P.EXP), (Value(y).log(), P.LOG)):
            assert node._fn is fn
            assert _bits(node.data) == _bits(fn.forward(y))
            assert _bits(node._local_grads) == _bits(fn.derivative(FLOAT, y, node.data))
