"""Sums built term by term (``sum(w * x for ...)``) are one node, and that
changes no number: random programs built with fusion and inside
``elementary()`` (every operation its own node, as micrograd) give the same
values and the same gradients, bit for bit, leaves and kept nodes alike."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from chainrule import Value, elementary
from chainrule.engine import topological_order

# One step of a program: (kind, node indices, a number). Each kind builds a
# new node from earlier ones the way user code does.
KINDS = [
    "sum_products",  # sum(a * b for a, b in pairs)
    "sum_start",  # sum((a * b for ...), c): micrograd's neuron
    "sum_derived",  # sum(a * (b * 2.0 + c) for ...): terms computed from other terms' inputs
    "expr",  # a * b + c * d + e
    "kept_partial",  # s = a * b + c * d; t = s + e * f; both used
    "mul",
    "add",
    "tanh",
    "exp_scaled",
    "div",
]

step = st.tuples(
    st.sampled_from(KINDS),
    st.lists(st.integers(0, 1000), min_size=6, max_size=6),
    st.floats(-2.0, 2.0, allow_nan=False),
)


def run(program: list[tuple[str, list[int], float]], start: list[float]) -> tuple[Any, ...]:
    leaves = [Value(x) for x in start]
    nodes: list[Value] = list(leaves)
    for kind, picks, c in program:
        a, b, d, e, f, g = (nodes[i % len(nodes)] for i in picks)
        pairs = list(zip([a, d, f], [b, e, g]))
        if kind == "sum_products":
            nodes.append(sum(p * q for p, q in pairs))
        elif kind == "sum_start":
            nodes.append(sum((p * q for p, q in pairs), a))
        elif kind == "sum_derived":
            nodes.append(sum(p * (q * 2.0 + a) for p, q in pairs))
        elif kind == "expr":
            nodes.append(a * b + d * e + f)
        elif kind == "kept_partial":
            s = a * b + d * e
            t = s + f * g
            nodes.append(s)
            nodes.append(t)
        elif kind == "mul":
            nodes.append(a * b)
        elif kind == "add":
            nodes.append(a + b)
        elif kind == "tanh":
            nodes.append((a * c).tanh())
        elif kind == "exp_scaled":
            nodes.append((a * 0.1).exp() * c)
        else:
            nodes.append(a / (b * b + 1.0))
    root = sum(n * n for n in nodes[len(leaves) :]) * 0.5 if len(nodes) > len(leaves) else leaves[0]
    root.backward()
    return root.data, [v.grad for v in nodes], len(topological_order(root)[0])


def same(x: float, y: float) -> bool:
    return x == y or (math.isnan(x) and math.isnan(y))


@given(
    st.lists(step, min_size=1, max_size=12),
    st.lists(st.floats(-3.0, 3.0, allow_nan=False), min_size=1, max_size=5),
)
def test_fused_sums_give_the_elementary_numbers_bit_for_bit(
    program: list[tuple[str, list[int], float]], start: list[float]
) -> None:
    fused = run(program, start)
    with elementary():
        plain = run(program, start)
    assert same(fused[0], plain[0])
    assert len(fused[1]) == len(plain[1])
    assert all(same(x, y) for x, y in zip(fused[1], plain[1]))
    assert fused[2] <= plain[2]  # never more nodes


def test_a_neuron_is_one_node_and_its_numbers_are_micrograds() -> None:
    w = [Value(0.5), Value(-1.5), Value(2.0)]
    x = [Value(1.0), Value(2.0), Value(-0.5)]
    b = Value(0.25)
    act = sum((wi * xi for wi, xi in zip(w, x)), b)
    assert act._op == "sum" and len(topological_order(act)[0]) == 1
    assert act.data == ((0.25 + 0.5 * 1.0) + -1.5 * 2.0) + 2.0 * -0.5
    act.backward()
    assert [v.grad for v in w] == [1.0, 2.0, -0.5] and b.grad == 1.0


def test_a_kept_partial_sum_stays_its_own_node() -> None:
    a, b, c, d, e, f = (Value(float(i + 1)) for i in range(6))
    s = a * b + c * d
    t = s + e * f
    assert s._op == t._op == "sum"
    assert s in t._children  # not copied into t: s's gradient is complete
    (t * s).backward()
    assert s.grad == t.data + s.data * 1.0
