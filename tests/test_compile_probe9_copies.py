"""chainrule.compile and copies (the ninth probe's C2, C3): ``copy.deepcopy``
of an object holding a compiled function gives a compiled function of the
copy (a bound method rebound, as eagerly), ``pickle`` of a compiled function
is by reference where its name finds it; a deep copy of a call's outputs is
a copy of the graph, as eagerly: its backward sets the copies, never the
originals."""

from __future__ import annotations

import copy
import pickle
import random
from collections.abc import Callable
from typing import Any

import pytest

import chainrule
from chainrule import Value
from chainrule.compiler import Compiled, CompileWarning
from chainrule.nn import MLP

pytestmark = pytest.mark.usefixtures("trace_every_graph")

EAGER: Callable[[Any], Any] = lambda f: f  # noqa: E731
COMPILED: Callable[[Any], Any] = lambda f: chainrule.compile(f, budget=False)  # noqa: E731

X, Y = [0.5, -1.0], 1.0


class Net:
    """A model that compiles its own loss (``self.fast``)."""

    def __init__(self, wrap: Callable[[Any], Any]) -> None:
        random.seed(0)
        self.mlp = MLP(2, [4, 1])
        self.fast = wrap(self.loss)

    def loss(self, x: list[float], y: float) -> Value:
        return (self.mlp(x) - y) ** 2


class Decorated:
    """A model whose loss is compiled on the class."""

    def __init__(self) -> None:
        random.seed(0)
        self.mlp = MLP(2, [4, 1])

    def plain(self, x: list[float], y: float) -> Value:
        return (self.mlp(x) - y) ** 2

    @chainrule.compile(budget=False)
    def loss(self, x: list[float], y: float) -> Value:
        return (self.mlp(x) - y) ** 2


W = Value(0.75)


@chainrule.compile(budget=False)
def scaled(x: float) -> Value:
    return (W * x).tanh()


def snapshot_run(wrap: Callable[[Any], Any]) -> list[Any]:
    """Keep a deep copy, train on: the snapshot's loss, its gradients
    (into the copy's parameters), the live loss, the original's grads."""
    net = Net(wrap)
    net.fast(X, Y)
    net.fast(X, Y)
    best = copy.deepcopy(net)
    for p in net.mlp.parameters():
        p.data += 0.1
    out = best.fast(X, Y)
    out.backward()
    live = net.fast(X, Y)
    return [
        out.data,
        [p.grad for p in best.mlp.parameters()],
        live.data,
        [p.grad for p in net.mlp.parameters()],
    ]


def test_deepcopy_of_an_owner_rebinds_its_compiled_loss() -> None:
    eager = snapshot_run(EAGER)
    assert eager[0] != eager[2] and any(eager[1])  # the snapshot is not the live model
    assert snapshot_run(COMPILED) == eager


def test_deepcopy_of_an_owner_leaves_the_original_compiled() -> None:
    net = Net(COMPILED)
    net.fast(X, Y)
    best = copy.deepcopy(net)
    assert isinstance(best.fast, Compiled) and best.fast.fn.__self__ is best
    assert best.fast.traces == 0  # never the original's traces
    net.fast(X, Y)
    assert net.fast.hits == 1
    assert best.fast(X, Y).data == Net(EAGER).loss(X, Y).data


def test_deepcopy_of_instances_with_a_compiled_method() -> None:
    net = Decorated()
    net.loss(X, Y)
    best = copy.deepcopy(net)
    for p in net.mlp.parameters():
        p.data += 0.1
    assert best.loss(X, Y).data == best.plain(X, Y).data
    assert net.loss(X, Y).data == net.plain(X, Y).data != best.plain(X, Y).data


def test_copies_of_a_compiled_function_are_compiled_functions_of_it() -> None:
    scaled(2.0)
    for c in (copy.copy(scaled), copy.deepcopy(scaled)):
        assert isinstance(c, Compiled) and c.fn is scaled.fn and c.traces == 0
        assert c(0.5).data == (W * 0.5).tanh().data
        assert c.__qualname__ == "scaled"


