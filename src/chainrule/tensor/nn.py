"""Layers on Tensors, up to a GPT with microgpt's architecture.

The layers themselves live in ``chainrule.tensor.layers`` and, for
images, :mod:`chainrule.tensor.cnn`; this module gathers them where users
import them (``from chainrule.tensor.nn import Linear, Conv2d``) and holds
the GPT.

The GPT is microgpt's, batched: token and position embeddings, an RMS norm,
then ``n_layer`` pre-norm blocks of causal self-attention and a ReLU MLP,
each added to the residual stream, and a linear head. No biases, no
learned norm weights.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..random_state import tensor_generator
from ..transformer import GPTConfig
from ..value.mode import no_grad
from .cnn import BatchNorm2d, Conv2d, Flatten, MaxPool2d
from .feed_forward import feed_forward
from .layers import (
    GELU,
    Dropout,
    Embedding,
    LayerNorm,
    Linear,
    Module,
    ReLU,
    RMSNorm,
    Sequential,
    Sigmoid,
    Tanh,
    _dtype,
)
from .nn_ops import attention, cross_entropy, self_attention
from .tensor import Tensor

# Where users import them from, and where errors and the reference name them.
_LAYERS = (
    GELU,
    Dropout,
    Embedding,
    LayerNorm,
    Linear,
    Module,
    ReLU,
    RMSNorm,
    Sequential,
    Sigmoid,
    Tanh,
)
for _layer in _LAYERS:
    _layer.__module__ = __name__

__all__ = [
    "GELU",
    "GPT",
    "BatchNorm2d",
    "Block",
    "CausalSelfAttention",
    "Conv2d",
    "Dropout",
    "Embedding",
    "FeedForward",
    "Flatten",
    "LayerNorm",
    "Linear",
    "MaxPool2d",
    "Module",
    "RMSNorm",
    "ReLU",
    "Sequential",
    "Sigmoid",
    "Tanh",
]


class CausalSelfAttention(Module):
    """Multi-head self-attention in which position ``t`` sees positions
    ``<= t``. Separate query, key, value and output matrices, no biases,
    as in microgpt."""

    def __init__(
        self,
        n_embd: int,
        n_head: int,
        *,
        dtype: Any = np.float64,
        rng: np.random.Generator | None = None,
    ) -> None:
        if n_embd % n_head:
            raise ValueError(
                f"CausalSelfAttention: n_embd {n_embd} not divisible by n_head {n_head}"
            )
        self.n_head = n_head
        kw: dict[str, Any] = {"bias": False, "dtype": dtype, "rng": rng}
        self.wq = Linear(n_embd, n_embd, **kw)
        self.wk = Linear(n_embd, n_embd, **kw)
        self.wv = Linear(n_embd, n_embd, **kw)
        self.wo = Linear(n_embd, n_embd, **kw)

    def forward(self, x: Tensor) -> Tensor:
        """Causal multi-head self-attention over ``x`` of shape ``(batch, time, n_embd)``."""
        B, T, C = x.shape
        H = self.n_head
        heads = (B, T, H, C // H)

        projections = (self.wq, self.wk, self.wv)
        if _fusable(x, projections):  # the same numbers, one node, fewer passes
            w = [p.weight for p in projections]
            return self.wo(self_attention(x, w[0], w[1], w[2], H))

        def split(w: Linear) -> Tensor:  # (B, T, C) -> (B, H, T, C/H)
            return w(x).reshape(heads).transpose(0, 2, 1, 3)

        y = attention(split(self.wq), split(self.wk), split(self.wv), causal=True)
        return self.wo(y.transpose(0, 2, 1, 3).reshape(B, T, C))


def _fusable(x: Tensor, projections: tuple[Linear, ...]) -> bool:
    """Whether :func:`self_attention` can do the projections: no biases,
    square float weights of ``x``'s dtype (a model's own, unchanged)."""
    d = x.data
    return (
        d.ndim == 3
        and d.dtype.kind == "f"
        and all(
            p.bias is None
            and p.weight.data.dtype == d.dtype
            and p.weight.data.shape == (d.shape[-1], d.shape[-1])
            for p in projections
        )
    )


class FeedForward(Module):
    """A transformer's feed-forward block: ``fc2(relu(fc1(x)))``, widening
    by ``ratio`` in between (no biases, as microgpt)."""

    def __init__(
        self,
        n_embd: int,
        ratio: int = 4,
        *,
        dtype: Any = np.float64,
        rng: np.random.Generator | None = None,
    ) -> None:
        kw: dict[str, Any] = {"bias": False, "dtype": dtype, "rng": rng}
        self.fc1 = Linear(n_embd, ratio * n_embd, **kw)
        self.fc2 = Linear(ratio * n_embd, n_embd, **kw)

    def forward(self, x: Tensor) -> Tensor:
        """``fc2(relu(fc1(x)))``: one node
        (``chainrule.tensor.feed_forward.feed_forward``) for the layers as
        made here, else the three."""
        if _plain(x, (self.fc1, self.fc2)):  # the same numbers, one node, fewer hand-offs
            return feed_forward(x, self.fc1.weight, self.fc2.weight)
        return self.fc2(self.fc1(x).relu())


def _plain(x: Tensor, layers: tuple[Linear, ...]) -> bool:
    """Whether ``layers`` are ``Linear`` layers as made (no subclass, no
    bias) with float weights of ``x``'s dtype: a :func:`feed_forward`."""
    d = x.data
    return (
        d.ndim >= 2
        and d.dtype.kind == "f"
        and all(
            type(layer) is Linear and layer.bias is None and layer.weight.data.dtype == d.dtype
            for layer in layers
        )
    )


