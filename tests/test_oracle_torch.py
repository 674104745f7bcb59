"""Every op's value and gradient against PyTorch float64, at ordinary and
at edge points (0, -0, huge, tiny, inf, nan)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from chainrule import Value, dot, gradients
from conftest import close

ORDINARY = [-2.5, -1.0, -0.3, 0.7, 1.0, 1.5, 3.0]
EDGE = [0.0, -0.0, 1e-300, -1e-300, 1e-8, 1e300, -1e300, 710.0, -710.0, 40.0, -40.0]
SPECIAL = [math.inf, -math.inf, math.nan]
POINTS = ORDINARY + EDGE + SPECIAL

# name -> (ours on a Value, torch on a tensor)
UNARY: dict[str, tuple[Callable[[Any], Any], Callable[[Any, Any], Any]]] = {
    "exp": (lambda x: x.exp(), lambda t, x: t.exp(x)),
    "log": (lambda x: x.log(), lambda t, x: t.log(x)),
    "sqrt": (lambda x: x.sqrt(), lambda t, x: t.sqrt(x)),
    "tanh": (lambda x: x.tanh(), lambda t, x: t.tanh(x)),
    "sigmoid": (lambda x: x.sigmoid(), lambda t, x: t.sigmoid(x)),
    "relu": (lambda x: x.relu(), lambda t, x: t.relu(x)),
    # torch's softplus switches to x above 20 (an approximation); the exact
    # function is logaddexp(x, 0), which is what chainrule computes.
    "softplus": (lambda x: x.softplus(), lambda t, x: t.logaddexp(x, t.zeros_like(x))),
    "sin": (lambda x: x.sin(), lambda t, x: t.sin(x)),
    "cos": (lambda x: x.cos(), lambda t, x: t.cos(x)),
    "abs": (lambda x: abs(x), lambda t, x: t.abs(x)),
    "neg": (lambda x: -x, lambda t, x: -x),
    "square": (lambda x: x**2, lambda t, x: x**2),
    "cube": (lambda x: x**3, lambda t, x: x**3),
    "pow0": (lambda x: x**0, lambda t, x: x**0),
    "pow_half": (lambda x: x**0.5, lambda t, x: x**0.5),
    "pow_neg1": (lambda x: x**-1, lambda t, x: x**-1),
    "pow_neg1.5": (lambda x: x**-1.5, lambda t, x: x**-1.5),
    "rpow2": (lambda x: 2**x, lambda t, x: 2**x),
    "rpow0": (lambda x: 0**x, lambda t, x: 0**x),
    "rpow_neg": (lambda x: (-2) ** x, lambda t, x: (-2) ** x),
    "scale": (lambda x: 2.5 * x, lambda t, x: 2.5 * x),
    "shift": (lambda x: x + 2.5, lambda t, x: x + 2.5),
    "rsub": (lambda x: 2.5 - x, lambda t, x: 2.5 - x),
    "sub_const": (lambda x: x - 2.5, lambda t, x: x - 2.5),
    "div_const": (lambda x: x / 3.0, lambda t, x: x / 3.0),
    "div_zero": (lambda x: x / 0.0, lambda t, x: x / 0.0),
    "rdiv": (lambda x: 3.0 / x, lambda t, x: 3.0 / x),
}

BINARY: dict[str, tuple[Callable[[Any, Any], Any], Callable[[Any, Any, Any], Any]]] = {
    "add": (lambda a, b: a + b, lambda t, a, b: a + b),
    "sub": (lambda a, b: a - b, lambda t, a, b: a - b),
    "mul": (lambda a, b: a * b, lambda t, a, b: a * b),
    "div": (lambda a, b: a / b, lambda t, a, b: a / b),
    "pow": (lambda a, b: a**b, lambda t, a, b: a**b),
    "max": (lambda a, b: a.max(b), lambda t, a, b: t.maximum(a, b)),
    "min": (lambda a, b: a.min(b), lambda t, a, b: t.minimum(a, b)),
}

BINARY_POINTS = [-2.0, -0.5, -0.0, 0.0, 0.5, 1.0, 2.0, 3.0, 1e200, math.inf, math.nan]


def _check(ours: float, theirs: float, what: str) -> None:
    assert close(ours, theirs), f"{what}: chainrule {ours!r} != torch {theirs!r}"


def _check_value(ours: float, theirs: float, what: str) -> None:
    """As _check, and a zero must have torch's sign: ``-0.0`` is a value."""
    _check(ours, theirs, what)
    if theirs == 0.0:
        assert math.copysign(1.0, ours) == math.copysign(1.0, theirs), f"{what}: {ours!r}"


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_op_matches_torch(name: str, torch: Any) -> None:
    ours_f, torch_f = UNARY[name]
    for p in POINTS:
        x = Value(p)
        y = ours_f(x)
        y.backward()
        tx = torch.tensor(p, dtype=torch.float64, requires_grad=True)
        ty = torch_f(torch, tx)
        ty.backward()
        _check_value(y.data, ty.item(), f"{name}({p}) value")
        _check(x.grad, tx.grad.item(), f"{name}({p}) grad")


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_op_matches_torch(name: str, torch: Any) -> None:
    ours_f, torch_f = BINARY[name]
    for pa in BINARY_POINTS:
        for pb in BINARY_POINTS:
            a, b = Value(pa), Value(pb)
            y = ours_f(a, b)
            y.backward()
            ta = torch.tensor(pa, dtype=torch.float64, requires_grad=True)
            tb = torch.tensor(pb, dtype=torch.float64, requires_grad=True)
            ty = torch_f(torch, ta, tb)
            ty.backward()
            where = f"{name}({pa}, {pb})"
            _check_value(y.data, ty.item(), where + " value")
            _check(a.grad, ta.grad.item(), where + " grad a")
            _check(b.grad, tb.grad.item(), where + " grad b")


