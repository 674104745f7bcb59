"""chainrule.compile on the two training loops the issue names: micrograd's
demo (100 steps) and a microgpt-style GPT (50 steps), against eager."""

from __future__ import annotations

import warnings
from typing import Any

import pytest

import chainrule
from chainrule import Value
from chainrule.bench.gpt import CompatOps, GPTStep, compat_adam
from chainrule.bench.moons import ALPHA, LAYERS, UserMLP, initial_weights, make_moons
from chainrule.compiler import CompileWarning


@pytest.fixture(autouse=True)
def tracing_always_pays(monkeypatch: pytest.MonkeyPatch) -> None:
    """No eager fallback on the clock (chainrule.compiler.budget): these
    tests count traces, which a busy machine must not change."""
    from chainrule.compiler import budget

    monkeypatch.setattr(budget, "ALLOWANCE", float("inf"))
    monkeypatch.setattr(budget, "MOSTLY", budget.WINDOW + 1)


class Demo:
    """micrograd's demo loop; the loss function returns Values (the loss and
    the scores), the accuracy is computed outside from the scores."""

    def __init__(self) -> None:
        self.X, self.y = make_moons(100)
        self.model = UserMLP(Value, LAYERS, initial_weights())

    def loss(self) -> tuple[Any, list[Any]]:
        inputs = [list(map(Value, xrow)) for xrow in self.X]
        scores = list(map(self.model, inputs))
        losses = [(1 + -yi * si).relu() for yi, si in zip(self.y, scores)]
        data_loss = sum(losses) * (1.0 / len(losses))
        reg_loss = ALPHA * sum(p * p for p in self.model.parameters())
        return data_loss + reg_loss, scores

    def step(self, loss_fn: Any, k: int) -> tuple[float, float]:
        loss, scores = loss_fn()
        self.model.zero_grad()
        loss.backward()
        learning_rate = 1.0 - 0.9 * k / 100
        for p in self.model.parameters():
            p.data -= learning_rate * p.grad
        right = sum((yi > 0) == (s.data > 0) for yi, s in zip(self.y, scores))
        return loss.data, right / len(self.y)


def test_moons_demo_compiled_matches_eager_for_100_steps() -> None:
    eager, fast = Demo(), Demo()
    compiled = chainrule.compile(fast.loss)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for k in range(100):
            expected, _ = eager.step(eager.loss, k)
            got, accuracy = fast.step(compiled, k)
            assert abs(got - expected) <= 1e-10 * abs(expected), (k, got, expected)
    assert accuracy == 1.0
    assert compiled.traces == 1


def test_gpt_step_compiled_matches_eager_for_50_steps() -> None:
    eager = GPTStep(CompatOps, compat_adam, "emma")
    fast = GPTStep(CompatOps, compat_adam, "emma")
    compiled = chainrule.compile(fast.model.batch_loss)
    fast.model.batch_loss = compiled  # type: ignore[method-assign]
    first = None
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for k in range(50):
            expected, got = eager(), fast()
            assert abs(got - expected) <= 1e-10 * abs(expected), (k, got, expected)
            first = first or got
    assert got < first / 10  # it trains
    assert compiled.traces == 1  # max(v.data ...) replayed, not guarded