def test_a_compiled_step_deep_copied_with_its_owner_steps_the_copy() -> None:
    def run(wrap: Callable[..., Any]) -> list[Any]:
        net = Net(EAGER)
        opt = chainrule.optim.SGD(net.mlp.parameters(), lr=0.1)
        net.step = wrap(net.loss, opt)  # type: ignore[attr-defined]
        net.opt = opt  # type: ignore[attr-defined]
        best = copy.deepcopy(net)
        best.step(X, Y)  # type: ignore[attr-defined]
        best.step(X, Y)  # type: ignore[attr-defined]
        return [p.data for p in best.mlp.parameters()] + [p.data for p in net.mlp.parameters()]

    class EagerStep:  # (an object holding the loss and optimizer, as Compiled does)
        def __init__(self, loss: Callable[..., Value], opt: Any) -> None:
            self.loss, self.opt = loss, opt

        def __call__(self, *a: Any) -> Value:
            out = self.loss(*a)
            self.opt.zero_grad()
            out.backward()
            self.opt.step()
            return out

    compiled = run(lambda f, o: chainrule.compile(f, optimizer=o, budget=False))
    assert compiled == run(EagerStep)


def test_pickle_of_a_module_level_compiled_function_is_by_reference() -> None:
    assert pickle.loads(pickle.dumps(scaled)) is scaled
    assert pickle.loads(pickle.dumps(Decorated.loss)) is Decorated.loss


def test_pickle_of_an_owner_gives_a_compiled_loss_of_the_unpickled_copy() -> None:
    net = Net(COMPILED)
    net.fast(X, Y)
    back = pickle.loads(pickle.dumps(net))
    assert back.fast.fn.__self__ is back and back.fast.traces == 0
    assert back.fast(X, Y).data == net.fast(X, Y).data == Net(EAGER).loss(X, Y).data


def test_pickle_of_a_compiled_lambda_is_pickles_error() -> None:
    with pytest.raises((pickle.PicklingError, AttributeError)):
        pickle.dumps(chainrule.compile(lambda x: W * x))


def outputs_run(wrap: Callable[[Any], Any], deep: bool) -> list[Any]:
    """Copies of a call's ``(h, loss)`` (deep: with the leaves), then
    backward on the copied loss and on a graph built on it: the copies'
    and the originals' grads."""
    w, b = Value(0.5), Value(0.25)

    def f(x: float) -> tuple[Value, Value]:
        h = w * x
        return h, (h + b).tanh()

    g = wrap(f)
    g(2.0)
    h, y = g(1.0)
    if deep:
        h2, y2, w2, b2 = copy.deepcopy((h, y, w, b))
    else:
        (h2, y2), w2, b2 = map(copy.copy, (h, y)), w, b
    y2.backward()
    first = [h2.grad, h.grad, w.grad, b.grad, y.grad, y2.grad, w2.grad, b2.grad]
    (y2 * 2.0).backward()  # (through the copy's node: its own backward)
    return first + [w.grad, b.grad, w2.grad, b2.grad]


@pytest.mark.parametrize("deep", [True, False])
def test_copies_of_a_calls_outputs_are_eagers_copies(deep: bool) -> None:
    eager = outputs_run(EAGER, deep)
    with pytest.warns(CompileWarning, match="returned beside"):
        assert outputs_run(COMPILED, deep) == eager
    if deep:
        assert eager[0] != 0.0 and eager[1:4] == [0.0, 0.0, 0.0]  # the originals untouched


def test_pickle_of_a_calls_outputs_is_refused_as_eagerly() -> None:
    for wrap in (EAGER, COMPILED):
        h, y = wrap(lambda x: (W * x, (W * x).tanh()))(1.0)
        with pytest.raises(pickle.PicklingError):
            pickle.dumps((h, y))
