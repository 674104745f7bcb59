"""``moons-step`` and ``backward-only``: micrograd's demo training step.

The step is the one in micrograd's demo notebook: an MLP 2-16-16-1 with
ReLU hidden layers scores 100 two-moons points; the loss is the mean SVM
max-margin loss ``relu(1 - y * score)`` plus ``1e-4`` times the sum of the
squared parameters; then ``zero_grad``, ``backward`` and an SGD update with
the demo's decaying learning rate ``1.0 - 0.9 * k / 100`` (over and over
every 100 steps: :func:`~chainrule.bench.sgd_step.learning_rate`).

These engines run it from the same data and the same initial weights:

* ``micrograd`` — micrograd 0.1.0's ``Value`` and its own ``nn.MLP``;
* ``chainrule-compat`` — the same user code (binary ops, builtin ``sum``,
  inputs wrapped in Values) on ``chainrule.Value``;
* ``chainrule`` — chainrule's own network and losses, which build one
  ``dot`` node per neuron and one ``add_n`` node per sum;
* ``compiled`` — the ``chainrule-compat`` user code with its loss function
  wrapped once in ``chainrule.compile`` with ``chainrule.optim.SGD`` as the
  optimizer: traced on the first call; after that, each step (loss,
  backward, update) is one replay on NumPy arrays.
* ``tensor`` — the Tensor engine, all points as one array through three
  ``linear`` layers (NumPy imported when the engine is built).

``backward-only`` builds the same graph outside the timed region and times
``loss.backward()`` alone.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence
from typing import Any

from .. import compiler, data, losses, nn, optim
from ..value.engine import Value
from ..value.sums import dot
from .harness import Arm, Engine, Sizes, Workload, built
from .microgpt import literal_value
from .sgd_step import SGDStep, learning_rate

LAYERS = [2, 16, 16, 1]
ALPHA = 1e-4  # L2 strength of the demo
SEED = 1337


# --------------------------------------------------------------------------
# Identical inputs for every engine
# --------------------------------------------------------------------------


def make_moons(
    n: int = 100, noise: float = 0.1, seed: int = SEED
) -> tuple[list[list[float]], list[int]]:
    """``chainrule.data.make_moons`` (seeded, so every engine and every
    machine gets the same points) with the demo's labels -1 and +1."""
    X, labels = data.make_moons(n, noise=noise, seed=seed)
    return X, [2 * label - 1 for label in labels]


def initial_weights(layers: Sequence[int] = LAYERS, seed: int = SEED) -> list[float]:
    """The parameters in micrograd's order (each neuron's weights, then its
    bias): weights uniform in [-1, 1], biases 0, as micrograd initialises."""
    rng = random.Random(seed + 1)
    flat: list[float] = []
    for nin, nout in itertools.pairwise(layers):
        for _ in range(nout):
            flat.extend(rng.uniform(-1.0, 1.0) for _ in range(nin))
            flat.append(0.0)
    return flat


def _load(parameters: Sequence[Any], weights: Sequence[float]) -> None:
    if len(parameters) != len(weights):
        raise ValueError(f"model has {len(parameters)} parameters, expected {len(weights)}")
    for p, w in zip(parameters, weights):
        p.data = w


# --------------------------------------------------------------------------
# micrograd's demo, as user code: runs on micrograd's Value or chainrule's
# --------------------------------------------------------------------------


class UserMLP:
    """A micrograd-style MLP written the way micrograd's user code is: each
    neuron is ``sum((wi * xi for ...), b)``, binary nodes only. Generic over
    the Value class, so it runs on chainrule.Value unchanged."""

    def __init__(self, value: type, layers: Sequence[int], weights: Sequence[float]) -> None:
        self.layers: list[list[tuple[list[Any], Any]]] = []
        it = iter(weights)
        for nin, nout in itertools.pairwise(layers):
            layer = []
            for _ in range(nout):
                w = [value(next(it)) for _ in range(nin)]
                layer.append((w, value(next(it))))
            self.layers.append(layer)

    def __call__(self, x: list[Any]) -> Any:
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            out = []
            for w, b in layer:
                act = sum((wi * xi for wi, xi in zip(w, x)), b)
                out.append(act if i == last else act.relu())
            x = out
        return x[0]

    def parameters(self) -> list[Any]:
        return [p for layer in self.layers for w, b in layer for p in [*w, b]]

    def zero_grad(self) -> None:
        for p in self.parameters():
            p.grad = 0


