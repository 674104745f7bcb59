"""The GPT of ``chainrule.tensor.nn``, written as an ordinary PyTorch
module: the same architecture, the same parameters under the same names, so
one state dict loads into both. The oracle of the Tensor GPT's tests and
the ``torch-*`` engines of the gpt-step benchmark. Imports torch when
called."""

from __future__ import annotations

from typing import Any


def torch_gpt(config: Any, dtype: Any = None) -> Any:
    """A ``torch.nn.Module`` for ``config`` (a
    :class:`~chainrule.transformer.GPTConfig`), in ``dtype``;
    ``model(idx, targets)`` returns the logits and the mean cross-entropy
    (targets of -100 ignored)."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    C, H = config.n_embd, config.n_head
    ratio = config.mlp_ratio

    class CausalSelfAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wq = nn.Linear(C, C, bias=False)
            self.wk = nn.Linear(C, C, bias=False)
            self.wv = nn.Linear(C, C, bias=False)
            self.wo = nn.Linear(C, C, bias=False)

        def forward(self, x: Any) -> Any:
            B, T, _ = x.shape
            q, k, v = (
                w(x).view(B, T, H, C // H).transpose(1, 2) for w in (self.wq, self.wk, self.wv)
            )
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.wo(y.transpose(1, 2).reshape(B, T, C))

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1 = nn.Linear(C, ratio * C, bias=False)
            self.fc2 = nn.Linear(ratio * C, C, bias=False)

        def forward(self, x: Any) -> Any:
            return self.fc2(F.relu(self.fc1(x)))

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1 = nn.RMSNorm(C, eps=1e-5, elementwise_affine=False)
            self.attn = CausalSelfAttention()
            self.norm2 = nn.RMSNorm(C, eps=1e-5, elementwise_affine=False)
            self.mlp = MLP()

        def forward(self, x: Any) -> Any:
            x = x + self.attn(self.norm1(x))
            return x + self.mlp(self.norm2(x))

    class GPT(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte = nn.Embedding(config.vocab_size, C)
            self.wpe = nn.Embedding(config.block_size, C)
            self.norm = nn.RMSNorm(C, eps=1e-5, elementwise_affine=False)
            self.blocks = nn.ModuleList(Block() for _ in range(config.n_layer))
            self.lm_head = nn.Linear(C, config.vocab_size, bias=False)

        def forward(self, idx: Any, targets: Any = None) -> Any:
            T = idx.shape[1]
            x = self.norm(self.wte(idx) + self.wpe(torch.arange(T)))
            for block in self.blocks:
                x = block(x)
            logits = self.lm_head(x)
            if targets is None:
                return logits
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
            return logits, loss

    model = GPT()
    return model.to(dtype) if dtype is not None else model
