"""chainrule.compile and the ninth probe: random numbers drawn where
compile does not copy the code (a ``@dataclass``'s generated ``__init__``,
a function without source) are seen by their generator's state, and the
function runs eagerly."""

from __future__ import annotations

import dataclasses
import random
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import chainrule
from chainrule import Value
from chainrule.compiler import CompileWarning

pytestmark = pytest.mark.usefixtures("trace_every_graph")


def _calls(f: Callable[[float], Value], seed: Callable[[], None]) -> tuple[list[float], str]:
    """Six calls after ``seed()``: their values and the warnings' words."""
    seed()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = [f(2.0).data for _ in range(6)]
    assert all(issubclass(w.category, CompileWarning) for w in caught)
    return got, " ".join(str(w.message) for w in caught)


def test_a_draw_in_a_dataclass_default_factory_runs_eagerly() -> None:
    w = Value(0.5)

    @dataclasses.dataclass
    class Drop:
        keep: float = dataclasses.field(default_factory=random.random)

    def step(x: float) -> Value:
        return w * x * (1.0 if Drop().keep > 0.5 else 0.0)

    def seed() -> None:
        random.seed(3)

    eager, _ = _calls(step, seed)
    assert 0.0 in eager and 1.0 in eager  # the draw changes the result
    got, words = _calls(chainrule.compile(step, budget=False), seed)
    assert got == eager
    assert "draws random numbers from code compile does not copy" in words


def test_a_draw_from_numpys_global_generator_without_source_runs_eagerly() -> None:
    w = Value(0.5)
    space: dict[str, Any] = {"np": np}
    exec("def noise():\n    return float(np.random.rand())", space)  # no source to copy
    noise = space["noise"]

    def step(x: float) -> Value:
        return w * x * noise()

    def seed() -> None:
        np.random.seed(1)

    eager, _ = _calls(step, seed)
    assert len(set(eager)) == len(eager)
    got, words = _calls(chainrule.compile(step, budget=False), seed)
    assert got == eager
    assert "draws random numbers from code compile does not copy" in words


def test_a_backward_pass_from_a_graph_on_the_loss_warns_that_h_grad_is_not_set() -> None:
    """``h, loss = fast(x)`` then ``(loss * 2.0).backward()``: eagerly ``h``
    gets its gradient through ``loss``; the compiled call is one node of
    the caller's graph, which the pass may also reach through ``h``, so
    ``h.grad`` is not set: said once, and the parameters' gradients are
    eager's."""
    w, b = Value(0.5), Value(-0.2)

    def f(x: float) -> tuple[Value, Value]:
        h = (w * x + b).tanh()
        return h, (h - 1.0) ** 2

    def grads(fn: Callable[[float], tuple[Value, Value]], scale: float) -> list[float]:
        w.grad = b.grad = 0.0
        outs = [fn(x) for x in (1.0, 2.0, 3.0)]
        (sum(loss for _, loss in outs) * scale).backward()
        return [w.grad, b.grad]

    fast = chainrule.compile(f, budget=False)
    eager = grads(f, 0.5)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert grads(fast, 0.5) == pytest.approx(eager, rel=1e-12, abs=0.0)
        assert grads(fast, 0.5) == pytest.approx(eager, rel=1e-12, abs=0.0)
    words = [str(c.message) for c in caught]
    assert len(words) == 1 and "does not set .grad of the nodes returned beside" in words[0]
    assert caught[0].filename == __file__
    h, loss = fast(1.0)  # backward() on the output itself: h.grad as eagerly
    eh, eloss = f(1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loss.backward()
    eloss.backward()
    assert h.grad == eh.grad != 0.0
