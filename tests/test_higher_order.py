"""Second and third derivatives of every built-in op, and ``hessian``,
against PyTorch float64 (``torch.autograd.grad(create_graph=True)`` and
``torch.func.hessian``) at random points."""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable
from typing import Any

import pytest

import chainrule
from chainrule import Primitive, Value, add_n, dot, gradients, hessian
from conftest import close
from test_oracle_torch import BINARY, UNARY

RTOL = 1e-10  # a few roundings apart: the rules are the same, the order of operations not always
RNG = random.Random(20240605)
UNARY_POINTS = [RNG.uniform(0.05, 3.0) for _ in range(3)] + [
    RNG.uniform(-3.0, -0.05) for _ in range(3)
]
BINARY_POINTS = [(RNG.uniform(0.2, 3.0), RNG.uniform(-3.0, 3.0)) for _ in range(3)] + [
    (RNG.uniform(-3.0, -0.2), RNG.uniform(-3.0, 3.0)) for _ in range(2)
]

# PyTorch's derivative of 0 ** x goes through where(base == 0, 0, grad * result * log(0)):
# the masked branch still backpropagates 0 * -inf = nan from the second derivative on.
# Every derivative of 0 ** x (x > 0) is 0, which is what chainrule gives; for
# x < 0 both give ±inf.
TORCH_NAN_ARTEFACT = {"rpow0"}


def _ours(
    f: Callable[..., Value], point: tuple[float, ...], order: int
) -> dict[tuple[int, ...], float]:
    """Every partial derivative of ``f`` at ``point`` up to ``order``, by
    repeated ``gradients(create_graph=True)``; keys are the variables
    differentiated by, in order."""
    xs = [Value(p) for p in point]
    found: dict[tuple[int, ...], float] = {(): f(*xs).data}
    level: dict[tuple[int, ...], Value] = {(): f(*xs)}
    for _ in range(order):
        deeper = {}
        for key, g in level.items():
            for i, d in enumerate(gradients(g, xs, create_graph=True)):
                deeper[(*key, i)] = d
                found[(*key, i)] = d.data
        level = deeper
    return found


def _theirs(
    torch: Any, f: Callable[..., Any], point: tuple[float, ...], order: int
) -> dict[tuple[int, ...], float]:
    xs = [torch.tensor(p, dtype=torch.float64, requires_grad=True) for p in point]
    y = f(torch, *xs)
    found: dict[tuple[int, ...], float] = {(): y.item()}
    level = {(): y}
    zero = torch.zeros((), dtype=torch.float64)
    for _ in range(order):
        deeper = {}
        for key, g in level.items():
            if g.requires_grad:
                ds = torch.autograd.grad(g, xs, create_graph=True, allow_unused=True)
            else:
                ds = (None,) * len(xs)
            for i, d in enumerate(ds):
                d = zero if d is None else d
                deeper[(*key, i)] = d
                found[(*key, i)] = d.item()
        level = deeper
    return found


def _compare(
    ours: dict[tuple[int, ...], float], theirs: dict[tuple[int, ...], float], what: str
) -> None:
    assert ours.keys() == theirs.keys()
    for key in ours:
        assert close(ours[key], theirs[key], rtol=RTOL), (
            f"{what} d/d{key}: chainrule {ours[key]!r} != torch {theirs[key]!r}"
        )


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_second_and_third_derivatives_match_torch(name: str, torch: Any) -> None:
    ours_f, torch_f = UNARY[name]
    for p in UNARY_POINTS:
        ours = _ours(ours_f, (p,), 3)
        if name in TORCH_NAN_ARTEFACT and p > 0.0:
            assert ours[(0, 0)] == ours[(0, 0, 0)] == 0.0
            continue
        _compare(ours, _theirs(torch, torch_f, (p,), 3), f"{name}({p})")


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_mixed_partials_to_third_order_match_torch(name: str, torch: Any) -> None:
    ours_f, torch_f = BINARY[name]
    for point in BINARY_POINTS:
        ours = _ours(ours_f, point, 3)
        assert len(ours) == 1 + 2 + 4 + 8
        _compare(ours, _theirs(torch, torch_f, point, 3), f"{name}{point}")


