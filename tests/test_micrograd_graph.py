"""User arithmetic builds micrograd's graph, node for node.

Every operator call on a Value makes one node, as in micrograd and microgpt:
a number operand is a leaf Value, ``-b`` is ``b * -1``, ``a - b`` is
``a + (-b)``, ``a / b`` is ``a * b**-1``. These tests build the same
expressions in micrograd 0.1.0 (extended with ``tanh``, ``exp`` and ``log``
the way Karpathy's lecture writes them: one node, a ``_backward`` closure)
and in chainrule, and compare the graphs and the numbers.
"""

from __future__ import annotations

import math
import random
import threading
from typing import Any

import pytest

from chainrule import Value, no_grad
from chainrule.nn import MLP

mg_engine = pytest.importorskip("micrograd.engine")
mg_nn = pytest.importorskip("micrograd.nn")
MG = mg_engine.Value


def _mg_unary(x: Any, data: float, local: float, op: str) -> Any:
    out = MG(data, (x,), op)

    def _backward() -> None:
        x.grad += local * out.grad

    out._backward = _backward
    return out


def mg_tanh(x: Any) -> Any:
    t = math.tanh(x.data)
    return _mg_unary(x, t, 1 - t**2, "tanh")


def mg_exp(x: Any) -> Any:
    e = math.exp(x.data)
    return _mg_unary(x, e, e, "exp")


def mg_log(x: Any) -> Any:
    return _mg_unary(x, math.log(x.data), 1 / x.data, "log")


def walk(root: Any) -> tuple[list[Any], set[tuple[int, int]]]:
    """micrograd's build_topo over ``_prev``: the nodes, and the edges as
    distinct (node, input) pairs (micrograd's ``_prev`` is a set)."""
    topo: list[Any] = []
    seen: set[int] = set()
    edges: set[tuple[int, int]] = set()
    stack = [root]
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        topo.append(v)
        for child in v._prev:
            edges.add((id(v), id(child)))
            stack.append(child)
    return topo, edges


def random_expression(rng: random.Random, leaves: list[tuple[Any, Any]]) -> tuple[Any, Any]:
    """One expression over ``+ - * / ** neg relu tanh exp log`` with numbers
    mixed in, built in both engines side by side."""
    pool = list(leaves)
    for _ in range(rng.randint(1, 12)):
        (a, A), (b, B) = rng.choice(pool), rng.choice(pool)
        c = rng.choice([2.0, -1.5, 0.5, 3, 1])
        op = rng.randrange(14)
        if op == 0:
            pair = (a + b, A + B)
        elif op == 1:
            pair = (a - b, A - B)
        elif op == 2:
            pair = (a * b, A * B)
        elif op == 3:
            pair = (a / (b * b + 1.0), A / (B * B + 1.0))
        elif op == 4:
            k = rng.choice([2, 3])
            pair = (a**k, A**k)
        elif op == 5:
            pair = (-a, -A)
        elif op == 6:
            pair = (a.relu(), A.relu())
        elif op == 7:
            pair = (a.tanh(), mg_tanh(A))
        elif op == 8:
            pair = ((a * 0.1).exp(), mg_exp(A * 0.1))
        elif op == 9:
            pair = ((a * a + 1).log(), mg_log(A * A + 1))
        elif op == 10:
            pair = (a + c, A + c)
        elif op == 11:
            pair = (c - a, c - A)
        elif op == 12:
            pair = (c * a, c * A)
        else:
            pair = (c / (a * a + 1.0), c / (A * A + 1.0))
        pool.append(pair)
    return pool[-1]


def test_random_expressions_build_micrographs_graph_and_numbers() -> None:
    rng = random.Random(20)
    for _ in range(500):
        starts = [rng.uniform(-2.0, 2.0) for _ in range(rng.randint(1, 4))]
        leaves = [(Value(x), MG(x)) for x in starts]
        ours, theirs = random_expression(rng, leaves)
        if not (math.isfinite(ours.data) and abs(ours.data) < 1e6):
            continue
        mine, my_edges = walk(ours)
        ref, ref_edges = walk(theirs)
        assert len(mine) == len(ref)
        assert len(my_edges) == len(ref_edges)
        assert sorted(v.data for v in mine if not v._prev) == sorted(
            float(v.data) for v in ref if not v._prev
        )
        assert sorted(v.data for v in mine) == sorted(float(v.data) for v in ref)
        ours.backward()
        theirs.backward()
        for x, X in leaves:
            assert x.grad == pytest.approx(X.grad, rel=1e-12, abs=1e-300)
        mine_grads = sorted(v.grad for v in mine)
        ref_grads = sorted(float(v.grad) for v in ref)
        assert mine_grads == pytest.approx(ref_grads, rel=1e-12, abs=1e-12)


