"""chainrule models in PyTorch and back.

``to_torch(model)`` gives an ordinary ``torch.nn.Module`` with the same
architecture and the same parameters under the same names, in the model's
dtype; ``from_torch(module)`` is the way back. For the Tensor engine's
layers (``Linear``, ``Embedding``, ``RMSNorm``, ``LayerNorm``,
``CausalSelfAttention``, ``FeedForward``, ``Block``) and the ``GPT``, for the
image layers (``Conv2d``, ``BatchNorm2d``, ``MaxPool2d``, ``ReLU``,
``Flatten``) and a ``Sequential`` of any of them (``torch.nn``'s own, with
BatchNorm's running statistics as buffers), and for the scalar engine's
``MLP`` (micrograd's). The values are copied: the two models train
independently.

>>> import numpy as np, torch
>>> from chainrule.interop import from_torch, to_torch
>>> from chainrule.tensor.nn import GPT, GPTConfig
>>> model = GPT(GPTConfig(n_layer=1), rng=np.random.default_rng(0))
>>> twin = to_torch(model)  # a torch.nn.Module, float64 as the model
>>> idx = np.array([[26, 0, 1, 2]])
>>> bool(np.allclose(twin(torch.from_numpy(idx)).detach(), model(idx).data, rtol=1e-12))
True
>>> back = from_torch(twin)
>>> all(np.array_equal(p.data, q.data) for p, q in zip(back.parameters(), model.parameters()))
True

Arrays themselves need nothing from here: ``torch.from_dlpack(t)``,
``np.asarray(t)`` and ``Tensor(torch_tensor)`` share memory
(:class:`chainrule.Tensor` speaks DLPack and NumPy's array protocol).

Needs torch (``pip install torch``), imported on first use only.

A layer above the engines and the training API, which it may import;
only ``bench``, ``cli`` and the package's own names import it.
"""

from __future__ import annotations

from typing import Any

from .. import nn as scalar_nn

__all__ = ["from_torch", "to_torch", "torch_state_dict"]


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise ImportError(
            "chainrule.interop needs PyTorch: pip install torch (the CPU build will do)"
        ) from None
    return torch


# ----------------------------------------------------------------------------
# chainrule -> torch
# ----------------------------------------------------------------------------


def to_torch(model: Any) -> Any:
    """``model`` as a ``torch.nn.Module`` with the same parameter names and
    values, in the same dtype (the scalar MLP: float64).

    Raises TypeError for a model that has no PyTorch twin.
    """
    torch = _torch()
    from . import torch_nn

    module = _twin(model, torch, torch_nn)
    dtype = torch.float64 if isinstance(model, scalar_nn.MLP) else _dtype_of(model, torch)
    module = module.to(dtype)
    module.load_state_dict(torch_state_dict(model), strict=True)
    return module.train(bool(getattr(model, "training", True)))


def torch_state_dict(model: Any) -> dict[str, Any]:
    """``model``'s parameters (and buffers) as torch tensors under PyTorch's
    names (copies)."""
    torch = _torch()
    import numpy as np

    if isinstance(model, scalar_nn.MLP):
        state = {}
        for i, layer in enumerate(model.layers):
            for j, n in enumerate(layer.neurons):
                prefix = f"layers.{i}.neurons.{j}."
                state[prefix + "w"] = torch.tensor([w.data for w in n.w], dtype=torch.float64)
                state[prefix + "b"] = torch.tensor(n.b.data, dtype=torch.float64)
        return state
    return {name: torch.from_numpy(np.array(a)) for name, a in model.state_dict().items()}


def _dtype_of(model: Any, torch: Any) -> Any:
    params = model.parameters()
    name = str(params[0].data.dtype) if params else "float64"
    return getattr(torch, name)


