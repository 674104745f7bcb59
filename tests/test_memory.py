"""Once a training step's graph is dropped its memory comes back: training
loops keep flat memory (measured with tracemalloc)."""

from __future__ import annotations

import gc
import itertools
import random
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from chainrule import Value, add_n, dot, grad, gradients

XOR = [([0.0, 0.0], -1.0), ([0.0, 1.0], 1.0), ([1.0, 0.0], 1.0), ([1.0, 1.0], -1.0)]


def _mlp(sizes: list[int], rng: random.Random) -> list[list[tuple[list[Value], Value]]]:
    """Layers of neurons, each neuron (weights, bias)."""
    return [
        [([Value(rng.uniform(-1.0, 1.0)) for _ in range(n_in)], Value(0.0)) for _ in range(n_out)]
        for n_in, n_out in itertools.pairwise(sizes)
    ]


def _forward(net: list[list[tuple[list[Value], Value]]], x: list[Any]) -> Value:
    h: list[Any] = x
    for i, layer in enumerate(net):
        h = [dot(w, h, b) for w, b in layer]
        if i < len(net) - 1:
            h = [v.tanh() for v in h]
    return h[0]


@contextmanager
def _traced_without_gc() -> Iterator[None]:
    """tracemalloc on and the cyclic collector off: memory that comes back
    comes back by reference counting alone, so no graph forms a cycle."""
    was_enabled = gc.isenabled()
    gc.disable()
    tracemalloc.start()
    try:
        yield
    finally:
        tracemalloc.stop()
        if was_enabled:
            gc.enable()


def _memory_after(
    steps: int, step: Callable[[], float], at: int
) -> tuple[int, int, int, float, float]:
    """Memory after ``at`` steps and after ``steps``, the peak, and the first
    and last losses (kept as two numbers: a list of every loss would grow)."""
    first = last = step()
    early = tracemalloc.get_traced_memory()[0] if at == 1 else 0
    for i in range(2, steps + 1):
        last = step()
        if i == at:
            early = tracemalloc.get_traced_memory()[0]
    current, peak = tracemalloc.get_traced_memory()
    return early, current, peak, first, last


def test_thousand_training_steps_keep_flat_memory() -> None:
    with _traced_without_gc():
        rng = random.Random(0)
        net = _mlp([2, 4, 4, 1], rng)
        params = [p for layer in net for w, b in layer for p in (*w, b)]

        def step() -> float:
            loss = add_n([(_forward(net, x) - y) ** 2 for x, y in XOR]) / len(XOR)
            for p in params:
                p.grad = 0.0
            loss.backward()
            for p in params:
                p.data -= 0.1 * p.grad
            return loss.data

        after_10, after_1000, peak, first, last = _memory_after(1000, step, at=10)
    assert last < 0.01 < first  # it trains: XOR is learnt
    assert abs(after_1000 - after_10) <= 0.05 * after_10, (after_10, after_1000)
    # not vacuous: keeping a single step's graph alive would break the bound
    assert peak - after_10 > 0.1 * after_10


def test_create_graph_training_loop_keeps_flat_memory() -> None:
    # A gradient penalty at every step: loss = (f(x) - y)^2 + (df/dx)^2 with
    # df/dx from grad, a graph over the weights, then backward through it.
    with _traced_without_gc():
        rng = random.Random(1)
        params = [Value(rng.uniform(-1.0, 1.0)) for _ in range(10)]

        def model(x: Any, p: list[Value]) -> Value:  # a 1-3-1 tanh network
            hidden = [(p[i] * x + p[3 + i]).tanh() for i in range(3)]
            return dot(p[6:9], hidden, p[9])

        def step() -> float:
            x = rng.uniform(-1.0, 1.0)
            slope = grad(model)(x, params)  # params are Values: slope is a Value
            loss = (model(x, params) - 0.5 * x) ** 2 + 0.1 * slope * slope
            for p, g in zip(params, gradients(loss, params)):
                p.data -= 0.05 * g
            return loss.data

        # a longer warm-up: caches and free lists fill over the first ~20 steps here
        early, late, peak, _, _ = _memory_after(500, step, at=50)
    assert abs(late - early) <= 0.05 * early, (early, late)
    assert peak - early > 0.1 * early