class DemoStep:
    """The demo notebook's training step, verbatim in spirit: wrap inputs
    in Values, score, SVM loss, L2, zero_grad, backward, SGD."""

    def __init__(self, value: type, model: Any, X: list[list[float]], y: list[int]) -> None:
        self.value, self.model, self.X, self.y = value, model, X, y
        self.k = 0

    def loss(self) -> Any:
        Value_, model = self.value, self.model
        inputs = [list(map(Value_, xrow)) for xrow in self.X]
        scores = list(map(model, inputs))
        losses = [(1 + -yi * scorei).relu() for yi, scorei in zip(self.y, scores)]
        data_loss = sum(losses) * (1.0 / len(losses))
        reg_loss = ALPHA * sum(p * p for p in model.parameters())
        return data_loss + reg_loss

    def graph(self) -> Any:
        """Forward and ``zero_grad``: the loss, ready for ``backward()``."""
        total_loss = self.loss()
        self.model.zero_grad()
        return total_loss

    def __call__(self) -> None:
        total_loss = self.graph()
        total_loss.backward()
        lr = learning_rate(self.k)
        for p in self.model.parameters():
            p.data -= lr * p.grad
        self.k += 1


def _micrograd(sizes: Sizes) -> DemoStep:
    from micrograd.engine import Value as MicrogradValue
    from micrograd.nn import MLP as MicrogradMLP

    state = random.getstate()  # micrograd's MLP draws from the global generator
    model = MicrogradMLP(LAYERS[0], LAYERS[1:])
    random.setstate(state)
    _load(model.parameters(), initial_weights())
    X, y = make_moons(sizes.moons_points)
    return DemoStep(MicrogradValue, model, X, y)


def _literal(sizes: Sizes) -> DemoStep:
    value = literal_value()
    X, y = make_moons(sizes.moons_points)
    return DemoStep(value, UserMLP(value, LAYERS, initial_weights()), X, y)


def _compat(sizes: Sizes) -> DemoStep:
    X, y = make_moons(sizes.moons_points)
    return DemoStep(Value, UserMLP(Value, LAYERS, initial_weights()), X, y)


class CompiledStep(SGDStep):
    """The ``chainrule-compat`` demo step as one compiled training step: its
    loss function wrapped once in ``chainrule.compile`` with
    ``chainrule.optim.SGD`` as the optimizer (the demo's learning rate; the
    same numbers as its loop), so loss, backward and update are one replay
    on NumPy arrays (traced on the first, untimed, run). ``graph()``, for
    ``backward-only``: the compiled loss alone."""

    def __init__(self, sizes: Sizes) -> None:
        self.demo = _compat(sizes)
        self.loss = compiler.compile(self.demo.loss)
        self.optimizer = optim.SGD(self.demo.model.parameters(), lr=1.0)
        self.train = compiler.compile(self.demo.loss, optimizer=self.optimizer)
        self.k = 0

    def graph(self) -> Any:
        loss = self.loss()
        self.optimizer.zero_grad()
        return loss

    def __call__(self) -> None:
        self.optimizer.lr = learning_rate(self.k)
        self.train()
        self.k += 1


# --------------------------------------------------------------------------
# chainrule's own: nn.MLP, its losses and SGD
# --------------------------------------------------------------------------