def _twin(model: Any, torch: Any, torch_nn: Any) -> Any:
    from ..tensor import nn as tnn

    if isinstance(model, scalar_nn.MLP):
        c = model.config()
        return torch_nn.ScalarMLP(c["nin"], c["nouts"], c["activation"])
    if isinstance(model, tnn.GPT):
        return torch_nn.GPT(model.gpt_config)
    if isinstance(model, tnn.Block):
        n_embd = model.attn.wq.weight.shape[1]
        return torch_nn.Block(n_embd, model.attn.n_head, _ratio(model.mlp))
    if isinstance(model, tnn.CausalSelfAttention):
        return torch_nn.CausalSelfAttention(model.wq.weight.shape[1], model.n_head)
    if isinstance(model, tnn.FeedForward):
        return torch_nn.FeedForward(model.fc1.weight.shape[1], _ratio(model))
    image_layer = _image_twin(model, torch)
    if image_layer is not None:
        return image_layer
    if isinstance(model, tnn.Sequential):
        return torch.nn.Sequential(*(_twin(layer, torch, torch_nn) for layer in model.layers))
    if isinstance(model, tnn.Linear):
        out_features, in_features = model.weight.shape
        return torch.nn.Linear(in_features, out_features, bias=model.bias is not None)
    if isinstance(model, tnn.Embedding):
        return torch.nn.Embedding(*model.weight.shape)
    if isinstance(model, tnn.RMSNorm):
        return torch.nn.RMSNorm(
            model.dim, eps=model.eps, elementwise_affine=model.weight is not None
        )
    if isinstance(model, tnn.LayerNorm):
        return torch.nn.LayerNorm(model.weight.shape[0], eps=model.eps, bias=model.bias is not None)
    raise TypeError(f"to_torch: no PyTorch twin for {type(model).__name__}; {_SUPPORTED}")


def _image_twin(model: Any, torch: Any) -> Any:
    """The ``torch.nn`` layer of one of chainrule's image layers, or None."""
    from ..tensor import cnn

    if isinstance(model, cnn.Conv2d):
        c = model.settings
        padding = c["padding"] if isinstance(c["padding"], str) else tuple(c["padding"])
        return torch.nn.Conv2d(
            c["in_channels"],
            c["out_channels"],
            tuple(c["kernel_size"]),
            tuple(c["stride"]),
            padding,
            tuple(c["dilation"]),
            c["groups"],
            c["bias"],
        )
    if isinstance(model, cnn.BatchNorm2d):
        return torch.nn.BatchNorm2d(model.num_features, model.eps, model.momentum, model.affine)
    if isinstance(model, cnn.MaxPool2d):
        return torch.nn.MaxPool2d(model.kernel_size, model.stride, model.padding, model.dilation)
    if isinstance(model, cnn.ReLU):
        return torch.nn.ReLU()
    if isinstance(model, cnn.Flatten):
        return torch.nn.Flatten(model.start_dim, model.end_dim)
    return None


_SUPPORTED = (
    "supported: chainrule.nn.MLP and chainrule.tensor.nn's Linear, Embedding, RMSNorm, "
    "LayerNorm, CausalSelfAttention, FeedForward, Block, GPT, Conv2d, BatchNorm2d, "
    "MaxPool2d, ReLU, Flatten and a Sequential of them"
)


