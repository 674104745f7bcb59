"""Property tests: random expression graphs, built in chainrule and in
PyTorch float64 from the same program, give the same value and gradients."""

from __future__ import annotations

import math
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from chainrule import Value, add_n, dot
from conftest import close

UNARY = ["tanh", "sigmoid", "relu", "exp", "sin", "cos", "abs", "neg", "square", "softplus"]
BINARY = ["add", "sub", "mul", "div", "max", "min", "pow_abs"]


def _unary(name: str, x: Any, torch: Any = None) -> Any:
    if name == "neg":
        return -x
    if name == "square":
        return x**2
    if name == "abs":
        return abs(x)
    if name == "exp":  # keep values finite-ish so comparisons are meaningful
        return (x * 0.1).exp()
    if torch is not None:
        if name == "softplus":
            return torch.logaddexp(x, torch.zeros_like(x))
        return getattr(torch, name)(x)
    return getattr(x, name)()


def _binary(name: str, a: Any, b: Any, torch: Any = None) -> Any:
    if name == "add":
        return a + b
    if name == "sub":
        return a - b
    if name == "mul":
        return a * b
    if name == "div":
        return a / (b * b + 0.5)
    if name == "pow_abs":
        return (abs(a) + 0.5) ** (b * 0.3)
    if torch is not None:
        return torch.maximum(a, b) if name == "max" else torch.minimum(a, b)
    return a.max(b) if name == "max" else a.min(b)


# A program: a list of instructions; each refers to earlier nodes by index,
# so shared subexpressions and reuse arise naturally.
instruction = st.one_of(
    st.tuples(st.just("u"), st.sampled_from(UNARY), st.integers(0, 10**6)),
    st.tuples(st.just("b"), st.sampled_from(BINARY), st.integers(0, 10**6), st.integers(0, 10**6)),
    st.tuples(st.just("reuse"), st.integers(0, 10**6), st.integers(2, 12)),
    # a neuron: one fused node, with or without its ReLU
    st.tuples(st.just("dot"), st.integers(0, 10**6), st.integers(0, 10**6), st.booleans()),
)
inputs = st.lists(st.floats(-3, 3, allow_nan=False), min_size=1, max_size=4)


def run(program: list[tuple[Any, ...]], xs: list[Any], torch: Any = None) -> Any:
    nodes = list(xs)
    for ins in program:
        pick = lambda k: nodes[k % len(nodes)]  # noqa: E731
        if ins[0] == "u":
            nodes.append(_unary(ins[1], pick(ins[2]), torch))
        elif ins[0] == "b":
            nodes.append(_binary(ins[1], pick(ins[2]), pick(ins[3]), torch))
        elif ins[0] == "reuse":  # one node used many times
            n = pick(ins[1])
            if torch is None:
                nodes.append(add_n([n] * ins[2]) * 0.25)
            else:
                nodes.append(sum([n] * ins[2]) * 0.25)
        else:
            k = min(len(nodes), 5)
            ws, vs = nodes[-k:], [pick(ins[1] + i) for i in range(k)]
            act = "relu" if ins[3] else None
            if torch is None:
                nodes.append(dot(ws, vs, pick(ins[2]), activation=act) * 0.1)
            else:
                pre = sum(w * v for w, v in zip(ws, vs)) + pick(ins[2])
                nodes.append((torch.relu(pre) if act else pre) * 0.1)
    # the output mixes the last few nodes so that most of the graph matters
    tail = nodes[-3:]
    out = tail[0]
    for n in tail[1:]:
        out = out + n
    return out


@given(program=st.lists(instruction, min_size=1, max_size=25), values=inputs)
def test_random_graphs_match_torch(
    program: list[tuple[Any, ...]], values: list[float], torch: Any
) -> None:
    xs = [Value(v) for v in values]
    out = run(program, xs)
    out.backward()
    txs = [torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in values]
    tout = run(program, txs, torch)
    tgrads = torch.autograd.grad(tout, txs, allow_unused=True)
    assert close(out.data, tout.item(), rtol=1e-9), (out.data, tout.item())
    for x, tg in zip(xs, tgrads):
        expected = 0.0 if tg is None else tg.item()
        # torch and chainrule may round the same sum in a different order
        assert close(x.grad, expected, rtol=1e-7, atol=1e-9), (x.grad, expected)


@given(program=st.lists(instruction, min_size=1, max_size=15), values=inputs)
def test_two_backwards_give_exactly_twice(
    program: list[tuple[Any, ...]], values: list[float]
) -> None:
    xs = [Value(v) for v in values]
    out = run(program, xs)
    out.backward()
    once = [x.grad for x in xs]
    out.backward()
    for x, g in zip(xs, once):
        assert x.grad == 2 * g or (math.isnan(g) and math.isnan(x.grad))