# Fused and module-level ops, and a custom primitive, on three variables.
FUSED: dict[str, tuple[Callable[..., Any], Callable[..., Any]]] = {
    "dot": (
        lambda a, b, c: dot([a, b, a * c], [c, a.exp(), b]),
        lambda t, a, b, c: a * c + b * a.exp() + a * c * b,
    ),
    "dot_bias": (
        lambda a, b, c: dot([a, b], [b.sin(), c], a * b),
        lambda t, a, b, c: a * b.sin() + b * c + a * b,
    ),
    "dot_const_x": (
        lambda a, b, c: dot([a * a, b * c], [2.0, -3.0], c),
        lambda t, a, b, c: 2.0 * a * a - 3.0 * b * c + c,
    ),
    "add_n": (
        lambda a, b, c: add_n([a * b, b.tanh(), c**3, 1.5]),
        lambda t, a, b, c: a * b + b.tanh() + c**3 + 1.5,
    ),
    "module_functions": (
        lambda a, b, c: (
            chainrule.sigmoid(a) * chainrule.softplus(b)
            + chainrule.cos(c) / chainrule.sqrt(a * a + 1.0)
        ),
        lambda t, a, b, c: (
            t.sigmoid(a) * t.logaddexp(b, t.zeros_like(b)) + t.cos(c) / t.sqrt(a * a + 1.0)
        ),
    ),
    "custom": (
        lambda a, b, c: Primitive(
            "x*exp(y)",
            lambda x, y: x * math.exp(y),
            lambda M, x, y, out: (M.exp(y), out),
        )(a * c, b),
        lambda t, a, b, c: a * c * t.exp(b),
    ),
}


@pytest.mark.parametrize("name", sorted(FUSED))
def test_fused_and_custom_ops_match_torch_to_third_order(name: str, torch: Any) -> None:
    ours_f, torch_f = FUSED[name]
    point = (0.7, -0.4, 1.3)
    _compare(_ours(ours_f, point, 3), _theirs(torch, torch_f, point, 3), name)


def test_backward_create_graph_matches_torch(torch: Any) -> None:
    # The .grad path: interior grads replaced, leaf grads accumulated, as in torch.
    a, b = Value(0.8), Value(-1.1)
    y = (a * b).sin() + a.exp() * b
    y.backward(create_graph=True)
    ga, gb = a.grad, b.grad
    assert isinstance(ga, Value) and isinstance(gb, Value)
    ta = torch.tensor(0.8, dtype=torch.float64, requires_grad=True)
    tb = torch.tensor(-1.1, dtype=torch.float64, requires_grad=True)
    ty = (ta * tb).sin() + ta.exp() * tb
    ty.backward(create_graph=True)
    assert close(ga.data, ta.grad.item()) and close(gb.data, tb.grad.item())
    # differentiate a.grad again, through gradients(): d2y/da2 and d2y/dadb
    haa, hab = gradients(ga, [a, b])
    taa, tab = torch.autograd.grad(ta.grad, [ta, tb])
    assert close(haa, taa.item()) and close(hab, tab.item())


def test_backward_create_graph_accumulates_into_leaf_grads() -> None:
    x = Value(3.0)
    (x * x).backward(create_graph=True)
    (x * x * x).backward(create_graph=True)
    assert isinstance(x.grad, Value)
    assert x.grad.data == 2 * 3.0 + 3 * 9.0  # 6 + 27
    (h,) = gradients(x.grad, [x])
    assert h == 2.0 + 6 * 3.0


def test_third_derivative_through_backward_three_times() -> None:
    # d3/dx3 of x**4 = 24 x, by backward(create_graph=True) on fresh leaves' grads
    x = Value(1.5)
    (x**4).backward(create_graph=True)
    g1 = x.grad
    assert isinstance(g1, Value)
    (g2,) = gradients(g1, [x], create_graph=True)
    (g3,) = gradients(g2, [x])
    assert (g1.data, g2.data, g3) == (4 * 1.5**3, 12 * 1.5**2, 24 * 1.5)