class Block(Module):
    """A pre-norm transformer block: ``x + attn(norm(x))``, then
    ``x + mlp(norm(x))`` (``mlp`` a :class:`FeedForward`)."""

    def __init__(
        self,
        n_embd: int,
        n_head: int,
        mlp_ratio: int = 4,
        *,
        dtype: Any = np.float64,
        rng: np.random.Generator | None = None,
    ) -> None:
        self.norm1 = RMSNorm(n_embd, elementwise_affine=False, dtype=dtype)
        self.attn = CausalSelfAttention(n_embd, n_head, dtype=dtype, rng=rng)
        self.norm2 = RMSNorm(n_embd, elementwise_affine=False, dtype=dtype)
        self.mlp = FeedForward(n_embd, mlp_ratio, dtype=dtype, rng=rng)

    def forward(self, x: Tensor) -> Tensor:
        """``x + attn(norm1(x))``, then that plus ``mlp(norm2(...))`` of it."""
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class GPT(Module):
    """microgpt's transformer on batches: ``forward(idx)`` maps integer
    tokens ``(B, T)``, ``T <= block_size``, to logits ``(B, T, vocab)``;
    with ``targets`` it also returns the mean cross-entropy (targets equal
    to -100 are padding and do not count).

    Every weight starts normal with standard deviation ``init_std`` (0.08,
    as microgpt), drawn from ``rng``.
    """

    def __init__(
        self,
        config: GPTConfig,
        *,
        dtype: Any = np.float64,
        rng: np.random.Generator | None = None,
    ) -> None:
        rng = rng or tensor_generator()
        self.gpt_config = config
        c = config
        self.wte = Embedding(c.vocab_size, c.n_embd, dtype=dtype, rng=rng)
        self.wpe = Embedding(c.block_size, c.n_embd, dtype=dtype, rng=rng)
        self.norm = RMSNorm(c.n_embd, elementwise_affine=False, dtype=dtype)
        self.blocks = [
            Block(c.n_embd, c.n_head, c.mlp_ratio, dtype=dtype, rng=rng) for _ in range(c.n_layer)
        ]
        self.lm_head = Linear(c.n_embd, c.vocab_size, bias=False, dtype=dtype, rng=rng)
        d = _dtype(dtype)
        for p in self.parameters():
            p.data[...] = (rng.standard_normal(p.data.shape) * c.init_std).astype(d)

    def config(self) -> dict[str, Any]:
        """The architecture, for checkpoints."""
        return {"type": "GPT", **self.gpt_config.to_dict()}

    def forward(self, idx: Any, targets: Any = None) -> Any:
        """Logits ``(B, T, vocab)`` for tokens ``idx``; with ``targets``, ``(logits, loss)``."""
        idx = np.asarray(idx)
        if idx.ndim != 2:
            raise ValueError(f"GPT: idx must be (batch, time), got shape {idx.shape}")
        T = idx.shape[1]
        if self.gpt_config.block_size < T:
            raise ValueError(
                f"GPT: sequence of {T} is longer than block_size {self.gpt_config.block_size}"
            )
        x = self.norm(self.wte(idx) + self.wpe(np.arange(T)))
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(x)
        if targets is None:
            return logits
        return logits, cross_entropy(logits, targets)

    def generate(
        self,
        n: int,
        bos: int,
        *,
        temperature: float = 0.5,
        rng: np.random.Generator | None = None,
    ) -> list[list[int]]:
        """``n`` new documents, each sampled token by token from ``BOS``
        until the model gives ``BOS`` again (or the context is full), with
        the logits divided by ``temperature``. The ``BOS`` tokens are not
        returned."""
        if not temperature > 0.0:
            raise ValueError(f"generate: temperature must be > 0, got {temperature!r}")
        rng = rng or tensor_generator()
        if n <= 0:
            return []
        idx = np.full((n, 1), bos, dtype=np.int64)
        done = np.zeros(n, dtype=bool)
        with no_grad():
            for _ in range(self.gpt_config.block_size):
                logits = self(idx).data[:, -1, :].astype(np.float64)
                shifted = logits - logits.max(axis=1, keepdims=True)
                with np.errstate(over="ignore"):  # a tiny temperature: -inf, i.e. greedy
                    p = np.exp(shifted / temperature)
                p /= p.sum(axis=1, keepdims=True)
                # one uniform draw per row, inverted through the cumulative sum
                u = rng.random((n, 1))
                nxt = np.minimum((p.cumsum(axis=1) < u).sum(axis=1), p.shape[1] - 1)
                nxt = np.where(done, bos, nxt)
                done |= nxt == bos
                idx = np.concatenate([idx, nxt[:, None]], axis=1)
                if done.all():
                    break
        docs = []
        for row in idx[:, 1:]:
            stop = np.flatnonzero(row == bos)
            docs.append([int(t) for t in (row[: stop[0]] if stop.size else row)])
        return docs


def __getattr__(name: str) -> Any:
    if name == "MLP":  # the old name of FeedForward
        import warnings

        warnings.warn(
            "chainrule.tensor.nn.MLP is now FeedForward (chainrule.nn.MLP is micrograd's "
            "perceptron)",
            DeprecationWarning,
            stacklevel=2,
        )
        return FeedForward
    raise AttributeError(f"module 'chainrule.tensor.nn' has no attribute {name!r}")
