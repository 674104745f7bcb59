"""NumPy, DLPack and PyTorch interop: arrays shared without copies, and
chainrule models as torch modules and back, checked against each other."""

from __future__ import annotations

import doctest
import random
from typing import Any

import numpy as np
import pytest

import chainrule.interop
from chainrule import Tensor
from chainrule.nn import MLP as ScalarMLP
from chainrule.tensor import nn

# ----------------------------------------------------------------------------
# arrays
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_numpy_asarray_is_the_data(dtype: str) -> None:
    t = Tensor(np.arange(6.0).reshape(2, 3), dtype=dtype)
    a = np.asarray(t)
    assert a.dtype == np.dtype(dtype) and a.shape == (2, 3)
    assert np.shares_memory(a, t.data)
    a[0, 0] = 7.0
    assert t.data[0, 0] == 7.0
    assert np.asarray(t, dtype=np.float16).dtype == np.float16  # another dtype: a copy
    assert not np.shares_memory(np.array(t, copy=True), t.data)
    assert np.asarray(t, copy=False) is t.data
    with pytest.raises(ValueError, match="needs a copy"):
        np.asarray(t, dtype=np.float16, copy=False)
    assert np.asarray([Tensor([1.0]), Tensor([2.0])]).tolist() == [[1.0], [2.0]]


def test_numpy_from_dlpack_shares_memory() -> None:
    t = Tensor([[1.0, 2.0], [3.0, 4.0]], dtype="float32")
    a = np.from_dlpack(t)
    assert a.dtype == np.float32 and np.shares_memory(a, t.data)
    back = Tensor(a)
    assert back.data is a


def test_tensor_of_an_array_like_shares_memory() -> None:
    """Anything with ``__array__`` (NumPy's protocol) keeps its float dtype
    and its buffer, as an ndarray does; a NumPy float32 scalar is a number."""

    class ArrayLike:
        def __init__(self, a: np.ndarray) -> None:
            self.a = a

        def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
            return self.a

    a = np.ones((2, 2), dtype=np.float32)
    t = Tensor(ArrayLike(a))
    assert t.dtype == np.float32 and np.shares_memory(t.data, a)
    assert Tensor(np.float32(1.5)).dtype == np.float64


def test_tolist_and_numpy() -> None:
    t = Tensor([[1.5, -2.0]])
    assert t.tolist() == [[1.5, -2.0]] and type(t.tolist()[0][0]) is float
    assert Tensor(3.0).tolist() == 3.0
    assert t.numpy() is t.data


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_torch_from_dlpack_shares_memory(torch: Any, dtype: str) -> None:
    t = Tensor(np.linspace(-1.0, 1.0, 12).reshape(3, 4), dtype=dtype)
    x = torch.from_dlpack(t)
    assert x.dtype == getattr(torch, dtype) and tuple(x.shape) == (3, 4)
    x[1, 2] = 42.0  # one buffer: torch writes, chainrule reads
    assert t.data[1, 2] == 42.0
    assert torch.equal(torch.tensor(t), x)  # torch.tensor(t) reads it too (a copy)
    sliced = Tensor(np.arange(10.0))[::2]  # strided views travel too
    assert torch.from_dlpack(sliced).tolist() == [0.0, 2.0, 4.0, 6.0, 8.0]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_tensor_of_a_torch_tensor_shares_memory(torch: Any, dtype: str) -> None:
    x = torch.arange(6, dtype=getattr(torch, dtype)).reshape(2, 3)
    t = Tensor(x)
    assert t.dtype == np.dtype(dtype)
    x[0, 1] = -5.0
    assert t.data[0, 1] == -5.0
    # other dtypes are converted as NumPy arrays are: ints become float64
    assert Tensor(torch.tensor([1, 2])).data.tolist() == [1.0, 2.0]
    assert Tensor(x, dtype="float64").dtype == np.float64
    # a gradient-tracking tensor is refused with one line saying what to do
    with pytest.raises(TypeError, match=r"Tensor: cannot read Tensor through DLPack.*detach"):
        Tensor(torch.ones(2, requires_grad=True))


def test_tensor_ops_accept_torch_tensors(torch: Any) -> None:
    t = Tensor([1.0, 2.0])
    y = (t * torch.tensor([3.0, 4.0], dtype=torch.float64)).sum()
    y.backward()
    assert y.item() == 11.0 and t.grad.tolist() == [3.0, 4.0]


