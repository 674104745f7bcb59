"""``cnn-step``: one training step of ``chainrule digits``' CNN against the
same model in PyTorch.

The model is :func:`chainrule.tensor.cnn.image_classifier` for 8 x 8
images in 10 classes (two blocks of a 3 x 3 convolution, batch norm, ReLU
and 2 x 2 max pooling, then a linear head); the step is its forward pass on
a batch of 64 images, the mean cross-entropy, the backward pass, one Adam
update and ``zero_grad``, as in the command's training loop. PyTorch runs
the same weights (copied by :func:`chainrule.interop.to_torch`), batch and
Adam as an ordinary ``torch.nn.Sequential`` on the CPU. Both sides get the
same threads (``chainrule bench --threads``, default 2): BLAS through
threadpoolctl, PyTorch through ``torch.set_num_threads``. The images are
random (the time does not depend on what they show), seeded.
"""

from __future__ import annotations

from typing import Any

from .batched_gpt import limit_threads
from .harness import Engine, Sizes, Workload, built

LEARNING_RATE = 0.01  # chainrule digits' default


class ClassifierStep:
    """Forward, cross-entropy, backward, Adam and ``zero_grad`` of an image
    classifier, for either engine."""

    def __init__(self, model: Any, optimizer: Any, loss: Any, x: Any, y: Any) -> None:
        self.model, self.optimizer, self.loss, self.x, self.y = model, optimizer, loss, x, y

    def __call__(self) -> float:
        loss = self.loss(self.model(self.x), self.y)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
        return float(loss.item())


def problem(sizes: Sizes, dtype: str) -> tuple[Any, Any, Any]:
    """The model (seeded weights), a batch of images and labels."""
    import numpy as np

    from ..tensor.cnn import image_classifier

    rng = np.random.default_rng(0)
    model = image_classifier(1, (8, 8), 10, dtype=dtype, rng=rng)
    x = rng.random((sizes.cnn_batch, 1, 8, 8)).astype(dtype)
    y = rng.integers(0, 10, sizes.cnn_batch)
    return model, x, y


def tensor_step(sizes: Sizes, dtype: str) -> ClassifierStep:
    """The CNN on ``chainrule.tensor`` with ``chainrule.optim.Adam``."""
    from .. import optim
    from ..tensor import cross_entropy
    from ..tensor.memory import keep_freed_memory

    keep_freed_memory()
    limit_threads(sizes.gpt_sweep_threads)
    model, x, y = problem(sizes, dtype)
    adam = optim.Adam(model.parameters(), lr=LEARNING_RATE)
    return ClassifierStep(model, adam, cross_entropy, x, y)


def torch_step(sizes: Sizes, dtype: str) -> ClassifierStep:
    """The same CNN, weights and batch in PyTorch, ``torch.optim.Adam``."""
    import torch

    from ..interop import to_torch

    limit_threads(sizes.gpt_sweep_threads)
    torch.set_num_threads(sizes.gpt_sweep_threads)
    model, x, y = problem(sizes, dtype)
    twin = to_torch(model)
    adam = torch.optim.Adam(twin.parameters(), lr=LEARNING_RATE)
    loss = torch.nn.functional.cross_entropy
    return ClassifierStep(twin, adam, loss, torch.from_numpy(x), torch.from_numpy(y))


def _engine(side: str, dtype: str) -> Engine:
    needs = ("numpy", "threadpoolctl")
    if side == "tensor":
        return Engine(
            f"tensor-{dtype}",
            built(lambda sizes: tensor_step(sizes, dtype)),
            requires=needs,
            versus=f"torch-{dtype}",
        )
    return Engine(
        f"torch-{dtype}", built(lambda sizes: torch_step(sizes, dtype)), (*needs, "torch")
    )


CNN_STEP = Workload(
    "cnn-step",
    "one Adam step of chainrule digits' CNN (two conv + batch norm + max pool blocks, a "
    "linear head; 8 x 8 images, batch 64) against the same model in PyTorch, same weights "
    "and threads (--threads, default 2): the time ratio per dtype",
    baseline="torch-float32",
    engines=tuple(_engine(side, d) for d in ("float32", "float64") for side in ("tensor", "torch")),
    interleave=True,
    more_runs=5,  # a step of about 3 ms: 35 timed runs in the full benchmark
)
