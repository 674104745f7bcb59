"""Layers for images, as ``torch.nn``'s: ``Conv2d``, ``BatchNorm2d``,
``MaxPool2d`` and ``Flatten``, which :class:`chainrule.tensor.nn.Sequential`
chains with ``ReLU`` and ``Linear`` into a CNN
(:func:`chainrule.tensor.cnn.image_classifier`).

Each keeps PyTorch's argument names, parameter names, initialisation and
layout (NCHW), so :func:`chainrule.interop.to_torch` maps each one to the
``torch.nn`` layer of the same name and a ``Sequential`` to
``torch.nn.Sequential``, state dict and all. ``config()`` describes a
layer as JSON (lists, not tuples), which a checkpoint stores and compares.

>>> import numpy as np
>>> from chainrule.tensor.nn import BatchNorm2d, Conv2d, Flatten, Linear, MaxPool2d, ReLU
>>> from chainrule.tensor.nn import Sequential
>>> rng = np.random.default_rng(0)
>>> model = Sequential(
...     Conv2d(1, 8, 3, padding=1, bias=False, rng=rng), BatchNorm2d(8), ReLU(),
...     MaxPool2d(2), Flatten(), Linear(8 * 4 * 4, 10, rng=rng))
>>> model(np.zeros((5, 1, 8, 8))).shape
(5, 10)
>>> [name for name, _ in model.named_parameters()]
['0.weight', '1.weight', '1.bias', '5.weight', '5.bias']
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..random_state import tensor_generator
from .conv import as_pair, convolve, geometry
from .layers import Linear, Module, ReLU, Sequential, _dtype
from .norm import batch_norm
from .pool import max_pool2d
from .shape import flatten
from .tensor import Tensor, lift


class Conv2d(Module):
    """2-D convolution (:func:`chainrule.tensor.conv2d`) with a learned
    ``weight`` ``(out, in/groups, kh, kw)`` and ``bias`` ``(out,)``, both
    uniform in ``±1/sqrt(fan_in)`` (``fan_in = in/groups * kh * kw``), as
    PyTorch's default initialisation."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: Any,
        stride: Any = 1,
        padding: Any = 0,
        dilation: Any = 1,
        groups: int = 1,
        bias: bool = True,
        *,
        dtype: Any = np.float64,
        rng: np.random.Generator | None = None,
    ) -> None:
        kernel = as_pair(kernel_size, "kernel_size", "Conv2d", 1)
        self.geometry = geometry(kernel, stride, padding, dilation, groups, "Conv2d")
        for name, n in (("in_channels", in_channels), ("out_channels", out_channels)):
            if isinstance(n, bool) or not isinstance(n, int) or n < 1 or n % groups:
                raise ValueError(f"Conv2d: {name} must be a positive multiple of groups={groups}")
        self.settings: dict[str, Any] = {
            "in_channels": in_channels,
            "out_channels": out_channels,
            "kernel_size": list(kernel),
            "stride": list(self.geometry.stride),
            "padding": padding
            if isinstance(padding, str)
            else list(as_pair(padding, "padding", "Conv2d", 0)),
            "dilation": list(self.geometry.dilation),
            "groups": groups,
            "bias": bool(bias),
        }
        rng = rng or tensor_generator()
        d = _dtype(dtype)
        bound = 1.0 / math.sqrt(in_channels // groups * kernel[0] * kernel[1])
        shape = (out_channels, in_channels // groups, *kernel)
        self.weight = Tensor(rng.uniform(-bound, bound, shape).astype(d))
        self.bias = Tensor(rng.uniform(-bound, bound, out_channels).astype(d)) if bias else None

    def config(self) -> dict[str, Any]:
        return {"type": "Conv2d", **self.settings}

    def extra_repr(self) -> str:
        c, geo = self.settings, self.geometry
        text = f"{c['in_channels']}, {c['out_channels']}, kernel_size={tuple(c['kernel_size'])}"
        text += f", stride={geo.stride}"
        if c["padding"] != [0, 0]:
            padding = c["padding"]
            text += f", padding={padding if isinstance(padding, str) else tuple(padding)}"
        if geo.dilation != (1, 1):
            text += f", dilation={geo.dilation}"
        if c["groups"] != 1:
            text += f", groups={c['groups']}"
        return text + ("" if c["bias"] else ", bias=False")

    def forward(self, x: Any) -> Tensor:
        """The convolution of ``x`` ``(N, in, H, W)``: ``(N, out, OH, OW)``."""
        return convolve(lift(x, "Conv2d"), self.weight, self.bias, self.geometry, "Conv2d")


class BatchNorm2d(Module):
    """Batch normalization over each channel of ``(N, C, H, W)``
    (:func:`chainrule.tensor.batch_norm`), with a learned ``weight`` (ones)
    and ``bias`` (zeros) and the running statistics as buffers
    (``running_mean``, ``running_var``, ``num_batches_tracked``, PyTorch's
    names): batch statistics in ``train()`` mode, which update the running
    ones; the running ones in ``eval()`` mode."""

    buffer_names = ("running_mean", "running_var", "num_batches_tracked")

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float = 0.1,
        affine: bool = True,
        *,
        dtype: Any = np.float64,
    ) -> None:
        if isinstance(num_features, bool) or not isinstance(num_features, int) or num_features < 1:
            raise ValueError(f"BatchNorm2d: num_features must be an int >= 1, got {num_features!r}")
        d = _dtype(dtype)
        self.num_features, self.eps, self.momentum, self.affine = (
            num_features,
            eps,
            momentum,
            affine,
        )
        self.weight = Tensor(np.ones(num_features, dtype=d)) if affine else None
        self.bias = Tensor(np.zeros(num_features, dtype=d)) if affine else None
        self.running_mean = np.zeros(num_features, dtype=d)
        self.running_var = np.ones(num_features, dtype=d)
        self.num_batches_tracked = np.zeros((), dtype=np.int64)

    def config(self) -> dict[str, Any]:
        return {
            "type": "BatchNorm2d",
            "num_features": self.num_features,
            "eps": self.eps,
            "momentum": self.momentum,
            "affine": self.affine,
        }

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
            f"affine={self.affine}, track_running_stats=True"
        )

    def forward(self, x: Any) -> Tensor:
        """``x`` ``(N, C, H, W)`` normalized per channel, scaled and shifted."""
        x = lift(x, "BatchNorm2d")
        if x.data.ndim != 4:
            raise ValueError(f"BatchNorm2d: expected input (N, C, H, W), got shape {x.data.shape}")
        if self.training:
            self.num_batches_tracked = np.asarray(self.num_batches_tracked + 1)
        return batch_norm(
            x,
            self.running_mean,
            self.running_var,
            self.weight,
            self.bias,
            self.training,
            self.momentum,
            self.eps,
        )