# Multi-input scalar functions for hessian vs torch.func.hessian: (ours on a
# list of Values, torch on a 1-d tensor).
HESSIAN_CASES: dict[str, tuple[Callable[[Any], Any], Callable[[Any, Any], Any], list[float]]] = {
    "rosenbrock": (
        lambda v: sum(
            (1.0 - v[i]) ** 2 + 100.0 * (v[i + 1] - v[i] ** 2) ** 2 for i in range(len(v) - 1)
        ),
        lambda t, v: ((1.0 - v[:-1]) ** 2 + 100.0 * (v[1:] - v[:-1] ** 2) ** 2).sum(),
        [-1.2, 1.0, 0.7, 0.3],
    ),
    "log_sum_exp": (
        lambda v: add_n([x.exp() for x in v]).log(),
        lambda t, v: t.logsumexp(v, 0),
        [0.3, -1.2, 2.0],
    ),
    "neuron": (
        lambda v: (dot(v[:3], [0.5, -1.5, 2.0], v[3]).tanh() - 0.25) ** 2 + v[0] * v[1].sigmoid(),
        lambda t, v: (
            ((v[:3] * t.tensor([0.5, -1.5, 2.0], dtype=t.float64)).sum() + v[3]).tanh().sub(0.25)
            ** 2
            + v[0] * v[1].sigmoid()
        ),
        [0.2, -0.4, 0.1, 0.05],
    ),
    "trig_pow_div": (
        lambda v: v[0].sin() * v[1] ** 3 / (1.0 + v[2] * v[2]) + (v[0] * v[2]).cos() ** v[1],
        lambda t, v: v[0].sin() * v[1] ** 3 / (1.0 + v[2] * v[2]) + (v[0] * v[2]).cos() ** v[1],
        [0.4, 1.7, -0.9],
    ),
}


@pytest.mark.parametrize("name", sorted(HESSIAN_CASES))
def test_hessian_matches_torch_func_hessian(name: str, torch: Any) -> None:
    ours_f, torch_f, point = HESSIAN_CASES[name]
    ours = hessian(ours_f)(point)
    theirs = torch.func.hessian(lambda v: torch_f(torch, v))(
        torch.tensor(point, dtype=torch.float64)
    )
    assert len(ours) == len(point) and all(type(h) is float for row in ours for h in row)
    for i, j in itertools.product(range(len(point)), repeat=2):
        assert close(ours[i][j], theirs[i, j].item(), rtol=RTOL), (
            name,
            i,
            j,
            ours[i][j],
            theirs[i, j].item(),
        )


def test_hessian_of_several_scalar_arguments_matches_torch(torch: Any) -> None:
    def f(x: Any, y: Any, z: Any) -> Any:
        return x * y.exp() * z + (x / z).sin()

    ours = hessian(f, argnums=(0, 1, 2))(0.5, -0.3, 1.4)
    theirs = torch.func.hessian(lambda v: f(v[0], v[1], v[2]))(
        torch.tensor([0.5, -0.3, 1.4], dtype=torch.float64)
    )
    for i, j in itertools.product(range(3), repeat=2):
        assert close(ours[i][j], theirs[i, j].item(), rtol=RTOL)


def test_a_value_seed_is_differentiable(torch: Any) -> None:
    # vector-Jacobian product with the vector a Value: d/dv (v * dy/dx) = dy/dx
    x, v = Value(0.6), Value(2.5)
    y = x.sin() * x
    (vjp,) = gradients(y, [x], gradient=v, create_graph=True)
    dvjp_dx, dvjp_dv = gradients(vjp, [x, v])
    tx = torch.tensor(0.6, dtype=torch.float64, requires_grad=True)
    tv = torch.tensor(2.5, dtype=torch.float64, requires_grad=True)
    (tvjp,) = torch.autograd.grad(tx.sin() * tx, tx, grad_outputs=tv, create_graph=True)
    t_dx, t_dv = torch.autograd.grad(tvjp, [tx, tv])
    assert close(vjp.data, tvjp.item())
    assert close(dvjp_dx, t_dx.item()) and close(dvjp_dv, t_dv.item())


def test_custom_op_works_like_a_builtin() -> None:
    # softsign(x) = x / (1 + |x|), derivative 1 / (1 + |x|)^2
    softsign = Primitive(
        "softsign",
        lambda x: x / (1.0 + abs(x)),
        lambda M, x, out: (M.div(1.0, (1.0 + M.sign(x) * x) ** 2),),
    )
    x = Value(-0.5, label="x")
    y = softsign(x * 2.0)
    assert y._op == "softsign" and len(y._prev) == 1 and y._prev[0]._prev[0] is x
    y.backward()
    assert y.data == -0.5 and x.grad == 2.0 * 0.25
    assert 'label="softsign"' in chainrule.to_dot(y)  # drawn like a built-in
    assert "softsign  -0.5  #2: 0.25" in chainrule.explain(y)
    assert chainrule.gradcheck(lambda v: softsign(v * 2.0), [-0.5], order=2).ok
    # second derivative of softsign(u) = -2 sign(u) / (1 + |u|)^3, at u = 2x = -1: 0.25; times 2^2
    assert hessian(lambda v: softsign(v * 2.0))(-0.5) == 4 * 0.25
    with chainrule.no_grad():
        assert softsign(x)._prev == ()
    assert softsign(3.0).data == 0.75  # numbers are lifted
