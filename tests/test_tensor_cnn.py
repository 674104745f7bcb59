"""The image layers (Conv2d, BatchNorm2d, MaxPool2d, ReLU, Flatten,
Sequential): PyTorch's names, initialisation bounds, buffers in the state
dict and checkpoints, train and eval modes, and their torch twins: the CNN
of ``chainrule digits`` gives PyTorch's logits and gradients to 1e-12 in
float64, trains step for step alike, and comes back from torch unchanged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from chainrule.interop import from_torch, to_torch
from chainrule.optim import Adam
from chainrule.tensor import checkpoint, cross_entropy
from chainrule.tensor.cnn import image_classifier
from chainrule.tensor.nn import BatchNorm2d, Conv2d, Flatten, Linear, MaxPool2d, ReLU, Sequential
from tensor_oracle import assert_close


def _cnn(dtype: str = "float64", seed: int = 0) -> Sequential:
    return image_classifier(1, (8, 8), 10, dtype=dtype, rng=np.random.default_rng(seed))


def _batch(seed: int = 1, n: int = 16) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.random((n, 1, 8, 8)), rng.integers(0, 10, n)


def test_the_cnn_has_pytorchs_names_and_buffers() -> None:
    model = _cnn()
    names = [n for n, _ in model.named_parameters()]
    assert names == ["0.weight", "1.weight", "1.bias", "4.weight", "5.weight", "5.bias"] + [
        "9.weight",
        "9.bias",
    ]
    buffers = dict(model.named_buffers())
    assert list(buffers) == [
        f"{i}.{b}" for i in (1, 5) for b in ("running_mean", "running_var", "num_batches_tracked")
    ]
    assert model.num_parameters() == 16 * 9 + 32 + 32 * 16 * 9 + 64 + 128 * 10 + 10
    assert set(model.state_dict()) == set(names) | set(buffers)
    bound = 1 / np.sqrt(16 * 9)  # fan_in of the second convolution
    w = model[4].weight.data
    assert w.shape == (32, 16, 3, 3) and 0.9 * bound < np.abs(w).max() <= bound


def test_to_torch_gives_pytorchs_logits_and_gradients_to_1e12(torch: Any) -> None:
    model = _cnn()
    x, y = _batch()
    twin = to_torch(model)
    assert isinstance(twin, torch.nn.Sequential) and twin.training
    for mode in ("train", "eval"):
        getattr(model, mode)()
        getattr(twin, mode)()
        logits = model(x)
        tlogits = twin(torch.tensor(x))
        assert_close(logits.data, tlogits.detach().numpy(), f"{mode} logits", 1e-12, 1e-13)
        if mode == "train":
            loss = cross_entropy(logits, y)
            loss.backward()
            torch.nn.functional.cross_entropy(tlogits, torch.tensor(y)).backward()
            for (name, p), tp in zip(model.named_parameters(), twin.parameters()):
                assert_close(p.grad, tp.grad.numpy(), f"gradient of {name}", 1e-10, 1e-12)
            for name, buf in model.named_buffers():
                assert_close(buf, twin.get_buffer(name).numpy(), name, 1e-12, 1e-14)


def test_training_with_adam_stays_with_pytorch(torch: Any) -> None:
    model = _cnn()
    twin = to_torch(model)
    ours = Adam(model.parameters(), lr=0.01)
    theirs = torch.optim.Adam(twin.parameters(), lr=0.01)
    for step in range(5):
        x, y = _batch(step)
        loss = cross_entropy(model(x), y)
        ours.zero_grad()
        loss.backward()
        ours.step()
        tloss = torch.nn.functional.cross_entropy(twin(torch.tensor(x)), torch.tensor(y))
        theirs.zero_grad()
        tloss.backward()
        theirs.step()
        assert abs(loss.item() - tloss.item()) <= 1e-10 * abs(tloss.item())
    for name, value in model.state_dict().items():
        assert_close(value, twin.state_dict()[name].numpy(), name, 1e-9, 1e-12)


def test_from_torch_brings_the_model_back(torch: Any) -> None:
    model = _cnn("float32")
    model(_batch()[0].astype(np.float32))  # move the running statistics
    twin = to_torch(model.eval())
    assert not twin.training and twin[0].weight.dtype == torch.float32
    back = from_torch(twin)
    assert back.config() == model.config() and not back.training
    for name, value in model.state_dict().items():
        assert np.array_equal(back.state_dict()[name], value), name


def test_from_torch_refuses_what_chainrule_lacks(torch: Any) -> None:
    with pytest.raises(TypeError, match="padding_mode='reflect' is not supported"):
        from_torch(torch.nn.Conv2d(1, 2, 3, padding_mode="reflect"))
    with pytest.raises(TypeError, match="ceil_mode or return_indices"):
        from_torch(torch.nn.MaxPool2d(2, ceil_mode=True))


def test_batch_norm_modes_and_running_statistics(torch: Any) -> None:
    bn, tbn = BatchNorm2d(3, momentum=0.2), torch.nn.BatchNorm2d(3, momentum=0.2).double()
    rng = np.random.default_rng(2)
    for _ in range(3):
        x = rng.standard_normal((4, 3, 2, 5)) * 2 + 1
        assert_close(bn(x).data, tbn(torch.tensor(x)).detach().numpy(), "train", 1e-12, 1e-13)
    assert int(bn.num_batches_tracked) == 3 == int(tbn.num_batches_tracked)
    assert_close(bn.running_var, tbn.running_var.numpy(), "running_var", 1e-12, 1e-14)
    bn.eval()
    tbn.eval()
    x = rng.standard_normal((2, 3, 2, 2))
    assert_close(bn(x).data, tbn(torch.tensor(x)).detach().numpy(), "eval", 1e-12, 1e-13)
    assert int(bn.num_batches_tracked) == 3  # evaluation leaves the statistics alone
    with pytest.raises(ValueError, match=r"BatchNorm2d: expected input \(N, C, H, W\)"):
        bn(np.ones((2, 3)))


def test_state_dict_round_trip_and_checkpoint_keep_the_buffers(tmp_path: Path) -> None:
    model = _cnn()
    model(_batch()[0])
    fresh = _cnn(seed=9)
    fresh.load_state_dict(model.state_dict())
    for name, value in model.state_dict().items():
        assert np.array_equal(fresh.state_dict()[name], value), name
    path = tmp_path / "cnn.safetensors"
    checkpoint.save(model, path)
    saved = checkpoint.read(path)
    assert saved["architecture"] == model.config()
    assert saved["parameters"]["1.num_batches_tracked"].shape == ()
    other = _cnn(seed=5)
    checkpoint.load(path, other)
    x = _batch(3)[0]
    model.eval()
    other.eval()
    assert np.array_equal(other(x).data, model(x).data)


def test_load_state_dict_checks_buffers_before_changing_anything() -> None:
    model = _cnn()
    state = model.state_dict()
    before = {k: np.array(v) for k, v in state.items()}
    bad = dict(state, **{"1.running_mean": np.zeros(3)})
    with pytest.raises(ValueError, match=r"'1\.running_mean': expected an array of shape"):
        model.load_state_dict(bad)
    missing = {k: v for k, v in state.items() if k != "5.running_var"}
    with pytest.raises(ValueError, match=r"missing '5\.running_var'"):
        model.load_state_dict(missing)
    for name, value in model.state_dict().items():
        assert np.array_equal(value, before[name])


def test_layer_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="Conv2d: in_channels must be a positive multiple"):
        Conv2d(3, 4, 3, groups=2)
    with pytest.raises(ValueError, match="Conv2d: kernel_size must be an int >= 1"):
        Conv2d(1, 4, 0)
    with pytest.raises(ValueError, match="MaxPool2d: stride must be an int >= 1"):
        MaxPool2d(2, stride=0)
    with pytest.raises(TypeError, match="Sequential: item 1 is a int, not a module"):
        Sequential(ReLU(), 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="smaller than 4 x 4"):
        image_classifier(1, (3, 8), 10)


def test_sequential_of_any_layers_round_trips(torch: Any) -> None:
    rng = np.random.default_rng(4)
    model = Sequential(
        Conv2d(2, 4, (3, 2), stride=(2, 1), padding=1, groups=2, rng=rng),
        ReLU(),
        Flatten(),
        Linear(4 * 3 * 6, 3, rng=rng),
    )
    x = rng.standard_normal((2, 2, 5, 5))
    twin = to_torch(model)
    assert_close(model(x).data, twin(torch.tensor(x)).detach().numpy(), "logits", 1e-12, 1e-13)
    assert from_torch(twin).config() == model.config()


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_the_cnn_step_bench_pair_computes_the_same_step(torch: Any, dtype: str) -> None:
    """``chainrule bench``'s cnn-step: the same weights, batch and Adam on
    both sides, so the same losses step after step."""
    from chainrule.bench import TINY
    from chainrule.bench.cnn import tensor_step, torch_step

    ours, theirs = tensor_step(TINY, dtype), torch_step(TINY, dtype)
    rtol = 1e-10 if dtype == "float64" else 1e-5
    for _ in range(3):
        a, b = ours(), theirs()
        assert abs(a - b) <= rtol * abs(b), (a, b)


def test_the_cnn_prints_as_pytorch_prints_it() -> None:
    lines = repr(_cnn()).splitlines()
    assert (
        lines[1]
        == "  (0): Conv2d(1, 16, kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), bias=False)"
    )
    assert lines[2] == (
        "  (1): BatchNorm2d(16, eps=1e-05, momentum=0.1, affine=True, track_running_stats=True)"
    )
    assert lines[4] == (
        "  (3): MaxPool2d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)"
    )
    assert lines[9] == "  (8): Flatten(start_dim=1, end_dim=-1)"