class MaxPool2d(Module):
    """:func:`chainrule.tensor.max_pool2d` as a layer (no parameters); the
    stride defaults to the kernel size, as PyTorch's."""

    def __init__(
        self, kernel_size: Any, stride: Any = None, padding: Any = 0, dilation: Any = 1
    ) -> None:
        self.kernel_size = as_pair(kernel_size, "kernel_size", "MaxPool2d", 1)
        self.stride = as_pair(
            self.kernel_size if stride is None else stride, "stride", "MaxPool2d", 1
        )
        self.padding = as_pair(padding, "padding", "MaxPool2d", 0)
        self.dilation = as_pair(dilation, "dilation", "MaxPool2d", 1)

    def config(self) -> dict[str, Any]:
        return {
            "type": "MaxPool2d",
            "kernel_size": list(self.kernel_size),
            "stride": list(self.stride),
            "padding": list(self.padding),
            "dilation": list(self.dilation),
        }

    def extra_repr(self) -> str:
        def one(pair: tuple[int, int]) -> Any:
            return pair[0] if pair[0] == pair[1] else pair

        return (
            f"kernel_size={one(self.kernel_size)}, stride={one(self.stride)}, "
            f"padding={one(self.padding)}, dilation={one(self.dilation)}, ceil_mode=False"
        )

    def forward(self, x: Any) -> Tensor:
        return max_pool2d(x, self.kernel_size, self.stride, self.padding, self.dilation)


class Flatten(Module):
    """Axes ``start_dim`` to ``end_dim`` merged into one (by default all
    but the batch axis), as ``torch.nn.Flatten``."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        self.start_dim, self.end_dim = start_dim, end_dim

    def config(self) -> dict[str, Any]:
        return {"type": "Flatten", "start_dim": self.start_dim, "end_dim": self.end_dim}

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"

    def forward(self, x: Any) -> Tensor:
        return flatten(lift(x, "Flatten"), self.start_dim, self.end_dim)


def image_classifier(
    in_channels: int,
    size: tuple[int, int],
    classes: int,
    channels: tuple[int, int] = (16, 32),
    *,
    dtype: Any = np.float64,
    rng: np.random.Generator | None = None,
) -> Sequential:
    """A small CNN for images of ``size`` (height, width, at least 4 each)
    in ``classes`` classes: two blocks of a 3 x 3 convolution (no bias: the
    batch norm after it has one), batch norm, ReLU and 2 x 2 max pooling,
    then a linear layer from the flattened features to the logits. The
    shape of PyTorch's and tinygrad's MNIST examples, sized for 8 x 8 digits."""
    rng = rng or tensor_generator()
    c1, c2 = channels
    h, w = size[0] // 2 // 2, size[1] // 2 // 2
    if h < 1 or w < 1:
        raise ValueError(f"image_classifier: images of {size} are smaller than 4 x 4")
    kw: dict[str, Any] = {"dtype": dtype, "rng": rng}
    return Sequential(
        Conv2d(in_channels, c1, 3, padding=1, bias=False, **kw),
        BatchNorm2d(c1, dtype=dtype),
        ReLU(),
        MaxPool2d(2),
        Conv2d(c1, c2, 3, padding=1, bias=False, **kw),
        BatchNorm2d(c2, dtype=dtype),
        ReLU(),
        MaxPool2d(2),
        Flatten(),
        Linear(c2 * h * w, classes, **kw),
    )


__all__ = ["BatchNorm2d", "Conv2d", "Flatten", "MaxPool2d", "image_classifier"]
