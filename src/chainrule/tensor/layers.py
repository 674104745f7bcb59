"""The layers of the Tensor engine: a :class:`Module` holds parameters
(Tensor attributes) and sub-modules; ``parameters()`` finds them all, in
the order they were assigned, so two models built alike list their
parameters alike (and a checkpoint is just the named arrays). Then the
layers every model is built from: linear, embedding, norms, dropout,
activations, ``Sequential``. Users import them from :mod:`chainrule.tensor.nn`.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ..module import BaseModule, SequentialBase, _convert, _some
from ..random_state import tensor_generator
from .linalg import linear
from .nn_ops import dropout, layer_norm, rms_norm
from .shape import embedding
from .tensor import FLOAT_DTYPES, Tensor


def _dtype(dtype: Any) -> np.dtype:
    d = np.dtype(dtype)
    if d not in FLOAT_DTYPES:
        raise TypeError(f"dtype must be float32 or float64, got {d}")
    return d


class Module(BaseModule):
    """Base class of the Tensor engine's layers, as PyTorch's ``nn.Module``:
    parameters are the Tensor attributes, recursively through Module
    attributes and lists of Modules, in assignment order.

    ``zero_grad()`` sets every gradient to ``None`` (as ``Tensor.zero_grad``
    and PyTorch); ``train()`` and ``eval()`` switch ``training`` here and in
    every sub-module (dropout is active only in training). ``state_dict``
    and ``load_state_dict`` (which accepts arrays or nested lists, as from
    a JSON checkpoint) are shared with the scalar engine's modules
    (:class:`chainrule.module.BaseModule`).
    """

    training: bool = True

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The module's computation; ``module(x)`` calls it. Subclasses define it."""
        raise NotImplementedError

    #: Names of the arrays a module keeps beside its parameters (BatchNorm's
    #: running statistics): saved and loaded with them, never optimized.
    buffer_names: tuple[str, ...] = ()

    def children(self) -> Iterator[Module]:
        """The direct sub-modules, in assignment order."""
        for _, value in self._submodules():
            yield from value if isinstance(value, list) else (value,)

    def _named_children(self) -> Iterator[tuple[str, Module]]:
        """The direct sub-modules by dotted name (``blocks.0``, or ``0`` in a
        ``Sequential``)."""
        for name, value in self._submodules():
            if isinstance(value, list):
                for i, module in enumerate(value):
                    yield f"{name}.{i}", module
            else:
                yield name, value

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, Tensor]]:
        """``(dotted name, parameter)`` pairs, in assignment order."""
        for name, value in vars(self).items():
            if isinstance(value, Tensor):
                yield prefix + name, value
            elif isinstance(value, Module):
                yield from value.named_parameters(f"{prefix}{name}.")
            elif isinstance(value, (list, tuple)):
                for i, item in enumerate(value):
                    if isinstance(item, Module):
                        yield from item.named_parameters(f"{prefix}{name}.{i}.")

    def named_buffers(self, prefix: str = "") -> Iterator[tuple[str, np.ndarray]]:
        """``(dotted name, array)`` of every buffer (:attr:`buffer_names`), here
        and in the sub-modules, as PyTorch's ``named_buffers``."""
        for name, (module, attr) in self._buffer_owners(prefix):
            yield name, getattr(module, attr)

    def state_dict(self) -> dict[str, Any]:
        """Every parameter's and buffer's array by name, as PyTorch's."""
        return {**super().state_dict(), **dict(self.named_buffers())}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Set every parameter and buffer from ``state`` (as made by
        ``state_dict()``): all checked before anything changes, as
        :meth:`chainrule.module.BaseModule.load_state_dict`."""
        owners = dict(self._buffer_owners())
        if not owners:
            return super().load_state_dict(state)
        missing = [n for n in owners if n not in state]
        if missing:
            raise ValueError(f"state_dict does not fit this model: missing {_some(missing)}")
        values = {n: _convert(n, getattr(m, a), state[n]) for n, (m, a) in owners.items()}
        super().load_state_dict({k: v for k, v in state.items() if k not in owners})
        for name, (module, attr) in owners.items():
            setattr(module, attr, values[name])

    def _buffer_owners(self, prefix: str = "") -> Iterator[tuple[str, tuple[Module, str]]]:
        for name in self.buffer_names:
            yield prefix + name, (self, name)
        for name, module in self._named_children():
            yield from module._buffer_owners(f"{prefix}{name}.")

    def parameters(self) -> list[Tensor]:
        """Every parameter Tensor, in ``named_parameters()`` order (what an optimizer takes)."""
        return [p for _, p in self.named_parameters()]

    def num_parameters(self) -> int:
        """The number of scalar parameters (the sum of the parameters' sizes)."""
        return sum(p.data.size for p in self.parameters())

    def zero_grad(self) -> None:
        """Forget every parameter's gradient (``grad = None``)."""
        for p in self.parameters():
            p.grad = None

    def train(self, mode: bool = True) -> Module:
        """Training mode (``mode=True``) or evaluation mode, here and in every
        sub-module; returns the module."""
        self.training = bool(mode)
        for child in self.children():
            child.train(mode)
        return self

    def eval(self) -> Module:
        """Evaluation mode: ``train(False)``."""
        return self.train(False)


class Linear(Module):
    """``y = x @ weight.T + bias``; ``weight`` is ``(out, in)`` and starts
    uniform in ``±1/sqrt(in)``, as PyTorch's."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        *,
        dtype: Any = np.float64,
        rng: np.random.Generator | None = None,
    ) -> None:
        rng = rng or tensor_generator()
        bound = 1.0 / math.sqrt(in_features)
        d = _dtype(dtype)
        self.weight = Tensor(rng.uniform(-bound, bound, (out_features, in_features)).astype(d))
        self.bias = Tensor(rng.uniform(-bound, bound, out_features).astype(d)) if bias else None

    def config(self) -> dict[str, Any]:
        out_features, in_features = self.weight.data.shape
        return {
            "type": "Linear",
            "in_features": int(in_features),
            "out_features": int(out_features),
            "bias": self.bias is not None,
        }

    def forward(self, x: Tensor) -> Tensor:
        """``x @ weight.T + bias`` over the last axis of ``x``."""
        return linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        out_features, in_features = self.weight.data.shape
        return (
            f"in_features={in_features}, out_features={out_features}, bias={self.bias is not None}"
        )


class Embedding(Module):
    """A table of ``num_embeddings`` vectors; ``forward(indices)`` picks rows."""

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        *,
        dtype: Any = np.float64,
        rng: np.random.Generator | None = None,
    ) -> None:
        rng = rng or tensor_generator()
        self.weight = Tensor(
            rng.standard_normal((num_embeddings, embedding_dim)).astype(_dtype(dtype))
        )

    def forward(self, indices: Any) -> Tensor:
        """The rows of ``weight`` at the integer ``indices`` (any shape)."""
        return embedding(self.weight, indices)

    def extra_repr(self) -> str:
        return "{}, {}".format(*self.weight.data.shape)


class RMSNorm(Module):
    """``x / sqrt(mean(x^2) + eps)`` over the last axis, times a learned
    weight when ``elementwise_affine`` (microgpt has none)."""

    def __init__(
        self,
        dim: int,
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        *,
        dtype: Any = np.float64,
    ) -> None:
        self.dim = dim  # also without a weight: PyTorch's RMSNorm is built with it
        self.eps = eps
        self.weight = Tensor(np.ones(dim, dtype=_dtype(dtype))) if elementwise_affine else None

    def forward(self, x: Tensor) -> Tensor:
        """``x`` scaled to unit root-mean-square over its last axis (times ``weight``)."""
        return rms_norm(x, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{(self.dim,)}, eps={self.eps}, elementwise_affine={self.weight is not None}"


class LayerNorm(Module):
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the last axis."""

    def __init__(
        self, dim: int, eps: float = 1e-5, bias: bool = True, *, dtype: Any = np.float64
    ) -> None:
        d = _dtype(dtype)
        self.eps = eps
        self.weight = Tensor(np.ones(dim, dtype=d))
        self.bias = Tensor(np.zeros(dim, dtype=d)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        """``x`` normalized to mean 0 and variance 1 over its last axis, then scaled and shifted."""
        return layer_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        shape, bias = self.weight.data.shape, self.bias is not None
        return f"{shape}, eps={self.eps}, elementwise_affine=True, bias={bias}"


class Dropout(Module):
    """Zeroes each entry with probability ``p`` in training and scales the
    rest by ``1 / (1 - p)``; the identity in evaluation mode (``eval()``).
    The draws come from ``rng``, else from the generator
    :func:`chainrule.manual_seed` seeds."""

    def __init__(self, p: float = 0.5, *, rng: np.random.Generator | None = None) -> None:
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout: p must be a probability in [0, 1], got {p!r}")
        self.p = float(p)
        self.rng = rng  # None: chainrule's generator (manual_seed), at each call

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training, rng=self.rng)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace=False"


class ReLU(Module):
    """``max(x, 0)`` as a module, for :class:`Sequential`."""

    def forward(self, x: Tensor) -> Tensor:
        return x.relu()


class Tanh(Module):
    """``tanh(x)`` as a module, for :class:`Sequential`."""

    def forward(self, x: Tensor) -> Tensor:
        return x.tanh()


class Sigmoid(Module):
    """``sigmoid(x)`` as a module, for :class:`Sequential`."""

    def forward(self, x: Tensor) -> Tensor:
        return x.sigmoid()


class GELU(Module):
    """``gelu(x)`` as a module (``approximate`` ``"none"`` or ``"tanh"``)."""

    def __init__(self, approximate: str = "none") -> None:
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return x.gelu(self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Sequential(SequentialBase, Module):
    """Modules applied in turn, as ``torch.nn.Sequential``; parameters
    named ``0.weight``, ``0.bias`` ... so a PyTorch ``state_dict`` of the
    same layers loads.

    >>> from chainrule.tensor.nn import Linear, ReLU, Sequential
    >>> Sequential(Linear(2, 3), ReLU(), Linear(3, 1))
    Sequential(
      (0): Linear(in_features=2, out_features=3, bias=True)
      (1): ReLU()
      (2): Linear(in_features=3, out_features=1, bias=True)
    )
    """

    module_type = Module
