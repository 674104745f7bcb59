"""What PyTorch users expect of modules (issue 22): ``repr`` prints the
module tree as PyTorch does, ``Sequential`` in both engines,
``manual_seed`` makes runs repeat, optimizers say what to pass, and the
package namespaces hold only the public API."""

from __future__ import annotations

import random
import types
from typing import Any

import numpy as np
import pytest

import chainrule
import chainrule.tensor as ct
from chainrule import SGD, Adam, Tensor, Value
from chainrule import nn as snn
from chainrule.losses import mse_loss
from chainrule.tensor import nn as tnn

# ----------------------------------------------------------------------------
# repr: the module tree, as PyTorch prints it
# ----------------------------------------------------------------------------


def test_sequential_repr_is_pytorchs(torch: Any) -> None:
    ours = tnn.Sequential(
        tnn.Linear(2, 3),
        tnn.ReLU(),
        tnn.Dropout(0.1),
        tnn.LayerNorm(3),
        tnn.RMSNorm(3),
        tnn.Embedding(5, 3),
        tnn.GELU(),
        tnn.Tanh(),
        tnn.Sigmoid(),
        tnn.Linear(3, 1, bias=False),
    )
    t = torch.nn
    theirs = t.Sequential(
        t.Linear(2, 3),
        t.ReLU(),
        t.Dropout(0.1),
        t.LayerNorm(3),
        t.RMSNorm(3, eps=1e-5),
        t.Embedding(5, 3),
        t.GELU(),
        t.Tanh(),
        t.Sigmoid(),
        t.Linear(3, 1, bias=False),
    )
    assert repr(ours) == repr(theirs)


def test_nested_modules_and_lists_print_as_pytorch(torch: Any) -> None:
    """A user's module with sub-modules and a list of them (PyTorch's
    ModuleList, whose runs of equal modules print once)."""

    class Net(tnn.Module):
        def __init__(self) -> None:
            self.embed = tnn.Embedding(10, 4)
            self.blocks = [tnn.Linear(4, 4), tnn.Linear(4, 4), tnn.Linear(4, 4, bias=False)]
            self.head = tnn.Sequential(tnn.Tanh(), tnn.Linear(4, 2))

    class TorchNet(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            t = torch.nn
            self.embed = t.Embedding(10, 4)
            self.blocks = t.ModuleList([t.Linear(4, 4), t.Linear(4, 4), t.Linear(4, 4, bias=False)])
            self.head = t.Sequential(t.Tanh(), t.Linear(4, 2))

    TorchNet.__name__ = "Net"
    assert repr(Net()) == repr(TorchNet())

    class Empty(tnn.Module):
        pass

    assert repr(Empty()) == "Empty()"


def test_a_scalar_model_prints_its_tree() -> None:
    """print(model) of a user's scalar module showed <__main__.Net object
    at 0x...> (issue 22); micrograd's own reprs are unchanged inside."""

    class Net(snn.Module):
        def __init__(self) -> None:
            self.hidden = snn.Layer(2, 2)
            self.out = snn.Layer(2, 1, activation="linear")

        def __call__(self, x: Any) -> Any:
            return self.out(self.hidden(x))

        def parameters(self) -> list[Value]:
            return self.hidden.parameters() + self.out.parameters()

    assert repr(Net()) == (
        "Net(\n"
        "  (hidden): Layer of [ReLUNeuron(2), ReLUNeuron(2)]\n"
        "  (out): Layer of [LinearNeuron(2)]\n"
        ")"
    )
    assert repr(snn.MLP(2, [2, 1])).startswith("MLP of [Layer of [ReLUNeuron(2)")


# ----------------------------------------------------------------------------
# Sequential
# ----------------------------------------------------------------------------


def test_tensor_sequential_equals_torchs_with_its_state_dict(torch: Any) -> None:
    torch.manual_seed(0)
    theirs = torch.nn.Sequential(
        torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2)
    ).double()
    ours = tnn.Sequential(tnn.Linear(3, 4), tnn.Tanh(), tnn.Linear(4, 2))
    ours.load_state_dict({k: v.numpy() for k, v in theirs.state_dict().items()})
    assert [name for name, _ in ours.named_parameters()] == list(theirs.state_dict())
    x = np.random.default_rng(1).standard_normal((5, 3))
    y = ours(Tensor(x))
    ty = theirs(torch.tensor(x))
    np.testing.assert_allclose(y.data, ty.detach().numpy(), rtol=1e-12, atol=1e-14)
    (y * y).sum().backward()
    (ty * ty).sum().backward()
    for (name, p), tp in zip(ours.named_parameters(), theirs.parameters()):
        np.testing.assert_allclose(p.grad, tp.grad.numpy(), rtol=1e-12, atol=1e-14, err_msg=name)
    assert len(ours) == 3 and isinstance(ours[1], tnn.Tanh) and list(ours)[2] is ours[2]
    ours.eval()
    assert not any(m.training for m in ours)


