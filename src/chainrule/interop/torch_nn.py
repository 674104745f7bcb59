"""chainrule's models written as ordinary PyTorch modules.

Each class has the architecture of a chainrule model and its parameters
under the same names, so one state dict loads into both
(:func:`chainrule.interop.to_torch` and :func:`~chainrule.interop.from_torch`
copy the values across). ``Linear``, ``Embedding``, ``RMSNorm`` and
``LayerNorm`` need no twin: they are ``torch.nn``'s own.

Importing this module imports torch; ``chainrule`` itself never does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

__all__ = ["GPT", "Block", "CausalSelfAttention", "FeedForward", "Layer", "Neuron", "ScalarMLP"]


class CausalSelfAttention(nn.Module):
    """``chainrule.tensor.nn.CausalSelfAttention``: separate query, key,
    value and output matrices, no biases; position ``t`` sees ``<= t``."""

    def __init__(self, n_embd: int, n_head: int) -> None:
        super().__init__()
        if n_embd % n_head:
            raise ValueError(
                f"CausalSelfAttention: n_embd {n_embd} not divisible by n_head {n_head}"
            )
        self.n_head = n_head
        self.wq = nn.Linear(n_embd, n_embd, bias=False)
        self.wk = nn.Linear(n_embd, n_embd, bias=False)
        self.wv = nn.Linear(n_embd, n_embd, bias=False)
        self.wo = nn.Linear(n_embd, n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        H = self.n_head
        q, k, v = (w(x).view(B, T, H, C // H).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(B, T, C))


class FeedForward(nn.Module):
    """``chainrule.tensor.nn.FeedForward``: ``fc2(relu(fc1(x)))``, no biases."""

    def __init__(self, n_embd: int, ratio: int = 4) -> None:
        super().__init__()
        self.fc1 = nn.Linear(n_embd, ratio * n_embd, bias=False)
        self.fc2 = nn.Linear(ratio * n_embd, n_embd, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.relu(self.fc1(x)))


class Block(nn.Module):
    """``chainrule.tensor.nn.Block``: ``x + attn(norm(x))``, then
    ``x + mlp(norm(x))``, RMS norms without weights."""

    def __init__(self, n_embd: int, n_head: int, ratio: int = 4) -> None:
        super().__init__()
        self.norm1 = nn.RMSNorm(n_embd, eps=1e-5, elementwise_affine=False)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.norm2 = nn.RMSNorm(n_embd, eps=1e-5, elementwise_affine=False)
        self.mlp = FeedForward(n_embd, ratio)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class GPT(nn.Module):
    """``chainrule.tensor.nn.GPT`` (microgpt's transformer, batched):
    ``forward(idx)`` maps tokens ``(B, T)`` to logits ``(B, T, vocab)``;
    with ``targets`` it also returns the mean cross-entropy, targets of
    -100 ignored. ``config`` is a ``GPTConfig`` (or anything with its
    fields)."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        self.config = config
        C = config.n_embd
        self.wte = nn.Embedding(config.vocab_size, C)
        self.wpe = nn.Embedding(config.block_size, C)
        self.norm = nn.RMSNorm(C, eps=1e-5, elementwise_affine=False)
        ratio = getattr(config, "mlp_ratio", 4)
        self.blocks = nn.ModuleList(Block(C, config.n_head, ratio) for _ in range(config.n_layer))
        self.lm_head = nn.Linear(C, config.vocab_size, bias=False)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None) -> Any:
        T = idx.shape[1]
        x = self.norm(self.wte(idx) + self.wpe(torch.arange(T, device=idx.device)))
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(x)
        if targets is None:
            return logits
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        return logits, loss


_ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu,
    "tanh": torch.tanh,
    "linear": lambda x: x,
}


class Neuron(nn.Module):
    """One unit of the scalar ``chainrule.nn.MLP``: its weights ``w`` as
    one vector, its bias ``b`` as a 0-d parameter."""

    def __init__(self, nin: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(nin))
        self.b = nn.Parameter(torch.zeros(()))


class Layer(nn.Module):
    def __init__(self, nin: int, nout: int, activation: str) -> None:
        super().__init__()
        self.activation = activation
        self.neurons = nn.ModuleList(Neuron(nin) for _ in range(nout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = torch.stack([n.get_parameter("w") for n in self.neurons])
        b = torch.stack([n.get_parameter("b") for n in self.neurons])
        return _ACTIVATIONS[self.activation](x @ w.T + b)


class ScalarMLP(nn.Module):
    """The scalar engine's ``chainrule.nn.MLP`` (micrograd's): hidden
    layers apply ``activation``, the last is linear. ``forward`` takes
    points ``(..., nin)`` and gives ``(..., nouts[-1])``. Parameters are
    named as chainrule's with each neuron's weights as one vector:
    ``layers.i.neurons.j.w`` holds chainrule's ``layers.i.neurons.j.w.0``,
    ``...w.1``, ...."""

    def __init__(self, nin: int, nouts: list[int], activation: str = "relu") -> None:
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise ValueError(f"ScalarMLP: unknown activation {activation!r}")
        self.nin, self.nouts, self.activation = nin, list(nouts), activation
        sizes = [nin, *nouts]
        last = len(nouts) - 1
        self.layers = nn.ModuleList(
            Layer(sizes[i], sizes[i + 1], activation if i != last else "linear")
            for i in range(len(nouts))
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x