class ChainruleStep(SGDStep):
    """The same step written with chainrule's ``nn.MLP``, ``losses`` and
    ``optim.SGD``: one ``ReLU(dot)`` node per hidden neuron, one ``add_n``
    for the mean hinge loss, one ``dot`` node for the sum of squared
    parameters."""

    def __init__(self, sizes: Sizes) -> None:
        self.X, self.y = make_moons(sizes.moons_points)
        self.model = nn.MLP(LAYERS[0], LAYERS[1:], rng=random.Random(SEED))
        self.params: list[Any] = self.model.parameters()
        _load(self.params, initial_weights())
        self.optimizer = optim.SGD(self.params, lr=1.0)
        self.k = 0

    def graph(self) -> Value:
        model, params = self.model, self.params
        scores = [model(x) for x in self.X]
        loss = losses.hinge_loss(scores, self.y) + ALPHA * dot(params, params)
        self.optimizer.zero_grad()
        return loss


# --------------------------------------------------------------------------
# The two workloads
# --------------------------------------------------------------------------


class TensorMoonsStep(SGDStep):
    """micrograd's demo step on Tensors: the 100 points as one (100, 2)
    array through three ``linear`` layers, the same weights, loss and SGD."""

    def __init__(self, sizes: Sizes) -> None:
        import numpy as np

        from ..tensor import Tensor
        from ..tensor.memory import keep_freed_memory

        keep_freed_memory()
        X, y = make_moons(sizes.moons_points)
        self.X = np.array(X)
        self.y = np.array(y, dtype=np.float64)[:, None]
        flat = iter(initial_weights())
        self.layers = []
        for nin, nout in itertools.pairwise(LAYERS):
            # micrograd's order: each neuron's weights, then its bias
            rows = [[next(flat) for _ in range(nin + 1)] for _ in range(nout)]
            w = np.array([r[:nin] for r in rows])
            b = np.array([r[nin] for r in rows])
            self.layers.append((Tensor(w), Tensor(b)))
        self.params = [p for layer in self.layers for p in layer]
        self.optimizer = optim.SGD(self.params, lr=1.0)
        self.alpha = ALPHA
        self.k = 0

    def graph(self) -> Any:
        from ..tensor import linear

        h: Any = self.X
        last = len(self.layers) - 1
        for i, (w, b) in enumerate(self.layers):
            h = linear(h, w, b)
            if i != last:
                h = h.relu()
        data_loss = (1.0 - self.y * h).relu().mean()
        reg = sum(((p * p).sum() for p in self.params[1:]), start=(self.params[0] ** 2).sum())
        loss = data_loss + self.alpha * reg
        self.optimizer.zero_grad()
        return loss


# --------------------------------------------------------------------------
# The two workloads
# --------------------------------------------------------------------------


Maker = Callable[[Sizes], Any]


def _backward_arm(make: Maker) -> Callable[[Sizes], Arm]:
    """Each run builds the graph (untimed) and times its ``backward``."""

    def arm(sizes: Sizes) -> Arm:
        step = make(sizes)
        return lambda: step.graph().backward

    return arm


def _engines(
    wrap: Callable[[Callable[[Sizes], Any]], Callable[[Sizes], Arm]],
) -> tuple[Engine, ...]:
    return (
        Engine("micrograd", wrap(_micrograd), requires=("micrograd",)),
        Engine("microgpt", wrap(_literal)),
        Engine("chainrule-compat", wrap(_compat)),
        Engine("chainrule", wrap(ChainruleStep)),
        Engine("compiled", wrap(CompiledStep), requires=("numpy",)),
        Engine("tensor", wrap(TensorMoonsStep), requires=("numpy",)),
    )


MOONS_STEP = Workload(
    "moons-step",
    "micrograd's demo step: MLP 2-16-16-1, 100 points, SVM loss + L2, forward + backward + SGD",
    baseline="micrograd",
    engines=_engines(built),
    # the compiled and tensor steps take under a millisecond, whose median of 7
    # runs moved by 10% from run to run (657-727 us): 35 timed runs each
    more_runs=5,
)

BACKWARD_ONLY = Workload(
    "backward-only",
    "loss.backward() alone on the moons-step graph (built outside the timing)",
    baseline="micrograd",
    engines=_engines(_backward_arm),
)