# ----------------------------------------------------------------------------
# models: chainrule -> torch -> chainrule
# ----------------------------------------------------------------------------


def _interop() -> Any:
    from chainrule.interop import from_torch, to_torch

    return to_torch, from_torch


def _same_parameters(a: Any, b: Any) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert list(sa) == list(sb)
    for name in sa:
        x, y = np.asarray(sa[name]), np.asarray(sb[name])
        assert x.dtype == y.dtype and np.array_equal(x, y), name


def _gpt(dtype: str, seed: int = 0) -> nn.GPT:
    config = nn.GPTConfig(vocab_size=11, block_size=8, n_embd=16, n_head=4, n_layer=2)
    return nn.GPT(config, dtype=dtype, rng=np.random.default_rng(seed))


@pytest.mark.parametrize("dtype,tol", [("float64", 1e-12), ("float32", 1e-5)])
def test_gpt_to_torch_gives_the_same_logits_and_loss(torch: Any, dtype: str, tol: float) -> None:
    to_torch, from_torch = _interop()
    model = _gpt(dtype)
    twin = to_torch(model)
    assert isinstance(twin, torch.nn.Module)
    assert [n for n, _ in twin.named_parameters()] == [n for n, _ in model.named_parameters()]
    assert {p.dtype for p in twin.parameters()} == {getattr(torch, dtype)}
    rng = np.random.default_rng(1)
    idx = rng.integers(0, 11, (3, 8))
    targets = rng.integers(0, 11, (3, 8))
    targets[0, 5:] = -100  # padding
    logits, loss = model(idx, targets)
    tlogits, tloss = twin(torch.from_numpy(idx), torch.from_numpy(targets))
    np.testing.assert_allclose(tlogits.detach().numpy(), logits.data, rtol=tol, atol=tol)
    assert abs(tloss.item() - loss.item()) <= tol * abs(loss.item())
    _same_parameters(from_torch(twin), model)


def test_torch_training_comes_back(torch: Any) -> None:
    """A step taken in torch is visible after from_torch, and the models are
    independent copies (training one does not move the other)."""
    to_torch, from_torch = _interop()
    model = _gpt("float64")
    before = model.state_dict()
    twin = to_torch(model)
    with torch.no_grad():
        twin.lm_head.weight.add_(1.0)
    back = from_torch(twin)
    np.testing.assert_array_equal(back.lm_head.weight.data, before["lm_head.weight"] + 1.0)
    np.testing.assert_array_equal(model.lm_head.weight.data, before["lm_head.weight"])


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_scalar_mlp_to_torch_and_back(torch: Any, activation: str) -> None:
    to_torch, from_torch = _interop()
    model = ScalarMLP(3, [5, 4, 2], activation=activation, rng=random.Random(4))
    twin = to_torch(model)
    points = np.random.default_rng(2).normal(size=(7, 3))
    out = twin(torch.from_numpy(points)).detach().numpy()
    for x, y in zip(points, out):
        expected = [v.data for v in model(x.tolist())]
        np.testing.assert_allclose(y, expected, rtol=1e-12, atol=1e-14)
    back = from_torch(twin)
    assert back.config() == model.config()
    assert back.state_dict() == model.state_dict()  # every float bit for bit


LAYERS = {
    "Linear": lambda d, r: nn.Linear(5, 3, dtype=d, rng=r),
    "Linear-nobias": lambda d, r: nn.Linear(5, 3, bias=False, dtype=d, rng=r),
    "Embedding": lambda d, r: nn.Embedding(7, 5, dtype=d, rng=r),
    "RMSNorm": lambda d, r: nn.RMSNorm(5, dtype=d),
    "RMSNorm-noweight": lambda d, r: nn.RMSNorm(5, elementwise_affine=False, dtype=d),
    "LayerNorm": lambda d, r: nn.LayerNorm(5, dtype=d),
    "CausalSelfAttention": lambda d, r: nn.CausalSelfAttention(5 * 2, 2, dtype=d, rng=r),
    "FeedForward": lambda d, r: nn.FeedForward(5, dtype=d, rng=r),
    "Block": lambda d, r: nn.Block(5 * 2, 2, dtype=d, rng=r),
}


