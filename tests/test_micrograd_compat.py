"""micrograd's demo training loop runs on chainrule with only its imports
swapped, and learns the same thing.

The loop below is the demo's: build ``MLP(2, [16, 16, 1])`` after
``random.seed(1337)``, SVM max-margin loss with Python's ``sum``, L2 as
``1e-4 * sum(p * p ...)``, ``zero_grad``, ``backward``, and
``p.data -= lr * p.grad`` with ``lr = 1.0 - 0.9 * k / 100``. It is run as
source text, once under each pair of imports.
"""

from __future__ import annotations

import gc
import random
from collections.abc import Iterator
from typing import Any

import pytest

from chainrule.data import make_moons

DEMO_LOOP = """
random.seed(1337)
model = MLP(2, [16, 16, 1])

def loss():
    inputs = [list(map(Value, xrow)) for xrow in X]
    scores = list(map(model, inputs))
    losses = [(1 + -yi * scorei).relu() for yi, scorei in zip(y, scores)]
    data_loss = sum(losses) * (1.0 / len(losses))
    alpha = 1e-4
    reg_loss = alpha * sum((p * p for p in model.parameters()))
    total_loss = data_loss + reg_loss
    accuracy = [(yi > 0) == (scorei.data > 0) for yi, scorei in zip(y, scores)]
    return total_loss, sum(accuracy) / len(accuracy)

history = []
for k in range(STEPS):
    total_loss, acc = loss()
    model.zero_grad()
    total_loss.backward()
    learning_rate = 1.0 - 0.9 * k / 100
    for p in model.parameters():
        p.data -= learning_rate * p.grad
    history.append((total_loss.data, acc))
"""

MICROGRAD = "from micrograd.engine import Value\nfrom micrograd.nn import MLP\n"
CHAINRULE = "from chainrule.engine import Value\nfrom chainrule.nn import MLP\n"


def _moons() -> tuple[list[list[float]], list[int]]:
    X, labels = make_moons(100, noise=0.1, seed=0)
    return X, [2 * t - 1 for t in labels]  # -1 / +1, as the demo


def _run(imports: str, steps: int) -> list[tuple[float, float]]:
    X, y = _moons()
    scope: dict[str, Any] = {"random": random, "X": X, "y": y, "STEPS": steps}
    exec(imports + DEMO_LOOP, scope)
    return scope["history"]  # type: ignore[no-any-return]


@pytest.fixture(autouse=True)
def _no_cyclic_gc() -> Iterator[None]:
    # Building graphs of many small objects sets off full collections over
    # everything the test session holds alive; neither engine needs them here.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
        gc.collect()


def test_demo_loop_gives_micrograds_losses_and_accuracies() -> None:
    steps = 6  # micrograd takes about a quarter second a step; six show the training moving
    theirs = _run(MICROGRAD, steps)
    ours = _run(CHAINRULE, steps)
    assert [acc for _, acc in ours] == [acc for _, acc in theirs]
    for (loss, _), (their_loss, _) in zip(ours, theirs):
        assert abs(loss - their_loss) <= 1e-9 * their_loss
    assert theirs[-1][0] < theirs[0][0]  # it did train


def test_demo_loop_trains_to_full_accuracy_on_chainrule() -> None:
    history = _run(CHAINRULE, 100)
    final_loss, final_accuracy = history[-1]
    assert final_accuracy >= 0.99
    assert final_loss < history[0][0] / 10