def _ratio(mlp: Any) -> int:
    hidden, n_embd = mlp.fc1.weight.shape
    return int(hidden // n_embd)


# ----------------------------------------------------------------------------
# torch -> chainrule
# ----------------------------------------------------------------------------


def from_torch(module: Any) -> Any:
    """The chainrule model of a PyTorch module that :func:`to_torch` makes
    (or ``torch.nn``'s ``Linear``, ``Embedding``, ``RMSNorm``, ``LayerNorm``),
    with its parameter values copied, in its dtype (float32 or float64).

    Raises TypeError for a module chainrule has no model for, or of another
    dtype.
    """
    torch = _torch()
    from . import torch_nn

    state = {name: p.detach().cpu() for name, p in module.state_dict().items()}
    if isinstance(module, torch_nn.ScalarMLP):
        model = scalar_nn.MLP(module.nin, module.nouts, activation=module.activation)
        model.load_state_dict(_scalar_names(state))
        return model
    # integer buffers (BatchNorm's num_batches_tracked) have no say in the dtype
    dtypes = {str(t.dtype).removeprefix("torch.") for t in state.values() if t.is_floating_point()}
    if not dtypes <= {"float32", "float64"} or len(dtypes) > 1:
        raise TypeError(
            f"from_torch: parameters must be all float32 or all float64, got {sorted(dtypes)}"
        )
    model = _model_of(module, torch, torch_nn, dtypes.pop() if dtypes else "float64")
    model.load_state_dict({name: t.numpy() for name, t in state.items()})
    return model.train(module.training)


def _scalar_names(state: dict[str, Any]) -> dict[str, float]:
    """torch's one vector per neuron as chainrule's one number per weight."""
    flat = {}
    for name, t in state.items():
        if name.endswith(".w"):
            for k, x in enumerate(t.tolist()):
                flat[f"{name}.{k}"] = float(x)
        else:
            flat[name] = float(t)
    return flat


def _model_of(module: Any, torch: Any, torch_nn: Any, dtype: str) -> Any:
    from ..tensor import nn as tnn
    from ..tensor.nn import GPTConfig

    kw: dict[str, Any] = {"dtype": dtype}
    if isinstance(module, torch.nn.Sequential):
        return tnn.Sequential(*(_model_of(m, torch, torch_nn, dtype) for m in module))
    image_layer = _image_model(module, torch, dtype)
    if image_layer is not None:
        return image_layer
    if isinstance(module, torch_nn.GPT):
        c = module.config
        fields = GPTConfig.__dataclass_fields__
        return tnn.GPT(GPTConfig(**{f: getattr(c, f) for f in fields if hasattr(c, f)}), **kw)
    if isinstance(module, torch_nn.Block):
        n_embd = module.attn.wq.in_features
        return tnn.Block(n_embd, module.attn.n_head, **kw)
    if isinstance(module, torch_nn.CausalSelfAttention):
        return tnn.CausalSelfAttention(module.wq.in_features, module.n_head, **kw)
    if isinstance(module, torch_nn.FeedForward):
        n_embd = module.fc1.in_features
        return tnn.FeedForward(n_embd, module.fc1.out_features // n_embd, **kw)
    if isinstance(module, torch.nn.Linear):
        return tnn.Linear(
            module.in_features, module.out_features, bias=module.bias is not None, **kw
        )
    if isinstance(module, torch.nn.Embedding):
        return tnn.Embedding(module.num_embeddings, module.embedding_dim, **kw)
    if isinstance(module, torch.nn.RMSNorm):
        (dim,) = module.normalized_shape
        eps = torch.finfo(getattr(torch, dtype)).eps if module.eps is None else module.eps
        return tnn.RMSNorm(dim, eps, module.elementwise_affine, **kw)
    if isinstance(module, torch.nn.LayerNorm) and module.elementwise_affine:
        (dim,) = module.normalized_shape
        return tnn.LayerNorm(dim, module.eps, module.bias is not None, **kw)
    raise TypeError(f"from_torch: no chainrule model for {type(module).__name__}; {_SUPPORTED}")


def _image_model(module: Any, torch: Any, dtype: str) -> Any:
    """chainrule's layer for one of ``torch.nn``'s image layers, or None;
    a TypeError for a setting chainrule does not have."""
    from ..tensor import cnn

    def unsupported(what: str) -> TypeError:
        return TypeError(f"from_torch: {type(module).__name__} with {what} is not supported")

    if isinstance(module, torch.nn.Conv2d):
        if module.padding_mode != "zeros":
            raise unsupported(f"padding_mode={module.padding_mode!r}")
        m = module
        return cnn.Conv2d(
            m.in_channels,
            m.out_channels,
            m.kernel_size,
            m.stride,
            m.padding,
            m.dilation,
            m.groups,
            m.bias is not None,
            dtype=dtype,
        )
    if isinstance(module, torch.nn.BatchNorm2d):
        if not module.track_running_stats or module.momentum is None:
            raise unsupported("track_running_stats=False or momentum=None")
        return cnn.BatchNorm2d(
            module.num_features, module.eps, module.momentum, module.affine, dtype=dtype
        )
    if isinstance(module, torch.nn.MaxPool2d):
        if module.ceil_mode or module.return_indices:
            raise unsupported("ceil_mode or return_indices")
        return cnn.MaxPool2d(module.kernel_size, module.stride, module.padding, module.dilation)
    if isinstance(module, torch.nn.ReLU):
        return cnn.ReLU()
    if isinstance(module, torch.nn.Flatten):
        return cnn.Flatten(module.start_dim, module.end_dim)
    return None
