"""chainrule.compile on the two training loops the issue names: micrograd's
demo (100 steps) and a microgpt-style GPT (50 steps), against eager."""

from __future__ import annotations

import dataclasses
import random
import warnings
from typing import Any

import pytest

import chainrule
from chainrule import Value, optim
from chainrule.bench.gpt import CompatOps, GPTStep, compat_adam
from chainrule.bench.moons import ALPHA, LAYERS, UserMLP, initial_weights, make_moons
from chainrule.compiler import CompileWarning

pytestmark = pytest.mark.usefixtures("trace_every_graph")


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


# --------------------------------------------------------------------------
# The update on arrays: chainrule.optim on Values, one NumPy update
# --------------------------------------------------------------------------

OPTIMIZERS = {
    "adam": lambda ps: optim.Adam(ps, lr=0.01, betas=(0.85, 0.99), eps=1e-8),
    "adam-decay": lambda ps: optim.Adam(ps, lr=0.1, weight_decay=0.1),
    "sgd": lambda ps: optim.SGD(ps, lr=0.5),
    "sgd-momentum": lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9),
    "sgd-nesterov": lambda ps: optim.SGD(
        ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01
    ),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_flat_update_is_the_loop_bit_for_bit(name: str) -> None:
    """Values' optimizers update all parameters as one array (optim._Flat):
    the same numbers as the per-parameter loop, whatever the step."""
    rng = random.Random(len(name))
    start = [rng.uniform(-2, 2) for _ in range(40)]
    flat, loop = [Value(x) for x in start], [Value(x) for x in start]
    fast, slow = OPTIMIZERS[name](flat), OPTIMIZERS[name](loop)
    assert fast._flat is not None
    slow._flat = None  # the loop
    for _ in range(25):
        for a, b in zip(flat, loop):
            a.grad = b.grad = rng.gauss(0, 1) * 10 ** rng.uniform(-4, 2)
        fast.step()
        slow.step()
        fast.zero_grad()
        slow.zero_grad()
        assert [p.data for p in flat] == [p.data for p in loop]
        assert all(p.grad == 0.0 for p in flat)


def test_flat_update_falls_back_to_the_loop_for_value_gradients() -> None:
    ws = [Value(1.5), Value(1.5)]
    flat, loop = optim.SGD([ws[0]], lr=0.1), optim.SGD([ws[1]], lr=0.1)
    loop._flat = None
    for w in ws:
        (w * w).backward(create_graph=True)  # w.grad is a Value
    assert flat._flat is not None and flat._flat.grads() is None
    flat.step()
    loop.step()
    assert type(ws[0].data) is type(ws[1].data)
    assert float(getattr(ws[0].data, "data", ws[0].data)) == 1.5 - 0.1 * 3.0


# --------------------------------------------------------------------------
# microgpt's real loop: a new name every step (bench workload gpt-names)
# --------------------------------------------------------------------------


def _real_loop(n: int, optimizer: Any) -> None:
    from chainrule.bench import gpt_loop
    from chainrule.bench.harness import FULL

    names = gpt_loop.loop_names(dataclasses.replace(FULL, loop_names=n))
    eager = gpt_loop.NamesLoop(names, optimizer=optimizer)
    fast = gpt_loop.NamesLoop(names, compiled=True, optimizer=optimizer)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        expected, got = eager(), fast()
    for k, (e, g) in enumerate(zip(expected, got)):
        assert abs(g - e) <= 1e-10 * abs(e), (k, names[k], g, e)
    # relative to the parameters' size: the replay adds a node's gradient
    # contributions in another order (1e-16), so a weight that passes zero
    # differs from eager's by about 1e-17, not by 1e-12 of itself
    ours = [q.data for q in fast.model.parameters()]
    theirs = [p.data for p in eager.model.parameters()]
    size = max(map(abs, theirs))
    assert max(abs(a - b) for a, b in zip(ours, theirs)) <= 1e-12 * size
    lengths = {min(len(name) + 1, 16) for name in names}
    assert fast.loss.traces <= len(lengths)


def test_real_loop_compiled_matches_eager_on_twelve_names() -> None:
    from chainrule.bench.gpt import compat_adam

    _real_loop(12, compat_adam)


def test_real_loop_compiled_matches_eager_on_forty_names() -> None:
    from chainrule.bench.gpt_loop import optim_adam

    _real_loop(40, optim_adam)


@pytest.mark.long  # minutes: `pytest -m long tests/test_compile_training.py`
def test_real_loop_compiled_matches_eager_on_300_names() -> None:
    """Issue 21's must-show: 300 consecutive names, the user's Adam loop."""
    from chainrule.bench.gpt_loop import optim_adam

    _real_loop(300, optim_adam)
