"""Tensor layers and the GPT against the same PyTorch modules loaded with
the same weights: outputs, loss and every parameter's gradient."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from chainrule import Tensor
from chainrule.tensor import nn
from tensor_oracle import assert_close


def torch_nn() -> Any:
    """chainrule.interop.torch_nn, which imports torch (the fixture decides
    whether torch is there)."""
    from chainrule.interop import torch_nn

    return torch_nn


def _load(torch: Any, module: Any, state: dict[str, np.ndarray]) -> None:
    module.load_state_dict({k: torch.tensor(v) for k, v in state.items()})


def _check_layer(torch: Any, ours: nn.Module, theirs: Any, x: np.ndarray) -> None:
    theirs = theirs.double()
    _load(torch, theirs, ours.state_dict())
    xt = Tensor(x)
    tx = torch.tensor(x, requires_grad=True)
    y, ty = ours(xt), theirs(tx)
    assert_close(y.data, ty.detach().numpy(), "output")
    g = np.random.default_rng(0).normal(size=y.shape)
    y.backward(g)
    ty.backward(torch.tensor(g))
    assert_close(xt.grad, tx.grad.numpy(), "input gradient")
    grads = {k: p.grad for k, p in theirs.named_parameters()}
    for name, p in ours.named_parameters():
        assert_close(p.grad, grads[name].numpy(), f"gradient of {name}")


def test_linear(torch: Any) -> None:
    rng = np.random.default_rng(1)
    layer = nn.Linear(3, 4, rng=rng)
    assert [n for n, _ in layer.named_parameters()] == ["weight", "bias"]
    assert np.abs(layer.weight.data).max() <= 1 / np.sqrt(3)
    _check_layer(torch, layer, torch.nn.Linear(3, 4), rng.normal(size=(2, 5, 3)))


def test_norms(torch: Any) -> None:
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 3, 6))
    rms = nn.RMSNorm(6)
    rms.weight.data[:] = rng.normal(size=6)  # type: ignore[union-attr]
    _check_layer(torch, rms, torch.nn.RMSNorm(6, eps=1e-5), x)
    ln = nn.LayerNorm(6)
    ln.weight.data[:] = rng.normal(size=6)
    ln.bias.data[:] = rng.normal(size=6)  # type: ignore[union-attr]
    _check_layer(torch, ln, torch.nn.LayerNorm(6, eps=1e-5), x)


def test_embedding(torch: Any) -> None:
    emb = nn.Embedding(5, 3, rng=np.random.default_rng(3))
    temb = torch.nn.Embedding(5, 3).double()
    _load(torch, temb, emb.state_dict())
    idx = np.array([[1, 4, 1], [0, 0, 1]])
    y, ty = emb(idx), temb(torch.tensor(idx))
    assert_close(y.data, ty.detach().numpy(), "output")
    (y * y).sum().backward()
    (ty * ty).sum().backward()
    assert_close(emb.weight.grad, temb.weight.grad.numpy(), "gradient")


def test_causal_self_attention(torch: Any) -> None:
    config = nn.GPTConfig(n_embd=8, n_head=2)
    rng = np.random.default_rng(4)
    attn = nn.CausalSelfAttention(8, 2, rng=rng)
    tattn = torch_nn().GPT(config).blocks[0].attn
    _check_layer(torch, attn, tattn, rng.normal(size=(3, 5, 8)))


def test_causal_self_attention_does_not_look_ahead() -> None:
    rng = np.random.default_rng(5)
    attn = nn.CausalSelfAttention(8, 2, rng=rng)
    x = rng.normal(size=(1, 6, 8))
    y1 = attn(Tensor(x)).data
    x[0, 4:] = rng.normal(size=(2, 8))  # change the future only
    y2 = attn(Tensor(x)).data
    # equal up to rounding: the softmax shares one shift across rows
    np.testing.assert_allclose(y1[0, :4], y2[0, :4], rtol=1e-13, atol=1e-15)
    assert not np.allclose(y1[0, 4:], y2[0, 4:])


@pytest.mark.parametrize(
    "config",
    [
        nn.GPTConfig(),  # microgpt's size
        nn.GPTConfig(vocab_size=11, block_size=8, n_embd=12, n_head=3, n_layer=2),
    ],
    ids=["microgpt", "two-layer"],
)
def test_gpt_matches_torch(torch: Any, config: nn.GPTConfig) -> None:
    """Loss and the gradient of every parameter, on a padded batch."""
    rng = np.random.default_rng(6)
    model = nn.GPT(config, rng=rng)
    tmodel = torch_nn().GPT(config).to(torch.float64)
    _load(torch, tmodel, model.state_dict())
    assert [n for n, _ in model.named_parameters()] == [n for n, _ in tmodel.named_parameters()]
    B, T = 4, config.block_size
    idx = rng.integers(0, config.vocab_size, size=(B, T))
    targets = rng.integers(0, config.vocab_size, size=(B, T))
    targets[1, 3:] = -100  # padding counts for nothing
    logits, loss = model(idx, targets)
    tlogits, tloss = tmodel(torch.tensor(idx), torch.tensor(targets))
    assert logits.shape == (B, T, config.vocab_size)
    assert_close(logits.data, tlogits.detach().numpy(), "logits")
    assert_close(loss.data, tloss.detach().numpy(), "loss")
    loss.backward()
    tloss.backward()
    tgrads = dict(tmodel.named_parameters())
    for name, p in model.named_parameters():
        assert_close(p.grad, tgrads[name].grad.numpy(), f"gradient of {name}")


def test_gpt_float32_end_to_end(torch: Any) -> None:
    config = nn.GPTConfig(n_embd=8, n_head=2)
    model = nn.GPT(config, dtype=np.float32, rng=np.random.default_rng(7))
    tmodel = torch_nn().GPT(config).to(torch.float32)
    _load(torch, tmodel, model.state_dict())
    idx = np.random.default_rng(8).integers(0, 27, size=(2, 10))
    logits, loss = model(idx, idx)
    _, tloss = tmodel(torch.tensor(idx), torch.tensor(idx))
    assert logits.dtype == np.float32 and loss.dtype == np.float32
    loss.backward()
    tloss.backward()
    tgrads = dict(tmodel.named_parameters())
    for name, p in model.named_parameters():
        assert p.grad is not None and p.grad.dtype == np.float32
        assert_close(p.grad, tgrads[name].grad.numpy(), name, rtol=2e-4, atol=2e-6)


def test_gpt_state_dict_round_trip_and_errors() -> None:
    config = nn.GPTConfig(n_embd=8, n_head=2)
    a = nn.GPT(config, rng=np.random.default_rng(9))
    b = nn.GPT(config, rng=np.random.default_rng(10))
    b.load_state_dict({k: v.copy() for k, v in a.state_dict().items()})
    idx = np.array([[0, 5, 3]])
    assert np.array_equal(a(idx).data, b(idx).data)
    assert a.num_parameters() == 27 * 8 + 16 * 8 + 4 * 8 * 8 + 2 * 32 * 8 + 8 * 27
    with pytest.raises(ValueError, match="missing"):
        b.load_state_dict({})
    with pytest.raises(ValueError, match="block_size"):
        a(np.zeros((1, 17), dtype=int))
    with pytest.raises(ValueError, match="divisible"):
        nn.CausalSelfAttention(10, 3)


@pytest.mark.parametrize(
    "name,kwargs",
    [
        ("SGD", {"lr": 0.1}),
        ("SGD", {"lr": 0.1, "momentum": 0.9, "weight_decay": 0.01, "nesterov": True}),
        ("Adam", {"lr": 0.01}),
        ("Adam", {"lr": 0.01, "betas": (0.85, 0.99), "eps": 1e-8, "weight_decay": 0.1}),
    ],
)
def test_optimizers_on_tensors_match_torch(torch: Any, name: str, kwargs: dict[str, Any]) -> None:
    """chainrule.optim steps a GPT's Tensor parameters exactly as
    torch.optim steps the same torch model, three steps in a row."""
    from chainrule import optim

    config = nn.GPTConfig(n_embd=8, n_head=2)
    rng = np.random.default_rng(11)
    model = nn.GPT(config, rng=rng)
    tmodel = torch_nn().GPT(config).to(torch.float64)
    _load(torch, tmodel, model.state_dict())
    opt = getattr(optim, name)(model.parameters(), **kwargs)
    topt = getattr(torch.optim, name)(tmodel.parameters(), **kwargs)
    for _ in range(3):
        idx = rng.integers(0, 27, size=(3, 7))
        _, loss = model(idx, idx)
        opt.zero_grad()
        loss.backward()
        opt.step()
        _, tloss = tmodel(torch.tensor(idx), torch.tensor(idx))
        topt.zero_grad()
        tloss.backward()
        topt.step()
        assert_close(loss.data, tloss.detach().numpy(), "loss")
    tparams = dict(tmodel.named_parameters())
    for pname, p in model.named_parameters():
        assert_close(p.data, tparams[pname].detach().numpy(), pname)


def test_modules_say_which_engine_they_belong_to() -> None:
    """The Tensor layers live in chainrule.tensor.nn, not under the scalar
    engine's Module; the old ways in still work, with a warning."""
    import chainrule.nn
    from chainrule.module import BaseModule

    assert not issubclass(nn.Module, chainrule.nn.Module)
    assert issubclass(nn.Module, BaseModule) and issubclass(chainrule.nn.Module, BaseModule)
    assert nn.Block(8, 2).mlp.__class__ is nn.FeedForward
    with pytest.warns(DeprecationWarning, match="FeedForward"):
        assert nn.MLP is nn.FeedForward
    with pytest.warns(DeprecationWarning, match="chainrule.tensor.nn"):
        assert chainrule.nn.GPT is nn.GPT
    assert chainrule.nn.MLP.__module__ == "chainrule.nn"  # micrograd's perceptron


