"""chainrule.compile and round thirty-four: a parameter read besides the
arguments wired into a node between calls (microgpt's ``w.__init__(d,
children, local_grads)``, micrograd's ``_prev`` and ``_backward``). Eager's
numbers, never another."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest

import chainrule
from chainrule import Value, optim

pytestmark = pytest.mark.usefixtures("trace_every_graph")


def _microgpt_rewire(w: Value, a: Value) -> None:
    w.__init__(w.data, (a,), (2.0,))  # type: ignore[misc]


def _micrograd_rewire(w: Value, a: Value) -> None:
    w._prev = (a,)

    def _backward() -> None:
        a.grad += 2.0 * w.grad

    w._backward = _backward


@pytest.mark.parametrize("rewire", [_microgpt_rewire, _micrograd_rewire])
def test_a_parameter_made_a_node_between_calls_passes_its_gradient_on(
    rewire: Callable[[Value, Value], None],
) -> None:
    a, w = Value(0.5), Value(0.3)

    def f(x: float) -> Value:
        return w * x + 1.0

    fast = chainrule.compile(f, budget=False)
    seen: list[tuple[Any, ...]] = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for k, x in enumerate((1.0, 2.0, 2.0, 3.0)):
            if k == 2:
                rewire(w, a)
            for g in (f, fast):
                w.grad = a.grad = 0.0
                out = g(x)
                out.backward()
                seen.append((out.data, w.grad, a.grad))
    assert seen[0::2] == seen[1::2]
    assert seen[-1] == (1.9, 3.0, 6.0)  # a's gradient, through w: 2 * 3


def test_a_parameter_made_a_node_between_training_steps_passes_its_gradient_on() -> None:
    def run(compiled: bool) -> list[float]:
        a, w = Value(0.5), Value(0.3)
        opt = optim.SGD([w, a], lr=0.1)

        def loss(x: float) -> Value:
            return (w * x - 1.0) ** 2

        step = chainrule.compile(loss, optimizer=opt, budget=False) if compiled else None
        for k, x in enumerate((1.0, 2.0, 1.5, 3.0)):
            if k == 2:
                _microgpt_rewire(w, a)
            if step is not None:
                step(x)
            else:
                out = loss(x)
                opt.zero_grad()
                out.backward()
                opt.step()
        return [w.data, a.data]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        eager, compiled = run(False), run(True)
    assert compiled == eager
    assert eager[1] != 0.5  # a learned, through w
