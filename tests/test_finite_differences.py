"""Analytic gradients against central finite differences: an oracle that
shares nothing with either engine."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from chainrule import Value, dot

FUNCTIONS: dict[str, Callable[[Value], Value]] = {
    "exp": lambda x: x.exp(),
    "log": lambda x: (x * x + 0.1).log(),
    "sqrt": lambda x: (x * x + 0.1).sqrt(),
    "tanh": lambda x: x.tanh(),
    "sigmoid": lambda x: x.sigmoid(),
    "relu": lambda x: (x - 0.05).relu(),
    "softplus": lambda x: x.softplus(),
    "sin": lambda x: x.sin(),
    "cos": lambda x: x.cos(),
    "abs": lambda x: abs(x - 0.05),
    "pow_const": lambda x: (x * x + 1.0) ** 1.7,
    "rpow": lambda x: 3.0**x,
    "pow_values": lambda x: (x * x + 1.0) ** x,
    "div": lambda x: (x + 3.0) / (x * x + 1.0),
    "rdiv": lambda x: 2.0 / (x * x + 1.0),
    "max": lambda x: x.max(x * 0.5 + 0.3),
    "min": lambda x: x.min(x * 0.5 + 0.3),
    "dot": lambda x: dot([x, x * x, 2.0], [x.sin(), 3.0, x], x),
    "composite": lambda x: ((x * 2.0).tanh() * x.exp() - x**3 / 7.0).sigmoid() * x,
}

POINTS = [-1.7, -0.4, 0.35, 0.9, 2.2]


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
@pytest.mark.parametrize("p", POINTS)
def test_gradient_matches_central_difference(name: str, p: float) -> None:
    f = FUNCTIONS[name]
    x = Value(p)
    f(x).backward()
    h = 1e-6
    numeric = (f(Value(p + h)).data - f(Value(p - h)).data) / (2 * h)
    assert math.isclose(x.grad, numeric, rel_tol=1e-5, abs_tol=1e-7), (x.grad, numeric)
