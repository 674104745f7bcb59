"""chainrule models in PyTorch and back.

``to_torch(model)`` gives an ordinary ``torch.nn.Module`` with the same
architecture and the same parameters under the same names, in the model's
dtype; ``from_torch(module)`` is the way back. For the Tensor engine's
layers (``Linear``, ``Embedding``, ``RMSNorm``, ``LayerNorm``,
``CausalSelfAttention``, ``FeedForward``, ``Block``) and the ``GPT``, and for the
scalar engine's ``MLP`` (micrograd's). The values are copied: the two
models train independently.

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
    return module


def torch_state_dict(model: Any) -> dict[str, Any]:
    """``model``'s parameters as torch tensors under PyTorch's names (copies)."""
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
    return {name: torch.from_numpy(np.array(p.data)) for name, p in model.named_parameters()}


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


_SUPPORTED = (
    "supported: chainrule.nn.MLP and chainrule.tensor.nn's Linear, Embedding, RMSNorm, "
    "LayerNorm, CausalSelfAttention, FeedForward, Block, GPT"
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
    dtypes = {str(t.dtype).removeprefix("torch.") for t in state.values()}
    if not dtypes <= {"float32", "float64"} or len(dtypes) > 1:
        raise TypeError(
            f"from_torch: parameters must be all float32 or all float64, got {sorted(dtypes)}"
        )
    model = _model_of(module, torch, torch_nn, dtypes.pop() if dtypes else "float64")
    model.load_state_dict({name: t.numpy() for name, t in state.items()})
    return model


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
