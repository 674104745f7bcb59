"""The moons demo's update, shared by the engines that use a chainrule
optimizer (the scalar ``nn.MLP`` step and the Tensor step)."""

from __future__ import annotations

from typing import Any


class SGDStep:
    """The demo's update with a chainrule optimizer: ``graph()`` (forward and
    ``zero_grad``, from the subclass), backward, then SGD with the demo's
    learning rate ``1 - 0.9 k / 100``."""

    optimizer: Any
    k: int

    def graph(self) -> Any:
        raise NotImplementedError

    def __call__(self) -> None:
        loss = self.graph()
        loss.backward()
        self.optimizer.lr = 1.0 - 0.9 * self.k / 100
        self.optimizer.step()
        self.k += 1
