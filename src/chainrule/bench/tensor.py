"""The Tensor engine (and PyTorch) on the scalar workloads, batched.

``gpt-step``: the same model as :mod:`chainrule.bench.gpt` — the same
weights, loaded from :func:`~chainrule.bench.gpt.initial_weights` — on the
same batch of names, all positions at once (names padded to the longest,
padding ignored by the loss), the same mean cross-entropy over every
position and the same Adam. Engines:

* ``tensor-float64``, ``tensor-float32`` — ``chainrule.tensor.nn.GPT`` and
  ``chainrule.optim.Adam``;
* ``torch-float64``, ``torch-float32`` — the same architecture as an
  ordinary ``torch.nn.Module`` (:class:`chainrule.interop.torch_nn.GPT`) and
  ``torch.optim.Adam``, PyTorch on the CPU with its default threads.

``moons-step`` / ``backward-only``: micrograd's demo step on all 100 points
at once (``tensor``): three ``linear`` layers, the mean hinge loss and the
L2 term, SGD with the demo's learning rate.

The Tensor engines call :func:`chainrule.tensor.memory.keep_freed_memory`,
as ``chainrule gpt`` does; it is process-wide, so the PyTorch engines,
which run after them, run under the same malloc settings. NumPy and torch
are imported when an engine is built, so the bench runs without them.
"""

from __future__ import annotations

from typing import Any

from .harness import Arm, Engine, Sizes
from .sgd_step import SGDStep


def _names_map(n_layer: int) -> dict[str, str]:
    """The scalar workload's weight names -> the Tensor GPT's."""
    out = {"wte": "wte.weight", "wpe": "wpe.weight", "lm_head": "lm_head.weight"}
    for i in range(n_layer):
        for w in ("q", "k", "v", "o"):
            out[f"layer{i}.attn_w{w}"] = f"blocks.{i}.attn.w{w}.weight"
        for fc in ("fc1", "fc2"):
            out[f"layer{i}.mlp_{fc}"] = f"blocks.{i}.mlp.{fc}.weight"
    return out


def gpt_inputs(sizes: Sizes) -> tuple[Any, Any, dict[str, Any], Any]:
    """The padded batch ``(x, y)``, the initial weights under the Tensor
    GPT's names, and the scalar workload's config."""
    import numpy as np

    from ..tensor import charlm
    from . import gpt

    config = gpt.GPTConfig()
    vocab = charlm.Vocabulary("abcdefghijklmnopqrstuvwxyz")  # ids as gpt.encode's
    assert vocab.bos == gpt.BOS
    seqs = charlm.encode_all(gpt.batch_names(sizes.gpt_batch), vocab, config.block_size)
    x, y = charlm.batch(seqs, pad=vocab.bos)
    names = _names_map(config.n_layer)
    weights = {names[k]: np.array(v) for k, v in gpt.initial_weights(config).items()}
    return x, y, weights, config


class TensorGPTStep:
    """Forward, backward and Adam of ``chainrule.tensor.nn.GPT`` on the batch."""

    def __init__(self, sizes: Sizes, dtype: str) -> None:
        import numpy as np

        from .. import optim
        from ..tensor.memory import keep_freed_memory
        from ..tensor.nn import GPT, GPTConfig
        from . import gpt

        keep_freed_memory()
        self.x, self.y, weights, c = gpt_inputs(sizes)
        config = GPTConfig(c.vocab_size, c.block_size, c.n_embd, c.n_head, c.n_layer)
        self.model = GPT(config, dtype=dtype, rng=np.random.default_rng(0))
        self.model.load_state_dict(weights)
        self.optimizer = optim.Adam(
            self.model.parameters(), lr=gpt.LEARNING_RATE, betas=gpt.BETAS, eps=gpt.EPS
        )

    def __call__(self) -> float:
        _, loss = self.model(self.x, self.y)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
        return float(loss.data)


class TorchGPTStep:
    """The same step in PyTorch: an ordinary module and ``torch.optim.Adam``."""

    def __init__(self, sizes: Sizes, dtype: str) -> None:
        import torch

        from ..interop.torch_nn import GPT
        from . import gpt

        x, y, weights, config = gpt_inputs(sizes)
        self.x, self.y = torch.tensor(x), torch.tensor(y)
        self.model = GPT(config).to(getattr(torch, dtype))
        self.model.load_state_dict({k: torch.tensor(v) for k, v in weights.items()})
        self.optimizer = torch.optim.Adam(
            self.model.parameters(), lr=gpt.LEARNING_RATE, betas=gpt.BETAS, eps=gpt.EPS
        )

    def __call__(self) -> float:
        _, loss = self.model(self.x, self.y)
        loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad()
        return float(loss.item())


def _arm(step: type, dtype: str) -> Any:
    def make(sizes: Sizes) -> Arm:
        run = step(sizes, dtype)
        return lambda: run

    return make


def gpt_engines() -> tuple[Engine, ...]:
    return (
        Engine("tensor-float64", _arm(TensorGPTStep, "float64"), requires=("numpy",)),
        Engine("tensor-float32", _arm(TensorGPTStep, "float32"), requires=("numpy",)),
        Engine("torch-float64", _arm(TorchGPTStep, "float64"), requires=("numpy", "torch")),
        Engine("torch-float32", _arm(TorchGPTStep, "float32"), requires=("numpy", "torch")),
    )


class TensorMoonsStep(SGDStep):
    """micrograd's demo step on Tensors: the 100 points as one (100, 2)
    array through three ``linear`` layers, the same weights, loss and SGD."""

    def __init__(self, sizes: Sizes) -> None:
        import itertools

        import numpy as np

        from .. import optim
        from ..tensor import Tensor
        from ..tensor.memory import keep_freed_memory
        from . import moons

        keep_freed_memory()
        X, y = moons.make_moons(sizes.moons_points)
        self.X = np.array(X)
        self.y = np.array(y, dtype=np.float64)[:, None]
        flat = iter(moons.initial_weights())
        self.layers = []
        for nin, nout in itertools.pairwise(moons.LAYERS):
            # micrograd's order: each neuron's weights, then its bias
            rows = [[next(flat) for _ in range(nin + 1)] for _ in range(nout)]
            w = np.array([r[:nin] for r in rows])
            b = np.array([r[nin] for r in rows])
            self.layers.append((Tensor(w), Tensor(b)))
        self.params = [p for layer in self.layers for p in layer]
        self.optimizer = optim.SGD(self.params, lr=1.0)
        self.alpha = moons.ALPHA
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