def test_the_walkthroughs_build_topo_finds_six_nodes() -> None:
    a, b, d = Value(2.0), Value(-3.0), Value(10.0)
    f = (a * b + d).relu()
    topo: list[Value] = []
    visited: set[Value] = set()

    def build_topo(v: Value) -> None:
        if v not in visited:
            visited.add(v)
            for child in v._prev:
                build_topo(child)
            topo.append(v)

    build_topo(f)
    assert len(topo) == 6
    assert [v._op for v in topo] == ["", "", "*", "", "+", "ReLU"]


def test_trace_graph_notebooks_example_has_six_nodes_and_five_edges() -> None:
    x = Value(1.0)
    y = (x * 2 + 1).relu()
    nodes, edges = walk(y)
    assert (len(nodes), len(edges)) == (6, 5)
    assert sorted(v.data for v in nodes if not v._prev) == [1.0, 1.0, 2.0]  # x, 2 and 1


def test_numbers_are_leaves_with_their_own_grad() -> None:
    a, b = Value(3.0), Value(4.0)
    s = a - b
    assert s._op == "+" and s._prev[0] is a
    neg = s._prev[1]
    assert neg._op == "*" and neg._prev[0] is b and neg._prev[1].data == -1.0
    q = a / b  # a * b**-1
    assert q._op == "*" and q._prev[1]._op == "**-1"
    t = a * 2
    t.backward()
    assert t._prev[1].data == 2.0 and t._prev[1].grad == 3.0


def test_fused_mlp_forward_is_micrograds_bit_for_bit() -> None:
    rng = random.Random(7)
    for case in range(2000):
        nin = rng.randint(1, 4)
        # (a hidden layer of one unit returns a bare Value, which micrograd's next layer can't take)
        sizes = [rng.randint(2, 4) for _ in range(rng.randint(0, 2))] + [rng.randint(1, 3)]
        theirs = mg_nn.MLP(nin, sizes)
        ours = MLP(nin, sizes)
        for p, q in zip(ours.parameters(), theirs.parameters()):
            p.data = q.data = rng.uniform(-2, 2)  # non-zero biases too
        x = [rng.uniform(-3, 3) for _ in range(nin)]
        out, ref = ours(x), theirs(x)
        outs = out if isinstance(out, list) else [out]
        refs = ref if isinstance(ref, list) else [ref]
        assert [v.data for v in outs] == [v.data for v in refs], case


def test_a_neuron_adds_its_bias_first_as_micrograd() -> None:
    from chainrule import dot

    w = [Value(0.5), Value(-1.5), Value(2.0)]
    x = [Value(1.0), Value(2.0), Value(-0.5)]
    b = Value(0.25)
    act = dot(w, x, b)
    assert act.data == ((0.25 + 0.5 * 1.0) + -1.5 * 2.0) + 2.0 * -0.5
    act.backward()
    assert [v.grad for v in w] == [1.0, 2.0, -0.5] and b.grad == 1.0
    chain = sum((wi * xi for wi, xi in zip(w, x)), b)  # the user's own: micrograd's chain
    assert chain.data == act.data and len(walk(chain)[0]) == 13


@pytest.mark.native  # threads: not in the WebAssembly build
def test_another_threads_no_grad_leaves_this_threads_graph_alone() -> None:
    inside, done = threading.Event(), threading.Event()

    def other() -> None:
        with no_grad():
            inside.set()
            done.wait(10)

    t = threading.Thread(target=other)
    t.start()
    try:
        assert inside.wait(10)
        w = [Value(float(i)) for i in range(4)]
        x = [Value(float(i) + 0.5) for i in range(4)]
        s = sum(a * b for a, b in zip(w, x))
        assert s._op == "+"
        assert len(walk(s)[0]) == 4 + 4 + 4 + 4 + 1  # leaves, products, sums from 0, the 0
    finally:
        done.set()
        t.join()


def test_the_engine_reads_no_reference_counts_or_python_version() -> None:
    from pathlib import Path

    import chainrule

    src = Path(chainrule.__file__).parent
    for path in src.rglob("*.py"):
        assert "getrefcount" not in path.read_text(), path
    for path in (src / "value").glob("*.py"):  # the scalar engine
        assert "sys.version_info" not in path.read_text(), path
