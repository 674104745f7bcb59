"""chainrule.compile and the sixth probe: an optimizer of the user's own
class gets its methods called in a compiled training step (its
``zero_grad``, an update that reads ``.grad``), as eagerly; and
``gradients()`` with respect to a node a compiled call returned beside the
loss is eager's (or a clear error where it cannot be)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import pytest

import chainrule
from chainrule import Value, optim
from chainrule.compiler import CompileWarning

pytestmark = pytest.mark.usefixtures("trace_every_graph")


class Accumulating(optim.SGD):
    """Gradient accumulation: zero only every other step."""

    def zero_grad(self) -> None:
        self.calls = getattr(self, "calls", 0) + 1
        if self.calls % 2 == 1:
            super().zero_grad()


class Clipping(optim.SGD):
    """Clip by the global norm of the gradients the parameters hold."""

    def _updated(self, data: Any, g: Any) -> Any:
        norm = sum(p.grad**2 for p in self.params) ** 0.5
        return super()._updated(data, g * (min(1.0, 1.0 / norm) if norm > 0 else 1.0))


@pytest.mark.parametrize("kind", [Accumulating, Clipping])
def test_an_optimizer_of_the_users_class_trains_as_eagerly(kind: type[optim.SGD]) -> None:
    calls = [(0, 1.0), (1, 2.0), (0, 3.0), (1, 1.0)]

    def trained(compiled: bool) -> list[tuple[float, float]]:
        W = [Value(0.5), Value(1.5)]
        opt = kind(W, lr=0.1)

        def loss(i: int, x: float) -> Value:
            return (W[i] * x - 1.0) ** 2 + W[0] * W[1]

        step: Callable[..., Value] = chainrule.compile(loss, optimizer=opt)
        for i, x in calls:
            if compiled:
                step(i, x)
            else:
                out = loss(i, x)
                opt.zero_grad()
                out.backward()
                opt.step()
        return [(w.data, w.grad) for w in W]

    assert not kind([Value(1.0)]).on_arrays() and optim.SGD([Value(1.0)]).on_arrays()
    eager = trained(False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        assert trained(True) == eager


def test_gradients_of_a_loss_wrt_a_node_returned_beside_it() -> None:
    w, b = Value(0.5), Value(0.1)

    def f(x: float) -> tuple[Value, Value]:
        h = (w * x + b).tanh()
        return h, h * h + w

    fast = chainrule.compile(f)
    for x in (1.0, 2.0, -0.5):
        h, loss = f(x)
        hc, lc = fast(x)
        (expected,) = chainrule.gradients(loss, [h])
        w.grad = b.grad = 0.25
        assert chainrule.gradients(lc, [hc, w]) == chainrule.gradients(loss, [h, w])
        assert chainrule.gradients(lc, [hc])[0] == expected == 2.0 * h.data
        assert (w.grad, b.grad) == (0.25, 0.25)  # every .grad left as it was
    with pytest.raises(TypeError, match="ask gradients\\(\\) of that output itself"):
        chainrule.gradients(lc * 2.0, [hc])
    other, _ = fast(3.0)
    assert chainrule.gradients(lc, [other]) == [0.0]  # another call's: not on the path