def test_backward_create_graph_memory_comes_back_after_a_collection() -> None:
    # backward(create_graph=True) stores graph-valued .grad on the graph's own
    # nodes, a reference cycle (as in PyTorch): reference counting alone does
    # not free it, the cyclic collector does.
    with _traced_without_gc():
        x = Value(0.5)
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(50):
            y = x
            for _ in range(20):
                y = y.exp() * 0.5
            y.backward(create_graph=True)
            x.grad = 0.0
        del y
        kept = tracemalloc.get_traced_memory()[0] - before
        gc.collect()
        after = tracemalloc.get_traced_memory()[0] - before
    assert kept > 50_000  # the cycles
    assert after < 2_000


def _gradient_penalty_loop(seed: int) -> Callable[[], float]:
    """One WGAN-GP critic step on the Tensor engine, as a function: the
    critic (an MLP 2-64-64-1), its data, and the step that trains it."""
    import numpy as np

    import chainrule.tensor as ct
    from chainrule.tensor import Tensor

    rng = np.random.default_rng(seed)
    real = rng.standard_normal((32, 2)) + 2.0
    shapes = [(64, 2), (64,), (64, 64), (64,), (1, 64), (1,)]
    params = [Tensor(rng.standard_normal(s) / np.sqrt(s[-1])) for s in shapes]

    def critic(x: Any) -> Any:
        h = ct.linear(x, params[0], params[1]).tanh()
        h = ct.linear(h, params[2], params[3]).tanh()
        return ct.linear(h, params[4], params[5])

    def step() -> float:
        fake = rng.standard_normal((32, 2))
        mix = rng.uniform(size=(32, 1))
        x_hat = Tensor(mix * real + (1.0 - mix) * fake)
        # the penalty: a create_graph gradient, differentiated again below
        (g,) = ct.gradients(critic(x_hat).sum(), [x_hat], create_graph=True)
        penalty = (((g * g).sum(axis=1) + 1e-12).sqrt() - 1.0) ** 2
        loss = critic(fake).mean() - critic(real).mean() + 10.0 * penalty.mean()
        for p, dp in zip(params, ct.gradients(loss, params)):
            p.data -= 0.01 * dp
        return float(loss.data)

    return step


def _settled() -> tuple[int, int, int]:
    """After a full collection: the traced memory in blocks of 1 kB or more,
    the number of objects the collector tracks, and how many unreachable
    ones (cycles) the collection found. NumPy keeps freed blocks under
    1 kB in a cache of its own for reuse, which over thousands of steps
    fills with blocks allocated under tracing (bounded, ~20-60 kB here): the
    small blocks are covered by the object count instead."""
    found = gc.collect()
    # tuples excepted: the collector stops tracking those that hold no
    # container, so their count moves with every collection
    objects = sum(type(o) is not tuple for o in gc.get_objects())
    large = sum(t.size for t in tracemalloc.take_snapshot().traces if t.size >= 1024)
    return large, objects, found


def test_tensor_gradient_penalty_loop_keeps_flat_memory() -> None:
    gc.collect()
    with _traced_without_gc():
        _settled()  # the first snapshot makes a few objects of its own
        step = _gradient_penalty_loop(0)  # its weights and data are traced
        first = step()
        for _ in range(9):
            step()
        early, objects_early, cycles_early = _settled()
        for _ in range(990):
            last = step()
        late, objects_late, cycles_late = _settled()
        peak = tracemalloc.get_traced_memory()[1]
    assert last < first  # the critic learns to tell them apart
    assert cycles_early == cycles_late == 0  # freed by reference counting alone
    assert objects_late == objects_early  # not one Python object more
    assert abs(late - early) <= 0.05 * early, (early, late)
    # not vacuous: keeping one step's graphs alive would break the bound
    assert peak - early > 0.1 * early, (early, peak)
