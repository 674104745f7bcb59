"""The moons demo's update, shared by the engines that use a chainrule
optimizer (the scalar ``nn.MLP`` step and the Tensor step)."""

from __future__ import annotations

from typing import Any


def learning_rate(k: int) -> float:
    """The demo's learning rate at step ``k``, ``1.0 - 0.9 * k / 100`` over
    its 100 steps, and again from 1.0 every 100 steps (a benchmark's warm-up
    runs a fast engine's step hundreds of times; past 100 the rate would
    turn negative and training diverge to inf)."""
    return 1.0 - 0.9 * (k % 100) / 100


class SGDStep:
    """The demo's update with a chainrule optimizer: ``graph()`` (forward and
    ``zero_grad``, from the subclass), backward, then SGD with the demo's
    learning rate (:func:`learning_rate`)."""

    optimizer: Any
    k: int

    def graph(self) -> Any:
        raise NotImplementedError

    def __call__(self) -> None:
        loss = self.graph()
        loss.backward()
        self.optimizer.lr = learning_rate(self.k)
        self.optimizer.step()
        self.k += 1
