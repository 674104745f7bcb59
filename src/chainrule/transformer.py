"""The size of a GPT, shared by the scalar and the Tensor models.

One description, no NumPy: the scalar model of ``chainrule bench``
(``chainrule.bench.gpt``), the Tensor model (:class:`chainrule.tensor.nn.GPT`)
and PyTorch's copy of it (``chainrule.interop.torch_nn.GPT``) are all built
from a :class:`GPTConfig`. The defaults are microgpt's.

>>> GPTConfig(n_embd=64, n_head=4).head_dim
16
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class GPTConfig:
    """The size of a GPT; build it by keyword. The defaults are microgpt's:
    27 tokens, a context of 16, embeddings of 16, 4 heads, 1 layer, a
    feed-forward block 4 times as wide, weights drawn with std 0.08."""

    vocab_size: int = 27
    block_size: int = 16
    n_embd: int = 16
    n_head: int = 4
    n_layer: int = 1
    init_std: float = 0.08
    mlp_ratio: int = 4

    def __post_init__(self) -> None:
        for name in ("vocab_size", "block_size", "n_embd", "n_head", "n_layer", "mlp_ratio"):
            n = getattr(self, name)
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ValueError(f"GPTConfig: {name} must be a positive int, got {n!r}")
        if self.n_embd % self.n_head:
            raise ValueError(
                f"GPTConfig: n_embd {self.n_embd} is not divisible by n_head {self.n_head}"
            )

    @property
    def head_dim(self) -> int:
        """The width of one attention head, ``n_embd // n_head``."""
        return self.n_embd // self.n_head

    def to_dict(self) -> dict[str, Any]:
        """The settings as a plain dict (for checkpoints and ``GPTConfig(**d)``)."""
        return asdict(self)

    def num_parameters(self) -> int:
        """The number of weights a GPT of this size has, without building
        it (a checkpoint's architecture is checked against its file by this)."""
        V, T, C, L = self.vocab_size, self.block_size, self.n_embd, self.n_layer
        # wte, lm_head, wpe; per layer q k v o, then fc1 and fc2
        return 2 * V * C + T * C + L * (4 + 2 * self.mlp_ratio) * C * C

    def num_tensors(self) -> int:
        """How many weight tensors a GPT of this size has (see :meth:`parameter_shapes`)."""
        return 3 + 6 * self.n_layer

    def parameter_shapes(self) -> Iterator[tuple[str, tuple[int, ...]]]:
        """Each weight's name (PyTorch's, as ``named_parameters()`` gives
        them) and shape, in order, without building the model: what a
        checkpoint's file must hold, checked before anything is allocated.

        >>> dict(GPTConfig(vocab_size=5, block_size=4, n_embd=8, n_layer=1).parameter_shapes())[
        ...     "blocks.0.mlp.fc1.weight"]
        (32, 8)
        """
        V, T, C, wide = self.vocab_size, self.block_size, self.n_embd, self.mlp_ratio * self.n_embd
        yield "wte.weight", (V, C)
        yield "wpe.weight", (T, C)
        for i in range(self.n_layer):
            for name in ("wq", "wk", "wv", "wo"):
                yield f"blocks.{i}.attn.{name}.weight", (C, C)
            yield f"blocks.{i}.mlp.fc1.weight", (wide, C)
            yield f"blocks.{i}.mlp.fc2.weight", (C, wide)
        yield "lm_head.weight", (V, C)