def test_scalar_sequential_is_an_mlp() -> None:
    random.seed(3)
    mlp = snn.MLP(2, [4, 1])
    seq = snn.Sequential(*mlp.layers)
    x = [0.5, -1.5]
    assert seq(x).data == mlp(x).data
    assert seq.parameters() == mlp.parameters()
    names = [name for name, _ in seq.named_parameters()]
    assert names[0] == "0.neurons.0.w.0" and names[-1] == "1.neurons.0.b"
    assert len(names) == len(mlp.parameters())
    seq.zero_grad()
    assert all(p.grad == 0.0 for p in seq.parameters())


def test_sequential_refuses_what_is_not_a_module() -> None:
    with pytest.raises(
        TypeError, match=r"Sequential: item 1 is a function, not a module of chainrule.tensor.nn"
    ):
        tnn.Sequential(tnn.Linear(2, 2), lambda x: x.tanh())
    with pytest.raises(TypeError, match=r"item 0 is a Linear, not a module of chainrule.nn"):
        snn.Sequential(tnn.Linear(2, 2))


# ----------------------------------------------------------------------------
# manual_seed
# ----------------------------------------------------------------------------


def _scalar_run() -> tuple[list[float], dict[str, Any]]:
    model = snn.MLP(2, [4, 1])
    opt = SGD(model.parameters(), lr=0.05)
    losses = []
    for _ in range(3):
        xs = [[random.uniform(-1, 1), random.uniform(-1, 1)] for _ in range(4)]
        loss = mse_loss([model(x) for x in xs], [1.0, -1.0, 1.0, -1.0])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.data)
    return losses, model.state_dict()


def _tensor_run() -> tuple[list[float], dict[str, Any]]:
    model = tnn.Sequential(tnn.Linear(2, 8), tnn.ReLU(), tnn.Dropout(0.5), tnn.Linear(8, 1))
    opt = Adam(model.parameters(), lr=0.01)
    x = np.linspace(-1, 1, 20).reshape(10, 2)
    losses = []
    for _ in range(3):
        loss = ct.mse_loss(model(Tensor(x)), np.ones((10, 1)))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model.state_dict()


@pytest.mark.parametrize("run", [_scalar_run, _tensor_run], ids=["scalar", "tensor"])
def test_manual_seed_repeats_a_run(run: Any) -> None:
    chainrule.manual_seed(0)
    losses, state = run()
    chainrule.manual_seed(0)
    again, state_again = run()
    assert losses == again
    assert state.keys() == state_again.keys()
    assert all(np.array_equal(state[k], state_again[k]) for k in state)
    chainrule.manual_seed(1)
    other, _ = run()
    assert other != losses  # the seed matters: the draws are not constant


def test_manual_seed_seeds_dropout_and_checks_its_argument() -> None:
    x = Tensor(np.ones(1000))
    chainrule.manual_seed(7)
    a = ct.dropout(x, 0.5).data
    chainrule.manual_seed(7)
    assert np.array_equal(a, ct.dropout(x, 0.5).data)
    assert not np.array_equal(a, ct.dropout(x, 0.5).data)
    for bad in (1.5, "0", None, True):
        with pytest.raises(TypeError, match="manual_seed: seed must be an int"):
            chainrule.manual_seed(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="manual_seed: seed must be >= 0"):
        chainrule.manual_seed(-1)


# ----------------------------------------------------------------------------
# Optimizers: a lone parameter, a model
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("optimizer", [SGD, Adam])
def test_optimizers_say_to_pass_a_list(optimizer: Any) -> None:
    name = optimizer.__name__
    with pytest.raises(
        TypeError,
        match=rf"{name}: pass a list of parameters, {name}\(\[w\], ...\), not a single Value",
    ):
        optimizer(Value(1.0), lr=0.1)
    # a Tensor would iterate as rows (copies): refused, not silently ignored
    with pytest.raises(TypeError, match=r"not a single Tensor"):
        optimizer(Tensor(np.ones((2, 2))), lr=0.1)
    with pytest.raises(TypeError, match=r"pass model.parameters\(\), not the model itself"):
        optimizer(tnn.Linear(2, 2), lr=0.1)
    with pytest.raises(TypeError, match=r"parameter 1 is a float, not a Value or Tensor"):
        optimizer([Value(1.0), 2.0], lr=0.1)
    with pytest.raises(TypeError, match=r"params must be a list of Values or Tensors, got int"):
        optimizer(3, lr=0.1)
    with pytest.raises(ValueError, match="no parameters to optimize"):
        optimizer([], lr=0.1)


# ----------------------------------------------------------------------------
# Namespaces: only the public API
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("module", [chainrule, ct], ids=lambda m: m.__name__)
def test_namespaces_hold_only_their_public_api(module: types.ModuleType) -> None:
    public = {n for n in dir(module) if not n.startswith("_")}
    accidental = {
        n
        for n in public - set(module.__all__)
        if not isinstance(getattr(module, n), types.ModuleType)
    }
    assert not accidental, f"{module.__name__} exposes {sorted(accidental)}"
    assert "TYPE_CHECKING" not in dir(chainrule) and "annotations" not in dir(ct)
    assert {"manual_seed", "Sequential", "jacobian"} <= set(chainrule.__all__)