def test_zero_grad_is_none_for_tensors_and_zero_for_values() -> None:
    """One meaning per engine: PyTorch's None for Tensors (the module, the
    optimizer and Tensor.zero_grad agree), micrograd's 0.0 for Values."""
    import chainrule.nn
    from chainrule import optim

    layer = nn.Linear(3, 2, rng=np.random.default_rng(0))
    layer(Tensor(np.ones((4, 3)))).sum().backward()
    assert layer.weight.grad is not None
    layer.zero_grad()
    assert layer.weight.grad is None and layer.bias.grad is None
    layer(Tensor(np.ones((4, 3)))).sum().backward()
    opt = optim.Adam(layer.parameters())
    opt.zero_grad()
    assert all(p.grad is None for p in layer.parameters())
    before = layer.weight.data.copy()
    opt.step()  # nothing to apply: left alone, as torch.optim
    np.testing.assert_array_equal(layer.weight.data, before)
    mlp = chainrule.nn.MLP(2, [2, 1])
    mlp([1.0, 2.0]).backward()
    mlp.zero_grad()
    assert all(p.grad == 0.0 for p in mlp.parameters())
    mlp([1.0, 2.0]).backward()
    optim.SGD(mlp.parameters()).zero_grad()
    assert all(p.grad == 0.0 for p in mlp.parameters())


def test_train_and_eval_reach_every_submodule() -> None:
    model = nn.GPT(nn.GPTConfig(n_embd=8, n_head=2, n_layer=2), rng=np.random.default_rng(0))
    assert model.training and model.blocks[1].mlp.fc1.training
    assert model.eval() is model
    assert not model.training and not model.blocks[1].mlp.fc1.training
    model.train()
    assert model.blocks[0].attn.wq.training