# An infinite or nan gradient arriving at a zero local derivative: PyTorch
# multiplies (0 * inf = nan) except where its backward selects (relu,
# maximum, minimum), which leave a masked input at 0. chainrule does the same.
NONFINITE_UPSTREAM: dict[str, tuple[Callable[..., Any], Callable[..., Any], list[float]]] = {
    "relu then log": (lambda x: x.relu().log(), lambda t, x: t.relu(x).log(), [-1.0]),
    "relu then nan": (
        lambda x: x.relu() * math.nan,
        lambda t, x: t.relu(x) * math.nan,
        [-1.0],
    ),
    "max then log": (
        lambda a, b: (a.max(b) - b).log(),
        lambda t, a, b: (t.maximum(a, b) - b).log(),
        [-1.0, 2.0],
    ),
    "min then log": (
        lambda a, b: (a.min(b) - a).log(),
        lambda t, a, b: (t.minimum(a, b) - a).log(),
        [-1.0, 2.0],
    ),
    "abs then log": (lambda x: abs(x).log(), lambda t, x: t.abs(x).log(), [0.0]),
    # torch.pow selects, too: no gradient through a zero exponent to the
    # base, but 0 * inf = nan for the exponent's own gradient
    "zero exponent then inf": (lambda x: x**0 * math.inf, lambda t, x: x**0 * math.inf, [2.0]),
    "zero Value exponent then inf": (
        lambda a, b: a**b * math.inf,
        lambda t, a, b: a**b * math.inf,
        [2.0, 0.0],
    ),
    "zero base then inf": (
        lambda a, b: a**b * math.inf,
        lambda t, a, b: a**b * math.inf,
        [0.0, 2.0],
    ),
    "times zero then log": (
        lambda x: (x * 0.0).log(),
        lambda t, x: (x * 0.0).log(),
        [3.0],
    ),
    "dead fused unit": (
        lambda w, x, b: dot([w], [x], b, activation="relu").log(),
        lambda t, w, x, b: t.relu(w * x + b).log(),
        [2.0, 0.5, -3.0],
    ),
    # relu(nan) is nan and passes its gradient: only <= 0 is masked
    "fused unit, nan input": (
        lambda w, x, b: dot([w], [x], b, activation="relu"),
        lambda t, w, x, b: t.relu(w * x + b),
        [2.0, math.nan, 1.0],
    ),
    "fused unit, nan constant input": (
        lambda w, b: dot([w], [math.nan], b, activation="relu"),
        lambda t, w, b: t.relu(w * math.nan + b),
        [2.0, 1.0],
    ),
    "live fused unit, zero input": (
        lambda w, x, b: dot([w], [x], b, activation="relu") * math.inf,
        lambda t, w, x, b: t.relu(w * x + b) * math.inf,
        [2.0, 0.0, 1.0],
    ),
}


@pytest.mark.parametrize("name", sorted(NONFINITE_UPSTREAM))
def test_nonfinite_gradient_through_masks_matches_torch(name: str, torch: Any) -> None:
    ours_f, torch_f, points = NONFINITE_UPSTREAM[name]
    xs = [Value(p) for p in points]
    y = ours_f(*xs)
    y.backward()
    txs = [torch.tensor(p, dtype=torch.float64, requires_grad=True) for p in points]
    torch_f(torch, *txs).backward()
    for i, (x, tx) in enumerate(zip(xs, txs)):
        _check(x.grad, tx.grad.item(), f"{name}: grad of input {i}")
    # the dict-based pass of gradients() follows the same rule
    for g, tx in zip(gradients(ours_f(*xs), xs), txs):
        _check(g, tx.grad.item(), f"{name}: gradients()")