@pytest.mark.parametrize("name", list(LAYERS))
@pytest.mark.parametrize("dtype,tol", [("float64", 1e-12), ("float32", 1e-5)])
def test_layers_to_torch_and_back(torch: Any, name: str, dtype: str, tol: float) -> None:
    to_torch, from_torch = _interop()
    rng = np.random.default_rng(5)
    layer = LAYERS[name](dtype, rng)
    for p in layer.parameters():  # not the initial ones and zeros of the norms
        p.data[...] = rng.normal(size=p.shape)
    twin = to_torch(layer)
    if name == "Embedding":
        x: Any = rng.integers(0, 7, (2, 4))
        tx = torch.from_numpy(x)
    else:
        width = 10 if name in ("CausalSelfAttention", "Block") else 5
        x = Tensor(rng.normal(size=(2, 4, width)), dtype=dtype)
        tx = torch.from_dlpack(x)
    np.testing.assert_allclose(twin(tx).detach().numpy(), layer(x).data, rtol=tol, atol=tol)
    back = from_torch(twin)
    assert type(back) is type(layer)
    _same_parameters(back, layer)


def test_unsupported_models_are_refused(torch: Any) -> None:
    to_torch, from_torch = _interop()
    with pytest.raises(TypeError, match=r"to_torch: no PyTorch twin for dict; supported: "):
        to_torch({})
    with pytest.raises(TypeError, match=r"from_torch: no chainrule model for Conv1d"):
        from_torch(torch.nn.Conv1d(2, 2, 1))
    with pytest.raises(TypeError, match=r"from_torch: parameters must be all float32 or all"):
        from_torch(torch.nn.Linear(2, 2).half())


def test_chainrule_needs_neither_torch_nor_numpy(tmp_path: Any) -> None:
    """torch and NumPy stay optional: ``import chainrule``, the JSON
    checkpoints and ``chainrule moons`` work without them, and
    ``chainrule.interop`` says what to install when it is used."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys\n"
        "for name in ('numpy', 'torch', 'safetensors'):\n"
        "    sys.modules[name] = None\n"
        "import chainrule, chainrule.interop\n"
        "from chainrule import checkpoint\n"
        "from chainrule.cli import main\n"
        "assert main(['moons', '--steps', '2', '--out', 'o']) == 0\n"
        "assert len(checkpoint.load_model('o/moons.json').parameters()) == 337\n"
        "try:\n"
        "    chainrule.interop.to_torch(None)\n"
        "except ImportError as e:\n"
        "    print(e)\n"
    )
    src = str(Path(chainrule.interop.__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": src}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path
    )
    assert out.returncode == 0, out.stderr
    assert "chainrule.interop needs PyTorch: pip install torch" in out.stdout


def test_interop_doctest(torch: Any) -> None:
    assert doctest.testmod(chainrule.interop).failed == 0


# ----------------------------------------------------------------------------
# checkpoints: chainrule -> safetensors -> torch twin -> chainrule
# ----------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_checkpoint_loads_into_the_torch_twin_strictly_and_back(
    torch: Any, tmp_path: Any, dtype: str
) -> None:
    from safetensors.torch import load_file

    from chainrule.tensor import checkpoint

    to_torch, from_torch = _interop()
    model = _gpt(dtype, seed=3)
    path = tmp_path / "gpt.safetensors"
    checkpoint.save(model, path, metadata={"step": 7})
    twin = to_torch(_gpt(dtype, seed=4))  # other weights
    result = twin.load_state_dict(load_file(path), strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    for name, p in twin.named_parameters():
        np.testing.assert_array_equal(p.detach().numpy(), model.state_dict()[name])
    # a torch step, then back into a chainrule checkpoint
    idx = torch.zeros((1, 4), dtype=torch.int64)
    _, loss = twin(idx, idx)
    loss.backward()
    torch.optim.SGD(twin.parameters(), lr=0.1).step()
    checkpoint.save(from_torch(twin), tmp_path / "back.safetensors", metadata={"step": 8})
    back = checkpoint.load_model(tmp_path / "back.safetensors")
    assert checkpoint.read(tmp_path / "back.safetensors")["metadata"] == {"step": 8}
    for name, p in twin.named_parameters():
        np.testing.assert_array_equal(back.state_dict()[name], p.detach().numpy())
    assert not np.array_equal(back.lm_head.weight.data, model.lm_head.weight.data)
